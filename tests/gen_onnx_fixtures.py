"""The ONNX reader's fixtures, a part of the one fixture generator (`tests/gen_fixtures.py` runs
it): small tree ensembles as skl2onnx / onnxmltools write them, plus the `probabilities`
(classifiers) or `variable` (regressors) tensor that ONNX Runtime computes for a few rows,
including NaN cells and values exactly on a split threshold.

Each fixture is tests/models/onnx_reader_<name>/: `model.onnx` and `ort.json`: {"op", "rows":
[[x, null (NaN), "inf" or "-inf"]], "scores": [[...]]}.
The reader's tests (compile/src/readers/onnx/tests.rs) evaluate the IR on the rows and compare
with "scores" to 1e-5.
"""
import json
import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from tqdm import tqdm

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))


def fixture(name, file):
    """tests/models/onnx_reader_<name>/<file>, the directory created."""
    d = os.path.join(HERE, "models", f"onnx_reader_{name}")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, file)


RNG = np.random.default_rng(7)


def tree_node(model):
    nodes = [n for n in model.graph.node if n.op_type.startswith("TreeEnsemble")]
    assert len(nodes) == 1
    return nodes[0]


def thresholds(model):
    node = tree_node(model)
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    if "nodes_values" in a:
        values = a["nodes_values"]
    else:
        values = numpy_helper.to_array(a["nodes_values_as_tensor"]).tolist()
    return [(f, v) for f, v, m in zip(a["nodes_featureids"], values, a["nodes_modes"]) if m != b"LEAF"]


def probe_rows(model, X):
    """Rows from X, plus NaN cells and cells exactly on thresholds."""
    rows = [r.copy() for r in X[:24]]
    n_features = X.shape[1]
    for i in range(n_features):
        r = X[24 + i].copy()
        r[i] = np.nan
        rows.append(r)
    rows.append(np.full(n_features, np.nan, dtype=np.float32))
    ths = thresholds(model)
    for k in range(min(12, len(ths))):
        f, v = ths[int(RNG.integers(len(ths)))]
        r = X[40 + k].copy()
        r[f] = np.float32(v)
        rows.append(r)
    return np.array(rows, dtype=np.float32)


def ort_scores(model, rows, dtype=np.float32):
    """The ensemble's own scores output, read before any ZipMap."""
    node = tree_node(model)
    scores = node.output[1] if node.op_type == "TreeEnsembleClassifier" else node.output[0]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    if scores not in [o.name for o in probe.graph.output]:
        probe.graph.output.append(helper.make_tensor_value_info(scores, TensorProto.FLOAT, None))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return sess.run([scores], {name: rows.astype(dtype)})[0]


def cell(v):
    """JSON has no NaN or infinities: null, "inf", "-inf"."""
    if np.isnan(v):
        return None
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def save(name, model, X, dtype=np.float32, probe=True):
    rows = probe_rows(model, X) if probe else X
    scores = ort_scores(model, rows, dtype)
    with open(fixture(name, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    doc = {
        "op": tree_node(model).op_type,
        "rows": [[cell(v) for v in r] for r in rows],
        "scores": [[float(v) for v in r] for r in np.asarray(scores, dtype=np.float64).reshape(len(rows), -1)],
    }
    with open(fixture(name, "ort.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    # tqdm.write: stdout as print, above gen_fixtures.py's progress bar rather than through it.
    tqdm.write(f"{name}: {len(model.SerializeToString())} bytes, scores {np.asarray(scores).shape}")


def sklearn_models():
    from sklearn.datasets import make_classification, make_regression
    from sklearn.ensemble import (GradientBoostingClassifier, RandomForestClassifier,
                                  RandomForestRegressor)
    from skl2onnx import to_onnx

    opset = {"": 17, "ai.onnx.ml": 3}
    X2, y2 = make_classification(400, 5, n_informative=3, random_state=1)
    X3, y3 = make_classification(400, 5, n_informative=3, n_classes=3, random_state=2)
    Xr, yr = make_regression(400, 5, noise=5.0, random_state=3)
    X2, X3, Xr = (x.astype(np.float32) for x in (X2, X3, Xr))
    fit = lambda m, X, y: to_onnx(m.fit(X, y), X[:1], target_opset=opset)
    save("rf_binary", fit(RandomForestClassifier(4, max_depth=3, random_state=0), X2, y2), X2[200:])
    save("rf_multiclass", fit(RandomForestClassifier(3, max_depth=3, random_state=0), X3, y3), X3[200:])
    save("rf_regressor", fit(RandomForestRegressor(3, max_depth=3, random_state=0), Xr, yr), Xr[200:])
    save("gb_binary", fit(GradientBoostingClassifier(n_estimators=4, max_depth=2, random_state=0), X2, y2), X2[200:])
    save("gb_multiclass", fit(GradientBoostingClassifier(n_estimators=2, max_depth=2, random_state=0), X3, y3), X3[200:])


def boosting_models():
    import lightgbm as lgb
    import xgboost as xgb
    from onnxmltools import convert_lightgbm, convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType
    from sklearn.datasets import make_classification

    X2, y2 = make_classification(400, 5, n_informative=3, random_state=4)
    X3, y3 = make_classification(400, 5, n_informative=3, n_classes=3, random_state=5)
    X2, X3 = X2.astype(np.float32), X3.astype(np.float32)
    # Missing values in training, so that trees learn a default direction.
    Xn = X2.copy()
    Xn[RNG.random(Xn.shape) < 0.1] = np.nan
    types = [("input", FloatTensorType([None, 5]))]
    lgbm = lgb.LGBMClassifier(n_estimators=4, num_leaves=5, min_child_samples=5, verbose=-1, random_state=0)
    save("lgb_binary", convert_lightgbm(lgbm.fit(Xn, y2), initial_types=types, target_opset=15), Xn[200:])
    lgbm3 = lgb.LGBMClassifier(n_estimators=2, num_leaves=4, verbose=-1, random_state=0)
    save("lgb_multiclass", convert_lightgbm(lgbm3.fit(X3, y3), initial_types=types, target_opset=15), X3[200:])
    xgbm = xgb.XGBClassifier(n_estimators=4, max_depth=2, random_state=0)
    save("xgb_binary", convert_xgboost(xgbm.fit(Xn, y2), initial_types=types, target_opset=15), Xn[200:])


def handmade_modes():
    """Every split mode, with and without missing_value_tracks_true, thresholds as doubles."""
    modes = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]
    a = {k: [] for k in ["nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_truenodeids",
                         "nodes_falsenodeids", "nodes_missing_value_tracks_true", "target_treeids", "target_nodeids"]}
    values, weights = [], []
    t = 0
    for m, mode in enumerate(modes):
        for track in (0, 1):
            # The root first (ONNX Runtime starts there), but ids are not positions: root 2,
            # false leaf 1, true leaf 0.
            f = t % 3
            for nid, nmode, tv, fv, val in [(2, mode, 0, 1, 0.5), (1, "LEAF", 0, 0, 0.0), (0, "LEAF", 0, 0, 0.0)]:
                a["nodes_treeids"].append(t)
                a["nodes_nodeids"].append(nid)
                a["nodes_featureids"].append(f if nmode != "LEAF" else 0)
                a["nodes_modes"].append(nmode)
                a["nodes_truenodeids"].append(tv)
                a["nodes_falsenodeids"].append(fv)
                a["nodes_missing_value_tracks_true"].append(track if nmode != "LEAF" else 0)
                values.append(val)
            for nid, w in [(0, 2.0 ** t), (1, -(2.0 ** t) / 3)]:
                a["target_treeids"].append(t)
                a["target_nodeids"].append(nid)
                weights.append(w)
            t += 1
    a["target_ids"] = [0] * len(weights)
    a["nodes_values_as_tensor"] = numpy_helper.from_array(np.array(values, dtype=np.float64))
    a["target_weights_as_tensor"] = numpy_helper.from_array(np.array(weights, dtype=np.float64))
    a["base_values_as_tensor"] = numpy_helper.from_array(np.array([0.25], dtype=np.float64))
    node = helper.make_node("TreeEnsembleRegressor", ["X"], ["variable"], domain="ai.onnx.ml", n_targets=1,
                            aggregate_function="AVERAGE", **a)
    graph = helper.make_graph([node], "handmade_modes", [helper.make_tensor_value_info("X", TensorProto.DOUBLE, [None, 3])],
                              [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    model.model_version = 3
    cells = np.array([np.nan, 0.5, np.nextafter(np.float32(0.5), np.float32(0)), np.nextafter(np.float32(0.5), np.float32(1)),
                      -1.0, 2.0, np.inf, -np.inf], dtype=np.float32)
    X = np.array([[cells[(i + j * 3) % len(cells)] for j in range(3)] for i in range(64)], dtype=np.float32)
    save("modes_regressor", model, X, dtype=np.float64, probe=False)



def multi_target_regressor():
    """Three targets: one TreeEnsembleRegressor with n_targets=3 (a weight per target per leaf).
    Last, so that the fixtures above keep their probe rows (RNG draws)."""
    from sklearn.datasets import make_regression
    from sklearn.ensemble import RandomForestRegressor
    from skl2onnx import to_onnx

    X, y = make_regression(400, 5, noise=5.0, random_state=3)
    X = X.astype(np.float32)
    Y = np.stack([y, np.sin(X[:, 1]) * 10, X[:, 2] * X[:, 3]], 1)
    model = RandomForestRegressor(3, max_depth=3, random_state=0).fit(X, Y)
    save("rf_multi_regressor", to_onnx(model, X[:1], target_opset={"": 17, "ai.onnx.ml": 3}), X[200:])


def make_all():
    sklearn_models()
    boosting_models()
    handmade_modes()
    multi_target_regressor()
