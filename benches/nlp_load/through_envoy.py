"""Added latency of the text path through Envoy, at low load (one request at a time).

    .venv/bin/python -m benches.nlp_load.through_envoy [--seconds 8] [--rounds 3] [--overload-seconds 10] [--json F]

Starts the NLP service (nlp.run, its own Ray head, a free loopback port, the shipped settings
but a 1 ms cache TTL, so that the repeated messages reach the model every time)
and one Envoy with envoy.yaml's configuration (the example models and the shipped `text`
section, harness/render_envoy.py), its `nlp` cluster pointed at the service and every route
answered by Envoy itself (`direct_response`, so no backend shares the CPU or the measurement).
Then, one request at a time on a kept-alive connection, for the chat messages of
nlp/data/messages.jsonl in a fixed order:

  direct          POST /score {"text": T} straight to the service
  envoy + text    POST {"message": T} (application/json, browser headers) through Envoy: the
                  filter scores the headers, holds the request, calls the service, applies the
                  verdict (200, or 403 for a blocked text)
  envoy, no text  the same request as application/octet-stream: the filter scores the headers
                  and lets it through without a call (the Envoy hop alone)

The three are measured in interleaved rounds so that a change of machine load hits all alike.
Added latency = envoy + text - direct. Any fail-open (edgescore_text_errors > 0) is reported:
it would mean a measured request skipped the service.

Then the overload phase (overload.py): the service's capacity measured directly, and Envoy
driven open-loop at twice that rate: how many texts got a verdict, how many failed open on
the service's fast 503s, and how long the slowest request took against the filter's timeout.
Only 127.0.0.1 is contacted; every process is stopped by PID (the service through `nlp.run
stop`).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
from benches.nlp_load import overload  # noqa: E402
from benches.nlp_load.service_under_test import config_file  # noqa: E402
from demo import traffic  # noqa: E402
from harness import envoyctl, render_envoy  # noqa: E402
from harness.loopback import free_port  # noqa: E402

MESSAGES = REPO / "nlp" / "data" / "messages.jsonl"


def nlp_run(state_dir: str, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "nlp.run", *args, "--state-dir", state_dir], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=400, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"nlp.run {' '.join(args)} failed:\n{done.stdout}{done.stderr}")


def envoy_config(nlp_port: int) -> dict:
    cfg = render_envoy.load_config()
    cfg["admin"]["address"]["socket_address"]["port_value"] = 0
    cfg["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] = 0
    hcm = render_envoy.hcm(cfg)
    hcm.pop("access_log", None)
    hcm["route_config"]["virtual_hosts"][0]["routes"] = [
        {"match": {"prefix": "/"}, "direct_response": {"status": 200, "body": {"inline_string": "ok\n"}}}]
    render_envoy.wasm_filter(cfg)["vm_config"]["code"]["local"]["filename"] = str(render_envoy.WASM)
    render_envoy.set_cluster_address(cfg, "nlp", "127.0.0.1", nlp_port)
    return cfg


class Client:
    """One kept-alive HTTP/1.1 connection; a request is (method, path, headers, body)."""

    def __init__(self, port: int):
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def send(self, path: str, headers: list[tuple[str, str]], body: bytes) -> tuple[int, float]:
        t0 = time.perf_counter()
        self.conn.putrequest("POST", path, skip_host=True, skip_accept_encoding=True)
        for k, v in headers:
            self.conn.putheader(k, v)
        self.conn.putheader("content-length", str(len(body)))
        self.conn.endheaders(body)
        r = self.conn.getresponse()
        r.read()
        return r.status, time.perf_counter() - t0


def chat_headers(content_type: str) -> list[tuple[str, str]]:
    req = traffic.chat("bench", "bench", b"", content_type)
    return [(k, v) for k, v in req.header_list("127.0.0.1") if k not in ("content-length", "connection")]


def run_variant(name: str, client: Client, texts: list[str], start: int, seconds: float) -> tuple[list[float], int]:
    """Sends texts[start:] (cycling) for `seconds`; returns latencies and the next index."""
    json_headers, binary_headers = chat_headers("application/json"), chat_headers("application/octet-stream")
    out: list[float] = []
    stop_at = time.perf_counter() + seconds
    i = start
    while time.perf_counter() < stop_at:
        text = texts[i % len(texts)]
        i += 1
        if name == "direct":
            status, dt = client.send("/score", [("host", "nlp"), ("content-type", "application/json")],
                                     json.dumps({"text": text}).encode())
            ok = status == 200
        else:
            body = json.dumps({"message": text, "channel": "general"}).encode()
            headers = json_headers if name == "envoy + text" else binary_headers
            status, dt = client.send("/api/chat/messages", headers, body)
            ok = status in (200, 403)
        if not ok:
            raise SystemExit(f"{name}: HTTP {status}")
        out.append(dt)
    return out, i


def row(name: str, lat: list[float]) -> dict:
    lat = sorted(lat)
    return {"variant": name, "requests": len(lat), "p50_ms": 1000 * statistics.median(lat),
            "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], "mean_ms": 1000 * statistics.fmean(lat)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="per variant and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds per variant before round 0")
    ap.add_argument("--overload-seconds", type=float, default=10.0, help="0: skip the overload phase")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    missing = render_envoy.missing_artifacts()
    if missing:
        raise SystemExit("run `make build` first: missing " + ", ".join(map(str, missing)))

    texts = [json.loads(line)["text"] for line in MESSAGES.read_text().splitlines() if line.strip()]
    variants = ("direct", "envoy + text", "envoy, no text")
    lat: dict[str, list[float]] = {v: [] for v in variants}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="nlp-envoy-bench-") as work:
        port = free_port()
        state_dir = str(Path(work) / "nlp")
        # The messages repeat: a 1 ms cache TTL keeps each variant on the model path.
        config = config_file(Path(work), "no-repeat", cache={"ttl_s": 0.001})
        nlp_run(state_dir, "start", "--port", str(port), "--config", str(config))
        envoy = envoyctl.Envoy(envoy_config(port), Path(work) / "envoy", name="bench", log_level="warning")
        try:
            envoy.start()
            listener = envoy.listener_port("edge")
            clients = {"direct": Client(port), "envoy + text": Client(listener), "envoy, no text": Client(listener)}
            index = 0
            for v in variants:  # warm-up: connections, the model, V8's JIT
                _, index = run_variant(v, clients[v], texts, index, args.warmup)
            for r in range(args.rounds):
                order = variants if r % 2 == 0 else tuple(reversed(variants))
                for v in order:
                    # The same texts for every variant of a round.
                    measured, _ = run_variant(v, clients[v], texts, r * 10_000, args.seconds)
                    lat[v].extend(measured)
                    print(f"round {r} {v}: {len(measured)} requests, p50 {1000 * statistics.median(measured):.1f} ms",
                          file=sys.stderr)
            stats = envoy.stats(r"wasmcustom\.edgescore\.text\.")
            overloaded = None
            if args.overload_seconds > 0:
                overloaded = overload.run(envoy, listener, port, texts, json_headers=chat_headers("application/json"),
                                          seconds=args.overload_seconds, timeout_ms=render_envoy.text_config()["timeout_ms"])
        finally:
            envoy.stop()
            nlp_run(state_dir, "stop")
    load_after = os.getloadavg()

    rows = [row(v, lat[v]) for v in variants]
    print(f"\n{platform.node()}: {os.cpu_count()} CPUs, load average {load_before[0]:.1f} before / "
          f"{load_after[0]:.1f} after; {args.rounds} interleaved rounds x {args.seconds:g} s per variant, "
          f"concurrency 1, kept-alive connections\n")
    print("| path | requests | p50 (ms) | p99 (ms) | mean (ms) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['requests']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['mean_ms']:.1f} |")
    d, e, n = rows
    print(f"\nadded by going through Envoy and the filter: p50 {e['p50_ms'] - d['p50_ms']:+.1f} ms, "
          f"p99 {e['p99_ms'] - d['p99_ms']:+.1f} ms (the Envoy hop alone, no text call: p50 {n['p50_ms']:.1f} ms)")
    calls = stats.get("wasmcustom.edgescore.text.calls", 0)
    errors = stats.get("wasmcustom.edgescore.text.errors", 0)
    print(f"filter: {calls} NLP calls, {errors} errors/timeouts (fail-open), "
          f"{stats.get('wasmcustom.edgescore.text.decision.block', 0)} text blocks")
    if overloaded is not None:
        print("\n" + overload.describe(overloaded))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "text_calls": calls, "text_errors": errors,
                                         "overload": overloaded}, indent=2))
    hung = overloaded is not None and not overloaded["within_timeout"]
    return 1 if errors or hung else 0


if __name__ == "__main__":
    sys.exit(main())
