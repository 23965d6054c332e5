"""Envoy's `failure_policy` on a trapped VM, proven in a real Envoy under load.

The filter is built a second time with the cargo feature `test-trap` (target/test-wasm; never
shipped): a request with the header `x-edgescore-test-trap` makes the guest execute
`unreachable`, as a bug would. Envoy then marks the VM failed, and the policy decides what
later requests get (Envoy's `PluginConfig::maybeReloadHandleIfNeeded` / `createContext`):

Whatever the policy, streams of the trapped VM still in flight are failed by Envoy (a 503 if
no reply started, else a reset), so a trap costs the requests in flight on that worker.

- FAIL_RELOAD (what envoy.yaml ships): the next request after the reload backoff
  (`reload_config.backoff.base_interval`, default 1 s, measured from the VM's last load)
  recreates the VM, counted in `wasm.<plugin name>.vm_reload_success`; requests inside the
  backoff are failed closed;
- FAIL_CLOSED (Envoy's default): every later request is answered 503 by Envoy until the
  configuration changes;
- FAIL_OPEN: every later request passes unscored (the filter is skipped) until the
  configuration changes.

docs/reliability.md records what these tests measured.
"""

from __future__ import annotations

import http.client
import threading
import time

import pytest

from demo import traffic
from harness import client, render_envoy
from harness.running import ROOT, Running
from test_envoy import envoy_config, header

TRAP_WASM = ROOT / "target" / "test-wasm" / "wasm32-wasip1" / "wasm" / "edgescore_filter.wasm"
BROWSER = next(r for r in traffic.requests() if r.kind == "browser")
TRAP = client.Request(name="trap", kind="browser", method="GET", path="/trap",
                           headers=[*BROWSER.headers, ("x-edgescore-test-trap", "1")])
PLUGIN = "edgescore"  # the plugin's `name` in envoy.yaml: Envoy's reload stats carry it


def require_trap_build() -> None:
    if not TRAP_WASM.is_file():
        pytest.fail(f"{TRAP_WASM.relative_to(ROOT)} missing: `make test` builds it "
                    "(cargo build --profile wasm --target wasm32-wasip1 -p edgescore-filter "
                    "--features test-trap --target-dir target/test-wasm)")


def trap_config(upstream_port: int, policy: str, backoff_ms: int | None = None) -> dict:
    # Shadow mode: the filter never blocks, so every non-200 below is the failure policy's.
    cfg = envoy_config(upstream_port, render_envoy.plugin_config(mode="shadow"))
    wasm = render_envoy.wasm_filter(cfg)
    assert wasm["name"] == PLUGIN
    wasm["vm_config"]["code"]["local"]["filename"] = str(TRAP_WASM)
    wasm["failure_policy"] = policy
    if backoff_ms is not None:
        wasm["reload_config"] = {"backoff": {"base_interval": f"{backoff_ms / 1000}s"}}
    return cfg


class Load:
    """Threads sending BROWSER requests in a loop; every answer is recorded as (sent, answered,
    status), every failure to get a whole one (a reset, a truncated body) with status None."""

    def __init__(self, envoy: Running, threads: int = 3):
        self.envoy = envoy
        self.results: list[tuple[float, int | None]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                status = self.envoy.send(BROWSER).status
            except (OSError, http.client.HTTPException):
                status = None
            rec = (t, time.monotonic(), status)
            with self.lock:
                self.results.append(rec)

    def __enter__(self) -> "Load":
        for th in self.threads:
            th.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(timeout=15)


def scored(upstream, envoy: Running) -> tuple[int, bool]:
    """Status of one BROWSER request and whether the upstream saw the filter's scores."""
    upstream.take()
    r = envoy.send(BROWSER)
    recs = upstream.take()
    return r.status, bool(recs) and header(recs[-1], "x-edgescore") is not None


def test_fail_reload_recovers_a_trapped_vm_under_load(upstream, start_envoy):
    require_trap_build()
    running = start_envoy(trap_config(upstream.port, "FAIL_RELOAD", backoff_ms=200), "fail_reload")
    assert scored(upstream, running) == (200, True)
    time.sleep(0.3)  # past the backoff since the VM's load: the first request after the trap reloads
    with Load(running) as load:
        time.sleep(1.0)
        t_trap = time.monotonic()
        trapped = running.send(TRAP)
        t_answered = time.monotonic()
        time.sleep(2.0)
    assert trapped.status >= 500, f"the trapping request was answered {trapped.status}"
    results = load.results
    # Envoy fails every stream of a trapped VM that is still in flight (proxy-wasm's
    # CHECK_FAIL_HTTP: a local reply if none was sent, else a reset, whatever the module
    # exports): those few, one a thread at most, are cut off. Only a request in flight while the
    # trap happened may be (sent before the trapping request was answered, answered after it
    # was sent).
    lost = [(sent - t_trap, status) for sent, answered, status in results if status != 200]
    assert len(lost) <= len(load.threads) and all(s < t_answered - t_trap for s, _ in lost), \
        f"cut off at {lost} (s from the trapping request, status), answered after {t_answered - t_trap:.3f} s"
    assert all(answered > t_trap for _, answered, status in results if status != 200)
    before = [r for r in results if r[1] < t_trap]
    after = [r for r in results if r[0] > t_trap + 0.5]  # the reload is long done by then
    assert before and all(status == 200 for _, _, status in before)
    assert after and all(status == 200 for _, _, status in after), sorted({s for _, _, s in after})
    failed = [r for r in results if r[2] != 200]
    reloads = running.counter(f"wasm.{PLUGIN}.vm_reload_success")
    assert reloads >= 1, running.envoy.stats("vm_reload")
    assert running.counter(f"wasm.{PLUGIN}.vm_reload_failure") == 0
    # The reloaded VM scores again.
    assert scored(upstream, running) == (200, True)
    print(f"FAIL_RELOAD: {len(results)} requests under load ({len(load.threads)} clients), trap answered "
          f"{trapped.status}, {len(lost)} in flight cut off, "
          f"{reloads} reload(s)")


@pytest.mark.parametrize("policy", ["FAIL_CLOSED", "FAIL_OPEN"])
def test_fail_closed_and_fail_open_after_a_trap(policy, upstream, start_envoy):
    require_trap_build()
    running = start_envoy(trap_config(upstream.port, policy), policy.lower())
    assert scored(upstream, running) == (200, True)
    trapped = running.send(TRAP)
    assert trapped.status >= 500, f"the trapping request was answered {trapped.status}"
    later = [scored(upstream, running) for _ in range(5)]
    if policy == "FAIL_CLOSED":
        assert all(status == 503 for status, _ in later), later
    else:
        assert all(s == (200, False) for s in later), later  # passed on, unscored
    assert running.counter(f"wasm.{PLUGIN}.vm_reload_success") == 0
    print(f"{policy}: trap answered {trapped.status}, later requests {later}")
