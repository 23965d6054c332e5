#!/usr/bin/env python3
"""Compare a shadow challenger with the active model on the requests both scored.

    python -m models.shadow_compare access.log --model bot --threshold 0.9

The registry's shadow entry of a model is scored beside the active one on every request and
never acts (docs/registry.md); the feature log holds both scores (`bot@1` and `bot@2~shadow`).
For each (active, shadow) pair of versions in the log this prints on how many requests both
scored, how many each puts at or above `--threshold` (the model's configured threshold: what
it would act on), where they disagree, and the largest score difference, with its request id
when the access log carries one (`--join`, default request_id).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from models import feature_log

SHADOW = "~shadow"


def score_columns(table: pd.DataFrame, model: str) -> tuple[list[str], list[str]]:
    """(active columns, shadow columns) of `model`: `score.bot@3`, `score.bot@4~shadow`."""
    pattern = re.compile(rf"^score\.{re.escape(model)}@[^~]+({re.escape(SHADOW)})?$")
    matched = [(c, m.group(1)) for c in table.columns if (m := pattern.match(c))]
    return [c for c, shadow in matched if not shadow], [c for c, shadow in matched if shadow]


def model_id(column: str) -> str:
    return column.removeprefix("score.")


def compare(table: pd.DataFrame, model: str, threshold: float, key: str | None) -> list[str]:
    """The report's lines."""
    active, shadows = score_columns(table, model)
    if not shadows:
        raise SystemExit(f"shadow_compare: no request in the log was scored by a shadow {model} "
                         f"(scores found: {', '.join(model_id(c) for c in table.columns if c.startswith('score.')) or 'none'})")
    lines = []
    for shadow in shadows:
        for current in active:
            both = table[table[shadow].notna() & table[current].notna()]
            if both.empty:
                continue
            a, s = both[current].to_numpy(np.float64), both[shadow].to_numpy(np.float64)
            a_over, s_over = a >= threshold, s >= threshold
            diff = np.abs(a - s)
            worst = int(np.argmax(diff))
            where = f" (request {both[key].iloc[worst]})" if key and key in both.columns else ""
            lines += [
                f"{model_id(current)} and {model_id(shadow)} both scored {len(both)} requests; at or above {threshold}:",
                f"  both {int((a_over & s_over).sum())}, neither {int((~a_over & ~s_over).sum())}, "
                f"only {model_id(current)} {int((a_over & ~s_over).sum())}, only {model_id(shadow)} {int((~a_over & s_over).sum())}",
                f"  score difference: mean {diff.mean():.4f}, largest {diff[worst]:.4f}{where}",
            ]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", type=Path, help="access logs carrying the feature log")
    ap.add_argument("--model", required=True, help="the model name (bot)")
    ap.add_argument("--threshold", type=float, required=True, help="the model's configured threshold")
    ap.add_argument("--join", default="request_id", help="the access-log field naming a request (default request_id)")
    args = ap.parse_args(argv)
    lines = (line for p in args.logs for line in p.read_text(errors="replace").splitlines())
    table, _ = feature_log.load(lines, keep=[args.join] if args.join else [])
    print("\n".join(compare(table, args.model, args.threshold, args.join)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
