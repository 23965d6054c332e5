"""The native module (native/, libedgescore_native.so) in a real Envoy, beside the Wasm filter.

Each Envoy's configuration is test_envoy.py's, turned native by render_envoy.to_native (same
plugin JSON, access log and stats tags). The module must decide exactly as the .wasm does: the
demo's traffic and the hostile requests go through both, and every access-log line's decision,
scores and sampled feature-log line must be identical (bit for bit: the feature log prints each
f32 as its shortest round-trip decimal, and the scores likewise). Then what only the native
module has: its refusal of a bad configuration at load, its panic guard (a test build of the
module with a panic on demand) and its allocation count (a test build that counts every
allocation the module makes, read back through a gauge).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from pathlib import Path

import pytest

from demo import traffic
from harness import envoyctl, render_envoy
from harness.require import require_native
from test_envoy import HOSTILE, envoy_config, policies, raw_request

ROOT = Path(__file__).resolve().parent.parent
NS = render_envoy.NATIVE_STATS_PREFIX  # the Wasm filter's: the same names


def native_config(upstream_port: int, plugin: dict | str) -> dict:
    return render_envoy.to_native(envoy_config(upstream_port, plugin))


@pytest.fixture(scope="module")
def pair(upstream, start_envoy):
    """The same plugin configuration (the example models, every request sampled into the feature
    log, thresholds that block the bots) in the Wasm filter and in the native module."""
    require_native()
    plugin = render_envoy.plugin_config(sample_rate=1.0, text=False)
    wasm = start_envoy(envoy_config(upstream.port, plugin), "wasm")
    native = start_envoy(native_config(upstream.port, plugin), "native")
    return wasm, native


def logged(running, start: int, n: int) -> list[dict]:
    """Access-log lines `start` to `start + n`, once Envoy has flushed them."""
    deadline = time.monotonic() + 10
    while True:
        lines = running.envoy.access_log()
        if len(lines) >= start + n or time.monotonic() > deadline:
            return lines[start:start + n]
        time.sleep(0.1)


def decision_fields(line: dict) -> dict:
    return {k: line.get(k) for k in ("status", "edgescore", "edgescore_features")}


def envoy_log(running, needle: str) -> str:
    """Envoy's log once it holds `needle` (Envoy writes it from a buffer every flush interval)."""
    deadline = time.monotonic() + 10
    while True:
        log = running.envoy.log_path.read_text(errors="replace")
        if needle in log or time.monotonic() > deadline:
            return log
        time.sleep(0.1)


def test_module_reports_the_abi_it_was_built_for(pair):
    _, native = pair
    log = envoy_log(native, "(native module")
    assert "Dynamic module ABI version v0.2.0 matched." in log, native.envoy.log_tail()
    assert "(native module" in log


def test_demo_traffic_decided_bit_for_bit_as_wasm(pair, upstream):
    wasm, native = pair
    reqs = traffic.requests()
    out = {}
    for running in pair:
        before = len(logged(running, 0, 10**9))
        statuses = [running.send(r).status for r in reqs]
        out[running] = (statuses, logged(running, before, len(reqs)))
    (ws, wl), (ns, nl) = out[wasm], out[native]
    assert ns == ws
    for r, a, b in zip(reqs, wl, nl):
        assert decision_fields(b) == decision_fields(a), r.name
        assert a["edgescore_features"] not in (None, "-", ""), r.name
    # The demo's labels hold natively too: browsers pass, bots are blocked.
    for r, status in zip(reqs, ns):
        assert status == (200 if r.kind == "browser" else 403), r.name


def test_hostile_requests_decided_as_wasm_never_5xx(pair):
    wasm, native = pair
    before = [len(logged(r, 0, 10**9)) for r in pair]
    for name, data in HOSTILE.items():
        got = []
        for running in pair:
            status, _ = raw_request(running.port, data)
            assert status < 500, (name, status, running.envoy.log_tail())
            got.append(status)
        assert got[0] == got[1], name
    n = len(HOSTILE)
    wl, nl = logged(wasm, before[0], n), logged(native, before[1], n)
    assert len(wl) == len(nl) == n
    for a, b in zip(wl, nl):
        assert decision_fields(b) == decision_fields(a)
    assert native.counter(f"{NS}.edgescore.errors") == 0
    assert native.counter(f"{NS}.edgescore.panics") == 0


def test_same_metrics_in_prometheus(pair):
    wasm, native = pair
    for name in ("edgescore_requests_scored", 'edgescore_decision{action="block"}', 'edgescore_model_requests{model="bot",action="block"}',
                 'edgescore_model_score_permille_count{model="bot"}'):
        assert native.metric(name) > 0, name
        assert native.metric(name) == wasm.metric(name), name


def test_unknown_field_refused_at_load(tmp_path, upstream):
    require_native()
    plugin = render_envoy.plugin_config(text=False)
    plugin["no_such_field"] = 1
    path = tmp_path / "native.json"
    path.write_text(json.dumps(native_config(upstream.port, plugin)))
    r = envoyctl.validate(path)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    assert "edgescore: configuration refused" in out and "no_such_field" in out, out[-2000:]


def test_committed_native_yaml_validates():
    require_native()
    r = envoyctl.validate(ROOT / "envoy.native.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


def test_envoy_native_yaml_is_current():
    assert (ROOT / "envoy.native.yaml").read_text() == render_envoy.render_native()


# ---------------------------------------------------------------------------------------------
# test builds of the module: a panic on demand, an allocation counter

TEST_BUILD_DIR = ROOT / "target" / "native-test"
TEST_FEATURES = "test-panic,count-allocations"


def module_build() -> Path:
    """The module's test build (a panic on demand, an allocation counter; never shipped), in a
    target directory of its own so that it never replaces the shipped one; the directory to use
    as ENVOY_DYNAMIC_MODULES_SEARCH_PATH."""
    subprocess.run(["cargo", "build", "--profile", "native", "-p", "edgescore-native", "--features", TEST_FEATURES,
                    "--target-dir", str(TEST_BUILD_DIR)], cwd=ROOT, check=True, capture_output=True)
    out = TEST_BUILD_DIR / "native"
    assert (out / f"lib{render_envoy.NATIVE_MODULE}.so").is_file()
    return out


@pytest.fixture
def with_module(monkeypatch):
    def use() -> None:
        monkeypatch.setenv("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", str(module_build()))
    return use


@pytest.mark.parametrize("on_error,status", [("allow", 200), ("block", 503)])
def test_a_panic_gets_on_error_and_envoy_lives(on_error, status, with_module, upstream, start_envoy):
    require_native()
    with_module()
    plugin = render_envoy.plugin_config("enforce", policies(bot=1.5, scanner=1.5, abuse=1.5), on_error=on_error, text=False)
    native = start_envoy(native_config(upstream.port, plugin), f"panic_{on_error}")
    browser = next(r for r in traffic.requests() if r.kind == "browser")
    panicking = dataclasses.replace(browser, name="panic", headers=[*browser.headers, ("x-edgescore-test-panic", "1")])
    for _ in range(3):
        resp = native.send(panicking)
        assert resp.status == status
        assert native.send(browser).status == 200
    assert native.counter(f"{NS}.edgescore.panics") == 3
    assert native.counter(f"{NS}.edgescore.errors") == 3
    assert native.envoy.proc.poll() is None


def test_no_allocation_per_request(with_module, upstream, start_envoy):
    """After a warm-up (every worker's buffers grown to the largest request), 2,000 requests
    through the module make no allocation in it: its global allocator counted none. The bots
    among them are blocked with their reasons (the example models have node values)."""
    require_native()
    with_module()
    plugin = render_envoy.plugin_config(sample_rate=1.0, text=False)
    native = start_envoy(native_config(upstream.port, plugin), "alloc")
    reqs = traffic.requests()
    hostile = [HOSTILE[k] for k in ("60 KiB cookie", "400 distinct headers", "non-utf8 user-agent")]

    def round_(n: int) -> None:
        for i in range(n):
            native.send(reqs[i % len(reqs)])
            if i % 50 == 0:
                for h in hostile:
                    raw_request(native.port, h)

    gauge = f"{NS}.edgescore.native_allocations"
    round_(300)
    before = native.counter(gauge)
    assert before > 0  # the counter counts (the configuration's own allocations)
    round_(2000)
    assert native.counter(gauge) == before
    assert any(line.get("edgescore_reasons") not in (None, "-", "") for line in native.envoy.access_log())
