"""A real Prometheus (Debian's `prometheus` binary, `make system-tools`) for the tests: started on
127.0.0.1 with a temporary TSDB and the scrape configuration a test gives it, queried through
its HTTP API, stopped by PID."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from harness import envoyctl
from harness.loopback import free_port
from harness.require import missing


def prometheus_binary() -> str:
    """$EDGESCORE_PROMETHEUS, else `prometheus` on PATH. Missing: a skip, or under `make test`
    (EDGESCORE_REQUIRE_BUILD=1, after `make system-tools`) a failure."""
    found = os.environ.get("EDGESCORE_PROMETHEUS") or shutil.which("prometheus")
    if not found:
        missing("no prometheus binary (run `make system-tools`: Debian's prometheus package)")
    return found


class Prometheus:
    """One Prometheus process scraping per `config` (a prometheus.yml as a dict)."""

    def __init__(self, config: dict, workdir: Path):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.workdir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> "Prometheus":
        args = [prometheus_binary(), f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn"]
        with open(self.workdir / "prometheus.log", "ab") as log:
            self.proc = subprocess.Popen(args, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready after {timeout}s:\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None:
            envoyctl.stop_pid(self.proc)

    def log_tail(self, n: int = 30) -> str:
        path = self.workdir / "prometheus.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.is_file() else ""

    def api(self, path: str, **params: str | float) -> dict:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant query: (labels, value) per series (`__name__` dropped)."""
        params: dict[str, str | float] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        assert data["resultType"] == "vector", data
        return [({k: v for k, v in s["metric"].items() if k != "__name__"}, float(s["value"][1])) for s in data["result"]]

    def by_labels(self, expr: str, *labels: str, at: float | None = None) -> dict[tuple[str, ...], float]:
        """An instant query's values keyed by the values of `labels`."""
        return {tuple(m.get(label, "") for label in labels): v for m, v in self.query(expr, at)}


def finite(values: list[tuple[dict[str, str], float]]) -> list[float]:
    return [v for _, v in values if math.isfinite(v)]
