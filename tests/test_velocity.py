"""Per-client velocity features in a real Envoy, for the Wasm filter and the native module alike:
a model reads the five counts of the `velocity` section (client key: the downstream address) and
blocks a client's 6th request within 10 s. Two clients on their own loopback addresses send on
keep-alive connections; every request's feature-log line (access log) must show its client's
counts as sent — requests growing one by one, the other client counted apart, the router's 404s
and the filter's own 403s in the shares of the requests after them.
"""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
import time

import numpy as np
import pytest

from harness.require import require_native
from models import feature_log
from test_envoy import envoy_config, render_envoy
from test_feature_log import edgescore_bin
from test_native import NS, with_module  # noqa: F401 (a fixture)

FEATURES = ["client_requests_10s", "client_requests_60s", "client_paths_60s", "client_4xx_share_60s", "client_403_share_60s"]
BURST = 6  # a client's 6th request within 10 s is blocked


@pytest.fixture(scope="module")
def burst_model(tmp_path_factory) -> str:
    """`burst`, trained by XGBoost on the five counts: block from BURST requests in 10 s (counts
    are whole numbers, so any split XGBoost puts between 5 and 6 decides alike)."""
    import xgboost as xgb

    tmp = tmp_path_factory.mktemp("burst")
    rng = np.random.default_rng(46)
    X = rng.uniform(0, 1, (2000, len(FEATURES))).astype(np.float32)
    X[:, 0] = rng.integers(1, 13, 2000)
    y = (X[:, 0] >= BURST).astype(np.float32)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 1, "eta": 1.0, "seed": 7, "nthread": 1},
                        xgb.DMatrix(X, label=y, feature_names=FEATURES), num_boost_round=3)
    booster.save_model(str(tmp / "burst.json"))
    (tmp / "schema.json").write_text(json.dumps(feature_log.schema_for(FEATURES, {})))
    esm = tmp / "burst.esm"
    subprocess.run([edgescore_bin(), "compile", str(tmp / "burst.json"), "--schema", str(tmp / "schema.json"),
                    "--name", "burst", "--version", "t1", "-o", str(esm)], check=True, capture_output=True)
    return base64.b64encode(esm.read_bytes()).decode()


def velocity_envoy(upstream_port: int, artifact: str, build: str, velocity: dict | None = None) -> dict:
    plugin = render_envoy.plugin_config("enforce", (), sample_rate=1.0, text=False)
    plugin["models"] = [{"artifact": artifact, "threshold": 0.5, "action": "block"}]
    plugin["velocity"] = velocity or {"key": "address", "capacity": 1024}
    cfg = envoy_config(upstream_port, plugin)
    # The router answers /missing with a 404 itself: a 4xx the filter did not make.
    vhost = render_envoy.hcm(cfg)["route_config"]["virtual_hosts"][0]
    vhost["routes"].insert(0, {"match": {"prefix": "/missing"}, "direct_response": {"status": 404}})
    return render_envoy.to_native(cfg) if build == "native" else cfg


class Client:
    """One keep-alive connection from its own loopback address (one worker, one client key)."""

    def __init__(self, address: str, port: int):
        self.address = address
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(address, 0))

    def get(self, path: str) -> int:
        self.conn.request("GET", path, headers={"user-agent": "velocity-test/1", "accept": "*/*"})
        r = self.conn.getresponse()
        r.read()
        if r.getheader("connection", "").lower() == "close":
            self.conn.close()
        return r.status


def logged(running, n: int) -> list[dict]:
    """The first `n` access-log lines, with their feature-log object, once Envoy wrote them."""
    deadline = time.monotonic() + 10
    while True:
        lines = [ln for ln in running.envoy.access_log() if ln.get("edgescore_features") not in (None, "-", "")]
        if len(lines) >= n:
            return [ln | {"features": json.loads(ln["edgescore_features"])["features"]} for ln in lines[:n]]
        assert time.monotonic() < deadline, f"{len(lines)} of {n} feature-log lines"
        time.sleep(0.2)


@pytest.mark.parametrize("build", ["wasm", "native"])
def test_counts_per_client_as_sent(build, burst_model, upstream, start_envoy):
    require_native()
    running = start_envoy(velocity_envoy(upstream.port, burst_model, build), f"velocity_{build}")
    a, b = Client("127.0.0.2", running.port), Client("127.0.0.3", running.port)
    # a: two 404s from the router, three passed, then blocked (403) from its 6th request on;
    # b's two requests between them.
    sent = [(a, "/missing/1"), (a, "/missing/2"), (a, "/x"), (b, "/"), (a, "/y"), (a, "/x"), (b, "/"), (a, "/z"), (a, "/z")]
    t0 = time.monotonic()
    statuses = [c.get(p) for c, p in sent]
    # Every request within one 10-second window: the 10-second counts are exact (a test that
    # ran slower than that tells so, rather than failing on counts).
    if time.monotonic() - t0 > 8:
        pytest.fail(f"the requests took {time.monotonic() - t0:.1f} s: the machine is too slow for the 10-second counts")
    assert statuses == [404, 404, 200, 200, 200, 200, 200, 403, 403], statuses
    lines = logged(running, len(sent))
    seen: dict[str, list[int]] = {}
    for (c, path), status, line in zip(sent, statuses, lines):
        assert line["client"].startswith(c.address + ":"), (line["client"], c.address)
        assert line["path"] == path and int(line["status"]) == status
        before = seen.setdefault(c.address, [])
        f = line["features"]
        k = len(before) + 1
        assert f["client_requests_10s"] == k and f["client_requests_60s"] == k, (c.address, path, f)
        assert f["client_4xx_share_60s"] == pytest.approx(sum(400 <= s < 500 for s in before) / k, abs=1e-6), (c.address, path, f)
        assert f["client_403_share_60s"] == pytest.approx(sum(s == 403 for s in before) / k, abs=1e-6), (c.address, path, f)
        # Linear counting's estimate of the distinct paths so far: never below the one path.
        assert 1 <= f["client_paths_60s"] <= 266
        before.append(status)
    # a's 7th request: two 404s and one 403 before it.
    assert lines[-1]["features"]["client_4xx_share_60s"] == pytest.approx(3 / 7, abs=1e-6)
    assert lines[-1]["features"]["client_403_share_60s"] == pytest.approx(1 / 7, abs=1e-6)


def test_native_no_allocation_per_request_with_velocity(with_module, burst_model, upstream, start_envoy):
    """The module's counting build: after a warm-up, requests of known and new clients (more
    than the table holds: evictions), blocked and passed, counted and answered, allocate
    nothing in the module."""
    require_native()
    with_module()
    native = start_envoy(velocity_envoy(upstream.port, burst_model, "native", {"key": "header:x-client", "capacity": 8}), "velocity_alloc")

    def round_(start: int, n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", native.port, timeout=10)
        for i in range(start, start + n):
            conn.request("GET", "/missing/x" if i % 4 == 0 else f"/p/{i % 9}", headers={"x-client": f"c{i % 40 if i % 3 else 0}"})
            conn.getresponse().read()
        conn.close()

    gauge = f"{NS}.edgescore.native_allocations"
    round_(0, 300)
    before = native.counter(gauge)
    assert before > 0
    round_(300, 2000)
    assert native.counter(gauge) == before
    assert native.counter(f"{NS}.edgescore.velocity.evictions") > 0
    assert native.counter(f"{NS}.edgescore.decision.block") > 0
