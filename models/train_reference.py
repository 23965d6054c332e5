#!/usr/bin/env python3
"""Train edgescore's reference "bot detection" models (deterministic).

Synthetic HTTP-request-like data: 30 features, 24 numeric and 6 categorical
features given as hashed integer bucket codes.  A latent traffic type
(browser / naive bot / stealthy bot) drives the feature distributions and the
binary label (1 = bot) is a nonlinear rule over the *observed* features plus
logistic noise, so the task is learnable but not trivially separable.

Writes
  models/reference/bot_xgb.json      XGBoost, 300 trees, max_depth 6, binary:logistic
  models/reference/bot_lgb.txt       LightGBM, 300 trees, num_leaves 63, binary
  models/reference/rows.csv          1000 held-out rows (header; float32-exact text;
                                     empty cell = missing; categorical = integer codes)
  models/reference/expected_xgb.csv  bot_xgb's P(bot) for rows.csv (repr of the float)
  models/reference/expected_lgb.csv  bot_lgb's P(bot) for rows.csv
  models/reference/features.json     feature schema

(The example models the demo and envoy.yaml ship are trained by models/train_example.py.)

Categorical codes are fed to both libraries as plain numeric features (no
enable_categorical / categorical_feature) so that tl2cgen, lleaves and ONNX
peers can load the same models.

Usage: .venv/bin/python -m models.train_reference
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from models.training_progress import LightGBMRounds, XGBoostRounds, rounds_bar  # noqa: E402

HERE = Path(__file__).resolve().parent
SEED = 20240611
N_TRAIN = 50_000
N_HELDOUT = 1_000
NTHREADS = 2

NUMERIC = [
    "header_count",
    "path_length",
    "ua_length",
    "query_length",
    "query_param_count",
    "cookie_count",
    "cookie_length",
    "accept_length",
    "accept_language_count",
    "body_length",
    "req_per_min_ip",
    "req_per_min_session",
    "session_age_s",
    "distinct_paths_session",
    "error_rate_session",
    "mean_interarrival_ms",
    "std_interarrival_ms",
    "tls_cipher_count",
    "tls_ext_count",
    "http_version",
    "has_referer",
    "has_accept_encoding",
    "path_depth",
    "path_digit_ratio",
]
CATEGORICAL = {
    "method": 16,
    "ua_family": 256,
    "path_prefix": 1024,
    "country": 256,
    "asn": 1024,
    "header_order": 1024,
}
FEATURES = NUMERIC + list(CATEGORICAL)

DESCRIPTIONS = {
    "header_count": "number of request headers",
    "path_length": "URL path length in bytes",
    "ua_length": "User-Agent length in bytes (0 = absent)",
    "query_length": "query string length in bytes",
    "query_param_count": "number of query parameters",
    "cookie_count": "number of cookies sent",
    "cookie_length": "Cookie header length in bytes",
    "accept_length": "Accept header length in bytes",
    "accept_language_count": "languages listed in Accept-Language",
    "body_length": "request body length in bytes",
    "req_per_min_ip": "requests per minute from the client IP",
    "req_per_min_session": "requests per minute in the session",
    "session_age_s": "seconds since the session started (missing: no session)",
    "distinct_paths_session": "distinct paths requested in the session",
    "error_rate_session": "fraction of 4xx/5xx responses in the session",
    "mean_interarrival_ms": "mean gap between requests (missing: first request)",
    "std_interarrival_ms": "std-dev of the gap between requests (missing: < 3 requests)",
    "tls_cipher_count": "cipher suites offered in the TLS ClientHello (missing: plain HTTP)",
    "tls_ext_count": "TLS extensions offered (missing: plain HTTP)",
    "http_version": "HTTP version (1.0, 1.1, 2, 3)",
    "has_referer": "1 if a Referer header is present",
    "has_accept_encoding": "1 if an Accept-Encoding header is present",
    "path_depth": "number of path segments",
    "path_digit_ratio": "fraction of digits in the path",
    "method": "hashed HTTP method bucket",
    "ua_family": "hashed User-Agent family bucket",
    "path_prefix": "hashed first path segment bucket",
    "country": "hashed GeoIP country bucket",
    "asn": "hashed client ASN bucket",
    "header_order": "hashed header-order fingerprint bucket",
}

BROWSER, NAIVE_BOT, STEALTH_BOT = 0, 1, 2


class World:
    """Fixed 'hash tables': which buckets are common for browsers / bots."""

    def __init__(self, rng):
        self.method_browser = np.array([0, 1])  # GET, POST
        self.method_bot = np.array([0, 1, 2, 3, 5, 9])  # incl. HEAD, OPTIONS, odd verbs
        self.ua_browser = rng.choice(256, 24, replace=False)
        self.ua_bot = rng.choice(np.setdiff1d(np.arange(256), self.ua_browser), 40, replace=False)
        self.country_common = rng.choice(256, 30, replace=False)
        self.asn_residential = rng.choice(1024, 200, replace=False)
        self.asn_hosting = rng.choice(np.setdiff1d(np.arange(1024), self.asn_residential), 60,
                                      replace=False)
        self.order_browser = rng.choice(1024, 12, replace=False)
        self.order_bot = rng.choice(np.setdiff1d(np.arange(1024), self.order_browser), 80,
                                    replace=False)
        self.hot_paths = rng.choice(1024, 50, replace=False)
        self.admin_paths = rng.choice(np.setdiff1d(np.arange(1024), self.hot_paths), 20,
                                      replace=False)


def zipf_choice(rng, values, n, a=1.3):
    w = 1.0 / np.arange(1, len(values) + 1) ** a
    return rng.choice(values, n, p=w / w.sum())


def sample(rng, world: World, n: int, kind=None):
    """Return (DataFrame float32 of FEATURES, latent type array)."""
    if kind is None:
        t = rng.choice(3, n, p=[0.68, 0.2, 0.12])
    else:
        t = np.full(n, kind)
    b, nb, sb = t == BROWSER, t == NAIVE_BOT, t == STEALTH_BOT
    f = {}

    def mix(browser, naive, stealth):
        out = np.empty(n)
        out[b], out[nb], out[sb] = browser(b.sum()), naive(nb.sum()), stealth(sb.sum())
        return out

    P = lambda lam: (lambda k: rng.poisson(lam, k))  # noqa: E731
    LN = lambda mu, s: (lambda k: rng.lognormal(mu, s, k))  # noqa: E731

    f["header_count"] = mix(lambda k: 9 + rng.poisson(5, k), lambda k: 2 + rng.poisson(2, k),
                            lambda k: 8 + rng.poisson(4, k))
    f["path_length"] = mix(LN(3.2, 0.6), LN(3.0, 0.9), LN(3.3, 0.7))
    f["ua_length"] = mix(lambda k: rng.normal(120, 15, k).clip(40),
                         lambda k: np.where(rng.random(k) < 0.35, 0, rng.normal(25, 12, k).clip(3)),
                         lambda k: rng.normal(112, 25, k).clip(20))
    f["query_length"] = mix(lambda k: np.where(rng.random(k) < 0.6, 0, rng.lognormal(3, 1, k)),
                            lambda k: np.where(rng.random(k) < 0.3, 0, rng.lognormal(3.8, 1.2, k)),
                            lambda k: np.where(rng.random(k) < 0.5, 0, rng.lognormal(3.2, 1, k)))
    f["query_param_count"] = np.where(f["query_length"] > 0,
                                      1 + rng.poisson(np.sqrt(f["query_length"]) / 3), 0)
    f["cookie_count"] = mix(P(6), lambda k: np.where(rng.random(k) < 0.8, 0, rng.poisson(1, k)),
                            P(3))
    f["cookie_length"] = np.where(f["cookie_count"] > 0,
                                  f["cookie_count"] * rng.lognormal(3.5, 0.5, n), 0)
    f["accept_length"] = mix(lambda k: rng.normal(140, 20, k).clip(3),
                             lambda k: np.where(rng.random(k) < 0.5, 3, rng.normal(40, 20, k).clip(3)),
                             lambda k: rng.normal(120, 30, k).clip(3))
    f["accept_language_count"] = mix(lambda k: 1 + rng.poisson(1.5, k),
                                     lambda k: rng.poisson(0.2, k), lambda k: rng.poisson(1, k))
    f["body_length"] = mix(lambda k: np.where(rng.random(k) < 0.85, 0, rng.lognormal(6, 1.5, k)),
                           lambda k: np.where(rng.random(k) < 0.7, 0, rng.lognormal(7, 2, k)),
                           lambda k: np.where(rng.random(k) < 0.85, 0, rng.lognormal(6, 1.5, k)))
    f["req_per_min_ip"] = mix(LN(1.0, 0.8), LN(4.0, 1.0), LN(2.2, 0.8))
    f["req_per_min_session"] = f["req_per_min_ip"] * rng.uniform(0.3, 1.0, n)
    has_session = mix(lambda k: rng.random(k) < 0.9, lambda k: rng.random(k) < 0.15,
                      lambda k: rng.random(k) < 0.7) > 0
    f["session_age_s"] = np.where(has_session, rng.lognormal(5, 2, n), np.nan)
    f["distinct_paths_session"] = np.where(
        has_session, 1 + rng.poisson(np.where(t == BROWSER, 6, 25)), 1)
    f["error_rate_session"] = mix(lambda k: rng.beta(1, 30, k), lambda k: rng.beta(2, 5, k),
                                  lambda k: rng.beta(1, 10, k))
    n_req = np.where(has_session, 1 + rng.poisson(10, n), 1 + rng.poisson(0.5, n))
    mean_gap = mix(LN(8.0, 1.0), LN(5.0, 1.0), LN(7.0, 0.6))
    f["mean_interarrival_ms"] = np.where(n_req >= 2, mean_gap, np.nan)
    f["std_interarrival_ms"] = np.where(
        n_req >= 3, mean_gap * mix(lambda k: rng.uniform(0.5, 2.0, k),
                                   lambda k: rng.uniform(0.01, 0.2, k),
                                   lambda k: rng.uniform(0.1, 0.6, k)), np.nan)
    tls = rng.random(n) < np.where(t == NAIVE_BOT, 0.7, 0.97)
    f["tls_cipher_count"] = np.where(tls, mix(lambda k: 15 + rng.poisson(2, k),
                                              lambda k: 30 + rng.poisson(20, k),
                                              lambda k: 15 + rng.poisson(4, k)), np.nan)
    f["tls_ext_count"] = np.where(tls, mix(lambda k: 14 + rng.poisson(2, k),
                                           lambda k: 5 + rng.poisson(3, k),
                                           lambda k: 12 + rng.poisson(2, k)), np.nan)
    f["http_version"] = mix(lambda k: rng.choice([1.1, 2.0, 3.0], k, p=[0.1, 0.6, 0.3]),
                            lambda k: rng.choice([1.0, 1.1, 2.0], k, p=[0.2, 0.7, 0.1]),
                            lambda k: rng.choice([1.1, 2.0, 3.0], k, p=[0.3, 0.6, 0.1]))
    f["has_referer"] = (rng.random(n) < np.select([b, nb], [0.75, 0.05], 0.4)).astype(float)
    f["has_accept_encoding"] = (rng.random(n) < np.select([b, nb], [0.99, 0.4], 0.95)).astype(float)
    f["path_depth"] = 1 + rng.poisson(np.log1p(f["path_length"]) / 1.5)
    f["path_digit_ratio"] = mix(lambda k: rng.beta(1, 12, k), lambda k: rng.beta(2, 5, k),
                                lambda k: rng.beta(1, 8, k))

    w = world
    f["method"] = mix(lambda k: rng.choice(w.method_browser, k, p=[0.85, 0.15]),
                      lambda k: rng.choice(w.method_bot, k),
                      lambda k: rng.choice(w.method_browser, k, p=[0.9, 0.1]))
    f["ua_family"] = mix(lambda k: zipf_choice(rng, w.ua_browser, k),
                         lambda k: np.where(rng.random(k) < 0.7, zipf_choice(rng, w.ua_bot, k, 1.0),
                                            rng.integers(0, 256, k)),
                         lambda k: np.where(rng.random(k) < 0.85, zipf_choice(rng, w.ua_browser, k),
                                            zipf_choice(rng, w.ua_bot, k)))
    f["path_prefix"] = mix(lambda k: zipf_choice(rng, w.hot_paths, k, 1.1),
                           lambda k: np.where(rng.random(k) < 0.4, rng.choice(w.admin_paths, k),
                                              rng.integers(0, 1024, k)),
                           lambda k: zipf_choice(rng, w.hot_paths, k, 0.8))
    f["country"] = mix(lambda k: np.where(rng.random(k) < 0.9, zipf_choice(rng, w.country_common, k),
                                          rng.integers(0, 256, k)),
                       lambda k: rng.integers(0, 256, k),
                       lambda k: np.where(rng.random(k) < 0.6, zipf_choice(rng, w.country_common, k),
                                          rng.integers(0, 256, k)))
    f["asn"] = mix(lambda k: np.where(rng.random(k) < 0.95, zipf_choice(rng, w.asn_residential, k, 1.0),
                                      rng.choice(w.asn_hosting, k)),
                   lambda k: np.where(rng.random(k) < 0.8, zipf_choice(rng, w.asn_hosting, k, 1.0),
                                      rng.integers(0, 1024, k)),
                   lambda k: np.where(rng.random(k) < 0.5, rng.choice(w.asn_hosting, k),
                                      zipf_choice(rng, w.asn_residential, k, 1.0)))
    f["header_order"] = mix(lambda k: np.where(rng.random(k) < 0.97, zipf_choice(rng, w.order_browser, k),
                                               rng.integers(0, 1024, k)),
                            lambda k: np.where(rng.random(k) < 0.6, rng.choice(w.order_bot, k),
                                               rng.integers(0, 1024, k)),
                            lambda k: np.where(rng.random(k) < 0.7, zipf_choice(rng, w.order_browser, k),
                                               rng.choice(w.order_bot, k)))

    for c in NUMERIC:
        if c not in ("session_age_s", "mean_interarrival_ms", "std_interarrival_ms",
                     "tls_cipher_count", "tls_ext_count"):
            f[c] = np.round(f[c], 4) if c in ("error_rate_session", "path_digit_ratio") else np.round(f[c])
    df = pd.DataFrame({c: np.asarray(f[c], dtype=np.float32) for c in FEATURES})
    return df, t


def label(rng, world: World, df: pd.DataFrame, t):
    """Nonlinear rule over observed features + the latent type + logistic noise."""
    g = lambda c: df[c].to_numpy(np.float64)  # noqa: E731
    nan0 = lambda c: np.nan_to_num(g(c), nan=0.0)  # noqa: E731
    s = (
        1.6 * (g("ua_length") < 30)
        + 0.9 * ((g("has_referer") == 0) & (g("req_per_min_ip") > 40))
        + 0.5 * np.log1p(g("req_per_min_ip")) - 1.2
        - 0.35 * np.minimum(g("cookie_count"), 6) / 2
        + 1.1 * (np.isnan(g("std_interarrival_ms")) == False) * (nan0("std_interarrival_ms") < 60)  # noqa: E712
        + 0.8 * np.isin(g("asn"), world.asn_hosting)
        + 0.7 * np.isin(g("ua_family"), world.ua_bot)
        + 0.6 * ~np.isin(g("header_order"), world.order_browser)
        + 1.0 * np.isin(g("path_prefix"), world.admin_paths) * (g("error_rate_session") > 0.1)
        + 0.8 * (nan0("tls_ext_count") < 9) * ~np.isnan(g("tls_ext_count"))
        + 0.6 * (g("method") > 1)
        - 0.5 * (g("accept_language_count") >= 2)
        + 0.4 * np.sin(g("path_digit_ratio") * 12) * (g("path_depth") > 3)
        + 1.3 * (t != BROWSER)
    )
    s += rng.logistic(0, 0.6, len(s))
    return (s > 1.4).astype(int)


# --------------------------------------------------------------------------


def fmt_f32(v) -> str:
    v = np.float32(v)
    return "" if np.isnan(v) else repr(float(v))


def write_rows(path: Path, df: pd.DataFrame):
    cats = set(CATEGORICAL)
    lines = [",".join(df.columns)]
    for row in df.itertuples(index=False):
        cells = []
        for c, v in zip(df.columns, row):
            if c in cats:
                cells.append("" if np.isnan(v) else str(int(v)))
            else:
                cells.append(fmt_f32(v))
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")


def write_preds(path: Path, p):
    path.write_text("\n".join(repr(float(v)) for v in np.asarray(p).reshape(-1)) + "\n")


def train_xgb(X, y, rounds, depth):
    import xgboost as xgb

    d = xgb.DMatrix(X, label=y)  # DataFrame -> feature_names stored, all 'float'
    params = {"objective": "binary:logistic", "max_depth": depth, "eta": 0.1,
              "tree_method": "hist", "subsample": 0.8, "colsample_bytree": 0.8,
              "min_child_weight": 2, "seed": 0, "nthread": NTHREADS, "eval_metric": "logloss"}
    with rounds_bar("bot_xgb (XGBoost)", rounds) as bar:
        return xgb.train(params, d, rounds, callbacks=[XGBoostRounds(bar)])


def main():
    import lightgbm as lgb
    import xgboost as xgb

    t0 = time.monotonic()
    rng = np.random.default_rng(SEED)
    world = World(rng)
    df, t = sample(rng, world, N_TRAIN + N_HELDOUT)
    y = label(rng, world, df, t)
    Xtr, ytr = df.iloc[:N_TRAIN].reset_index(drop=True), y[:N_TRAIN]
    Xte, yte = df.iloc[N_TRAIN:].reset_index(drop=True), y[N_TRAIN:]

    ref = HERE / "reference"
    ref.mkdir(parents=True, exist_ok=True)

    # ---- XGBoost reference
    bst = train_xgb(Xtr, ytr, 300, 6)
    bst.save_model(ref / "bot_xgb.json")
    bx = xgb.Booster(model_file=str(ref / "bot_xgb.json"))
    p_xgb = bx.predict(xgb.DMatrix(Xte.to_numpy(), feature_names=FEATURES))

    # ---- LightGBM reference
    params = {"objective": "binary", "num_leaves": 63, "learning_rate": 0.1,
              "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1,
              "min_data_in_leaf": 20, "seed": 0, "num_threads": NTHREADS,
              "deterministic": True, "force_row_wise": True, "verbose": -1}
    with rounds_bar("bot_lgb (LightGBM)", 300) as bar:
        lb = lgb.train(params, lgb.Dataset(Xtr, label=ytr), 300, callbacks=[LightGBMRounds(bar)])
    lb.save_model(str(ref / "bot_lgb.txt"))
    bl = lgb.Booster(model_file=str(ref / "bot_lgb.txt"))
    p_lgb = bl.predict(Xte.to_numpy())

    write_rows(ref / "rows.csv", Xte)
    write_preds(ref / "expected_xgb.csv", p_xgb)
    write_preds(ref / "expected_lgb.csv", p_lgb)
    schema = [{"name": c, "kind": "numeric", "description": DESCRIPTIONS[c]} for c in NUMERIC]
    schema += [{"name": c, "kind": "categorical", "buckets": k, "description": DESCRIPTIONS[c]}
               for c, k in CATEGORICAL.items()]
    (ref / "features.json").write_text(json.dumps(schema, indent=2) + "\n")

    # ---- summary
    def auc(y, p):
        o = np.argsort(p)
        r = np.empty(len(p))
        r[o] = np.arange(1, len(p) + 1)
        pos = y == 1
        return (r[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * (~pos).sum())

    print(f"train rows {N_TRAIN}, bot rate {ytr.mean():.3f}; held-out {N_HELDOUT}")
    print(f"bot_xgb  held-out AUC {auc(yte, p_xgb):.4f}  acc {((p_xgb > 0.5) == yte).mean():.4f}")
    print(f"bot_lgb  held-out AUC {auc(yte, p_lgb):.4f}  acc {((p_lgb > 0.5) == yte).mean():.4f}")
    files = [p for p in sorted(ref.iterdir()) if p.is_file()]
    for p in files:
        print(f"  {p.relative_to(HERE)}  {p.stat().st_size / 1024:.1f} KiB")
    print(f"trained bot_xgb and bot_lgb (300 trees each) on {N_TRAIN:,} rows; {len(files)} files in "
          f"{ref.relative_to(HERE.parent)} in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
