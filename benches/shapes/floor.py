"""Where edgescore's time goes against compiled code, in counts: per scored row, callgrind's
instructions, conditional branches, simulated branch mispredictions and L1 data misses of the
scoring function, for edgescore (`peer-native`), tl2cgen and lleaves on the cached cells.
With `--wasm`, also the evaluator in wasmtime against the same loop natively, in one
`shape-wasm` process (`native_passes` and `wasm_passes`, Cranelift's code counted as it runs):
where the wasm/native ratio comes from.

Counts are repeatable on a noisy machine, unlike times. The branch predictor and caches are
callgrind's simulations (a 2-bit-counter predictor, no global history), not the CPU's: they
rank the peers' branch behaviour, they do not give its cost. Cells and peers must have been
built by run.py first.

    .venv/bin/python -m benches.shapes.floor --cells xgb_d6_t10,lgb_defaults_t100
    .venv/bin/python -m benches.shapes.floor --cells xgb_d6_t10,cb_d6_t300 --wasm --no-compiled
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from . import train
from .cells import select
from .peers import edgescore, lleaves, tl2cgen, wasm
from .peers.harness import ROOT
from .rows import ROW_SETS

EVENTS = ("Ir", "Bc", "Bcm", "D1mr")
# The function each peer scores a row in, as callgrind names it: the first of these found.
# (LLVM may inline `score` into peer-native's loop, leaving `with_outputs`, which does all of
# its work, out of line.)
FUNCTION = {"edgescore": ("TreeEnsemble::score ", "TreeEnsemble::with_outputs "), "tl2cgen": ("???:predict",),
            "lleaves": ("forest_root",)}


def profile(cmd: list, env: dict | None = None) -> str:
    """callgrind_annotate's inclusive listing of one callgrind run of `cmd`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        subprocess.run(["valgrind", "--tool=callgrind", "--branch-sim=yes", "--cache-sim=yes",
                        f"--callgrind-out-file={out}", *map(str, cmd)],
                       check=True, capture_output=True, env=env)
        return subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", f"--show={','.join(EVENTS)}", str(out)],
                              check=True, capture_output=True, text=True).stdout


def counts(cmd: list, functions: tuple[str, ...], calls: int, env: dict | None = None) -> dict:
    """Per-call inclusive counts of the first of `functions` in one callgrind run of `cmd`."""
    return per_call(profile(cmd, env), functions, calls, cmd[0])


def per_call(text: str, functions: tuple[str, ...], calls: int, program) -> dict:
    """The inclusive counts of the first of `functions` in `text`, divided by `calls`.

    callgrind_annotate lists a function once per source file its lines come from (code inlined
    from the standard library under the library's file), and once more, under its own file's
    absolute path, for all of them: the largest count is the whole function (the own file's
    line alone leaves out inlined library code such as the sigmoid's `exp`, ~110 instructions a
    row)."""
    listing = text.split("-- Auto-annotated source")[0].split("-- User-annotated source")[0]
    for function in functions:
        # "N (p%)  file:function [object]", the object only on some lines.
        found = [[int(v.replace(",", "")) for v in re.findall(r"([\d,]+) \(", line)]
                 for line in listing.splitlines() if re.sub(r" \[[^]]*\]$", "", line.rstrip()).endswith(function.rstrip())]
        if found:
            return {e: v / calls for e, v in zip(EVENTS, max(found))}
    raise RuntimeError(f"none of {functions} in the profile of {program}")


# The bench builds the C peers with `-march=native`; valgrind stops at AVX-512 (SIGILL), so
# they are rebuilt for AVX2 at most to be counted.
VALGRIND_CFLAGS = ["-O3", "-march=x86-64-v3"]


def lleaves_for_valgrind(model: Path, out: Path) -> Path:
    """The model compiled by lleaves for x86-64-v3 (AVX2) instead of the host (the bench's
    object uses AVX-512; this compile takes as long as the bench's), and its harness."""
    obj, exe = out / "lleaves-v3.o", out / "lleaves-harness"
    subprocess.run([sys.executable, ROOT / "benches" / "peers" / "run.py", "--worker", "lleaves-compile", model, obj, "x86-64-v3"],
                   check=True, capture_output=True)
    subprocess.run(["gcc", *VALGRIND_CFLAGS, lleaves.HARNESS, obj, "-lm", "-o", exe], check=True)
    return exe


def tl2cgen_for_valgrind(built: Path, out: Path) -> Path:
    """tl2cgen's C and the harness rebuilt for AVX2 at most."""
    objects = []
    for c in sorted(built.glob("*.c")):
        objects.append(out / c.with_suffix(".o").name)
        subprocess.run(["gcc", *VALGRIND_CFLAGS, "-c", c, "-o", objects[-1]], check=True)
    return tl2cgen.link_harness(built, objects, VALGRIND_CFLAGS, out / "harness")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", required=True, help="comma-separated cells")
    ap.add_argument("--json", type=Path, help="write the counts here")
    ap.add_argument("--peer-native", type=Path, default=edgescore.PEER_NATIVE, help="the edgescore build to count")
    ap.add_argument("--no-lleaves", action="store_true", help="skip lleaves (compiled here for AVX2: minutes per model)")
    ap.add_argument("--no-compiled", action="store_true", help="skip tl2cgen and lleaves (with --wasm: edgescore only)")
    ap.add_argument("--wasm", action="store_true", help="also count shape-wasm's native and wasm passes")
    ap.add_argument("--guest", type=Path, default=wasm.GUEST, help="the score guest to count with --wasm")
    a = ap.parse_args()
    rows_out = []
    with tempfile.TemporaryDirectory(prefix="floor-") as scratch:
        for cell in select(a.cells.split(",")):
            rows_out += count_cell(cell, Path(scratch) / cell.name, a)
    if a.json:
        a.json.write_text(json.dumps(rows_out, indent=1))
    return 0


def count_cell(cell, scratch: Path, a) -> list[dict]:
    """The counts of one cell, every peer on both row sets."""
    rows_out = []
    t = train.load(cell)
    if t is None:
        sys.exit(f"{cell.name}: not trained yet (run benches.shapes.run --cells {cell.name} first)")
    d = Path(t["dir"])
    n_rows = t["rows"]
    builds = {}
    scratch.mkdir(parents=True)
    if tl2cgen.applies(cell) and not a.no_compiled:
        builds["tl2cgen"] = tl2cgen_for_valgrind(Path(tl2cgen.build(cell, t, False)["dir"]), scratch)
    if lleaves.applies(cell) and not (a.no_lleaves or a.no_compiled):
        builds["lleaves"] = lleaves_for_valgrind(d / t["model"], scratch)
    esm = edgescore.compile_artifact(d, d / t["model"]) if a.wasm else None
    for rs in ROW_SETS:
        env = {"EDGESCORE_PASSES": "1", "PATH": "/usr/bin:/bin"}
        # peer-native: a warm-up pass and one timed pass; the C harnesses likewise with a
        # budget too small for a second pass.
        found = {"edgescore": counts([a.peer_native, d / t["model"], d / f"{rs}.csv"], FUNCTION["edgescore"], 2 * n_rows, env)}
        if a.wasm:
            # The JIT compile runs under valgrind too (a minute for a large model); only the
            # two pass functions are counted.
            text = profile([wasm.RUNNER, esm, a.guest, d / f"{rs}.csv", 0], env)
            found["native"] = per_call(text, ("shape_wasm::native_passes",), n_rows, wasm.RUNNER)
            found["wasm"] = per_call(text, ("shape_wasm::wasm_passes",), n_rows, wasm.RUNNER)
        for peer, exe in builds.items():
            extra = [t["outputs"]] if peer == "lleaves" else []
            found[peer] = counts([exe, d / f"{rs}.f32", t["features"], "1e-9", 0, *extra], FUNCTION[peer], 2 * n_rows)
        for peer, c in found.items():
            rows_out.append({"cell": cell.name, "rows": rs, "peer": peer, **c})
            print(f"{cell.name:22} {rs:8} {peer:10} " + "  ".join(f"{e} {c[e]:>9,.1f}" for e in EVENTS), flush=True)
        if a.wasm:
            print(f"{cell.name:22} {rs:8} wasm ÷ native (instructions) {found['wasm']['Ir'] / found['native']['Ir']:.2f}", flush=True)
    return rows_out


if __name__ == "__main__":
    sys.exit(main())
