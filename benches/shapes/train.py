"""Train a cell's model with its real library, write its row sets and the library's own
predictions on them, cached under benches/shapes/build/<cell>-<key>/ (key = cell spec +
library versions). Runs in a worker process of its own (`python -m benches.shapes.train CELL`).

What a cell directory holds:
  model.json | model.txt | model.cbm | model.onnx   what edgescore and the peers load
  model.pkl                                        sklearn only (treelite imports the estimator)
  {between,skewed}.f32 / .csv                      the rows (rows.py)
  {between,skewed}.expected.npy                    the library's predictions, [rows, outputs]
  meta.json                                        spec, versions, train time, model file
"""

from __future__ import annotations

import importlib.metadata as md
import json
import sys
import time
from pathlib import Path

import numpy as np

from . import rows as R
from .cells import BY_NAME, Cell

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
LIBRARIES = ("xgboost-cpu", "lightgbm", "catboost", "scikit-learn", "skl2onnx", "numpy")
THREADS = 2  # training only; every timed loop is single-threaded


def versions() -> dict[str, str]:
    out = {}
    for lib in LIBRARIES:
        try:
            out[lib] = md.version(lib)
        except md.PackageNotFoundError:
            out[lib] = "-"
    return out


def cell_dir(cell: Cell) -> Path:
    return BUILD / f"{cell.name}-{cell.key(versions())}"


def reported(proba: np.ndarray, classes: int) -> np.ndarray:
    """What a user reads: P(class 1) for a binary model, every class's probability otherwise."""
    proba = np.asarray(proba, dtype=np.float64)
    if proba.ndim == 1:
        proba = proba[:, None]
    if classes == 2 and proba.shape[1] == 2:
        proba = proba[:, 1:]
    return proba


def _xgboost(cell: Cell, X, y, out: Path):
    import xgboost as xgb

    d = cell.data
    types = ["q"] * R.n_numeric(d) + ["c"] * len(d.categories)
    cat = bool(d.categories)
    params = {"tree_method": "hist", "eta": 0.1, "seed": 0, "nthread": THREADS, **cell.params}
    if d.classes == 2:
        params["objective"] = "binary:logistic"
    else:
        params.update(objective="multi:softprob", num_class=d.classes)
    bst = xgb.train(params, xgb.DMatrix(X, label=y, feature_types=types, enable_categorical=cat), cell.trees)
    path = out / "model.json"
    bst.save_model(path)
    return path, lambda rows: bst.predict(xgb.DMatrix(rows, feature_types=types, enable_categorical=cat))


def _lightgbm(cell: Cell, X, y, out: Path):
    import lightgbm as lgb

    d = cell.data
    cats = list(range(R.n_numeric(d), d.features))
    params = {"verbose": -1, "seed": 0, "num_threads": THREADS, **cell.params}
    if d.classes == 2:
        params["objective"] = "binary"
    else:
        params.update(objective="multiclass", num_class=d.classes)
    ds = lgb.Dataset(X, label=y, categorical_feature=cats or "auto", params={"verbose": -1})
    bst = lgb.train(params, ds, cell.trees)
    path = out / "model.txt"
    bst.save_model(path)
    return path, lambda rows: bst.predict(rows, num_threads=1)


def _catboost(cell: Cell, X, y, out: Path):
    from catboost import CatBoostClassifier

    d = cell.data
    assert not d.categories, "CatBoost cells are numeric (categoricals would bring CTRs)"
    loss = "Logloss" if d.classes == 2 else "MultiClass"
    m = CatBoostClassifier(iterations=cell.trees, loss_function=loss, random_seed=0, verbose=False,
                           thread_count=THREADS, allow_writing_files=False, **cell.params)
    m.fit(X, y)
    path = out / "model.cbm"
    m.save_model(str(path))
    m.save_model(str(out / "model.onnx"), format="onnx")
    return path, m.predict_proba


def _sklearn(cell: Cell, X, y, out: Path):
    import pickle

    from skl2onnx import to_onnx
    from sklearn.ensemble import ExtraTreesClassifier, RandomForestClassifier

    cls = RandomForestClassifier if cell.library == "sklearn-rf" else ExtraTreesClassifier
    m = cls(n_estimators=cell.trees, random_state=0, n_jobs=THREADS, **cell.params)
    m.fit(X, y)
    (out / "model.pkl").write_bytes(pickle.dumps(m))
    onx = to_onnx(m, X[:1], options={id(m): {"zipmap": False}},
                  target_opset={"": 15, "ai.onnx.ml": 3})
    path = out / "model.onnx"
    path.write_bytes(onx.SerializeToString())
    return path, m.predict_proba


TRAINERS = {"xgboost": _xgboost, "lightgbm": _lightgbm, "catboost": _catboost,
            "sklearn-rf": _sklearn, "sklearn-et": _sklearn}


def load(cell: Cell) -> dict | None:
    """The cached training of a cell, or None."""
    try:
        meta = json.loads((cell_dir(cell) / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return {**meta, "dir": str(cell_dir(cell))}


def train(cell: Cell) -> dict:
    out = cell_dir(cell)
    out.mkdir(parents=True, exist_ok=True)
    d = cell.data
    X, y = R.training_set(d)
    t0 = time.perf_counter()
    model, predict = TRAINERS[cell.library](cell, X, y, out)
    train_s = time.perf_counter() - t0
    names = R.feature_names(d)
    n_outputs = None
    for set_name, rows in R.bench_rows(d, X, cell.bench_rows).items():
        R.write(rows, names, out / set_name)
        expected = reported(predict(rows), d.classes)
        n_outputs = expected.shape[1]
        np.save(out / f"{set_name}.expected.npy", expected)
    meta = {"cell": cell.spec(), "versions": versions(), "model": model.name, "train_s": train_s,
            "features": d.features, "outputs": n_outputs, "rows": cell.bench_rows}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return {**meta, "dir": str(out)}


if __name__ == "__main__":
    print(json.dumps(train(BY_NAME[sys.argv[1]])), flush=True)
