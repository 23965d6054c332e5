#!/usr/bin/env python3
"""Deterministic generator of parity fixtures for edgescore.

Trains small models with the REAL training libraries (XGBoost, LightGBM,
CatBoost, scikit-learn -> ONNX) and writes, for every fixture, a directory
``tests/models/<name>/`` holding

* the model file: ``model.json`` (XGBoost JSON / CatBoost JSON),
  ``model.txt`` (LightGBM text) or ``model.onnx``;
* ``rows.csv``: header of feature names, one row per sample.  An EMPTY cell
  is a missing value (NaN).  Categorical columns hold integer codes written
  as integers.  Every numeric value is written as ``repr(float(np.float32(v)))``
  i.e. the exact decimal expansion (shortest round-trip repr of the double)
  of the float32 value the library saw, so parsing the text as f32 *or* as
  f64-then-f32 yields exactly that value;
* ``expected.csv``: no header, one line per row, the library's own
  prediction formatted with ``repr(float(v))``: binary -> positive class
  probability; multiclass -> all class probabilities; regression -> value;
  for ONNX fixtures the onnxruntime output;
* ``expected_raw.csv``: margins (where the library exposes them; not ONNX);
* ``expected_sklearn.csv`` (ONNX fixtures only): the source model's own
  ``predict_proba`` / ``predict``;
* ``meta.json``: format, task, n_outputs, categorical columns, notes, plus
  the row groups (which rows are random, exactly on thresholds, special...).

Every prediction is computed from the model file *reloaded from disk*, so the
expected values are what the library computes from exactly the bytes a
reader sees.  The rows deliberately include feature values that sit exactly
on split thresholds parsed back from the saved model (and, for LightGBM's
float64 thresholds, the neighbouring float32 values), +-0.0, +-1e30,
+-inf (where the library accepts them), NaN and tiny values around
LightGBM's kZeroThreshold.

It is the one fixture generator: it also writes the readers' own fixtures
(tests/models/{lgb,catboost,onnx}_reader_*: library predictions with margins, and
the models the readers must refuse), through gen_reader_fixtures.py (LightGBM,
CatBoost) and gen_onnx_fixtures.py (skl2onnx, onnxmltools, ONNX Runtime).

Usage:  .venv/bin/python tests/gen_fixtures.py [NAME ...]   (`make fixtures`: all)
Re-running regenerates every parity fixture byte-identically.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import warnings
import zlib
from pathlib import Path

# Keep every library single-threaded: results must not depend on scheduling.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from tqdm import tqdm  # noqa: E402

warnings.filterwarnings("ignore")

ROOT = Path(__file__).resolve().parent
OUT_DIR = ROOT / "models"
F32_MAX = float(np.finfo(np.float32).max)

# --------------------------------------------------------------------------
# formatting helpers
# --------------------------------------------------------------------------


def fmt_f32(v) -> str:
    """Exact text of a float32 value; empty string for NaN (missing)."""
    v = np.float32(v)
    if np.isnan(v):
        return ""
    return repr(float(v))


def fmt_cat(v) -> str:
    """Integer category code; empty string for NaN (missing)."""
    if np.isnan(v):
        return ""
    iv = int(v)
    assert float(iv) == float(v), v
    return str(iv)


def write_rows(path: Path, X: np.ndarray, columns, categorical=()):
    cat_idx = {columns.index(c) for c in categorical}
    lines = [",".join(columns)]
    for row in X:
        lines.append(
            ",".join(fmt_cat(v) if j in cat_idx else fmt_f32(v) for j, v in enumerate(row))
        )
    path.write_text("\n".join(lines) + "\n")


def write_expected(path: Path, P):
    P = np.asarray(P, dtype=np.float64)
    if P.ndim == 1:
        P = P[:, None]
    path.write_text("\n".join(",".join(repr(float(v)) for v in row) for row in P) + "\n")


def write_meta(d: Path, **kw):
    (d / "meta.json").write_text(json.dumps(kw, indent=2, sort_keys=False) + "\n")


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def fresh_dir(name: str) -> Path:
    d = OUT_DIR / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


# --------------------------------------------------------------------------
# threshold extraction from the saved model files
# --------------------------------------------------------------------------


def xgb_trees(j):
    """The trees of an XGBoost JSON document (gbtree, or dart's inner gbtree)."""
    booster = j["learner"]["gradient_booster"]
    return (booster["model"] if "model" in booster else booster["gbtree"]["model"])["trees"]


def xgb_thresholds(model_path: Path) -> dict[int, np.ndarray]:
    j = json.loads(model_path.read_text())
    out: dict[int, set] = {}
    for t in xgb_trees(j):
        for nid, left in enumerate(t["left_children"]):
            if left == -1 or t["split_type"][nid] != 0:
                continue
            out.setdefault(t["split_indices"][nid], set()).add(float(np.float32(t["split_conditions"][nid])))
    return {k: np.array(sorted(v), dtype=np.float32) for k, v in out.items()}


def lgb_thresholds_f64(model_path: Path) -> dict[int, np.ndarray]:
    """Numerical thresholds (float64) per feature from a LightGBM text model."""
    out: dict[int, set] = {}
    feats = thr = dtype = None
    for line in model_path.read_text().splitlines():
        if line.startswith("Tree="):
            feats = thr = dtype = None
        elif line.startswith("split_feature="):
            feats = [int(x) for x in line.split("=", 1)[1].split()]
        elif line.startswith("threshold="):
            thr = [float(x) for x in line.split("=", 1)[1].split()]
        elif line.startswith("decision_type="):
            dtype = [int(x) for x in line.split("=", 1)[1].split()]
            for f, t, dt in zip(feats, thr, dtype):
                if dt & 1 == 0:  # numerical split
                    out.setdefault(f, set()).add(t)
    return {k: np.array(sorted(v), dtype=np.float64) for k, v in out.items()}


def f32_neighbourhood(thr64: np.ndarray) -> np.ndarray:
    """float32 values at / just below / just above float64 thresholds."""
    vals = set()
    for t in thr64:
        c = np.float32(t)
        vals.add(float(c))
        vals.add(float(np.nextafter(c, np.float32(-np.inf))))
        vals.add(float(np.nextafter(c, np.float32(np.inf))))
    return np.array(sorted(vals), dtype=np.float32)


def cb_thresholds(model_path: Path) -> dict[int, np.ndarray]:
    j = json.loads(model_path.read_text())
    out = {}
    for ff in j["features_info"].get("float_features", []):
        if ff["borders"]:
            out[ff["flat_feature_index"]] = np.array(
                sorted({float(np.float32(b)) for b in ff["borders"]}), dtype=np.float32
            )
    return out


def onnx_thresholds(model_path: Path) -> dict[int, np.ndarray]:
    import onnx

    m = onnx.load(str(model_path))
    out: dict[int, set] = {}
    for node in m.graph.node:
        if not node.op_type.startswith("TreeEnsemble"):
            continue
        a = {x.name: x for x in node.attribute}
        modes = [s.decode() for s in a["nodes_modes"].strings]
        feats = list(a["nodes_featureids"].ints)
        if "nodes_values" in a and len(a["nodes_values"].floats):
            vals = list(a["nodes_values"].floats)
        else:
            vals = list(onnx.numpy_helper.to_array(a["nodes_values_as_tensor"].t))
        for mode, f, v in zip(modes, feats, vals):
            if mode != "LEAF":
                out.setdefault(f, set()).add(float(np.float32(v)))
    return {k: np.array(sorted(v), dtype=np.float32) for k, v in out.items()}


# --------------------------------------------------------------------------
# test rows
# --------------------------------------------------------------------------


def build_rows(
    rng: np.random.Generator,
    sample,
    n_feat: int,
    thr: dict[int, np.ndarray],
    *,
    cat_cols=(),
    cat_specials=(0, -1, 16777215, 16777216),
    n_random=90,
    n_all_thr=35,
    n_single_thr=45,
    allow_inf=True,
    tiny=False,
):
    """Return (X float32 [n, n_feat], groups dict name -> [start, end)).

    ``sample(rng, n)`` draws rows from the test distribution (already float32
    with NaNs / categorical codes in place).  ``thr`` maps feature index to
    candidate exact-threshold values (float32).  Categorical columns are never
    set to thresholds.
    """
    cat_cols = set(cat_cols)
    blocks, groups, pos = [], {}, 0

    def add(name, X):
        nonlocal pos
        X = np.asarray(X, dtype=np.float32)
        blocks.append(X)
        groups[name] = [pos, pos + len(X)]
        pos += len(X)

    add("random", sample(rng, n_random))

    thr = {j: v for j, v in thr.items() if j not in cat_cols and len(v)}
    if thr:
        # every thresholded feature sits exactly on one of its thresholds
        X = sample(rng, n_all_thr)
        for i in range(n_all_thr):
            for j, vals in thr.items():
                X[i, j] = vals[rng.integers(len(vals))]
        add("all_features_on_thresholds", X)
        # one feature on a threshold, the rest random; cycle through pairs
        pairs = [(j, v) for j, vals in sorted(thr.items()) for v in vals]
        order = rng.permutation(len(pairs))[:n_single_thr]
        X = sample(rng, len(order))
        for i, k in enumerate(order):
            j, v = pairs[k]
            X[i, j] = v
        add("one_feature_on_threshold", X)

    specials = [0.0, -0.0, 1.0, -1.0, 1e30, -1e30, F32_MAX, -F32_MAX, np.nan]
    if allow_inf:
        specials += [np.inf, -np.inf]
    if tiny:
        z = np.float32(1e-35)  # LightGBM kZeroThreshold (a float32 constant)
        specials += [
            1e-36, -1e-36, float(z), -float(z),
            float(np.nextafter(z, np.float32(1))), -float(np.nextafter(z, np.float32(1))),
            float(np.nextafter(z, np.float32(0))), 1e-45,
        ]
    num_cols = [j for j in range(n_feat) if j not in cat_cols]
    rows = []
    cat_list = sorted(cat_cols)
    for k, c in enumerate(specials):
        r = np.full(n_feat, np.float32(c), dtype=np.float32)
        for m, j in enumerate(cat_list):
            r[j] = [0, np.nan, -1, 1, 16777216][(k + m) % 5]
        rows.append(r)
    # mixed rows: special values rotated through the columns
    mix = [1e30, -1e30, np.nan, -0.0, 0.0] + ([np.inf, -np.inf] if allow_inf else [])
    for k in range(len(mix)):
        r = sample(rng, 1)[0]
        for m, j in enumerate(num_cols):
            if (m + k) % 2 == 0:
                r[j] = mix[(m + k) % len(mix)]
        rows.append(r)
    # categorical edge codes on otherwise random rows
    for code in cat_specials if cat_cols else ():
        for j in cat_list:
            r = sample(rng, 1)[0]
            r[j] = code
            rows.append(r)
    add("special_values", np.stack(rows))
    return np.concatenate(blocks), groups


def gauss_sampler(n_feat, nan_rate=0.0, nan_cols=None, scale=1.0):
    nan_cols = list(range(n_feat)) if nan_cols is None else list(nan_cols)

    def sample(rng, n):
        X = (rng.normal(size=(n, n_feat)) * scale).astype(np.float32)
        if nan_rate and nan_cols:
            mask = np.zeros_like(X, dtype=bool)
            mask[:, nan_cols] = rng.random((n, len(nan_cols))) < nan_rate
            X[mask] = np.nan
        return X

    return sample


def nz(X):
    return np.nan_to_num(X.astype(np.float64), nan=0.0)


# --------------------------------------------------------------------------
# XGBoost
# --------------------------------------------------------------------------

FIXTURES = {}


def fixture(fn):
    FIXTURES[fn.__name__.removeprefix("gen_")] = fn
    return fn


def _xgb_fixture(name, *, params, n_rounds, X, y, cols, test_sample, task, n_outputs,
                 notes, cat_cols=(), cat_sizes=None, float_info=None, qid=None, ubj=False):
    """``float_info``: extra DMatrix float fields (survival:aft bounds); ``qid``: query ids
    (rank:*); ``ubj``: save the model as UBJSON (``model.ubj``), plus the same booster as JSON in
    ``same_model.json`` for the reader's byte-identity test."""
    import xgboost as xgb

    rng = np.random.default_rng(seed_of(name) + 1)
    d = fresh_dir(name)
    params = dict(params, seed=0, nthread=1)
    if cat_cols:
        df = pd.DataFrame(X, columns=cols)
        for c in cat_cols:
            codes = df[c]
            df[c] = pd.Categorical(codes, categories=list(range(cat_sizes[c])))
        dtrain = xgb.DMatrix(df, label=y, enable_categorical=True, qid=qid)
    else:
        dtrain = xgb.DMatrix(pd.DataFrame(X, columns=cols), label=y, qid=qid)
    for k, v in (float_info or {}).items():
        dtrain.set_float_info(k, v)
    bst = xgb.train(params, dtrain, n_rounds)
    path = d / ("model.ubj" if ubj else "model.json")
    bst.save_model(path)
    if ubj:
        bst.save_model(d / "same_model.json")

    loaded = xgb.Booster(model_file=str(path))
    thr = xgb_thresholds(d / "same_model.json" if ubj else path)
    cat_idx = [cols.index(c) for c in cat_cols]
    R, groups = build_rows(rng, test_sample, len(cols), thr, cat_cols=cat_idx, allow_inf=False)
    ftypes = ["c" if c in cat_cols else "float" for c in cols]
    # numpy input: category codes are used as-is (no pandas re-coding).
    dtest = xgb.DMatrix(R, feature_names=cols, feature_types=ftypes,
                        enable_categorical=bool(cat_cols), missing=np.nan)
    pred = loaded.predict(dtest)
    raw = loaded.predict(dtest, output_margin=True)
    # the in-memory booster must agree with the file
    assert np.array_equal(pred, bst.predict(dtest))
    if task == "binary":
        pred = pred.reshape(-1)
    write_rows(d / "rows.csv", R, cols, cat_cols)
    write_expected(d / "expected.csv", pred)
    write_expected(d / "expected_raw.csv", raw)
    j = json.loads((d / "same_model.json" if ubj else path).read_text())
    write_meta(
        d, format="xgboost", task=task, n_outputs=n_outputs, categorical=list(cat_cols),
        features=cols, objective=params["objective"],
        base_score=j["learner"]["learner_model_param"]["base_score"],
        n_trees=len(xgb_trees(j)),
        library="xgboost " + xgb.__version__, n_rows=len(R), row_groups=groups,
        notes=notes + " XGBoost rejects +-inf in DMatrix (missing=NaN), so no inf rows; "
        "split rule: go left iff value < split_condition (float32), NaN -> default_left.",
    )


@fixture
def gen_xgb_binary():
    name = "xgb_binary"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 8
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.12)
    X = samp(rng, 500)
    z = nz(X)
    y = ((z[:, 0] + 0.7 * z[:, 1] ** 2 - z[:, 2] * z[:, 3] + 0.5 * np.isnan(X[:, 4])
          + rng.normal(0, 0.3, len(X))) > 0.6).astype(int)
    _xgb_fixture(name, params={"objective": "binary:logistic", "max_depth": 4, "eta": 0.3,
                               "tree_method": "hist"},
                 n_rounds=40, X=X, y=y, cols=cols, test_sample=samp, task="binary", n_outputs=1,
                 notes="binary:logistic, NaNs (12%) in training and test rows. base_score in "
                       "learner_model_param is a probability ('[p]'); margin = logit(p) + sum(leaves).")


@fixture
def gen_xgb_multiclass():
    name = "xgb_multiclass"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 6
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.05)
    X = samp(rng, 500)
    z = nz(X)
    s = np.stack([z[:, 0] + z[:, 1], z[:, 2] - z[:, 0], z[:, 3] * z[:, 4], 0.5 * z[:, 5] ** 2], 1)
    y = np.argmax(s + rng.normal(0, 0.4, s.shape), 1)
    _xgb_fixture(name, params={"objective": "multi:softprob", "num_class": 4, "max_depth": 3,
                               "eta": 0.3, "tree_method": "hist"},
                 n_rounds=15, X=X, y=y, cols=cols, test_sample=samp, task="multiclass", n_outputs=4,
                 notes="multi:softprob, 4 classes, 15 rounds -> 60 trees, tree_info gives the class of "
                       "each tree. base_score is a per-class vector in MARGIN space "
                       "('[a,b,c,d]'), added to each class margin before softmax.")


@fixture
def gen_xgb_regression():
    name = "xgb_regression"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 7
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.05, scale=2.0)
    X = samp(rng, 500)
    z = nz(X)
    y = 10 + 3 * z[:, 0] + 2 * np.sin(z[:, 1]) + z[:, 2] * z[:, 3] + rng.normal(0, 0.5, len(X))
    _xgb_fixture(name, params={"objective": "reg:squarederror", "max_depth": 5, "eta": 0.2,
                               "tree_method": "hist"},
                 n_rounds=40, X=X, y=y, cols=cols, test_sample=samp, task="regression", n_outputs=1,
                 notes="reg:squarederror; base_score ('[mean]') is added to the margin as-is.")


@fixture
def gen_xgb_categorical():
    name = "xgb_categorical"
    rng = np.random.default_rng(seed_of(name))
    cols = ["amount", "ratio", "depth", "method", "country", "device"]
    cat_cols = ["method", "country", "device"]
    sizes = {"method": 8, "country": 40, "device": 5}
    unseen = {"method": [6], "country": [7, 13, 29], "device": []}

    def samp(rng, n, train=False):
        X = np.empty((n, len(cols)), np.float32)
        X[:, 0] = rng.lognormal(3, 1, n)
        X[:, 1] = rng.random(n)
        X[:, 2] = rng.integers(0, 20, n)
        for c in cat_cols:
            j = cols.index(c)
            codes = rng.integers(0, sizes[c], n).astype(np.float32)
            if train:
                for u in unseen[c]:
                    codes[codes == u] = 0
            else:
                r = rng.random(n)
                codes[r < 0.08] = np.nan
                codes[(r >= 0.08) & (r < 0.12)] = -1
                codes[(r >= 0.12) & (r < 0.15)] = -3
                codes[(r >= 0.15) & (r < 0.2)] = sizes[c] + 3  # never seen, out of range
                if unseen[c]:
                    m = (r >= 0.2) & (r < 0.28)
                    codes[m] = rng.choice(unseen[c], m.sum())
            X[:, j] = codes
        if train:
            X[rng.random(n) < 0.05, cols.index("country")] = np.nan
        X[rng.random(n) < 0.05, 0] = np.nan
        return X

    X = samp(rng, 600, train=True)
    m, c, dv = X[:, 3], X[:, 4], X[:, 5]
    y = ((np.isin(m, [1, 2, 5]).astype(float) + np.isin(c, [3, 4, 8, 15, 21, 33]) * 1.5
          + (dv == 2) - 0.002 * nz(X[:, 0]) + rng.normal(0, 0.4, len(X))) > 1.0).astype(int)
    _xgb_fixture(name, params={"objective": "binary:logistic", "max_depth": 4, "eta": 0.3,
                               "tree_method": "hist", "max_cat_to_onehot": 1},
                 n_rounds=30, X=X, y=y, cols=cols, test_sample=samp, task="binary", n_outputs=1,
                 cat_cols=cat_cols, cat_sizes=sizes,
                 notes="enable_categorical with pandas Categorical(categories=range(K)) so the "
                       "category VALUE equals its CODE (the model's 'cats' encoder is the identity); "
                       "max_cat_to_onehot=1 -> partition splits (split_type=1). For a categorical "
                       "node, 'categories' (via categories_nodes/segments/sizes) lists the codes that "
                       "go RIGHT; any other code goes left; negative codes and codes >= 16777216 "
                       "(OutOfRangeCat) also go left; NaN takes default_left. split_conditions of "
                       "categorical nodes are meaningless (1e-45). Codes never seen in training can "
                       "still be in a node's set (zero-count categories < K get sorted into it). "
                       "Expected values computed from a numpy DMatrix with feature_types 'c' "
                       "(raw codes, no re-coding).")


@fixture
def gen_xgb_deep():
    name = "xgb_deep"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 10
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.05)
    X = samp(rng, 1500)
    z = nz(X)
    y = ((np.sin(3 * z[:, 0]) + np.cos(2 * z[:, 1] * z[:, 2]) + z[:, 3] * z[:, 4]
          + rng.normal(0, 0.3, len(X))) > 0.2).astype(int)
    _xgb_fixture(name, params={"objective": "binary:logistic", "max_depth": 14, "eta": 0.3,
                               "min_child_weight": 0, "lambda": 0.1, "tree_method": "exact"},
                 n_rounds=12, X=X, y=y, cols=cols, test_sample=samp, task="binary", n_outputs=1,
                 notes="max_depth=14 with tree_method=exact and min_child_weight=0: deep, "
                       "unbalanced trees.")


@fixture
def gen_xgb_poisson():
    name = "xgb_poisson"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 5
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.05)
    X = samp(rng, 500)
    z = nz(X)
    y = rng.poisson(np.exp(0.5 + 0.6 * z[:, 0] - 0.4 * z[:, 1] + 0.3 * z[:, 2] * z[:, 3]))
    _xgb_fixture(name, params={"objective": "count:poisson", "max_depth": 4, "eta": 0.3,
                               "tree_method": "hist"},
                 n_rounds=30, X=X, y=y, cols=cols, test_sample=samp, task="regression", n_outputs=1,
                 notes="count:poisson: prediction = exp(margin); base_score ('[mean]') is in output "
                       "space, margin = ln(base_score) + sum(leaves). expected_raw.csv is the margin.")


# --------------------------------------------------------------------------
# LightGBM
# --------------------------------------------------------------------------


def _lgb_fixture(name, *, params, n_rounds, X, y, cols, test_sample, task, n_outputs, notes,
                 cat_cols=()):
    import lightgbm as lgb

    rng = np.random.default_rng(seed_of(name) + 1)
    d = fresh_dir(name)
    params = dict(params, verbose=-1, seed=0, num_threads=1, deterministic=True,
                  force_row_wise=True)
    ds = lgb.Dataset(pd.DataFrame(X, columns=cols), label=y,
                     categorical_feature=list(cat_cols) if cat_cols else "auto",
                     free_raw_data=False)
    bst = lgb.train(params, ds, n_rounds)
    path = d / "model.txt"
    bst.save_model(str(path))

    loaded = lgb.Booster(model_file=str(path))
    thr = {j: f32_neighbourhood(v) for j, v in lgb_thresholds_f64(path).items()}
    cat_idx = [cols.index(c) for c in cat_cols]
    R, groups = build_rows(rng, test_sample, len(cols), thr, cat_cols=cat_idx, allow_inf=True,
                           tiny=True)
    Rdf = pd.DataFrame(R, columns=cols)
    pred = loaded.predict(Rdf)
    raw = loaded.predict(Rdf, raw_score=True)
    # equal_nan: a linear leaf's inf feature times coefficients can sum to NaN in both.
    assert np.array_equal(pred, bst.predict(Rdf), equal_nan=True)
    assert np.array_equal(pred, loaded.predict(R), equal_nan=True)  # plain numpy, no pandas handling
    write_rows(d / "rows.csv", R, cols, cat_cols)
    write_expected(d / "expected.csv", pred)
    write_expected(d / "expected_raw.csv", raw)
    write_meta(
        d, format="lightgbm", task=task, n_outputs=n_outputs, categorical=list(cat_cols),
        features=cols, objective=params["objective"], n_trees=bst.num_trees(),
        library="lightgbm " + lgb.__version__, n_rows=len(R), row_groups=groups,
        notes=notes + " Thresholds are float64 (threshold=, %.17g); value <= threshold goes left, "
        "compared in double. Rows include the float32 values at/just below/just above each "
        "threshold. decision_type bits: 1=categorical, 2=default_left, (dt>>2)&3 = missing type "
        "(0 None: NaN->0.0, 1 Zero: |x|<=1e-35 or NaN is missing, 2 NaN). BEFORE traversal "
        "LightGBM's prediction API drops |x| <= kZeroThreshold (float32 1e-35) as a sparse zero, "
        "i.e. such values are replaced by exactly 0.0 (matters for thresholds near +-1e-35). "
        "The init score "
        "(boost_from_average) is baked into the first iteration's leaf values.",
    )


@fixture
def gen_lgb_binary():
    name = "lgb_binary"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 8
    cols = [f"f{i}" for i in range(n_feat)]
    # NaNs only in the first 5 columns in training -> the others get missing type None,
    # so NaN test values there are treated as 0.0.
    samp_train = gauss_sampler(n_feat, nan_rate=0.12, nan_cols=range(5))
    samp = gauss_sampler(n_feat, nan_rate=0.1)
    X = samp_train(rng, 600)
    z = nz(X)
    y = ((z[:, 0] + 0.7 * z[:, 1] ** 2 - z[:, 2] * z[:, 6] + 0.8 * np.isnan(X[:, 3])
          + rng.normal(0, 0.3, len(X))) > 0.6).astype(int)
    _lgb_fixture(name, params={"objective": "binary", "num_leaves": 15, "learning_rate": 0.2,
                               "min_data_in_leaf": 5},
                 n_rounds=40, X=X, y=y, cols=cols, test_sample=samp, task="binary", n_outputs=1,
                 notes="binary (sigmoid:1). NaNs in training columns f0-f4 only; test rows have NaN "
                       "everywhere (f5-f7 splits have missing type None -> NaN treated as 0.0).")


@fixture
def gen_lgb_multiclass():
    name = "lgb_multiclass"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 6
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.05)
    X = samp(rng, 600)
    z = nz(X)
    s = np.stack([z[:, 0] + z[:, 1], z[:, 2] - z[:, 0], z[:, 3] * z[:, 4]], 1)
    y = np.argmax(s + rng.normal(0, 0.4, s.shape), 1)
    _lgb_fixture(name, params={"objective": "multiclass", "num_class": 3, "num_leaves": 8,
                               "learning_rate": 0.2, "min_data_in_leaf": 5},
                 n_rounds=15, X=X, y=y, cols=cols, test_sample=samp, task="multiclass", n_outputs=3,
                 notes="multiclass softmax, 3 classes; trees are interleaved by class "
                       "(tree i belongs to class i % num_tree_per_iteration).")


@fixture
def gen_lgb_regression():
    name = "lgb_regression"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 7
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.05, scale=2.0)
    X = samp(rng, 600)
    z = nz(X)
    y = 10 + 3 * z[:, 0] + 2 * np.sin(z[:, 1]) + z[:, 2] * z[:, 3] + rng.normal(0, 0.5, len(X))
    _lgb_fixture(name, params={"objective": "regression", "num_leaves": 15, "learning_rate": 0.2,
                               "min_data_in_leaf": 5},
                 n_rounds=40, X=X, y=y, cols=cols, test_sample=samp, task="regression", n_outputs=1,
                 notes="regression (L2); raw == prediction.")


@fixture
def gen_lgb_categorical():
    name = "lgb_categorical"
    rng = np.random.default_rng(seed_of(name))
    cols = ["amount", "ratio", "depth", "method", "country", "device"]
    cat_cols = ["method", "country", "device"]
    sizes = {"method": 8, "country": 40, "device": 5}
    unseen = {"method": [6], "country": [7, 13, 29], "device": []}

    def samp(rng, n, train=False):
        X = np.empty((n, len(cols)), np.float32)
        X[:, 0] = rng.lognormal(3, 1, n)
        X[:, 1] = rng.random(n)
        X[:, 2] = rng.integers(0, 20, n)
        for c in cat_cols:
            j = cols.index(c)
            codes = rng.integers(0, sizes[c], n).astype(np.float32)
            if train:
                for u in unseen[c]:
                    codes[codes == u] = 0
            else:
                r = rng.random(n)
                codes[r < 0.08] = np.nan
                codes[(r >= 0.08) & (r < 0.12)] = -1
                codes[(r >= 0.12) & (r < 0.15)] = -3
                codes[(r >= 0.15) & (r < 0.2)] = sizes[c] + 3
                if unseen[c]:
                    m = (r >= 0.2) & (r < 0.28)
                    codes[m] = rng.choice(unseen[c], m.sum())
            X[:, j] = codes
        if train:
            X[rng.random(n) < 0.05, cols.index("country")] = np.nan
        X[rng.random(n) < 0.05, 0] = np.nan
        return X

    X = samp(rng, 800, train=True)
    m, c, dv = X[:, 3], X[:, 4], X[:, 5]
    y = ((np.isin(m, [1, 2, 5]).astype(float) + np.isin(c, [3, 4, 8, 15, 21, 33]) * 1.5
          + (dv == 2) - 0.002 * nz(X[:, 0]) + rng.normal(0, 0.4, len(X))) > 1.0).astype(int)
    _lgb_fixture(name, params={"objective": "binary", "num_leaves": 15, "learning_rate": 0.2,
                               "min_data_in_leaf": 5, "min_data_per_group": 5, "cat_smooth": 1.0,
                               "max_cat_to_onehot": 4},
                 n_rounds=30, X=X, y=y, cols=cols, test_sample=samp, task="binary", n_outputs=1,
                 cat_cols=cat_cols,
                 notes="categorical_feature on float columns holding integer codes (no pandas "
                       "category dtype, so no pandas_categorical re-mapping). Categorical node: "
                       "threshold= is an index i into cat_boundaries; the node's bitset is "
                       "cat_threshold[cat_boundaries[i]..cat_boundaries[i+1]] (uint32 words); code in "
                       "set -> LEFT. NaN -> right; int(value) < 0 -> right; codes beyond the bitset -> "
                       "right. max_cat_to_onehot=4 so 'device' (5 cats) may use one-vs-rest too.")


@fixture
def gen_lgb_deep():
    name = "lgb_deep"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 10
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.05)
    X = samp(rng, 2000)
    z = nz(X)
    y = ((np.sin(3 * z[:, 0]) + np.cos(2 * z[:, 1] * z[:, 2]) + z[:, 3] * z[:, 4]
          + rng.normal(0, 0.3, len(X))) > 0.2).astype(int)
    _lgb_fixture(name, params={"objective": "binary", "num_leaves": 255, "learning_rate": 0.2,
                               "min_data_in_leaf": 2, "min_sum_hessian_in_leaf": 0,
                               "max_depth": -1},
                 n_rounds=12, X=X, y=y, cols=cols, test_sample=samp, task="binary", n_outputs=1,
                 notes="num_leaves=255, min_data_in_leaf=2: wide and deep trees.")


@fixture
def gen_lgb_zero_missing():
    name = "lgb_zero_missing"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 6
    cols = [f"f{i}" for i in range(n_feat)]

    def samp(rng, n):
        X = rng.normal(size=(n, n_feat)).astype(np.float32)
        X[rng.random(X.shape) < 0.3] = 0.0
        X[rng.random(X.shape) < 0.05] = np.nan
        return X

    X = samp(rng, 600)
    z = nz(X)
    y = ((z[:, 0] + (X[:, 1] == 0) * 1.2 - z[:, 2] * z[:, 3] + rng.normal(0, 0.3, len(X)))
         > 0.4).astype(int)
    _lgb_fixture(name, params={"objective": "binary", "num_leaves": 15, "learning_rate": 0.2,
                               "min_data_in_leaf": 5, "zero_as_missing": True},
                 n_rounds=30, X=X, y=y, cols=cols, test_sample=samp, task="binary", n_outputs=1,
                 notes="zero_as_missing=True: missing type Zero (decision_type (dt>>2)&3 == 1); "
                       "NaN is first converted to 0.0, then |x| <= kZeroThreshold (1e-35, a "
                       "float32 constant, written 1.0000000180025095e-35) takes the default "
                       "direction. Rows include +-1e-36, +-1e-35 and its float32 neighbours.")


# --------------------------------------------------------------------------
# CatBoost
# --------------------------------------------------------------------------


def _normalise_catboost_json(path: Path, name: str):
    """CatBoost stamps a random model_guid and a wall-clock train_finish_time
    into model_info; pin both so regenerating is byte-identical."""
    j = json.loads(path.read_text())
    mi = j.get("model_info", {})
    if "model_guid" in mi:
        mi["model_guid"] = "edgescore-fixture-%s" % name
    if "train_finish_time" in mi:
        mi["train_finish_time"] = "1970-01-01T00:00:00Z"
    if "training" in mi:
        # training log has timings
        mi.pop("training")
    path.write_text(json.dumps(j, indent=None, separators=(",", ":")) + "\n")


def _cb_fixture(name, *, model, X, y, cols, test_sample, task, n_outputs, notes):
    import catboost as cb

    rng = np.random.default_rng(seed_of(name) + 1)
    d = fresh_dir(name)
    model.fit(pd.DataFrame(X, columns=cols), y)
    path = d / "model.json"
    model.save_model(str(path), format="json")
    _normalise_catboost_json(path, name)
    loaded = type(model)()
    loaded.load_model(str(path), format="json")

    thr = cb_thresholds(path)
    R, groups = build_rows(rng, test_sample, len(cols), thr, allow_inf=True)
    Rdf = pd.DataFrame(R, columns=cols)
    if task == "regression":
        pred = loaded.predict(Rdf)
        assert np.allclose(pred, model.predict(Rdf), rtol=0, atol=1e-12)
    else:
        pred = loaded.predict_proba(Rdf)
        assert np.allclose(pred, model.predict_proba(Rdf), rtol=0, atol=1e-12)
        if task == "binary":
            pred = pred[:, 1]
    raw = loaded.predict(Rdf, prediction_type="RawFormulaVal")
    write_rows(d / "rows.csv", R, cols)
    write_expected(d / "expected.csv", pred)
    write_expected(d / "expected_raw.csv", raw)
    j = json.loads(path.read_text())
    write_meta(
        d, format="catboost", task=task, n_outputs=n_outputs, categorical=[], features=cols,
        loss_function=model.get_params().get("loss_function", "default"),
        n_trees=len(j["oblivious_trees"]), scale_and_bias=j["scale_and_bias"],
        library="catboost " + cb.__version__, n_rows=len(R), row_groups=groups,
        notes=notes + " Oblivious trees: split i of a tree sets bit i of the leaf index iff "
        "value > border (float32); NaN with nan_value_treatment AsFalse (nan_mode Min) -> bit 0, "
        "AsTrue -> bit 1. Leaf values are float64; multiclass leaf_values are "
        "[leaf0_class0, leaf0_class1, ..., leaf1_class0, ...]. raw = scale * sum + bias "
        "(scale_and_bias = [scale, [bias per dim]]). model_info.model_guid/train_finish_time "
        "are pinned and model_info.training removed by the generator for reproducibility.",
    )


@fixture
def gen_catboost_binary():
    import catboost as cb

    name = "catboost_binary"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 8
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.08)
    X = samp(rng, 600)
    z = nz(X)
    y = ((z[:, 0] + 0.7 * z[:, 1] ** 2 - z[:, 2] * z[:, 3] + rng.normal(0, 0.3, len(X)))
         > 0.6).astype(int)
    m = cb.CatBoostClassifier(iterations=40, depth=5, learning_rate=0.2, random_seed=0,
                              thread_count=1, verbose=0, allow_writing_files=False,
                              border_count=32)
    _cb_fixture(name, model=m, X=X, y=y, cols=cols, test_sample=samp, task="binary",
                n_outputs=1, notes="CatBoostClassifier Logloss, NaNs in training and test.")


@fixture
def gen_catboost_multiclass():
    import catboost as cb

    name = "catboost_multiclass"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 6
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.05)
    X = samp(rng, 600)
    z = nz(X)
    s = np.stack([z[:, 0] + z[:, 1], z[:, 2] - z[:, 0], z[:, 3] * z[:, 4], 0.5 * z[:, 5] ** 2], 1)
    y = np.argmax(s + rng.normal(0, 0.4, s.shape), 1)
    m = cb.CatBoostClassifier(iterations=30, depth=4, learning_rate=0.3, random_seed=0,
                              thread_count=1, verbose=0, allow_writing_files=False,
                              loss_function="MultiClass", border_count=32)
    _cb_fixture(name, model=m, X=X, y=y, cols=cols, test_sample=samp, task="multiclass",
                n_outputs=4, notes="CatBoostClassifier MultiClass, 4 classes; probabilities = "
                "softmax(raw).")


@fixture
def gen_catboost_regression():
    import catboost as cb

    name = "catboost_regression"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 7
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss_sampler(n_feat, nan_rate=0.05, scale=2.0)
    X = samp(rng, 600)
    z = nz(X)
    y = 10 + 3 * z[:, 0] + 2 * np.sin(z[:, 1]) + z[:, 2] * z[:, 3] + rng.normal(0, 0.5, len(X))
    m = cb.CatBoostRegressor(iterations=40, depth=6, learning_rate=0.2, random_seed=0,
                             thread_count=1, verbose=0, allow_writing_files=False,
                             nan_mode="Max")
    _cb_fixture(name, model=m, X=X, y=y, cols=cols, test_sample=samp, task="regression",
                n_outputs=1, notes="CatBoostRegressor RMSE, nan_mode=Max (nan_value_treatment "
                "AsTrue), default border_count; bias = mean target (boost_from_average).")


# --------------------------------------------------------------------------
# ONNX
# --------------------------------------------------------------------------


def _ort_run(path: Path, R: np.ndarray):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    outs = s.run(None, {s.get_inputs()[0].name: R})
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, outs))


def _onnx_fixture(name, *, model, convert, X, y, test_sample, task, n_outputs, notes, native=None):
    import onnx

    rng = np.random.default_rng(seed_of(name) + 1)
    d = fresh_dir(name)
    n_feat = X.shape[1]
    cols = [f"f{i}" for i in range(n_feat)]
    model.fit(X, y)
    onx = convert(model, n_feat)
    # converters stamp a random uuid graph name and emit opset_import in set order: pin both
    onx.graph.name = name
    ops = sorted(((o.domain, o.version) for o in onx.opset_import))
    del onx.opset_import[:]
    for dom, ver in ops:
        onx.opset_import.add(domain=dom, version=ver)
    path = d / "model.onnx"
    path.write_bytes(onx.SerializeToString())

    thr = onnx_thresholds(path)
    R, groups = build_rows(rng, test_sample, n_feat, thr, allow_inf=True)
    outs = _ort_run(path, R)
    if task == "regression":
        # [N, n_targets]: one column per target (a single target as a flat column).
        pred = np.asarray(outs["variable"]).reshape(len(R), -1)
        if n_outputs == 1:
            pred = pred.reshape(-1)
    else:
        pred = np.asarray(outs["probabilities"])
        if task == "binary":
            pred = pred[:, 1]
    # the source model's own predictions (sklearn rejects inf: substitute +-FLT_MAX, which is
    # equivalent for trees with finite thresholds)
    Rs = np.where(np.isposinf(R), np.float32(F32_MAX), np.where(np.isneginf(R), np.float32(-F32_MAX), R))
    predict = native or (model.predict if task == "regression" else model.predict_proba)
    try:
        sk = np.asarray(predict(Rs), dtype=np.float64)
    except ValueError:
        # e.g. GradientBoostingClassifier rejects NaN: NaN rows get 'nan' in expected_sklearn
        ok = ~np.isnan(Rs).any(1)
        part = np.asarray(predict(Rs[ok]), dtype=np.float64)
        sk = np.full((len(Rs),) + part.shape[1:], np.nan)
        sk[ok] = part
    if task == "binary":
        sk = sk[:, 1]
    diff = np.abs(np.asarray(sk, np.float64).reshape(pred.shape) - pred)
    diff_rows = diff.reshape(len(R), -1).max(1)
    mismatch = [int(i) for i in np.nonzero(~(diff_rows <= 1e-5))[0]]
    write_rows(d / "rows.csv", R, cols)
    write_expected(d / "expected.csv", pred)
    write_expected(d / "expected_sklearn.csv", sk)
    m = onnx.load(str(path))
    write_meta(
        d, format="onnx", task=task, n_outputs=n_outputs, categorical=[], features=cols,
        ops=[f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in m.graph.node],
        opset_import={o.domain or "ai.onnx": o.version for o in sorted(m.opset_import, key=lambda o: o.domain)},
        source_model=type(model).__name__, n_rows=len(R), row_groups=groups,
        rows_where_source_model_differs_from_onnxruntime=mismatch,
        notes=notes + " expected.csv = onnxruntime (1 intra-op thread); expected_sklearn.csv = the "
        "source model's own predictions (inf replaced by +-FLT_MAX since sklearn rejects inf; "
        "'nan' where the source model rejects NaN input). "
        "The listed rows differ by > 1e-5 (NaN routing / float64->float32 threshold rounding); "
        "the CLI targets onnxruntime. Input is one float tensor; features are named f0..f{n-1}.",
    )


def _skl2onnx(model, n_feat):
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import FloatTensorType

    opts = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
    return convert_sklearn(model, initial_types=[("input", FloatTensorType([None, n_feat]))],
                           options=opts, target_opset={"": 17, "ai.onnx.ml": 3})


@fixture
def gen_onnx_rf_classifier():
    from sklearn.ensemble import RandomForestClassifier

    name = "onnx_rf_classifier"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 8
    samp_train = gauss_sampler(n_feat)
    X = samp_train(rng, 500)
    y = ((X[:, 0] + 0.7 * X[:, 1] ** 2 - X[:, 2] * X[:, 3] + rng.normal(0, 0.3, len(X)))
         > 0.6).astype(int)
    m = RandomForestClassifier(n_estimators=30, max_depth=6, random_state=0, n_jobs=1)
    _onnx_fixture(name, model=m, convert=_skl2onnx, X=X, y=y,
                  test_sample=gauss_sampler(n_feat, nan_rate=0.03), task="binary", n_outputs=1,
                  notes="skl2onnx RandomForestClassifier (zipmap off): TreeEnsembleClassifier, "
                        "BRANCH_LEQ, post_transform NONE, no aggregate_function (SUM): leaf class_weights are "
                        "already divided by n_trees. Binary: every class_id is 0 with "
                        "classlabels [0,1]; that single score s is the POSITIVE class and "
                        "onnxruntime outputs [1-s, s]. NaN: nodes_missing_value_tracks_true all 0, "
                        "so NaN takes the false branch (sklearn routes NaN differently).")


@fixture
def gen_onnx_rf_multiclass():
    from sklearn.ensemble import RandomForestClassifier

    name = "onnx_rf_multiclass"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 6
    X = gauss_sampler(n_feat)(rng, 500)
    s = np.stack([X[:, 0] + X[:, 1], X[:, 2] - X[:, 0], X[:, 3] * X[:, 4]], 1)
    y = np.argmax(s + rng.normal(0, 0.4, s.shape), 1)
    m = RandomForestClassifier(n_estimators=25, max_depth=6, random_state=0, n_jobs=1)
    _onnx_fixture(name, model=m, convert=_skl2onnx, X=X, y=y,
                  test_sample=gauss_sampler(n_feat, nan_rate=0.03), task="multiclass", n_outputs=3,
                  notes="skl2onnx RandomForestClassifier, 3 classes.")


@fixture
def gen_onnx_rf_regressor():
    from sklearn.ensemble import RandomForestRegressor

    name = "onnx_rf_regressor"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 7
    X = gauss_sampler(n_feat, scale=2.0)(rng, 500)
    y = 10 + 3 * X[:, 0] + 2 * np.sin(X[:, 1]) + X[:, 2] * X[:, 3] + rng.normal(0, 0.5, len(X))
    m = RandomForestRegressor(n_estimators=25, max_depth=6, random_state=0, n_jobs=1)
    _onnx_fixture(name, model=m, convert=_skl2onnx, X=X, y=y,
                  test_sample=gauss_sampler(n_feat, nan_rate=0.03, scale=2.0), task="regression",
                  n_outputs=1, notes="skl2onnx RandomForestRegressor: TreeEnsembleRegressor, "
                  "no aggregate_function (SUM) with target_weights already divided by n_trees, "
                  "output 'variable' [N,1].")


def _multi_target(X, rng):
    """Three targets of different shapes and scales, for the multi-output regressors."""
    return np.stack([10 + 3 * X[:, 0] + X[:, 2] * X[:, 3], 2 * np.sin(X[:, 1]) - X[:, 4],
                     100 * (X[:, 0] > 0.3) + X[:, 5] ** 2], 1) + rng.normal(0, 0.3, (len(X), 3))


@fixture
def gen_onnx_rf_multi_regressor():
    from sklearn.ensemble import RandomForestRegressor

    name = "onnx_rf_multi_regressor"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 6
    X = gauss_sampler(n_feat)(rng, 500)
    m = RandomForestRegressor(n_estimators=12, max_depth=5, random_state=0, n_jobs=1)
    _onnx_fixture(name, model=m, convert=_skl2onnx, X=X, y=_multi_target(X, rng),
                  test_sample=gauss_sampler(n_feat, nan_rate=0.03), task="regression",
                  n_outputs=3, notes="skl2onnx RandomForestRegressor on 3 targets: one "
                  "TreeEnsembleRegressor with n_targets=3, every leaf carrying a weight per target "
                  "(already divided by n_trees, SUM); output 'variable' [N,3].")


@fixture
def gen_onnx_et_multi_regressor():
    from sklearn.ensemble import ExtraTreesRegressor

    name = "onnx_et_multi_regressor"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 6
    X = gauss_sampler(n_feat)(rng, 500)
    m = ExtraTreesRegressor(n_estimators=10, max_depth=6, random_state=0, n_jobs=1)
    _onnx_fixture(name, model=m, convert=_skl2onnx, X=X, y=_multi_target(X, rng),
                  test_sample=gauss_sampler(n_feat, nan_rate=0.03), task="regression",
                  n_outputs=3, notes="skl2onnx ExtraTreesRegressor on 3 targets: "
                  "TreeEnsembleRegressor, n_targets=3.")


@fixture
def gen_onnx_gbt_classifier():
    from sklearn.ensemble import GradientBoostingClassifier

    name = "onnx_gbt_classifier"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 8
    X = gauss_sampler(n_feat)(rng, 500)
    y = ((X[:, 0] + 0.7 * X[:, 1] ** 2 - X[:, 2] * X[:, 3] + rng.normal(0, 0.3, len(X)))
         > 0.6).astype(int)
    m = GradientBoostingClassifier(n_estimators=40, max_depth=3, learning_rate=0.2, random_state=0)
    _onnx_fixture(name, model=m, convert=_skl2onnx, X=X, y=y,
                  test_sample=gauss_sampler(n_feat, nan_rate=0.03), task="binary", n_outputs=1,
                  notes="skl2onnx GradientBoostingClassifier: TreeEnsembleClassifier with base_values "
                        "(prior log-odds) and post_transform LOGISTIC; single score column (class_id 0) = "
                        "positive-class margin, output [1-sigmoid(s), sigmoid(s)]. "
                        "(HistGradientBoostingClassifier "
                        "does not convert with skl2onnx 1.20 + sklearn 1.9: bool attribute error.)")


def _onnxmltools_convert(kind):
    def convert(model, n_feat):
        import onnxmltools
        from onnxmltools.convert.common.data_types import FloatTensorType

        types = [("input", FloatTensorType([None, n_feat]))]
        if kind == "lightgbm":
            return onnxmltools.convert_lightgbm(model, initial_types=types, zipmap=False,
                                                target_opset=15)
        return onnxmltools.convert_xgboost(model, initial_types=types, target_opset=15)

    return convert


@fixture
def gen_onnx_lgb_classifier():
    import lightgbm as lgb

    name = "onnx_lgb_classifier"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 8
    samp = gauss_sampler(n_feat, nan_rate=0.08)
    X = samp(rng, 600)
    z = nz(X)
    y = ((z[:, 0] + 0.7 * z[:, 1] ** 2 - z[:, 2] * z[:, 3] + rng.normal(0, 0.3, len(X)))
         > 0.6).astype(int)
    m = lgb.LGBMClassifier(n_estimators=30, num_leaves=15, learning_rate=0.2, min_child_samples=5,
                           random_state=0, n_jobs=1, deterministic=True, force_row_wise=True,
                           verbose=-1)
    _onnx_fixture(name, model=m, convert=_onnxmltools_convert("lightgbm"), X=X, y=y,
                  test_sample=samp, task="binary", n_outputs=1,
                  notes="LGBMClassifier via onnxmltools.convert_lightgbm (zipmap=False): "
                        "TreeEnsembleClassifier BRANCH_LEQ with float32 thresholds (LightGBM's "
                        "float64 thresholds rounded), nodes_missing_value_tracks_true for NaN; "
                        "single score column + post_transform LOGISTIC; the graph continues with "
                        "Identity -> Cast (label) and Identity -> Mul(probabilities, 1.0) -> "
                        "'probabilities'.")


@fixture
def gen_onnx_xgb_classifier():
    import xgboost as xgb

    name = "onnx_xgb_classifier"
    rng = np.random.default_rng(seed_of(name))
    n_feat = 8
    samp = gauss_sampler(n_feat, nan_rate=0.08)
    X = samp(rng, 600)
    z = nz(X)
    y = ((z[:, 0] + 0.7 * z[:, 1] ** 2 - z[:, 2] * z[:, 3] + rng.normal(0, 0.3, len(X)))
         > 0.6).astype(int)
    m = xgb.XGBClassifier(n_estimators=30, max_depth=4, learning_rate=0.3, random_state=0,
                          n_jobs=1, tree_method="hist")
    _onnx_fixture(name, model=m, convert=_onnxmltools_convert("xgboost"), X=X, y=y,
                  test_sample=samp, task="binary", n_outputs=1,
                  notes="XGBClassifier via onnxmltools.convert_xgboost: TreeEnsembleClassifier "
                        "BRANCH_LT, nodes_missing_value_tracks_true from default_left, base_values "
                        "= logit(base_score), post_transform LOGISTIC.")


# --------------------------------------------------------------------------


# The readers' own fixtures (tests/models/{lgb,catboost,onnx}_reader_*), each group written by its
# library's module: names in `main`'s argument list like the parity fixtures above.
def reader_groups():
    import gen_objective_fixtures
    import gen_onnx5_fixtures
    import gen_onnx_fixtures
    import gen_reader_fixtures

    FIXTURES.update(gen_objective_fixtures.FIXTURES)
    FIXTURES.update(gen_onnx5_fixtures.FIXTURES)

    return {"readers_lightgbm_catboost": gen_reader_fixtures.make_all, "readers_onnx": gen_onnx_fixtures.make_all}


def main(argv):
    groups = reader_groups()
    names = argv or [*FIXTURES, *groups]
    unknown = [n for n in names if n not in FIXTURES and n not in groups]
    if unknown:
        sys.exit(f"unknown fixture(s): {unknown}; known: {sorted(FIXTURES)} and the groups {sorted(groups)}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    # The bar is on stderr and on a terminal only (disable=None); the per-fixture lines go to
    # stdout as before, through tqdm.write so that they print above it.
    with tqdm(names, desc="fixtures", unit="fixture", disable=None, leave=False) as bar:
        for n in bar:
            bar.set_postfix_str(n)
            if n in groups:
                groups[n]()
                tqdm.write(f"{n:24s} written")
                continue
            FIXTURES[n]()
            files = sorted(p for p in (OUT_DIR / n).iterdir())
            size = sum(p.stat().st_size for p in files)
            tqdm.write(f"{n:24s} {size / 1024:8.1f} KiB  " + " ".join(p.name for p in files))
    parity = sum(n in FIXTURES for n in names)
    n_groups = len(names) - parity
    print(f"{parity} parity fixtures and {n_groups} reader group{'s' if n_groups != 1 else ''} written to "
          f"{OUT_DIR.relative_to(ROOT.parent)} in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
