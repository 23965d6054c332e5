//! IR → `.esm` bytes. The writer decides the layout the evaluator walks:
//! - every test normalised to `x < t` in f32 (the "yes" child first), so the hot loop has one
//!   comparison and no per-library branches;
//! - nodes of a tree in breadth-first order with siblings adjacent (the "no" child is
//!   `left + 1`, one index per node) and children after parents (no cycles by construction);
//! - trees sorted by depth, so the groups the evaluator walks in lockstep waste few steps;
//! - oblivious trees (CatBoost's) kept as their levels and a leaf table (`tree_layout`), after
//!   the node trees, in file order.

use crate::ir::{Aggregate, FeatureKind, Link, ModelIr, Node as IrNode, Test};
use bytemuck::bytes_of;
use edgescore_core::artifact::layout::*;
use edgescore_core::artifact::checksum;
use rayon::prelude::*;
use std::collections::VecDeque;

/// Why the writer could not lay out a model (the IR holds something the format cannot express).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WriteError {
    #[error("tree {tree}: {reason}")]
    Tree { tree: usize, reason: String },
    #[error("model: {0}")]
    Model(String),
}

/// The smallest f32 `t` with `t >= v` (so `x < v` ⟺ `x < t` for every f32 `x`).
fn f32_at_or_above(v: f64) -> f32 {
    let c = v as f32;
    if (c as f64) < v {
        c.next_up()
    } else {
        c
    }
}

/// The smallest f32 `t` with `t > v` (so `x <= v` ⟺ `x < t`), if there is one.
fn f32_above(v: f64) -> Option<f32> {
    let c = v as f32;
    let t = if (c as f64) <= v { c.next_up() } else { c };
    ((t as f64) > v).then_some(t)
}

/// A normalised test: `op` with f32 threshold, and whether the IR's yes-child goes second.
struct Normalised {
    op: u16,
    payload: u32,
    swap: bool,
}

fn always(result: bool) -> Normalised {
    // `x < -inf` is false for every x; swapping the children makes it "always yes".
    Normalised { op: node::OP_LT, payload: f32::NEG_INFINITY.to_bits(), swap: result }
}

fn lt(t: f32, swap: bool) -> Normalised {
    Normalised { op: node::OP_LT, payload: t.to_bits(), swap }
}

fn normalise(test: &Test, cat_index: &mut dyn FnMut(&[u32], f32) -> u32) -> Result<Normalised, String> {
    let finite_or_inf = |t: f64| if t.is_nan() { Err("NaN threshold".to_string()) } else { Ok(t) };
    Ok(match *test {
        Test::Lt(t) => lt(f32_at_or_above(finite_or_inf(t)?), false),
        Test::Ge(t) => lt(f32_at_or_above(finite_or_inf(t)?), true),
        Test::Le(t) => match f32_above(finite_or_inf(t)?) {
            Some(t) => lt(t, false),
            None => always(true),
        },
        Test::Gt(t) => match f32_above(finite_or_inf(t)?) {
            Some(t) => lt(t, true),
            None => always(false),
        },
        Test::Eq(t) | Test::Ne(t) => {
            let t = finite_or_inf(t)?;
            let equal = matches!(test, Test::Eq(_));
            if (t as f32) as f64 == t {
                let op = if equal { node::OP_EQ } else { node::OP_NE };
                Normalised { op, payload: (t as f32).to_bits(), swap: false }
            } else {
                // No f32 equals t.
                always(!equal)
            }
        }
        Test::LeZeroAsMissing(t) => match f32_above(finite_or_inf(t)?) {
            Some(t) => Normalised { op: node::OP_LT_ZERO_MISSING, payload: t.to_bits(), swap: false },
            None => return Err("zero-as-missing split at +inf".into()),
        },
        Test::InSet { ref categories, invalid_at_or_below } => {
            if invalid_at_or_below.is_nan() {
                return Err("NaN lower bound in categorical split".into());
            }
            Normalised { op: node::OP_IN_SET, payload: cat_index(codes(categories)?, invalid_at_or_below), swap: false }
        }
        // Negative values are in no set: below the bitset, like IN_SET's invalid codes.
        Test::Member { ref categories } => Normalised { op: node::OP_MEMBER, payload: cat_index(codes(categories)?, -1.0), swap: false },
    })
}

/// A set's category codes, refused from 2^31 on: the artifact's bitsets end there
/// (`MAX_SET_WORDS`).
fn codes(categories: &[u32]) -> Result<&[u32], String> {
    match categories.iter().find(|&&c| c / 32 >= MAX_SET_WORDS) {
        Some(c) => Err(format!("category code {c} is 2^31 or more (the largest a set can hold is 2^31 - 1)")),
        None => Ok(categories),
    }
}

/// One tree laid out on its own, before the trees are ordered and merged.
struct LaidOut {
    depth: u32,
    layout: u16,
    output: u32,
    s: Sections,
}

#[derive(Default)]
struct Sections {
    trees: Vec<TreeSpec>,
    nodes: Vec<Node>,
    leaves: Vec<f64>,
    /// One entry per LEAVES value (plain leaves: their value, no terms); written only when
    /// some leaf is linear.
    linear_leaves: Vec<LinearLeaf>,
    linear_terms: Vec<LinearTerm>,
    /// Some node uses a test only format 2 knows (`MEMBER`).
    format_2_tests: bool,
    cat_splits: Vec<CatSplit>,
    cat_words: Vec<u32>,
    /// One cover per LEAVES value, when the model has covers (NODE_VALUES).
    covers: Vec<f32>,
    flags: u32,
}

/// Lays out one IR tree breadth-first; returns its depth and whether its leaves are vectors.
/// Splits may test `n_features` features (the inputs, then any CTR features); linear terms
/// only the `n_inputs` inputs.
/// `covers`: the tree's node covers (`ir::Covers::per_tree`), if the model has them.
fn lay_out_tree(t: usize, tree: &crate::ir::Tree, covers: Option<&[f64]>, n_features: usize, n_inputs: usize, n_outputs: usize, s: &mut Sections) -> Result<(u32, bool), WriteError> {
    let err = |reason: String| WriteError::Tree { tree: t, reason };
    let n = tree.nodes.len();
    if n == 0 {
        return Err(err("no nodes".into()));
    }
    if let [IrNode::Oblivious { levels, leaves }] = &tree.nodes[..] {
        if covers.is_some_and(|c| c.len() != leaves.len()) {
            return Err(err(format!("{} covers for {} leaves", covers.map_or(0, |c| c.len()), leaves.len())));
        }
        return lay_out_oblivious(t, levels, leaves, covers, n_features, s).map(|depth| (depth, false));
    }
    if covers.is_some_and(|c| c.len() != n) {
        return Err(err(format!("{} covers for {n} nodes", covers.map_or(0, |c| c.len()))));
    }
    let leaf_cover = |ir: usize| -> Result<f32, WriteError> {
        let c = covers.map_or(0.0, |c| c[ir]);
        if c.is_finite() && c >= 0.0 {
            Ok(c as f32)
        } else {
            Err(WriteError::Tree { tree: t, reason: format!("node {ir}: cover {c}") })
        }
    };
    let mut seen = vec![false; n];
    let base = s.nodes.len() as u64;
    // Queue of (IR index, output index, depth); output slots are reserved before they are filled.
    let mut queue = VecDeque::with_capacity(n);
    queue.push_back((0usize, 0u64, 0u32));
    s.nodes.reserve(n);
    s.nodes.push(zeroed_node());
    seen[0] = true;
    let mut depth = 0;
    let vector = tree.nodes.iter().any(|n| matches!(n, IrNode::VectorLeaf { .. }));
    // LINEAR_LEAVES entries for plain leaves are made only if the model turns out linear.
    let linear = tree.nodes.iter().any(|n| matches!(n, IrNode::LinearLeaf { .. }));
    while let Some((ir, slot, d)) = queue.pop_front() {
        depth = depth.max(d);
        if d > MAX_DEPTH {
            return Err(err(format!("deeper than {MAX_DEPTH}")));
        }
        let index = base + slot;
        let leaf_node = |first: usize| Node { payload: first as u32, feature: 0, flags: node::LEAF, left: index as u32 };
        let finite = |v: f64| if v.is_finite() { Ok(v) } else { Err(err(format!("node {ir}: leaf value {v} is not finite"))) };
        // Leaf indices are re-based when trees are merged; MAX_LEAVES is checked there.
        let out = match tree.nodes[ir] {
            IrNode::Leaf { value } | IrNode::LinearLeaf { fallback: value, .. } if vector => {
                let _ = value;
                return Err(err(format!("node {ir}: a scalar leaf in a tree of vector leaves")));
            }
            IrNode::Leaf { value } => {
                let first = s.leaves.len();
                s.leaves.push(finite(value)?);
                s.covers.push(leaf_cover(ir)?);
                if linear {
                    s.linear_leaves.push(LinearLeaf { constant: value, term_offset: s.linear_terms.len() as u32, n_terms: 0 });
                }
                leaf_node(first)
            }
            IrNode::Oblivious { .. } => return Err(err(format!("node {ir}: an oblivious tree inside another tree"))),
            IrNode::LinearLeaf { constant, ref terms, fallback } => {
                let first = s.leaves.len();
                s.leaves.push(finite(fallback)?);
                s.covers.push(leaf_cover(ir)?);
                s.linear_leaves.push(LinearLeaf { constant: finite(constant)?, term_offset: s.linear_terms.len() as u32, n_terms: terms.len() as u32 });
                for &(feature, coeff) in terms {
                    if feature as usize >= n_inputs || !coeff.is_finite() {
                        return Err(err(format!("node {ir}: linear term on feature {feature} with coefficient {coeff}")));
                    }
                    s.linear_terms.push(LinearTerm { feature, reserved: 0, coeff });
                }
                s.flags |= flags::HAS_LINEAR_LEAVES;
                leaf_node(first)
            }
            IrNode::VectorLeaf { ref values } => {
                if values.len() != n_outputs {
                    return Err(err(format!("node {ir}: vector leaf of {} values for {n_outputs} outputs", values.len())));
                }
                let first = s.leaves.len();
                for &v in values {
                    s.leaves.push(finite(v)?);
                    s.covers.push(leaf_cover(ir)?);
                }
                s.flags |= flags::HAS_VECTOR_LEAVES;
                leaf_node(first)
            }
            IrNode::Split { feature, ref test, missing_yes, yes, no } => {
                for child in [yes, no] {
                    let c = child as usize;
                    if c >= n {
                        return Err(err(format!("node {ir}: child {c} out of range")));
                    }
                    if std::mem::replace(&mut seen[c], true) {
                        return Err(err(format!("node {c} has two parents or is part of a cycle")));
                    }
                }
                if feature as usize >= n_features {
                    return Err(err(format!("node {ir}: splits on feature {feature} of {n_features}")));
                }
                let norm = s.split_test(test).map_err(|r| err(format!("node {ir}: {r}")))?;
                let (first, second) = if norm.swap { (no, yes) } else { (yes, no) };
                let missing_first = missing_yes != norm.swap;
                let left_slot = s.nodes.len() as u64 - base;
                s.nodes.push(zeroed_node());
                s.nodes.push(zeroed_node());
                queue.push_back((first as usize, left_slot, d + 1));
                queue.push_back((second as usize, left_slot + 1, d + 1));
                let missing = if missing_first { node::MISSING_YES } else { 0 };
                Node { payload: norm.payload, feature: feature as u16, flags: norm.op | missing, left: (base + left_slot) as u32 }
            }
        };
        s.nodes[index as usize] = out;
    }
    if let Some(unreached) = seen.iter().position(|&v| !v) {
        return Err(err(format!("node {unreached} is not reachable from the root")));
    }
    Ok((depth, vector))
}

/// Lays out an oblivious tree (`tree_layout::OBLIVIOUS`): its levels as split nodes, then a
/// leaf node starting its table of leaves; returns its depth. A level whose test the writer
/// normalised with the children swapped flips its bit of every leaf index, so the table is
/// permuted here rather than the bit flipped per row.
fn lay_out_oblivious(t: usize, levels: &[crate::ir::Level], leaves: &[f64], covers: Option<&[f64]>, n_features: usize, s: &mut Sections) -> Result<u32, WriteError> {
    let err = |reason: String| WriteError::Tree { tree: t, reason };
    let depth = levels.len();
    if depth > MAX_OBLIVIOUS_DEPTH as usize {
        return Err(err(format!("an oblivious tree of depth {depth} (at most {MAX_OBLIVIOUS_DEPTH})")));
    }
    if leaves.len() != 1 << depth {
        return Err(err(format!("an oblivious tree of depth {depth} with {} leaves", leaves.len())));
    }
    let mut flipped = 0usize;
    s.nodes.reserve(depth + 1);
    for (k, level) in levels.iter().enumerate() {
        if level.feature as usize >= n_features {
            return Err(err(format!("level {k}: splits on feature {} of {n_features}", level.feature)));
        }
        let norm = s.split_test(&level.test).map_err(|r| err(format!("level {k}: {r}")))?;
        flipped |= usize::from(norm.swap) << k;
        let missing = if level.missing_yes != norm.swap { node::MISSING_YES } else { 0 };
        s.nodes.push(Node { payload: norm.payload, feature: level.feature as u16, flags: norm.op | missing, left: 0 });
    }
    let first = s.leaves.len();
    // `left` is the node's own index minus one once rebased (see `layout::Node`).
    s.nodes.push(Node { payload: first as u32, feature: 0, flags: node::LEAF, left: depth as u32 });
    s.leaves.reserve(leaves.len());
    for index in 0..leaves.len() {
        let v = leaves[index ^ flipped];
        if !v.is_finite() {
            return Err(err(format!("leaf {}: value {v} is not finite", index ^ flipped)));
        }
        s.leaves.push(v);
        let c = covers.map_or(0.0, |c| c[index ^ flipped]);
        if !(c.is_finite() && c >= 0.0) {
            return Err(err(format!("leaf {}: cover {c}", index ^ flipped)));
        }
        s.covers.push(c as f32);
    }
    Ok(depth as u32)
}

impl Sections {
    /// Normalises a split's test, adding its category set if it has one and the flags its
    /// test kind needs.
    fn split_test(&mut self, test: &Test) -> Result<Normalised, String> {
        let cat_splits = &mut self.cat_splits;
        let cat_words = &mut self.cat_words;
        let mut add_set = |cats: &[u32], invalid: f32| {
            let n_words = cats.iter().max().map_or(0, |&m| m / 32 + 1);
            let word_offset = cat_words.len() as u32;
            cat_words.resize(cat_words.len() + n_words as usize, 0);
            for &c in cats {
                cat_words[(word_offset + c / 32) as usize] |= 1 << (c % 32);
            }
            cat_splits.push(CatSplit { word_offset, n_words, invalid_at_or_below: invalid, reserved: 0 });
            (cat_splits.len() - 1) as u32
        };
        let norm = normalise(test, &mut add_set)?;
        self.flags |= match norm.op {
            node::OP_LT => 0,
            node::OP_IN_SET => flags::HAS_CATEGORICAL,
            node::OP_MEMBER => {
                self.format_2_tests = true;
                flags::HAS_CATEGORICAL
            }
            _ => flags::HAS_RARE_TESTS,
        };
        Ok(norm)
    }
}

/// A node with every field zero, filled in by the caller.
fn zeroed_node() -> Node {
    bytemuck::Zeroable::zeroed()
}

/// IR → artifact bytes, in the lowest format version that holds the model.
pub fn write(model: &ModelIr) -> Result<Vec<u8>, WriteError> {
    write_for(model, FORMAT_VERSION)
}

/// As [`write`], for filters that read formats up to `max_format` (a fleet not yet upgraded):
/// NaN-low columns only from format 4, zero-as-missing columns from 5; a model that needs a
/// newer format is refused.
pub fn write_for(model: &ModelIr, max_format: u32) -> Result<Vec<u8>, WriteError> {
    write_with_reference(model, max_format, None)
}

/// As [`write_for`], with a drift reference (`compile --reference`): format 6.
pub fn write_with_reference(model: &ModelIr, max_format: u32, reference: Option<&crate::drift::DriftReference>) -> Result<Vec<u8>, WriteError> {
    if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&max_format) {
        return Err(WriteError::Model(format!("format {max_format} (this build writes {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION})")));
    }
    let n_outputs = model.n_outputs();
    if n_outputs == 0 || n_outputs > edgescore_core::MAX_OUTPUTS {
        return Err(WriteError::Model(format!("{n_outputs} outputs (1..={} supported)", edgescore_core::MAX_OUTPUTS)));
    }
    if model.features.is_empty() || model.features.len() as u64 > MAX_FEATURES as u64 {
        return Err(WriteError::Model(format!("{} features", model.features.len())));
    }
    let n_inputs = model.features.len();
    if !model.ctrs.is_empty() && n_inputs + model.ctrs.len() > MAX_CTR_ROW as usize {
        return Err(WriteError::Model(format!("{n_inputs} features and {} CTR features (at most {MAX_CTR_ROW} together)", model.ctrs.len())));
    }
    // Splits may test the inputs and the CTR features after them.
    let split_features = n_inputs + model.ctrs.len();
    // Node values are optional: a filter older than format 6 loads the model without them.
    let node_covers = model.covers.as_ref().filter(|_| max_format >= 6);
    if node_covers.is_some_and(|c| c.per_tree.len() != model.trees.len()) {
        return Err(WriteError::Model(format!("covers for {} trees of {}", node_covers.map_or(0, |c| c.per_tree.len()), model.trees.len())));
    }
    // Lay out each tree on its own, then order trees by depth (deepest first).
    // Trees are laid out independently, on every core; the first error in tree order wins.
    let laid: Vec<Result<LaidOut, WriteError>> = model
        .trees
        .par_iter()
        .enumerate()
        .map(|(t, tree)| {
            if tree.output as usize >= n_outputs {
                return Err(WriteError::Tree { tree: t, reason: format!("output {} of {n_outputs}", tree.output) });
            }
            let mut s = Sections::default();
            let covers = node_covers.map(|c| c.per_tree[t].as_slice());
            let (depth, vector) = lay_out_tree(t, tree, covers, split_features, n_inputs, n_outputs, &mut s)?;
            // A tree no training weight reached (a constant LightGBM tree's leaf_count of 0, or
            // covers below f32's range) weighs its leaves equally: its expected value is their
            // plain mean, as for a node neither side of which any row reached (`explain.rs`).
            if covers.is_some() && s.covers.iter().map(|&c| c as f64).sum::<f64>() <= 0.0 {
                s.covers.fill(1.0);
            }
            let layout = if matches!(tree.nodes[..], [IrNode::Oblivious { .. }]) { tree_layout::OBLIVIOUS } else { tree_layout::NODES };
            Ok(LaidOut { depth, layout, output: if vector { VECTOR_OUTPUT } else { tree.output }, s })
        })
        .collect();
    let mut laid = laid.into_iter().collect::<Result<Vec<_>, _>>()?;
    // Node trees deepest first; oblivious trees after them, in file order (see
    // `tree_layout`).
    laid.sort_by_key(|l| (l.layout, if l.layout == tree_layout::NODES { u32::MAX - l.depth } else { 0 }));
    let linear = laid.iter().any(|l| l.s.flags & flags::HAS_LINEAR_LEAVES != 0);
    // NaN-low columns (format 4): each `x < t` test whose NaN goes to its yes side reads its
    // input with NaN as −∞ (and −∞ as the lowest finite f32) instead: the same test for every
    // row, and `x < −∞` (NaN alone goes yes) becomes `x < −f32::MAX`. Zero-as-missing columns
    // (format 5) do the same for LightGBM's zero-as-missing tests, "missing" (zero or NaN) read
    // as −∞ or +∞ by the side it goes to, and the test becomes a plain `x < t`. Used when that
    // leaves no test on an input that must see NaN, so rows with missing values take the walk
    // without NaN tests; when the derived row fits the evaluator's stack buffer; and when the
    // model has enough tree levels to repay writing that row (2 or 4 × n_features values) for
    // every row: at least 4 levels per input (measured for NaN-low columns,
    // benches/shapes/README.md: 10 trees of depth 6 on 30 inputs ran 1.02-1.06x slower with
    // columns, 100 such trees 0.97x, 300 oblivious trees 0.78x).
    let sees_nan = |n: &Node| n.sees_nan(n_inputs as u32);
    let column_of = |n: &Node| -> Option<u32> {
        let (op, yes) = (n.flags & node::OP_MASK, n.flags & node::MISSING_YES != 0);
        // On a −∞ column, `x < −f32::MAX` would let −∞ (read as −f32::MAX) through.
        let above_lowest = f32::from_bits(n.payload) != -f32::MAX;
        match op {
            node::OP_LT if yes && above_lowest => Some(0),
            node::OP_LT_ZERO_MISSING if max_format >= 5 && yes && above_lowest => Some(1),
            node::OP_LT_ZERO_MISSING if max_format >= 5 && !yes => Some(2),
            _ => None,
        }
    };
    let mut seeing = laid.iter().flat_map(|l| &l.s.nodes).filter(|n| sees_nan(n)).peekable();
    let zero_columns = laid.iter().flat_map(|l| &l.s.nodes).any(|n| sees_nan(n) && column_of(n).is_some_and(|c| c > 0));
    let low_start = nan_low_start(n_inputs as u32, model.ctrs.len() as u32);
    let row = low_start as usize + n_inputs * if zero_columns { 3 } else { 1 };
    let levels: u64 = laid.iter().map(|l| l.depth as u64).sum();
    let columns = max_format >= 4
        && row <= MAX_CTR_ROW as usize
        && levels >= 4 * n_inputs as u64
        && seeing.peek().is_some()
        && seeing.all(|n| column_of(n).is_some());
    // Moves `n` to its column, if the model uses them; the header flag it then needs.
    let to_column = |n: &mut Node| -> u32 {
        if !(columns && sees_nan(n)) {
            return 0;
        }
        // `columns` holds: every test that sees NaN has a column.
        let Some(column) = column_of(n) else { return 0 };
        n.feature += (low_start + column * n_inputs as u32) as u16;
        n.flags = (n.flags & !node::OP_MASK) | node::OP_LT;
        if column < 2 && f32::from_bits(n.payload) == f32::NEG_INFINITY {
            n.payload = (-f32::MAX).to_bits();
        }
        if column == 0 { flags::NAN_LOW_COLUMNS } else { flags::ZERO_MISSING_COLUMNS }
    };
    let mut all = Sections::default();
    all.nodes.reserve(laid.iter().map(|l| l.s.nodes.len()).sum());
    all.leaves.reserve(laid.iter().map(|l| l.s.leaves.len()).sum());
    if linear {
        all.linear_leaves.reserve(all.leaves.capacity());
    }
    all.trees.reserve(laid.len());
    for LaidOut { depth, layout, output, s } in laid {
        let (node_base, leaf_base) = (all.nodes.len() as u32, all.leaves.len() as u32);
        let (split_base, word_base) = (all.cat_splits.len() as u32, all.cat_words.len() as u32);
        if linear && s.linear_leaves.len() != s.leaves.len() {
            // A tree of plain leaves in a linear model: each leaf is its constant.
            if layout == tree_layout::OBLIVIOUS {
                return Err(WriteError::Model("oblivious trees and linear leaves in one model".into()));
            }
            let at = all.linear_terms.len() as u32;
            all.linear_leaves.extend(s.leaves.iter().map(|&v| LinearLeaf { constant: v, term_offset: at, n_terms: 0 }));
        }
        for mut n in s.nodes {
            if layout == tree_layout::OBLIVIOUS && n.flags & node::LEAF == 0 {
                // Levels have no children: `left` stays 0.
                if matches!(n.flags & node::OP_MASK, node::OP_IN_SET | node::OP_MEMBER) {
                    n.payload += split_base;
                }
                all.flags |= to_column(&mut n);
                all.nodes.push(n);
                continue;
            }
            n.left += node_base;
            if n.flags & node::LEAF != 0 {
                n.payload = node::LEAF_NAN | (n.payload + leaf_base);
                n.left = n.left.wrapping_sub(1);
            } else if matches!(n.flags & node::OP_MASK, node::OP_IN_SET | node::OP_MEMBER) {
                n.payload += split_base;
            } else {
                all.flags |= to_column(&mut n);
            }
            all.nodes.push(n);
        }
        if all.leaves.len() + s.leaves.len() > MAX_LEAVES as usize {
            return Err(WriteError::Model(format!("more than {MAX_LEAVES} leaves")));
        }
        all.cat_splits.extend(s.cat_splits.into_iter().map(|c| CatSplit { word_offset: c.word_offset + word_base, ..c }));
        all.cat_words.extend(s.cat_words);
        let term_base = all.linear_terms.len() as u32;
        all.linear_leaves.extend(s.linear_leaves.into_iter().map(|l| LinearLeaf { term_offset: l.term_offset + term_base, ..l }));
        all.linear_terms.extend(s.linear_terms);
        all.leaves.extend(s.leaves);
        all.covers.extend(s.covers);
        all.flags |= s.flags;
        all.format_2_tests |= s.format_2_tests;
        all.trees.push(TreeSpec { root: node_base, end: all.nodes.len() as u32, output, depth: depth as u16, layout });
        if layout == tree_layout::OBLIVIOUS {
            all.flags |= flags::HAS_OBLIVIOUS;
        }
    }
    if all.flags & flags::ZERO_MISSING_COLUMNS != 0 {
        // Its zero-as-missing tests are plain comparisons on the columns now.
        let rare = |n: &Node| n.flags & node::LEAF == 0 && matches!(n.flags & node::OP_MASK, node::OP_EQ | node::OP_NE | node::OP_LT_ZERO_MISSING);
        if !all.nodes.iter().any(rare) {
            all.flags &= !flags::HAS_RARE_TESTS;
        }
    }
    if all.flags & flags::RICH_LEAVES == flags::RICH_LEAVES {
        return Err(WriteError::Model("vector leaves and linear leaves in one model".into()));
    }
    if all.flags & flags::HAS_OBLIVIOUS != 0 && all.flags & flags::RICH_LEAVES != 0 {
        return Err(WriteError::Model("oblivious trees and vector or linear leaves in one model".into()));
    }
    if all.nodes.len() > u32::MAX as usize / 2 {
        return Err(WriteError::Model("too many nodes".into()));
    }
    for (i, b) in model.base_score.iter().enumerate() {
        if !b.is_finite() {
            return Err(WriteError::Model(format!("base score {i} is not finite")));
        }
    }
    let (link, link_param) = match model.link {
        Link::Identity => (link::IDENTITY, 0.0),
        Link::Sigmoid { scale } => (link::SIGMOID, scale),
        Link::Softmax => (link::SOFTMAX, 0.0),
        Link::Exp => (link::EXP, 0.0),
        Link::Step => (link::STEP, 0.0),
    };
    let (aggregate, aggregate_divisor) = match model.aggregate {
        Aggregate::Sum => (aggregate::SUM, 1.0),
        Aggregate::Average { divisor } => (aggregate::AVERAGE, divisor),
    };
    if !(link_param.is_finite() && aggregate_divisor.is_finite() && aggregate_divisor > 0.0) {
        return Err(WriteError::Model("link scale or averaging divisor is not a positive finite number".into()));
    }
    let meta = Meta {
        source: model.source as u32,
        task: model.task as u32,
        link,
        aggregate,
        link_param,
        aggregate_divisor,
        n_features: model.features.len() as u32,
        n_outputs: n_outputs as u32,
        n_trees: all.trees.len() as u32,
        n_nodes: all.nodes.len() as u32,
        n_leaves: all.leaves.len() as u32,
        n_cat_splits: all.cat_splits.len() as u32,
        n_cat_words: all.cat_words.len() as u32,
        max_depth: all.trees.iter().map(|t| t.depth as u32).max().unwrap_or(0),
    };
    let strings = strings_section(model);
    let features: Vec<FeatureSpec> = model
        .features
        .iter()
        .map(|f| match f.kind {
            FeatureKind::Numeric => FeatureSpec { kind: FEATURE_NUMERIC, buckets: 0 },
            FeatureKind::Categorical { buckets } => FeatureSpec { kind: FEATURE_CATEGORICAL, buckets: buckets.max(1) },
        })
        .collect();
    let ctr = ctr_sections(model)?;
    if !model.ctrs.is_empty() {
        all.flags |= flags::HAS_CTRS;
    }
    let linear = all.flags & flags::HAS_LINEAR_LEAVES != 0;
    let (linear_leaves, linear_terms) = if linear { (&all.linear_leaves[..], &all.linear_terms[..]) } else { (&[][..], &[][..]) };
    let node_values = match node_covers {
        Some(c) => {
            all.flags |= flags::HAS_NODE_VALUES;
            let header = NodeValuesHeader { kind: c.kind as u32, reserved: 0 };
            [bytes_of(&header), bytemuck::cast_slice(&all.covers)].concat()
        }
        None => Vec::new(),
    };
    let drift_edges = reference.map(|r| r.edges_section(n_inputs, n_outputs)).transpose()?.unwrap_or_default();
    let drift_shares: &[f32] = reference.map_or(&[], |r| &r.shares);
    if reference.is_some() {
        all.flags |= flags::HAS_DRIFT_REFERENCE;
    }
    if !model.ua_fingerprints.is_empty() {
        edgescore_core::features::ua_fingerprints::check(&model.ua_fingerprints)
            .map_err(|(i, reason)| WriteError::Model(format!("UA fingerprint table, entry {i}: {reason}")))?;
        all.flags |= flags::HAS_UA_FINGERPRINTS;
    }
    let sections: [&[u8]; 19] = [
        bytes_of(&meta),
        &strings,
        bytemuck::cast_slice(&features),
        bytemuck::cast_slice(&model.base_score),
        bytemuck::cast_slice(&all.trees),
        bytemuck::cast_slice(&all.nodes),
        bytemuck::cast_slice(&all.leaves),
        bytemuck::cast_slice(&all.cat_splits),
        bytemuck::cast_slice(&all.cat_words),
        bytemuck::cast_slice(linear_leaves),
        bytemuck::cast_slice(linear_terms),
        bytemuck::cast_slice(&ctr.features),
        bytemuck::cast_slice(&ctr.parts),
        bytemuck::cast_slice(&ctr.keys),
        bytemuck::cast_slice(&ctr.values),
        &node_values,
        &drift_edges,
        bytemuck::cast_slice(drift_shares),
        bytemuck::cast_slice(&model.ua_fingerprints),
    ];
    // The lowest format that holds the model (see `layout::FORMAT_VERSION`).
    let version = if all.flags & flags::FORMAT_7 != 0 {
        7
    } else if all.flags & flags::FORMAT_6 != 0 {
        6
    } else if all.flags & flags::FORMAT_5 != 0 {
        5
    } else if all.flags & flags::FORMAT_4 != 0 {
        4
    } else if all.flags & flags::FORMAT_3 != 0 {
        3
    } else if all.flags & flags::FORMAT_2 != 0 || all.format_2_tests || link > link::EXP {
        2
    } else {
        OLDEST_FORMAT_VERSION
    };
    if version > max_format {
        let needs = match version {
            7 => "UA fingerprint tables (--ua-fingerprints)",
            6 => "a drift reference (--reference)",
            5 => "zero-as-missing columns",
            4 => "NaN-low columns",
            3 => "oblivious trees",
            _ => "vector or linear leaves, CTR features, membership tests or the step link",
        };
        return Err(WriteError::Model(format!("{needs} need format {version}, above the highest format asked for ({max_format})")));
    }
    Ok(assemble(all.flags, version, &sections[..section_count(version)]))
}

#[derive(Default)]
struct CtrSections {
    features: Vec<CtrFeature>,
    parts: Vec<CtrPart>,
    keys: Vec<u64>,
    values: Vec<f32>,
}

fn ctr_sections(model: &ModelIr) -> Result<CtrSections, WriteError> {
    let mut s = CtrSections::default();
    // A model's tables can hold millions of keys: grow each section once.
    let n_keys = model.ctrs.iter().map(|c| c.table.len()).sum();
    s.keys.reserve_exact(n_keys);
    s.values.reserve_exact(n_keys);
    s.parts.reserve_exact(model.ctrs.iter().map(|c| c.parts.len()).sum());
    s.features.reserve_exact(model.ctrs.len());
    for (i, c) in model.ctrs.iter().enumerate() {
        let err = |reason: &str| WriteError::Model(format!("CTR feature {i}: {reason}"));
        if c.parts.is_empty() {
            return Err(err("no projection parts"));
        }
        if c.parts.iter().any(|p| p.feature as usize >= model.features.len() || p.kind > ctr_part::ONE_HOT) {
            return Err(err("a part on a feature out of range or of unknown kind"));
        }
        if c.parts.iter().any(|p| matches!(p.kind, ctr_part::ABOVE | ctr_part::ABOVE_NAN_TRUE) && f32::from_bits(p.value).is_nan()) {
            return Err(err("a float part with a NaN border"));
        }
        if c.table.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(err("table keys not strictly ascending"));
        }
        if !c.empty_value.is_finite() || c.table.iter().any(|e| !e.1.is_finite()) {
            return Err(err("a value is not finite"));
        }
        s.features.push(CtrFeature {
            part_offset: s.parts.len() as u32,
            n_parts: c.parts.len() as u32,
            key_offset: s.keys.len() as u32,
            n_keys: c.table.len() as u32,
            empty_value: c.empty_value,
            reserved: 0,
        });
        s.parts.extend(&c.parts);
        s.keys.extend(c.table.iter().map(|e| e.0));
        s.values.extend(c.table.iter().map(|e| e.1));
    }
    Ok(s)
}

fn strings_section(model: &ModelIr) -> Vec<u8> {
    let mut entries: Vec<&str> = vec![&model.name, &model.version, &model.objective];
    entries.extend(model.features.iter().map(|f| f.name.as_str()));
    let mut out = Vec::new();
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    let mut end = 0u32;
    for e in &entries {
        end += e.len() as u32;
        out.extend_from_slice(&end.to_le_bytes());
    }
    for e in &entries {
        out.extend_from_slice(e.as_bytes());
    }
    out
}

fn align_up(n: usize) -> usize {
    n.div_ceil(SECTION_ALIGN) * SECTION_ALIGN
}

/// Header + section table + sections (each 16-byte aligned), then the checksum.
fn assemble(header_flags: u32, version: u32, sections: &[&[u8]]) -> Vec<u8> {
    let table_len = sections.len() * core::mem::size_of::<SectionEntry>();
    let mut offset = align_up(HEADER_LEN + table_len);
    let mut entries = Vec::with_capacity(sections.len());
    for (kind, body) in SECTION_KINDS.iter().zip(sections) {
        entries.push(SectionEntry { kind: *kind as u32, reserved: 0, offset: offset as u64, len: body.len() as u64 });
        offset = align_up(offset + body.len());
    }
    let file_len = offset;
    let header = Header {
        magic: MAGIC,
        format_version: version,
        flags: header_flags,
        file_len: file_len as u64,
        checksum: 0,
        section_count: sections.len() as u32,
        reserved: [0; 7],
    };
    let mut out = vec![0u8; file_len];
    out[..HEADER_LEN].copy_from_slice(bytes_of(&header));
    out[HEADER_LEN..HEADER_LEN + table_len].copy_from_slice(bytemuck::cast_slice(&entries));
    for (e, body) in entries.iter().zip(sections) {
        out[e.offset as usize..e.offset as usize + body.len()].copy_from_slice(body);
    }
    let sum = checksum(&out);
    out[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 8].copy_from_slice(&sum.to_le_bytes());
    out
}
