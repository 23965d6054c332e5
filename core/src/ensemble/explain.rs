//! Per-request reasons: path attribution ("Saabas"). At each split on the path a row takes,
//! the change in the node's expected value is credited to the split's feature; a tree's
//! credits add up to its leaf minus its root's expected value, so a row's add up to its
//! margin minus the model's expected value.
//!
//! Everything that depends on the model alone is done here, once, at load ([`Explainer`]):
//! every node's expected value (the cover-weighted mean of its leaves, from NODE_VALUES), and
//! for every leaf the (feature, credit) pairs of its path, merged per feature. Explaining a row
//! ([`TreeEnsemble::explain`]) walks it and adds up its leaves' pairs: at most one pair per
//! distinct feature on each path, into the caller's buffer, without allocating.
//!
//! What is credited to which feature: a split on a NaN-low or zero-as-missing column to its
//! input; a split on a CatBoost CTR feature to the CTR's source features, in equal shares; a
//! linear leaf's `coeff * x` terms to their features, and the difference between its constant
//! and its plain value (the node values use the plain value) to the last split on its path.

use super::TreeEnsemble;
use crate::artifact::layout::{node, tree_layout, CtrPart, Meta, Node, NodeValuesHeader, TreeSpec, VECTOR_OUTPUT};
use crate::artifact::CoverKind;

/// One credit of a leaf's path: `delta` (already divided by an averaging model's divisor) to
/// input `feature` of `output`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Credit {
    pub feature: u32,
    pub output: u32,
    pub delta: f64,
}

/// What a row's explanation needs besides the walk, derived from the model at load.
#[derive(Clone, Debug)]
pub struct Explainer {
    /// Per output: the base score plus each tree's root expected value (over the divisor).
    expected: Vec<f64>,
    /// Leaf `i`'s credits (by LEAVES index; a vector leaf's at its first value, an oblivious
    /// tree's per table entry) are `credits[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
    credits: Vec<Credit>,
    /// Linear models: per LEAVES index, the input credited with `constant − value` (the last
    /// split on the leaf's path; `u32::MAX` for a lone leaf: the expected value takes it) and
    /// the leaf's output.
    linear_credit: Vec<[u32; 2]>,
}

/// A NODES split's children: `left` (yes) and `left + 1` (no).
fn children(n: &Node) -> [usize; 2] {
    [n.left as usize, n.left as usize + 1]
}

impl Explainer {
    /// From a validated model whose header has `HAS_NODE_VALUES`; `section` is NODE_VALUES.
    pub(crate) fn build(e: &TreeEnsemble, section: &[u8]) -> Option<Explainer> {
        let head = core::mem::size_of::<NodeValuesHeader>();
        let header: NodeValuesHeader = bytemuck::pod_read_unaligned(section.get(..head)?);
        CoverKind::from_u32(header.kind)?;
        let covers: &[f32] = bytemuck::try_cast_slice(&section[head..]).ok()?;
        let meta = e.meta;
        let n_out = meta.n_outputs as usize;
        let divisor = if meta.aggregate == crate::artifact::layout::aggregate::AVERAGE { meta.aggregate_divisor } else { 1.0 };
        let mut expected: Vec<f64> = e.base.to_vec();
        let mut leaves = LeafCredits::new(e.leaves.len());
        let linear = !e.linear_leaves.is_empty();
        let mut linear_credit = if linear { vec![[u32::MAX, 0]; e.leaves.len()] } else { Vec::new() };
        let credit = SplitInputs { e };
        for tree in e.trees {
            if tree.layout == tree_layout::OBLIVIOUS {
                oblivious(e, tree, covers, divisor, &credit, &mut expected, &mut leaves);
            } else {
                node_tree(e, &meta, tree, covers, divisor, &credit, &mut expected, &mut leaves, &mut linear_credit);
            }
        }
        let (starts, credits) = leaves.in_leaf_order();
        debug_assert_eq!(expected.len(), n_out);
        Some(Explainer { expected, starts, credits, linear_credit })
    }

    /// Per output, the model's expected margin: what a row's credits are measured from.
    pub fn expected(&self) -> &[f64] {
        &self.expected
    }

    /// The credits of the leaf at LEAVES index `leaf`.
    pub fn credits(&self, leaf: usize) -> &[Credit] {
        let (a, b) = (self.starts[leaf] as usize, self.starts[leaf + 1] as usize);
        &self.credits[a..b]
    }

    /// Memory held, for `inspect`.
    pub fn bytes(&self) -> usize {
        core::mem::size_of_val(&self.expected[..])
            + core::mem::size_of_val(&self.starts[..])
            + core::mem::size_of_val(&self.credits[..])
            + core::mem::size_of_val(&self.linear_credit[..])
    }
}

/// Which inputs a split's credit goes to, in equal shares (see the module's comment).
struct SplitInputs<'a> {
    e: &'a TreeEnsemble<'a>,
}

impl SplitInputs<'_> {
    /// Calls `each(input, share)` for the inputs a split on `split_feature` credits.
    fn inputs(&self, split_feature: u16, mut each: impl FnMut(u32, f64)) {
        let (f, nf) = (self.e.tested_feature(split_feature), self.e.n_features());
        if f < nf {
            return each(f as u32, 1.0);
        }
        let sources = ctr_sources(self.e.ctr_parts(f - nf));
        let share = 1.0 / sources.len().max(1) as f64;
        sources.into_iter().for_each(|s| each(s, share));
    }
}

/// The distinct input features a CTR feature's projection (its `parts`) reads, ascending:
/// those its credit is shared among.
pub fn ctr_sources(parts: &[CtrPart]) -> Vec<u32> {
    let mut sources: Vec<u32> = parts.iter().map(|p| p.feature).collect();
    sources.sort_unstable();
    sources.dedup();
    sources
}

/// Every leaf's credits while the trees are read: appended leaf by leaf into one buffer, not
/// one allocation per leaf (a large model has hundreds of thousands), then laid out in LEAVES
/// order.
struct LeafCredits {
    /// Per LEAVES index, (start, len) in `all`.
    spans: Vec<(u32, u32)>,
    all: Vec<Credit>,
    /// The path being read, leaf upwards: each split's inputs (input, share, the split's
    /// position) and its change per output (`deltas[position * width + o]`).
    inputs: Vec<(u32, f64, u32)>,
    deltas: Vec<f64>,
    splits: u32,
}

impl LeafCredits {
    fn new(n_leaves: usize) -> LeafCredits {
        LeafCredits { spans: vec![(0, 0); n_leaves], all: Vec::new(), inputs: Vec::new(), deltas: Vec::new(), splits: 0 }
    }

    /// The next split up the path: on `split_feature`, changing each output by `deltas`.
    fn push(&mut self, credit: &SplitInputs, split_feature: u16, deltas: impl Iterator<Item = f64>) {
        let at = self.splits;
        credit.inputs(split_feature, |input, share| self.inputs.push((input, share, at)));
        self.deltas.extend(deltas);
        self.splits += 1;
    }

    /// The path read is leaf `leaf`'s: its credits per (output, input), in that order, each
    /// adding its splits' parts leaf upwards. Sorting the inputs (a few per split), not the
    /// credits, keeps a path of many outputs linear in its length (256 outputs × depth 20).
    fn end_leaf(&mut self, leaf: usize, width: usize, output: impl Fn(usize) -> u32) {
        self.inputs.sort_by_key(|&(input, _, _)| input); // stable: split order within an input
        let start = self.all.len();
        for o in 0..width {
            for run in self.inputs.chunk_by(|a, b| a.0 == b.0) {
                let part = |&(_, share, at): &(u32, f64, u32)| self.deltas[at as usize * width + o] * share;
                let delta = run[1..].iter().fold(part(&run[0]), |sum, p| sum + part(p));
                self.all.push(Credit { feature: run[0].0, output: output(o), delta });
            }
        }
        self.spans[leaf] = (start as u32, (self.all.len() - start) as u32);
        self.inputs.clear();
        self.deltas.clear();
        self.splits = 0;
    }

    /// (starts, credits): leaf `i`'s credits are `credits[starts[i]..starts[i + 1]]`.
    fn in_leaf_order(self) -> (Vec<u32>, Vec<Credit>) {
        let mut starts = Vec::with_capacity(self.spans.len() + 1);
        let mut credits = Vec::with_capacity(self.all.len());
        for &(start, len) in &self.spans {
            starts.push(credits.len() as u32);
            credits.extend_from_slice(&self.all[start as usize..(start + len) as usize]);
        }
        starts.push(credits.len() as u32);
        (starts, credits)
    }
}

/// A NODES tree: expected values bottom-up (children come after their parents), then each
/// leaf's path top-down.
#[allow(clippy::too_many_arguments)]
fn node_tree(
    e: &TreeEnsemble, meta: &Meta, tree: &TreeSpec, covers: &[f32], divisor: f64, credit: &SplitInputs, expected: &mut [f64],
    leaves: &mut LeafCredits, linear_credit: &mut [[u32; 2]],
) {
    let (root, end) = (tree.root as usize, tree.end as usize);
    let vector = tree.output == VECTOR_OUTPUT;
    let width = if vector { meta.n_outputs as usize } else { 1 };
    let n = end - root;
    let mut weight = vec![0f64; n];
    let mut value = vec![0f64; n * width];
    let mut parent = vec![usize::MAX; n];
    for i in (0..n).rev() {
        let nd = e.nodes[root + i];
        if nd.flags & node::LEAF != 0 {
            let first = (nd.payload & node::LEAF_INDEX_MASK) as usize;
            weight[i] = covers[first] as f64;
            value[i * width..(i + 1) * width].copy_from_slice(&e.leaves[first..first + width]);
            continue;
        }
        let [a, b] = children(&nd).map(|c| c - root);
        parent[a] = i;
        parent[b] = i;
        weight[i] = weight[a] + weight[b];
        for o in 0..width {
            value[i * width + o] = if weight[i] > 0.0 {
                (weight[a] * value[a * width + o] + weight[b] * value[b * width + o]) / weight[i]
            } else {
                // No training row reached either side: their plain mean.
                (value[a * width + o] + value[b * width + o]) / 2.0
            };
        }
    }
    let out_of = |o: usize| if vector { o as u32 } else { tree.output };
    for o in 0..width {
        expected[out_of(o) as usize] += value[o] / divisor;
    }
    for i in 0..n {
        let nd = e.nodes[root + i];
        if nd.flags & node::LEAF == 0 {
            continue;
        }
        let mut child = i;
        let mut last_split = None;
        while parent[child] != usize::MAX {
            let p = parent[child];
            let split = e.nodes[root + p].feature;
            last_split.get_or_insert(split);
            leaves.push(credit, split, (0..width).map(|o| (value[child * width + o] - value[p * width + o]) / divisor));
            child = p;
        }
        let first = (nd.payload & node::LEAF_INDEX_MASK) as usize;
        if !linear_credit.is_empty() {
            let mut to = None;
            if let Some(split) = last_split {
                credit.inputs(split, |input, _| _ = to.get_or_insert(input));
            }
            linear_credit[first] = [to.unwrap_or(u32::MAX), tree.output];
        }
        leaves.end_leaf(first, width, out_of);
    }
}

/// An oblivious tree of depth d, read as CatBoost reads it (its own SHAP values agree): the
/// last level at the root, so the node after k levels holds the leaves whose high k index
/// bits the row's tests of levels d − 1 … d − k set; its expected value is theirs, weighted by
/// their covers.
fn oblivious(e: &TreeEnsemble, tree: &TreeSpec, covers: &[f32], divisor: f64, credit: &SplitInputs, expected: &mut [f64], leaves: &mut LeafCredits) {
    let (root, depth) = (tree.root as usize, tree.depth as usize);
    let first = (e.nodes[root + depth].payload & node::LEAF_INDEX_MASK) as usize;
    let size = 1usize << depth;
    // level[k][b]: (cover, expected value) of the node after k levels, whose leaves `i` have
    // `i >> (depth - k) == b`.
    let mut level: Vec<Vec<(f64, f64)>> = vec![Vec::new(); depth + 1];
    level[depth] = (0..size).map(|i| (covers[first + i] as f64, e.leaves[first + i])).collect();
    for k in (0..depth).rev() {
        level[k] = (0..1usize << k)
            .map(|b| {
                let (lo, hi) = (level[k + 1][2 * b], level[k + 1][2 * b + 1]);
                let w = lo.0 + hi.0;
                (w, if w > 0.0 { (lo.0 * lo.1 + hi.0 * hi.1) / w } else { (lo.1 + hi.1) / 2.0 })
            })
            .collect();
    }
    expected[tree.output as usize] += level[0][0].1 / divisor;
    for i in 0..size {
        for k in 0..depth {
            let delta = (level[k + 1][i >> (depth - k - 1)].1 - level[k][i >> (depth - k)].1) / divisor;
            leaves.push(credit, e.nodes[root + depth - 1 - k].feature, [delta].into_iter());
        }
        leaves.end_leaf(first + i, 1, |_| tree.output);
    }
}

/// Why a row could not be explained. Carries only numbers: building it must not allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    #[error("the model has no node values (compiled without NODE_VALUES), or they were not loaded (Model::with_explainer)")]
    NoNodeValues,
    #[error(transparent)]
    Score(#[from] super::ScoreError),
}

impl<'a> TreeEnsemble<'a> {
    /// What explanations need, once `Model::with_explainer` built it from the node values.
    pub fn explainer(&self) -> Option<&'a Explainer> {
        self.explainer
    }

    /// The leaves' covers (NODE_VALUES), one per LEAVES value, and what they count, where the
    /// model has them.
    pub fn leaf_covers(&self) -> Option<(crate::artifact::CoverKind, &'a [f32])> {
        self.cover_kind.map(|k| (k, self.covers))
    }

    /// Every LEAVES value (a node's payload indexes them: `node::LEAF_INDEX_MASK`).
    pub fn leaf_values(&self) -> &'a [f64] {
        self.leaves
    }

    /// LEAVES entry `index`'s linear leaf, where the model has linear leaves: its constant and
    /// terms (its plain value is `leaf_values()[index]`).
    pub fn linear_leaf(&self, index: usize) -> Option<(f64, &'a [crate::artifact::layout::LinearTerm])> {
        let leaf = self.linear_leaves.get(index)?;
        Some((leaf.constant, &self.linear_terms[leaf.term_offset as usize..(leaf.term_offset + leaf.n_terms) as usize]))
    }

    /// Whether node `n`, a split of this model, sends `row` (from [`split_row`](Self::split_row))
    /// to its yes side. For offline tools (`edgescore explain`).
    pub fn goes_yes(&self, n: Node, row: &[f32]) -> bool {
        self.holds::<true, true, true>(n, row)
    }

    /// The row this model's splits read: the inputs, then its CTR features and derived
    /// columns. Allocates: for offline tools.
    pub fn split_row(&self, x: &[f32]) -> Vec<f32> {
        // The derived row reads the first n_features values.
        assert!(x.len() >= self.n_features(), "a row of {} values for {} features", x.len(), self.n_features());
        self.with_row(x, |row| row.to_vec())
    }

    /// How many values [`explain`](Self::explain) writes: per output, one per input feature
    /// then the expected value.
    pub fn explain_len(&self) -> usize {
        self.n_outputs() * (self.n_features() + 1)
    }

    /// Path attribution of one row: `out[o * (n_features + 1) + f]` receives input `f`'s
    /// credit for output `o`'s margin, `out[o * (n_features + 1) + n_features]` the expected
    /// margin; each output's values add up to its margin (as [`margins`](Self::margins)
    /// computes it, to rounding). Walks the trees (the scoring walk keeps no leaves: a request
    /// that is not explained pays nothing) and adds each reached leaf's credits. Allocates
    /// nothing.
    pub fn explain(&self, features: &[f32], out: &mut [f64]) -> Result<(), ExplainError> {
        let ex = self.explain_start(features, out)?;
        let width = self.n_features() + 1;
        self.with_row(features, |row| {
            self.for_each_leaf(row, |_, index| {
                add_credits(ex.credits(index), width, out);
                if !ex.linear_credit.is_empty() {
                    self.credit_linear(ex, index, features, width, out);
                }
            })
        });
        Ok(())
    }

    /// The checks an explanation makes, and `out` reset to the expected values.
    fn explain_start(&self, features: &[f32], out: &mut [f64]) -> Result<&'a Explainer, ExplainError> {
        let ex = self.explainer.ok_or(ExplainError::NoNodeValues)?;
        let nf = self.n_features();
        if features.len() < nf {
            return Err(super::ScoreError::Features { got: features.len(), need: nf }.into());
        }
        let need = self.explain_len();
        if out.len() < need {
            return Err(super::ScoreError::Outputs { got: out.len(), need }.into());
        }
        out[..need].fill(0.0);
        for (o, &v) in ex.expected.iter().enumerate() {
            out[o * (nf + 1) + nf] = v;
        }
        Ok(ex)
    }

    /// Calls `leaf(t, index)` for every tree `t`, in TREES order, with the LEAVES index of the
    /// leaf `row` (the split row, `with_row`) reaches: the walked trees in lockstep groups (as
    /// scoring walks them), then the oblivious ones.
    #[inline(always)]
    fn for_each_leaf(&self, row: &[f32], leaf: impl FnMut(usize, usize)) {
        let nan = self.nan_walk && super::any_nan(&row[..self.n_features()]);
        let general = self.flags & (crate::artifact::layout::flags::HAS_CATEGORICAL | crate::artifact::layout::flags::HAS_RARE_TESTS) != 0;
        match (general, nan) {
            (false, false) => self.leaves_walk::<false, false, false>(row, leaf),
            (false, true) => self.leaves_walk::<false, false, true>(row, leaf),
            (true, false) => self.leaves_walk::<true, true, false>(row, leaf),
            (true, true) => self.leaves_walk::<true, true, true>(row, leaf),
        }
    }

    #[inline(always)]
    fn leaves_walk<const CAT: bool, const RARE: bool, const NAN: bool>(&self, row: &[f32], mut leaf: impl FnMut(usize, usize)) {
        let (walked, oblivious) = self.trees.split_at(self.n_walked);
        // `Walk::build` made one start per chunk of LANES trees, the last possibly shorter.
        for (g, (group, start)) in walked.chunks(super::LANES).zip(self.walk_groups).enumerate() {
            let roots = start.roots.map(|r| r as usize);
            let at = self.walk_group::<CAT, RARE, NAN, { super::LANES }>(roots, start.steps, start.first_check.min(start.steps), row);
            for (k, (&at, _)) in at.iter().zip(group).enumerate() {
                leaf(g * super::LANES + k, (self.walk_node(at).payload & node::LEAF_INDEX_MASK) as usize);
            }
        }
        for (k, tree) in oblivious.iter().enumerate() {
            let (root, depth) = (tree.root as usize, tree.depth as usize);
            let mut index = 0usize;
            for level in 0..depth {
                index |= (self.holds::<CAT, RARE, NAN>(self.nodes[root + level], row) as usize) << level;
            }
            leaf(self.n_walked + k, (self.nodes[root + depth].payload & node::LEAF_INDEX_MASK) as usize + index);
        }
    }

    /// A linear leaf's terms to their features, and its constant's difference from its plain
    /// value to the last split on its path (nothing where a NaN makes it its plain value).
    fn credit_linear(&self, ex: &Explainer, index: usize, x: &[f32], width: usize, out: &mut [f64]) {
        let leaf = self.linear_leaves[index];
        let terms = &self.linear_terms[leaf.term_offset as usize..(leaf.term_offset + leaf.n_terms) as usize];
        if terms.iter().any(|t| x[t.feature as usize].is_nan()) {
            return;
        }
        let [to, output] = ex.linear_credit[index];
        let output = output as usize;
        let divisor = if self.meta.aggregate == crate::artifact::layout::aggregate::AVERAGE { self.meta.aggregate_divisor } else { 1.0 };
        let nf = self.n_features();
        let rest = (leaf.constant - self.leaves[index]) / divisor;
        out[output * width + if to == u32::MAX { nf } else { to as usize }] += rest;
        for t in terms {
            out[output * width + t.feature as usize] += x[t.feature as usize] as f64 * t.coeff / divisor;
        }
    }
}

#[inline(always)]
fn add_credits(credits: &[Credit], width: usize, out: &mut [f64]) {
    for c in credits {
        out[c.output as usize * width + c.feature as usize] += c.delta;
    }
}

/// The `k` largest of `values` by magnitude (ties: the lower index first), as (index, value),
/// into `top`; returns how many (at most `k`, `top.len()` and the count of non-zero values).
/// Without allocating.
pub fn top_by_magnitude(values: &[f64], k: usize, top: &mut [(u32, f64)]) -> usize {
    let k = k.min(top.len());
    let mut n = 0usize;
    for (i, &v) in values.iter().enumerate() {
        if v == 0.0 || v.is_nan() {
            continue;
        }
        // Insertion into the sorted prefix top[..n].
        let mut at = n.min(k);
        while at > 0 && top[at - 1].1.abs() < v.abs() {
            at -= 1;
        }
        if at >= k {
            continue;
        }
        let end = (n + 1).min(k);
        for j in (at + 1..end).rev() {
            top[j] = top[j - 1];
        }
        top[at] = (i as u32, v);
        n = end;
    }
    n
}

#[cfg(test)]
mod tests {
    #[test]
    fn top_by_magnitude_keeps_the_largest_in_order() {
        let mut top = [(0u32, 0f64); 3];
        let n = super::top_by_magnitude(&[0.5, -2.0, 0.0, 1.0, -0.25, 3.0], 3, &mut top);
        assert_eq!(&top[..n], &[(5, 3.0), (1, -2.0), (3, 1.0)]);
        let n = super::top_by_magnitude(&[0.0, 0.5], 3, &mut top);
        assert_eq!(&top[..n], &[(1, 0.5)]);
        let n = super::top_by_magnitude(&[1.0, -1.0, 1.0], 2, &mut top);
        assert_eq!(&top[..n], &[(0, 1.0), (1, -1.0)]);
    }
}
