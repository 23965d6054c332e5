"""What every peer module shares: the peer interface, running a harness process and reading
its output (`pred <i> <values>...` lines, then one JSON line with ns_per_row and calls)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benches.peers.run import last_json

ROOT = Path(__file__).resolve().parents[3]
SHAPES = ROOT / "benches" / "shapes"
CFLAGS = ["-O3", "-march=native"]
NICE = ["nice", "-n", "10"]  # builds share the machine with other work


class NotApplicable(Exception):
    """The peer cannot run this cell (wrong library, a converter that refuses the model...)."""


@dataclass
class Prepared:
    """A peer built for one cell: how to time one row set."""

    peer: str
    cell: str
    command: object  # (row_set, seconds, n_check) -> argv
    parse: object = None  # optional custom parser of (stdout) -> dict
    check: object = None  # optional (row_set) -> predictions, when the timed run prints none
    esm: Path | None = None  # edgescore's artifact (for the wasm runner)
    build: dict | None = None  # what building the peer cost (cached or not)


def run(cmd, timeout: float = 3600, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], check=False, capture_output=True, text=True, timeout=timeout, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))[:300]} failed ({r.returncode}):\n{r.stdout[-1500:]}"
                           f"\n{r.stderr[-3000:]}")
    return r


def c_harness(source: Path, library_dir: Path, library: str, tag: str) -> Path:
    """The C loop `source` linked against a wheel's shared `library` (in `library_dir`, found
    there at run time too), built once per `tag` and again when the source changes."""
    exe = SHAPES / "build" / f"{tag}.harness"
    if not exe.exists() or exe.stat().st_mtime < source.stat().st_mtime:
        exe.parent.mkdir(parents=True, exist_ok=True)
        run([*NICE, "gcc", *CFLAGS, f"-I{source.parent}", source, f"-L{library_dir}", f"-l:{library}",
             f"-Wl,-rpath,{library_dir}", "-o", exe])
    return exe


def predictions(stdout: str) -> np.ndarray:
    """The `pred <i> v0 v1 ...` lines as a [rows, outputs] array."""
    rows = [[float(v) for v in line.split()[2:]] for line in stdout.splitlines() if line.startswith("pred ")]
    return np.array(rows, dtype=np.float64)


def measure(prepared: Prepared, row_set: str, seconds: float, n_check: int) -> dict:
    out = run(prepared.command(row_set, seconds, n_check), timeout=600 + 20 * seconds).stdout
    if prepared.parse:
        return prepared.parse(out)
    j = last_json(out)
    return {"ns_per_row": j["ns_per_row"], "calls": j["calls"], "preds": predictions(out)}


def max_diff(preds: np.ndarray, expected: np.ndarray) -> float:
    """Largest absolute difference from the library's own predictions. A peer that gives both
    classes of a binary model is compared on class 1; rows compared = the rows it printed."""
    preds = np.atleast_2d(preds)
    if preds.shape[1] == expected.shape[1] + 1 and expected.shape[1] == 1:
        preds = preds[:, -1:]
    if preds.shape[1] != expected.shape[1] or len(preds) == 0:
        raise ValueError(f"outputs of shape {preds.shape}, expected [*, {expected.shape[1]}]")
    return float(np.max(np.abs(preds - expected[: len(preds)])))
