//! ONNX reader: a graph holding one `ai.onnx.ml` TreeEnsembleClassifier or TreeEnsembleRegressor
//! (opsets 1 and 3, as skl2onnx and onnxmltools write them; `*_as_tensor` doubles included), or
//! one TreeEnsemble (opset 5). `pb` decodes the protobuf, `graph` finds the ensemble and checks
//! what surrounds it, `attrs` reads its attributes, `trees` (opsets 1 and 3) and `ensemble5`
//! (opset 5) turn them into validated trees, and this module gives those trees ONNX Runtime's
//! (1.31) output semantics, which is what users compare against:
//!
//! * splits: `BRANCH_LEQ/LT/GTE/GT/EQ/NEQ` → `Test::Le/Lt/Ge/Gt/Eq/Ne`, true → `yes`; NaN goes to
//!   the true node when `nodes_missing_value_tracks_true`, otherwise the comparison decides
//!   (false, except `!=`).
//! * regressor: one output per target (`n_targets`, each leaf weight naming its target);
//!   `SUM` → margin = base + Σ leaves; `AVERAGE` → base + Σ leaves / (number of tree ids,
//!   weighted or not). ONNX Runtime ignores LOGISTIC/SOFTMAX for a single target and applies
//!   them across the targets otherwise.
//! * classifier: see [`classifier_outputs`] for how ONNX Runtime lays out binary scores.

mod attrs;
mod ensemble5;
mod error;
mod graph;
mod pb;
mod trees;

#[cfg(test)]
mod tests;

use crate::ir::{Aggregate, Covers, FeatureDef, FeatureKind, Link, ModelIr, Node, SourceFormat, Task, Tree};
use crate::readers::error::ReadError;
use attrs::Attrs;
use error::{malformed, unsupported};
use graph::Kind;
use prost::Message;
use std::collections::HashSet;
use trees::{node_table, weight_table, SkelNode, Skeleton};

pub fn read(bytes: &[u8]) -> Result<ModelIr, ReadError> {
    let model = pb::ModelProto::decode(bytes).map_err(|e| malformed(format!("cannot decode the ModelProto: {e}")))?;
    from_proto(&model)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Post {
    None,
    Logistic,
    Softmax,
}

fn from_proto(model: &pb::ModelProto) -> Result<ModelIr, ReadError> {
    let graph = model.graph.as_ref().ok_or_else(|| malformed("the model has no graph"))?;
    let (at, kind) = graph::find_ensemble(graph)?;
    let node = graph.node.get(at).ok_or_else(|| malformed("ensemble node vanished"))?;
    let input = graph::check_graph(graph, at, kind)?;
    let n_features = graph::input_width(input)?;
    let attrs = Attrs::new(node)?;
    if kind == Kind::Ensemble5 {
        return ensemble5_model(model, graph, &attrs, n_features);
    }
    let table = node_table(&attrs)?;
    let op = node.op_type.as_str();
    let post_name = attrs.string("post_transform")?.unwrap_or_else(|| "NONE".into());
    let post = match post_name.as_str() {
        "NONE" => Post::None,
        "LOGISTIC" => Post::Logistic,
        "SOFTMAX" => Post::Softmax,
        "SOFTMAX_ZERO" | "PROBIT" => return Err(unsupported(format!("post_transform {post_name}"))),
        other => return Err(unsupported(format!("post_transform {other:?}"))),
    };
    let base = attrs.reals("base_values")?.unwrap_or_default();

    let (skeletons, task, link, aggregate, base_score, trees, objective) = match kind {
        Kind::Regressor => {
            let n_targets = attrs.int("n_targets")?.ok_or_else(|| malformed(format!("{op} has no n_targets")))?;
            let n_targets = usize::try_from(n_targets)
                .ok()
                .filter(|&n| (1..=edgescore_core::MAX_OUTPUTS).contains(&n))
                .ok_or_else(|| malformed(format!("{op} has n_targets = {n_targets}")))?;
            let agg_name = attrs.string("aggregate_function")?.unwrap_or_else(|| "SUM".into());
            let weights = weight_table(&attrs, "target", n_targets)?;
            let skeletons = trees::build(&table, &weights, n_features)?;
            let aggregate = match agg_name.as_str() {
                "SUM" => Aggregate::Sum,
                // ONNX Runtime divides by the number of trees (all tree ids), then adds the base.
                "AVERAGE" => Aggregate::Average { divisor: skeletons.len() as f64 },
                "MIN" | "MAX" => return Err(unsupported(format!("aggregate_function {agg_name}"))),
                other => return Err(unsupported(format!("aggregate_function {other:?}"))),
            };
            let base_score = match base.len() {
                0 => vec![0.0; n_targets],
                n if n == n_targets => base.clone(),
                n => return Err(malformed(format!("base_values has {n} entries for {n_targets} target(s)"))),
            };
            // A single target's score is reported as is: ONNX Runtime applies no LOGISTIC/SOFTMAX.
            let link = if n_targets == 1 { Link::Identity } else { link_of(post) };
            let trees = if n_targets == 1 { ir_trees(&skeletons, Some) } else { target_trees(&skeletons, n_targets) };
            let objective = format!("{op}/{agg_name}/{post_name}");
            (skeletons, Task::Regression, link, aggregate, base_score, trees, objective)
        }
        Kind::Ensemble5 => unreachable!("read by ensemble5_model"),
        Kind::Classifier => {
            let n_classes = class_count(&attrs)?;
            let weights = weight_table(&attrs, "class", n_classes)?;
            let skeletons = trees::build(&table, &weights, n_features)?;
            let out = classifier_outputs(&skeletons, n_classes, post, &base)?;
            let trees = ir_trees(&skeletons, |c| out.class_to_output.get(c as usize).copied().flatten());
            let objective = format!("{op}/{post_name}");
            (skeletons, out.task, out.link, Aggregate::Sum, out.base_score, trees, objective)
        }
    };

    let n_features = n_features.unwrap_or_else(|| split_width(&skeletons).unwrap_or(0));
    Ok(ModelIr {
        ua_fingerprints: Vec::new(),
        name: if graph.name.is_empty() { "onnx-model".into() } else { graph.name.clone() },
        version: model.model_version.to_string(),
        source: SourceFormat::Onnx,
        objective,
        task,
        link,
        aggregate,
        base_score,
        features: (0..n_features).map(|i| FeatureDef { name: format!("f{i}"), kind: FeatureKind::Numeric }).collect(),
        ctrs: Vec::new(),
        // ONNX's tree ensembles record no covers.
        covers: Some(Covers::equal(&trees)),
        trees,
    })
}

/// A TreeEnsemble (opset 5): `n_targets` outputs, no base values. ONNX Runtime 1.31 reads
/// `post_transform` 1 as logistic and 2 as softmax (the operator's specification says the
/// reverse; users compare with ONNX Runtime) and, as for the opset-3 regressor, applies neither
/// to a single target. `aggregate_function`: 0 average (over all trees), 1 sum.
fn ensemble5_model(model: &pb::ModelProto, graph: &pb::GraphProto, attrs: &Attrs, n_features: Option<usize>) -> Result<ModelIr, ReadError> {
    let n_targets = attrs.int("n_targets")?.ok_or_else(|| malformed("TreeEnsemble has no n_targets"))?;
    let n_targets = usize::try_from(n_targets)
        .ok()
        .filter(|&n| (1..=edgescore_core::MAX_OUTPUTS).contains(&n))
        .ok_or_else(|| malformed(format!("TreeEnsemble has n_targets = {n_targets}")))?;
    let skeletons = ensemble5::build(attrs, n_features, n_targets)?;
    let aggregate = match attrs.int("aggregate_function")?.unwrap_or(1) {
        0 => Aggregate::Average { divisor: skeletons.len() as f64 },
        1 => Aggregate::Sum,
        2 => return Err(unsupported("TreeEnsemble aggregate_function MIN")),
        3 => return Err(unsupported("TreeEnsemble aggregate_function MAX")),
        other => return Err(malformed(format!("TreeEnsemble aggregate_function {other}"))),
    };
    let post = attrs.int("post_transform")?.unwrap_or(0);
    let (task, link) = match (post, n_targets) {
        (0..=2, 1) => (Task::Regression, Link::Identity),
        (0, _) => (Task::Regression, Link::Identity),
        (1, _) => (Task::MulticlassClassification, Link::Sigmoid { scale: 1.0 }),
        (2, _) => (Task::MulticlassClassification, Link::Softmax),
        (3, _) => return Err(unsupported("TreeEnsemble post_transform SOFTMAX_ZERO")),
        (4, _) => return Err(unsupported("TreeEnsemble post_transform PROBIT")),
        (other, _) => return Err(malformed(format!("TreeEnsemble post_transform {other}"))),
    };
    let n_features = n_features.unwrap_or_else(|| split_width(&skeletons).unwrap_or(1));
    let trees = ir_trees(&skeletons, Some);
    Ok(ModelIr {
        ua_fingerprints: Vec::new(),
        name: if graph.name.is_empty() { "onnx-model".into() } else { graph.name.clone() },
        version: model.model_version.to_string(),
        source: SourceFormat::Onnx,
        objective: format!("TreeEnsemble/{}/{post}", if matches!(aggregate, Aggregate::Sum) { "SUM" } else { "AVERAGE" }),
        task,
        link,
        aggregate,
        base_score: vec![0.0; n_targets],
        features: (0..n_features).map(|i| FeatureDef { name: format!("f{i}"), kind: FeatureKind::Numeric }).collect(),
        ctrs: Vec::new(),
        // ONNX's tree ensembles record no covers.
        covers: Some(Covers::equal(&trees)),
        trees,
    })
}

/// The input width the splits imply when the graph does not declare it: the largest feature
/// id + 1 (`None` without splits).
fn split_width(skeletons: &[Skeleton]) -> Option<usize> {
    skeletons
        .iter()
        .flat_map(|s| s.nodes.iter())
        .filter_map(|n| match n {
            SkelNode::Split { feature, .. } => Some(*feature as usize + 1),
            SkelNode::Leaf { .. } => None,
        })
        .max()
}

/// How ONNX Runtime turns the per-class sums into its `probabilities` output.
struct ClassifierOutputs {
    task: Task,
    link: Link,
    base_score: Vec<f64>,
    /// IR output of each ONNX class id (None: the class's weights do not reach the output).
    class_to_output: Vec<Option<u32>>,
}

fn link_of(post: Post) -> Link {
    match post {
        Post::None => Link::Identity,
        Post::Logistic => Link::Sigmoid { scale: 1.0 },
        Post::Softmax => Link::Softmax,
    }
}

/// ONNX Runtime 1.31's classifier output, `s_c` being the sum of the weights of class `c` over
/// the leaves a row reaches and `b` the base_values:
///
/// * more than 2 classes: `post([s_0 + b_0, .., s_k + b_k])`, base_values empty or one per class.
/// * 2 classes, weights for class 0 only ("binary case"): ONNX Runtime derives both columns from
///   `s = s_0 + b_0`: LOGISTIC → `[sigmoid(-s), sigmoid(s)]`; NONE and SOFTMAX → `[1 - s, s]` when
///   no weight is negative, else `[-s, s]`. The IR reports the positive column: 1 output, margin
///   `s`, Sigmoid or Identity.
/// * 2 classes with weights for class 1: `post([s_0 + b_0, s_1])` elementwise (softmax over the
///   two), except that column 0 is 0 when no leaf carries class-0 weights (ONNX Runtime zeroes
///   classes no leaf scored). 2 IR outputs.
///
/// Refused because ONNX Runtime's result is not a function of the sums alone, or is a known
/// inconsistency: 2 base_values for 2 classes (with class-1 weights it outputs
/// `post([-(b_1 + s_0), b_1 + s_0])`, ignoring the class-1 weights; without, `post([s_0 + b_0, 0])`);
/// class-1 weights absent from some leaf of every tree (the layout changes row by row); class-0
/// weights likewise with a non-zero base value (the base is dropped on rows that reach none);
/// a single class.
fn classifier_outputs(skeletons: &[Skeleton], n_classes: usize, post: Post, base: &[f64]) -> Result<ClassifierOutputs, ReadError> {
    let weighted: HashSet<u32> = skeletons.iter().flat_map(|s| s.ids()).collect();
    if weighted.is_empty() {
        return Err(unsupported("classifier without class weights"));
    }
    // ONNX Runtime only adds a class's base value (binary layouts) or even reports its score when
    // a leaf the row reached carried a weight for it: require a tree that always does.
    let always = |c: u32| skeletons.iter().any(|s| s.every_leaf_has(c));
    match n_classes {
        0 | 1 => Err(unsupported(format!("classifier with {n_classes} class label(s)"))),
        2 => {
            if base.len() > 1 {
                return Err(unsupported(format!(
                    "binary classifier with {} base_values (ONNX Runtime mishandles them: with class-1 weights it scores class 1 as base_values[1] + the class-0 sum, without them it reports class 1 as 0)",
                    base.len()
                )));
            }
            let b0 = base.first().copied().unwrap_or(0.0);
            let (has0, has1) = (weighted.contains(&0), weighted.contains(&1));
            if has1 && !always(1) {
                return Err(unsupported(
                    "binary classifier whose class-1 weights are missing from some leaves of every tree (ONNX Runtime then changes the output layout row by row)",
                ));
            }
            if has0 && !always(0) && b0 != 0.0 {
                return Err(unsupported(
                    "binary classifier with base_values whose class-0 weights are missing from some leaves of every tree (ONNX Runtime then drops the base value row by row)",
                ));
            }
            if !has1 {
                // Binary case: one score for the positive class.
                let link = if post == Post::Logistic { Link::Sigmoid { scale: 1.0 } } else { Link::Identity };
                Ok(ClassifierOutputs {
                    task: Task::BinaryClassification,
                    link,
                    base_score: vec![b0],
                    class_to_output: vec![Some(0), None],
                })
            } else {
                Ok(ClassifierOutputs {
                    task: Task::BinaryClassification,
                    link: link_of(post),
                    base_score: vec![if has0 { b0 } else { 0.0 }, 0.0],
                    class_to_output: vec![Some(0), Some(1)],
                })
            }
        }
        n => {
            if !base.is_empty() && base.len() != n {
                return Err(malformed(format!("base_values has {} entries for {n} classes", base.len())));
            }
            let base_score = if base.is_empty() { vec![0.0; n] } else { base.to_vec() };
            let class_to_output = (0..n).map(|c| u32::try_from(c).ok()).collect();
            Ok(ClassifierOutputs { task: Task::MulticlassClassification, link: link_of(post), base_score, class_to_output })
        }
    }
}

/// One IR tree per (ONNX tree, class it carries weights for); leaves without a weight for the
/// class get 0.
fn ir_trees(skeletons: &[Skeleton], output_of: impl Fn(u32) -> Option<u32>) -> Vec<Tree> {
    let mut out = Vec::new();
    for s in skeletons {
        for c in s.ids() {
            let Some(output) = output_of(c) else { continue };
            let nodes = s.nodes.iter().map(|n| ir_node(n, |weights| Node::Leaf { value: weight_of(weights, c) })).collect();
            out.push(Tree { output, nodes });
        }
    }
    out
}

/// A regressor's trees with several targets: a tree whose leaves carry weights for more than
/// one target is one tree of vector leaves (a value per target, 0 where a leaf has no weight
/// for it: ONNX Runtime adds nothing there), walked once per row for all its targets; a tree
/// weighting a single target is a plain tree of that target's output.
fn target_trees(skeletons: &[Skeleton], n_targets: usize) -> Vec<Tree> {
    let mut out = Vec::new();
    for s in skeletons {
        if s.ids().len() <= 1 {
            out.extend(ir_trees(std::slice::from_ref(s), Some));
            continue;
        }
        let values = |weights: &[(u32, f64)]| (0..n_targets as u32).map(|t| weight_of(weights, t)).collect();
        let nodes = s.nodes.iter().map(|n| ir_node(n, |weights| Node::VectorLeaf { values: values(weights) })).collect();
        out.push(Tree { output: 0, nodes });
    }
    out
}

/// A leaf's weight for class or target `id` (its weights are summed per id; 0 without one).
fn weight_of(weights: &[(u32, f64)], id: u32) -> f64 {
    weights.iter().filter(|(i, _)| *i == id).map(|(_, w)| w).sum()
}

/// A skeleton node as an IR node, its leaf made by `leaf` from the leaf's weights.
fn ir_node(n: &SkelNode, leaf: impl Fn(&[(u32, f64)]) -> Node) -> Node {
    match n {
        SkelNode::Split { feature, test, missing_yes, yes, no } => {
            Node::Split { feature: *feature, test: test.clone(), missing_yes: *missing_yes, yes: *yes, no: *no }
        }
        SkelNode::Leaf { weights } => leaf(weights),
    }
}

fn class_count(attrs: &Attrs) -> Result<usize, ReadError> {
    let ints = attrs.ints("classlabels_int64s")?.map(|v| v.len()).filter(|&n| n > 0);
    let strings = attrs.strings("classlabels_strings")?.map(|v| v.len()).filter(|&n| n > 0);
    match (ints, strings) {
        (Some(n), None) | (None, Some(n)) => Ok(n),
        (Some(_), Some(_)) => Err(malformed("classifier has both classlabels_int64s and classlabels_strings")),
        (None, None) => Err(malformed("classifier has no class labels (classlabels_int64s or classlabels_strings)")),
    }
}
