//! The `TreeEnsemble` operator of ai.onnx.ml opset 5 → skeletons (the shape the opset-3
//! operators are read into), with ONNX Runtime 1.31's semantics:
//!
//! * interior nodes and leaves are separate lists; `nodes_trueleafs[i]` / `nodes_falseleafs[i]`
//!   say whether `nodes_truenodeids[i]` / `nodes_falsenodeids[i]` index the leaves; each tree
//!   starts at its `tree_roots` entry; each leaf adds `leaf_weights[j]` to target
//!   `leaf_targetids[j]`.
//! * `nodes_modes` (a UINT8 tensor): 0 `<=`, 1 `<`, 2 `>=`, 3 `>`, 4 `==`, 5 `!=`, 6 membership:
//!   the value equals one of the node's members, the k-th membership node owning the k-th
//!   NaN-delimited run of `membership_values`. Members must be integer codes in 0..2^24
//!   (categorical data); other members are refused.
//! * NaN goes to the true branch when `nodes_missing_value_tracks_true`, otherwise the test
//!   decides (false, except `!=`).

use super::attrs::Attrs;
use super::error::{malformed, unsupported};
use super::trees::{SkelNode, Skeleton};
use crate::ir::Test;
use crate::readers::error::ReadError;

/// Largest membership code accepted (as XGBoost's categorical limit).
const MAX_MEMBER: f64 = (1u32 << 24) as f64;

fn ints<'a>(attrs: &Attrs<'a>, name: &str) -> Result<&'a [i64], ReadError> {
    attrs.ints(name)?.ok_or_else(|| malformed(format!("TreeEnsemble has no {name}")))
}

/// Index `i` of `list` as a usize below `bound`.
fn index(list: &[i64], i: usize, bound: usize, what: &str) -> Result<usize, ReadError> {
    let v = list.get(i).copied().unwrap_or(-1);
    usize::try_from(v).ok().filter(|&v| v < bound).ok_or_else(|| malformed(format!("node {i}: {what} {v} out of range (0..{bound})")))
}

pub(super) fn build(attrs: &Attrs, n_features: Option<usize>, n_targets: usize) -> Result<Vec<Skeleton>, ReadError> {
    let features = ints(attrs, "nodes_featureids")?;
    let n = features.len();
    let true_ids = ints(attrs, "nodes_truenodeids")?;
    let false_ids = ints(attrs, "nodes_falsenodeids")?;
    let true_leafs = ints(attrs, "nodes_trueleafs")?;
    let false_leafs = ints(attrs, "nodes_falseleafs")?;
    let missing = attrs.ints("nodes_missing_value_tracks_true")?.unwrap_or_default();
    let modes = attrs.tensor_u8("nodes_modes")?.ok_or_else(|| malformed("TreeEnsemble has no nodes_modes"))?;
    let splits = attrs.tensor_reals("nodes_splits")?.ok_or_else(|| malformed("TreeEnsemble has no nodes_splits"))?;
    let roots = ints(attrs, "tree_roots")?;
    let targets = ints(attrs, "leaf_targetids")?;
    let weights = attrs.tensor_reals("leaf_weights")?.ok_or_else(|| malformed("TreeEnsemble has no leaf_weights"))?;
    let members = attrs.tensor_reals("membership_values")?.unwrap_or_default();
    for (name, len) in [
        ("nodes_truenodeids", true_ids.len()),
        ("nodes_falsenodeids", false_ids.len()),
        ("nodes_trueleafs", true_leafs.len()),
        ("nodes_falseleafs", false_leafs.len()),
        ("nodes_modes", modes.len()),
        ("nodes_splits", splits.len()),
    ] {
        if len != n {
            return Err(malformed(format!("{name} has {len} entries but nodes_featureids has {n}")));
        }
    }
    if !missing.is_empty() && missing.len() != n {
        return Err(malformed(format!("nodes_missing_value_tracks_true has {} entries for {n} nodes", missing.len())));
    }
    if targets.len() != weights.len() {
        return Err(malformed(format!("leaf_targetids has {} entries but leaf_weights has {}", targets.len(), weights.len())));
    }
    if roots.is_empty() {
        return Err(malformed("TreeEnsemble has no tree_roots"));
    }

    // Each interior node's test.
    let mut runs = members.split(|v| v.is_nan());
    let mut tests = Vec::with_capacity(n);
    for i in 0..n {
        let v = splits[i];
        let test = match modes[i] {
            0 => Test::Le(v),
            1 => Test::Lt(v),
            2 => Test::Ge(v),
            3 => Test::Gt(v),
            4 => Test::Eq(v),
            5 => Test::Ne(v),
            6 => {
                let run = runs.next().ok_or_else(|| malformed(format!("node {i}: no membership_values left for it")))?;
                let mut categories = Vec::with_capacity(run.len());
                for &m in run {
                    if !(0.0..MAX_MEMBER).contains(&m) || m.fract() != 0.0 {
                        return Err(unsupported(format!(
                            "TreeEnsemble membership split (node {i}) on the value {m}: only integer codes in 0..{MAX_MEMBER} compile"
                        )));
                    }
                    categories.push(m as u32);
                }
                categories.sort_unstable();
                categories.dedup();
                Test::Member { categories }
            }
            other => return Err(unsupported(format!("TreeEnsemble node mode {other} (node {i})"))),
        };
        if modes[i] != 6 && v.is_nan() {
            return Err(malformed(format!("node {i}: NaN split value")));
        }
        tests.push(test);
    }

    let leaf = |j: usize| -> Result<SkelNode, ReadError> {
        let t = usize::try_from(targets[j]).ok().filter(|&t| t < n_targets);
        let t = t.ok_or_else(|| malformed(format!("leaf {j}: target {} out of range (0..{n_targets})", targets[j])))?;
        Ok(SkelNode::Leaf { weights: vec![(t as u32, weights[j])] })
    };
    let mut trees = Vec::with_capacity(roots.len());
    let mut seen = vec![usize::MAX; n];
    for (t, _) in roots.iter().enumerate() {
        let root = index(roots, t, n, "tree root")?;
        // Pre-order: (interior node, slot it fills); leaves may be shared, interior nodes not.
        let mut nodes: Vec<SkelNode> = Vec::new();
        let mut stack = vec![(root, 0usize)];
        nodes.push(SkelNode::Leaf { weights: vec![] });
        while let Some((i, slot)) = stack.pop() {
            if std::mem::replace(&mut seen[i], t) == t {
                return Err(malformed(format!("tree {t}: node {i} is reached twice (cycle or shared subtree)")));
            }
            let f = features[i];
            let feature = u32::try_from(f).ok().filter(|&f| n_features.is_none_or(|nf| (f as usize) < nf));
            let feature = feature.ok_or_else(|| malformed(format!("node {i}: feature id {f} out of range")))?;
            let mut child = |is_leaf: i64, id: &[i64], which: &str| -> Result<u32, ReadError> {
                let at = nodes.len();
                if is_leaf != 0 {
                    nodes.push(leaf(index(id, i, targets.len(), &format!("{which} leaf"))?)?);
                } else {
                    nodes.push(SkelNode::Leaf { weights: vec![] });
                    stack.push((index(id, i, n, &format!("{which} node"))?, at));
                }
                u32::try_from(at).map_err(|_| malformed(format!("tree {t} has too many nodes")))
            };
            let yes = child(true_leafs[i], true_ids, "true")?;
            let no = child(false_leafs[i], false_ids, "false")?;
            let mode = modes[i];
            let missing_yes = missing.get(i).is_some_and(|&m| m != 0) || mode == 5;
            nodes[slot] = SkelNode::Split { feature, test: tests[i].clone(), missing_yes, yes, no };
        }
        trees.push(Skeleton { tree_id: t as i64, nodes });
    }
    Ok(trees)
}
