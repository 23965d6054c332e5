"""Parity fixtures for the constructs and objectives beyond the common kinds, a part of the one
fixture generator (`tests/gen_fixtures.py` registers them; same directory layout, same
`assert_parity` check through the compiled artifact):

* XGBoost vector-leaf trees (`multi_strategy="multi_output_tree"`): multi-target regression and
  multiclass; a model saved as UBJSON (`model.ubj` + the same booster as `same_model.json`);
* XGBoost objectives: reg:gamma, reg:tweedie, survival:aft, survival:cox, binary:logitraw,
  binary:hinge, multi:softmax (predict gives the class index), rank:ndcg, dart boosting; and a
  gblinear booster the reader refuses (`xgb_gblinear_refuse/`: the model file only);
* LightGBM linear trees (`linear_tree=True`, NaN rows in the leaves' features), and the
  objectives gamma, tweedie, quantile, lambdarank, cross_entropy, multiclassova, dart boosting.
"""
import numpy as np

import gen_fixtures as g

FIXTURES = {}


def fixture(fn):
    FIXTURES[fn.__name__.removeprefix("gen_")] = fn
    return fn


def data(name, n=600, n_feat=5, nan_rate=0.08):
    rng = np.random.default_rng(g.seed_of(name))
    cols = [f"f{i}" for i in range(n_feat)]
    samp = g.gauss_sampler(n_feat, nan_rate=nan_rate)
    X = samp(rng, n)
    return rng, cols, samp, X, g.nz(X)


# ----------------------------------------------------------------------------------------------
# XGBoost


def xgb(name, objective, y, *, task, n_outputs, extra=None, n_rounds=20, notes="", **kw):
    _, cols, samp, X, _ = kw.pop("d")
    params = {"objective": objective, "max_depth": 4, "eta": 0.3, "tree_method": "hist", **(extra or {})}
    g._xgb_fixture(name, params=params, n_rounds=n_rounds, X=X, y=y, cols=cols, test_sample=samp,
                   task=task, n_outputs=n_outputs, notes=notes or objective, **kw)


@fixture
def gen_xgb_vector_regression():
    d = data("xgb_vector_regression")
    z = d[4]
    Y = np.stack([z[:, 0] + z[:, 1], z[:, 2] * z[:, 3] - z[:, 0], np.sin(z[:, 4]) * 3], 1)
    xgb("xgb_vector_regression", "reg:squarederror", Y, task="regression", n_outputs=3, d=d,
        extra={"multi_strategy": "multi_output_tree"},
        notes="multi_output_tree: each leaf holds 3 values, one per target (leaf_weights; a leaf "
              "node's right_children entry is its leaf index).")


@fixture
def gen_xgb_vector_multiclass():
    d = data("xgb_vector_multiclass")
    z = d[4]
    y = np.argmax(np.stack([z[:, 0], z[:, 1] - z[:, 2], z[:, 3] * z[:, 4]], 1), 1)
    xgb("xgb_vector_multiclass", "multi:softprob", y, task="multiclass", n_outputs=3, d=d,
        extra={"multi_strategy": "multi_output_tree", "num_class": 3})


@fixture
def gen_xgb_ubj_multiclass():
    d = data("xgb_ubj_multiclass")
    z = d[4]
    y = np.argmax(np.stack([z[:, 0], z[:, 1] - z[:, 2], z[:, 3] * z[:, 4], z[:, 2]], 1), 1)
    xgb("xgb_ubj_multiclass", "multi:softprob", y, task="multiclass", n_outputs=4, d=d, ubj=True,
        extra={"num_class": 4}, notes="saved as UBJSON (model.ubj); same_model.json is the same booster")


@fixture
def gen_xgb_ubj_vector():
    d = data("xgb_ubj_vector")
    z = d[4]
    Y = np.stack([z[:, 0] - z[:, 1], z[:, 2] + z[:, 3]], 1)
    xgb("xgb_ubj_vector", "reg:squarederror", Y, task="regression", n_outputs=2, d=d, ubj=True,
        extra={"multi_strategy": "multi_output_tree"}, notes="vector leaves saved as UBJSON")


@fixture
def gen_xgb_gamma():
    d = data("xgb_gamma")
    y = np.exp(0.3 * d[4][:, 0] - 0.2 * d[4][:, 1]) * d[0].gamma(2.0, 1.0, len(d[3]))
    xgb("xgb_gamma", "reg:gamma", y, task="regression", n_outputs=1, d=d)


@fixture
def gen_xgb_tweedie():
    d = data("xgb_tweedie")
    y = d[0].poisson(np.exp(0.4 * d[4][:, 0])) * d[0].gamma(2.0, 1.0, len(d[3]))
    xgb("xgb_tweedie", "reg:tweedie", y, task="regression", n_outputs=1, d=d,
        extra={"tweedie_variance_power": 1.3})


@fixture
def gen_xgb_aft():
    d = data("xgb_aft")
    t = np.exp(1 + 0.5 * d[4][:, 0] + 0.2 * d[0].normal(size=len(d[3])))
    upper = np.where(d[0].random(len(t)) < 0.2, np.inf, t)
    xgb("xgb_aft", "survival:aft", t, task="regression", n_outputs=1, d=d,
        extra={"aft_loss_distribution": "normal", "aft_loss_distribution_scale": 1.2},
        float_info={"label_lower_bound": t, "label_upper_bound": upper},
        notes="survival:aft: predict gives exp(margin); right-censored rows have upper bound inf")


@fixture
def gen_xgb_cox():
    d = data("xgb_cox")
    t = np.exp(1 - 0.5 * d[4][:, 0] + 0.3 * d[0].normal(size=len(d[3])))
    y = np.where(d[0].random(len(t)) < 0.2, -t, t)
    xgb("xgb_cox", "survival:cox", y, task="regression", n_outputs=1, d=d,
        notes="survival:cox: predict gives the hazard ratio exp(margin); negative labels are censored")


@fixture
def gen_xgb_logitraw():
    d = data("xgb_logitraw")
    y = (d[4][:, 0] + d[4][:, 1] * d[4][:, 2] > 0).astype(int)
    xgb("xgb_logitraw", "binary:logitraw", y, task="binary", n_outputs=1, d=d,
        notes="binary:logitraw: predict gives the margin")


@fixture
def gen_xgb_hinge():
    d = data("xgb_hinge")
    y = (d[4][:, 0] - d[4][:, 3] > 0.2).astype(int)
    xgb("xgb_hinge", "binary:hinge", y, task="binary", n_outputs=1, d=d,
        notes="binary:hinge: predict gives 1 where margin > 0, else 0")


@fixture
def gen_xgb_softmax():
    d = data("xgb_softmax")
    z = d[4]
    y = np.argmax(np.stack([z[:, 0], z[:, 1], -z[:, 0] - z[:, 1]], 1), 1)
    xgb("xgb_softmax", "multi:softmax", y, task="multiclass", n_outputs=3, d=d, extra={"num_class": 3},
        notes="multi:softmax: predict gives the class index (expected.csv has one column)")


@fixture
def gen_xgb_rank_ndcg():
    d = data("xgb_rank_ndcg")
    n = len(d[3])
    qid = np.repeat(np.arange(n // 20), 20)[:n]
    y = np.clip((d[4][:, 0] + d[4][:, 1] + 1).round(), 0, 4).astype(int)
    xgb("xgb_rank_ndcg", "rank:ndcg", y, task="regression", n_outputs=1, d=d, qid=qid,
        notes="rank:ndcg: predict gives the ranking score (the margin)")


@fixture
def gen_xgb_dart():
    d = data("xgb_dart")
    y = (d[4][:, 0] * d[4][:, 1] + d[4][:, 2] > 0).astype(int)
    xgb("xgb_dart", "binary:logistic", y, task="binary", n_outputs=1, d=d,
        extra={"booster": "dart", "rate_drop": 0.2, "skip_drop": 0.0, "sample_type": "weighted"},
        notes="dart: each tree's leaves are scaled by its weight_drop entry at prediction")


@fixture
def gen_xgb_gblinear_refuse():
    """A linear booster, saved as JSON and UBJSON: the reader must refuse it by name (no rows,
    no meta.json: no parity check reads it)."""
    import xgboost

    _, cols, _, X, z = data("xgb_gblinear_refuse", n=200)
    y = z[:, 0] * 2 - z[:, 1]
    d = g.fresh_dir("xgb_gblinear_refuse")
    dtrain = xgboost.DMatrix(X, label=y, feature_names=cols)
    bst = xgboost.train({"booster": "gblinear", "objective": "reg:squarederror", "seed": 0, "nthread": 1}, dtrain, 5)
    bst.save_model(d / "model.json")
    bst.save_model(d / "model.ubj")


# ----------------------------------------------------------------------------------------------
# LightGBM


def lgb(name, objective, y, *, task="regression", n_outputs=1, extra=None, n_rounds=20, notes="", d):
    _, cols, samp, X, _ = d
    params = {"objective": objective, "num_leaves": 8, "learning_rate": 0.2, "min_data_in_leaf": 5,
              **(extra or {})}
    g._lgb_fixture(name, params=params, n_rounds=n_rounds, X=X, y=y, cols=cols, test_sample=samp,
                   task=task, n_outputs=n_outputs, notes=notes or objective)


@fixture
def gen_lgb_linear():
    d = data("lgb_linear", nan_rate=0.1)
    z = d[4]
    y = 3 * z[:, 0] + 2 * z[:, 1] - z[:, 2] * (z[:, 3] > 0) + 0.5 * z[:, 4]
    lgb("lgb_linear", "regression", y, d=d, extra={"linear_tree": True, "linear_lambda": 0.01},
        notes="linear_tree: leaf = leaf_const + sum(coeff * x) over the leaf's features, or "
              "leaf_value when one of them is NaN")


@fixture
def gen_lgb_linear_binary():
    d = data("lgb_linear_binary", nan_rate=0.1)
    z = d[4]
    y = (z[:, 0] - z[:, 1] + 0.5 * z[:, 2] * z[:, 3] > 0).astype(int)
    lgb("lgb_linear_binary", "binary", y, task="binary", d=d, extra={"linear_tree": True},
        notes="linear_tree with the binary objective")


@fixture
def gen_lgb_gamma():
    d = data("lgb_gamma")
    y = np.exp(0.3 * d[4][:, 0]) * d[0].gamma(2.0, 1.0, len(d[3]))
    lgb("lgb_gamma", "gamma", y, d=d)


@fixture
def gen_lgb_tweedie():
    d = data("lgb_tweedie")
    y = d[0].poisson(np.exp(0.4 * d[4][:, 0])) * d[0].gamma(2.0, 1.0, len(d[3]))
    lgb("lgb_tweedie", "tweedie", y, d=d, extra={"tweedie_variance_power": 1.4})


@fixture
def gen_lgb_quantile():
    d = data("lgb_quantile")
    y = d[4][:, 0] * 2 + d[0].normal(size=len(d[3]))
    lgb("lgb_quantile", "quantile", y, d=d, extra={"alpha": 0.9})


@fixture
def gen_lgb_lambdarank():
    import lightgbm

    name = "lgb_lambdarank"
    d = data(name)
    _, cols, samp, X, z = d
    y = np.clip((z[:, 0] + z[:, 1] + 1).round(), 0, 4).astype(int)
    # _lgb_fixture builds its Dataset without groups: train here, through the same writer.
    orig = lightgbm.Dataset

    def with_groups(*a, **k):
        ds = orig(*a, **k)
        ds.set_group([20] * (len(X) // 20))
        return ds

    lightgbm.Dataset = with_groups
    try:
        lgb(name, "lambdarank", y, d=d, notes="lambdarank: predict gives the ranking score")
    finally:
        lightgbm.Dataset = orig


@fixture
def gen_lgb_xentropy():
    d = data("lgb_xentropy")
    y = 1 / (1 + np.exp(-(d[4][:, 0] - d[4][:, 1])))
    lgb("lgb_xentropy", "cross_entropy", y, d=d, notes="cross_entropy: predict gives sigmoid(margin)")


@fixture
def gen_lgb_multiclassova():
    d = data("lgb_multiclassova")
    z = d[4]
    y = np.argmax(np.stack([z[:, 0], z[:, 1], z[:, 2]], 1), 1)
    lgb("lgb_multiclassova", "multiclassova", y, task="multiclass", n_outputs=3, d=d,
        extra={"num_class": 3}, notes="multiclassova: one sigmoid per class, not normalised")


@fixture
def gen_lgb_dart():
    d = data("lgb_dart")
    y = (d[4][:, 0] * d[4][:, 1] + d[4][:, 2] > 0).astype(int)
    lgb("lgb_dart", "binary", y, task="binary", d=d, extra={"boosting": "dart", "drop_rate": 0.3},
        notes="dart: LightGBM rescales the dropped trees in place; the saved trees are summed")


# ----------------------------------------------------------------------------------------------
# CatBoost CTR features (categorical features with more values than one_hot_max_size, and their
# combinations), from JSON and from CatBoost's default binary format (.cbm)


def cb_frame(X, cols, cat_idx):
    """What CatBoost is given: a categorical column holds the decimal string of the code
    trunc(x); NaN, x <= -1 and x >= 2^32 are the category "-1" (the evaluator's convention)."""
    import pandas as pd

    df = pd.DataFrame(X, columns=cols)
    for j in cat_idx:
        v = X[:, j].astype(np.float64)
        bad = np.isnan(v) | (v <= -1) | (v >= 2.0 ** 32)
        codes = np.where(bad, -1, np.trunc(np.nan_to_num(v, nan=-1))).astype(np.int64)
        df[cols[j]] = codes.astype(str)
    return df


def cb_ctr(name, model, X, y, cols, cat_idx, *, task, n_outputs, notes, after_fit=None):
    """Trains on `X` (categorical columns hold integer codes), writes model.json (normalised),
    same_model.cbm (the same model in CatBoost's binary format), rows with seen, unseen, NaN,
    negative and fractional codes, and CatBoost's predictions for them."""
    import catboost as cb

    rng = np.random.default_rng(g.seed_of(name) + 1)
    d = g.fresh_dir(name)
    cat_names = [cols[j] for j in cat_idx]
    model.fit(cb_frame(X, cols, cat_idx), y, cat_features=cat_names)
    if after_fit:
        after_fit(model)
    path = d / "model.json"
    model.save_model(str(path), format="json")
    g._normalise_catboost_json(path, name)
    model.save_model(str(d / "same_model.cbm"))
    loaded = type(model)()
    loaded.load_model(str(path), format="json")
    n = 160
    R = X[rng.integers(len(X), size=n)].copy()
    for j in cat_idx:
        seen_max = np.nanmax(X[:, j])
        k = rng.random(n)
        R[k < 0.1, j] = np.nan
        R[(k >= 0.1) & (k < 0.2), j] = seen_max + 1 + rng.integers(0, 5000, size=((k >= 0.1) & (k < 0.2)).sum())
        R[(k >= 0.2) & (k < 0.25), j] = -rng.integers(1, 9, size=((k >= 0.2) & (k < 0.25)).sum())
        R[(k >= 0.25) & (k < 0.3), j] += 0.5
    num = [j for j in range(len(cols)) if j not in cat_idx]
    for j in num:
        R[rng.random(n) < 0.08, j] = np.nan
    R = R.astype(np.float32)
    df = cb_frame(R, cols, cat_idx)
    raw = loaded.predict(df, prediction_type="RawFormulaVal")
    assert np.allclose(raw, model.predict(df, prediction_type="RawFormulaVal"), rtol=0, atol=1e-12)
    if task == "regression":
        pred = loaded.predict(df)
    else:
        pred = loaded.predict_proba(df)
        if task == "binary":
            pred = pred[:, 1]
    g.write_rows(d / "rows.csv", R, cols)
    g.write_expected(d / "expected.csv", pred)
    g.write_expected(d / "expected_raw.csv", raw)
    g.write_meta(d, format="catboost", task=task, n_outputs=n_outputs, categorical=cat_names, features=cols,
                 library="catboost " + cb.__version__, n_rows=len(R),
                 notes=notes + " Categorical columns hold integer codes; CatBoost saw str(trunc(x)), "
                 "and NaN, x <= -1 and x >= 2^32 as the category \"-1\". same_model.cbm is the same "
                 "model in CatBoost's binary format.")


def cb_data(name, n=3000):
    rng = np.random.default_rng(g.seed_of(name))
    X = np.zeros((n, 5), dtype=np.float32)
    X[:, 0] = rng.normal(size=n)
    X[:, 1] = rng.integers(0, 40, size=n)
    X[:, 2] = rng.integers(0, 9, size=n)
    X[:, 3] = rng.integers(0, 3, size=n)
    X[:, 4] = rng.normal(size=n)
    X[rng.random(n) < 0.1, 0] = np.nan
    return rng, X, ["x", "c40", "c9", "c3", "z"], [1, 2, 3]


COMMON_CB = dict(verbose=0, random_seed=0, thread_count=1, allow_writing_files=False)


@fixture
def gen_catboost_ctr_binary():
    import catboost as cb

    rng, X, cols, cat = cb_data("catboost_ctr_binary")
    c1, c2, c3 = X[:, 1].astype(int), X[:, 2].astype(int), X[:, 3].astype(int)
    y = (((c1 % 3 == 0) ^ (c2 % 2 == 0)) | (np.nan_to_num(X[:, 0]) > 1) | ((c3 == 1) & (c1 % 2 == 0))).astype(int)
    m = cb.CatBoostClassifier(iterations=40, depth=4, one_hot_max_size=3, max_ctr_complexity=3,
                              simple_ctr=["Borders", "Counter", "Buckets"], combinations_ctr=["Borders", "Counter"],
                              nan_mode="Max", **COMMON_CB)
    cb_ctr("catboost_ctr_binary", m, X, y, cols, cat, task="binary", n_outputs=1,
           notes="Borders, Buckets and Counter CTRs on single features and on combinations (with a "
                 "one-hot element), binary Logloss.")


@fixture
def gen_catboost_ctr_multiclass():
    import catboost as cb

    rng, X, cols, cat = cb_data("catboost_ctr_multiclass")
    c1, c2 = X[:, 1].astype(int), X[:, 2].astype(int)
    y = (c1 % 3 + (c2 > 4) + (np.nan_to_num(X[:, 4]) > 0.5)) % 3
    m = cb.CatBoostClassifier(iterations=25, depth=4, loss_function="MultiClass", max_ctr_complexity=2,
                              **COMMON_CB)
    cb_ctr("catboost_ctr_multiclass", m, X, y, cols, cat, task="multiclass", n_outputs=3,
           notes="MultiClass: Borders CTRs over 3 target classes, default CTR settings.")


@fixture
def gen_catboost_ctr_regression():
    import catboost as cb

    rng, X, cols, cat = cb_data("catboost_ctr_regression")
    c1, c2 = X[:, 1].astype(int), X[:, 2].astype(int)
    y = (c1 % 7) * 0.5 + (c2 == 3) * 2.0 + np.nan_to_num(X[:, 0]) + rng.normal(scale=0.1, size=len(X))
    m = cb.CatBoostRegressor(iterations=30, depth=5, max_ctr_complexity=2, **COMMON_CB)
    cb_ctr("catboost_ctr_regression", m, X, y, cols, cat, task="regression", n_outputs=1,
           notes="RMSE: CTRs on a binarized regression target (Borders over the target borders).")


@fixture
def gen_catboost_cbm_scaled():
    import catboost as cb

    rng, X, cols, _ = cb_data("catboost_cbm_scaled")
    y = 3 * np.nan_to_num(X[:, 0], nan=2.0) + X[:, 4] + 10
    m = cb.CatBoostRegressor(iterations=15, depth=4, nan_mode="Max", **COMMON_CB)

    def rescale(m):
        _, bias = m.get_scale_and_bias()
        m.set_scale_and_bias(0.75, bias + 0.5)

    cb_ctr("catboost_cbm_scaled", m, X, y, cols, [], task="regression", n_outputs=1, after_fit=rescale,
           notes="No categorical features; a non-unit scale and a shifted bias, to read them from .cbm.")


@fixture
def gen_catboost_ctr_mean():
    import catboost as cb

    rng, X, cols, cat = cb_data("catboost_ctr_mean")
    c1, c2 = X[:, 1].astype(int), X[:, 2].astype(int)
    y = (c1 % 5) * 0.3 + (c2 == 2) + np.nan_to_num(X[:, 0]) + rng.normal(scale=0.1, size=len(X))
    m = cb.CatBoostRegressor(iterations=20, depth=4, max_ctr_complexity=1, simple_ctr=["BinarizedTargetMeanValue"],
                             **COMMON_CB)
    cb_ctr("catboost_ctr_mean", m, X, y, cols, cat, task="regression", n_outputs=1,
           notes="BinarizedTargetMeanValue CTRs: tables of (sum, count) per key.")
