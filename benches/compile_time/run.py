"""Compile time of 2,000-tree models against the library's own load time.

For each format, trains a 2,000-tree model with the real library (depth 6 / 63 leaves, 20
features, 2 categorical where the library has them), saves it the way users do, then times, in
the same run and interleaved (median of ROUNDS):
  * `edgescore compile MODEL -o OUT.esm --timings`: the release CLI, the whole process
    (start-up, read, parse, lay out, validate, write, exit), timed from outside; and, from its
    `--timings` line, the time from `main` until the artifact is laid out and validated in
    memory, the counterpart of the library's load (no process start-up, no file written);
  * the library loading the same file, timed inside a fresh Python process around the load
    call alone (the import and interpreter start-up excluded: they are not load time), and
    the same process's first prediction on one row. Some libraries defer work to the first
    prediction (CatBoost builds its evaluator then), so "load + first prediction" is the time
    until the library can score, as the compiled artifact can.
Prints a table of medians and the ratios ours/library; `--json F` writes it.

    .venv/bin/python benches/compile_time/run.py [--rounds 7] [--trees 2000] [--models DIR]
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[2]
CLI = REPO / "target" / "release" / "edgescore"
PY = sys.executable

# (import, load, first prediction on one all-zero row) per format; {p} is the model path.
LOADERS = {
    "xgboost-json": ("import xgboost as xgb, numpy as np", "m = xgb.Booster(model_file={p!r})",
                     "m.inplace_predict(np.zeros((1, 20), np.float32))"),
    "xgboost-ubj": ("import xgboost as xgb, numpy as np", "m = xgb.Booster(model_file={p!r})",
                    "m.inplace_predict(np.zeros((1, 20), np.float32))"),
    "lightgbm": ("import lightgbm as lgb, numpy as np", "m = lgb.Booster(model_file={p!r})",
                 "m.predict(np.zeros((1, 20), np.float32))"),
    "catboost-cbm": ("import catboost as cb", "m = cb.CatBoostClassifier(); m.load_model({p!r})",
                     "m.predict_proba([[0.0] * 18 + ['1', '2']])"),
    "catboost-json": ("import catboost as cb", "m = cb.CatBoostClassifier(); m.load_model({p!r}, format='json')",
                      "m.predict_proba([[0.0] * 18 + ['1', '2']])"),
    "onnx": ("import onnxruntime as ort, numpy as np",
             "m = ort.InferenceSession({p!r}, providers=['CPUExecutionProvider'])",
             "m.run(None, {m.get_inputs()[0].name: np.zeros((1, 20), np.float32)})"),
}

TIMER = """
import time
{imp}
t0 = time.perf_counter()
{load}
t1 = time.perf_counter()
{predict}
t2 = time.perf_counter()
print(t1 - t0, t2 - t1)
"""


def progress(total: int, desc: str, unit: str) -> tqdm:
    """A bar on stderr, on a terminal only (disable=None): redirected output keeps just the table."""
    return tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False)


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
    # One step per model (a 2,000-tree model takes minutes on 2 cores); per-round callbacks would
    # be models/training_progress.py's, which this script, run by path, cannot import.
    bar = progress(5, "training", "model")
    bar.set_postfix_str("XGBoost")
    bst = xgb.train({"objective": "binary:logistic", "max_depth": 6, "eta": 0.05, "nthread": 2, "tree_method": "hist"},
                    xgb.DMatrix(X, y), n_trees)
    files["xgboost-json"] = d / "xgb.json"
    files["xgboost-ubj"] = d / "xgb.ubj"
    bst.save_model(files["xgboost-json"])
    bst.save_model(files["xgboost-ubj"])
    bar.update()
    bar.set_postfix_str("LightGBM")
    b = lgb.train({"objective": "binary", "num_leaves": 63, "verbose": -1, "num_threads": 2},
                  lgb.Dataset(X, y, categorical_feature=[18, 19]), n_trees)
    files["lightgbm"] = d / "lgb.txt"
    b.save_model(str(files["lightgbm"]))
    bar.update()
    bar.set_postfix_str("CatBoost")
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(20)])
    for c in ("f18", "f19"):
        df[c] = df[c].astype(int).astype(str)
    m = cb.CatBoostClassifier(iterations=n_trees, depth=6, verbose=0, thread_count=2, allow_writing_files=False)
    m.fit(df, y, cat_features=["f18", "f19"])
    files["catboost-cbm"] = d / "cb.cbm"
    files["catboost-json"] = d / "cb.json"
    m.save_model(str(files["catboost-cbm"]))
    m.save_model(str(files["catboost-json"]), format="json")
    bar.update()
    bar.set_postfix_str("scikit-learn random forest")
    rf = RandomForestClassifier(n_estimators=n_trees, max_depth=6, n_jobs=2, random_state=0).fit(X[:5000], y[:5000])
    files["onnx"] = d / "rf.onnx"
    files["onnx"].write_bytes(to_onnx(rf, X[:1], target_opset={"": 18, "ai.onnx.ml": 3}).SerializeToString())
    bar.update()
    bar.close()
    return files


def compile_once(cmd):
    """(whole process, in-process until validated) seconds for one `compile --timings`."""
    t = time.perf_counter()
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    process = time.perf_counter() - t
    m = re.search(r"validated at ([0-9.]+) ms", r.stderr)
    if not m:
        sys.exit(f"no timings line from {cmd[0]} (stderr: {r.stderr.strip()[:200]})")
    return process, float(m.group(1)) / 1e3


def library(kind, path):
    """(load, first prediction) seconds, timed inside a fresh process."""
    imp, load, predict = LOADERS[kind]
    code = TIMER.format(imp=imp, load=load.format(p=str(path)), predict=predict)
    out = subprocess.run([PY, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--trees", type=int, default=2000)
    ap.add_argument("--models", help="keep the trained models in DIR and reuse them on later runs")
    ap.add_argument("--json")
    a = ap.parse_args()
    t0 = time.monotonic()
    if not CLI.exists():
        sys.exit(f"build the release CLI first: cargo build --release -p edgescore-compile ({CLI})")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(a.models) if a.models else Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        names = {"xgboost-json": "xgb.json", "xgboost-ubj": "xgb.ubj", "lightgbm": "lgb.txt",
                 "catboost-cbm": "cb.cbm", "catboost-json": "cb.json", "onnx": "rf.onnx"}
        files = {k: d / n for k, n in names.items()}
        if not all(f.exists() for f in files.values()):
            files = train(d, a.trees)
        rows = []
        print(f"{'format':14s} {'size':>8s} {'compile':>10s} {'in-proc':>10s} {'lib load':>10s} {'+1st pred':>10s} "
              f"{'ours/load':>9s} {'ours/(load+pred)':>16s} {'in-proc/load':>12s}")
        with progress(len(files) * a.rounds, "timing", "round") as bar:
            for kind, path in files.items():
                bar.set_postfix_str(kind)
                ours, inproc, load, first = [], [], [], []
                for _ in range(a.rounds):
                    process, validated = compile_once([str(CLI), "compile", str(path), "-o", str(Path(tmp) / "out.esm"), "--timings"])
                    ours.append(process)
                    inproc.append(validated)
                    lo, pr = library(kind, path)
                    load.append(lo)
                    first.append(lo + pr)
                    bar.update()
                o, ip, lo, lp = (statistics.median(v) for v in (ours, inproc, load, first))
                spread = lambda v: (max(v) - min(v)) / statistics.median(v)
                rows.append({"format": kind, "size_mb": path.stat().st_size / 1e6, "edgescore_compile_s": o,
                             "library_load_s": lo, "library_load_and_first_prediction_s": lp,
                             "edgescore_in_process_validated_s": ip,
                             "ratio_to_load": o / lo, "ratio_to_load_and_first_prediction": o / lp,
                             "in_process_ratio_to_load": ip / lo,
                             "ours_rounds": ours, "in_process_rounds": inproc, "load_rounds": load,
                             "load_and_first_rounds": first})
                with tqdm.external_write_mode():  # the row above the bar, not through it
                    print(f"{kind:14s} {path.stat().st_size / 1e6:6.1f}MB {o * 1e3:8.1f}ms {ip * 1e3:8.1f}ms {lo * 1e3:8.1f}ms "
                          f"{lp * 1e3:8.1f}ms {o / lo:9.2f} {o / lp:16.2f} {ip / lo:12.2f}   "
                          f"(spread: ours {spread(ours):.0%}, load {spread(load):.0%})", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(rows, indent=1))
    ratios = [r["ratio_to_load_and_first_prediction"] for r in rows]
    inproc = [r["in_process_ratio_to_load"] for r in rows]
    print(f"compile_time: {len(rows)} formats × {a.rounds} round{'s' if a.rounds != 1 else ''} in {time.monotonic() - t0:.0f} s; "
          f"edgescore compile / library load + first prediction {min(ratios):.2f} to {max(ratios):.2f}; "
          f"in-process until validated / library load {min(inproc):.2f} to {max(inproc):.2f}")


if __name__ == "__main__":
    main()
