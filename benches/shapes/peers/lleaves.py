"""lleaves (LightGBM only): `lleaves.Model.compile(fblocksize=num_trees)` writes an LLVM object
file, linked into benches/peers/lleaves_harness.c, which calls `forest_root(row, out, 0, 1)` per
row in a C loop. The compile is benches/peers' worker (with its shim for llvmlite >= 0.45) and
is SLOW: about 6 minutes for 300 trees of 31 leaves on the 2-core bench machine. Cached in
build/lleaves-<hash of model + versions>.o; `--no-lleaves` skips this peer."""

from __future__ import annotations

import importlib.metadata as md
import json
import platform
import sys
import time
from pathlib import Path

from benches.peers.run import last_json, sha

from .harness import CFLAGS, NICE, ROOT, NotApplicable, Prepared, run

KEY = "lleaves"
HOW = "native loop (C harness linked to lleaves' .o)"
COMPILED = True
HARNESS = ROOT / "benches" / "peers" / "lleaves_harness.c"
BUILD = ROOT / "benches" / "shapes" / "build"


def applies(cell) -> bool:
    return cell.library == "lightgbm"


def object_path(cell, trained: dict) -> Path:
    """Where the compiled model is cached (by model, lleaves and llvmlite versions, machine)."""
    model = Path(trained["dir"]) / trained["model"]
    key = sha(model, md.version("lleaves"), md.version("llvmlite"), platform.machine())
    return BUILD / f"lleaves-{cell.name}-{key}.o"


def cached(cell, trained: dict) -> bool:
    obj = object_path(cell, trained)
    return obj.exists() and obj.with_suffix(".json").exists()


def build(cell, trained: dict, rebuild: bool) -> dict:
    model = Path(trained["dir"]) / trained["model"]
    obj = object_path(cell, trained)
    meta_path = obj.with_suffix(".json")
    exe = obj.with_suffix(".harness")
    if meta_path.exists() and obj.exists() and not rebuild:
        meta = json.loads(meta_path.read_text())
    else:
        obj.unlink(missing_ok=True)
        t0 = time.perf_counter()
        # benches/peers' worker (its llvmlite shim), niced: LLVM -O3 for minutes.
        r = last_json(run([*NICE, sys.executable, ROOT / "benches" / "peers" / "run.py", "--worker",
                           "lleaves-compile", model, obj], timeout=6 * 3600).stdout)
        meta = {"compile_s": r["compile_s"], "wall_s": time.perf_counter() - t0, "shim": r.get("shim"),
                "lleaves": md.version("lleaves"), "llvmlite": md.version("llvmlite")}
        meta_path.write_text(json.dumps(meta, indent=2))
    run([*NICE, "gcc", *CFLAGS, HARNESS, obj, "-lm", "-o", exe])
    return {**meta, "obj": str(obj), "exe": str(exe)}


def prepare(cell, trained: dict, rebuild: bool) -> Prepared:
    try:
        art = build(cell, trained, rebuild)
    except Exception as e:
        raise NotApplicable(f"lleaves: {str(e).strip().splitlines()[-1][:200]}") from e
    d = Path(trained["dir"])

    def command(row_set, seconds, n_check):
        return [art["exe"], d / f"{row_set}.f32", trained["features"], seconds, n_check, trained["outputs"]]

    return Prepared(KEY, cell.name, command, build=art)
