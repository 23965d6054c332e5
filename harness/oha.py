"""`oha` (crates.io), the load generator of the benches that need an open loop: at a fixed
rate (`-q`) it sends on schedule whatever the answers' latency and corrects the latencies for
coordinated omission, so its percentiles are what a client sees at that load. `make
bench-swap` and `make bench-envoy` install it in target/tools/bin."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OHA = ROOT / "target" / "tools" / "bin" / "oha"
# One browser-like request (oha sends the same one every time).
HEADERS = (
    "user-agent: Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "accept: text/html,application/xhtml+xml",
    "accept-language: en-US,en;q=0.5",
)
PATH = "/products/shoes?color=blue"


def find(path: Path = OHA) -> Path:
    if not path.is_file():
        raise SystemExit(f"no oha at {path}: `make bench-swap` or `make bench-envoy` installs it")
    return path


def run(oha: Path, port: int, seconds: float, connections: int, rate: float | None = None,
        db: Path | None = None) -> dict:
    """One run against 127.0.0.1:`port`; oha's JSON report. With `rate`, open loop with latency
    correction; with `db`, every request's record goes to that SQLite file."""
    args = [str(oha), "--no-tui", "--output-format", "json", "-z", f"{seconds}s", "-c", str(connections)]
    for h in HEADERS:
        args += ["-H", h]
    if rate is not None:
        args += ["-q", str(rate), "--latency-correction"]
    if db is not None:
        args += ["--db-url", str(db)]
    args.append(f"http://127.0.0.1:{port}{PATH}")
    p = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 120)
    if p.returncode != 0:
        raise RuntimeError(f"oha failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout)
