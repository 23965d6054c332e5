"""The LightGBM / CatBoost reader fixtures (compile/src/readers/lightgbm.rs and catboost/mod.rs tests), a
part of the one fixture generator: `.venv/bin/python tests/gen_fixtures.py` runs it
(lightgbm 4.7.0, catboost 1.2.10). Deterministic for a given library version, apart from
CatBoost's model_guid / train_finish_time fields.

For each model NAME it writes tests/models/lgb_reader_NAME/ or tests/models/catboost_reader_NAME/:
  model.txt / model.json  the model file
  rows.csv                feature rows (float32 values, shortest round-trip repr; `nan`), no header
  expected.csv            per row: the library's raw margins (one per output) then its reported
                          predictions (probabilities / transformed values; binary: positive class).
                          LightGBM's raw score of an average_output (rf) model is the plain sum.
Models the readers must refuse get only the model file, in tests/models/<prefix>_NAME_refuse/.
"""
import json
import os

import catboost as cb
import lightgbm as lgb
import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")


def fixture(prefix, name, file):
    """tests/models/<prefix>_<name>/<file>, the directory created."""
    d = os.path.join(MODELS, f"{prefix}_{name}")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, file)


def lgb_file(name, file):
    return fixture("lgb_reader", name, file)


def cb_file(name, file):
    return fixture("catboost_reader", name, file)
F32 = np.float32
K_ZERO = F32(1e-35)


def fmt32(v):
    v = F32(v)
    if np.isnan(v):
        return "nan"
    return repr(float(v)) if np.isinf(v) else str(v)


def write_rows(path, X):
    with open(path, "w") as f:
        for row in X:
            f.write(",".join(fmt32(v) for v in row) + "\n")


def write_expected(path, raw, pred):
    raw = np.asarray(raw, dtype=np.float64).reshape(len(raw), -1)
    pred = np.asarray(pred, dtype=np.float64).reshape(len(pred), -1)
    with open(path, "w") as f:
        for r, p in zip(raw, pred):
            f.write(",".join(repr(float(v)) for v in list(r) + list(p)) + "\n")


def neighbours(t):
    """t rounded to float32 and its float32 neighbours."""
    c = F32(t)
    with np.errstate(over="ignore"):
        return [c, np.nextafter(c, F32(np.inf)), np.nextafter(c, F32(-np.inf))]


def threshold_rows(base, thresholds, rng, limit=240):
    """Rows equal to random base rows except one feature set at/next to a split threshold."""
    rows = []
    for f, t in thresholds:
        for v in neighbours(t):
            r = base[rng.integers(len(base))].copy()
            r[f] = v
            rows.append(r)
    rows = np.array(rows, dtype=F32).reshape(-1, base.shape[1])
    if len(rows) > limit:
        rows = rows[rng.choice(len(rows), limit, replace=False)]
    return rows


# ----------------------------------------------------------------------------------------------
# LightGBM


def lgb_thresholds(booster):
    out = set()

    def walk(node):
        if "split_index" not in node:
            return
        if node["decision_type"] == "<=":
            out.add((node["split_feature"], float(node["threshold"])))
        walk(node["left_child"])
        walk(node["right_child"])

    for tree in booster.dump_model()["tree_info"]:
        walk(tree["tree_structure"])
    return sorted(out)


def lgb_save(name, booster, X, rng, extra_rows=()):
    path = lgb_file(name, "model.txt")
    booster.save_model(path)
    rows = [X[:120]]
    rows.append(threshold_rows(X, lgb_thresholds(booster), rng))
    rows.extend(np.asarray(r, dtype=F32).reshape(-1, X.shape[1]) for r in extra_rows)
    rows = np.concatenate(rows).astype(F32)
    loaded = lgb.Booster(model_file=path)
    raw = loaded.predict(rows, raw_score=True)
    pred = loaded.predict(rows)
    assert np.array_equal(raw, booster.predict(rows, raw_score=True))
    write_rows(lgb_file(name, "rows.csv"), rows)
    write_expected(lgb_file(name, "expected.csv"), raw, pred)


def special_rows(X, feature, values, rng):
    rows = []
    for v in values:
        r = X[rng.integers(len(X))].copy()
        r[feature] = v
        rows.append(r)
    return rows


ZERO_VALUES = [0.0, -0.0, K_ZERO, -K_ZERO, np.nextafter(K_ZERO, F32(1)), -np.nextafter(K_ZERO, F32(1)),
               F32(5e-36), F32(-5e-36), F32(1e-30), F32(-1e-30), np.nan]
CAT_VALUES = [np.nan, -1, -0.5, -0.999, -1.5, -7, 2.7, 3.2, 0.4, 1e10, -1e10, 3e9, 70, 100, 1000, 12345, np.inf, -np.inf]
PARAMS = dict(verbose=-1, seed=1, deterministic=True, num_threads=1, min_data_in_leaf=5)


def make_lightgbm():
    rng = np.random.default_rng(42)

    # Binary: NaNs (missing type NaN on f0), f1 without NaN in training (missing type None),
    # a categorical feature, and features around zero.
    n = 2000
    X = rng.normal(size=(n, 5)).astype(F32)
    X[:, 2] = rng.integers(0, 10, size=n)
    X[rng.random(n) < 0.15, 0] = np.nan
    X[rng.random(n) < 0.2, 4] = 0.0
    logit = np.nan_to_num(X[:, 0], nan=1.0) + X[:, 1] - (np.isin(X[:, 2], [1, 4, 7])) * 1.5 + 0.5 * X[:, 3] * X[:, 4]
    y = (logit + rng.normal(scale=0.5, size=n) > 0).astype(int)
    b = lgb.train(dict(PARAMS, objective="binary", num_leaves=15, cat_smooth=1, min_data_per_group=10),
                  lgb.Dataset(X, y, categorical_feature=[2], feature_name=["a", "b", "c", "d", "e"]), 20)
    Xn = X.copy()
    Xn[rng.random(n) < 0.3, 1] = np.nan
    Xn[rng.random(n) < 0.2, 3] = np.nan
    lgb_save("binary_nan", b, X, rng, extra_rows=[Xn[:60]] + special_rows(X, 2, CAT_VALUES, rng)
             + special_rows(X, 4, ZERO_VALUES, rng) + special_rows(X, 1, ZERO_VALUES, rng))

    # Multiclass softmax with a 50-category feature (multi-word bitsets).
    n = 3000
    X = rng.normal(size=(n, 4)).astype(F32)
    X[:, 3] = rng.integers(0, 50, size=n)
    X[rng.random(n) < 0.1, 1] = np.nan
    y = ((X[:, 0] > 0.3).astype(int) + (X[:, 3] % 3 == 0) + (np.nan_to_num(X[:, 1]) > 1)) % 3
    b = lgb.train(dict(PARAMS, objective="multiclass", num_class=3, num_leaves=8, max_cat_to_onehot=4,
                       cat_smooth=1, min_data_per_group=5, max_cat_threshold=64),
                  lgb.Dataset(X, y, categorical_feature=[3]), 8)
    lgb_save("multiclass", b, X, rng, extra_rows=special_rows(X, 3, CAT_VALUES + [33, 40, 49, 50, 63, 64], rng))

    # Multiclass one-vs-all with a sigmoid parameter.
    b = lgb.train(dict(PARAMS, objective="multiclassova", num_class=3, num_leaves=6, sigmoid=0.7),
                  lgb.Dataset(X, y, categorical_feature=[3]), 5)
    lgb_save("multiclassova", b, X, rng)

    # Regression with zero_as_missing (missing type Zero).
    n = 2000
    X = rng.normal(size=(n, 3)).astype(F32)
    X[rng.random(n) < 0.3, 0] = 0.0
    X[rng.random(n) < 0.1, 1] = np.nan
    X[rng.random(n) < 0.2, 2] = 0.0
    y = np.where(X[:, 0] == 0, 3.0, X[:, 0]) + np.nan_to_num(X[:, 1], nan=-2.0) + 0.3 * X[:, 2]
    b = lgb.train(dict(PARAMS, objective="regression", num_leaves=12, zero_as_missing=True),
                  lgb.Dataset(X, y), 15)
    lgb_save("regression_zero", b, X, rng, extra_rows=special_rows(X, 0, ZERO_VALUES, rng)
             + special_rows(X, 1, ZERO_VALUES, rng) + special_rows(X, 2, ZERO_VALUES, rng))

    # Regression on two categorical features (one-hot style and many-vs-many splits).
    n = 3000
    X = np.zeros((n, 3), dtype=F32)
    X[:, 0] = rng.integers(0, 70, size=n)
    X[:, 1] = rng.integers(0, 4, size=n)
    X[:, 2] = rng.normal(size=n)
    X[rng.random(n) < 0.05, 0] = np.nan
    y = (X[:, 0] % 7) * 0.5 + (X[:, 1] == 2) * 2.0 + X[:, 2] + np.isnan(X[:, 0]) * 3
    b = lgb.train(dict(PARAMS, objective="regression", num_leaves=10, max_cat_to_onehot=4, cat_smooth=1,
                       min_data_per_group=5, max_cat_threshold=64, cat_l2=1),
                  lgb.Dataset(X, y, categorical_feature=[0, 1]), 12)
    lgb_save("categorical", b, X, rng, extra_rows=special_rows(X, 0, CAT_VALUES, rng)
             + special_rows(X, 1, CAT_VALUES, rng) + special_rows(X, 0, ZERO_VALUES, rng))

    # Poisson (exp link), random forest (average_output), cross-entropy.
    n = 1500
    X = rng.normal(size=(n, 3)).astype(F32)
    X[rng.random(n) < 0.1, 2] = np.nan
    lam = np.exp(0.5 * X[:, 0] - 0.3 * X[:, 1])
    b = lgb.train(dict(PARAMS, objective="poisson", num_leaves=6), lgb.Dataset(X, rng.poisson(lam)), 10)
    lgb_save("poisson", b, X, rng)
    yb = (X[:, 0] + np.nan_to_num(X[:, 2]) > 0).astype(int)
    b = lgb.train(dict(PARAMS, objective="binary", boosting="rf", num_leaves=6, bagging_freq=1,
                       bagging_fraction=0.6, feature_fraction=0.8), lgb.Dataset(X, yb), 6)
    lgb_save("rf_binary", b, X, rng)
    b = lgb.train(dict(PARAMS, objective="cross_entropy", num_leaves=5), lgb.Dataset(X, 1 / (1 + lam)), 5)
    lgb_save("xentropy", b, X, rng)

    # Constant label: single-leaf trees.
    b = lgb.train(dict(PARAMS, objective="regression"), lgb.Dataset(X, np.full(n, 2.5)), 3)
    lgb_save("constant", b, X, rng)

    # Hand-written trees: thresholds inside [-kZeroThreshold, kZeroThreshold] (the C API reads
    # |x| <= kZeroThreshold as 0.0) and a categorical bitset {0, 2, 40}.
    def tree(i, threshold, decision_type, num_cat=0, cats=""):
        return (f"Tree={i}\nnum_leaves=2\nnum_cat={num_cat}\nsplit_feature={1 if num_cat else 0}\n"
                f"split_gain=1\nthreshold={threshold}\ndecision_type={decision_type}\nleft_child=-1\n"
                f"right_child=-2\nleaf_value={-(i + 1)} {2 ** i}\nleaf_weight=1 1\nleaf_count=1 1\n"
                f"internal_value=0\ninternal_weight=0\ninternal_count=2\n{cats}is_linear=0\nshrinkage=1\n\n\n")
    trees = [tree(0, "-1.0000000180025095e-35", 0), tree(1, "5.0000000000000001e-36", 8),
             tree(2, "-4.9999999999999997e-36", 10), tree(3, "1.0000000180025095e-35", 2),
             tree(4, "0", 9, 1, "cat_boundaries=0 2\ncat_threshold=5 256\n"),
             tree(5, "0", 1, 1, "cat_boundaries=0 1\ncat_threshold=1\n")]
    text = ("tree\nversion=v4\nnum_class=1\nnum_tree_per_iteration=1\nlabel_index=0\nmax_feature_idx=1\n"
            "objective=regression\nfeature_names=x c\nfeature_infos=[-1:1] 0:2:40\n"
            f"tree_sizes={' '.join(str(len(t)) for t in trees)}\n\n" + "".join(trees)
            + "end of trees\n\npandas_categorical:null\n")
    with open(lgb_file("handmade", "model.txt"), "w") as f:
        f.write(text)
    b = lgb.Booster(model_file=lgb_file("handmade", "model.txt"))
    vals = ZERO_VALUES + [F32(-2e-36), F32(2e-36), F32(7e-36), F32(-7e-36), 1.0, -1.0]
    cats = CAT_VALUES + [0, 1, 2, 40, 41, 31, 32, 63, 64, 5e-36, -5e-36]
    rows = np.array([[v, c] for v in vals for c in cats], dtype=F32)
    write_rows(lgb_file("handmade", "rows.csv"), rows)
    write_expected(lgb_file("handmade", "expected.csv"), b.predict(rows, raw_score=True), b.predict(rows))

    # Models to refuse.
    b = lgb.train(dict(PARAMS, objective="regression", reg_sqrt=True, num_leaves=4),
                  lgb.Dataset(X, np.abs(X[:, 0]) * 3), 2)
    b.save_model(lgb_file("sqrt_refuse", "model.txt"))


# ----------------------------------------------------------------------------------------------
# CatBoost


def cb_thresholds(j):
    feats = {f["feature_index"]: f for f in j["features_info"].get("float_features", [])}
    out = set()
    for tree in j["oblivious_trees"]:
        for s in tree["splits"]:
            if s["split_type"] == "FloatFeature":
                out.add((feats[s["float_feature_index"]]["flat_feature_index"], float(s["border"])))
    return sorted(out)


def cb_save(name, model, X, rng, extra_rows=(), pred_fn=None):
    path = cb_file(name, "model.json")
    model.save_model(path, format="json")
    j = json.load(open(path))
    rows = [X[:120], threshold_rows(X, cb_thresholds(j), rng)]
    rows.extend(np.asarray(r, dtype=F32).reshape(-1, X.shape[1]) for r in extra_rows)
    rows = np.concatenate(rows).astype(F32)
    loaded = type(model)()
    loaded.load_model(path, format="json")
    raw = loaded.predict(rows, prediction_type="RawFormulaVal")
    assert np.allclose(raw, model.predict(rows, prediction_type="RawFormulaVal"), rtol=0, atol=1e-12)
    pred = pred_fn(loaded, rows)
    write_rows(cb_file(name, "rows.csv"), rows)
    write_expected(cb_file(name, "expected.csv"), raw, pred)


def make_catboost():
    rng = np.random.default_rng(7)
    common = dict(verbose=0, random_seed=0, thread_count=1, allow_writing_files=False)

    n = 1500
    X = rng.normal(size=(n, 4)).astype(F32)
    X[rng.random(n) < 0.15, 0] = np.nan
    y = (np.nan_to_num(X[:, 0], nan=1.0) + X[:, 1] - 0.5 * X[:, 2] + rng.normal(scale=0.5, size=n) > 0).astype(int)
    Xn = X.copy()
    for f in range(4):
        Xn[rng.random(n) < 0.3, f] = np.nan
    names = ["alpha", "beta", "gamma", "delta"]
    for mode, name in [("Min", "binary_nan_min"), ("Max", "binary_nan_max")]:
        m = cb.CatBoostClassifier(iterations=15, depth=4, nan_mode=mode, **common)
        m.fit(pd.DataFrame(X, columns=names), y)
        cb_save(name, m, X, rng, extra_rows=[Xn[:80]], pred_fn=lambda m, r: m.predict_proba(r)[:, 1])

    # Multiclass (leaf values interleaved per leaf), one-vs-all.
    n = 2000
    X = rng.normal(size=(n, 3)).astype(F32)
    X[rng.random(n) < 0.1, 2] = np.nan
    y = rng.integers(0, 3, size=n)
    X[:, 0] += y * 0.8
    X[:, 1] -= (y == 2) * 1.0
    Xn = X.copy()
    Xn[rng.random(n) < 0.3, 0] = np.nan
    m = cb.CatBoostClassifier(iterations=10, depth=3, loss_function="MultiClass", **common)
    m.fit(X, y)
    cb_save("multiclass", m, X, rng, extra_rows=[Xn[:50]], pred_fn=lambda m, r: m.predict_proba(r))
    m = cb.CatBoostClassifier(iterations=8, depth=3, loss_function="MultiClassOneVsAll", **common)
    m.fit(X, y)
    cb_save("multiclass_ova", m, X, rng, pred_fn=lambda m, r: m.predict_proba(r))

    # Regression with bias (boost_from_average) and a non-unit scale.
    n = 1500
    X = rng.normal(size=(n, 3)).astype(F32)
    X[rng.random(n) < 0.1, 1] = np.nan
    y = 3 * X[:, 0] + np.nan_to_num(X[:, 1], nan=2.0) + 10
    m = cb.CatBoostRegressor(iterations=12, depth=5, loss_function="RMSE", nan_mode="Max", **common)
    m.fit(X, y)
    scale, bias = m.get_scale_and_bias()
    m.set_scale_and_bias(0.75, bias + 0.5)
    cb_save("regression_scaled", m, X, rng, pred_fn=lambda m, r: m.predict(r))

    # Poisson: prediction is exp(raw).
    m = cb.CatBoostRegressor(iterations=8, depth=3, loss_function="Poisson", **common)
    m.fit(X, rng.poisson(np.exp(0.4 * X[:, 0])))
    cb_save("poisson", m, X, rng, pred_fn=lambda m, r: m.predict(r))

    # One-hot categorical splits on integer codes (CatBoost hashes the decimal string). Rows carry
    # the code as a float: codes with trunc(x) < 0, NaN, or unseen codes are not in any set; the
    # library is asked about the category string our convention maps the value to ("-1" = unseen).
    n = 3000
    codes = np.array([0, 1, 2, 3, 5, 8, 9, 10, 11, 17, 25, 38, 99, 123, 1000, 4096, 65535, 1000000])
    c = rng.choice(codes, size=n)
    Xo = np.zeros((n, 3), dtype=F32)
    Xo[:, 0] = rng.normal(size=n)
    Xo[:, 1] = c
    Xo[:, 2] = rng.normal(size=n)
    yo = (np.isin(c, codes[::3]) ^ (Xo[:, 0] > 0.8) | (c == 99)).astype(int)

    def frame(X):
        cats = np.where(np.isnan(X[:, 1]) | (X[:, 1] <= -1), -1, np.trunc(np.nan_to_num(X[:, 1], nan=-1)))
        cats = np.where(np.abs(cats) > 2 ** 31, -1, cats)
        return pd.DataFrame({"x": X[:, 0], "code": cats.astype(np.int64).astype(str), "z": X[:, 2]})

    m = cb.CatBoostClassifier(iterations=12, depth=3, one_hot_max_size=64, **common)
    m.fit(frame(Xo), yo, cat_features=["code"])
    path = cb_file("onehot", "model.json")
    m.save_model(path, format="json")
    extra = np.array([[0.3, v, 0.1] for v in [np.nan, -1, -0.5, -0.999, -7, 2.7, 99.9, 4, 6, 40, 100, 1001, 4095,
                                               65536, 999999, 1000000, 1000000.5, 3e9, 1e10, -1e10]], dtype=F32)
    rows = np.concatenate([Xo[:150], extra]).astype(F32)
    loaded = cb.CatBoostClassifier()
    loaded.load_model(path, format="json")
    write_rows(cb_file("onehot", "rows.csv"), rows)
    write_expected(cb_file("onehot", "expected.csv"),
                   loaded.predict(frame(rows), prediction_type="RawFormulaVal"), loaded.predict_proba(frame(rows))[:, 1])

    # A small CTR model (read, not refused; the CTR parity fixtures check its kind against
    # CatBoost), then models to refuse: one-hot splits on non-code strings, non-symmetric trees.
    n = 1000
    c = rng.integers(0, 30, size=n)
    df = pd.DataFrame({"a": rng.normal(size=n).astype(F32), "c": c.astype(str)})
    yc = ((c % 3 == 0) | (df.a > 1)).astype(int)
    m = cb.CatBoostClassifier(iterations=3, depth=2, **common)
    m.fit(df, yc, cat_features=["c"])
    m.save_model(cb_file("ctr_small", "model.json"), format="json")
    # One-hot categorical splits on string categories that are not integer codes.
    df["c"] = np.array(["red", "green", "blue", "grey"])[c % 4]
    m = cb.CatBoostClassifier(iterations=3, depth=2, one_hot_max_size=10, **common)
    m.fit(df, ((c % 4 == 1) | (df.a > 1)).astype(int), cat_features=["c"])
    m.save_model(cb_file("onehot_strings_refuse", "model.json"), format="json")
    m = cb.CatBoostRegressor(iterations=2, depth=2, grow_policy="Depthwise", **common)
    m.fit(X, y)
    m.save_model(cb_file("depthwise_refuse", "model.json"), format="json")



def make_all():
    make_lightgbm()
    make_catboost()
