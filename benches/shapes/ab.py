"""Two or more builds of the evaluator side by side on the shape matrix's cached cells.

The matrix (run.py) compares edgescore with other libraries; this compares edgescore with
itself: before and after a change to the walk. Each build is a `peer-native` binary (copy
`target/release/peer-native` aside before rebuilding); every binary runs every cell and row
set in turn, round after round, pinned to one core, and the median ns/row is reported with the
ratio of each build to the first. Cells must have been trained by run.py first.

    cp target/release/peer-native /tmp/pn.before
    # ... change core/src/ensemble, then:
    cargo build --release -p edgescore-benches --features peer-native --bin peer-native
    .venv/bin/python -m benches.shapes.ab /tmp/pn.before target/release/peer-native \\
        --cells lgb_6f_4cat_t100,xgb_d6_t300 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from . import train
from .cells import MEDIUM, select
from .rows import ROW_SETS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", help="peer-native binaries; ratios are to the first")
    ap.add_argument("--cells", help="comma-separated cells (default: the medium set)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.3, help="per build, cell, row set and round")
    ap.add_argument("--cpu", default="1", help="the core every run is pinned to (taskset)")
    a = ap.parse_args()
    cells = select(a.cells.split(",") if a.cells else MEDIUM)
    runs: dict[tuple[str, str, str], list[float]] = {}
    for _ in range(a.rounds):
        for cell in cells:
            trained = train.load(cell)
            if trained is None:
                sys.exit(f"{cell.name} is not trained: run `.venv/bin/python -m benches.shapes.run --cells {cell.name}` first")
            model = f"{trained['dir']}/{trained['model']}"
            for rs in ROW_SETS:
                for build in a.builds:
                    out = subprocess.run(["taskset", "-c", a.cpu, build, model, f"{trained['dir']}/{rs}.csv", str(a.seconds)],
                                         capture_output=True, text=True, check=True)
                    runs.setdefault((cell.name, rs, build), []).append(json.loads(out.stdout)["ns_per_row"])
    width = max(len(c.name) for c in cells)
    print(f"{'cell':{width}} {'rows':8} " + " ".join(f"{'build ' + str(i):>12}" for i in range(len(a.builds)))
          + "  ratio to build 0 (max/min over rounds)")
    for cell in cells:
        for rs in ROW_SETS:
            per = [runs[(cell.name, rs, b)] for b in a.builds]
            medians = [statistics.median(r) for r in per]
            ratios = " ".join(f"{m / medians[0]:.2f} ({max(r) / min(r):.2f})" for m, r in zip(medians[1:], per[1:]))
            print(f"{cell.name:{width}} {rs:8} " + " ".join(f"{m:12.1f}" for m in medians) + "  " + ratios)
    for i, b in enumerate(a.builds):
        print(f"build {i}: {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
