"""The cells of the shape matrix: one named model shape each (library, parameters, tree count,
data shape). Not a cartesian product: a baseline per library, one axis varied at a time, and a
few shapes users actually ship ("combinations").

A cell's `trees` is the number of boosting rounds (XGBoost/LightGBM/CatBoost) or estimators
(sklearn); a multiclass booster grows one tree per class per round, so its tree count is
`trees * classes` (shown in the report).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Data:
    """The synthetic training set's shape: `features` columns, the last `len(categories)` of
    them categorical with those cardinalities (codes 0..card-1), `classes` (2 = binary),
    `missing` = share of NaN cells, `zeros` = share of exact zeros in the numeric columns."""

    features: int = 30
    categories: tuple[int, ...] = ()
    classes: int = 2
    missing: float = 0.02
    zeros: float = 0.0
    rows: int = 20_000


@dataclass(frozen=True)
class Cell:
    name: str
    library: str  # xgboost | lightgbm | catboost | sklearn-rf | sklearn-et
    trees: int
    params: dict = field(default_factory=dict)
    data: Data = Data()
    axis: str = "baseline"  # which axis this cell varies (for the report's grouping)

    def spec(self) -> dict:
        return asdict(self)

    def key(self, versions: dict[str, str]) -> str:
        """The cache key of the trained model and its rows: the spec, the rows per row set and
        the library versions."""
        blob = json.dumps({"cell": self.spec(), "rows": self.bench_rows, "versions": versions}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def total_trees(self) -> int:
        per_round = self.data.classes if (self.data.classes > 2 and self.library in ("xgboost", "lightgbm")) else 1
        return self.trees * per_round

    @property
    def bench_rows(self) -> int:
        """Rows per row set: enough that one pass through them scores `TREES_PER_PASS` trees
        (1,000 to 100,000 rows), so that no CPU's branch predictor learns the pass by heart."""
        return min(100_000, max(1_000, -(-TREES_PER_PASS // self.total_trees)))


# Every peer cycles through its rows (run.py), and a short cycle is learned: on 1,000 "between"
# rows of a 10-tree model (60,000 branches a pass), an AMD EPYC's branch predictor (Zen 4) made
# tl2cgen 3.6x as fast as on 100,000 fresh rows (36 ns against 132); with 100-300 trees, 6-12 %
# on 1,000 rows. Timings level off from about 300,000 trees a pass (README, "Row sets");
# 2,000,000 leaves a margin.
TREES_PER_PASS = 2_000_000


def _cats(n_features: int, share: float) -> tuple[int, ...]:
    """round(share * n_features) categorical columns, alternating 10 and 1,000 categories."""
    n = round(n_features * share)
    return tuple(10 if i % 2 == 0 else 1000 for i in range(n))


XGB = {"max_depth": 6}
LGB: dict = {}  # LightGBM defaults: num_leaves 31, no depth limit, learning_rate 0.1
D = Data()

CELLS: list[Cell] = [
    # ---- XGBoost, depth-wise (baseline: 300 trees of depth 6 on 30 numeric features)
    Cell("xgb_d6_t300", "xgboost", 300, XGB),
    Cell("xgb_d4_t300", "xgboost", 300, {"max_depth": 4}, axis="depth"),
    Cell("xgb_d8_t300", "xgboost", 300, {"max_depth": 8}, axis="depth"),
    Cell("xgb_d10_t300", "xgboost", 300, {"max_depth": 10}, axis="depth"),
    Cell("xgb_d6_t10", "xgboost", 10, XGB, axis="trees"),
    Cell("xgb_d6_t100", "xgboost", 100, XGB, axis="trees"),
    Cell("xgb_d6_t1000", "xgboost", 1000, XGB, axis="trees"),
    Cell("xgb_d6_t2000", "xgboost", 2000, XGB, axis="trees"),
    Cell("xgb_d6_t100_3class", "xgboost", 100, XGB, Data(classes=3), axis="classes"),
    Cell("xgb_d6_t100_10class", "xgboost", 100, XGB, Data(classes=10), axis="classes"),
    Cell("xgb_d6_t300_cat30", "xgboost", 300, XGB, Data(categories=_cats(30, 0.3)), axis="categorical"),
    Cell("xgb_d6_t300_cat70", "xgboost", 300, XGB, Data(categories=_cats(30, 0.7)), axis="categorical"),
    # ---- LightGBM, leaf-wise (baseline: 300 trees of 31 leaves, LightGBM defaults otherwise)
    Cell("lgb_l31_t300", "lightgbm", 300, LGB),
    Cell("lgb_l15_t300", "lightgbm", 300, {"num_leaves": 15}, axis="leaves"),
    Cell("lgb_l63_t300", "lightgbm", 300, {"num_leaves": 63}, axis="leaves"),
    Cell("lgb_l255_t300", "lightgbm", 300, {"num_leaves": 255}, axis="leaves"),
    Cell("lgb_l31_t10", "lightgbm", 10, LGB, axis="trees"),
    Cell("lgb_l31_t1000", "lightgbm", 1000, LGB, axis="trees"),
    Cell("lgb_l31_t2000", "lightgbm", 2000, LGB, axis="trees"),
    Cell("lgb_l31_t100_3class", "lightgbm", 100, LGB, Data(classes=3), axis="classes"),
    Cell("lgb_l31_t100_10class", "lightgbm", 100, LGB, Data(classes=10), axis="classes"),
    Cell("lgb_l31_t300_cat30", "lightgbm", 300, LGB, Data(categories=_cats(30, 0.3)), axis="categorical"),
    Cell("lgb_l31_t300_cat70", "lightgbm", 300, LGB, Data(categories=_cats(30, 0.7)), axis="categorical"),
    Cell("lgb_l31_t300_zero_missing", "lightgbm", 300, {"zero_as_missing": True}, Data(zeros=0.4),
         axis="zero-as-missing"),
    # ---- CatBoost, oblivious
    Cell("cb_d6_t300", "catboost", 300, {"depth": 6}),
    Cell("cb_d8_t300", "catboost", 300, {"depth": 8}, axis="depth"),
    # ---- sklearn forests through skl2onnx (no missing values: skl2onnx drops the direction
    # sklearn >= 1.4 learns for NaN, so the ONNX model and sklearn disagree on rows with NaN)
    Cell("rf_d10_t100", "sklearn-rf", 100, {"max_depth": 10}, Data(missing=0.0)),
    Cell("et_d10_t100", "sklearn-et", 100, {"max_depth": 10}, Data(missing=0.0)),
    # ---- combinations users hit
    Cell("lgb_defaults_t100", "lightgbm", 100, LGB, axis="combination"),
    Cell("lgb_3class_t40_l5", "lightgbm", 40, {"num_leaves": 5}, Data(classes=3), axis="combination"),
    Cell("lgb_6f_4cat_t100", "lightgbm", 100, LGB, Data(features=6, categories=(10, 1000, 10, 1000)),
         axis="combination"),
    Cell("lgb_15f_2cat_t1000", "lightgbm", 1000, LGB, Data(features=15, categories=(10, 1000)),
         axis="combination"),
    Cell("lgb_13f_l20_t100", "lightgbm", 100, {"num_leaves": 20}, Data(features=13, missing=0.0),
         axis="combination"),
]

# --quick: small models, one per kind of peer set.
QUICK = ["xgb_d6_t100", "lgb_defaults_t100", "lgb_l31_t10", "lgb_6f_4cat_t100", "cb_d6_t300", "rf_d10_t100"]

# The medium check run (no lleaves): ten cells of small and moderate size (cheap to build).
MEDIUM = ["xgb_d6_t10", "xgb_d6_t100", "xgb_d6_t300", "xgb_d10_t300", "xgb_d6_t100_3class", "lgb_l31_t10",
          "lgb_defaults_t100", "lgb_3class_t40_l5", "lgb_6f_4cat_t100", "cb_d6_t300"]

BY_NAME = {c.name: c for c in CELLS}
assert len(BY_NAME) == len(CELLS), "cell names must be unique"


def select(names: list[str]) -> list[Cell]:
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown cell(s): {', '.join(unknown)} (see --list)")
    return [BY_NAME[n] for n in names]
