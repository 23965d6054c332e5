"""Compile time of 2,000-tree models against the library's own load time.

For each format, trains a 2,000-tree model with the real library (depth 6 / 63 leaves, 20
features, 2 categorical where the library has them), saves it the way users do, then times, in
the same run and interleaved (median of ROUNDS):
  * `edgescore compile MODEL -o OUT.esm` (the release CLI, whole process: read, parse,
    validate, write), and
  * the library loading the same file in a fresh process (`python -c "load"` minus an empty
    `python -c` with the same imports), so both sides pay process start-up alike.
Prints a table of medians and the ratio ours/library; `--json F` writes it.

    .venv/bin/python benches/compile_time/run.py [--rounds 5] [--trees 2000]
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
CLI = REPO / "target" / "release" / "edgescore"
PY = sys.executable

LOADERS = {
    "xgboost-json": ("import xgboost as xgb", "xgb.Booster(model_file={p!r})"),
    "xgboost-ubj": ("import xgboost as xgb", "xgb.Booster(model_file={p!r})"),
    "lightgbm": ("import lightgbm as lgb", "lgb.Booster(model_file={p!r})"),
    "catboost-cbm": ("import catboost as cb", "cb.CatBoostClassifier().load_model({p!r})"),
    "catboost-json": ("import catboost as cb", "cb.CatBoostClassifier().load_model({p!r}, format='json')"),
    "onnx": ("import onnxruntime as ort", "ort.InferenceSession({p!r}, providers=['CPUExecutionProvider'])"),
}


def train(d: Path, n_trees: int):
    import catboost as cb
    import lightgbm as lgb
    import xgboost as xgb
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(0)
    n = 20000
    X = rng.normal(size=(n, 20)).astype(np.float32)
    X[:, 18] = rng.integers(0, 50, n)
    X[:, 19] = rng.integers(0, 200, n)
    y = ((X[:, 0] + X[:, 1] * X[:, 2] + (X[:, 18] % 3 == 0) + rng.normal(0, 0.5, n)) > 0.5).astype(int)
    files = {}
    bst = xgb.train({"objective": "binary:logistic", "max_depth": 6, "eta": 0.05, "nthread": 2, "tree_method": "hist"},
                    xgb.DMatrix(X, y), n_trees)
    files["xgboost-json"] = d / "xgb.json"
    files["xgboost-ubj"] = d / "xgb.ubj"
    bst.save_model(files["xgboost-json"])
    bst.save_model(files["xgboost-ubj"])
    b = lgb.train({"objective": "binary", "num_leaves": 63, "verbose": -1, "num_threads": 2},
                  lgb.Dataset(X, y, categorical_feature=[18, 19]), n_trees)
    files["lightgbm"] = d / "lgb.txt"
    b.save_model(str(files["lightgbm"]))
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(20)])
    for c in ("f18", "f19"):
        df[c] = df[c].astype(int).astype(str)
    m = cb.CatBoostClassifier(iterations=n_trees, depth=6, verbose=0, thread_count=2, allow_writing_files=False)
    m.fit(df, y, cat_features=["f18", "f19"])
    files["catboost-cbm"] = d / "cb.cbm"
    files["catboost-json"] = d / "cb.json"
    m.save_model(str(files["catboost-cbm"]))
    m.save_model(str(files["catboost-json"]), format="json")
    rf = RandomForestClassifier(n_estimators=n_trees, max_depth=6, n_jobs=2, random_state=0).fit(X[:5000], y[:5000])
    files["onnx"] = d / "rf.onnx"
    files["onnx"].write_bytes(to_onnx(rf, X[:1], target_opset={"": 18, "ai.onnx.ml": 3}).SerializeToString())
    return files


def wall(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trees", type=int, default=2000)
    ap.add_argument("--json")
    a = ap.parse_args()
    if not CLI.exists():
        sys.exit(f"build the release CLI first: cargo build --release -p edgescore-compile ({CLI})")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        files = train(d, a.trees)
        rows = []
        for kind, path in files.items():
            imp, load = LOADERS[kind]
            ours, lib = [], []
            for _ in range(a.rounds):
                ours.append(wall([str(CLI), "compile", str(path), "-o", str(d / "out.esm")]))
                full = wall([PY, "-c", f"{imp}\n{load.format(p=str(path))}"])
                empty = wall([PY, "-c", imp])
                lib.append(max(full - empty, 1e-6))
            o, l = statistics.median(ours), statistics.median(lib)
            rows.append({"format": kind, "size_mb": path.stat().st_size / 1e6, "edgescore_compile_s": o,
                         "library_load_s": l, "ratio": o / l, "ours_rounds": ours, "library_rounds": lib})
            print(f"{kind:14s} {path.stat().st_size / 1e6:7.1f} MB  compile {o * 1e3:8.1f} ms  "
                  f"library load {l * 1e3:8.1f} ms  ours/library {o / l:5.2f}", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
