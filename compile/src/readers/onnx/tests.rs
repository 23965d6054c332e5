//! The reader against ONNX Runtime: fixtures written by `tests/fixtures/ (python -m tests.fixtures)` (real
//! skl2onnx / onnxmltools exports with ORT's scores), and hand-built graphs whose expected values
//! were produced by ONNX Runtime 1.31 on the same graphs.

use super::graph::ML;
use super::*;
use crate::ir::Test;
use pb::tensor_shape_proto::{dimension::Value as Dim, Dimension};
use std::path::PathBuf;

/// The model's outputs for one row by the IR's reference reading.
fn eval(ir: &ModelIr, x: &[f32]) -> Vec<f64> {
    ir.outputs(x)
}

/// Compares with ORT's scores row; a binary model with one output is its positive column.
/// ORT sums in f32: 1e-5 relative to the magnitude (absolute below 1).
fn assert_close(ir: &ModelIr, x: &[f32], ort: &[f64], what: &str) {
    let got = eval(ir, x);
    let want: Vec<f64> = if ir.task == Task::BinaryClassification && got.len() == 1 { vec![ort[1]] } else { ort.to_vec() };
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs ORT {ort:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{what}: row {x:?}: got {got:?}, ORT {ort:?}");
    }
}

// ---------------------------------------------------------------- fixtures

/// `tests/models/onnx_reader_<name>/` (`model.onnx`, `ort.json`), written by the one fixture
/// generator (`tests/fixtures/ (python -m tests.fixtures)`).
fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/models").join(format!("onnx_reader_{name}"))
}

fn fixture(name: &str) -> ModelIr {
    let dir = fixture_dir(name);
    let bytes = std::fs::read(dir.join("model.onnx")).unwrap();
    let ir = read(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("ort.json")).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let scores = doc["scores"].as_array().unwrap();
    assert_eq!(rows.len(), scores.len());
    let (mut nan_rows, mut checked) = (0, 0);
    for (row, ort) in rows.iter().zip(scores) {
        let cell = |v: &serde_json::Value| match (v.as_f64(), v.as_str()) {
            (Some(v), _) => v as f32,
            (None, Some("inf")) => f32::INFINITY,
            (None, Some("-inf")) => f32::NEG_INFINITY,
            _ => f32::NAN,
        };
        let x: Vec<f32> = row.as_array().unwrap().iter().map(cell).collect();
        let ort: Vec<f64> = ort.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        nan_rows += usize::from(x.iter().any(|v| v.is_nan()));
        assert_eq!(x.len(), ir.features.len(), "{name}: row width");
        assert_close(&ir, &x, &ort, name);
        checked += 1;
    }
    assert!(checked >= 30 && nan_rows >= 5, "{name}: {checked} rows, {nan_rows} with NaN");
    ir
}

#[test]
fn rf_binary_matches_ort() {
    let ir = fixture("rf_binary");
    // skl2onnx: class-0 weights only, already divided by the tree count; ORT reports [1 - s, s].
    assert_eq!((ir.task, ir.link, ir.aggregate, ir.n_outputs()), (Task::BinaryClassification, Link::Identity, Aggregate::Sum, 1));
    assert_eq!(ir.objective, "TreeEnsembleClassifier/NONE");
    assert_eq!(ir.features.len(), 5);
    assert_eq!(ir.trees.len(), 4);
}

#[test]
fn rf_multiclass_matches_ort() {
    let ir = fixture("rf_multiclass");
    assert_eq!((ir.task, ir.link, ir.n_outputs()), (Task::MulticlassClassification, Link::Identity, 3));
    assert_eq!(ir.trees.len(), 9, "one IR tree per (tree, class)");
}

#[test]
fn rf_regressor_matches_ort() {
    let ir = fixture("rf_regressor");
    assert_eq!((ir.task, ir.link, ir.n_outputs()), (Task::Regression, Link::Identity, 1));
}

#[test]
fn rf_multi_regressor_matches_ort() {
    let ir = fixture("rf_multi_regressor");
    assert_eq!((ir.task, ir.link, ir.aggregate, ir.n_outputs()), (Task::Regression, Link::Identity, Aggregate::Sum, 3));
    assert_eq!(ir.objective, "TreeEnsembleRegressor/SUM/NONE");
    // Every leaf of a scikit-learn forest weights all 3 targets: one tree of vector leaves each.
    assert_eq!(ir.trees.len(), 3);
    let vector_leaf = |n: &Node| match n {
        Node::Split { .. } => true,
        Node::VectorLeaf { values } => values.len() == 3,
        _ => false,
    };
    assert!(ir.trees.iter().flat_map(|t| &t.nodes).all(vector_leaf));
}

#[test]
fn gb_binary_matches_ort() {
    let ir = fixture("gb_binary");
    assert_eq!((ir.task, ir.link, ir.n_outputs()), (Task::BinaryClassification, Link::Sigmoid { scale: 1.0 }, 1));
}

#[test]
fn gb_multiclass_matches_ort() {
    let ir = fixture("gb_multiclass");
    assert_eq!((ir.task, ir.link, ir.n_outputs()), (Task::MulticlassClassification, Link::Softmax, 3));
    assert!(ir.base_score.iter().any(|&b| b != 0.0));
}

#[test]
fn lightgbm_binary_matches_ort() {
    let ir = fixture("lgb_binary");
    assert_eq!((ir.link, ir.n_outputs()), (Link::Sigmoid { scale: 1.0 }, 1));
    let tracks_nan = ir.trees.iter().flat_map(|t| &t.nodes).any(|n| matches!(n, Node::Split { missing_yes: true, .. }));
    assert!(tracks_nan, "LightGBM trained with NaN sends some to the true node");
}

#[test]
fn lightgbm_multiclass_matches_ort() {
    let ir = fixture("lgb_multiclass");
    assert_eq!((ir.link, ir.n_outputs()), (Link::Softmax, 3));
}

#[test]
fn xgboost_binary_matches_ort() {
    let ir = fixture("xgb_binary");
    assert!(ir.trees.iter().flat_map(|t| &t.nodes).any(|n| matches!(n, Node::Split { test: Test::Lt(_), .. })));
}

#[test]
fn every_mode_and_missing_rule_matches_ort() {
    // Double thresholds and weights (`*_as_tensor`), AVERAGE with a base value, root id 2 with
    // its false leaf listed before its true leaf.
    let ir = fixture("modes_regressor");
    assert_eq!(ir.name, "handmade_modes");
    assert_eq!(ir.version, "3");
    assert_eq!(ir.objective, "TreeEnsembleRegressor/AVERAGE/NONE");
    assert_eq!(ir.aggregate, Aggregate::Average { divisor: 12.0 });
    assert_eq!(ir.base_score, vec![0.25]);
    for t in &ir.trees {
        assert!(matches!(t.nodes[0], Node::Split { yes: 1, no: 2, .. }), "{t:?}");
    }
}

#[test]
fn damaged_files_never_panic() {
    let bytes = std::fs::read(fixture_dir("lgb_binary").join("model.onnx")).unwrap();
    for len in 0..bytes.len() {
        let _ = read(&bytes[..len]);
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..4000 {
        let mut b = bytes.clone();
        for _ in 0..3 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = (state % b.len() as u64) as usize;
            b[at] ^= (state >> 32) as u8 | 1;
        }
        let _ = read(&b);
    }
    assert!(read(b"not a model").is_err());
    assert!(read(&[]).unwrap_err().to_string().contains("no graph"));
}

// ---------------------------------------------------------------- hand-built graphs

fn attr(name: &str, r#type: i32) -> pb::AttributeProto {
    pb::AttributeProto { name: name.into(), r#type, ..Default::default() }
}
fn ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto { ints: v.to_vec(), ..attr(name, 7) }
}
fn floats(name: &str, v: &[f32]) -> pb::AttributeProto {
    pb::AttributeProto { floats: v.to_vec(), ..attr(name, 6) }
}
fn strings(name: &str, v: &[&str]) -> pb::AttributeProto {
    pb::AttributeProto { strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(), ..attr(name, 8) }
}
fn string(name: &str, v: &str) -> pb::AttributeProto {
    pb::AttributeProto { s: v.as_bytes().to_vec(), ..attr(name, 3) }
}
fn int(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto { i: v, ..attr(name, 2) }
}
fn set(attrs: &mut Vec<pb::AttributeProto>, a: pb::AttributeProto) {
    attrs.retain(|b| b.name != a.name);
    attrs.push(a);
}

fn node(op: &str, domain: &str, input: &[&str], output: &[&str], attribute: Vec<pb::AttributeProto>) -> pb::NodeProto {
    pb::NodeProto {
        op_type: op.into(),
        domain: domain.into(),
        input: input.iter().map(|s| s.to_string()).collect(),
        output: output.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    }
}

fn model(nodes: Vec<pb::NodeProto>, width: Option<i64>) -> pb::ModelProto {
    let dim = |v: Option<Dim>| Dimension { value: v };
    let shape = pb::TensorShapeProto { dim: vec![dim(Some(Dim::DimParam("N".into()))), dim(width.map(Dim::DimValue))] };
    let tensor = pb::type_proto::Tensor { elem_type: 1, shape: Some(shape) };
    let x = pb::ValueInfoProto { name: "X".into(), r#type: Some(pb::TypeProto { value: Some(pb::type_proto::Value::TensorType(tensor)) }) };
    let graph = pb::GraphProto { node: nodes, name: String::new(), input: vec![x], ..Default::default() };
    pb::ModelProto { graph: Some(graph), ..Default::default() }
}

/// `n` stumps: tree t = node 0 `x0 <= 0` → node 1 (true) / node 2 (false).
fn stumps(n: i64) -> Vec<pb::AttributeProto> {
    let per = |v: [i64; 3]| (0..n).flat_map(|_| v).collect::<Vec<_>>();
    vec![
        ints("nodes_treeids", &(0..n).flat_map(|t| [t; 3]).collect::<Vec<_>>()),
        ints("nodes_nodeids", &per([0, 1, 2])),
        ints("nodes_featureids", &per([0, 0, 0])),
        strings("nodes_modes", &(0..n).flat_map(|_| ["BRANCH_LEQ", "LEAF", "LEAF"]).collect::<Vec<_>>()),
        floats("nodes_values", &(0..n).flat_map(|_| [0.0, 0.0, 0.0]).collect::<Vec<_>>()),
        ints("nodes_truenodeids", &per([1, 0, 0])),
        ints("nodes_falsenodeids", &per([2, 0, 0])),
        ints("nodes_missing_value_tracks_true", &per([0, 0, 0])),
    ]
}

fn classifier(attrs: Vec<pb::AttributeProto>) -> pb::ModelProto {
    model(vec![node("TreeEnsembleClassifier", ML, &["X"], &["label", "probabilities"], attrs)], Some(2))
}

fn regressor(attrs: Vec<pb::AttributeProto>) -> pb::ModelProto {
    model(vec![node("TreeEnsembleRegressor", ML, &["X"], &["variable"], attrs)], Some(2))
}

/// (tree, node, class, weight) on [`stumps`].
fn clf_attrs(w: &[(i64, i64, i64, f32)], post: &str, base: Option<&[f32]>, labels: &[i64]) -> Vec<pb::AttributeProto> {
    let mut a = stumps(2);
    a.push(ints("class_treeids", &w.iter().map(|w| w.0).collect::<Vec<_>>()));
    a.push(ints("class_nodeids", &w.iter().map(|w| w.1).collect::<Vec<_>>()));
    a.push(ints("class_ids", &w.iter().map(|w| w.2).collect::<Vec<_>>()));
    a.push(floats("class_weights", &w.iter().map(|w| w.3).collect::<Vec<_>>()));
    a.push(ints("classlabels_int64s", labels));
    a.push(string("post_transform", post));
    if let Some(b) = base {
        a.push(floats("base_values", b));
    }
    a
}

fn clf(w: &[(i64, i64, i64, f32)], post: &str, base: Option<&[f32]>, labels: &[i64]) -> Result<ModelIr, ReadError> {
    from_proto(&classifier(clf_attrs(w, post, base, labels)))
}

/// Rows reaching leaf 1 (x0 <= 0) and leaf 2 of every stump.
const ROWS: [[f32; 2]; 2] = [[-1.0, 0.0], [1.0, 0.0]];

fn check(ir: &ModelIr, ort: [&[f64]; 2], what: &str) {
    for (x, o) in ROWS.iter().zip(ort) {
        assert_close(ir, x, o, what);
    }
}

const C0_POS: [(i64, i64, i64, f32); 4] = [(0, 1, 0, 0.2), (0, 2, 0, 0.3), (1, 1, 0, 0.1), (1, 2, 0, 0.4)];
const C0_MIX: [(i64, i64, i64, f32); 4] = [(0, 1, 0, -0.2), (0, 2, 0, 0.3), (1, 1, 0, -0.1), (1, 2, 0, 0.4)];
const C1_EXTRA: [(i64, i64, i64, f32); 4] = [(0, 1, 1, 0.5), (0, 2, 1, -0.6), (1, 1, 1, 0.05), (1, 2, 1, 0.07)];

fn with_class(w: &[(i64, i64, i64, f32)], c: i64) -> Vec<(i64, i64, i64, f32)> {
    w.iter().map(|&(t, n, _, v)| (t, n, c, v)).collect()
}

#[test]
fn binary_with_class0_weights_only_reports_the_single_score() {
    // ORT: [1-s, s] (NONE, SOFTMAX, weights >= 0), [-s, s] (mixed), [sigmoid(-s), sigmoid(s)].
    let ir = clf(&C0_POS, "NONE", None, &[0, 1]).unwrap();
    assert_eq!((ir.n_outputs(), ir.link), (1, Link::Identity));
    check(&ir, [&[0.7, 0.3], &[0.3, 0.7]], "C0 NONE");
    check(&clf(&C0_POS, "NONE", Some(&[0.25]), &[0, 1]).unwrap(), [&[0.45, 0.55], &[0.05, 0.95]], "C0 NONE base");
    check(&clf(&C0_POS, "SOFTMAX", None, &[0, 1]).unwrap(), [&[0.7, 0.3], &[0.3, 0.7]], "C0 SOFTMAX");
    check(&clf(&C0_MIX, "NONE", None, &[0, 1]).unwrap(), [&[0.3, -0.3], &[-0.7, 0.7]], "C0 mixed NONE");
    check(&clf(&C0_MIX, "SOFTMAX", Some(&[0.25]), &[0, 1]).unwrap(), [&[0.05, -0.05], &[-0.95, 0.95]], "C0 mixed SOFTMAX");
    let lg = [&[0.4255575, 0.5744425][..], &[0.3318122, 0.6681878]];
    check(&clf(&C0_POS, "LOGISTIC", None, &[0, 1]).unwrap(), lg, "C0 LOGISTIC");
    check(&clf(&C0_MIX, "LOGISTIC", Some(&[0.25]), &[0, 1]).unwrap(), [&[0.5124974, 0.4875026], &[0.2788848, 0.7211152]], "C0 mixed LOGISTIC base");
}

#[test]
fn binary_with_class1_weights_transforms_both_columns() {
    // ORT: post([s0 + b0, s1]) elementwise, column 0 forced to 0 when no leaf scores class 0.
    let c1 = with_class(&C0_POS, 1);
    let ir = clf(&c1, "NONE", Some(&[0.25]), &[0, 1]).unwrap();
    assert_eq!(ir.n_outputs(), 2);
    check(&ir, [&[0.0, 0.3], &[0.0, 0.7]], "C1 NONE base");
    check(&clf(&c1, "LOGISTIC", None, &[0, 1]).unwrap(), [&[0.5, 0.5744425], &[0.5, 0.6681878]], "C1 LOGISTIC");
    check(&clf(&c1, "SOFTMAX", Some(&[0.25]), &[0, 1]).unwrap(), [&[0.4255575, 0.5744425], &[0.3318122, 0.6681878]], "C1 SOFTMAX");
    let both: Vec<_> = C0_MIX.iter().chain(&C1_EXTRA).copied().collect();
    check(&clf(&both, "NONE", None, &[0, 1]).unwrap(), [&[-0.3, 0.55], &[0.7, -0.53]], "both NONE");
    check(&clf(&both, "NONE", Some(&[0.25]), &[0, 1]).unwrap(), [&[-0.05, 0.55], &[0.95, -0.53]], "both NONE base");
    check(&clf(&both, "LOGISTIC", Some(&[0.25]), &[0, 1]).unwrap(), [&[0.4875026, 0.6341356], &[0.7211152, 0.3705169]], "both LOGISTIC");
    check(&clf(&both, "SOFTMAX", Some(&[0.25]), &[0, 1]).unwrap(), [&[0.3543437, 0.6456563], &[0.8145726, 0.1854274]], "both SOFTMAX");
}

#[test]
fn binary_layouts_onnx_runtime_gets_wrong_are_refused() {
    let both: Vec<_> = C0_MIX.iter().chain(&C1_EXTRA).copied().collect();
    let e = clf(&both, "NONE", Some(&[0.25, -0.5]), &[0, 1]).unwrap_err().to_string();
    assert!(e.contains("binary classifier with 2 base_values"), "{e}");
    // Class 1 scored on some leaves only: ORT switches between 1 and 2 columns row by row.
    let e = clf(&[(0, 1, 0, 0.2), (0, 2, 0, 0.3), (0, 1, 1, 0.5)], "NONE", None, &[0, 1]).unwrap_err().to_string();
    assert!(e.contains("class-1 weights are missing"), "{e}");
    // Class 0 scored on some leaves only: harmless without a base value (ORT: [0.8, 0.2], [1, 0])...
    let sparse = [(0, 1, 0, 0.2)];
    check(&clf(&sparse, "NONE", None, &[0, 1]).unwrap(), [&[0.8, 0.2], &[1.0, 0.0]], "sparse class 0");
    // ...but ORT drops the base value on rows that reach no weight.
    let e = clf(&sparse, "NONE", Some(&[0.1]), &[0, 1]).unwrap_err().to_string();
    assert!(e.contains("drops the base value"), "{e}");
    assert!(clf(&[(0, 1, 0, 0.2)], "NONE", None, &[0]).unwrap_err().to_string().contains("1 class label"));
    assert!(clf(&[], "NONE", None, &[0, 1]).unwrap_err().to_string().contains("without class weights"));
}

#[test]
fn multiclass_adds_base_values_and_zero_for_unscored_classes() {
    let w = [(0, 1, 0, 0.1), (0, 2, 0, 0.2), (0, 1, 1, 0.3), (0, 2, 1, 0.4), (1, 1, 2, 0.5), (1, 2, 2, 0.6)];
    let labels = [0, 1, 2];
    let ir = clf(&w, "NONE", Some(&[1.0, 2.0, 3.0]), &labels).unwrap();
    assert_eq!((ir.task, ir.trees.len()), (Task::MulticlassClassification, 3));
    check(&ir, [&[1.1, 2.3, 3.5], &[1.2, 2.4, 3.6]], "multi NONE");
    let lg = [&[0.7502601, 0.9088771, 0.9706877][..], &[0.7685248, 0.9168273, 0.9734030]];
    check(&clf(&w, "LOGISTIC", Some(&[1.0, 2.0, 3.0]), &labels).unwrap(), lg, "multi LOGISTIC");
    check(&clf(&w[..4], "NONE", None, &labels).unwrap(), [&[0.1, 0.3, 0.0], &[0.2, 0.4, 0.0]], "class 2 unweighted");
    check(&clf(&w[..5], "NONE", None, &labels).unwrap(), [&[0.1, 0.3, 0.5], &[0.2, 0.4, 0.0]], "class 2 on one leaf");
    let e = clf(&w, "NONE", Some(&[1.0, 2.0]), &labels).unwrap_err().to_string();
    assert!(e.contains("base_values has 2 entries for 3 classes"), "{e}");
}

fn reg_attrs(w: &[(i64, i64, f32)], trees: i64) -> Vec<pb::AttributeProto> {
    let mut a = stumps(trees);
    a.push(ints("target_treeids", &w.iter().map(|w| w.0).collect::<Vec<_>>()));
    a.push(ints("target_nodeids", &w.iter().map(|w| w.1).collect::<Vec<_>>()));
    a.push(ints("target_ids", &vec![0; w.len()]));
    a.push(floats("target_weights", &w.iter().map(|w| w.2).collect::<Vec<_>>()));
    a.push(int("n_targets", 1));
    a.push(floats("base_values", &[0.5]));
    a
}

const R: [(i64, i64, f32); 4] = [(0, 1, 1.0), (0, 2, 2.0), (1, 1, 10.0), (1, 2, 20.0)];

#[test]
fn regressor_sum_average_and_ignored_post_transform() {
    for post in ["NONE", "LOGISTIC", "SOFTMAX"] {
        let mut a = reg_attrs(&R, 2);
        a.push(string("post_transform", post));
        let ir = from_proto(&regressor(a)).unwrap();
        check(&ir, [&[11.5], &[22.5]], post);
    }
    let mut a = reg_attrs(&R, 2);
    a.push(string("aggregate_function", "AVERAGE"));
    check(&from_proto(&regressor(a)).unwrap(), [&[6.0], &[11.5]], "AVERAGE");
    // ORT divides by every tree, weighted or not, and adds the base after averaging.
    let mut a = reg_attrs(&R, 3);
    a.push(string("aggregate_function", "AVERAGE"));
    check(&from_proto(&regressor(a)).unwrap(), [&[4.1666667], &[7.8333335]], "AVERAGE over 3 trees");
    let mut a = reg_attrs(&R[..3], 2);
    a.push(string("aggregate_function", "AVERAGE"));
    check(&from_proto(&regressor(a)).unwrap(), [&[6.0], &[1.5]], "leaf without weight");
}

/// (tree, node, target, weight) on [`stumps`]: tree 0 weights targets 0 and 1, tree 1 target 2.
fn multi_target_attrs(post: &str, aggregate: &str, base: Option<&[f32]>) -> Vec<pb::AttributeProto> {
    let w: [(i64, i64, i64, f32); 6] = [(0, 1, 0, 1.0), (0, 2, 0, 2.0), (0, 1, 1, 3.0), (0, 2, 1, 4.0), (1, 1, 2, 10.0), (1, 2, 2, 20.0)];
    let mut a = stumps(2);
    a.push(ints("target_treeids", &w.iter().map(|w| w.0).collect::<Vec<_>>()));
    a.push(ints("target_nodeids", &w.iter().map(|w| w.1).collect::<Vec<_>>()));
    a.push(ints("target_ids", &w.iter().map(|w| w.2).collect::<Vec<_>>()));
    a.push(floats("target_weights", &w.iter().map(|w| w.3).collect::<Vec<_>>()));
    a.push(int("n_targets", 3));
    a.push(string("post_transform", post));
    a.push(string("aggregate_function", aggregate));
    if let Some(b) = base {
        a.push(floats("base_values", b));
    }
    a
}

#[test]
fn regressor_with_several_targets() {
    let base = Some(&[0.5f32, 1.5, 2.5][..]);
    let ir = from_proto(&regressor(multi_target_attrs("NONE", "SUM", base))).unwrap();
    assert_eq!((ir.task, ir.link, ir.n_outputs()), (Task::Regression, Link::Identity, 3));
    // Tree 0 weights two targets: one tree of vector leaves; tree 1 one target: a plain tree.
    let leaves = |t: &Tree| t.nodes.iter().filter(|n| !matches!(n, Node::Split { .. })).cloned().collect::<Vec<_>>();
    assert_eq!(leaves(&ir.trees[0]), [Node::VectorLeaf { values: vec![1.0, 3.0, 0.0] }, Node::VectorLeaf { values: vec![2.0, 4.0, 0.0] }]);
    assert_eq!((ir.trees.len(), ir.trees[1].output), (2, 2));
    check(&ir, [&[1.5, 4.5, 12.5], &[2.5, 5.5, 22.5]], "SUM");
    // ORT divides every target's sum by the number of trees, then adds its base value.
    let ir = from_proto(&regressor(multi_target_attrs("NONE", "AVERAGE", base))).unwrap();
    check(&ir, [&[1.0, 3.0, 7.5], &[1.5, 3.5, 12.5]], "AVERAGE");
    check(&from_proto(&regressor(multi_target_attrs("NONE", "SUM", None))).unwrap(), [&[1.0, 3.0, 10.0], &[2.0, 4.0, 20.0]], "no base");
    // Unlike a single target's, several targets' scores go through the post_transform.
    let lg = [&[0.81757444, 0.98901308, 0.9999963][..], &[0.92414182, 0.9959299, 1.0]];
    check(&from_proto(&regressor(multi_target_attrs("LOGISTIC", "SUM", base))).unwrap(), lg, "LOGISTIC");
    let sm = [&[1.6695822e-5, 3.3534452e-4, 0.99964797][..], &[2.0611537e-9, 4.1399378e-8, 1.0]];
    check(&from_proto(&regressor(multi_target_attrs("SOFTMAX", "SUM", base))).unwrap(), sm, "SOFTMAX");
    // ORT refuses the graph too ("base_values should have 0 or 3 values").
    let e = from_proto(&regressor(multi_target_attrs("NONE", "SUM", Some(&[0.5])))).unwrap_err().to_string();
    assert_eq!(e, "malformed onnx model: base_values has 1 entries for 3 target(s)");
}

#[test]
fn refused_constructs_name_themselves() {
    let msg = |a: Vec<pb::AttributeProto>| from_proto(&regressor(a)).unwrap_err().to_string();
    let with = |a: pb::AttributeProto| {
        let mut attrs = reg_attrs(&R, 2);
        set(&mut attrs, a);
        msg(attrs)
    };
    assert_eq!(with(string("aggregate_function", "MIN")), "unsupported in onnx model: aggregate_function MIN");
    assert_eq!(with(string("aggregate_function", "MAX")), "unsupported in onnx model: aggregate_function MAX");
    assert_eq!(with(string("post_transform", "PROBIT")), "unsupported in onnx model: post_transform PROBIT");
    assert_eq!(with(string("post_transform", "SOFTMAX_ZERO")), "unsupported in onnx model: post_transform SOFTMAX_ZERO");
    assert_eq!(with(int("n_targets", 0)), "malformed onnx model: TreeEnsembleRegressor has n_targets = 0");
    assert_eq!(with(int("n_targets", 1 << 20)), "malformed onnx model: TreeEnsembleRegressor has n_targets = 1048576");
    assert!(with(floats("base_values", &[0.5, 1.0])).contains("base_values has 2 entries for 1 target"));
    assert!(with(ints("target_ids", &[0, 0, 1, 0])).contains("target id 1 out of range"));
    assert!(with(ints("target_nodeids", &[1, 0, 1, 2])).contains("tree 0 node 0, which is not a leaf"));
    assert!(with(ints("target_nodeids", &[1, 9, 1, 2])).contains("tree 0 node 9, which does not exist"));
    assert!(with(ints("target_ids", &[0, 0])).contains("target_ids has 2 entries but target_treeids has 4"));
    assert!(with(ints("nodes_featureids", &[0, 0, 0, 0, 0])).contains("nodes_featureids has 5 entries but nodes_treeids has 6"));
    assert!(with(ints("nodes_featureids", &[0, 0, 0, 2, 0, 0])).contains("tree 1 node 0: feature id 2 out of range (the input has 2 features)"));
    assert!(with(floats("nodes_values", &[0.0, 0.0, 0.0, f32::NAN, 0.0, 0.0])).contains("NaN threshold in tree 1 node 0"));
    assert!(with(strings("nodes_modes", &["BRANCH_LEQ", "LEAF", "LEAF", "BRANCH_MEMBER", "LEAF", "LEAF"])).contains("tree 1 node 0: node mode \"BRANCH_MEMBER\""));
    assert!(with(ints("nodes_falsenodeids", &[2, 0, 0, 9, 0, 0])).contains("tree 1 node 0: false child 9 does not exist"));
    assert!(with(ints("nodes_nodeids", &[0, 1, 1, 0, 1, 2])).contains("tree 0: node id 1 appears twice"));
    // Node 1 is a branch back to the root: no node is parentless.
    let mut cyc = reg_attrs(&R[2..], 2);
    set(&mut cyc, strings("nodes_modes", &["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"]));
    set(&mut cyc, ints("nodes_truenodeids", &[1, 0, 0, 1, 0, 0]));
    set(&mut cyc, ints("nodes_falsenodeids", &[2, 2, 0, 2, 0, 0]));
    assert!(msg(cyc.clone()).contains("tree 0 has no root"), "{}", msg(cyc));
    // Node 1 and the root both lead to node 2.
    let mut shared = reg_attrs(&R[2..], 2);
    set(&mut shared, strings("nodes_modes", &["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"]));
    set(&mut shared, ints("nodes_truenodeids", &[1, 2, 0, 1, 0, 0]));
    set(&mut shared, ints("nodes_falsenodeids", &[2, 2, 0, 2, 0, 0]));
    assert!(msg(shared.clone()).contains("tree 0: node 2 is reached twice"), "{}", msg(shared));
    // ORT starts at the first listed node: a root listed after its leaves is refused.
    let mut late = reg_attrs(&R, 2);
    set(&mut late, ints("nodes_nodeids", &[1, 0, 2, 0, 1, 2]));
    set(&mut late, strings("nodes_modes", &["LEAF", "BRANCH_LEQ", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"]));
    set(&mut late, ints("nodes_truenodeids", &[0, 1, 0, 1, 0, 0]));
    set(&mut late, ints("nodes_falsenodeids", &[0, 2, 0, 2, 0, 0]));
    assert!(msg(late.clone()).contains("tree 0: its root (node 0) is not its first node (node 1)"), "{}", msg(late));
    let mut split = reg_attrs(&R, 2);
    set(&mut split, ints("nodes_treeids", &[0, 0, 1, 1, 0, 1]));
    set(&mut split, ints("nodes_nodeids", &[0, 1, 0, 1, 2, 2]));
    assert!(msg(split.clone()).contains("the nodes of tree 0 are not listed together"), "{}", msg(split));
    // Two parentless nodes.
    let mut two = reg_attrs(&R[2..], 2);
    set(&mut two, ints("nodes_truenodeids", &[1, 0, 0, 1, 0, 0]));
    set(&mut two, ints("nodes_falsenodeids", &[1, 0, 0, 2, 0, 0]));
    assert!(msg(two.clone()).contains("tree 0 has several roots"), "{}", msg(two));
}

#[test]
fn graph_shapes() {
    let tree = |input: &str, output: &str| node("TreeEnsembleRegressor", ML, &[input], &[output], reg_attrs(&R, 2));
    let err = |nodes| from_proto(&model(nodes, Some(2))).unwrap_err().to_string();
    let norm = node("Normalizer", ML, &["X"], &["Xn"], vec![string("norm", "L2")]);
    assert_eq!(
        err(vec![norm, tree("Xn", "variable")]),
        "unsupported in onnx model: Normalizer (ai.onnx.ml) before the tree ensemble (preprocessing is not compiled; export the ensemble alone)"
    );
    let exp = node("Exp", "", &["raw"], &["variable"], vec![]);
    assert!(err(vec![tree("X", "raw"), exp]).contains("Exp after the tree ensemble"));
    assert!(err(vec![tree("X", "a"), tree("X", "b")]).contains("graph with 2 tree ensembles"));
    let linear = node("LinearRegressor", ML, &["X"], &["lin"], vec![]);
    assert!(err(vec![tree("X", "variable"), linear]).contains("LinearRegressor (ai.onnx.ml) beside the tree ensemble"));
    assert!(err(vec![]).contains("without a TreeEnsemble, TreeEnsembleClassifier or TreeEnsembleRegressor"));
    // Pass-through nodes before and after are fine; the width comes from the input shape.
    let id = node("Identity", "", &["X"], &["Xi"], vec![]);
    let cast_in = node("Cast", "", &["Xi"], &["Xf"], vec![int("to", 1)]);
    let cast_out = node("Cast", "", &["raw"], &["variable"], vec![int("to", 1)]);
    let ir = from_proto(&model(vec![id, cast_in, tree("Xf", "raw"), cast_out], Some(7))).unwrap();
    assert_eq!(ir.features.len(), 7);
    assert_eq!(ir.name, "onnx-model");
    // Unknown width: the largest feature id + 1.
    let mut a = reg_attrs(&R, 2);
    set(&mut a, ints("nodes_featureids", &[0, 0, 0, 4, 0, 0]));
    let unknown = model(vec![node("TreeEnsembleRegressor", ML, &["X"], &["v"], a)], None);
    assert_eq!(from_proto(&unknown).unwrap().features.len(), 5);
    // Classifier: anything may consume the label; ZipMap may consume the probabilities.
    let mut m = classifier(clf_attrs(&C0_POS, "LOGISTIC", None, &[0, 1]));
    if let Some(g) = m.graph.as_mut() {
        g.node.push(node("ArrayFeatureExtractor", ML, &["classes", "label"], &["label_name"], vec![]));
        g.node.push(node("ZipMap", ML, &["probabilities"], &["output_probability"], vec![]));
    }
    assert!(from_proto(&m).is_ok());
}

#[test]
fn reindexes_in_preorder_and_keeps_attribute_types() {
    // Ids that are not positions, the false leaf listed first; double thresholds as a raw tensor.
    let raw: Vec<u8> = [7.0f64, 0.0, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = pb::TensorProto { dims: vec![3], data_type: 11, raw_data: raw, ..Default::default() };
    let a = vec![
        ints("nodes_treeids", &[4, 4, 4]),
        ints("nodes_nodeids", &[10, 20, 30]),
        ints("nodes_featureids", &[1, 0, 0]),
        strings("nodes_modes", &["BRANCH_NEQ", "LEAF", "LEAF"]),
        pb::AttributeProto { t: Some(t), ..attr("nodes_values_as_tensor", 4) },
        ints("nodes_truenodeids", &[30, 0, 0]),
        ints("nodes_falsenodeids", &[20, 0, 0]),
        ints("target_treeids", &[4, 4]),
        ints("target_nodeids", &[30, 20]),
        ints("target_ids", &[0, 0]),
        floats("target_weights", &[3.0, 2.0]),
        int("n_targets", 1),
    ];
    let ir = from_proto(&regressor(a)).unwrap();
    assert_eq!(
        ir.trees,
        vec![Tree {
            output: 0,
            nodes: vec![
                // NEQ: NaN != 7 is true, so NaN goes to the true node.
                Node::Split { feature: 1, test: Test::Ne(7.0), missing_yes: true, yes: 1, no: 2 },
                Node::Leaf { value: 3.0 },
                Node::Leaf { value: 2.0 },
            ],
        }]
    );
    // A FLOATS attribute typed as INTS is refused, not misread.
    let mut bad = reg_attrs(&R, 2);
    set(&mut bad, pb::AttributeProto { floats: vec![0.0; 6], ..attr("nodes_values", 7) });
    assert!(from_proto(&regressor(bad)).unwrap_err().to_string().contains("nodes_values has type INTS, expected FLOATS"));
}

// ---------------------------------------------------------------- TreeEnsemble (opset 5)

fn tensor_attr(name: &str, data_type: i32, float_data: Vec<f32>, int32_data: Vec<i32>) -> pb::AttributeProto {
    let n = float_data.len().max(int32_data.len()) as i64;
    let t = pb::TensorProto { dims: vec![n], data_type, float_data, int32_data, ..Default::default() };
    pb::AttributeProto { t: Some(t), ..attr(name, 4) }
}

/// One tree: node 0 tests `x0` with `mode` against 0.5 → leaf 0 (true, weight 1) / leaf 1
/// (false, weight 2), both for target 0.
fn ensemble5(mode: i32, members: &[f32], extra: Vec<pb::AttributeProto>) -> pb::ModelProto {
    let mut a = vec![
        int("n_targets", 1),
        ints("tree_roots", &[0]),
        ints("nodes_featureids", &[0]),
        ints("nodes_truenodeids", &[0]),
        ints("nodes_trueleafs", &[1]),
        ints("nodes_falsenodeids", &[1]),
        ints("nodes_falseleafs", &[1]),
        ints("leaf_targetids", &[0, 0]),
        tensor_attr("nodes_modes", 2, vec![], vec![mode]),
        tensor_attr("nodes_splits", 1, vec![0.5], vec![]),
        tensor_attr("leaf_weights", 1, vec![1.0, 2.0], vec![]),
    ];
    if !members.is_empty() {
        a.push(tensor_attr("membership_values", 1, members.to_vec(), vec![]));
    }
    for e in extra {
        set(&mut a, e);
    }
    model(vec![node("TreeEnsemble", ML, &["X"], &["Y"], a)], Some(1))
}

#[test]
fn tree_ensemble_5_modes_and_membership() {
    let score = |m: &pb::ModelProto, x: f32| from_proto(m).unwrap().margins(&[x])[0];
    let le = ensemble5(0, &[], vec![]);
    assert_eq!((score(&le, 0.5), score(&le, 0.6), score(&le, f32::NAN)), (1.0, 2.0, 2.0));
    let member = ensemble5(6, &[1.0, 3.0, f32::NAN], vec![ints("nodes_missing_value_tracks_true", &[1])]);
    let got: Vec<f64> = [1.0, 2.0, 3.0, 2.5, -1.0, f32::NAN].iter().map(|&x| score(&member, x)).collect();
    assert_eq!(got, [1.0, 2.0, 1.0, 2.0, 2.0, 1.0]);
}

#[test]
fn tree_ensemble_5_refusals_name_the_construct() {
    let err = |m: pb::ModelProto| from_proto(&m).unwrap_err().to_string();
    assert_eq!(
        err(ensemble5(6, &[1.5, f32::NAN], vec![])),
        "unsupported in onnx model: TreeEnsemble membership split (node 0) on the value 1.5: only integer codes in 0..16777216 compile"
    );
    assert_eq!(err(ensemble5(0, &[], vec![int("aggregate_function", 3)])), "unsupported in onnx model: TreeEnsemble aggregate_function MAX");
    let two = vec![int("n_targets", 2), int("post_transform", 4)];
    assert_eq!(err(ensemble5(0, &[], two)), "unsupported in onnx model: TreeEnsemble post_transform PROBIT");
    assert_eq!(err(ensemble5(7, &[], vec![])), "unsupported in onnx model: TreeEnsemble node mode 7 (node 0)");
    assert!(err(ensemble5(0, &[], vec![ints("leaf_targetids", &[0, 1])])).contains("leaf 1: target 1 out of range"));
    assert!(err(ensemble5(0, &[], vec![ints("nodes_truenodeids", &[0]), ints("nodes_trueleafs", &[0])])).contains("node 0 is reached twice"));
}
