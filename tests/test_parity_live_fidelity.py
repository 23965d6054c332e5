"""Live parity for the model kinds beyond the common ones: fresh randomized models each run,
compiled and scored by the edgescore CLI, compared with the library's own predictions (same
tolerances, seed and helpers as test_parity_live.py):

* XGBoost vector-leaf trees (multi-target regression, multiclass), saved as UBJSON or JSON;
* XGBoost objectives binary:hinge, binary:logitraw, multi:softmax, survival:aft/cox, rank:ndcg;
* LightGBM linear trees and the gamma / tweedie / quantile / lambdarank objectives, dart;
* CatBoost CTR features (categorical columns with more values than one_hot_max_size,
  combinations), read from CatBoost's default `.cbm` file;
* ONNX TreeEnsemble (opset 5), against ONNX Runtime.
"""
from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pandas as pd
import pytest

import test_parity_live as live
from test_parity_live import assert_scores, gauss, random_data, rng_for, small_rows
from tests.fixtures import catboost as cb_fixtures
from tests.fixtures import onnx as onnx_fixtures

pytestmark = live.pytestmark


def test_xgb_vector_leaves(seed, tmp_path):
    import xgboost as xgb

    rng = rng_for(seed, "xgb_vector_leaves")
    cols, samp, X = random_data(rng, (3, 9), (300, 700))
    params = dict(live._xgb_common(rng), tree_method="hist", multi_strategy="multi_output_tree")
    if rng.random() < 0.5:
        k = int(rng.integers(2, 5))
        Y = np.stack([live.synth_regression(rng, X) for _ in range(k)], 1)
        params["objective"], task = "reg:squarederror", "regression"
    else:
        k = int(rng.integers(3, 6))
        Y = live.synth_multiclass(rng, X, k)
        params.update(objective="multi:softprob", num_class=k)
        task = "multiclass"
    bst = xgb.train(params, xgb.DMatrix(pd.DataFrame(X, columns=cols), label=Y), int(rng.integers(3, 25)))
    live._xgb_check(tmp_path, bst, rng, samp, cols, task=task, ubj=bool(rng.random() < 0.5))


def _diverged(bst) -> bool:
    """Whether training ended in a leaf value that is not finite: survival:cox with a small
    lambda and no hessian floor can (a leaf's hessian sum near 0, or negative)."""
    trees = json.loads(bst.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"]
    return any(not math.isfinite(v) for t in trees for v, left in zip(t["split_conditions"], t["left_children"]) if left == -1)


@pytest.mark.parametrize("objective", ["binary:hinge", "binary:logitraw", "multi:softmax", "survival:aft",
                                       "survival:cox", "rank:ndcg"])
def test_xgb_objectives(seed, objective, tmp_path):
    import xgboost as xgb

    rng = rng_for(seed, "xgb_" + objective)
    cols, samp, X = random_data(rng, (3, 9), (300, 600))
    params = dict(live._xgb_common(rng), objective=objective)
    d = xgb.DMatrix(pd.DataFrame(X, columns=cols))
    if objective.startswith("binary"):
        d.set_label(live.synth_binary(rng, X))
    elif objective == "multi:softmax":
        k = int(rng.integers(3, 6))
        d.set_label(live.synth_multiclass(rng, X, k))
        params["num_class"] = k
    elif objective == "survival:aft":
        t = np.exp(live.synth_regression(rng, X) / 5)
        d.set_float_info("label_lower_bound", t)
        d.set_float_info("label_upper_bound", np.where(rng.random(len(t)) < 0.2, np.inf, t))
    elif objective == "survival:cox":
        t = np.exp(live.synth_regression(rng, X) / 5)
        d.set_label(np.where(rng.random(len(t)) < 0.2, -t, t))
    else:
        y = np.clip(np.round(live.synth_regression(rng, X) / 3), 0, 4)
        d = xgb.DMatrix(pd.DataFrame(X, columns=cols), label=y, qid=np.repeat(np.arange(len(X) // 10 + 1), 10)[: len(X)])
    bst = xgb.train(params, d, int(rng.integers(3, 30)))
    if _diverged(bst):
        # XGBoost's own predictions are NaN wherever such a leaf is reached: refused, saying why
        # (JSON, which has no NaN, as a value that is not finite where it stands).
        model = tmp_path / ("model.ubj" if rng.random() < 0.5 else "model.json")
        bst.save_model(model)
        p = subprocess.run([str(live.BIN), "compile", str(model), "-o", str(tmp_path / "model.esm")],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1 and "not finite" in p.stderr and "panicked" not in p.stderr, p.stderr
        return
    # What `predict` prints (a margin, 0/1, a class index, a hazard ratio) compares as a value.
    live._xgb_check(tmp_path, bst, rng, samp, cols, task="regression", ubj=bool(rng.random() < 0.5))


@pytest.mark.parametrize("objective", ["regression", "binary", "gamma", "tweedie", "quantile", "lambdarank", "dart"])
def test_lgb_linear_and_objectives(seed, objective, tmp_path):
    import lightgbm as lgb

    rng = rng_for(seed, "lgb_" + objective)
    cols, samp, X = random_data(rng, (3, 9), (300, 700), nan_max=0.2)
    params = dict(verbose=-1, seed=int(rng.integers(1 << 30)), num_threads=1, deterministic=True,
                  num_leaves=int(rng.integers(3, 32)), learning_rate=float(rng.uniform(0.05, 0.4)),
                  min_data_in_leaf=int(rng.choice([3, 10, 20])))
    y = live.synth_regression(rng, X)
    task = "regression"
    ds_kw = {}
    if objective in ("regression", "binary"):
        params.update(objective=objective, linear_tree=True, linear_lambda=float(rng.choice([0.0, 0.1])))
        if objective == "binary":
            y, task = live.synth_binary(rng, X), "binary"
    elif objective in ("gamma", "tweedie"):
        params["objective"] = objective
        y = np.exp(y / 5)
    elif objective == "quantile":
        params.update(objective="quantile", alpha=float(rng.uniform(0.1, 0.9)))
    elif objective == "lambdarank":
        params["objective"] = "lambdarank"
        y = np.clip(np.round(y / 3), 0, 4).astype(int)
        ds_kw["group"] = [10] * (len(X) // 10) + ([len(X) % 10] if len(X) % 10 else [])
    else:
        params.update(objective="binary", boosting="dart", drop_rate=float(rng.uniform(0.05, 0.5)))
        y, task = live.synth_binary(rng, X), "binary"
    bst = lgb.train(params, lgb.Dataset(X, y, **ds_kw), int(rng.integers(3, 40)))
    live._lgb_check(tmp_path, bst, rng, samp, cols, task=task)


def test_catboost_ctr_from_cbm(seed, tmp_path):
    import catboost as cb

    rng = rng_for(seed, "catboost_ctr")
    n = int(rng.integers(800, 2000))
    n_cat = int(rng.integers(1, 4))
    n_num = int(rng.integers(1, 4))
    X = np.zeros((n, n_num + n_cat), dtype=np.float32)
    X[:, :n_num] = rng.normal(size=(n, n_num))
    sizes = rng.integers(3, 60, size=n_cat)
    for j in range(n_cat):
        X[:, n_num + j] = rng.integers(0, sizes[j], size=n)
    X[rng.random(n) < 0.1, 0] = np.nan
    cols = [f"n{j}" for j in range(n_num)] + [f"c{j}" for j in range(n_cat)]
    cat_idx = list(range(n_num, n_num + n_cat))
    codes = X[:, cat_idx].astype(int)
    signal = (codes * rng.integers(1, 5, size=n_cat)).sum(1) % 3 + np.nan_to_num(X[:, 0])
    kind = str(rng.choice(["binary", "multiclass", "regression"]))
    common = dict(iterations=int(rng.integers(5, 40)), depth=int(rng.integers(2, 7)), verbose=0, thread_count=1,
                  random_seed=int(rng.integers(1 << 30)), allow_writing_files=False,
                  one_hot_max_size=int(rng.choice([1, 2, 4])), max_ctr_complexity=int(rng.integers(1, 4)),
                  nan_mode=str(rng.choice(["Min", "Max"])))
    if kind == "binary":
        m = cb.CatBoostClassifier(**common, simple_ctr=["Borders", "Counter", "Buckets"])
        y = (signal > np.median(signal)).astype(int)
    elif kind == "multiclass":
        m = cb.CatBoostClassifier(**common, loss_function="MultiClass")
        y = np.digitize(signal, np.quantile(signal, [1 / 3, 2 / 3]))
    else:
        m = cb.CatBoostRegressor(**common)
        y = signal + rng.normal(scale=0.1, size=n)
    m.fit(cb_fixtures.cb_frame(X, cols, cat_idx), y, cat_features=[cols[j] for j in cat_idx])
    path = tmp_path / "model.cbm"
    m.save_model(str(path))
    R = X[rng.integers(n, size=150)].copy()
    for j in cat_idx:
        k = rng.random(len(R))
        R[k < 0.1, j] = np.nan
        R[(k >= 0.1) & (k < 0.25), j] = sizes[j - n_num] + rng.integers(0, 1000, size=((k >= 0.1) & (k < 0.25)).sum())
    df = cb_fixtures.cb_frame(R, cols, cat_idx)
    assert_scores(tmp_path, path, R, cols, cb_fixtures.cb_predict(m, df, kind), prob=kind != "regression",
                  raw=m.predict(df, prediction_type="RawFormulaVal"), what=f"catboost CTR {kind} from .cbm")


def test_onnx_tree_ensemble_5(seed, tmp_path):
    from skl2onnx import to_onnx
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor

    rng = rng_for(seed, "onnx5")
    cols, _, X = random_data(rng, (2, 8), (200, 600), nan_max=0)
    n_feat = len(cols)
    member = None
    if rng.random() < 0.5:
        member, n_codes = int(rng.integers(n_feat)), int(rng.integers(3, 50))
        X[:, member] = rng.integers(0, n_codes, size=len(X))
    else:
        n_codes = 0
    if rng.random() < 0.5:
        model = RandomForestRegressor(n_estimators=int(rng.integers(2, 12)), max_depth=int(rng.integers(2, 8)),
                                      random_state=int(rng.integers(1 << 30))).fit(X, live.synth_regression(rng, X))
        post, aggregate = 0, int(rng.integers(0, 2))
    else:
        k = int(rng.integers(3, 5))
        model = GradientBoostingClassifier(n_estimators=int(rng.integers(2, 15)), max_depth=int(rng.integers(2, 5)),
                                           random_state=int(rng.integers(1 << 30))).fit(X, live.synth_multiclass(rng, X, k))
        post, aggregate = int(rng.integers(0, 3)), 1
    onx = onnx_fixtures.to_v5(to_onnx(model, X[:1], target_opset={"": 18, "ai.onnx.ml": 3}), post=post, aggregate=aggregate,
                   member=member, n_codes=n_codes)
    path = tmp_path / "model.onnx"
    path.write_bytes(onx.SerializeToString())
    R, groups = small_rows(rng, gauss(n_feat, 0.05), n_feat, onnx_fixtures.v5_thresholds(onx), allow_inf=True)
    if member is not None:
        # Rows hold ±F32_MAX, which times 3 become ±inf: values the column keeps as they are.
        with np.errstate(over="ignore"):
            R[:, member] = np.where(np.isfinite(R[:, member]), np.round(R[:, member] * 3), R[:, member])
    assert_scores(tmp_path, path, R, cols, onnx_fixtures.ort_run(path, R)["Y"], prob=bool(post), groups=groups,
                  what=f"onnx TreeEnsemble-5 post={post} aggregate={aggregate}")
