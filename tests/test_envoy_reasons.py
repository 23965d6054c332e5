"""Per-request reasons in a real Envoy, for the Wasm filter and the native module: the demo's
traffic through the example models (compiled with node values), every request in the feature
log. A blocked request's access log carries its reasons (`%FILTER_STATE(…edgescore.reasons…)%`,
`model:feature=±credit,…` for the model that blocked it) and so does its feature-log line
(`"reasons"`); an allowed request (`explain.sample` 0 by default) carries none.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from demo import traffic
from harness import render_envoy
from test_envoy import envoy_config

REASON = re.compile(r"^[A-Za-z0-9_.-]+:[a-z0-9_:.-]+=[+-]\d+\.\d{3}(,[a-z0-9_:.-]+=[+-]\d+\.\d{3}){0,2}$")


@pytest.fixture(scope="module")
def logged(upstream, start_envoy, kind):
    plugin = render_envoy.plugin_config(sample_rate=1.0, text=False)
    cfg = envoy_config(upstream.port, plugin)
    running = start_envoy(render_envoy.to_native(cfg) if kind == "native" else cfg, f"reasons-{kind}")
    reqs = traffic.requests()
    statuses = [running.send(r).status for r in reqs]
    deadline = time.monotonic() + 10
    while len(lines := running.envoy.access_log()) < len(reqs):
        assert time.monotonic() < deadline, f"{len(lines)} of {len(reqs)} access-log lines"
        time.sleep(0.1)
    return list(zip(reqs, statuses, lines[-len(reqs):]))


def test_blocked_requests_carry_their_reasons_and_allowed_ones_none(logged):
    blocked = [(r, line) for r, status, line in logged if status == 403]
    allowed = [(r, line) for r, status, line in logged if status == 200]
    assert blocked and allowed, [s for _, s, _ in logged]
    for r, line in blocked:
        reasons = line.get("edgescore_reasons")
        decided_by = re.search(r"model=([A-Za-z0-9_.-]+?)(@|;|\s)", line["edgescore"]).group(1)
        assert reasons and REASON.match(reasons), (r.name, reasons)
        assert reasons.startswith(f"{decided_by}:"), (r.name, reasons, line["edgescore"])
        features = json.loads(line["edgescore_features"])
        logged_reasons = features["reasons"][decided_by]
        assert 1 <= len(logged_reasons) <= 3 and all(f in features["features"] for f in logged_reasons), (r.name, features)
        # The same credits, to the three decimals filter state shows.
        shown = {f: float(v) for f, v in (part.split("=") for part in reasons.split(":", 1)[1].split(","))}
        assert list(shown) == list(logged_reasons), (r.name, shown, logged_reasons)
        assert all(abs(shown[f] - v) <= 0.0006 for f, v in logged_reasons.items()), (r.name, shown, logged_reasons)
    for r, line in allowed:
        assert line.get("edgescore_reasons") in (None, "-", ""), (r.name, line.get("edgescore_reasons"))
        assert "reasons" not in json.loads(line["edgescore_features"]), r.name
