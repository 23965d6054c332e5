"""Parity fixtures for ONNX's `TreeEnsemble` operator (ai.onnx.ml opset 5), a part of the one
fixture generator (`tests/gen_fixtures.py` registers them; same layout and `assert_parity`
check as the other ONNX fixtures, expected.csv being ONNX Runtime's output).

No converter writes opset 5 yet (skl2onnx 1.20 and onnxmltools 1.16 emit
TreeEnsembleClassifier/Regressor whatever opset is asked for), so `to_v5` rewrites their
opset-3 node into the opset-5 one, attribute by attribute as the operator's specification
lays them out: interior nodes and leaves in separate lists, `tree_roots`, `*_trueleafs` /
`*_falseleafs`, `nodes_modes` as a uint8 tensor, one target per leaf (a tree whose leaves carry
several classes becomes one tree per class), `aggregate_function` / `post_transform` as ints.
`member` turns `x <= t` splits on an integer-coded feature into BRANCH_MEMBER splits over the
codes 0..floor(t) (`membership_values`, NaN-separated). ONNX Runtime decides the semantics:
the rows include negative, out-of-range, infinite and NaN values on that feature, but only
integers (see `v5_fixture`).
"""
import numpy as np

import gen_fixtures as g

FIXTURES = {}
MODES = {b"BRANCH_LEQ": 0, b"BRANCH_LT": 1, b"BRANCH_GTE": 2, b"BRANCH_GT": 3, b"BRANCH_EQ": 4,
         b"BRANCH_NEQ": 5}


def fixture(fn):
    FIXTURES[fn.__name__.removeprefix("gen_")] = fn
    return fn


def to_v5(onx, *, post, aggregate, member=None, n_codes=0, double=False):
    """The opset-3 ensemble of `onx` as one opset-5 TreeEnsemble (see the module note).
    post: 0 NONE, 1 SOFTMAX, 2 LOGISTIC by the specification (ONNX Runtime 1.31 applies logistic
    for 1 and softmax for 2); aggregate: 0 AVERAGE, 1 SUM."""
    import onnx
    from onnx import TensorProto, helper

    ens = next(n for n in onx.graph.node if n.op_type.startswith("TreeEnsemble"))
    a = {x.name: helper.get_attribute_value(x) for x in ens.attribute}
    kind = "class" if ens.op_type == "TreeEnsembleClassifier" else "target"
    n = len(a["nodes_treeids"])
    key = lambda i: (a["nodes_treeids"][i], a["nodes_nodeids"][i])  # noqa: E731
    row = {key(i): i for i in range(n)}
    weights = {}
    for t, nd, c, w in zip(a[f"{kind}_treeids"], a[f"{kind}_nodeids"], a[f"{kind}_ids"], a[f"{kind}_weights"]):
        weights.setdefault((t, nd), {}).setdefault(c, 0.0)
        weights[(t, nd)][c] += w
    trees = []
    for i in range(n):
        if a["nodes_treeids"][i] not in trees:
            trees.append(a["nodes_treeids"][i])
    ids = sorted({c for w in weights.values() for c in w})
    out = {k: [] for k in ("feat", "mode", "split", "tl", "tn", "fl", "fn", "miss", "lt", "lw", "roots")}
    members = []
    for t in trees:
        root = next(i for i in range(n) if a["nodes_treeids"][i] == t)
        for c in ids:
            if not any(c in weights.get((t, a["nodes_nodeids"][i]), {}) for i in range(n) if a["nodes_treeids"][i] == t):
                continue

            def emit(i):
                """Emits the subtree at row i; returns (index, is_leaf)."""
                if a["nodes_modes"][i] == b"LEAF":
                    out["lt"].append(c)
                    out["lw"].append(weights.get(key(i), {}).get(c, 0.0))
                    return len(out["lt"]) - 1, 1
                me = len(out["feat"])
                for k in ("feat", "mode", "split", "tl", "tn", "fl", "fn", "miss"):
                    out[k].append(0)
                f, thr = a["nodes_featureids"][i], a["nodes_values"][i]
                mode = MODES[a["nodes_modes"][i]]
                if member is not None and f == member and mode == 0:
                    mode = 6
                    members.append([float(v) for v in range(n_codes) if v <= thr])
                out["feat"][me], out["mode"][me], out["split"][me] = f, mode, thr
                out["miss"][me] = a.get("nodes_missing_value_tracks_true", [0] * n)[i]
                tn, tl = emit(row[(a["nodes_treeids"][i], a["nodes_truenodeids"][i])])
                fn, fl = emit(row[(a["nodes_treeids"][i], a["nodes_falsenodeids"][i])])
                out["tn"][me], out["tl"][me], out["fn"][me], out["fl"][me] = tn, tl, fn, fl
                return me, 0

            r, is_leaf = emit(root)
            assert not is_leaf, "single-leaf trees are not generated here"
            out["roots"].append(r)
    dtype, np_t = (TensorProto.DOUBLE, np.float64) if double else (TensorProto.FLOAT, np.float32)
    mv = [v for m in members for v in m + [float("nan")]]
    attrs = dict(
        aggregate_function=aggregate, post_transform=post, n_targets=len(ids) if kind == "class" else a["n_targets"],
        tree_roots=out["roots"], nodes_featureids=out["feat"], nodes_truenodeids=out["tn"],
        nodes_trueleafs=out["tl"], nodes_falsenodeids=out["fn"], nodes_falseleafs=out["fl"],
        nodes_missing_value_tracks_true=out["miss"], leaf_targetids=out["lt"],
        nodes_modes=helper.make_tensor("nodes_modes", TensorProto.UINT8, [len(out["mode"])], out["mode"]),
        nodes_splits=helper.make_tensor("nodes_splits", dtype, [len(out["split"])], np.asarray(out["split"], np_t)),
        leaf_weights=helper.make_tensor("leaf_weights", dtype, [len(out["lw"])], np.asarray(out["lw"], np_t)),
    )
    if mv:
        attrs["membership_values"] = helper.make_tensor("membership_values", dtype, [len(mv)], np.asarray(mv, np_t))
    n_feat = onx.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "ensemble5", [helper.make_tensor_value_info("X", dtype, [None, n_feat])],
                              [helper.make_tensor_value_info("Y", dtype, [None, attrs["n_targets"]])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m


def v5_fixture(name, model, X, y, *, post, aggregate, task, n_outputs, notes, member=None, n_codes=0,
               double=False, extra_rows=()):
    import onnxruntime as ort
    from skl2onnx import to_onnx

    rng = np.random.default_rng(g.seed_of(name) + 1)
    d = g.fresh_dir(name)
    n_feat = X.shape[1]
    cols = [f"f{i}" for i in range(n_feat)]
    model.fit(X, y)
    onx = to_v5(to_onnx(model, X[:1].astype(np.float32), target_opset={"": 18, "ai.onnx.ml": 3}),
                post=post, aggregate=aggregate, member=member, n_codes=n_codes, double=double)
    path = d / "model.onnx"
    path.write_bytes(onx.SerializeToString())
    R, groups = g.build_rows(rng, g.gauss_sampler(n_feat, nan_rate=0.05), n_feat, thresholds(onx), allow_inf=True)
    R = np.concatenate([R, X[:60]] + [np.asarray(e, np.float32).reshape(-1, n_feat) for e in extra_rows]).astype(np.float32)
    if member is not None:
        # Integer codes only on the membership feature: for fractional values ONNX Runtime 1.31
        # is not consistent with itself (it truncates for some member sets, not for others).
        R[:, member] = np.where(np.isfinite(R[:, member]), np.round(R[:, member] * 3), R[:, member])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    pred = s.run(None, {"X": R.astype(np.float64) if double else R})[0]
    g.write_rows(d / "rows.csv", R, cols)
    g.write_expected(d / "expected.csv", pred)
    g.write_meta(d, format="onnx", task=task, n_outputs=n_outputs, categorical=[], features=cols,
                 ops=["ai.onnx.ml:TreeEnsemble"], opset_import={"ai.onnx": 21, "ai.onnx.ml": 5},
                 source_model=type(model).__name__, n_rows=len(R),
                 notes=notes + " expected.csv = onnxruntime's TreeEnsemble output (1 thread).")


def thresholds(onx):
    """Feature → the float32 thresholds of its comparison splits."""
    from onnx import helper, numpy_helper

    a = {x.name: helper.get_attribute_value(x) for x in onx.graph.node[0].attribute}
    splits, modes = numpy_helper.to_array(a["nodes_splits"]), numpy_helper.to_array(a["nodes_modes"])
    out = {}
    for f, v, m in zip(a["nodes_featureids"], splits, modes):
        if m != 6:
            out.setdefault(f, set()).add(float(np.float32(v)))
    return {f: np.array(sorted(v), dtype=np.float32) for f, v in out.items()}


def member_rows(X, f, rng, n_codes):
    rows = []
    for v in [np.nan, -1, -7, -0.0, n_codes - 1, n_codes, n_codes + 3, 1e9, -1e9, np.inf, -np.inf, 0, 1, 2]:
        r = X[rng.integers(len(X))].copy()
        r[f] = v
        rows.append(r)
    return rows


@fixture
def gen_onnx5_rf_regressor():
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(g.seed_of("onnx5_rf_regressor"))
    X = rng.normal(size=(400, 4)).astype(np.float32)
    y = X[:, 0] * 2 + np.sin(X[:, 1]) + X[:, 2] * X[:, 3]
    v5_fixture("onnx5_rf_regressor", RandomForestRegressor(n_estimators=8, max_depth=5, random_state=0), X, y,
               post=0, aggregate=0, task="regression", n_outputs=1, notes="TreeEnsemble, AVERAGE, NONE.")


@fixture
def gen_onnx5_rf_multi_regressor():
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(g.seed_of("onnx5_rf_multi_regressor"))
    X = rng.normal(size=(400, 4)).astype(np.float32)
    Y = np.stack([X[:, 0] * 2 + X[:, 1], np.sin(X[:, 2]) * 5, X[:, 3] * X[:, 0] - 20], 1)
    v5_fixture("onnx5_rf_multi_regressor", RandomForestRegressor(n_estimators=6, max_depth=5, random_state=0), X, Y,
               post=0, aggregate=1, task="regression", n_outputs=3,
               notes="TreeEnsemble, SUM, NONE, 3 targets: each tree of the forest becomes one tree per "
                     "target (leaf_targetids), weights already divided by n_trees.")


@fixture
def gen_onnx5_gb_multiclass():
    from sklearn.ensemble import GradientBoostingClassifier

    rng = np.random.default_rng(g.seed_of("onnx5_gb_multiclass"))
    X = rng.normal(size=(500, 4)).astype(np.float32)
    y = np.argmax(np.stack([X[:, 0], X[:, 1], X[:, 2] - X[:, 3]], 1), 1)
    v5_fixture("onnx5_gb_multiclass", GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0), X, y,
               post=2, aggregate=1, task="multiclass", n_outputs=3,
               notes="TreeEnsemble, SUM, post_transform 2 over 3 targets (one tree per class): ONNX "
                     "Runtime 1.31 applies softmax for 2 and logistic for 1, the reverse of the "
                     "operator's specification.")


@fixture
def gen_onnx5_rf_multiclass_logistic():
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(g.seed_of("onnx5_rf_multiclass_logistic"))
    X = rng.normal(size=(500, 4)).astype(np.float32)
    y = np.argmax(np.stack([X[:, 0], X[:, 1] * X[:, 2], X[:, 3]], 1), 1)
    v5_fixture("onnx5_rf_multiclass_logistic", RandomForestClassifier(n_estimators=6, max_depth=4, random_state=0),
               X, y, post=1, aggregate=0, task="multiclass", n_outputs=3,
               notes="TreeEnsemble, AVERAGE, post_transform 1 (ONNX Runtime: logistic per target).")


@fixture
def gen_onnx5_member_logistic():
    from sklearn.ensemble import GradientBoostingClassifier

    rng = np.random.default_rng(g.seed_of("onnx5_member_logistic"))
    n_codes = 12
    X = rng.normal(size=(600, 3)).astype(np.float32)
    X[:, 1] = rng.integers(0, n_codes, size=600)
    y = ((X[:, 1] % 4 == 1) | (X[:, 0] > 0.8)).astype(int)
    v5_fixture("onnx5_member_logistic", GradientBoostingClassifier(n_estimators=12, max_depth=3, random_state=0), X, y,
               post=2, aggregate=1, task="binary", n_outputs=1, member=1, n_codes=n_codes,
               extra_rows=member_rows(X, 1, rng, n_codes),
               notes="TreeEnsemble, SUM, LOGISTIC, BRANCH_MEMBER splits on the integer-coded f1.")


@fixture
def gen_onnx5_member_double():
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(g.seed_of("onnx5_member_double"))
    n_codes = 40
    X = rng.normal(size=(500, 3)).astype(np.float32)
    X[:, 2] = rng.integers(0, n_codes, size=500)
    y = (X[:, 2] % 5) + X[:, 0]
    v5_fixture("onnx5_member_double", RandomForestRegressor(n_estimators=5, max_depth=6, random_state=0), X, y,
               post=0, aggregate=1, task="regression", n_outputs=1, member=2, n_codes=n_codes, double=True,
               extra_rows=member_rows(X, 2, rng, n_codes),
               notes="TreeEnsemble on a DOUBLE input (splits and weights as double tensors), SUM, "
                     "BRANCH_MEMBER on f2.")
