"""What the Python tests that run the filter share: a recording upstream and a started Envoy's
handle (the fixtures that start them are in tests/conftest.py).

Every server here binds 127.0.0.1; tests stop what they start, by PID.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from harness import backend, client, envoyctl, render_envoy

ROOT = Path(__file__).resolve().parent.parent


class Upstream:
    """A recording HTTP server on 127.0.0.1 (the demo backend's handler)."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.lock = threading.Lock()
        self.server = backend.make_server("127.0.0.1", 0, on_request=self._record)
        self.port = self.server.server_port
        self.thread = backend.serve_in_thread(self.server)

    def _record(self, rec: dict) -> None:
        with self.lock:
            self.records.append(rec)

    def take(self) -> list[dict]:
        with self.lock:
            out, self.records = self.records, []
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# The filter counts in its own memory and hands the counts to Envoy every `metrics.flush_ms`
# (default 1 s). Envoys started by the fixtures flush every TEST_FLUSH_MS, and a read of the
# filter's metrics first waits a few flush periods: requests reach Envoy by several routes (raw
# sockets, threads), so every read waits.
TEST_FLUSH_MS = 100
DEFAULT_FLUSH_MS = 1000


def with_test_flush(cfg: dict) -> float:
    """Sets the plugin configuration's `metrics.flush_ms` to TEST_FLUSH_MS on every listener
    unless the test set it (or the configuration is not JSON: tests of refused configurations).
    Returns the edge listener's flush period in seconds."""
    periods = [_test_flush(cfg, m) for m in render_envoy.hcms(cfg)]
    return periods[0] if periods else DEFAULT_FLUSH_MS / 1000


def _test_flush(cfg: dict, manager: dict) -> float:
    try:
        conf = render_envoy.plugin_value(cfg, manager)
        plugin = json.loads(conf["value"])
    except (KeyError, IndexError, TypeError, ValueError, StopIteration):
        return DEFAULT_FLUSH_MS / 1000
    if not isinstance(plugin, dict):
        return DEFAULT_FLUSH_MS / 1000
    metrics = plugin.setdefault("metrics", {})
    if isinstance(metrics, dict):
        metrics.setdefault("flush_ms", TEST_FLUSH_MS)
        conf["value"] = json.dumps(plugin)
        return metrics["flush_ms"] / 1000
    return DEFAULT_FLUSH_MS / 1000


REGISTRY_STATS = "wasmcustom.edgescore.registry."


class Running:
    """A started Envoy and the port of its `edge` listener."""

    def __init__(self, envoy: envoyctl.Envoy, flush_s: float = DEFAULT_FLUSH_MS / 1000):
        self.envoy = envoy
        self.port = envoy.listener_port("edge")
        # Four periods: room for a late timer on a busy machine.
        self.flush_wait_s = 4 * flush_s

    def send(self, req: client.Request) -> client.Response:
        return client.send("127.0.0.1", self.port, req)

    def settle(self) -> None:
        """Waits until the filter's counts for the requests sent so far reached Envoy."""
        time.sleep(self.flush_wait_s)

    def timed(self, req: client.Request) -> tuple[client.Response, float]:
        """The response and how long it took, in seconds."""
        t0 = time.perf_counter()
        resp = self.send(req)
        return resp, time.perf_counter() - t0

    def counter(self, name: str) -> int:
        """A stat from /stats by its full name (`wasmcustom.edgescore.decision.block`). The
        registry's counts (`wasmcustom.edgescore.registry.*`) reach Envoy as they happen, in both
        builds (the poller's and the swaps' host calls): no wait for the flush."""
        if name.startswith("wasmcustom.") and not name.startswith(REGISTRY_STATS):
            self.settle()
        return self.envoy.counter(name)

    def metric(self, name: str) -> float:
        """A series from /stats/prometheus by name, with its labels if it has any
        (`edgescore_text_calls`, `edgescore_text_label{label="toxic"}`; 0 before its first use)."""
        if name.startswith("edgescore_"):
            self.settle()
        for line in self.envoy.prometheus().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return 0.0
