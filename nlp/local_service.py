"""The supervisor process of the local service: a Ray head of its own, Serve, the app.

Started by `python -m nlp.run start` in a new Unix session; it records its state in
`<state-dir>/nlp-service.json` and runs until SIGTERM/SIGINT, then shuts Serve and the Ray
head down. Everything Ray starts stays in the supervisor's session, which is how
`nlp.run stop` checks that nothing is left behind.

Like Roblox's inference nodes, the head is local to the service: no shared, long-lived
cluster whose other tenants could starve it; Ray still schedules the replicas and batches.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from nlp.app_spec import AppSpec

STATE_FILE = "nlp-service.json"
log = logging.getLogger("nlp.local_service")

# The head is this service's alone (a dedicated cluster, as in the Roblox write-up), so
# Ray's settings for shared, long-lived clusters can go; each was kept only if it measured
# better here (nlp/README.md, "Ray settings"). setdefault: the caller's environment wins.
DEDICATED_HEAD_ENV = {
    # No usage-stats reporter process polling the cluster.
    "RAY_USAGE_STATS_ENABLED": "0",
    # Serve's controller reconciles every 0.1 s by default, polling the GCS each time: a
    # third of the idle head's CPU here. Once a second is enough for a fixed set of replicas
    # (health checks keep their own period); the head's idle CPU went from ~10 % of a core
    # to ~7 %.
    "RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "1",
}


def ray_temp_dir(state_dir: Path) -> Path:
    """A short per-state-dir temp dir: Ray's socket paths must stay under 107 bytes."""
    digest = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]
    return Path("/tmp") / f"edgescore-ray-{digest}"


def write_state(state_dir: Path, **state: Any) -> None:
    path = state_dir / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(path)  # readers never see a half-written file


def read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir / STATE_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def wait_for_http(url: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.loads(response.read())
        except Exception as err:  # connection refused / 503 while Serve starts
            last_error = err
            time.sleep(0.25)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f}s: {last_error}")


def deployment_errors(app_name: str) -> str:
    """Why a Serve app failed: the last line of each deployment's message (its error)."""
    from ray import serve

    try:
        application = serve.status().applications.get(app_name)
    except Exception as err:  # the controller may be gone already
        return f"(no details: {err})"
    if application is None:
        return ""
    details = []
    for name, deployment in application.deployments.items():
        if deployment.message:
            # The message ends with the constructor's exception; the traceback before it
            # is in the replica's log under the Ray temp dir.
            lines = [line for line in deployment.message.splitlines() if line.strip()]
            details.append(f"{name}: {lines[-1]}")
    return "\n".join(details)


def run(spec: AppSpec, state_dir: Path, num_cpus: int, ready_timeout_s: float) -> int:
    # Ray lowers worker priority by default (niceness 15); inference replicas must not lose
    # the CPU to every build on the machine. Whatever the caller's environment says.
    os.environ["RAY_worker_niceness"] = "0"
    for name, value in DEDICATED_HEAD_ENV.items():
        os.environ.setdefault(name, value)
    import ray
    from ray import serve

    from nlp.app import build_app

    temp_dir = ray_temp_dir(state_dir)
    base_state = {
        "mode": "local",
        "supervisor_pid": os.getpid(),
        "session": os.getsid(0),
        "host": spec.host,
        "port": spec.port,
        "serve_port": spec.serve_port,
        "app_name": spec.name,
        "ray_temp_dir": str(temp_dir),
        "log": str(state_dir / "nlp-service.log"),
    }
    write_state(state_dir, status="starting", **base_state)

    stop = threading.Event()
    try:
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            _temp_dir=str(temp_dir),
            # Requests and answers are small; the default (30% of RAM) is not needed.
            object_store_memory=128 * 1024 * 1024,
            log_to_driver=False,
            namespace="edgescore-nlp",
        )
        # After ray.init: its core worker installs a SIGTERM handler that exits at once;
        # this one lets the supervisor shut Serve and the head down in order.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        serve.start(http_options={"host": spec.host, "port": spec.serve_port})
        serve.run(build_app(spec.args), name=spec.name, route_prefix=spec.route_prefix)
        deadline = time.monotonic() + ready_timeout_s
        health = wait_for_http(f"http://{spec.host}:{spec.port}/healthz", ready_timeout_s)
        wait_for_http(
            f"http://{spec.host}:{spec.serve_port}{spec.route_prefix.rstrip('/')}/healthz",
            max(1.0, deadline - time.monotonic()),
        )
        write_state(
            state_dir,
            status="ready",
            model=health.get("model"),
            gcs_address=ray.get_runtime_context().gcs_address,
            # Ray 2.60 heads require a token (~/.ray/auth_token); clients connecting with
            # RAY_ADDRESS need RAY_AUTH_MODE=token.
            ray_auth_mode="token",
            **base_state,
        )
        log.info("ready on http://%s:%d, Serve's proxy on port %d (%s)", spec.host, spec.port,
                 spec.serve_port, health.get("model"))
        while not stop.wait(1.0):
            pass
        log.info("stopping")
        return 0
    except Exception as err:
        details = deployment_errors(spec.name) if ray.is_initialized() else ""
        log.exception("the NLP service failed to start\n%s", details)
        error = f"{type(err).__name__}: {err}" + (f"\n{details}" if details else "")
        write_state(state_dir, status="failed", error=error, **base_state)
        return 1
    finally:
        try:
            serve.shutdown()
        except Exception:
            log.exception("serve.shutdown failed")
        ray.shutdown()
        state = read_state(state_dir) or {}
        if state.get("status") != "failed":
            write_state(state_dir, status="stopped", **base_state)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="run the NLP service on a local Ray head")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--spec", required=True, help="the AppSpec as JSON (from nlp.run)")
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--ready-timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr
    )
    spec = AppSpec(**json.loads(args.spec))
    return run(spec, args.state_dir, args.num_cpus, args.ready_timeout)


if __name__ == "__main__":
    sys.exit(main())
