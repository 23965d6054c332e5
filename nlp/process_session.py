"""Finding and ending the processes of one Unix session, read from /proc (Linux).

The local service's supervisor starts in a session of its own (setsid). Ray's GCS, raylet,
agents and every worker it forks stay in that session, even those that move to another
process group, so "the processes of the supervisor's session" is exactly what the service
started: stopping them never touches another engineer's Ray.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    session: int
    start_ticks: int  # start time in clock ticks after boot: tells a reused PID apart
    command: str


def read_process(pid: int) -> ProcessInfo | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name in parentheses may contain spaces; fields resume after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    state, session, start_ticks = fields[0], int(fields[3]), int(fields[19])
    if state == "Z":  # exited, waiting to be reaped: nothing left to stop
        return None
    command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return ProcessInfo(pid=pid, session=session, start_ticks=start_ticks, command=command)


def session_processes(session: int) -> list[ProcessInfo]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = read_process(int(entry))
            if info is not None and info.session == session:
                found.append(info)
    return found


def same_process(recorded: ProcessInfo) -> bool:
    """The recorded process is still running (not a new one that got its PID)."""
    current = read_process(recorded.pid)
    return current is not None and current.start_ticks == recorded.start_ticks


def terminate_session(session: int, grace_s: float) -> list[ProcessInfo]:
    """SIGTERM every process of the session, SIGKILL what is left after grace_s.

    Returns the processes that had to be killed. The caller's own process is skipped.
    """
    own = os.getpid()
    targets = [p for p in session_processes(session) if p.pid != own]
    _signal_all(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(same_process(p) for p in targets):
        time.sleep(0.1)
    leftovers = [p for p in targets if same_process(p)]
    # Workers forked during the grace period are in the session too.
    leftovers += [
        p for p in session_processes(session) if p.pid != own and p.pid not in {t.pid for t in targets}
    ]
    _signal_all(leftovers, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(same_process(p) for p in leftovers):
        time.sleep(0.05)
    return leftovers


def _signal_all(processes: list[ProcessInfo], sig: signal.Signals) -> None:
    for process in processes:
        if same_process(process):
            try:
                os.kill(process.pid, sig)
            except ProcessLookupError:
                pass
