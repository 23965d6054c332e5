"""ONNX Runtime, per row from Python (the wheel ships no C header, so no C harness): one
`InferenceSession.run` per row on a [1, n_features] float32 array, one intra-op and one
inter-op thread, in a fresh process. The Python loop itself costs ~50 ns per call (the
"python floor" of benches/peers) and `run` validates its inputs on every call: this is what a
Python service pays, not ORT's tree evaluation alone.

The ONNX file: onnxmltools for XGBoost (no categorical splits) and LightGBM, CatBoost's own
`save_model(format="onnx")`, skl2onnx for the sklearn forests (written by train.py).

Worker: python -m benches.shapes.peers.onnxruntime {convert LIBRARY MODEL OUT.onnx N_FEATURES |
         time MODEL.onnx ROWS.f32 N_FEATURES SECONDS N_CHECK}"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .harness import NICE, NotApplicable, Prepared, run

KEY = "onnxruntime"
HOW = "Python: InferenceSession.run([1, n]) per row"
COMPILED = False


def applies(cell) -> bool:
    return True


def prepare(cell, trained: dict, rebuild: bool) -> Prepared:
    d = Path(trained["dir"])
    onnx = d / "model.onnx"
    if cell.library in ("xgboost", "lightgbm"):
        onnx = d / "converted.onnx"
        if rebuild or not onnx.exists():
            try:
                run([*NICE, sys.executable, "-m", __name__, "convert", cell.library, d / trained["model"], onnx,
                     trained["features"]])
            except RuntimeError as e:
                last = [ln for ln in str(e).strip().splitlines() if ln.strip()][-1]
                raise NotApplicable(f"onnxmltools: {last[:200]}") from e

    def command(row_set, seconds, n_check):
        return [sys.executable, "-m", __name__, "time", onnx, d / f"{row_set}.f32", trained["features"],
                seconds, n_check]

    return Prepared(KEY, cell.name, command)


def convert(library: str, model: str, out: str, n_features: int) -> None:
    from onnxmltools.convert.common.data_types import FloatTensorType

    initial = [("input", FloatTensorType([None, n_features]))]
    if library == "xgboost":
        import xgboost as xgb
        from onnxmltools import convert_xgboost

        b = xgb.Booster(model_file=model)
        if any(t == "c" for t in (b.feature_types or [])):
            raise SystemExit("onnxmltools cannot convert XGBoost categorical splits")
        b.feature_names = None  # the converter wants f0..fN split indices
        onx = convert_xgboost(b, initial_types=initial, target_opset=15)
    else:
        import lightgbm as lgb
        from onnxmltools import convert_lightgbm

        onx = convert_lightgbm(lgb.Booster(model_file=model), initial_types=initial, target_opset=15, zipmap=False)
    Path(out).write_bytes(onx.SerializeToString())


def time_rows(onnx: str, rows_f32: str, n_features: int, seconds: float, n_check: int) -> None:
    import json
    import time

    import numpy as np
    import onnxruntime as ort

    from benches.peers.run import time_calls

    X = np.fromfile(rows_f32, dtype=np.float32).reshape(-1, n_features)
    rows = [X[i:i + 1] for i in range(len(X))]
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(onnx, sess_options=so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    outs = [o.name for o in sess.get_outputs()]
    # The class probabilities: "probabilities" (onnxmltools, skl2onnx) or CatBoost's second output.
    prob = next((o for o in outs if "prob" in o.lower()), outs[-1])
    for i in range(min(n_check, len(rows))):
        p = sess.run([prob], {name: rows[i]})[0]
        if isinstance(p, list) and p and isinstance(p[0], dict):  # CatBoost's ZipMap: [{class: p}]
            p = [p[0][k] for k in sorted(p[0])]
        p = np.asarray(p, dtype=np.float64).reshape(-1)
        print(f"pred {i} " + " ".join(f"{v:.9g}" for v in p))
    t0 = time.perf_counter()
    ns, calls = time_calls(lambda r: sess.run([prob], {name: r}), rows, seconds)
    print(json.dumps({"peer": KEY, "ns_per_row": ns, "calls": calls, "wall_s": time.perf_counter() - t0}))


if __name__ == "__main__":
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[v] = "1"
    cmd, *args = sys.argv[1:]
    if cmd == "convert":
        convert(args[0], args[1], args[2], int(args[3]))
    else:
        time_rows(args[0], args[1], int(args[2]), float(args[3]), int(args[4]))
