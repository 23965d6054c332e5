//! The `nodes_*` and `class_*`/`target_*` attributes of the opset-1/3 operators → their tables,
//! and the tables → validated, re-indexed trees ("skeletons") whose leaves still carry their
//! per-class weights.

use super::attrs::Attrs;
use super::error::{malformed, unsupported};
use crate::ir::Test;
use crate::readers::error::ReadError;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Leaf,
    Le,
    Lt,
    Ge,
    Gt,
    Eq,
    Ne,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "LEAF" => Mode::Leaf,
            "BRANCH_LEQ" => Mode::Le,
            "BRANCH_LT" => Mode::Lt,
            "BRANCH_GTE" => Mode::Ge,
            "BRANCH_GT" => Mode::Gt,
            "BRANCH_EQ" => Mode::Eq,
            "BRANCH_NEQ" => Mode::Ne,
            _ => return None,
        })
    }
}

/// The `nodes_*` attributes, all of the same length (checked by [`node_table`]).
pub(super) struct NodeTable<'a> {
    pub tree_ids: &'a [i64],
    pub node_ids: &'a [i64],
    pub feature_ids: &'a [i64],
    pub modes: Vec<Mode>,
    pub values: Vec<f64>,
    pub true_ids: &'a [i64],
    pub false_ids: &'a [i64],
    pub missing_true: Vec<bool>,
}

/// The leaf weights (`class_*` or `target_*`), all of the same length (checked by [`weight_table`]).
pub(super) struct WeightTable<'a> {
    /// "class" or "target", for messages.
    pub kind: &'static str,
    pub tree_ids: &'a [i64],
    pub node_ids: &'a [i64],
    pub ids: &'a [i64],
    pub values: Vec<f64>,
    /// Number of classes or targets: ids must be below it.
    pub n_ids: usize,
}

fn required_ints<'a>(attrs: &Attrs<'a>, name: &str) -> Result<&'a [i64], ReadError> {
    attrs.ints(name)?.ok_or_else(|| malformed(format!("missing attribute {name}")))
}

fn same_len(name: &str, len: usize, reference: &str, n: usize) -> Result<(), ReadError> {
    if len == n {
        Ok(())
    } else {
        Err(malformed(format!("{name} has {len} entries but {reference} has {n}")))
    }
}

pub(super) fn node_table<'a>(attrs: &Attrs<'a>) -> Result<NodeTable<'a>, ReadError> {
    let tree_ids = required_ints(attrs, "nodes_treeids")?;
    let n = tree_ids.len();
    if n == 0 {
        return Err(malformed("the ensemble has no nodes"));
    }
    let node_ids = required_ints(attrs, "nodes_nodeids")?;
    let feature_ids = required_ints(attrs, "nodes_featureids")?;
    let true_ids = required_ints(attrs, "nodes_truenodeids")?;
    let false_ids = required_ints(attrs, "nodes_falsenodeids")?;
    let mode_names = attrs.strings("nodes_modes")?.ok_or_else(|| malformed("missing attribute nodes_modes"))?;
    let values = attrs.reals("nodes_values")?.ok_or_else(|| malformed("missing attribute nodes_values"))?;
    let missing = attrs.ints("nodes_missing_value_tracks_true")?.unwrap_or_default();
    for (name, len) in [
        ("nodes_nodeids", node_ids.len()),
        ("nodes_featureids", feature_ids.len()),
        ("nodes_truenodeids", true_ids.len()),
        ("nodes_falsenodeids", false_ids.len()),
        ("nodes_modes", mode_names.len()),
        ("nodes_values", values.len()),
    ] {
        same_len(name, len, "nodes_treeids", n)?;
    }
    if !missing.is_empty() {
        same_len("nodes_missing_value_tracks_true", missing.len(), "nodes_treeids", n)?;
    }
    let mut modes = Vec::with_capacity(n);
    for (i, name) in mode_names.iter().enumerate() {
        let mode = Mode::parse(name).ok_or_else(|| {
            let t = tree_ids.get(i).copied().unwrap_or_default();
            let id = node_ids.get(i).copied().unwrap_or_default();
            unsupported(format!("tree {t} node {id}: node mode {name:?}"))
        })?;
        modes.push(mode);
    }
    let missing_true = if missing.is_empty() { vec![false; n] } else { missing.iter().map(|&m| m != 0).collect() };
    Ok(NodeTable { tree_ids, node_ids, feature_ids, modes, values, true_ids, false_ids, missing_true })
}

pub(super) fn weight_table<'a>(attrs: &Attrs<'a>, kind: &'static str, n_ids: usize) -> Result<WeightTable<'a>, ReadError> {
    let name = |field: &str| format!("{kind}_{field}");
    let tree_ids = attrs.ints(&name("treeids"))?.unwrap_or_default();
    let node_ids = attrs.ints(&name("nodeids"))?.unwrap_or_default();
    let ids = attrs.ints(&name("ids"))?.unwrap_or_default();
    let values = attrs.reals(&name("weights"))?.unwrap_or_default();
    let n = tree_ids.len();
    same_len(&name("nodeids"), node_ids.len(), &name("treeids"), n)?;
    same_len(&name("ids"), ids.len(), &name("treeids"), n)?;
    same_len(&name("weights"), values.len(), &name("treeids"), n)?;
    Ok(WeightTable { kind, tree_ids, node_ids, ids, values, n_ids })
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum SkelNode {
    Split { feature: u32, test: Test, missing_yes: bool, yes: u32, no: u32 },
    /// Summed weight per class/target id, sorted by id; ids without a weight are absent.
    Leaf { weights: Vec<(u32, f64)> },
}

/// One ONNX tree, re-indexed so that `nodes[0]` is the root.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Skeleton {
    pub tree_id: i64,
    pub nodes: Vec<SkelNode>,
}

impl Skeleton {
    /// Class/target ids that some leaf of this tree carries a weight for (sorted, unique).
    pub fn ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self
            .nodes
            .iter()
            .flat_map(|n| match n {
                SkelNode::Leaf { weights } => weights.iter().map(|&(c, _)| c).collect(),
                SkelNode::Split { .. } => Vec::new(),
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Whether every leaf carries a weight for `id` (then every row reaching this tree scores it).
    pub fn every_leaf_has(&self, id: u32) -> bool {
        self.nodes.iter().all(|n| match n {
            SkelNode::Leaf { weights } => weights.iter().any(|&(c, _)| c == id),
            SkelNode::Split { .. } => true,
        })
    }
}

/// Groups, validates and re-indexes the trees. `n_features`, when known from the input shape,
/// bounds the feature ids. Trees come out in the order of their first node in the attributes.
///
/// The root is the node no branch points to, and it must also be the tree's first node in the
/// attributes, with the tree's nodes listed together: ONNX Runtime 1.31 takes the first node of
/// each run of equal tree ids as the root, whatever the links say (node ids themselves may be in
/// any order).
pub(super) fn build(table: &NodeTable, weights: &WeightTable, n_features: Option<usize>) -> Result<Vec<Skeleton>, ReadError> {
    // Runs of equal tree ids, in order; ONNX Runtime starts a new tree whenever the id changes.
    let mut runs: Vec<(i64, std::ops::Range<usize>)> = Vec::new();
    let mut tree_pos: FxHashMap<i64, usize> = FxHashMap::default();
    for (row, &t) in table.tree_ids.iter().enumerate() {
        match runs.last_mut() {
            Some((last, rows)) if *last == t => rows.end = row + 1,
            _ => {
                if tree_pos.insert(t, runs.len()).is_some() {
                    return Err(malformed(format!("the nodes of tree {t} are not listed together")));
                }
                runs.push((t, row..row + 1));
            }
        }
    }
    // Each tree's node ids, indexed on every core; the first error in tree order is reported.
    let indexes: Vec<_> = runs.par_iter().map(|(t, rows)| NodeIndex::new(*t, rows.clone(), table.node_ids)).collect();
    let indexes = indexes.into_iter().collect::<Result<Vec<_>, _>>()?;

    // Leaf weights per table row.
    let kind = weights.kind;
    let mut leaf_weights: Vec<Vec<(u32, f64)>> = vec![Vec::new(); table.tree_ids.len()];
    for (((&t, &n), &id), &w) in weights.tree_ids.iter().zip(weights.node_ids).zip(weights.ids).zip(&weights.values) {
        let Some(row) = tree_pos.get(&t).and_then(|&pos| indexes[pos].row(n)) else {
            return Err(malformed(format!("{kind} weight for tree {t} node {n}, which does not exist")));
        };
        if table.modes.get(row) != Some(&Mode::Leaf) {
            return Err(malformed(format!("{kind} weight for tree {t} node {n}, which is not a leaf")));
        }
        let id = match u32::try_from(id) {
            Ok(id) if (id as usize) < weights.n_ids => id,
            _ => {
                return Err(malformed(format!(
                    "tree {t} node {n}: {kind} id {id} out of range (expected 0..{})",
                    weights.n_ids
                )))
            }
        };
        let list = &mut leaf_weights[row];
        match list.iter_mut().find(|(c, _)| *c == id) {
            Some((_, sum)) => *sum += w,
            None => list.push((id, w)),
        }
    }

    let walked: Vec<_> = runs
        .into_par_iter()
        .zip(indexes)
        .map(|((t, rows), index)| walk(table, &index, &leaf_weights, t, rows.collect(), n_features))
        .collect();
    walked.into_iter().collect()
}

/// One tree's node id → table row. Converters number a tree's nodes 0..n: then a table, else
/// a hash map.
struct NodeIndex {
    first_row: usize,
    dense: Vec<u32>,
    sparse: FxHashMap<i64, usize>,
}

impl NodeIndex {
    fn new(t: i64, rows: std::ops::Range<usize>, node_ids: &[i64]) -> Result<Self, ReadError> {
        let ids = &node_ids[rows.clone()];
        let dense_ok = ids.iter().all(|&n| (0..4 * ids.len() as i64 + 16).contains(&n));
        let mut index = NodeIndex { first_row: rows.start, dense: Vec::new(), sparse: FxHashMap::default() };
        let twice = |n: i64| malformed(format!("tree {t}: node id {n} appears twice"));
        if dense_ok {
            let size = ids.iter().max().map_or(0, |&m| m as usize + 1);
            index.dense = vec![u32::MAX; size];
            for (local, &n) in ids.iter().enumerate() {
                if std::mem::replace(&mut index.dense[n as usize], local as u32) != u32::MAX {
                    return Err(twice(n));
                }
            }
        } else {
            index.sparse.reserve(ids.len());
            for (local, &n) in ids.iter().enumerate() {
                if index.sparse.insert(n, local).is_some() {
                    return Err(twice(n));
                }
            }
        }
        Ok(index)
    }

    fn row(&self, id: i64) -> Option<usize> {
        let local = if self.dense.is_empty() {
            *self.sparse.get(&id)?
        } else {
            let l = *self.dense.get(usize::try_from(id).ok()?)?;
            (l != u32::MAX).then_some(l as usize)?
        };
        Some(self.first_row + local)
    }
}

/// Walks one tree from its root in pre-order (the true child right after its parent).
fn walk(
    table: &NodeTable,
    index: &NodeIndex,
    leaf_weights: &[Vec<(u32, f64)>],
    t: i64,
    rows_of_tree: Vec<usize>,
    n_features: Option<usize>,
) -> Result<Skeleton, ReadError> {
    let child = |row: usize, id: Option<&i64>, which: &str| -> Result<usize, ReadError> {
        let n = table.node_ids.get(row).copied().unwrap_or_default();
        let id = id.copied().ok_or_else(|| malformed(format!("tree {t} node {n}: no {which} child")))?;
        index.row(id).ok_or_else(|| malformed(format!("tree {t} node {n}: {which} child {id} does not exist")))
    };

    // A tree's rows are consecutive (`build` refuses trees listed apart), and every child
    // `index` finds is in the same tree: per-tree tables are indexed by row - first.
    let first = rows_of_tree.first().copied().unwrap_or(0);
    let local = |row: usize| row - first;
    // The root is the one node that is no branch's child.
    let mut is_child = vec![false; rows_of_tree.len()];
    for &row in &rows_of_tree {
        if table.modes.get(row).is_some_and(|&m| m != Mode::Leaf) {
            is_child[local(child(row, table.true_ids.get(row), "true")?)] = true;
            is_child[local(child(row, table.false_ids.get(row), "false")?)] = true;
        }
    }
    let roots: Vec<usize> = rows_of_tree.iter().copied().filter(|&r| !is_child[local(r)]).collect();
    let root = match roots[..] {
        [root] => root,
        [] => return Err(malformed(format!("tree {t} has no root: every node is a child of another (cycle)"))),
        _ => {
            let ids: Vec<i64> = roots.iter().filter_map(|&r| table.node_ids.get(r).copied()).collect();
            return Err(malformed(format!("tree {t} has several roots (nodes {ids:?} are nobody's child)")));
        }
    };

    // ONNX Runtime starts each tree at its first listed node, whatever the links say.
    if rows_of_tree.first() != Some(&root) {
        let first = rows_of_tree.first().and_then(|&r| table.node_ids.get(r)).copied().unwrap_or_default();
        let root = table.node_ids.get(root).copied().unwrap_or_default();
        return Err(malformed(format!(
            "tree {t}: its root (node {root}) is not its first node (node {first}), where ONNX Runtime would start"
        )));
    }

    // Pre-order: ONNX row → IR index.
    let mut order: Vec<usize> = Vec::with_capacity(rows_of_tree.len());
    let mut ir_index = vec![u32::MAX; rows_of_tree.len()];
    let mut stack = vec![root];
    let mut seen = vec![false; rows_of_tree.len()];
    seen[local(root)] = true;
    while let Some(row) = stack.pop() {
        let idx = u32::try_from(order.len()).map_err(|_| malformed(format!("tree {t} has too many nodes")))?;
        ir_index[local(row)] = idx;
        order.push(row);
        if table.modes.get(row).is_some_and(|&m| m != Mode::Leaf) {
            let yes = child(row, table.true_ids.get(row), "true")?;
            let no = child(row, table.false_ids.get(row), "false")?;
            for c in [no, yes] {
                if std::mem::replace(&mut seen[local(c)], true) {
                    let n = table.node_ids.get(row).copied().unwrap_or_default();
                    let cn = table.node_ids.get(c).copied().unwrap_or_default();
                    return Err(malformed(format!("tree {t}: node {cn} is reached twice (cycle or shared subtree, via node {n})")));
                }
                stack.push(c);
            }
        }
    }
    if order.len() != rows_of_tree.len() {
        return Err(malformed(format!(
            "tree {t}: {} of its {} nodes are unreachable from the root",
            rows_of_tree.len() - order.len(),
            rows_of_tree.len()
        )));
    }

    let mut nodes = Vec::with_capacity(order.len());
    for &row in &order {
        let n = table.node_ids.get(row).copied().unwrap_or_default();
        let mode = table.modes.get(row).copied().unwrap_or(Mode::Leaf);
        if mode == Mode::Leaf {
            let mut weights = leaf_weights[row].clone();
            weights.sort_by_key(|&(c, _)| c);
            nodes.push(SkelNode::Leaf { weights });
            continue;
        }
        let v = table.values.get(row).copied().unwrap_or(f64::NAN);
        if v.is_nan() {
            return Err(malformed(format!("NaN threshold in tree {t} node {n}")));
        }
        let f = table.feature_ids.get(row).copied().unwrap_or(-1);
        let feature = match u32::try_from(f) {
            Ok(f) if n_features.is_none_or(|nf| (f as usize) < nf) => f,
            _ => {
                let bound = n_features.map(|nf| format!(" (the input has {nf} features)")).unwrap_or_default();
                return Err(malformed(format!("tree {t} node {n}: feature id {f} out of range{bound}")));
            }
        };
        let test = match mode {
            Mode::Le => Test::Le(v),
            Mode::Lt => Test::Lt(v),
            Mode::Ge => Test::Ge(v),
            Mode::Gt => Test::Gt(v),
            Mode::Eq => Test::Eq(v),
            Mode::Ne | Mode::Leaf => Test::Ne(v),
        };
        // ONNX Runtime: NaN goes to the true node when missing_value_tracks_true, otherwise the
        // comparison itself decides, and every comparison with NaN is false except `!=`.
        let missing_yes = table.missing_true.get(row).copied().unwrap_or(false) || mode == Mode::Ne;
        let lookup = |id: Option<&i64>, which: &str| -> Result<u32, ReadError> {
            let c = child(row, id, which)?;
            Some(ir_index[local(c)]).filter(|&i| i != u32::MAX).ok_or_else(|| malformed(format!("tree {t} node {n}: {which} child not walked")))
        };
        let yes = lookup(table.true_ids.get(row), "true")?;
        let no = lookup(table.false_ids.get(row), "false")?;
        nodes.push(SkelNode::Split { feature, test, missing_yes, yes, no });
    }
    Ok(Skeleton { tree_id: t, nodes })
}
