"""LightGBM's own C API: LGBM_BoosterPredictForMatSingleRowFast (FastInit once, num_threads=1)
per row in a C loop (lightgbm_capi_harness.c), linked against the wheel's lib_lightgbm.so."""

from __future__ import annotations

from pathlib import Path

from .harness import CFLAGS, NICE, NotApplicable, Prepared, run

KEY = "lightgbm-capi"
HOW = "native loop (C harness, LGBM_BoosterPredictForMatSingleRowFast)"
COMPILED = False
HERE = Path(__file__).resolve().parent
BUILD = HERE.parent / "build"


def applies(cell) -> bool:
    return cell.library == "lightgbm"


def harness() -> Path:
    import lightgbm

    lib = Path(lightgbm.__file__).parent / "lib"
    exe = BUILD / f"lightgbm-capi-{lightgbm.__version__}.harness"
    src = HERE / "lightgbm_capi_harness.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        run([*NICE, "gcc", *CFLAGS, f"-I{HERE}", src, f"-L{lib}", "-l:lib_lightgbm.so",
             f"-Wl,-rpath,{lib}", "-o", exe])
    return exe


def prepare(cell, trained: dict, rebuild: bool) -> Prepared:
    try:
        exe = harness()
    except Exception as e:
        raise NotApplicable(f"cannot build the LightGBM C API harness: {e}") from e
    d = Path(trained["dir"])

    def command(row_set, seconds, n_check):
        return [exe, d / trained["model"], d / f"{row_set}.f32", trained["features"], seconds, n_check]

    return Prepared(KEY, cell.name, command)
