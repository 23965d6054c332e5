"""LightGBM's own C API: LGBM_BoosterPredictForMatSingleRowFast (FastInit once, num_threads=1)
per row in a C loop (lightgbm_capi_harness.c), linked against the wheel's lib_lightgbm.so."""

from __future__ import annotations

from pathlib import Path

from .harness import NotApplicable, Prepared, c_harness

KEY = "lightgbm-capi"
HOW = "native loop (C harness, LGBM_BoosterPredictForMatSingleRowFast)"
COMPILED = False
HERE = Path(__file__).resolve().parent


def applies(cell) -> bool:
    return cell.library == "lightgbm"


def harness() -> Path:
    import lightgbm

    return c_harness(HERE / "lightgbm_capi_harness.c", Path(lightgbm.__file__).parent / "lib", "lib_lightgbm.so",
                     f"lightgbm-capi-{lightgbm.__version__}")


def prepare(cell, trained: dict, rebuild: bool) -> Prepared:
    try:
        exe = harness()
    except Exception as e:
        raise NotApplicable(f"cannot build the LightGBM C API harness: {e}") from e
    d = Path(trained["dir"])

    def command(row_set, seconds, n_check):
        return [exe, d / trained["model"], d / f"{row_set}.f32", trained["features"], seconds, n_check]

    return Prepared(KEY, cell.name, command)
