"""The example models (models/example) as ONNX, converted the way a data-science team would:
onnxmltools for XGBoost and LightGBM, CatBoost's own `save_model(format="onnx")`. Variant (e)
of run.py serves them with ONNX Runtime. Cached in target/envoy-bench-onnx by source and
library versions.

Every model gets one input, `input` (float32 [N, n_features], the schema's slots in order), and
one output, `probabilities` (float32 [N, 2]): ORT then returns a tensor, not a list of dicts.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import tempfile
from pathlib import Path

from harness import render_envoy

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EXAMPLE = ROOT / "models" / "example"
CACHE = ROOT / "target" / "envoy-bench-onnx"
# name -> the trained model in its library's format (models/example/models.txt).
SOURCES = {e.policy.name: e.source for e in render_envoy.EXAMPLES}
LIBRARIES = ("onnx", "onnxmltools", "xgboost-cpu", "lightgbm", "catboost")


def n_features() -> int:
    return len(json.loads((EXAMPLE / "schema.json").read_text())["features"])


def onnx_path(name: str) -> Path:
    h = hashlib.sha256(SOURCES[name].read_bytes())
    for lib in LIBRARIES:
        h.update(md.version(lib).encode())
    return CACHE / f"{name}-{h.hexdigest()[:12]}.onnx"


def convert(name: str) -> Path:
    """The ONNX file of example model `name`, converted on first use."""
    out = onnx_path(name)
    if out.is_file():
        return out
    import onnx
    from onnxmltools.convert.common.data_types import FloatTensorType

    src = SOURCES[name]
    initial = [("input", FloatTensorType([None, n_features()]))]
    if name == "bot":
        import xgboost as xgb
        from onnxmltools import convert_xgboost

        booster = xgb.Booster(model_file=str(src))
        booster.feature_names = None  # the converter wants f0..fN split indices
        model = convert_xgboost(booster, initial_types=initial, target_opset=15)
    elif name == "scanner":
        import lightgbm as lgb
        from onnxmltools import convert_lightgbm

        model = convert_lightgbm(lgb.Booster(model_file=str(src)), initial_types=initial, target_opset=15, zipmap=False)
    else:
        model = catboost_onnx(src)
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    onnx.save(model, str(tmp))
    tmp.replace(out)
    return out


def catboost_onnx(src: Path):
    import catboost
    import onnx

    # The model was trained on float 0/1 labels, which CatBoost's ONNX export refuses; the labels
    # are declared integers (the trees and their values stay as they are).
    d = json.loads(src.read_text())
    d["model_info"]["class_params"]["class_label_type"] = "Integer"
    with tempfile.TemporaryDirectory() as tmp:
        fixed, exported = Path(tmp) / "model.json", Path(tmp) / "model.onnx"
        fixed.write_text(json.dumps(d))
        m = catboost.CatBoostClassifier()
        m.load_model(str(fixed), format="json")
        m.save_model(str(exported), format="onnx")
        model = onnx.load(str(exported))
    g = model.graph
    old = g.input[0].name
    g.input[0].name = "input"
    for node in g.node:
        node.input[:] = ["input" if i == old else i for i in node.input]
    # Its ZipMap turns the probabilities into a list of dicts per row; serve the tensor under it.
    zipmap = next(n for n in g.node if n.op_type == "ZipMap")
    tensor = zipmap.input[0]
    g.node.remove(zipmap)
    del g.output[:]
    g.output.append(onnx.helper.make_tensor_value_info(tensor, onnx.TensorProto.FLOAT, ["N", 2]))
    for node in g.node:
        node.output[:] = ["probabilities" if o == tensor else o for o in node.output]
    g.output[0].name = "probabilities"
    onnx.checker.check_model(model)
    return model


def session(path: Path):
    """An ONNX Runtime session on one thread (the sidecar is pinned to Envoy's CPU)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
