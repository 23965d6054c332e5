#!/usr/bin/env python3
"""Train the example models the demo and envoy.yaml ship, on features computed by the filter's
own code (`edgescore features`) from synthetic traffic (models/traffic.py):

  bot      XGBoost   P(automated client)        models/example/bot.json
  scanner  LightGBM  P(vulnerability scanner)   models/example/scanner.txt
  abuse    CatBoost  P(credential stuffing)     models/example/abuse.json

All three read models/example/schema.json; categorical features are bucket indices under the
demo hash key (models/example/hash_key.txt) — a model is only valid with the key its
training features were hashed with.

Usage: .venv/bin/python -m models.train_example [--trees 40 --depth 5 --out models/example]
       (the load benchmark trains reference-size variants with --trees 300 --depth 6)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "2")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from models import traffic  # noqa: E402
from models.training_progress import (  # noqa: E402
    LightGBMRounds,
    XGBoostRounds,
    model_bar,
    rounds_bar,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SEED = 20261123
SCHEMA = HERE / "example" / "schema.json"
HASH_KEY = (HERE / "example" / "hash_key.txt").read_text().strip()


def edgescore_bin() -> str:
    return os.environ.get("EDGESCORE_BIN") or str(ROOT / "target" / "release" / "edgescore")


def feature_table(requests: list[dict]) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "requests.jsonl", Path(tmp) / "features.csv"
        src.write_text("".join(json.dumps(r) + "\n" for r in requests))
        subprocess.run([edgescore_bin(), "features", "--schema", str(SCHEMA), "--hash-key", HASH_KEY,
                        "--requests", str(src), "--output", str(out)], check=True)
        return pd.read_csv(out, dtype=np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", type=int, default=40)
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--out", type=Path, default=HERE / "example")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    reqs = traffic.requests(args.n, SEED)
    kinds = np.array([r["kind"] for r in reqs])
    X = feature_table(reqs)
    names = list(X.columns)
    rng = np.random.default_rng(SEED)
    test = rng.random(len(X)) < 0.2
    labels = {"bot": kinds != "browser", "scanner": kinds == "scanner", "abuse": kinds == "abuse"}

    import xgboost as xgb
    y = labels["bot"].astype(np.float32)
    with rounds_bar("bot (XGBoost)", args.trees) as bar:
        bot = xgb.XGBClassifier(n_estimators=args.trees, max_depth=args.depth, learning_rate=0.3, n_jobs=2,
                                random_state=SEED, tree_method="hist", callbacks=[XGBoostRounds(bar)])
        bot.fit(X[~test].to_numpy(), y[~test])
    bot.get_booster().feature_names = names
    bot.get_booster().save_model(str(args.out / "bot.json"))

    import lightgbm as lgb
    y = labels["scanner"].astype(np.float32)
    scanner = lgb.LGBMClassifier(n_estimators=args.trees, num_leaves=min(2 ** args.depth, 63), learning_rate=0.2,
                                 n_jobs=2, random_state=SEED, verbose=-1)
    with rounds_bar("scanner (LightGBM)", args.trees) as bar:
        scanner.fit(X[~test].to_numpy(), y[~test], callbacks=[LightGBMRounds(bar)])
    scanner.booster_.save_model(str(args.out / "scanner.txt"))

    import catboost
    y = labels["abuse"].astype(np.float32)
    abuse = catboost.CatBoostClassifier(iterations=args.trees, depth=min(args.depth, 6), learning_rate=0.3, thread_count=2,
                                        random_seed=SEED, verbose=False, allow_writing_files=False)
    with model_bar("abuse (CatBoost)") as bar:
        abuse.fit(X[~test].to_numpy(), y[~test])
        bar.update()
    abuse.save_model(str(args.out / "abuse.json"), format="json")

    for name, model, proba in (("bot", bot, bot.predict_proba), ("scanner", scanner, scanner.predict_proba),
                               ("abuse", abuse, abuse.predict_proba)):
        p = proba(X[test].to_numpy())[:, 1]
        y = labels[name][test]
        pred = p >= 0.5
        tp = int((pred & y).sum())
        print(f"{name:8s} held-out n={test.sum()} positives={int(y.sum())} precision={tp / max(pred.sum(), 1):.3f} "
              f"recall={tp / max(y.sum(), 1):.3f}")
    print(f"trained bot, scanner, abuse ({args.trees} trees, depth {args.depth}) on {len(X):,} requests "
          f"-> {args.out} in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
