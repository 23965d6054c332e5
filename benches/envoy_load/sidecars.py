"""The scoring sidecars of run.py's variants (d) and (e) and the ext_authz filter that calls them.

(d) `authz-rust`: benches/src/bin/authz_sidecar.rs, the edgescore core natively (same models,
    same plugin configuration as the filter), hyper on one tokio thread.
(e) `authz-ort`: ort_sidecar.py, the example models as ONNX in ONNX Runtime, features in Python,
    uvicorn (uvloop, httptools), one process.

Each listens on 127.0.0.1 on a port the kernel picks and says which on its first stdout line; it
runs pinned to Envoy's CPU (it spends the same host's budget), and is stopped by its PID.
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness import envoyctl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RUST_SIDECAR = ROOT / "target" / "release" / "authz-sidecar"
CLUSTER = "scorer"


def build_rust() -> Path:
    subprocess.run(["cargo", "build", "--quiet", "--release", "-p", "edgescore-benches", "--features", "authz-sidecar",
                    "--bin", "authz-sidecar"], cwd=ROOT, check=True)
    return RUST_SIDECAR


def ext_authz(port: int, upstream_headers: list[str]) -> tuple[dict, dict]:
    """The ext_authz HTTP filter and its cluster: every request header goes to the sidecar;
    the score headers it answers with go upstream."""
    from benches.envoy_load.ort_sidecar import CONTENT_LENGTH, PROTOCOL

    filt = {"name": "envoy.filters.http.ext_authz", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
        "http_service": {
            "server_uri": {"uri": f"http://127.0.0.1:{port}", "cluster": CLUSTER, "timeout": "5s"},
            "authorization_request": {
                "allowed_headers": {"patterns": [{"safe_regex": {"regex": ".*"}}]},
                # The check request loses the downstream protocol (a connection property the filter
                # reads) and the client's content-length (ext_authz sends its own): forward both.
                "headers_to_add": [{"key": PROTOCOL.decode(), "value": "%PROTOCOL%"},
                                   {"key": CONTENT_LENGTH.decode(), "value": "%REQ(content-length)%"}],
            },
            "authorization_response": {"allowed_upstream_headers": {"patterns": [{"exact": h} for h in upstream_headers]}},
        },
        # A failed check denies (403), so a sidecar that falls over shows up as non-2xx in wrk.
        "failure_mode_allow": False,
    }}
    cluster = {"name": CLUSTER, "type": "STATIC", "connect_timeout": "1s", "load_assignment": {
        "cluster_name": CLUSTER, "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}]}}
    return filt, cluster


class Sidecar:
    """One sidecar process: started with its configuration file, its port read from stdout."""

    def __init__(self, name: str, workdir: Path, config: dict, cpu: int | None):
        self.name = name
        self.workdir = workdir
        self.config_path = workdir / f"{name}.json"
        self.config_path.write_text(json.dumps(config))
        if name == "authz-rust":
            cmd = [str(RUST_SIDECAR), str(self.config_path)]
        else:
            cmd = [sys.executable, "-m", "benches.envoy_load.ort_sidecar", str(self.config_path)]
        if cpu is not None and shutil.which("taskset"):
            cmd = ["taskset", "-c", str(cpu), *cmd]  # taskset execs: the PID stays the sidecar's
        self.cmd = cmd
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self, timeout: float = 120.0) -> int:
        log = open(self.workdir / f"{self.name}.log", "wb")
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if self.proc.poll() is not None or left <= 0:
                raise RuntimeError(f"{self.name} did not start ({self.proc.returncode}):\n{self.log_tail()}")
            if select.select([self.proc.stdout], [], [], min(left, 0.5))[0]:
                line += self.proc.stdout.read1(256)
        self.port = int(line.decode().split()[-1].rsplit(":", 1)[1])
        return self.port

    def cpu_ticks(self) -> tuple[int, int]:
        """(utime, stime), all threads, in clock ticks."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]), int(fields[12])

    def stop(self) -> None:
        if self.proc is not None:
            envoyctl.stop_pid(self.proc)
            self.proc.stdout.close()

    def log_tail(self, n: int = 30) -> str:
        p = self.workdir / f"{self.name}.log"
        return "\n".join(p.read_text(errors="replace").splitlines()[-n:]) if p.is_file() else ""
