"""`make demo`'s tour, run as `make demo` runs it (without the NLP service, on free ports), in
both builds: its loop (demo/loop.py) decides each client as labelled.

Before the retraining, the replay of Chromium's headers through Python's TLS stack is decided
as Chromium itself is (the shipped bot model reads headers only), and the burst as the
browser-like request it repeats. After it, the bot model trained on the tour's own feature log
blocks the replay on its TLS fingerprint and the burst on its request count, and still lets
Chromium and the browser-like clients through. The live update in between loses no request.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from demo import clients, loop
from harness import registry
from harness.loopback import free_port
from harness.require import missing, require_build, require_native

ROOT = Path(__file__).resolve().parent.parent
TOUR_TIMEOUT_S = 400


def table(output: str, heading: str) -> dict[str, tuple[Counter, str]]:
    """The loop table under the line starting with `heading`: per client, its decisions and the
    top reason of its blocks."""
    lines = output.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(heading))
    rows = {}
    for ln in lines[start + 1:]:
        if not ln.strip():
            break
        for c in loop.CLIENTS:
            if ln.startswith("   " + c.name):
                rest = ln[len("   " + c.name):]
                decisions = Counter({d: int(n) for n, d in re.findall(r"(\d+) (allow|block|tag)\b", rest)})
                rows[c.name] = (decisions, rest.rsplit("  ", 1)[-1].strip())
    assert set(rows) == {c.name for c in loop.CLIENTS}, f"{heading}: {rows}\n{output}"
    return rows


@pytest.fixture
def demo_registry():
    """The tour publishes to the demo registry: put it back as it was."""
    backup = None
    if registry.REGISTRY_DIR.is_dir():
        backup = registry.REGISTRY_DIR.with_name(registry.REGISTRY_DIR.name + ".test-demo")
        shutil.rmtree(backup, ignore_errors=True)
        shutil.copytree(registry.REGISTRY_DIR, backup)
    yield
    if backup is not None:
        shutil.rmtree(registry.REGISTRY_DIR, ignore_errors=True)
        shutil.move(backup, registry.REGISTRY_DIR)


@pytest.mark.parametrize("build", ["wasm", "native"])
def test_the_tour_blocks_what_headers_alone_miss_after_retraining_on_the_log(build, demo_registry):
    require_native() if build == "native" else require_build()
    if clients.chromium_binary() is None:
        missing("no chromium (run `make system-tools`: Debian's chromium package)")
    cli = os.environ.get("EDGESCORE_BIN") or str(ROOT / "target" / "release" / "edgescore")
    args = [sys.executable, "-m", "demo.run", "--no-nlp", "--cli", cli,
            "--listener", f"127.0.0.1:{free_port()}", "--admin", f"127.0.0.1:{free_port()}"]
    p = subprocess.run(args + (["--native"] if build == "native" else []), cwd=ROOT, capture_output=True,
                       text=True, timeout=TOUR_TIMEOUT_S)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]

    before = table(out, "== what headers alone miss")
    after = table(out, "== the same clients")
    chromium, replay, burst, browsers = (loop.CHROMIUM.name, loop.REPLAY.name, loop.BURSTING.name, loop.BROWSERS.name)
    # Headers alone: the replay is Chromium's headers, the burst one browser-like request.
    assert set(before[replay][0]) == set(before[chromium][0]) == {"allow"}, before
    assert before[burst][0] == Counter(allow=loop.BURST), before

    assert set(after[chromium][0]) == {"allow"} and set(after[browsers][0]) == {"allow"}, after
    assert set(after[replay][0]) == {"block"} and after[replay][1].startswith("bot: tls_ja4_a "), after
    # The burst's first requests are counted as a person's are: the model can tell it only as it goes on.
    assert after[burst][0]["block"] >= loop.BURST - 10 and after[burst][1].startswith("bot: client_requests_10s "), after
    assert re.search(r"\n   \d+ requests, 0 not answered 200\n", out), out
