"""Fixtures every Envoy test shares: a recording upstream and Envoys started from a
configuration, each in its own session and stopped by PID at teardown (also when a test fails).
The plain classes behind them are in harness/running.py.

Under `make test` (EDGESCORE_REQUIRE_BUILD=1) no test or module may skip: a skip, from
`harness.require.missing` or any other, is reported as a failure."""

from __future__ import annotations

import pytest

from harness import envoyctl
from harness.require import require_build, require_native, required
from harness.running import Running, Upstream, with_test_flush


def _no_skip(report) -> None:
    if report.skipped and required() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under make test (EDGESCORE_REQUIRE_BUILD=1), which must run everything: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _no_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _no_skip(outcome.get_result())


@pytest.fixture(scope="module")
def upstream():
    up = Upstream()
    yield up
    up.close()


@pytest.fixture(scope="module")
def start_envoy(tmp_path_factory):
    """`start(cfg, name)` starts a real Envoy with `cfg` and returns its [`Running`] handle."""
    started: list[envoyctl.Envoy] = []

    def start(cfg: dict, name: str = "envoy") -> Running:
        flush_s = with_test_flush(cfg)
        e = envoyctl.Envoy(cfg, tmp_path_factory.mktemp(name), name=name, log_level="info")
        started.append(e)
        e.start()
        return Running(e, flush_s)

    yield start
    for e in started:
        e.stop()


@pytest.fixture(scope="module", params=["wasm", "native"])
def kind(request) -> str:
    """A module whose Envoys take `kind` runs every test against the Wasm filter and against the
    native module (`harness.render_envoy.to_native`)."""
    if request.param == "native":
        require_native()
    else:
        require_build()
    return request.param
