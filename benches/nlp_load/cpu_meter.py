"""CPU seconds used by the processes of one Unix session, per role, read from /proc (Linux).

The local NLP service runs in a session of its own (nlp.run starts its supervisor with
setsid; Ray's GCS, raylet, agents, proxy, controller and replicas stay in it), so a
before/after pair of readings gives the CPU of the whole service and nothing else: the load
generator is another process in another session and is measured on its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nlp.process_session import session_processes

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# Ray names its worker processes by what they run (setproctitle); the rest by executable.
ROLES = (
    ("ServeReplica", "replica"),
    ("ProxyActor", "serve proxy"),
    ("ServeController", "serve controller"),
    ("raylet", "raylet"),
    ("gcs_server", "gcs"),
    ("DashboardAgent", "ray agents"),
    ("RuntimeEnvAgent", "ray agents"),
    ("dashboard", "ray agents"),
    ("log_monitor", "ray agents"),
    ("monitor.py", "ray agents"),
    ("nlp.local_service", "supervisor"),
)


def role_of(command: str) -> str:
    for needle, role in ROLES:
        if needle in command:
            return role
    return "other ray workers"


@dataclass(frozen=True)
class Reading:
    by_pid: dict[int, tuple[str, float]]  # pid -> (role, CPU seconds since it started)


def read_session(session: int) -> Reading:
    by_pid = {}
    for process in session_processes(session):
        seconds = _cpu_seconds(process.pid)
        if seconds is not None:
            by_pid[process.pid] = (role_of(process.command), seconds)
    return Reading(by_pid)


def cpu_by_role(before: Reading, after: Reading) -> dict[str, float]:
    """CPU seconds per role between two readings (a process started in between counts whole)."""
    roles: dict[str, float] = {}
    for pid, (role, seconds) in after.by_pid.items():
        start = before.by_pid.get(pid, (role, 0.0))[1]
        roles[role] = roles.get(role, 0.0) + max(0.0, seconds - start)
    return roles


def _cpu_seconds(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLOCK_TICKS
