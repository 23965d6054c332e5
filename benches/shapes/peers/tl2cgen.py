"""tl2cgen: treelite imports the model (XGBoost JSON, LightGBM text, or the sklearn estimator),
tl2cgen generates C, gcc -O3 -march=native compiles it, and benches/peers/tl2cgen_harness.c
calls `predict()` per row in a C loop. Cached in build/tl2cgen-<hash of model + versions +
flags>. Models of more than ~10,000 nodes are split by tl2cgen's `parallel_comp` into one C
file per ~10,000 nodes: gcc's -O3 time grows faster than linearly with the size of one file
(a 100-tree depth-10 random forest in one file took more than 6 minutes); the generated trees
are the same."""

from __future__ import annotations

import json
import pickle
import re
import time
from pathlib import Path

from benches.peers.run import sha

from .harness import CFLAGS, NICE, ROOT, NotApplicable, Prepared, run

KEY = "tl2cgen"
HOW = "native loop (C harness, tl2cgen C, gcc -O3 -march=native)"
COMPILED = True
HARNESS = ROOT / "benches" / "peers" / "tl2cgen_harness.c"
BUILD = ROOT / "benches" / "shapes" / "build"


NODES_PER_FILE = 10_000


def estimated_nodes(cell) -> int:
    """An upper bound of the model's node count from its shape (full trees)."""
    p = cell.params
    if cell.library == "lightgbm":
        per_tree = 2 * p.get("num_leaves", 31)
    else:
        per_tree = 2 ** (p.get("max_depth", 6) + 1)
    return cell.total_trees * per_tree


def applies(cell) -> bool:
    return cell.library in ("xgboost", "lightgbm", "sklearn-rf", "sklearn-et")


def _load(cell, d: Path, trained: dict):
    import treelite

    if cell.library == "xgboost":
        return treelite.frontend.load_xgboost_model(str(d / trained["model"]))
    if cell.library == "lightgbm":
        return treelite.frontend.load_lightgbm_model(str(d / trained["model"]))
    return treelite.sklearn.import_model(pickle.loads((d / "model.pkl").read_bytes()))


def build(cell, trained: dict, rebuild: bool) -> dict:
    import tl2cgen
    import treelite

    d = Path(trained["dir"])
    source = d / ("model.pkl" if cell.library.startswith("sklearn") else trained["model"])
    parallel = -(-estimated_nodes(cell) // NODES_PER_FILE)
    parallel = parallel if parallel > 1 else 0
    key = sha(source, treelite.__version__, tl2cgen.__version__, " ".join(CFLAGS), parallel)
    out = BUILD / f"tl2cgen-{cell.name}-{key}"
    meta_path = out / "meta.json"
    if meta_path.exists() and not rebuild:
        meta = json.loads(meta_path.read_text())
        link_harness(out, [out / o for o in meta.get("objects") or sorted(p.name for p in out.glob("*.o"))])
        return {**meta, "dir": str(out), "cached": True}
    t0 = time.perf_counter()
    model = _load(cell, d, trained)
    params = {"parallel_comp": parallel} if parallel else {}
    tl2cgen.generate_c_code(model, str(out), params=params, verbose=False)
    t1 = time.perf_counter()
    objects = []
    for c in sorted(out.glob("*.c")):
        run([*NICE, "gcc", *CFLAGS, "-c", c, "-o", c.with_suffix(".o")])
        objects.append(c.with_suffix(".o"))
    t2 = time.perf_counter()
    link_harness(out, objects)
    meta = {"codegen_s": t1 - t0, "gcc_s": t2 - t1, "c_files": len(objects), "parallel_comp": parallel,
            "objects": [o.name for o in objects],
            "treelite": treelite.__version__, "tl2cgen": tl2cgen.__version__}
    meta_path.write_text(json.dumps(meta, indent=2))
    return {**meta, "dir": str(out), "cached": False}


def link_harness(out: Path, objects: list[Path], cflags: list[str] = CFLAGS, exe: Path | None = None) -> Path:
    """benches/peers/tl2cgen_harness.c linked with the generated objects (relinked on every run:
    seconds, and the harness may have changed since the C was generated) into `exe` (default
    `out/harness`)."""
    header = (out / "header.h").read_text()
    m = re.search(r"void predict\(union Entry\* data, int pred_margin, (\w+)\* result\);", header)
    if not m:
        raise NotApplicable(f"unexpected tl2cgen entry point in {out / 'header.h'}")
    exe = exe or out / "harness"
    run([*NICE, "gcc", *cflags, f"-DTL_RESULT_T={m.group(1)}", f"-I{out}", HARNESS, *objects, "-lm", "-o", exe])
    return exe


def prepare(cell, trained: dict, rebuild: bool) -> Prepared:
    try:
        art = build(cell, trained, rebuild)
    except NotApplicable:
        raise
    except Exception as e:
        raise NotApplicable(f"treelite/tl2cgen: {str(e).strip().splitlines()[-1][:200]}") from e
    d = Path(trained["dir"])
    exe = Path(art["dir"]) / "harness"

    def command(row_set, seconds, n_check):
        return [exe, d / f"{row_set}.f32", trained["features"], seconds, n_check]

    return Prepared(KEY, cell.name, command, build=art)
