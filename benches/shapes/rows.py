"""Synthetic data for a cell: the training set, and the two row sets every peer scores.

- "between": fresh rows from the training distribution (another seed), so every branch is
  likely to be taken.
- "skewed": every numeric feature drawn from the top 3 % of what training saw, one in ten
  exactly the maximum seen: beyond most thresholds, as request counts and lengths often are.
  Categorical features keep their training distribution.

Each set has `Cell.bench_rows` rows (1,000-100,000: a pass scores at least 2 M trees, so that
the CPU cannot learn it; cells.py). Rows are float32, NaN = missing, written once per cell as a
raw row-major matrix (`.f32`, for the C harnesses) and as CSV (`.csv`, header f0..fN-1, empty
cell = NaN, for edgescore).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .cells import Data

ROW_SETS = ("between", "skewed")


def feature_names(d: Data) -> list[str]:
    return [f"f{i}" for i in range(d.features)]


def n_numeric(d: Data) -> int:
    return d.features - len(d.categories)


def draw(d: Data, n: int, rng: np.random.Generator) -> np.ndarray:
    """n rows: numeric columns alternate normal and log-normal (counts/lengths: heavy right
    tail); categorical codes are Zipf-like (code 0 most frequent)."""
    k = n_numeric(d)
    X = np.empty((n, d.features), dtype=np.float64)
    for j in range(k):
        X[:, j] = rng.normal(size=n) if j % 2 == 0 else np.round(rng.lognormal(2.0, 1.0, size=n))
    if d.zeros:
        X[:, :k][rng.random((n, k)) < d.zeros] = 0.0
    for c, card in enumerate(d.categories):
        p = 1.0 / np.arange(1, card + 1) ** 0.8
        X[:, k + c] = rng.choice(card, size=n, p=p / p.sum())
    if d.missing:
        X[:, :k][rng.random((n, k)) < d.missing] = np.nan
    return X.astype(np.float32)


def labels(d: Data, X: np.ndarray, seed: int) -> np.ndarray:
    """A nonlinear target with interactions and per-category effects, plus noise."""
    rng = np.random.default_rng(seed + 1000)
    k = n_numeric(d)
    Z = np.nan_to_num(X[:, :k].astype(np.float64))
    Z[:, 1::2] = np.log1p(Z[:, 1::2]) - 2.0
    n_out = 1 if d.classes == 2 else d.classes
    scores = np.zeros((len(X), n_out))
    for o in range(n_out):
        w = rng.normal(size=k)
        s = np.tanh(Z) @ w / np.sqrt(k)
        a, b = rng.choice(k, 2, replace=k < 2)
        s += np.sin(2 * Z[:, a]) * (Z[:, b] > 0)
        for c, card in enumerate(d.categories):
            effect = rng.normal(size=card)
            s += 0.7 * effect[X[:, k + c].astype(int)]
        scores[:, o] = s
    if d.classes == 2:
        return (scores[:, 0] + rng.logistic(0, 0.5, len(X)) > np.median(scores[:, 0])).astype(int)
    return np.argmax(scores + rng.gumbel(0, 0.3, scores.shape), axis=1)


def training_set(d: Data, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    X = draw(d, d.rows, np.random.default_rng(seed))
    return X, labels(d, X, seed)


def bench_rows(d: Data, X_train: np.ndarray, n: int, seed: int = 1) -> dict[str, np.ndarray]:
    """`n` rows per set (`Cell.bench_rows`)."""
    rng = np.random.default_rng(seed)
    between = draw(d, n, rng)
    skewed = draw(d, n, rng)
    for j in range(n_numeric(d)):
        col = X_train[:, j][~np.isnan(X_train[:, j])]
        q = np.quantile(col, rng.uniform(0.97, 1.0, n))
        q[rng.random(n) < 0.1] = col.max()
        keep_missing = np.isnan(skewed[:, j])
        skewed[:, j] = np.where(keep_missing, np.nan, q)
    return {"between": np.ascontiguousarray(between), "skewed": np.ascontiguousarray(skewed)}


def write(rows: np.ndarray, names: list[str], stem: Path) -> tuple[Path, Path]:
    """stem.f32 (raw float32, row-major) and stem.csv (header, empty = NaN)."""
    f32 = stem.with_suffix(".f32")
    rows.astype(np.float32).tofile(f32)
    csv = stem.with_suffix(".csv")
    with csv.open("w") as f:
        f.write(",".join(names) + "\n")
        for r in rows:
            f.write(",".join("" if np.isnan(v) else repr(float(v)) for v in r) + "\n")
    return f32, csv
