"""Two or more `edgescore` CLI builds against each other on one model, back to back.

Each round runs every build once, alternating their order, each compiling MODEL to its own
output (replaced every round, as a re-compile does). Prints the median, quartiles and the
ratio to the first build. Used for the arena's A/B in README.md; unlike run.py it times
builds, not the libraries, so no Python process runs between the compiles.

    .venv/bin/python benches/compile_time/ab.py OLD_CLI NEW_CLI --model /tmp/ct/cb.cbm [--rounds 60]
"""
import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("clis", nargs="+", help="edgescore binaries; ratios are to the first")
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=60)
    a = ap.parse_args()
    times = {c: [] for c in a.clis}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for cli in a.clis if r % 2 == 0 else a.clis[::-1]:
                out = Path(tmp) / f"{a.clis.index(cli)}.esm"
                t = time.perf_counter()
                subprocess.run([cli, "compile", a.model, "-o", str(out)], check=True, capture_output=True)
                times[cli].append((time.perf_counter() - t) * 1e3)
    base = statistics.median(times[a.clis[0]])
    for cli, v in times.items():
        v.sort()
        m = statistics.median(v)
        print(f"{cli}: median {m:.2f} ms, p25 {v[len(v) // 4]:.2f}, p75 {v[3 * len(v) // 4]:.2f}, ratio {m / base:.3f}")


if __name__ == "__main__":
    main()
