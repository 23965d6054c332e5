"""docs/security-teams.md, run as written: its commands, in order, in one bash session
(harness/guide_session.py: the block markers and how the session runs them).

The session runs in the repository root with the guide's own variables pointed elsewhere: its
files go to a temporary directory (`WORK`), Envoy listens on free ports (`LISTENER`, `ADMIN`,
which the expected outputs show at their defaults), and the CLI is $EDGESCORE_BIN. Besides the
expected outputs, the test checks what the guide says about them: the labels join the log, the
compiled artifact scores the check rows as XGBoost did, the shadow is counted and never acts,
the promoted version serves and the shadow is gone, the rollback serves the first artifact
again, and everything started is stopped.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from demo import traffic
from harness import registry
from harness.guide_session import Step, assert_shows, run_session
from harness.loopback import free_port
from harness.require import missing, require_build

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "security-teams.md"
# The addresses the guide's outputs show, and its variables default to.
DEFAULT_LISTENER = "127.0.0.1:10000"
DEFAULT_ADMIN = "127.0.0.1:9901"
# The whole session: Envoy's start-up, three registry polls, training, a few hundred requests.
SESSION_TIMEOUT = 240
BROWSERS = sum(r.kind == "browser" for r in traffic.requests())
BOTS = sum(r.kind == "bot" for r in traffic.requests())


def stats_of(output: str) -> dict[str, int]:
    """`name: value` lines of Envoy's /stats."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(wasmcustom\.\S+): (\d+)$", output, re.M)}


def repeat_of(step: Step) -> int:
    return int(re.search(r"--repeat (\d+)", step.block.text).group(1))


def started_pids(background: Step) -> list[int]:
    """demo.run's own PID, Envoy's and the backend's, as it printed them."""
    m = re.search(r"== Envoy pid (\d+) .* backend pid (\d+) ", background.output)
    own = re.search(r"== serving until Ctrl-C \(or kill (\d+)\)", background.output)
    return [int(x) for x in (own.group(1) if own else None, *(m.groups() if m else ())) if x is not None]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """Runs the guide once."""
    require_build()
    if not (ROOT / ".venv" / "bin" / "activate").is_file():
        missing("the guide activates .venv (make venv)")
    if shutil.which("curl") is None:
        missing("the guide reads Envoy's stats with curl, which is not installed (make system-tools)")
    edgescore = os.environ.get("EDGESCORE_BIN") or str(ROOT / "target" / "release" / "edgescore")
    tmp = tmp_path_factory.mktemp("guide")
    work = tmp / "work"
    listener, admin = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    env = dict(os.environ, WORK=str(work), LISTENER=listener, ADMIN=admin, EDGESCORE_BIN=edgescore)
    env.pop("VIRTUAL_ENV", None)
    demo_manifest = (registry.REGISTRY_DIR / "manifest.json").read_bytes() if registry.REGISTRY_DIR.is_dir() else None
    s = run_session(GUIDE, tmp, ROOT, env, SESSION_TIMEOUT, {DEFAULT_LISTENER: listener, DEFAULT_ADMIN: admin},
                    started_pids)
    s.assert_ran()
    assert len(s.background()) == 1, "the guide runs Envoy as one background block"
    s.extra["work"] = work
    print(f"the guide ran in {s.seconds:.0f} s")
    yield s
    # The guide writes to WORK only: the demo's own registry is as it was.
    if demo_manifest is not None:
        assert (registry.REGISTRY_DIR / "manifest.json").read_bytes() == demo_manifest


def test_every_block_shows_what_the_guide_says(session):
    steps, substitutions = session.steps, session.substitutions
    assert sum(bool(s.expect) for s in steps) >= 10
    for s in steps:
        if s.expect:
            assert_shows(s, substitutions)


def test_envoy_trusts_the_teams_key_only(session):
    work = session.extra["work"]
    key_id = json.loads((work / "secteam.pub").read_text())["key_id"]
    assert f"generated {key_id} -> " in session.step("edgescore keygen").output
    served = session.background()[0].output
    trusted = re.search(r"registry keys Envoy trusts: (.*)", served).group(1)
    assert trusted.startswith(key_id) and "," not in trusted, trusted
    assert "1 key(s)" in served


def test_the_labels_join_the_logged_requests(session):
    work = session.extra["work"]
    n = repeat_of(session.step("--labels-out"))
    with open(work / "labels.csv", newline="") as f:
        labels = list(csv.DictReader(f))
    assert len(labels) == n * (BROWSERS + BOTS)
    assert sum(int(r["is_bot"]) for r in labels) == n * BOTS
    with open(work / "table.csv", newline="") as f:
        logged = {r["request_id"] for r in csv.DictReader(f)}
    assert {r["request_id"] for r in labels} <= logged
    schema = json.loads((work / "schema.json").read_text())
    example = json.loads((ROOT / "models" / "example" / "schema.json").read_text())
    assert schema == example  # the log's features, in the serving models' order and buckets


def test_the_compiled_model_scores_the_check_rows_as_xgboost_did(session):
    work = session.extra["work"]
    with open(work / "check.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["is_bot"] for r in rows} == {"0", "1"}
    scored = session.step("edgescore score").output.splitlines()
    cli = [float(ln) for ln in scored if re.fullmatch(r"[0-9.e+-]+", ln.strip())]
    assert len(cli) == len(rows), scored
    for row, got in zip(rows, cli):
        assert abs(got - float(row["xgboost"])) <= 1e-6, (row["request_id"], got, row["xgboost"])
        assert (got >= 0.9) == (row["is_bot"] == "1"), (row["request_id"], got)
    printed = session.step("models.train_from_log").output
    for row in rows:
        assert f"{row['request_id']}  is_bot={row['is_bot']}  " in printed


def test_the_shadow_is_counted_and_never_acts(session):
    sent = session.step("--wait-for 'bot@2~shadow'")
    n = repeat_of(sent)
    assert f"{n * BOTS} x 403 block;model=bot@1" in sent.output
    stats = stats_of(session.step("edgescore\\.(decision|").output)
    assert stats["wasmcustom.edgescore.shadow.bot.requests.block"] == n * BOTS
    # The browser-like requests and the probes that found the shadow answering.
    assert stats["wasmcustom.edgescore.shadow.bot.requests.allow"] == n * BROWSERS + traffic.PROBES_IN_A_ROW
    assert stats["wasmcustom.edgescore.decision.shadow_block"] == 0
    assert stats["wasmcustom.edgescore.decision.block"] == stats["wasmcustom.edgescore.model.bot.requests.block"] > 0
    compared = session.step("models.shadow_compare").output
    assert f"both {n * BOTS}, neither {n * BROWSERS + traffic.PROBES_IN_A_ROW}, only bot@1 0, only bot@2~shadow 0" in compared


def test_the_promoted_version_serves_and_the_shadow_is_gone(session):
    promoted = session.step("--wait-for bot@3")
    n = repeat_of(promoted)
    assert f"{n * BOTS} x 403 block;model=bot@3" in promoted.output
    assert "~shadow" not in promoted.output.split("bot@3 answers", 1)[1]
    stats = stats_of(promoted.output)
    assert stats["wasmcustom.edgescore.registry.version.bot"] == 3
    assert stats["wasmcustom.edgescore.registry.shadow_version.bot"] == 0


def test_the_rollback_serves_the_first_artifact_again(session):
    work = session.extra["work"]
    first = re.search(r"published bot v1 \(active\) sha256 (\S+)", session.step("for model in bot").output).group(1)
    rolled = session.step("--wait-for bot@4")
    assert re.search(rf"published bot v4 \(active\) sha256 {re.escape(first)} ", rolled.output), rolled.output
    assert f"{repeat_of(rolled) * BOTS} x 403 block;model=bot@4" in rolled.output
    entries = registry.manifest(work / "registry")["models"]
    assert [(e["version"], e["mode"]) for e in entries if e["name"] == "bot"] == [(4, "active")]


def test_everything_started_is_stopped(session):
    served = session.background()[0]
    assert len(started_pids(served)) == 3, served.output  # demo.run, Envoy, the backend
    assert session.left_running == [], "still running after the session (its trap stops demo.run by PID)"
    assert "interrupted" in served.output  # demo.run's answer to the session's SIGTERM
