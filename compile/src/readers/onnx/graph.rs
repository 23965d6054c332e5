//! The graph around the ensemble: which node it is, what feeds it, what reads its scores.

use super::attrs;
use super::error::{malformed, unsupported};
use super::pb;
use crate::readers::error::ReadError;
use std::collections::{HashMap, HashSet, VecDeque};

/// The domain of the tree-ensemble operators.
pub(super) const ML: &str = "ai.onnx.ml";

/// Which tree-ensemble operator the graph holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Classifier,
    Regressor,
    /// ai.onnx.ml opset 5 `TreeEnsemble`.
    Ensemble5,
}

/// The single tree-ensemble node.
pub(super) fn find_ensemble(graph: &pb::GraphProto) -> Result<(usize, Kind), ReadError> {
    let mut found = Vec::new();
    for (i, n) in graph.node.iter().enumerate() {
        let kind = match n.op_type.as_str() {
            "TreeEnsembleClassifier" => Kind::Classifier,
            "TreeEnsembleRegressor" => Kind::Regressor,
            "TreeEnsemble" => Kind::Ensemble5,
            _ => continue,
        };
        if n.domain != ML {
            return Err(unsupported(format!("{} in domain {:?} (expected {ML})", n.op_type, n.domain)));
        }
        found.push((i, kind));
    }
    match found[..] {
        [one] => Ok(one),
        [] => Err(unsupported("graph without a TreeEnsemble, TreeEnsembleClassifier or TreeEnsembleRegressor node")),
        _ => Err(unsupported(format!("graph with {} tree ensembles (only one is supported)", found.len()))),
    }
}

fn op_label(n: &pb::NodeProto) -> String {
    if n.domain.is_empty() || n.domain == "ai.onnx" {
        n.op_type.clone()
    } else {
        format!("{} ({})", n.op_type, n.domain)
    }
}

fn is_default_domain(n: &pb::NodeProto) -> bool {
    n.domain.is_empty() || n.domain == "ai.onnx"
}

/// `Cast`'s target type, if the node is a Cast.
fn cast_to(n: &pb::NodeProto) -> Option<i64> {
    if n.op_type != "Cast" || !is_default_domain(n) {
        return None;
    }
    n.attribute.iter().find(|a| a.name == "to").map(|a| a.i)
}

/// Checks that the ensemble reads a graph input directly (through Identity or Cast-to-float at
/// most), and that only ZipMap/Cast/Identity consume its scores. Returns the feature input.
pub(super) fn check_graph(graph: &pb::GraphProto, at: usize, kind: Kind) -> Result<&pb::ValueInfoProto, ReadError> {
    let nodes = &graph.node;
    let ens = nodes.get(at).ok_or_else(|| malformed("ensemble node vanished"))?;
    let [x] = &ens.input[..] else {
        return Err(malformed(format!("{} has {} inputs, expected 1", ens.op_type, ens.input.len())));
    };
    let mut producer: HashMap<&str, usize> = HashMap::new();
    let mut consumers: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            if producer.insert(o.as_str(), i).is_some() {
                return Err(malformed(format!("value {o:?} is produced twice")));
            }
        }
        for input in n.input.iter().filter(|s| !s.is_empty()) {
            consumers.entry(input.as_str()).or_default().push(i);
        }
    }

    // Upstream: back to a graph input.
    let mut on_path: HashSet<usize> = HashSet::from([at]);
    let mut name = x.as_str();
    while let Some(&p) = producer.get(name) {
        let n = nodes.get(p).ok_or_else(|| malformed("producer vanished"))?;
        let pass = (n.op_type == "Identity" && is_default_domain(n)) || cast_to(n) == Some(i64::from(attrs::T_FLOAT));
        if !pass {
            return Err(unsupported(format!(
                "{} before the tree ensemble (preprocessing is not compiled; export the ensemble alone)",
                op_label(n)
            )));
        }
        if !on_path.insert(p) {
            return Err(malformed("the graph has a cycle"));
        }
        name = n.input.first().map(String::as_str).unwrap_or_default();
    }
    let input = graph.input.iter().find(|v| v.name == name).ok_or_else(|| {
        if graph.initializer.iter().any(|t| t.name == name) {
            malformed(format!("the ensemble's input {name:?} is a constant"))
        } else {
            malformed(format!("the ensemble's input {name:?} is neither a graph input nor computed by a node"))
        }
    })?;

    // Downstream of the scores: only layout/type changes.
    let (scores, label) = match kind {
        Kind::Classifier => (ens.output.get(1), ens.output.first()),
        Kind::Regressor | Kind::Ensemble5 => (ens.output.first(), None),
    };
    let scores = scores.filter(|s| !s.is_empty()).ok_or_else(|| malformed(format!("{} has no scores output", ens.op_type)))?;
    let mut queue: VecDeque<&str> = VecDeque::from([scores.as_str()]);
    while let Some(value) = queue.pop_front() {
        for &c in consumers.get(value).map(Vec::as_slice).unwrap_or_default() {
            let n = nodes.get(c).ok_or_else(|| malformed("consumer vanished"))?;
            let pass = (n.op_type == "ZipMap" && n.domain == ML)
                || (n.op_type == "Identity" && is_default_domain(n))
                || matches!(cast_to(n), Some(t) if t == i64::from(attrs::T_FLOAT) || t == i64::from(attrs::T_DOUBLE))
                || multiplies_by_one(n, graph);
            if !pass {
                return Err(unsupported(format!(
                    "{} after the tree ensemble (it would change the scores; only ZipMap, Cast to float and Identity may follow)",
                    op_label(n)
                )));
            }
            if on_path.insert(c) {
                queue.extend(n.output.iter().map(String::as_str));
            }
        }
    }
    // Downstream of the label: anything (it does not touch the scores).
    let mut queue: VecDeque<&str> = label.map(String::as_str).into_iter().collect();
    while let Some(value) = queue.pop_front() {
        for &c in consumers.get(value).map(Vec::as_slice).unwrap_or_default() {
            if on_path.insert(c) {
                queue.extend(nodes.get(c).map(|n| n.output.iter().map(String::as_str)).into_iter().flatten());
            }
        }
    }
    // Other ML operators would mean the graph is more than this ensemble.
    if let Some(n) = nodes.iter().enumerate().find(|(i, n)| !on_path.contains(i) && n.domain == ML).map(|(_, n)| n) {
        return Err(unsupported(format!("{} beside the tree ensemble (only a single ensemble is compiled)", op_label(n))));
    }
    Ok(input)
}

/// Number of features from the input's declared shape `[N, F]`, if known.
pub(super) fn input_width(input: &pb::ValueInfoProto) -> Result<Option<usize>, ReadError> {
    use pb::tensor_shape_proto::dimension::Value;
    use pb::type_proto::Value as Type;
    let Some(Type::TensorType(t)) = input.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Ok(None);
    };
    // FLOAT, INT32, INT64, DOUBLE: ONNX Runtime compares them as the thresholds' type.
    if ![1, 6, 7, 11].contains(&t.elem_type) {
        return Err(unsupported(format!("input {:?} of tensor element type #{}", input.name, t.elem_type)));
    }
    let Some(shape) = &t.shape else { return Ok(None) };
    match &shape.dim[..] {
        [_, width] => Ok(match width.value {
            Some(Value::DimValue(f)) => usize::try_from(f).ok(),
            _ => None,
        }),
        [_] | [] => Ok(None),
        dims => Err(unsupported(format!("input {:?} of rank {}", input.name, dims.len()))),
    }
}

/// onnxmltools' LightGBM converter ends with `Mul(probabilities, one)`, `one` a constant 1.0:
/// a no-op we can pass. Any other factor would change the scores.
fn multiplies_by_one(n: &pb::NodeProto, graph: &pb::GraphProto) -> bool {
    if !(matches!(n.op_type.as_str(), "Mul" | "Div") && is_default_domain(n) && n.input.len() == 2) {
        return false;
    }
    graph.initializer.iter().filter(|t| n.input[1..].contains(&t.name)).any(|t| {
        let one_f32 = t.float_data.as_slice() == [1.0] || t.raw_data.as_slice() == 1.0f32.to_le_bytes();
        let one_f64 = t.double_data.as_slice() == [1.0] || t.raw_data.as_slice() == 1.0f64.to_le_bytes();
        t.dims.iter().product::<i64>() == 1 && (one_f32 || one_f64)
    })
}
