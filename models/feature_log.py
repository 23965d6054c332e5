#!/usr/bin/env python3
"""Turn the filter's feature log into a training table.

With `feature_log.sample_rate` > 0 the filter writes, for sampled requests, one JSON object
per request into filter state `wasm.edgescore.features`; an access log carries it with
`%FILTER_STATE(wasm.edgescore.features:PLAIN)%`. Each object is

    {"v":1,"decision":"tag","mode":"enforce","scores":{"bot@2026-11-23":0.93,...},
     "features":{"header_count":12,"method":3,"content_length":null,...}}

Features are exactly what the models saw: numbers, or bucket indices for hashed categoricals
(`null` = missing). Train on them and compile with the schema this tool writes, and the new
model reads the same vector in the filter.

Usage:
  python -m models.feature_log access.log --out table.csv [--schema-out schema.json]
                               [--keep request_id ...]

Access-log lines may hold other fields around the JSON object: the first `{"v":1` object on
each line is taken, other lines are skipped (and counted). `--keep FIELD` copies a field of a
JSON access log (`json_format`) into the table, e.g. the request id a team joins its labels on
(docs/security-teams.md). Library use: `load(lines, keep)` returns a pandas DataFrame with a
column per feature, then the kept fields, then `score.<model>` and `decision` columns.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

MARKER = '{"v":1'


def parse_line(line: str) -> dict | None:
    """The feature-log object in an access-log line, or None. The object may stand in the line
    as it is (a text access log) or as a string value of a JSON access log (`json_format`, where
    Envoy escapes it: `"edgescore_features":"{\\"v\\":1,…}"`)."""
    return parse_record(line)[0]


def parse_record(line: str) -> tuple[dict | None, dict]:
    """(the feature-log object or None, the other fields of a JSON access-log line: {} for a
    text access log)."""
    text = line.strip()
    if text.startswith("{") and not text.startswith(MARKER):
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            for value in record.values():
                if isinstance(value, str) and value.startswith(MARKER):
                    return _feature_object(value), record
            return None, record
    start = line.find(MARKER)
    return (None if start < 0 else _feature_object(line[start:])), {}


def _feature_object(text: str) -> dict | None:
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) and obj.get("v") == 1 and "features" in obj else None


def load(lines: Iterable[str], keep: Iterable[str] = ()) -> tuple[pd.DataFrame, int]:
    """(table, skipped lines). Feature columns keep the log's order; missing values are NaN.
    `keep`: access-log fields copied as columns after the features (None where a line lacks
    one); a field named like a feature is refused, as the table could not hold both."""
    keep = list(keep)
    rows, skipped, columns = [], 0, {}
    for line in lines:
        obj, record = parse_record(line)
        if obj is None:
            skipped += bool(line.strip())
            continue
        clash = [k for k in keep if k in obj["features"]]
        if clash:
            raise ValueError(f"--keep {clash[0]}: a feature has that name")
        row = {name: (np.nan if v is None else float(v)) for name, v in obj["features"].items()}
        for name in obj["features"]:
            columns.setdefault(name, None)
        for field in keep:
            row[field] = record.get(field)
        for model, score in obj.get("scores", {}).items():
            row[f"score.{model}"] = np.nan if score is None else float(score)
        row["decision"] = obj.get("decision")
        rows.append(row)
    table = pd.DataFrame(rows, columns=None if rows else keep)
    features = [c for c in columns if c in table]
    rest = [c for c in table.columns if c not in columns and c not in keep]
    table = table[features + keep + rest]
    table[features] = table[features].astype(np.float32)
    return table, skipped


def feature_columns(table: pd.DataFrame, keep: Iterable[str] = ()) -> list[str]:
    """The table's feature columns, in order: all but the kept fields, scores and decision."""
    kept = set(keep)
    return [c for c in table.columns if c not in kept and not c.startswith("score.") and c != "decision"]


def schema_for(features: list[str], buckets: dict[str, int]) -> dict:
    """A feature schema for `edgescore compile --schema`. Bucket counts are not in the log:
    take them from the model that logged (`edgescore inspect --json`) or the schema it was
    compiled with; `name/N` columns (one feature at two bucket counts) carry theirs."""
    out = []
    for name in features:
        base, _, n = name.partition("/")
        entry = {"name": base}
        b = int(n) if n else buckets.get(base, 0)
        if b:
            entry["buckets"] = b
        out.append(entry)
    return {"features": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="CSV training table")
    ap.add_argument("--schema-out", type=Path, help="write a feature schema for edgescore compile --schema")
    ap.add_argument("--buckets-from", type=Path, help="a feature schema (JSON) giving the categorical bucket counts")
    ap.add_argument("--keep", action="append", default=[], metavar="FIELD",
                    help="copy this field of a JSON access log into the table (repeatable), e.g. request_id")
    args = ap.parse_args()
    lines = (line for p in args.logs for line in p.read_text(errors="replace").splitlines())
    try:
        table, skipped = load(lines, args.keep)
    except ValueError as e:
        sys.exit(f"feature_log: {e}")
    table.to_csv(args.out, index=False, na_rep="")
    print(f"{len(table)} requests, {skipped} other lines skipped -> {args.out}", file=sys.stderr)
    if args.schema_out:
        buckets = {}
        if args.buckets_from:
            buckets = {f["name"]: f.get("buckets", 0) for f in json.loads(args.buckets_from.read_text())["features"]}
        features = feature_columns(table, args.keep)
        args.schema_out.write_text(json.dumps(schema_for(features, buckets), indent=2) + "\n")
        print(f"{len(features)} features -> {args.schema_out}", file=sys.stderr)


if __name__ == "__main__":
    main()
