"""edgescore: `target/release/peer-native MODEL ROWS.csv SECONDS` (compiles the trained model
in memory, then `TreeEnsemble::score` per row in a Rust loop). peer-native prints only timings,
so the predictions checked are `edgescore score` on the artifact `edgescore compile` writes
(the same compiler and evaluator)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .harness import ROOT, Prepared, run

KEY = "edgescore"
HOW = "native loop (Rust, peer-native)"
COMPILED = False
PEER_NATIVE = ROOT / "target" / "release" / "peer-native"
CLI = ROOT / "target" / "release" / "edgescore"


def applies(cell) -> bool:
    return True


def compile_artifact(cell_dir: Path, model: Path) -> Path:
    esm = cell_dir / "model.esm"
    run([CLI, "compile", model, "-o", esm])
    return esm


def prepare(cell, trained: dict, rebuild: bool) -> Prepared:
    d = Path(trained["dir"])
    model = d / trained["model"]
    esm = compile_artifact(d, model)

    def command(row_set, seconds, n_check):
        return [PEER_NATIVE, model, d / f"{row_set}.csv", seconds]

    return Prepared(KEY, cell.name, command, check=lambda row_set: scores(esm, d / f"{row_set}.csv"), esm=esm)


def scores(esm: Path, csv: Path) -> np.ndarray:
    """`edgescore score` of every row: the reported outputs, comma-separated per line."""
    out = run([CLI, "score", esm, "--csv", csv]).stdout
    return np.array([[float(v) for v in line.split(",")] for line in out.splitlines() if line.strip()])
