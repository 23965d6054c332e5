"""The NLP service as the bench drives it: one local Ray head (nlp.run), redeployed in place
with other settings, measured from outside.

A measurement runs the load generator (benches/nlp_load/loadgen.py) as a process of its own
and reads, around it, the CPU of every process in the service's Unix session (cpu_meter) and
the service's /stats, so each figure says what the service spent, apart from the client.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from benches.nlp_load import cpu_meter
from harness.loopback import free_port
from nlp.app_spec import DEFAULT_CONFIG_PATH

REPO = Path(__file__).resolve().parents[2]


def config_file(directory: Path, name: str, serving: dict | None = None, model: dict | None = None,
                cache: dict | None = None) -> Path:
    """nlp/serve_config.yaml with some args replaced, written to directory/name.yaml."""
    document = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    args = document["applications"][0]["args"]
    for section, values in (("serving", serving), ("model", model), ("cache", cache)):
        if values:
            args.setdefault(section, {}).update(values)
    if serving and "max_ongoing_requests" not in serving:
        args["serving"].pop("max_ongoing_requests", None)  # derived from the new limits
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@dataclass
class Measurement:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    statuses: dict[str, int]
    refused_share: float  # of the requests answered, the share that was not a 200
    cpu_by_role: dict[str, float]  # service CPU seconds during the measured window
    cpu_s_per_1000: float  # service CPU (all its processes) per 1,000 texts answered 200
    client_cpu_s_per_1000: float
    texts_per_batch: float  # short-lane texts per model batch (from /stats)
    cache_hits: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class ServiceUnderTest:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.state_dir = work / "service"
        self.port, self.serve_port = free_port(), free_port()
        self.state: dict = {}

    def start(self, config: Path) -> None:
        self._nlp_run("start", "--state-dir", str(self.state_dir), *self._ports(), "--config", str(config))
        self.state = json.loads((self.state_dir / "nlp-service.json").read_text())

    def redeploy(self, config: Path) -> None:
        """The app again on the same head with another config (Serve replaces the replicas;
        the new ones take over the same ports). Returns once the old replicas are gone:
        until then they still hold the port and would take a share of the connections."""
        env = {"RAY_ADDRESS": self.state["gcs_address"], "RAY_AUTH_MODE": "token"}
        with tempfile.TemporaryDirectory(dir=self.work) as state_dir:
            self._nlp_run("start", "--state-dir", state_dir, *self._ports(), "--config", str(config), env=env)
        replicas = yaml.safe_load(config.read_text())["applications"][0]["args"]["serving"]["num_replicas"]
        deadline = time.monotonic() + 60
        while self._replica_processes() != replicas:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self._replica_processes()} replica processes, expected {replicas}")
            time.sleep(0.5)

    def _replica_processes(self) -> int:
        reading = cpu_meter.read_session(self.state["session"])
        return sum(1 for role, _ in reading.by_pid.values() if role == "replica")

    def stop(self) -> None:
        if self.state_dir.exists():
            self._nlp_run("stop", "--state-dir", str(self.state_dir))

    def stats(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/stats", timeout=30) as response:
            return json.loads(response.read())

    def measure(self, concurrency: int, seconds: float, warmup: float, serve_proxy: bool = False,
                texts: list[str] | None = None, flood_text: str | None = None) -> Measurement:
        """flood_text: that text 90 % of the time, every other text unique (loadgen.py)."""
        port = self.serve_port if serve_proxy else self.port
        command = [sys.executable, "-m", "benches.nlp_load.loadgen", "--port", str(port),
                   "--concurrency", str(concurrency), "--seconds", str(seconds), "--warmup", str(warmup)]
        texts_file = None
        if texts is not None:
            texts_file = self.work / "texts.json"
            texts_file.write_text(json.dumps(texts))
            command += ["--texts", str(texts_file)]
        if flood_text is not None:
            command += ["--repeat-text", flood_text, "--repeat-share", "0.9", "--unique"]
        client = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(REPO)))
        # The client marks its measured window; the service's CPU and counters are read then.
        # (/stats is read before the CPU at the start and after it at the end, so what a read
        # of /stats costs stays out of the CPU figure.)
        try:
            if client.stdout.readline().strip() != "start":
                raise RuntimeError("the load generator did not start")
            stats_before = self.stats()
            cpu_before = cpu_meter.read_session(self.state["session"])
            if client.stdout.readline().strip() != "stop":
                raise RuntimeError("the load generator did not finish its window")
            cpu_after = cpu_meter.read_session(self.state["session"])
            stats_after = self.stats()
            output = client.stdout.read()
        finally:
            if client.wait(timeout=120) != 0:
                raise RuntimeError(f"the load generator failed (exit {client.returncode})")
        result = json.loads(output)
        latencies = sorted(result["latencies_ms"])
        answered = max(1, sum(result["statuses"].values()))
        scored = max(1, len(latencies))
        roles = cpu_meter.cpu_by_role(cpu_before, cpu_after)
        delta = {key: stats_after[key] - stats_before[key] for key in ("model_texts", "long_texts", "batches", "cache_hits")}
        short_texts = delta["model_texts"] - delta["long_texts"]
        return Measurement(
            requests_per_s=len(latencies) / seconds,
            p50_ms=statistics.median(latencies) if latencies else float("nan"),
            p99_ms=latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else float("nan"),
            statuses=result["statuses"],
            refused_share=1 - len(latencies) / answered,
            cpu_by_role=roles,
            cpu_s_per_1000=1000 * sum(roles.values()) / scored,
            client_cpu_s_per_1000=1000 * result["client_cpu_s"] / answered,
            texts_per_batch=short_texts / delta["batches"] if delta["batches"] else 0.0,
            cache_hits=delta["cache_hits"],
        )

    def _ports(self) -> list[str]:
        return ["--port", str(self.port), "--serve-port", str(self.serve_port)]

    def _nlp_run(self, *args: str, env: dict | None = None) -> None:
        done = subprocess.run([sys.executable, "-m", "nlp.run", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=400, stdin=subprocess.DEVNULL,
                              env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})))
        if done.returncode != 0:
            raise RuntimeError(f"nlp.run {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
