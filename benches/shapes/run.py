"""The shape matrix (issue 12): edgescore against its peers on models of many shapes.

For every cell of cells.py: train the model with its library (cached), write the two row sets
("between", "skewed"; rows.py) and the library's own predictions on them, build every peer that
applies (cached), check that each peer gives the library's predictions on every row (a peer that
disagrees by more than 1e-5 is not timed), then time them single-row, single-thread, in native
loops, in interleaved rounds (round 1: every peer of cell 1 on both row sets, then cell 2 ...;
round 2 again ...). Reports the median ns/row per peer, the ratios edgescore ÷ peer, and the
wasm/native and V8/native ratios of edgescore's evaluator (benches/score_guest in wasmtime and
in Node.js).

Usage: .venv/bin/python -m benches.shapes.run [--quick | --medium | --cells a,b] [--seconds 1]
         [--rounds 3] [--no-lleaves | --cached-lleaves] [--no-wasm] [--no-v8] [--skip peer,peer] [--rebuild]
         [--json PATH] [--write-readme] [--list] [--report RUN.json]
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ[_v] = "1"  # inherited by every harness and worker

import argparse
import datetime as _dt
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from . import report, train
from .cells import CELLS, MEDIUM, QUICK, select
from .peers import (
    edgescore,
    lightgbm_capi,
    lleaves,
    onnxruntime,
    tl2cgen,
    v8,
    wasm,
    xgboost_capi,
)
from .peers.harness import NICE, ROOT, NotApplicable, max_diff, measure
from .rows import ROW_SETS

HERE = Path(__file__).resolve().parent
PEERS = [edgescore, tl2cgen, lleaves, lightgbm_capi, xgboost_capi, onnxruntime]
TOLERANCE = 1e-5  # max |peer - library| over every row, probabilities


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cargo(*args: str) -> None:
    log(f"cargo {' '.join(args)} ...")
    subprocess.run([*NICE, "cargo", *args], cwd=ROOT, check=True)


def ensure_binaries(with_wasm: bool) -> None:
    # Always through cargo (a no-op when up to date): a binary that merely exists may predate
    # the evaluator or the artifact format being measured.
    cargo("build", "--release", "-p", "edgescore-compile")
    cargo("build", "--release", "-p", "edgescore-benches", "--features", "peer-native", "--bin", "peer-native")
    if with_wasm:
        cargo("build", "--profile", "wasm", "--target", "wasm32-wasip1", "-p", "edgescore-score-guest")
        cargo("build", "--release", "-p", "edgescore-benches", "--features", "shape-wasm", "--bin", "shape-wasm")


def trained_model(cell, rebuild: bool) -> dict:
    cached = None if rebuild else train.load(cell)
    if cached:
        return cached
    log(f"{cell.name}: training {cell.library}, {cell.trees} rounds/estimators ...")
    out = subprocess.run([*NICE, sys.executable, "-m", "benches.shapes.train", cell.name], cwd=ROOT, check=False,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"training {cell.name} failed:\n{out.stderr[-3000:]}")
    meta = json.loads(out.stdout.strip().splitlines()[-1])
    log(f"  trained in {meta['train_s']:.1f} s")
    return meta


def check(p, trained: dict) -> tuple[str, str, dict]:
    """("ok" | "disagrees" | "failed", reason, max |diff| per row set) against the library."""
    diffs = {}
    for rs in ROW_SETS:
        expected = np.load(Path(trained["dir"]) / f"{rs}.expected.npy")
        try:
            preds = p.check(rs) if p.check else measure(p, rs, 0.001, len(expected))["preds"]
            diffs[rs] = max_diff(preds, expected)
        except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            return "failed", str(e).strip().splitlines()[-1][:300], diffs
    worst = max(diffs.values())
    if worst > TOLERANCE:
        return "disagrees", f"max |diff| {worst:.2e} from the library's predictions (> {TOLERANCE:g})", diffs
    return "ok", "", diffs


def admit(cell, trained: dict, key: str, prepare, results: dict, prepared: dict) -> None:
    """Builds one peer of a cell (`prepare()`), checks it against the library, and records the
    outcome in `results` (per row set); a peer that agrees joins `prepared`, to be timed."""
    log(f"{cell.name}: building {key} ...")
    t0 = time.monotonic()
    try:
        p = prepare()
    except NotApplicable as e:
        for rs in ROW_SETS:
            results[rs][key] = {"status": "n/a", "reason": str(e)}
        return
    status, reason, diffs = check(p, trained)
    log(f"  {key}: {status} {reason} ({time.monotonic() - t0:.0f} s; max|diff| "
        + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()) + ")")
    for rs in ROW_SETS:
        results[rs][key] = {"status": status, "reason": reason, "max_abs_diff": diffs.get(rs), "runs_ns": [],
                            "build": p.build}
    if status == "ok":
        prepared[key] = p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"{len(QUICK)} small cells, no lleaves, 0.2 s x 2 rounds")
    ap.add_argument("--medium", action="store_true", help=f"the {len(MEDIUM)} cells of cells.MEDIUM")
    ap.add_argument("--cells", default="", help="comma-separated cell names (see --list)")
    ap.add_argument("--seconds", type=float, help="time budget per peer per row set per round (default 1, quick 0.2)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds; the median is reported (default 3, quick 2)")
    ap.add_argument("--no-lleaves", action="store_true", help="skip lleaves (its LLVM compile takes minutes per model)")
    ap.add_argument("--cached-lleaves", action="store_true",
                    help="lleaves only on cells whose compiled model is cached (no LLVM compile in this run)")
    ap.add_argument("--no-wasm", action="store_true", help="skip the wasm/native measurement")
    ap.add_argument("--no-v8", action="store_true", help="skip the V8/native measurement (Node.js)")
    ap.add_argument("--skip", default="", help="comma-separated peers to skip")
    ap.add_argument("--rebuild", action="store_true", help="retrain and rebuild everything cached in build/")
    ap.add_argument("--json", type=Path, default=HERE / "build" / "last_run.json")
    ap.add_argument("--write-readme", action="store_true",
                    help="write the results section of benches/shapes/README.md and benches/shapes/heatmap.png")
    ap.add_argument("--list", action="store_true", help="list the cells and exit")
    ap.add_argument("--report", type=Path, help="render a saved run's JSON again (with --write-readme: into the README)")
    a = ap.parse_args()

    if a.report:
        render(json.loads(a.report.read_text()), a.write_readme)
        return 0
    if a.list:
        for c in CELLS:
            print(f"{c.name:28} {c.library:10} {c.total_trees:>6} trees  {report.shape(c):28} axis: {c.axis}")
        return 0
    names = [n for n in a.cells.split(",") if n] or (QUICK if a.quick else MEDIUM if a.medium else [c.name for c in CELLS])
    cells = select(names)
    seconds = a.seconds if a.seconds is not None else (0.2 if a.quick else 1.0)
    rounds = a.rounds if a.rounds is not None else (2 if a.quick else 3)
    skip = {s for s in a.skip.split(",") if s} | ({"lleaves"} if (a.no_lleaves or a.quick) else set())
    peers = [m for m in PEERS if m.KEY not in skip]
    with_wasm = not a.no_wasm and "wasm" not in skip
    with_v8 = not a.no_v8 and "v8" not in skip
    started = _dt.datetime.now().astimezone()
    t_start = time.monotonic()
    load_before = os.getloadavg()
    (HERE / "build").mkdir(exist_ok=True)
    ensure_binaries(with_wasm or with_v8)

    # 1. models and rows; 2. peers built; 3. every peer checked against the library -- all before
    # any timing, so builds never share the machine with a measurement.
    trained, prepared, results = {}, {}, {}
    for cell in cells:
        trained[cell.name] = trained_model(cell, a.rebuild)
    for cell in cells:
        prepared[cell.name] = {}
        results[cell.name] = {rs: {} for rs in ROW_SETS}
        t = trained[cell.name]
        for m in peers:
            if not m.applies(cell):
                continue
            if m is lleaves and a.cached_lleaves and not a.rebuild and not lleaves.cached(cell, t):
                for rs in ROW_SETS:
                    results[cell.name][rs][m.KEY] = {"status": "n/a", "reason": "not compiled yet (--cached-lleaves)"}
                continue
            admit(cell, t, m.KEY, lambda: m.prepare(cell, t, a.rebuild), results[cell.name], prepared[cell.name])
        es = prepared[cell.name].get("edgescore")
        if with_wasm and es:
            prepared[cell.name]["wasm"] = wasm.prepare(cell, t, es.esm)
            for rs in ROW_SETS:
                results[cell.name][rs]["wasm"] = {"status": "ok", "reason": "", "runs_ns": [], "runs_native_ns": []}
        if with_v8 and es:
            # Checked against the library like a peer: V8 runs the same guest, not the same code.
            admit(cell, t, v8.KEY, lambda: v8.prepare(cell, t, es.esm), results[cell.name], prepared[cell.name])

    # 4. interleaved rounds
    for rnd in range(rounds):
        for cell in cells:
            for rs in ROW_SETS:
                for key, p in prepared[cell.name].items():
                    entry = results[cell.name][rs][key]
                    if entry["status"] != "ok":
                        continue
                    try:
                        r = measure(p, rs, seconds, 0)
                    except Exception as e:  # noqa: BLE001
                        entry.update(status="failed", reason=str(e).strip().splitlines()[-1][:300])
                        log(f"  {cell.name} {rs} {key} FAILED: {entry['reason']}")
                        continue
                    entry["runs_ns"].append(r["ns_per_row"])
                    if key == "wasm":
                        entry["runs_native_ns"].append(r["native_ns_per_row"])
                    log(f"[round {rnd + 1}/{rounds}] {cell.name} {rs:7} {key:14} {r['ns_per_row']:>12,.1f} ns/row")
    for cell in cells:
        for rs in ROW_SETS:
            for key, entry in results[cell.name][rs].items():
                runs = entry.get("runs_ns") or []
                if entry["status"] == "ok" and runs:
                    entry["ns_per_row"] = statistics.median(runs)
                    entry["spread"] = max(runs) / min(runs)
                    if key == "wasm":
                        entry["native_ns_per_row"] = statistics.median(entry["runs_native_ns"])
                        entry["ratio"] = statistics.median(w / n for w, n in zip(runs, entry["runs_native_ns"]))
                elif entry["status"] == "ok":
                    entry.update(status="failed", reason="no timing")
            results[cell.name][rs]["ratios"] = report.ratios(results[cell.name][rs])

    # 5. report
    elapsed = time.monotonic() - t_start
    cmd = " ".join([".venv/bin/python -m benches.shapes.run", *sys.argv[1:]])
    doc = {"date": started.isoformat(timespec="seconds"), "host": platform.node(), "cpus": os.cpu_count(),
           "command": cmd, "seconds": seconds, "rounds": rounds, "rows": {c.name: c.bench_rows for c in cells}, "tolerance": TOLERANCE,
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "wall_s": elapsed,
           "versions": train.versions(),
           "cells": {c.name: {"spec": c.spec(), "total_trees": c.total_trees, "trained": trained[c.name],
                              "results": results[c.name]} for c in cells}}
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(doc, indent=2, default=str))
    log(f"wrote {a.json}")
    render(doc, a.write_readme)
    return 0


def row_counts(rows: int | dict[str, int]) -> str:
    """The rows per set of a run: one number (runs before the counts depended on the cell) or
    the range of the cells'."""
    if isinstance(rows, int):
        return f"{rows:,}"
    low, high = min(rows.values()), max(rows.values())
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def render(doc: dict, write_readme: bool) -> None:
    """The report of a run (its JSON document): printed, the heat map, and the README section."""
    cells = select(list(doc["cells"]))
    started = _dt.datetime.fromisoformat(doc["date"])
    header = (f"{started:%Y-%m-%d %H:%M %Z}, {doc['host']} ({doc['cpus']} CPUs, load average "
              f"{doc['loadavg_before'][0]:.1f} before, {doc['loadavg_after'][0]:.1f} after), {len(cells)} cells x "
              f"{len(ROW_SETS)} row sets x {row_counts(doc['rows'])} rows, {doc['seconds']:g} s per peer x {doc['rounds']} "
              f"interleaved rounds (median), {doc['wall_s'] / 60:.1f} min wall")
    results = {c: doc["cells"][c]["results"] for c in doc["cells"]}
    plain = {c: {rs: {k: v for k, v in results[c][rs].items() if k != "ratios"} for rs in ROW_SETS} for c in results}
    table = report.markdown(cells, plain)
    why = report.notes(cells, plain)
    text = "\n".join([f"`{doc['command']}`: {header}", "", report.summary(cells, plain), "", *table, "",
                      *(["Peers not reported:", "", *why] if why else [])])
    print(text, flush=True)
    png = HERE / "heatmap.png" if write_readme else HERE / "build" / "heatmap.png"
    report.heatmap(cells, plain, png, f"edgescore ÷ faster compiled peer, {started:%Y-%m-%d}")
    log(f"wrote {png}")
    if write_readme:
        report.write_readme(HERE / "README.md", text + "\n\n![heat map](heatmap.png)\n")
        log(f"wrote {HERE / 'README.md'}")

if __name__ == "__main__":
    sys.exit(main())
