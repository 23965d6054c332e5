"""A guide under docs/, run as written: its commands, in order, in one bash session.

A guide marks each ```sh block it means to be run: `<!-- guide:run -->` (run in order),
`<!-- guide:background ready="TEXT" -->` (one command the reader leaves running in another
terminal: started in the background, ready once its output shows TEXT, stopped by PID at the
end) or `<!-- guide:skip -->`; a ```text block marked `<!-- guide:expect -->` is the output the
guide shows for the block before it, abridged: every line of it must appear, in order, in that
block's output (`…` stands for any text, a line of just `…` for lines left out). An unmarked
```sh block fails: every command a reader may copy is either run or knowingly skipped.

Used by tests/test_guide_security_teams.py and tests/test_guide_operators.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r'^<!-- guide:(run|background|expect|skip)(?: ready="([^"]+)")? -->$')
BLOCK_START = "@@guide block {}@@"


@dataclass
class Block:
    kind: str  # run | background | expect | skip | none (a fence without a marker)
    lang: str
    text: str
    line: int  # of the opening fence, 1-based
    ready: str | None = None


def guide_blocks(text: str) -> list[Block]:
    """The fenced blocks of a guide, each with the marker on the line just above it."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = lines[i]
        if not fence.startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        blocks.append(Block(marker.group(1) if marker else "none", fence[3:].strip(), "\n".join(lines[i + 1:end]),
                            i + 1, marker.group(2) if marker else None))
        i = end + 1
    return blocks


@dataclass
class Step:
    """A block the session runs, with the output the guide shows for it."""

    block: Block
    expect: list[str]
    output: str = ""

    def has(self, command: str) -> bool:
        return command in self.block.text


def guide_steps(guide: Path) -> list[Step]:
    blocks = guide_blocks(guide.read_text())
    unmarked = [b.line for b in blocks if b.lang == "sh" and b.kind == "none"]
    assert not unmarked, f"{guide.name}: sh blocks without a guide marker (run, background or skip) at lines {unmarked}"
    steps: list[Step] = []
    for b in blocks:
        if b.kind in ("run", "background"):
            assert b.lang == "sh", f"{guide.name} line {b.line}: a {b.kind} block must be ```sh"
            assert b.kind == "run" or b.ready, f"{guide.name} line {b.line}: a background block needs ready=\"TEXT\""
            steps.append(Step(b, []))
        elif b.kind == "expect":
            assert steps and not steps[-1].expect, f"{guide.name} line {b.line}: an expect block follows no run or background block"
            steps[-1].expect = [ln for ln in b.text.splitlines() if ln.strip()]
    return steps


def session_script(steps: list[Step], tmp: Path) -> str:
    """One bash script: the blocks in order, each after a line naming it; each background
    one started with `exec` (so $! is the command's own PID), its output to its own log, then
    waited for until ready. On exit the trap stops them by those PIDs, the last started first
    (SIGTERM: a command that started others stops them itself)."""
    out = ["set -eo pipefail",
           'guide_bg=""',
           'stop_background() { for p in $guide_bg; do kill -TERM "$p" 2>/dev/null || true; wait "$p" || true; done; }',
           "trap stop_background EXIT"]
    for n, guide_step in enumerate(steps):
        out.append(f"echo '{BLOCK_START.format(n)}'")
        if guide_step.block.kind == "run":
            out.append(guide_step.block.text)
            continue
        command = guide_step.block.text.strip()
        assert "\n" not in command.replace("\\\n", ""), "a background block must be one command"
        log, ready = tmp / f"background-{n}.log", guide_step.block.ready.replace("'", "'\\''")
        out += [f"( exec {command} ) > '{log}' 2>&1 &",
                'guide_bg="$! $guide_bg"',
                f"echo $! >> '{tmp / 'background.pids'}'",
                # Ready, or failed: at most 120 s (Envoy's start-up, a first registry poll).
                "for _ in $(seq 600); do",
                f"  grep -qF -- '{ready}' '{log}' && break",
                f"  kill -0 $! 2>/dev/null || {{ echo 'background block {n} exited:'; cat '{log}'; exit 1; }}",
                "  sleep 0.2",
                "done",
                f"grep -qF -- '{ready}' '{log}' || {{ echo 'background block {n} is not ready'; cat '{log}'; exit 1; }}"]
    return "\n".join(out) + "\n"


def expected_pattern(line: str, substitutions: dict[str, str]) -> re.Pattern:
    """A guide's expected line as a pattern: `…` is any text, runs of spaces are any spaces,
    the guide's defaults (addresses, say) are the session's."""
    for default, actual in substitutions.items():
        line = line.replace(default, actual)
    parts = [r"\s+".join(re.escape(w) for w in piece.split()) for piece in line.split("…")]
    # Spaces next to a `…` are taken by it; indentation is not compared.
    return re.compile(r"\s*" + ".*".join(parts) + r"\s*")


def assert_shows(step: Step, substitutions: dict[str, str]) -> None:
    """Every expected line (but the `…` ones) matches an output line, in order."""
    lines = step.output.splitlines()
    at = 0
    for want in step.expect:
        if want.strip() == "…":
            continue
        pattern = expected_pattern(want, substitutions)
        found = next((j for j in range(at, len(lines)) if pattern.fullmatch(lines[j])), None)
        assert found is not None, (f"guide line {step.block.line}: the output does not show {want!r} "
                                   f"(after line {at}):\n{step.output}")
        at = found + 1


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone (or the PID is another user's now)
        return False
    return True


def stop(pid: int) -> None:
    """A process the session could not stop: SIGTERM first (it stops what it started),
    SIGKILL if it does not exit."""
    for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        if not pid_alive(pid):
            return
        os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)


@dataclass
class Session:
    steps: list[Step]
    substitutions: dict[str, str]  # the guide's default -> the session's
    left_running: list[int]  # PIDs still alive once the session had ended (should be none)
    returncode: int
    transcript: str
    seconds: float
    extra: dict = field(default_factory=dict)

    def step(self, command: str) -> Step:
        found = [s for s in self.steps if s.has(command)]
        assert len(found) == 1, f"{len(found)} guide blocks run {command!r}"
        return found[0]

    def background(self) -> list[Step]:
        return [s for s in self.steps if s.block.kind == "background"]

    def assert_ran(self) -> None:
        logs = "\n".join(f"--- background (guide line {s.block.line}):\n{s.output[-3000:]}" for s in self.background())
        assert self.returncode == 0, f"the guide's session failed (exit {self.returncode}):\n{self.transcript[-6000:]}\n{logs}"


def run_session(guide: Path, tmp: Path, cwd: Path, env: dict[str, str], timeout: float,
                substitutions: dict[str, str], started_pids=None) -> Session:
    """Runs the guide's blocks in one bash session in `cwd`. `started_pids(step)` names the
    processes a background command says it started (checked and stopped like the command)."""
    steps = guide_steps(guide)
    script = tmp / "session.sh"
    script.write_text(session_script(steps, tmp))
    t0 = time.monotonic()
    left_running: list[int] = []
    p = None
    try:
        p = subprocess.run(["bash", str(script)], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    finally:
        # What the session started and did not stop (its trap should have): recorded for the
        # test, then stopped here.
        pids_file = tmp / "background.pids"
        pids = [int(x) for x in pids_file.read_text().split()] if pids_file.is_file() else []
        for n, s in enumerate(steps):
            log = tmp / f"background-{n}.log"
            if s.block.kind == "background":
                s.output = log.read_text(errors="replace") if log.is_file() else ""
                if started_pids is not None:
                    pids = started_pids(s) + pids
        left_running = [pid for pid in dict.fromkeys(pids) if pid_alive(pid)]
        for pid in left_running:
            stop(pid)
    chunks = re.split(r"^@@guide block (\d+)@@$", p.stdout, flags=re.M)
    for n, text in zip(chunks[1::2], chunks[2::2]):
        if steps[int(n)].block.kind == "run":  # a background block's output went to its log
            steps[int(n)].output = text
    return Session(steps, substitutions, left_running, p.returncode, p.stdout, time.monotonic() - t0)
