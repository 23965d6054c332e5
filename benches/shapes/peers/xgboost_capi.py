"""XGBoost's own C API: XGBoosterPredictFromDense per row in a C loop (xgboost_capi_harness.c),
linked against the wheel's libxgboost.so. Every call parses two JSON strings (the row's
__array_interface__ and the prediction config); the harness makes that as cheap as the API
allows (see the C file)."""

from __future__ import annotations

from pathlib import Path

from .. import rows as R
from .harness import CFLAGS, NICE, NotApplicable, Prepared, run

KEY = "xgboost-capi"
HOW = "native loop (C harness, XGBoosterPredictFromDense)"
COMPILED = False
HERE = Path(__file__).resolve().parent
BUILD = HERE.parent / "build"


def applies(cell) -> bool:
    return cell.library == "xgboost"


def harness() -> Path:
    import xgboost

    lib = Path(xgboost.__file__).parent / "lib"
    exe = BUILD / f"xgboost-capi-{xgboost.__version__}.harness"
    src = HERE / "xgboost_capi_harness.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        run([*NICE, "gcc", *CFLAGS, f"-I{HERE}", src, f"-L{lib}", "-l:libxgboost.so",
             f"-Wl,-rpath,{lib}", "-o", exe])
    return exe


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
