"""Start, stop and inspect the NLP service.

    python -m nlp.run start  [--port 8000] [--serve-port P] [--replicas N] [--config F] ...
    python -m nlp.run status
    python -m nlp.run stop

Without RAY_ADDRESS, `start` launches a supervisor (nlp.local_service) that runs a Ray head
of its own (loopback HTTP, niceness 0, a private temp dir) and deploys the app; `stop` ends
that supervisor and then checks, by Unix session, that every process it started is gone.
`--port` (default 8000) is the service's port: the replicas' own listener, which answers
the whole API; Serve's HTTP proxy goes on `--serve-port` (default: a free port).
With RAY_ADDRESS set, `start` deploys the app onto that cluster (ports as in the YAML unless
given) and `stop` deletes the app; the cluster itself is left alone. Settings come from
nlp/serve_config.yaml; the flags and EDGESCORE_NLP_PORT / EDGESCORE_NLP_STATE_DIR override it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from nlp.app_spec import DEFAULT_CONFIG_PATH, AppSpec, load_app_spec
from nlp.local_service import STATE_FILE, deployment_errors, read_state, ray_temp_dir, write_state
from nlp.process_session import read_process, session_processes, terminate_session

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PORT = 8000  # envoy.yaml's `nlp` cluster


def default_state_dir() -> Path:
    return Path(os.environ.get("EDGESCORE_NLP_STATE_DIR", REPO_ROOT / ".ray"))


def start(spec: AppSpec, state_dir: Path, num_cpus: int, timeout_s: float) -> int:
    state_dir.mkdir(parents=True, exist_ok=True)
    if os.environ.get("RAY_ADDRESS"):
        return start_on_cluster(spec, state_dir, os.environ["RAY_ADDRESS"])
    state = read_state(state_dir)
    if state and state.get("mode") == "local" and _supervisor_alive(state):
        print(f"already running: pid {state['supervisor_pid']}, http://{state['host']}:{state['port']}")
        return 0
    log_path = state_dir / "nlp-service.log"
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    with open(log_path, "ab") as log:
        supervisor = subprocess.Popen(
            [
                sys.executable, "-m", "nlp.local_service",
                "--state-dir", str(state_dir),
                "--spec", json.dumps(dataclasses.asdict(spec)),
                "--num-cpus", str(num_cpus),
                "--ready-timeout", str(timeout_s),
            ],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its session holds everything Ray starts; see stop()
        )
    deadline = time.monotonic() + timeout_s + 30
    while time.monotonic() < deadline:
        state = read_state(state_dir) or {}
        if state.get("status") == "ready":
            print(f"NLP service ready: http://{spec.host}:{spec.port} model {state.get('model')} "
                  f"(supervisor pid {supervisor.pid}, log {log_path})")
            return 0
        if state.get("status") == "failed" or supervisor.poll() is not None:
            break
        time.sleep(0.5)
    print(f"NLP service failed to start: {(read_state(state_dir) or {}).get('error', 'timed out')}",
          file=sys.stderr)
    print(_tail(log_path, 25), file=sys.stderr)
    stop(state_dir)
    return 1


def start_on_cluster(spec: AppSpec, state_dir: Path, address: str) -> int:
    import ray
    from ray import serve

    from nlp.app import build_app

    ray.init(address=address, namespace="edgescore-nlp", log_to_driver=False)
    try:
        serve.start(http_options={"host": spec.host, "port": spec.serve_port})
        serve.run(build_app(spec.args), name=spec.name, route_prefix=spec.route_prefix)
    except Exception as err:
        # A failed app stays listed as DEPLOY_FAILED; remove it rather than leave it.
        print(f"deploying {spec.name} on {address} failed: {type(err).__name__}: {err}\n"
              f"{deployment_errors(spec.name)}", file=sys.stderr)
        try:
            serve.delete(spec.name)
        except Exception:
            pass
        return 1
    finally:
        ray.shutdown()
    write_state(state_dir, mode="cluster", status="ready", ray_address=address, app_name=spec.name,
                host=spec.host, port=spec.port, serve_port=spec.serve_port)
    print(f"deployed {spec.name} on {address} (route {spec.route_prefix})")
    return 0


def stop(state_dir: Path, grace_s: float = 60.0) -> int:
    state = read_state(state_dir)
    if state is None:
        print("not running (no state file)")
        return 0
    if state.get("mode") == "cluster":
        import ray
        from ray import serve

        ray.init(address=state["ray_address"], namespace="edgescore-nlp", log_to_driver=False)
        try:
            serve.delete(state["app_name"])
        finally:
            ray.shutdown()
        (state_dir / STATE_FILE).unlink(missing_ok=True)
        print(f"deleted {state['app_name']} from {state['ray_address']}")
        return 0

    pid, session = state["supervisor_pid"], state["session"]
    if _supervisor_alive(state):
        os.kill(pid, signal.SIGTERM)  # it shuts Serve and its Ray head down in order
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _supervisor_alive(state):
            time.sleep(0.2)
    # Whatever is left in the supervisor's session is ours (and only ours): end it.
    killed = terminate_session(session, grace_s=5.0)
    remaining = [p for p in session_processes(session) if p.pid != os.getpid()]
    if remaining:
        print("could not stop: " + ", ".join(f"{p.pid} {p.command[:60]}" for p in remaining), file=sys.stderr)
        return 1
    (state_dir / STATE_FILE).unlink(missing_ok=True)
    shutil.rmtree(state.get("ray_temp_dir") or ray_temp_dir(state_dir), ignore_errors=True)
    note = f"; killed {len(killed)} stragglers" if killed else ""
    print(f"stopped (supervisor pid {pid}, session {session}: no process left{note})")
    return 0


def status(state_dir: Path) -> int:
    state = read_state(state_dir)
    if state is None:
        print("not running")
        return 3
    print(json.dumps(state, indent=2))
    if state.get("mode") == "local" and not _supervisor_alive(state):
        print("supervisor is not running")
        return 3
    base = f"http://{state['host']}:{state.get('port') or state.get('serve_port')}"
    try:
        for route in ("/healthz", "/stats"):
            with urllib.request.urlopen(base + route, timeout=5) as response:
                print(route, response.read().decode())
    except OSError as err:
        print(f"{base} does not answer: {err}")
        return 1
    return 0


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _supervisor_alive(state: dict) -> bool:
    process = read_process(int(state.get("supervisor_pid", 0)))
    return process is not None and process.session == state.get("session")


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop", "status"])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=None,
                        help=f"the service port, the replicas' own listener (local default {DEFAULT_PORT})")
    parser.add_argument("--serve-port", type=int, default=None, help="Serve's HTTP proxy (local default: a free port)")
    parser.add_argument("--replicas", type=int, default=None)
    parser.add_argument("--max-batch-size", type=int, default=None)
    parser.add_argument("--batch-wait-timeout-s", type=float, default=None)
    parser.add_argument("--max-ongoing-requests", type=int, default=None)
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray head")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for ready")
    args = parser.parse_args(argv)
    state_dir = (args.state_dir or default_state_dir()).resolve()

    if args.command == "stop":
        return stop(state_dir)
    if args.command == "status":
        return status(state_dir)
    spec = load_app_spec(args.config).with_serving(
        num_replicas=args.replicas,
        max_batch_size=args.max_batch_size,
        batch_wait_timeout_s=args.batch_wait_timeout_s,
        max_ongoing_requests=args.max_ongoing_requests,
    )
    host = args.host or spec.host
    port = args.port or (int(os.environ["EDGESCORE_NLP_PORT"]) if os.environ.get("EDGESCORE_NLP_PORT") else None)
    if os.environ.get("RAY_ADDRESS"):  # a shared cluster: the YAML's ports unless given
        spec = spec.listening(host, port or spec.port, args.serve_port or spec.serve_port)
    else:  # a head of our own: the service on --port, Serve's proxy out of the way
        spec = spec.listening(host, port or DEFAULT_PORT, args.serve_port or _free_port(host))
    return start(spec, state_dir, args.num_cpus, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
