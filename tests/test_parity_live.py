"""Live parity: fresh models, randomized each run, scored by the edgescore CLI.

Every test trains a NEW small model with randomized hyperparameters and data
using the real library (XGBoost, LightGBM, CatBoost, scikit-learn -> ONNX),
writes it to a temporary directory, runs

    edgescore compile MODEL -o OUT.esm
    edgescore score OUT.esm --csv ROWS.csv [--raw]

and compares the printed lines with the library's own predictions:
probabilities to 1e-5 absolute; regression values and margins to
``1e-4 + 1e-5 * |expected|``.

The rows mix random samples (with NaNs), rows whose features sit EXACTLY on the
trained model's split thresholds (parsed back from the saved file; for
LightGBM also the neighbouring float32 values) and special values
(+-0.0, +-1e30, +-FLT_MAX, +-inf where the library accepts it, NaN).

Seed: ``EDGESCORE_TEST_SEED`` (default: random).  It appears in every test
id (``[seed=N]``) and every failure message; re-run with
``EDGESCORE_TEST_SEED=N pytest tests/test_parity_live.py`` to reproduce.
Binary: ``EDGESCORE_BIN`` (default ``<repo>/target/release/edgescore``); the
whole module is skipped if it does not exist (under ``make test``: fails).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.require import missing, test_seed
# The fixture generators' row builders, threshold parsers and float32-exact CSV.
from tests.fixtures import catboost as cb_fixtures
from tests.fixtures import common as fixtures
from tests.fixtures import lightgbm as lgb_fixtures
from tests.fixtures import onnx as onnx_fixtures
from tests.fixtures import tasks
from tests.fixtures import xgboost as xgb_fixtures

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

warnings.filterwarnings("ignore")

BIN = Path(os.environ.get("EDGESCORE_BIN", REPO / "target" / "release" / "edgescore"))
if not BIN.is_file():
    missing(f"edgescore binary not found at {BIN} (`make build` builds it; or set EDGESCORE_BIN)", module=True)

SEED = test_seed()

# Every test takes `seed`, so the seed shows up in each test id.
pytestmark = pytest.mark.parametrize("seed", [SEED], ids=[f"seed={SEED}"])

PROB_ATOL = 1e-5
VAL_ATOL, VAL_RTOL = 1e-4, 1e-5


def rng_for(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def _run(args, what):
    p = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.fail(f"`edgescore {' '.join(map(str, args))}` ({what}) exited {p.returncode}\n"
                    f"stderr: {p.stderr.strip()}\nstdout: {p.stdout.strip()[:2000]}\n"
                    f"(EDGESCORE_TEST_SEED={SEED})", pytrace=False)
    return p.stdout


def compile_model(model: Path, out: Path, fmt: str | None = None, name: str | None = None) -> Path:
    args = ["compile", model, "-o", out]
    if fmt:
        args += ["--format", fmt]
    if name:
        args += ["--name", name]
    _run(args, "compile")
    assert out.is_file() and out.stat().st_size > 0, f"compile wrote no artifact at {out}"
    return out


def score(artifact: Path, rows_csv: Path, raw: bool = False) -> np.ndarray:
    out = _run(["score", artifact, "--csv", rows_csv] + (["--raw"] if raw else []), "score")
    lines = [ln for ln in out.splitlines() if ln.strip()]
    try:
        return [[float(x) for x in ln.split(",")] for ln in lines]
    except ValueError as e:
        pytest.fail(f"unparseable score output ({e}); first lines:\n" + "\n".join(lines[:5]),
                    pytrace=False)


# --------------------------------------------------------------------------
# comparison
# --------------------------------------------------------------------------


def assert_close(got_lines, expected, *, kind: str, what: str, rows_csv: Path, groups=None):
    """kind: 'prob' (abs 1e-5) or 'value' (abs <= 1e-4 + 1e-5*|expected|)."""
    exp = np.asarray(expected, dtype=np.float64)
    if exp.ndim == 1:
        exp = exp[:, None]
    n, k = exp.shape
    ctx = f"[{what}; EDGESCORE_TEST_SEED={SEED}; rows: {rows_csv}]"
    assert len(got_lines) == n, f"{ctx} expected {n} output lines, got {len(got_lines)}"
    widths = {len(r) for r in got_lines}
    assert widths == {k}, f"{ctx} expected {k} value(s) per line, got widths {sorted(widths)}; " \
                          f"first line: {got_lines[0] if got_lines else None}"
    got = np.asarray(got_lines, dtype=np.float64)
    tol = PROB_ATOL if kind == "prob" else VAL_ATOL + VAL_RTOL * np.abs(exp)
    both_nan = np.isnan(exp) & np.isnan(got)
    same_inf = np.isinf(exp) & (exp == got)
    with np.errstate(invalid="ignore"):
        bad = ~(both_nan | same_inf | (np.abs(got - exp) <= tol))
    if not bad.any():
        return
    bad_rows = np.nonzero(bad.any(1))[0]
    csv_lines = rows_csv.read_text().splitlines()

    def group_of(i):
        for g, (a, b) in (groups or {}).items():
            if a <= i < b:
                return g
        return "?"

    with np.errstate(invalid="ignore"):
        err = np.nan_to_num(np.abs(got - exp), nan=np.inf).max(1)
    worst = bad_rows[np.argsort(-err[bad_rows], kind="stable")][:8]
    msg = [f"{ctx} {len(bad_rows)}/{n} rows differ ({kind} tolerance); worst:",
           f"  header: {csv_lines[0]}"]
    for i in worst:
        msg.append(f"  row {i} ({group_of(i)}): expected {exp[i].tolist()} got {got[i].tolist()}\n"
                   f"      input: {csv_lines[i + 1]}")
    by_group = {}
    for i in bad_rows:
        by_group[group_of(i)] = by_group.get(group_of(i), 0) + 1
    msg.append(f"  failing rows by group: {by_group}")
    pytest.fail("\n".join(msg), pytrace=False)


def write_rows(tmp: Path, R, cols, cat_cols=()):
    p = tmp / "rows.csv"
    fixtures.write_rows(p, R, list(cols), list(cat_cols))
    return p


def assert_scores(tmp: Path, model: Path, R, cols, pred, *, prob: bool, what: str, raw=None,
                  groups=None, cat_cols=()):
    """Compiles `model`, scores the rows R with the CLI and holds the output to `pred`
    (probabilities when `prob`, else values) and, given `raw`, `--raw` to the margins `raw`.
    Returns the scores."""
    rows = write_rows(tmp, R, cols, cat_cols)
    art = compile_model(model, tmp / "model.esm")
    got = score(art, rows)
    assert_close(got, pred, kind="prob" if prob else "value", what=what, rows_csv=rows, groups=groups)
    if raw is not None:
        assert_close(score(art, rows, raw=True), raw, kind="value", what=what + " --raw",
                     rows_csv=rows, groups=groups)
    return got


def gauss(n_feat, nan_rate, scale=1.0):
    return tasks.gauss_sampler(n_feat, nan_rate=nan_rate, scale=scale)


def random_data(rng, n_feat: tuple[int, int], n_rows: tuple[int, int], nan_max=0.15, scale=1.0,
                prefix="f"):
    """Gaussian training rows: the number of features and of rows drawn from [low, high), the
    NaN rate from [0, nan_max). Returns (column names, a sampler of rows alike, X)."""
    n = int(rng.integers(*n_feat))
    samp = gauss(n, float(rng.uniform(0, nan_max)), scale=scale)
    return [f"{prefix}{i}" for i in range(n)], samp, samp(rng, int(rng.integers(*n_rows)))


def small_rows(rng, sample, n_feat, thr, **kw):
    return fixtures.build_rows(rng, sample, n_feat, thr, n_random=60, n_all_thr=25, n_single_thr=30, **kw)


def nz(X):
    return np.nan_to_num(np.asarray(X, np.float64), nan=0.0)


def synth_binary(rng, X):
    z = nz(X)
    w = rng.normal(size=X.shape[1])
    s = z @ w + 0.8 * z[:, 0] * z[:, 1 % X.shape[1]] - 0.6 * z[:, -1] ** 2
    s += 0.7 * np.isnan(X[:, 0]) + rng.normal(0, 0.5, len(X))
    return (s > np.median(s)).astype(int)


def synth_multiclass(rng, X, k):
    z = nz(X)
    W = rng.normal(size=(X.shape[1], k))
    s = z @ W + 0.5 * (z[:, :1] ** 2) * rng.normal(size=k) + rng.normal(0, 0.5, (len(X), k))
    y = np.argmax(s, 1)
    y[:k] = np.arange(k)  # every class present
    return y


def synth_regression(rng, X):
    z = nz(X)
    w = rng.normal(size=X.shape[1])
    return 5 + z @ w + 2 * np.sin(z[:, 0]) + z[:, 1 % X.shape[1]] * z[:, -1] + rng.normal(0, .3, len(X))


def regression_data(rng, n_feat: tuple[int, int], n_rows: tuple[int, int], positive=False):
    """random_data at scale 1 or 10 and synth_regression's targets; `positive` (poisson, gamma,
    tweedie): exp of the standardised targets. Returns (cols, sampler, X, y)."""
    cols, samp, X = random_data(rng, n_feat, n_rows, scale=float(rng.choice([1.0, 10.0])))
    y = synth_regression(rng, X)
    if positive:
        y = np.exp(np.clip((y - y.mean()) / (y.std() + 1e-9), -3, 3))
    return cols, samp, X, y


# --------------------------------------------------------------------------
# XGBoost
# --------------------------------------------------------------------------


def _xgb_common(rng):
    return {
        "max_depth": int(rng.integers(2, 9)),
        "eta": float(rng.uniform(0.05, 0.5)),
        "tree_method": str(rng.choice(["hist", "approx", "exact"])),
        "min_child_weight": float(rng.choice([0.0, 0.5, 1.0, 3.0])),
        "lambda": float(rng.uniform(0.1, 2.0)),
        "subsample": float(rng.choice([1.0, 0.8])),
        "colsample_bytree": float(rng.choice([1.0, 0.7])),
        "max_bin": int(rng.choice([16, 64, 256])),
        "seed": int(rng.integers(1 << 30)),
        "nthread": 1,
    }


def _xgb_check(tmp, bst, rng, samp, cols, *, task, ftypes=None, cat_cols=(), ubj=False):
    """Rows from `samp` and on the model's thresholds, scored by the CLI and by XGBoost.
    ``ubj``: the CLI reads the model as UBJSON."""
    import xgboost as xgb

    bst.save_model(tmp / "model.json")
    cat_idx = [list(cols).index(c) for c in cat_cols]
    R, groups = small_rows(rng, samp, len(cols), xgb_fixtures.xgb_thresholds(tmp / "model.json"),
                           cat_cols=cat_idx, allow_inf=False)
    path = tmp / ("model.ubj" if ubj else "model.json")
    if ubj:
        bst.save_model(path)
    loaded = xgb.Booster(model_file=str(path))
    d = xgb.DMatrix(R, feature_names=list(cols), feature_types=ftypes,
                    enable_categorical=bool(cat_cols), missing=np.nan)
    pred, raw = loaded.predict(d), loaded.predict(d, output_margin=True)
    objective = json.loads(loaded.save_config())["learner"]["objective"]["name"]
    assert_scores(tmp, path, R, cols, pred, prob=task != "regression", raw=raw, groups=groups,
                  cat_cols=cat_cols, what=f"xgboost {task} {objective} ({path.suffix[1:]})")


def test_xgb_binary(seed, tmp_path):
    import xgboost as xgb

    rng = rng_for(seed, "xgb_binary")
    cols, samp, X = random_data(rng, (3, 12), (200, 700), nan_max=0.2)
    y = synth_binary(rng, X)
    params = dict(_xgb_common(rng), objective="binary:logistic")
    if rng.random() < 0.3:
        params["base_score"] = float(rng.uniform(0.2, 0.8))
    bst = xgb.train(params, xgb.DMatrix(pd.DataFrame(X, columns=cols), label=y),
                    int(rng.integers(5, 60)))
    tmp_path.joinpath("params.json").write_text(json.dumps(params))
    _xgb_check(tmp_path, bst, rng, samp, cols, task="binary")


def test_xgb_multiclass(seed, tmp_path):
    import xgboost as xgb

    rng = rng_for(seed, "xgb_multiclass")
    k = int(rng.integers(3, 6))
    cols, samp, X = random_data(rng, (3, 10), (300, 700), prefix="x")
    y = synth_multiclass(rng, X, k)
    params = dict(_xgb_common(rng), objective="multi:softprob", num_class=k)
    params["max_depth"] = min(params["max_depth"], 5)
    bst = xgb.train(params, xgb.DMatrix(pd.DataFrame(X, columns=cols), label=y),
                    int(rng.integers(3, 20)))
    _xgb_check(tmp_path, bst, rng, samp, cols, task="multiclass")


@pytest.mark.parametrize("objective", ["reg:squarederror", "reg:absoluteerror",
                                       "reg:pseudohubererror", "count:poisson", "reg:gamma",
                                       "reg:tweedie"])
def test_xgb_regression(seed, objective, tmp_path):
    import xgboost as xgb

    rng = rng_for(seed, "xgb_regression" + objective)
    cols, samp, X, y = regression_data(rng, (3, 10), (200, 600),
                                       positive=objective in ("count:poisson", "reg:gamma", "reg:tweedie"))
    if objective == "count:poisson":
        y = rng.poisson(y)
    params = dict(_xgb_common(rng), objective=objective)
    bst = xgb.train(params, xgb.DMatrix(pd.DataFrame(X, columns=cols), label=y),
                    int(rng.integers(5, 50)))
    _xgb_check(tmp_path, bst, rng, samp, cols, task="regression")


def _cat_sampler(rng, num_cols, cat_sizes, nan_rate, unseen):
    """Numeric gaussian columns followed by categorical code columns.  Test rows
    (train=False) include NaN, negative, unseen and out-of-range codes."""
    names = list(num_cols) + list(cat_sizes)

    def sample(r, n, train=False):
        X = np.empty((n, len(names)), np.float32)
        X[:, :len(num_cols)] = r.normal(size=(n, len(num_cols)))
        X[:, :len(num_cols)][r.random((n, len(num_cols))) < nan_rate] = np.nan
        for j, (c, k) in enumerate(cat_sizes.items(), start=len(num_cols)):
            codes = r.integers(0, k, n).astype(np.float32)
            if train:
                codes[np.isin(codes, unseen[c])] = 0
                codes[r.random(n) < nan_rate] = np.nan
            else:
                u = r.random(n)
                codes[u < 0.08] = np.nan
                codes[(u >= 0.08) & (u < 0.13)] = -1
                codes[(u >= 0.13) & (u < 0.18)] = k + r.integers(0, 50)
                if len(unseen[c]):
                    m = (u >= 0.18) & (u < 0.26)
                    codes[m] = r.choice(unseen[c], m.sum())
            X[:, j] = codes
        return X

    return names, sample


def _cat_label(rng, X, n_num, cat_sizes):
    s = nz(X[:, :n_num]) @ rng.normal(size=n_num)
    for j, k in enumerate(cat_sizes.values(), start=n_num):
        effect = rng.normal(0, 1.2, k + 1)
        codes = np.nan_to_num(X[:, j], nan=k).astype(int)
        s += effect[codes]
    return (s + rng.normal(0, 0.4, len(s)) > np.median(s)).astype(int)


def _cat_data(rng, n_rows: tuple[int, int]):
    """1-4 numeric columns and 1-3 categorical ones of random sizes, some of their codes never
    trained: (n_num, cat_sizes, cols, sampler, X, binary labels)."""
    n_num = int(rng.integers(1, 5))
    cat_sizes = {f"c{i}": int(rng.choice([3, 5, 12, 40, 100])) for i in range(int(rng.integers(1, 4)))}
    unseen = {c: rng.choice(k, min(k // 4, 5), replace=False) for c, k in cat_sizes.items()}
    cols, samp = _cat_sampler(rng, [f"n{i}" for i in range(n_num)], cat_sizes,
                              float(rng.uniform(0, 0.1)), unseen)
    X = samp(rng, int(rng.integers(*n_rows)), train=True)
    return n_num, cat_sizes, cols, samp, X, _cat_label(rng, X, n_num, cat_sizes)


def test_xgb_categorical(seed, tmp_path):
    import xgboost as xgb

    rng = rng_for(seed, "xgb_categorical")
    n_num, cat_sizes, cols, samp, X, y = _cat_data(rng, (300, 800))
    df = pd.DataFrame(X, columns=cols)
    for c, k in cat_sizes.items():
        df[c] = pd.Categorical(df[c], categories=list(range(k)))
    params = dict(_xgb_common(rng), objective="binary:logistic",
                  max_cat_to_onehot=int(rng.choice([1, 1, 1, 4])),
                  tree_method=str(rng.choice(["hist", "approx"])))
    bst = xgb.train(params, xgb.DMatrix(df, label=y, enable_categorical=True),
                    int(rng.integers(5, 40)))
    ftypes = ["float"] * n_num + ["c"] * len(cat_sizes)
    _xgb_check(tmp_path, bst, rng, samp, cols, task="binary", ftypes=ftypes, cat_cols=list(cat_sizes))


# --------------------------------------------------------------------------
# LightGBM
# --------------------------------------------------------------------------


def _lgb_params(rng, **kw):
    p = {
        "num_leaves": int(rng.choice([2, 4, 15, 31, 63])),
        "learning_rate": float(rng.uniform(0.05, 0.4)),
        "min_data_in_leaf": int(rng.choice([1, 3, 10, 20])),
        "max_bin": int(rng.choice([15, 63, 255])),
        "use_missing": bool(rng.random() < 0.85),
        "zero_as_missing": bool(rng.random() < 0.2),
        "lambda_l2": float(rng.choice([0.0, 1.0])),
        "verbose": -1,
        "seed": int(rng.integers(1 << 30)),
        "num_threads": 1,
        "deterministic": True,
        "force_row_wise": True,
    }
    boosting = str(rng.choice(["gbdt", "gbdt", "dart", "rf", "goss"]))
    if boosting == "rf":
        p.update(boosting="rf", bagging_fraction=0.7, bagging_freq=1, feature_fraction=0.8)
    elif boosting == "goss":
        p.update(data_sample_strategy="goss")
    elif boosting == "dart":
        p.update(boosting="dart", drop_rate=0.2)
    p.update(kw)
    return p


def _lgb_check(tmp, bst, rng, samp, cols, *, task, cat_cols=()):
    """Rows from `samp` and at (and beside) the model's thresholds, scored by the CLI and by
    LightGBM."""
    import lightgbm as lgb

    path = tmp / "model.txt"
    bst.save_model(str(path))
    thr = {j: fixtures.f32_neighbourhood(v) for j, v in lgb_fixtures.lgb_thresholds_f64(path).items()}
    cat_idx = [list(cols).index(c) for c in cat_cols]
    R, groups = small_rows(rng, samp, len(cols), thr, cat_cols=cat_idx, allow_inf=True, tiny=True)
    loaded = lgb.Booster(model_file=str(path))
    Rdf = pd.DataFrame(R, columns=list(cols))
    pred, raw = loaded.predict(Rdf), loaded.predict(Rdf, raw_score=True)
    if any(ln.strip() == "average_output" for ln in path.read_text().splitlines()[:30]):
        # LightGBM quirk (boosting=rf): predict() applies the link to the AVERAGE of the trees,
        # but predict(raw_score=True) returns the un-averaged SUM.  The margin that predict()
        # transforms is raw / n_iterations; that is what `--raw` is held to.
        raw = raw / loaded.current_iteration()
    what = f"lightgbm {task} ({bst.params.get('objective')}, boosting {bst.params.get('boosting', 'gbdt')})"
    assert_scores(tmp, path, R, cols, pred, prob=task != "regression", raw=raw, groups=groups,
                  cat_cols=cat_cols, what=what)


def test_lgb_binary(seed, tmp_path):
    import lightgbm as lgb

    rng = rng_for(seed, "lgb_binary")
    n_feat = int(rng.integers(3, 12))
    cols = [f"f{i}" for i in range(n_feat)]
    train_samp = tasks.gauss_sampler(n_feat, nan_rate=float(rng.uniform(0, 0.2)),
                                  nan_cols=range(int(rng.integers(0, n_feat + 1))))

    def samp(r, n):  # test rows: NaN anywhere, some exact zeros
        X = gauss(n_feat, 0.08)(r, n)
        X[r.random(X.shape) < 0.05] = 0.0
        return X

    X = train_samp(rng, int(rng.integers(200, 800)))
    X[rng.random(X.shape) < 0.1] = 0.0
    y = synth_binary(rng, X)
    params = _lgb_params(rng, objective="binary")
    bst = lgb.train(params, lgb.Dataset(pd.DataFrame(X, columns=cols), label=y),
                    int(rng.integers(5, 60)))
    _lgb_check(tmp_path, bst, rng, samp, cols, task="binary")


def test_lgb_multiclass(seed, tmp_path):
    import lightgbm as lgb

    rng = rng_for(seed, "lgb_multiclass")
    k = int(rng.integers(3, 6))
    cols, samp, X = random_data(rng, (3, 10), (300, 800))
    y = synth_multiclass(rng, X, k)
    objective = str(rng.choice(["multiclass", "multiclassova"]))
    params = _lgb_params(rng, objective=objective, num_class=k)
    params["num_leaves"] = max(params["num_leaves"], 4)
    bst = lgb.train(params, lgb.Dataset(pd.DataFrame(X, columns=cols), label=y),
                    int(rng.integers(3, 25)))
    _lgb_check(tmp_path, bst, rng, samp, cols, task="multiclass")


@pytest.mark.parametrize("objective", ["regression", "regression_l1", "huber", "poisson",
                                       "tweedie", "gamma"])
def test_lgb_regression(seed, objective, tmp_path):
    import lightgbm as lgb

    rng = rng_for(seed, "lgb_regression" + objective)
    cols, samp, X, y = regression_data(rng, (3, 10), (200, 700),
                                       positive=objective in ("poisson", "tweedie", "gamma"))
    params = _lgb_params(rng, objective=objective)
    bst = lgb.train(params, lgb.Dataset(pd.DataFrame(X, columns=cols), label=y),
                    int(rng.integers(5, 50)))
    _lgb_check(tmp_path, bst, rng, samp, cols, task="regression")


def test_lgb_categorical(seed, tmp_path):
    import lightgbm as lgb

    rng = rng_for(seed, "lgb_categorical")
    n_num, cat_sizes, cols, samp, X, y = _cat_data(rng, (300, 900))
    params = _lgb_params(rng, objective="binary", min_data_per_group=int(rng.choice([2, 10, 50])),
                         cat_smooth=float(rng.choice([1.0, 10.0])),
                         max_cat_to_onehot=int(rng.choice([2, 4, 8])))
    ds = lgb.Dataset(pd.DataFrame(X, columns=cols), label=y, categorical_feature=list(cat_sizes))
    bst = lgb.train(params, ds, int(rng.integers(5, 40)))
    _lgb_check(tmp_path, bst, rng, samp, cols, task="binary", cat_cols=list(cat_sizes))


# --------------------------------------------------------------------------
# CatBoost
# --------------------------------------------------------------------------


def _cb_common(rng):
    return dict(
        iterations=int(rng.integers(5, 60)),
        depth=int(rng.integers(1, 8)),
        learning_rate=float(rng.uniform(0.05, 0.4)),
        border_count=int(rng.choice([8, 32, 254])),
        nan_mode=str(rng.choice(["Min", "Max"])),
        random_seed=int(rng.integers(1 << 30)),
        thread_count=1, verbose=0, allow_writing_files=False,
    )


def _cb_check(tmp, model, rng, samp, cols, *, task):
    import catboost as cb

    path = tmp / "model.json"
    model.save_model(str(path), format="json")
    loaded = type(model)()
    loaded.load_model(str(path), format="json")
    R, groups = small_rows(rng, samp, len(cols), cb_fixtures.cb_thresholds(path), allow_inf=True)
    Rdf = pd.DataFrame(R, columns=cols)
    pred = cb_fixtures.cb_predict(loaded, Rdf, task)
    raw = loaded.predict(Rdf, prediction_type="RawFormulaVal")
    what = f"catboost {task} ({model.get_params().get('loss_function', 'default')}, " \
           f"catboost {cb.__version__})"
    assert_scores(tmp, path, R, cols, pred, prob=task != "regression", raw=raw, groups=groups, what=what)


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_catboost(seed, task, tmp_path):
    import catboost as cb

    rng = rng_for(seed, "catboost_" + task)
    params = _cb_common(rng)
    if task == "binary":
        cols, samp, X = random_data(rng, (2, 10), (200, 700))
        y = synth_binary(rng, X)
        m = cb.CatBoostClassifier(**params, loss_function=str(rng.choice(["Logloss", "CrossEntropy"])))
    elif task == "multiclass":
        cols, samp, X = random_data(rng, (2, 9), (300, 700))
        y = synth_multiclass(rng, X, int(rng.integers(3, 6)))
        params["depth"] = min(params["depth"], 5)
        m = cb.CatBoostClassifier(**params, loss_function="MultiClass")
    else:
        cols, samp, X, y = regression_data(rng, (2, 10), (200, 700))
        m = cb.CatBoostRegressor(**params, loss_function=str(rng.choice(["RMSE", "MAE"])))
    m.fit(pd.DataFrame(X, columns=cols), y)
    _cb_check(tmp_path, m, rng, samp, cols, task=task)


# --------------------------------------------------------------------------
# scikit-learn -> ONNX
# --------------------------------------------------------------------------


def _onnx_check(tmp, model, X, rng, *, task, nan_rate):
    """Reference: onnxruntime on all rows (exact thresholds, specials, NaN), and the
    sklearn model itself on the random NaN-free rows."""
    n_feat = X.shape[1]
    onx = onnx_fixtures.sklearn_to_onnx(model, n_feat)
    path = tmp / "model.onnx"
    path.write_bytes(onx.SerializeToString())
    cols = [f"f{i}" for i in range(n_feat)]
    samp = gauss(n_feat, nan_rate)
    R, groups = small_rows(rng, samp, n_feat, onnx_fixtures.onnx_thresholds(path), allow_inf=True)
    outs = onnx_fixtures.ort_run(path, R)
    if task == "regression":
        ort_pred = np.asarray(outs["variable"]).reshape(-1)
        sk = model.predict
    else:
        ort_pred = np.asarray(outs["probabilities"])
        sk = model.predict_proba
    clean = np.nonzero(~np.isnan(R[: groups["random"][1]]).any(1))[0]
    sk_pred = np.asarray(sk(R[clean]))
    if task == "binary":
        ort_pred, sk_pred = ort_pred[:, 1], sk_pred[:, 1]
    what = f"onnx {task} ({type(model).__name__} via skl2onnx)"
    got = assert_scores(tmp, path, R, cols, ort_pred, prob=task != "regression", groups=groups,
                        what=what + " vs onnxruntime")
    sub = tmp / "rows_sklearn.csv"
    fixtures.write_rows(sub, R[clean], cols)
    assert_close([got[i] for i in clean], sk_pred, kind="value" if task == "regression" else "prob",
                 what=what + " vs sklearn (NaN-free random rows)", rows_csv=sub)


def test_onnx_rf_binary(seed, tmp_path):
    from sklearn.ensemble import RandomForestClassifier, ExtraTreesClassifier

    rng = rng_for(seed, "onnx_rf_binary")
    _, _, X = random_data(rng, (2, 10), (200, 600), nan_max=0)
    y = synth_binary(rng, X)
    cls = RandomForestClassifier if rng.random() < 0.7 else ExtraTreesClassifier
    m = cls(n_estimators=int(rng.integers(3, 40)), max_depth=int(rng.integers(2, 10)),
            min_samples_leaf=int(rng.choice([1, 3, 10])), random_state=int(rng.integers(1 << 30)),
            n_jobs=1).fit(X, y)
    _onnx_check(tmp_path, m, X, rng, task="binary", nan_rate=0.03)


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_onnx_rf(seed, task, tmp_path):
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    rng = rng_for(seed, f"onnx_rf_{task}")
    if task == "multiclass":
        k = int(rng.integers(3, 6))
        _, _, X = random_data(rng, (2, 9), (300, 600), nan_max=0)
        cls, y = RandomForestClassifier, synth_multiclass(rng, X, k)
    else:
        _, _, X = random_data(rng, (2, 9), (200, 600), nan_max=0)
        cls, y = RandomForestRegressor, synth_regression(rng, X)
    m = cls(n_estimators=int(rng.integers(3, 30)), max_depth=int(rng.integers(2, 9)),
            random_state=int(rng.integers(1 << 30)), n_jobs=1).fit(X, y)
    _onnx_check(tmp_path, m, X, rng, task=task, nan_rate=0.03)


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_onnx_gbt(seed, task, tmp_path):
    from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor

    rng = rng_for(seed, f"onnx_gbt_{task}")
    _, _, X = random_data(rng, (2, 10), (200, 600), nan_max=0)
    if task == "binary":
        cls, y = GradientBoostingClassifier, synth_binary(rng, X)
    else:
        cls, y = GradientBoostingRegressor, synth_regression(rng, X)
    m = cls(n_estimators=int(rng.integers(3, 60)), max_depth=int(rng.integers(1, 6)),
            learning_rate=float(rng.uniform(0.05, 0.5)), random_state=int(rng.integers(1 << 30))).fit(X, y)
    _onnx_check(tmp_path, m, X, rng, task=task, nan_rate=0.03)


# --------------------------------------------------------------------------
# gzip-compressed model files
# --------------------------------------------------------------------------


def _train_for_gzip(kind, rng, tmp):
    n_feat = 5
    cols = [f"f{i}" for i in range(n_feat)]
    X = gauss(n_feat, 0.1)(rng, 300)
    y = synth_binary(rng, X)
    df = pd.DataFrame(X, columns=cols)
    if kind == "xgboost":
        import xgboost as xgb

        b = xgb.train({"objective": "binary:logistic", "max_depth": 3, "nthread": 1},
                      xgb.DMatrix(df, label=y), 10)
        p = tmp / "model.json"
        b.save_model(p)
    elif kind == "lightgbm":
        import lightgbm as lgb

        b = lgb.train({"objective": "binary", "num_leaves": 7, "verbose": -1, "num_threads": 1},
                      lgb.Dataset(df, label=y), 10)
        p = tmp / "model.txt"
        b.save_model(str(p))
    elif kind == "catboost":
        import catboost as cb

        m = cb.CatBoostClassifier(iterations=10, depth=3, verbose=0, thread_count=1,
                                  allow_writing_files=False, random_seed=0)
        m.fit(df, y)
        p = tmp / "model.json"
        m.save_model(str(p), format="json")
    else:
        from sklearn.ensemble import RandomForestClassifier

        m = RandomForestClassifier(n_estimators=5, max_depth=3, random_state=0).fit(np.nan_to_num(X), y)
        p = tmp / "model.onnx"
        p.write_bytes(onnx_fixtures.sklearn_to_onnx(m, n_feat).SerializeToString())
    return p, X, cols


@pytest.mark.parametrize("kind", ["xgboost", "lightgbm", "catboost", "onnx"])
def test_compile_accepts_gzip(seed, kind, tmp_path):
    rng = rng_for(seed, "gzip" + kind)
    plain, X, cols = _train_for_gzip(kind, rng, tmp_path)
    gz = plain.with_name(plain.name + ".gz")
    gz.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    if kind == "onnx":
        cols = [f"f{i}" for i in range(X.shape[1])]
    rows = write_rows(tmp_path, X[:50], cols)
    a_plain = compile_model(plain, tmp_path / "plain.esm", name="m")
    a_gz = compile_model(gz, tmp_path / "gz.esm", name="m")
    expected = score(a_plain, rows)
    got = score(a_gz, rows)
    assert got == expected, f"[{kind}] gzip-compressed model scores differently from the plain file " \
                            f"(EDGESCORE_TEST_SEED={SEED})"
    # an explicit --format must work on the compressed file too
    fmt = {"xgboost": "xgboost", "lightgbm": "lightgbm", "catboost": "catboost", "onnx": "onnx"}[kind]
    a_fmt = compile_model(gz, tmp_path / "gz_fmt.esm", fmt=fmt, name="m")
    assert score(a_fmt, rows) == expected
