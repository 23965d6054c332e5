#!/usr/bin/env python3
"""Train a binary XGBoost model on the filter's feature log joined with your own labels.

    python -m models.train_from_log --table table.csv --schema schema.json \\
        --labels labels.csv --join request_id --label is_bot --out bot.json [--check-rows check.csv]

- `--table`, `--schema`: what `python -m models.feature_log ACCESS_LOG --keep request_id
  --out table.csv --schema-out schema.json` wrote: one row per logged request, the features the
  filter computed (in the schema's order), the kept access-log fields, the filter's scores.
- `--labels`: a CSV with the join column and a 0/1 label column (1 = what the model should
  score high), e.g. `request_id,is_bot` from your fraud or abuse outcomes.
- The table and the labels are joined on `--join`; logged requests without a label and labels
  without a logged request are counted and left out. The last `--holdout` share of the joined
  rows, in log order (later traffic), is held out and reported on.
- `--out`: the model, as XGBoost's JSON (`save_model`) with the schema's feature names, for
  `edgescore compile MODEL --schema schema.json`.
- `--check-rows`: the distinct held-out rows with XGBoost's score of each (column `xgboost`),
  a CSV `edgescore score ARTIFACT --csv` reads (it takes the feature columns by name), so the
  compiled artifact can be checked against XGBoost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

SEED = 20261201
# Distinct held-out rows written for the check: enough to see both classes, few to read.
CHECK_ROWS_MAX = 12


def schema_columns(schema: dict, table: pd.DataFrame) -> list[str]:
    """The table's columns for the schema's features, in the schema's order. A feature the log
    carries at two bucket counts is a `name/N` column (models/feature_log.py)."""
    columns = []
    for f in schema["features"]:
        name, buckets = f["name"], f.get("buckets")
        for candidate in (name, f"{name}/{buckets}"):
            if candidate in table.columns:
                columns.append(candidate)
                break
        else:
            raise SystemExit(f"train_from_log: the table has no column for the schema's feature {name!r}")
    return columns


def join_labels(table: pd.DataFrame, labels: pd.DataFrame, key: str, label: str) -> pd.DataFrame:
    """The logged requests that have a label, in log order, with the label column."""
    for what, frame, columns in (("table", table, [key]), ("labels", labels, [key, label])):
        absent = [c for c in columns if c not in frame.columns]
        if absent:
            raise SystemExit(f"train_from_log: the {what} has no column {absent[0]!r}")
    if labels[key].duplicated().any():
        raise SystemExit(f"train_from_log: the labels name {labels[key].duplicated().sum()} {key}(s) twice")
    values = set(labels[label].unique())
    if not values <= {0, 1}:
        raise SystemExit(f"train_from_log: {label} must be 0 or 1, found {sorted(values - {0, 1})[:3]}")
    joined = table.merge(labels[[key, label]], on=key, how="inner")
    unlabeled = len(table) - len(joined)
    unmatched = len(labels) - joined[key].nunique()
    print(f"{len(table)} logged requests, {len(labels)} labels: {len(joined)} joined on {key} "
          f"({unlabeled} logged requests without a label, {unmatched} labels without a logged request)")
    return joined


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", type=Path, required=True, help="the feature log as a table (models.feature_log --out)")
    ap.add_argument("--schema", type=Path, required=True, help="its feature schema (models.feature_log --schema-out)")
    ap.add_argument("--labels", type=Path, required=True, help="CSV: the join column and the 0/1 label column")
    ap.add_argument("--join", default="request_id", help="the column the table and the labels share (default request_id)")
    ap.add_argument("--label", required=True, help="the labels' 0/1 column, 1 = should score high")
    ap.add_argument("--out", type=Path, required=True, help="the trained model (XGBoost JSON)")
    ap.add_argument("--check-rows", type=Path, help="write distinct held-out rows with XGBoost's scores (CSV)")
    ap.add_argument("--trees", type=int, default=20)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--min-child-weight", type=float, default=1.0,
                    help="XGBoost's least hessian sum in a leaf (default 1, XGBoost's): lower lets a small "
                         "group of rows, a client with a few requests, reach a confident score")
    ap.add_argument("--holdout", type=float, default=0.2, help="the share of the latest rows held out (default 0.2)")
    args = ap.parse_args(argv)
    import xgboost as xgb

    schema = json.loads(args.schema.read_text())
    table = pd.read_csv(args.table, dtype={args.join: str})
    labels = pd.read_csv(args.labels, dtype={args.join: str})
    data = join_labels(table, labels, args.join, args.label)
    columns = schema_columns(schema, data)
    names = [f["name"] for f in schema["features"]]  # the names `edgescore compile --schema` matches
    X = data[columns].to_numpy(dtype=np.float32)
    y = data[args.label].to_numpy(dtype=np.float32)
    n_test = int(round(len(data) * args.holdout))
    if len(data) - n_test < 2 or len(set(y[: len(data) - n_test])) < 2:
        raise SystemExit("train_from_log: too few labelled rows of each class to train on")
    train, test = slice(0, len(data) - n_test), slice(len(data) - n_test, len(data))

    params = {"objective": "binary:logistic", "max_depth": args.depth, "eta": 0.3, "seed": SEED, "nthread": 2,
              "min_child_weight": args.min_child_weight}
    booster = xgb.train(params, xgb.DMatrix(X[train], label=y[train], feature_names=names), num_boost_round=args.trees)
    booster.save_model(str(args.out))
    print(f"trained XGBoost ({args.trees} trees, depth {args.depth}) on {len(data) - n_test} rows "
          f"({int(y[train].sum())} positive) -> {args.out}")

    if n_test:
        p = booster.predict(xgb.DMatrix(X[test], feature_names=names))
        truth = y[test] == 1
        predicted = p >= 0.5
        tp = int((predicted & truth).sum())
        print(f"held out: the last {n_test} rows ({int(truth.sum())} positive); at 0.5: "
              f"precision {tp / max(predicted.sum(), 1):.3f}, recall {tp / max(truth.sum(), 1):.3f}")
        if args.check_rows:
            held = data.iloc[test].assign(xgboost=p)
            distinct = held.drop_duplicates(subset=columns).head(CHECK_ROWS_MAX)
            distinct[[args.join, args.label, "xgboost", *columns]].to_csv(
                args.check_rows, index=False, na_rep="", float_format="%.9g")
            print(f"{len(distinct)} distinct held-out rows -> {args.check_rows}; XGBoost scored them:")
            for _, row in distinct.iterrows():
                print(f"  {row[args.join]}  {args.label}={int(row[args.label])}  {row['xgboost']:.9g}")
    elif args.check_rows:
        raise SystemExit("train_from_log: --check-rows needs held-out rows (--holdout > 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
