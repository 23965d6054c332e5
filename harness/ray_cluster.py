"""A two-node Ray cluster on this machine for tests/nlp/test_nlp_cluster.py: each node a
`ray start` in a Unix session of its own (so it can be killed whole, like a machine that dies,
and stopped by PID), the head's dashboard API, Serve's application state and the replicas'
access logs. Nothing here runs `ray stop`: it would stop every Ray on the machine.

Ray quirks met here (Ray 2.60):
- In cluster mode `ray start --node-ip-address 127.0.0.1` registers the machine's address
  instead (Ray turns loopback into a "remotely reachable" IP), so both nodes report the same IP:
  nodes are told apart by node id, never by IP. Ray's gRPC ports listen on every interface
  whatever the node address; Serve's proxies and the dashboard bind 127.0.0.1 as configured.
- Two nodes on one machine need a --temp-dir each (accepted per node), and ports of their own
  where Ray has fixed defaults: the dashboard agent's HTTP port (52365) and, on the head, the
  Ray Client server (10001). Worker ports 0 lets the OS choose.
- With proxy_location EveryNode every proxy binds http_options.port. Serve sets SO_REUSEPORT,
  so on one machine both proxies would bind it and the kernel would split connections between
  them at random; RAY_SERVE_WORKER_PROXY_HTTP_PORT (read by the proxy on a worker node) gives
  the worker's proxy a port of its own, so a client can name each node's proxy, as it names
  each node's address in a real cluster.
- A proxy routes to a replica on its own node first (locality routing), so traffic entering at
  one node stays there while that replica has room.
- With RAY_AUTH_MODE=token the dashboard's REST API (state API, Serve API) wants
  `Authorization: Bearer <token>`; RAY_AUTH_TOKEN in the nodes' environment sets the cluster's
  token without touching ~/.ray/auth_token.
- Serve builds the app (imports nlp.app) in a task on the cluster, so the nodes, not only the
  deploying client, need the repository on PYTHONPATH.
- Serve's access log lines name the replica and carry the request's x-request-id: which node
  served a request is read from the replica logs in each node's temp dir (Serve adds no
  response header saying so).
- The GCS declares a killed node dead after 5 failed health checks 3 s apart (~13-15 s here);
  Serve's controller often notices the replica gone sooner, through its own health check.
  Until the GCS has declared the node dead, Ray may still schedule onto it: a Serve deployment
  actor recreated there failed, which counted against max_constructor_retry_count, and past it
  Serve started no replica of the deployment until it was deployed again (hence the head-only
  stats board in nlp/app.py, checked below).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nlp.process_session import ProcessInfo, session_processes, terminate_session

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
APP = "edgescore-nlp"
DEPLOYMENT = "TextScorer"

# A replica's access log line: `INFO <date> <time> edgescore-nlp_TextScorer <replica> <request id>
# -- POST / 200 18.6ms`.
ACCESS_LINE = re.compile(rf" {APP}_{DEPLOYMENT} (?P<replica>\S+) (?P<request>\S+) -- POST \S+ (?P<status>\d{{3}}) ")

# ---------------------------------------------------------------------------------------------
# a Ray node in a session of its own


class RayNode:
    """One `ray start` node, its processes found through its Unix session."""

    def __init__(self, name: str, temp_dir: Path, env: dict[str, str]):
        self.name, self.temp_dir, self.env = name, temp_dir, env
        self.output = temp_dir.parent / f"{name}-ray-start.out"
        self.session: int | None = None

    def start(self, args: list[str], timeout_s: float = 180) -> None:
        with open(self.output, "wb") as out:
            proc = subprocess.Popen(
                [str(BIN / "ray"), "start", *args, "--temp-dir", str(self.temp_dir)],
                cwd=REPO, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.session = proc.pid  # known before the wait: a start that hangs is still cleaned up
        try:
            code = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"ray start ({self.name}) did not return in {timeout_s:.0f} s:\n{self.tail()}") from None
        assert code == 0, f"ray start ({self.name}) exited {code}:\n{self.tail()}"

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.output.read_text(errors="replace").splitlines()[-lines:])

    def processes(self) -> list[ProcessInfo]:
        return session_processes(self.session) if self.session is not None else []

    def kill(self) -> list[ProcessInfo]:
        """SIGKILL every process of the node at once: a machine that dies, not a shutdown.
        Returns once every thread of them has exited, i.e. their sockets are closed."""
        killed: dict[int, ProcessInfo] = {}
        deadline = time.monotonic() + 10
        while (alive := self.processes()) and time.monotonic() < deadline:
            for process in alive:  # again for any forked while the first ones died
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed.update((p.pid, p) for p in alive)
            time.sleep(0.02)
        # A killed process shows as a zombie ("Z", which process_session counts as gone) as soon
        # as its main thread has exited, while its other threads may still hold its files: a
        # proxy's listening socket then accepts connections for a few more milliseconds.
        while not all(_threads_exited(pid) for pid in killed) and time.monotonic() < deadline:
            time.sleep(0.005)
        left = [p for p in killed.values() if not _threads_exited(p.pid)] + self.processes()
        assert not left, f"{self.name}: processes survived SIGKILL: {left}"
        return list(killed.values())

    def stop(self) -> None:
        if self.session is not None:
            terminate_session(self.session, grace_s=10.0)
            left = self.processes()
            assert not left, f"{self.name}: left running: {[(p.pid, p.command[:60]) for p in left]}"


def _threads_exited(pid: int) -> bool:
    # A process reaped while we look reads as ENOENT or, mid-exit, ESRCH (ProcessLookupError).
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        return True
    for task in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if stat[stat.rindex(")") + 2] not in "ZX":
            return False
    return True


class Dashboard:
    """The head's REST API: the state API (/api/v0) and Serve's (/api/serve)."""

    def __init__(self, port: int, token: str):
        self.base, self.token = f"http://127.0.0.1:{port}", token

    def get(self, path: str) -> Any:
        request = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def serve_details(self) -> dict:
        return self.get("/api/serve/applications/")

    def nodes(self) -> list[dict]:
        return self.get("/api/v0/nodes?limit=100")["data"]["result"]["result"]

    def actors(self) -> list[dict]:
        return self.get("/api/v0/actors?limit=1000")["data"]["result"]["result"]


@dataclass
class Cluster:
    head: RayNode
    worker: RayNode
    dashboard: Dashboard
    head_node_id: str
    worker_node_id: str
    # Serve's HTTP proxy of each node (the worker's on a port of its own, see the docstring).
    head_port: int
    worker_port: int
    # The replicas' own listener (nlp/ingress.py), one port for both nodes' replicas.
    ingress_port: int
    timings: dict[str, float] = field(default_factory=dict)

    def node_of_temp_dir(self) -> dict[Path, str]:
        return {self.head.temp_dir: self.head_node_id, self.worker.temp_dir: self.worker_node_id}

    def served(self) -> dict[str, tuple[str, str, int]]:
        """request id -> (replica id, node id, status), from every replica's access log."""
        found: dict[str, tuple[str, str, int]] = {}
        for temp_dir, node_id in self.node_of_temp_dir().items():
            for log in temp_dir.glob(f"session_latest/logs/serve/replica_{APP}_{DEPLOYMENT}_*.log"):
                for line in log.read_text(errors="replace").splitlines():
                    if m := ACCESS_LINE.search(line):
                        assert m["request"] not in found, f"request {m['request']} served twice"
                        found[m["request"]] = (m["replica"], node_id, int(m["status"]))
        return found


def wait_for(what: str, condition, timeout_s: float, interval_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = condition()
        except (OSError, KeyError, ValueError) as err:  # the dashboard restarting a module, ...
            last = err
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last: {last!r})")


def app_summary(dashboard: Dashboard) -> str:
    app = dashboard.serve_details()["applications"].get(APP) or {}
    deployment = app.get("deployments", {}).get(DEPLOYMENT, {})
    return (f"app {app.get('status')} {app.get('message', '')[:300]!r}; deployment {deployment.get('status')} "
            f"{deployment.get('message', '')[:500]!r}; replicas "
            f"{[(r['replica_id'], r['state'], r.get('node_id', '')[:8]) for r in deployment.get('replicas', [])]}")


def running_replicas(dashboard: Dashboard, expect: int) -> list[dict] | None:
    """The RUNNING replicas once the app is RUNNING with `expect` of them, else None."""
    details = dashboard.serve_details()
    app = details["applications"].get(APP)
    if app is None:
        return None
    if app["status"] == "DEPLOY_FAILED":
        raise AssertionError(f"the deploy failed: {app['message']}\n"
                             f"{json.dumps(app.get('deployments', {}), indent=1)[:4000]}")
    replicas = [r for r in app["deployments"].get(DEPLOYMENT, {}).get("replicas", []) if r["state"] == "RUNNING"]
    if app["status"] == "RUNNING" and len(replicas) == expect:
        return replicas
    return None



def keep_logs(keep: Path, *nodes: RayNode) -> None:
    """What explains a failure, out of the temp dirs that teardown removes."""
    for node in nodes:
        if node.output.exists():
            shutil.copy(node.output, keep)
        logs = node.temp_dir / "session_latest" / "logs"
        if (logs / "serve").is_dir():
            shutil.copytree(logs / "serve", keep / node.name / "serve", dirs_exist_ok=True)
        for name in ("gcs_server.out", "raylet.out", "dashboard.log"):
            if (logs / name).exists():
                shutil.copy(logs / name, keep / node.name)
    print(f"Ray logs kept in {keep}")


def get_json(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return json.loads(response.read())


def score(port: int, request_id: str, text: str, timeout_s: float = 20.0) -> tuple[int | None, str]:
    """POST /score through one proxy: (status, "") or (None, what went wrong). `refused` means
    nothing reached the service (no proxy listening): always safe to send elsewhere."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("POST", "/score", body=json.dumps({"text": text}),
                     headers={"content-type": "application/json", "x-request-id": request_id})
        response = conn.getresponse()
        body = response.read()
        if response.status == 200:
            verdict = json.loads(body)
            assert {"score", "label", "labels", "model"} <= set(verdict), verdict
        return response.status, "" if response.status == 200 else body.decode(errors="replace")[:200]
    except ConnectionRefusedError:
        return None, "refused"
    except (OSError, http.client.HTTPException) as err:
        return None, type(err).__name__
    finally:
        conn.close()
