"""docs/operators.md, run as written (harness/guide_session.py): validation of a good and a
refused configuration, then the demo registry and Envoy with the repository's envoy.yaml as the
guide starts them in other terminals, a blocked request and the labelled series it shows, and
the node values the blocked request's reasons come from, and promtool's check of the drift
watch's rules.

The guide uses envoy.yaml as it is, on its fixed loopback ports: the test refuses to start if
one is taken (another Envoy or demo running) rather than talk to someone else's Envoy.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from harness.guide_session import assert_shows, run_session
from harness.require import require_build

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "operators.md"
PORTS = (10000, 9901, 8082)  # envoy.yaml's listener and admin, the demo registry


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    require_build()
    taken = [p for p in PORTS if port_taken(p)]
    assert not taken, f"ports {taken} are in use on 127.0.0.1: stop the Envoy or demo holding them"
    tmp = tmp_path_factory.mktemp("operators")
    env = dict(os.environ)
    env.pop("VIRTUAL_ENV", None)
    s = run_session(GUIDE, tmp, ROOT, env, 180, {})
    s.assert_ran()
    yield s


def test_every_block_shows_what_the_guide_says(session):
    shown = [s for s in session.steps if s.expect]
    assert len(shown) == 5
    for s in shown:
        assert_shows(s, {})


def test_the_refused_configuration_fails_validation_with_the_filters_reason(session):
    refused = session.step("edgescore-bad.yaml")
    assert "configuration refused: hash_key" in refused.output
    # Validation itself fails (the reader's CI step would stop there), not only the log line.
    p = subprocess.run([str(ROOT / ".venv" / "bin" / "envoy"), "--mode", "validate", "-c", "/tmp/edgescore-bad.yaml"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0


def test_envoy_served_the_registrys_models_and_stopped(session):
    envoy = next(s for s in session.background() if "envoy -c" in s.block.text)
    accepted = re.search(r"edgescore registry: manifest \d+ accepted, serving \[(.*?)\]", envoy.output)
    assert accepted and {m.split("@")[0] for m in accepted.group(1).split(", ")} == {"abuse", "bot", "scanner"}
    assert session.left_running == [], "the session's trap stops both background commands by PID"
    assert not [p for p in PORTS if port_taken(p)]
