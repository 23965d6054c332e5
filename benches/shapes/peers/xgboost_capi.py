"""XGBoost's own C API: XGBoosterPredictFromDense per row in a C loop (xgboost_capi_harness.c),
linked against the wheel's libxgboost.so. Every call parses two JSON strings (the row's
__array_interface__ and the prediction config); the harness makes that as cheap as the API
allows (see the C file)."""

from __future__ import annotations

from pathlib import Path

from .. import rows as R
from .harness import NotApplicable, Prepared, c_harness

KEY = "xgboost-capi"
HOW = "native loop (C harness, XGBoosterPredictFromDense)"
COMPILED = False
HERE = Path(__file__).resolve().parent


def applies(cell) -> bool:
    return cell.library == "xgboost"


def harness() -> Path:
    import xgboost

    return c_harness(HERE / "xgboost_capi_harness.c", Path(xgboost.__file__).parent / "lib", "libxgboost.so",
                     f"xgboost-capi-{xgboost.__version__}")


def prepare(cell, trained: dict, rebuild: bool) -> Prepared:
    try:
        exe = harness()
    except Exception as e:
        raise NotApplicable(f"cannot build the XGBoost C API harness: {e}") from e
    d = Path(trained["dir"])
    types = "q" * R.n_numeric(cell.data) + "c" * len(cell.data.categories)

    def command(row_set, seconds, n_check):
        return [exe, d / trained["model"], d / f"{row_set}.f32", trained["features"], seconds, n_check, types]

    return Prepared(KEY, cell.name, command)
