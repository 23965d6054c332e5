//! The evaluator: walks a validated [`TreeEnsemble`] for one row, in place, without allocating.
//!
//! Trees are walked in groups of [`LANES`] in lockstep: each step advances every tree of the
//! group by one level, branch-free (the child is `left` or the node after it, selected), so the
//! CPU overlaps the node loads of independent trees instead of waiting on one dependent chain
//! and mispredicting its branches. A tree that reaches its leaf early stays there (see
//! `layout::Node`). The walk reads [`Model`]'s copy of the nodes, addressed by byte offset
//! (`walk_nodes`), not the artifact's, addressed by index. Rows far out on every feature take
//! QuickScorer's bitvectors instead, where [`Model`] built them (`bitvectors.rs`): the same
//! leaves, added in the same order.

use crate::artifact::layout::{node, CatSplit, CtrFeature, CtrPart, DriftSeries, FeatureSpec, LinearLeaf, LinearTerm, Meta, Node, TreeSpec};
use crate::artifact::layout::{MAX_CTR_ROW, VECTOR_OUTPUT, ZERO_THRESHOLD};
use crate::artifact::layout::{aggregate, flags, link, row_len, UaFingerprint, STRINGS_FIXED};
use crate::artifact::{Link, SourceFormat, Task};
use core::mem::MaybeUninit;

mod bitvectors;
pub use bitvectors::BitvectorsSize;
pub mod explain;
pub mod ctr;
mod validate;
pub use validate::Model;
mod walk;
use walk::{GroupStart, NODE_BYTES};

/// Why a row could not be scored. Carries only numbers: building it must not allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ScoreError {
    #[error("feature vector has {got} values, the model needs {need}")]
    Features { got: usize, need: usize },
    #[error("output buffer has {got} slots, the model writes {need}")]
    Outputs { got: usize, need: usize },
    #[error("no model at index {0}")]
    NoSuchModel(usize),
}


/// Trees walked together; 8 measured best on x86_64 (see `benches/README.md`).
pub const LANES: usize = 8;

/// A validated model, borrowing the artifact bytes and what [`Model`] derived from them at
/// load. Built by [`Model::ensemble`].
#[derive(Clone, Copy)]
pub struct TreeEnsemble<'a> {
    pub(crate) meta: Meta,
    pub(crate) flags: u32,
    pub(crate) checksum: u64,
    /// Trees `..n_walked` are walked node by node, the rest are oblivious.
    pub(crate) n_walked: usize,
    /// Whether rows with a NaN input need the NaN-aware walk (validation decides; see
    /// `layout::nan_low_start`).
    pub(crate) nan_walk: bool,
    /// QuickScorer's tables for the walked trees, where they qualify (built by [`Model`]).
    pub(crate) bitvectors: Option<&'a bitvectors::Bitvectors>,
    pub(crate) len: usize,
    pub(crate) strings: &'a [u8],
    pub(crate) features: &'a [FeatureSpec],
    pub(crate) base: &'a [f64],
    pub(crate) trees: &'a [TreeSpec],
    pub(crate) nodes: &'a [Node],
    /// The nodes as the walk reads them (`walk::Walk::nodes`): node `i` at byte offset
    /// `node_offset(i)`, each `left` its left child's byte offset.
    pub(crate) walk_nodes: &'a [Node],
    /// Where each lockstep group starts (`walk::Walk::groups`).
    pub(crate) walk_groups: &'a [GroupStart],
    /// The category bitsets behind a word of zeros (`walk::Walk::cat_words`).
    pub(crate) walk_cat_words: &'a [u32],
    pub(crate) leaves: &'a [f64],
    pub(crate) cat_splits: &'a [CatSplit],
    pub(crate) cat_words: &'a [u32],
    pub(crate) linear_leaves: &'a [LinearLeaf],
    pub(crate) linear_terms: &'a [LinearTerm],
    pub(crate) ctr_features: &'a [CtrFeature],
    pub(crate) ctr_parts: &'a [CtrPart],
    pub(crate) ctr_keys: &'a [u64],
    pub(crate) ctr_values: &'a [f32],
    /// The drift reference (empty without `HAS_DRIFT_REFERENCE`; see `crate::drift`).
    pub(crate) drift_series: &'a [DriftSeries],
    pub(crate) drift_edges: &'a [f32],
    pub(crate) drift_shares: &'a [f32],
    /// The UA fingerprint table (empty without `HAS_UA_FINGERPRINTS`).
    pub(crate) ua_fingerprints: &'a [UaFingerprint],
    /// Path attribution's tables, once `Model::with_explainer` built them.
    pub(crate) explainer: Option<&'a explain::Explainer>,
    /// NODE_VALUES' covers, one per LEAVES value (empty without), and what they count.
    pub(crate) covers: &'a [f32],
    pub(crate) cover_kind: Option<crate::artifact::CoverKind>,
}

impl<'a> TreeEnsemble<'a> {
    pub fn n_features(&self) -> usize {
        self.meta.n_features as usize
    }
    pub fn n_outputs(&self) -> usize {
        self.meta.n_outputs as usize
    }
    pub fn meta(&self) -> &Meta {
        &self.meta
    }
    pub fn header_flags(&self) -> u32 {
        self.flags
    }
    pub fn checksum(&self) -> u64 {
        self.checksum
    }
    /// Whether rows far out on every feature are scored through QuickScorer's bitvectors
    /// (see `bitvectors.rs`) rather than by the lockstep walk.
    pub fn uses_bitvectors(&self) -> bool {
        self.bitvectors.is_some()
    }
    /// The bitvectors' tests and memory, where the model has them.
    pub fn bitvectors_size(&self) -> Option<BitvectorsSize> {
        self.bitvectors.map(|b| b.size())
    }
    pub fn size_bytes(&self) -> usize {
        self.len
    }
    /// The memory of the walk's own copy of the nodes, its group starts and its copy of the
    /// category bitsets (`walk.rs`), made at load: in each loaded copy, on top of the
    /// artifact's bytes.
    pub fn walk_bytes(&self) -> usize {
        core::mem::size_of_val(self.walk_nodes) + core::mem::size_of_val(self.walk_groups) + core::mem::size_of_val(self.walk_cat_words)
    }
    pub fn trees(&self) -> &'a [TreeSpec] {
        self.trees
    }
    pub fn nodes(&self) -> &'a [Node] {
        self.nodes
    }
    pub fn features(&self) -> &'a [FeatureSpec] {
        self.features
    }
    pub fn base_score(&self) -> &'a [f64] {
        self.base
    }
    pub fn cat_splits(&self) -> &'a [CatSplit] {
        self.cat_splits
    }
    pub fn task(&self) -> Task {
        match self.meta.task {
            1 => Task::Regression,
            2 => Task::BinaryClassification,
            _ => Task::MulticlassClassification,
        }
    }
    pub fn source(&self) -> SourceFormat {
        match self.meta.source {
            1 => SourceFormat::XGBoost,
            2 => SourceFormat::LightGBM,
            3 => SourceFormat::CatBoost,
            _ => SourceFormat::Onnx,
        }
    }

    /// Entry `i` of the string table (validated UTF-8 at load).
    fn string(&self, i: usize) -> &'a str {
        let s = self.strings;
        let word = |k: usize| u32::from_le_bytes([s[4 * k], s[4 * k + 1], s[4 * k + 2], s[4 * k + 3]]) as usize;
        let count = word(0);
        let data = &s[4 + 4 * count..];
        let start = if i == 0 { 0 } else { word(i) };
        core::str::from_utf8(&data[start..word(i + 1)]).unwrap_or("")
    }
    pub fn name(&self) -> &'a str {
        self.string(0)
    }
    pub fn version(&self) -> &'a str {
        self.string(1)
    }
    pub fn objective(&self) -> &'a str {
        self.string(2)
    }
    pub fn feature_name(&self, i: usize) -> &'a str {
        self.string(STRINGS_FIXED + i)
    }

    /// Scores one row: `out[..n_outputs]` receives the model's outputs (probabilities for
    /// classifiers, values for regressors). NaN in `features` is a missing value.
    pub fn score(&self, features: &[f32], out: &mut [f32]) -> Result<(), ScoreError> {
        self.with_outputs(features, out.len(), true, |i, v| out[i] = v as f32)
    }

    /// As [`score`](Self::score), in f64 (the evaluator accumulates in f64 throughout).
    pub fn score_f64(&self, features: &[f32], out: &mut [f64]) -> Result<(), ScoreError> {
        self.with_outputs(features, out.len(), true, |i, v| out[i] = v)
    }

    /// The margins before the link function (XGBoost `output_margin`, LightGBM `raw_score`).
    pub fn margins(&self, features: &[f32], out: &mut [f64]) -> Result<(), ScoreError> {
        self.with_outputs(features, out.len(), false, |i, v| out[i] = v)
    }

    #[inline]
    fn with_outputs(&self, features: &[f32], out_len: usize, apply_link: bool, mut put: impl FnMut(usize, f64)) -> Result<(), ScoreError> {
        let n_out = self.n_outputs();
        if features.len() < self.n_features() {
            return Err(ScoreError::Features { got: features.len(), need: self.n_features() });
        }
        if out_len < n_out {
            return Err(ScoreError::Outputs { got: out_len, need: n_out });
        }
        // Small models keep their accumulators in a few registers' worth of stack; zeroing the
        // full MAX_OUTPUTS array on every call would cost more than a shallow tree.
        let mut small = [0f64; 4];
        let mut large;
        let acc = if n_out <= small.len() {
            &mut small[..n_out]
        } else {
            large = [0f64; crate::MAX_OUTPUTS];
            &mut large[..n_out]
        };
        self.accumulate(features, acc);
        self.finish(acc, apply_link);
        for (i, v) in acc.iter().enumerate() {
            put(i, *v);
        }
        Ok(())
    }

    /// The trees' sums `acc` → margins (the base, an average's divisor) → outputs (the link,
    /// with `apply_link`), in place.
    #[inline(always)]
    pub(crate) fn finish(&self, acc: &mut [f64], apply_link: bool) {
        let divisor = if self.meta.aggregate == aggregate::AVERAGE { self.meta.aggregate_divisor } else { 1.0 };
        for (a, b) in acc.iter_mut().zip(self.base) {
            // Division only when averaging: `x / 1.0` is exact, but skip it to keep sums bitwise.
            *a = if divisor == 1.0 { *a + b } else { *a / divisor + b };
        }
        if apply_link {
            let link = match self.meta.link {
                link::SIGMOID => Link::Sigmoid { scale: self.meta.link_param },
                link::SOFTMAX => Link::Softmax,
                link::EXP => Link::Exp,
                link::STEP => Link::Step,
                _ => Link::Identity,
            };
            link.apply(acc);
        }
    }

    /// The feature a split on `split_feature` tests, numbered inputs then CTR features: a
    /// column (`layout::nan_low_start`, `layout::zero_low_start`) is its input.
    pub fn tested_feature(&self, split_feature: u16) -> usize {
        let (nf, low_start) = (self.n_features(), self.n_features() + self.ctr_features.len());
        let f = split_feature as usize;
        if self.flags & (flags::NAN_LOW_COLUMNS | flags::ZERO_MISSING_COLUMNS) != 0 && f >= low_start {
            (f - low_start) % nf
        } else {
            f
        }
    }

    /// The drift reference `compile --reference` stored: per input and per output, bin edges
    /// and the reference rows' share of each bin.
    pub fn drift_reference(&self) -> Option<crate::drift::Reference<'a>> {
        (self.flags & flags::HAS_DRIFT_REFERENCE != 0).then(|| crate::drift::Reference::new(self.n_features(), self.drift_series, self.drift_edges, self.drift_shares))
    }

    /// The model's table of user-agent families' JA4s, which `tls_ua_consistent` reads
    /// (`compile --ua-fingerprints`); empty without one.
    pub fn ua_fingerprints(&self) -> &'a [UaFingerprint] {
        self.ua_fingerprints
    }

    /// CatBoost CTR features: one per split feature beyond the inputs.
    pub fn ctr_features(&self) -> &'a [CtrFeature] {
        self.ctr_features
    }

    /// The projection parts of CTR feature `k` (empty if there is none).
    pub fn ctr_parts(&self, k: usize) -> &'a [CtrPart] {
        self.ctr_features.get(k).map_or(&[], |c| &self.ctr_parts[c.part_offset as usize..(c.part_offset + c.n_parts) as usize])
    }

    /// Adds every tree's leaf value to `acc[tree.output]`.
    #[inline]
    fn accumulate(&self, x: &[f32], acc: &mut [f64]) {
        if self.flags & (flags::HAS_CTRS | flags::NAN_LOW_COLUMNS | flags::ZERO_MISSING_COLUMNS) != 0 {
            return self.accumulate_derived(x, acc);
        }
        self.walk_row(x, acc)
    }

    /// The walk that covers this model's tests, on `row` (the inputs, or the derived row that
    /// starts with them).
    #[inline(always)]
    fn walk_row(&self, row: &[f32], acc: &mut [f64]) {
        // Most rows have no missing value, and most models' NaN tests have moved to NaN-low
        // columns: check the inputs once per row, not once per node.
        let nan = self.nan_walk && any_nan(&row[..self.n_features()]);
        if self.flags & flags::RICH_LEAVES != 0 {
            // Vector and linear leaves are rare: one general loop (every test kind, the leaf
            // kind chosen per tree) keeps the common loops below free of leaf branches.
            return if nan { self.walk::<true, true, true, true>(row, acc) } else { self.walk::<true, true, false, true>(row, acc) };
        }
        match (self.flags & (flags::HAS_CATEGORICAL | flags::HAS_RARE_TESTS), nan) {
            (0, false) => self.walk::<false, false, false, false>(row, acc),
            (0, true) => self.walk::<false, false, true, false>(row, acc),
            (flags::HAS_CATEGORICAL, false) => self.walk::<true, false, false, false>(row, acc),
            (flags::HAS_CATEGORICAL, true) => self.walk::<true, false, true, false>(row, acc),
            (flags::HAS_RARE_TESTS, false) => self.walk::<false, true, false, false>(row, acc),
            (flags::HAS_RARE_TESTS, true) => self.walk::<false, true, true, false>(row, acc),
            (_, false) => self.walk::<true, true, false, false>(row, acc),
            (_, true) => self.walk::<true, true, true, false>(row, acc),
        }
    }

    /// The derived row on the stack (validation bounds its length by `MAX_CTR_ROW`): the
    /// inputs, the CTR features, then the columns; then the walk over it. Two buffer sizes, so
    /// that the common row does not pay for a 4 KiB frame (and its stack probe).
    #[inline(never)]
    fn accumulate_derived(&self, x: &[f32], acc: &mut [f64]) {
        let total = row_len(self.meta.n_features, self.ctr_features.len() as u32, self.flags) as usize;
        if total <= 128 {
            self.walk_derived::<128>(x, total, acc)
        } else {
            self.walk_derived::<{ MAX_CTR_ROW as usize }>(x, total, acc)
        }
    }

    #[inline(always)]
    fn walk_derived<const N: usize>(&self, x: &[f32], total: usize, acc: &mut [f64]) {
        self.derived_row::<N, ()>(x, total, |row| self.walk_derived_row(row, acc))
    }

    /// `f` of the row the model's splits read: the inputs themselves, or the derived row.
    #[inline(always)]
    pub(crate) fn with_row<R>(&self, x: &[f32], f: impl FnOnce(&[f32]) -> R) -> R {
        if self.flags & (flags::HAS_CTRS | flags::NAN_LOW_COLUMNS | flags::ZERO_MISSING_COLUMNS) == 0 {
            return f(x);
        }
        let total = row_len(self.meta.n_features, self.ctr_features.len() as u32, self.flags) as usize;
        if total <= 128 {
            self.derived_row::<128, R>(x, total, f)
        } else {
            self.derived_row::<{ MAX_CTR_ROW as usize }, R>(x, total, f)
        }
    }

    /// The derived row in a stack buffer of N values (`total` of them used), handed to `f`.
    #[inline(always)]
    fn derived_row<const N: usize, R>(&self, x: &[f32], total: usize, f: impl FnOnce(&[f32]) -> R) -> R {
        let nf = self.n_features();
        // Uninitialised, then written in full: zeroing the buffer per row would cost more
        // than the walk of a small model.
        let mut buf = [MaybeUninit::<f32>::uninit(); N];
        let (inputs, rest) = buf[..total].split_at_mut(nf);
        let (ctrs, columns) = rest.split_at_mut(self.ctr_features.len());
        let low = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v.max(-f32::MAX) };
        // One pass writes each input and its columns (the compiler vectorises it).
        if columns.is_empty() {
            for (dst, &v) in inputs.iter_mut().zip(x) {
                dst.write(v);
            }
        } else if columns.len() == nf {
            for ((dst, column), &v) in inputs.iter_mut().zip(columns.iter_mut()).zip(x) {
                dst.write(v);
                column.write(low(v));
            }
        } else {
            let (nan_low, zero) = columns.split_at_mut(nf);
            let (zero_low, zero_high) = zero.split_at_mut(nf);
            let lanes = inputs.iter_mut().zip(nan_low).zip(zero_low).zip(zero_high);
            for ((((dst, nan_low), zero_low), zero_high), &v) in lanes.zip(x) {
                // LightGBM's zero-as-missing: NaN and `|x| <= 1e-35` are missing.
                let missing = v.is_nan() | (v.abs() <= ZERO_THRESHOLD);
                dst.write(v);
                nan_low.write(low(v));
                zero_low.write(if missing { f32::NEG_INFINITY } else { v.max(-f32::MAX) });
                zero_high.write(if missing { f32::INFINITY } else { v });
            }
        }
        for (dst, c) in ctrs.iter_mut().zip(self.ctr_features) {
            let parts = &self.ctr_parts[c.part_offset as usize..(c.part_offset + c.n_parts) as usize];
            let keys = c.key_offset as usize..(c.key_offset + c.n_keys) as usize;
            dst.write(ctr::value(c, parts, &self.ctr_keys[keys.clone()], &self.ctr_values[keys], x));
        }
        // SAFETY: the loops above wrote all `total` values: `x` has at least `nf` (checked in
        // `with_outputs`), `columns` is empty, `nf` or `3 * nf` long, one CTR value each.
        let row = unsafe { core::slice::from_raw_parts(buf.as_ptr().cast::<f32>(), total) };
        f(row)
    }

    /// The walks for derived rows, out of line, so that the plain path keeps its own copy
    /// inlined (called from three places, LLVM left the walks out of line: 10-tree models ran
    /// 10 % slower in wasmtime).
    #[inline(never)]
    fn walk_derived_row(&self, row: &[f32], acc: &mut [f64]) {
        self.walk_row(row, acc)
    }

    #[inline(always)]
    fn walk<const CAT: bool, const RARE: bool, const NAN: bool, const RICH: bool>(&self, x: &[f32], acc: &mut [f64]) {
        // SAFETY: validation checks n_walked <= trees.len().
        let (walked, oblivious) = unsafe { (self.trees.get_unchecked(..self.n_walked), self.trees.get_unchecked(self.n_walked..)) };
        // A single output's sum stays in a register: `acc[output] +=` through memory makes
        // every tree's add wait on the store of the one before.
        let mut sum = 0f64;
        let single = !RICH && acc.len() == 1;
        // Rows far out on every feature apply few tests through the bitvectors; the rest
        // (and rows with NaN tests, categorical, rare tests or rich leaves) take the lockstep
        // walk.
        let scanned = !(CAT || RARE || NAN || RICH) && self.bitvectors.is_some_and(|b| b.accumulate(x, single, &mut sum, acc));
        if !scanned {
            self.walk_lockstep::<CAT, RARE, NAN, RICH>(walked, x, single, &mut sum, acc);
        }
        if !oblivious.is_empty() {
            sum = self.add_oblivious::<CAT, RARE, NAN>(oblivious, x, single, sum, acc);
        }
        if single {
            // `acc[0]` is still 0.0, and `0.0 + sum == sum` (a sum from +0.0 is never -0.0).
            acc[0] += sum;
        }
    }

    /// The oblivious trees' leaves, added in tree order after the walked trees' (into the
    /// register sum of a single output, as theirs). Validation refuses vector and linear
    /// leaves in models with oblivious trees.
    ///
    /// Depths 4 to 8 have their levels unrolled, chosen per tree on a predicted branch (a
    /// model's trees are almost always of one depth): the loop cost half of a tree's ~97
    /// instructions. Out of line with the sum by value: by reference it lived in wasm's
    /// linear-memory stack (10-tree models ~1.19x the time in wasmtime).
    #[inline(never)]
    fn add_oblivious<const CAT: bool, const RARE: bool, const NAN: bool>(
        &self, oblivious: &[TreeSpec], x: &[f32], single: bool, mut sum: f64, acc: &mut [f64],
    ) -> f64 {
        for tree in oblivious {
            // Not for the rare tests, which CatBoost does not write: fewer copies of the walk
            // in the filter's .wasm.
            let value = match tree.depth {
                4 if !RARE => self.oblivious_leaf_unrolled::<CAT, RARE, NAN, 4>(tree, x),
                5 if !RARE => self.oblivious_leaf_unrolled::<CAT, RARE, NAN, 5>(tree, x),
                6 if !RARE => self.oblivious_leaf_unrolled::<CAT, RARE, NAN, 6>(tree, x),
                7 if !RARE => self.oblivious_leaf_unrolled::<CAT, RARE, NAN, 7>(tree, x),
                8 if !RARE => self.oblivious_leaf_unrolled::<CAT, RARE, NAN, 8>(tree, x),
                _ => self.oblivious_leaf::<CAT, RARE, NAN>(tree, x),
            };
            if single {
                sum += value;
            } else {
                // SAFETY: validation checks every tree's output (oblivious trees have no
                // vector output) is below n_outputs, and `acc` has n_outputs slots.
                unsafe { *acc.get_unchecked_mut(tree.output as usize) += value };
            }
        }
        sum
    }

    /// The walked trees in lockstep groups, their leaves added in tree order.
    #[inline(always)]
    fn walk_lockstep<const CAT: bool, const RARE: bool, const NAN: bool, const RICH: bool>(
        &self, walked: &[TreeSpec], x: &[f32], single: bool, sum: &mut f64, acc: &mut [f64],
    ) {
        // `Walk::build` made one start per whole group of `split_groups`, then one for the rest.
        let (full, rest) = walk::split_groups(walked);
        // The rest (fewer than LANES trees) joins the last whole group, in one group of an even
        // number of lanes (the extra lane walks the last tree again; its leaf is not added): on
        // its own it is one more chain of loads the CPU cannot start early (joined, 10-tree
        // models take 0.76-0.79x the time). One walk per even count, not per count, keeps the
        // .wasm at 1.23 MB instead of 1.42 MB.
        // The wasm engines spill groups of more than 8 lanes (100-300 trees 1.01-1.04x the
        // time), so there the rest joins only a model's single whole group.
        let whole = full.len() / LANES;
        let join = !rest.is_empty() && whole >= 1 && (cfg!(not(target_arch = "wasm32")) || whole == 1);
        let alone = if join { whole - 1 } else { whole };
        let (alone_trees, joined) = walked.split_at(alone * LANES);
        let (alone_starts, starts) = self.walk_groups.split_at(alone.min(self.walk_groups.len()));
        for (group, start) in alone_trees.chunks_exact(LANES).zip(alone_starts) {
            self.walk_and_add::<CAT, RARE, NAN, RICH, LANES>(group, core::slice::from_ref(start), x, single, sum, acc);
        }
        match joined.len() {
            0 => {}
            1..=2 => self.walk_and_add::<CAT, RARE, NAN, RICH, 2>(joined, starts, x, single, sum, acc),
            3..=4 => self.walk_and_add::<CAT, RARE, NAN, RICH, 4>(joined, starts, x, single, sum, acc),
            5..=LANES => self.walk_and_add::<CAT, RARE, NAN, RICH, LANES>(joined, starts, x, single, sum, acc),
            9..=10 => self.walk_and_add::<CAT, RARE, NAN, RICH, 10>(joined, starts, x, single, sum, acc),
            11..=12 => self.walk_and_add::<CAT, RARE, NAN, RICH, 12>(joined, starts, x, single, sum, acc),
            13..=14 => self.walk_and_add::<CAT, RARE, NAN, RICH, 14>(joined, starts, x, single, sum, acc),
            _ => self.walk_and_add::<CAT, RARE, NAN, RICH, 16>(joined, starts, x, single, sum, acc),
        }
    }

    /// Walks `group` (at most N trees, N <= 2 * LANES) to its leaves and adds them in tree
    /// order. `starts` holds the group's start, or for N > LANES the start of its first LANES
    /// trees and then of the rest; with fewer, the group is not walked (`Walk::build` makes
    /// them). Lanes past the group's trees walk its last tree again (`GroupStart::roots`).
    #[inline(always)]
    fn walk_and_add<const CAT: bool, const RARE: bool, const NAN: bool, const RICH: bool, const N: usize>(
        &self, group: &[TreeSpec], starts: &[GroupStart], x: &[f32], single: bool, sum: &mut f64, acc: &mut [f64],
    ) {
        let (first, then) = match starts {
            [first, then, ..] if N > LANES => (first, then),
            [first, ..] if N <= LANES => (first, first),
            _ => return,
        };
        let roots = core::array::from_fn(|k| if k < LANES { first.roots[k] } else { then.roots[k - LANES] } as usize);
        // Every tree must reach its leaf: the deeper of the two starts' depths. The first
        // check comes where the first start's deepest tree (the group's deepest, in the
        // writer's order) would have it.
        let steps = first.steps.max(then.steps);
        let at = self.walk_group::<CAT, RARE, NAN, N>(roots, steps, first.first_check.min(steps), x);
        // Over the N lanes, not the group's trees: a loop of constant length is unrolled (a
        // loop over the trees cost 11 instructions a tree, 10 % of a 10-tree row).
        for (k, &at) in at.iter().enumerate() {
            if let Some(tree) = group.get(k) {
                self.add_tree::<RICH>(single, sum, tree.output, at, x, acc);
            }
        }
    }

    /// Walks a group of N trees from `roots` in lockstep to its leaves. A leaf-wise tree
    /// (LightGBM's) is deeper than its leaf count needs, so after `first_check` levels (a
    /// balanced tree of the deepest tree's leaves, plus one) the walk stops if every tree has
    /// reached its leaf, and checks again 2, 4, 8 ... levels further on. Few checks, not one per
    /// level: that cost 12-30 % more instructions and 4-5x the mispredictions (callgrind).
    #[inline(always)]
    fn walk_group<const CAT: bool, const RARE: bool, const NAN: bool, const N: usize>(
        &self, roots: [usize; N], steps: u32, first_check: u32, x: &[f32],
    ) -> [usize; N] {
        let mut at = roots;
        // One loop run from check to check: LLVM left a closure for the step, called from two
        // loops, out of line (a call per level); a method for it cost 6 % more instructions.
        let (mut run, mut left, mut gap) = (first_check, steps.saturating_sub(first_check), 2);
        loop {
            for _ in 0..run {
                for a in at.iter_mut() {
                    *a = self.step::<CAT, RARE, NAN>(*a, x);
                }
            }
            if left == 0 {
                return at;
            }
            let mut leaf = node::LEAF;
            for &a in &at {
                leaf &= self.walk_node(a).flags;
            }
            if leaf != 0 {
                return at;
            }
            run = gap.min(left);
            (left, gap) = (left - run, gap * 2);
        }
    }

    /// A tree's leaf into the register sum of a single output, or into `acc`. A method, not a
    /// closure: LLVM left a closure called from the two loops of `walk` out of line.
    #[inline(always)]
    fn add_tree<const RICH: bool>(&self, single: bool, sum: &mut f64, output: u32, at: usize, x: &[f32], acc: &mut [f64]) {
        if single {
            *sum += self.leaf_value(self.walk_node(at));
        } else {
            self.add_leaf::<RICH>(output, at, x, acc);
        }
    }

    #[inline(always)]
    fn add_leaf<const RICH: bool>(&self, output: u32, at: usize, x: &[f32], acc: &mut [f64]) {
        let leaf = self.walk_node(at);
        if !RICH {
            acc[output as usize] += self.leaf_value(leaf);
        } else if output == VECTOR_OUTPUT {
            // SAFETY: validation checks that a vector tree's leaves index n_outputs values each.
            let first = (leaf.payload & node::LEAF_INDEX_MASK) as usize;
            for (o, a) in acc.iter_mut().enumerate() {
                *a += unsafe { *self.leaves.get_unchecked(first + o) };
            }
        } else if !self.linear_leaves.is_empty() {
            acc[output as usize] += self.linear_value(leaf, x);
        } else {
            acc[output as usize] += self.leaf_value(leaf);
        }
    }

    /// A linear leaf's value (see `layout::LinearLeaf`), with LightGBM's rule for NaN: any
    /// NaN among the leaf's features and the leaf is worth its plain output instead.
    #[inline(always)]
    fn linear_value(&self, leaf: Node, x: &[f32]) -> f64 {
        self.linear_value_at((leaf.payload & node::LEAF_INDEX_MASK) as usize, x)
    }

    /// [`linear_value`](Self::linear_value) of the leaf at LEAVES index `index`.
    #[inline(always)]
    pub(crate) fn linear_value_at(&self, index: usize, x: &[f32]) -> f64 {
        // SAFETY: validation checks LINEAR_LEAVES has one entry per leaf, every term range lies
        // in LINEAR_TERMS and every term's feature is < n_features <= x.len(); callers pass a
        // leaf's LEAVES index.
        unsafe {
            let leaf = self.linear_leaves.get_unchecked(index);
            let terms = self.linear_terms.get_unchecked(leaf.term_offset as usize..(leaf.term_offset + leaf.n_terms) as usize);
            let mut value = leaf.constant;
            for t in terms {
                let v = *x.get_unchecked(t.feature as usize);
                if v.is_nan() {
                    return *self.leaves.get_unchecked(index);
                }
                value += v as f64 * t.coeff;
            }
            value
        }
    }

    /// The value of `leaf`, one of this model's leaf nodes (from the walk's copy or the
    /// artifact's): only those carry a payload validated to index LEAVES.
    #[inline(always)]
    pub(crate) fn leaf_value(&self, leaf: Node) -> f64 {
        // SAFETY: validation guarantees that after `depth` steps from a root the node is a leaf
        // of that tree, and that every leaf's payload indexes LEAVES.
        unsafe { *self.leaves.get_unchecked((leaf.payload & node::LEAF_INDEX_MASK) as usize) }
    }

    /// The walk's node at byte offset `at`.
    #[inline(always)]
    fn walk_node(&self, at: usize) -> Node {
        // SAFETY: `at` is `walk::node_offset` of a node of a validated tree: roots (in the
        // group starts `Walk::build` made from the validated trees), and children (checked to
        // lie inside their tree) through `left` and the node after it. Every such
        // offset is a whole node inside `walk_nodes`, which is as aligned as `Node`.
        unsafe { *self.walk_nodes.as_ptr().byte_add(at) }
    }

    /// One level down: `left`, or the node after it where the test fails. Leaves need no test
    /// here: their threshold is NaN, so `v < t` is false and the node after `left` is the leaf
    /// itself (see `layout::Node`). Byte offsets and a select: 6 instructions a lane natively,
    /// where a node index takes 9 (a `lea` for the multiply by 12, a zero extension).
    #[inline(always)]
    fn step<const CAT: bool, const RARE: bool, const NAN: bool>(&self, at: usize, x: &[f32]) -> usize {
        let n = self.walk_node(at);
        let left = n.left as usize;
        core::hint::select_unpredictable(self.holds::<CAT, RARE, NAN>(n, x), left, left + NODE_BYTES)
    }

    /// The value of the leaf an oblivious tree sends `x` to: its levels' tests are the bits of
    /// the leaf's index (see `layout::tree_layout::OBLIVIOUS`), computed without a dependent
    /// load between them.
    #[inline(always)]
    fn oblivious_leaf<const CAT: bool, const RARE: bool, const NAN: bool>(&self, tree: &TreeSpec, x: &[f32]) -> f64 {
        let (root, depth) = (tree.root as usize, tree.depth as usize);
        let mut index = 0usize;
        for k in 0..depth {
            // SAFETY: validation checks an oblivious tree owns nodes root..=root + depth, split
            // nodes then a leaf node whose payload starts 2^depth LEAVES values.
            let n = unsafe { *self.nodes.get_unchecked(root + k) };
            index |= (self.holds::<CAT, RARE, NAN>(n, x) as usize) << k;
        }
        unsafe {
            let first = (self.nodes.get_unchecked(root + depth).payload & node::LEAF_INDEX_MASK) as usize;
            *self.leaves.get_unchecked(first + index)
        }
    }

    /// [`oblivious_leaf`](Self::oblivious_leaf) for a tree of depth `D` (the caller checked
    /// `tree.depth == D`), its levels unrolled. A body of its own: one function of the depth for
    /// both took 15 % more instructions (callgrind).
    #[inline(always)]
    fn oblivious_leaf_unrolled<const CAT: bool, const RARE: bool, const NAN: bool, const D: usize>(&self, tree: &TreeSpec, x: &[f32]) -> f64 {
        let root = tree.root as usize;
        // SAFETY: as in `oblivious_leaf`, with `tree.depth == D`: the tree owns nodes
        // root..=root + D, and its leaf node's payload starts 2^D LEAVES values.
        unsafe {
            let levels = self.nodes.get_unchecked(root..root + D);
            let mut index = 0usize;
            for (k, &n) in levels.iter().enumerate() {
                index |= (self.holds::<CAT, RARE, NAN>(n, x) as usize) << k;
            }
            let first = (self.nodes.get_unchecked(root + D).payload & node::LEAF_INDEX_MASK) as usize;
            *self.leaves.get_unchecked(first + index)
        }
    }

    /// Whether node `n`'s test sends `x` to its yes side (NaN: its `MISSING_YES`).
    #[inline(always)]
    fn holds<const CAT: bool, const RARE: bool, const NAN: bool>(&self, n: Node, x: &[f32]) -> bool {
        // SAFETY: the feature index is < the row's length, validated against n_features (and
        // the CTR features after them), and the row's length checked in `with_outputs`.
        let v = unsafe { *x.get_unchecked(n.feature as usize) };
        let op = n.flags & node::OP_MASK;
        // Every test is inline (an out-of-line call for the categorical and zero-as-missing tests
        // cost 38 % of a categorical model's instructions). Zero-as-missing is selected, not
        // branched on: `|x| <= 1e-35` is as hard to predict as the data.
        let lt = v < f32::from_bits(n.payload);
        let yes = if !(CAT || RARE) {
            lt
        } else {
            let mut yes = lt;
            if CAT && (op == node::OP_IN_SET || op == node::OP_MEMBER) {
                yes = self.in_set(op == node::OP_MEMBER, n.payload, v);
            }
            if RARE {
                let zero = (-ZERO_THRESHOLD..=ZERO_THRESHOLD).contains(&v);
                let missing_yes = n.flags & node::MISSING_YES != 0;
                let t = f32::from_bits(n.payload);
                yes = match op {
                    node::OP_EQ => v == t,
                    node::OP_NE => v != t,
                    // LightGBM's zero-as-missing: `|x| <= 1e-35` goes where NaN goes.
                    node::OP_LT_ZERO_MISSING => (zero & missing_yes) | (!zero & lt),
                    _ => yes,
                };
            }
            yes
        };
        // A leaf's MISSING_YES is clear, so a NaN feature keeps it in place too.
        if NAN && v.is_nan() {
            n.flags & node::MISSING_YES != 0
        } else {
            yes
        }
    }

    /// `IN_SET` (`trunc(v)` in the set) and `MEMBER` (`v` an integer in the set), without a
    /// branch on the value: one outside the set's range reads the walk's word of zeros. Early
    /// answers and a saturating `v as u32` mispredict: without them categorical models take
    /// 0.52-0.78x the time.
    ///
    /// The word of zeros is the first of the walk's copy of the bitsets, so that one selected
    /// index reaches both (a select between two pointers, without the copy, took 1.01-1.07x).
    #[inline(always)]
    fn in_set(&self, member: bool, payload: u32, v: f32) -> bool {
        // Branched on: a model's sets are all IN_SET (LightGBM, CatBoost) or all MEMBER
        // (XGBoost, ONNX), so this branch is predicted; IN_SET need not pay for the test.
        let integer = !member || is_integer(v);
        // SAFETY: IN_SET and MEMBER payloads index CAT_SPLITS (validated).
        let split = unsafe { self.cat_splits.get_unchecked(payload as usize) };
        let c = category_code(v);
        let word = c / 32;
        let inside = integer & (v > split.invalid_at_or_below) & (word < split.n_words);
        // Wrapping: it is computed for values outside the set too, and not used for them.
        let at = core::hint::select_unpredictable(inside, split.word_offset.wrapping_add(word).wrapping_add(1), 0);
        // SAFETY: inside the set, word < n_words and the bitset lies in CAT_WORDS (validated),
        // which `walk_cat_words` holds from index 1; outside it, index 0.
        let bits = unsafe { *self.walk_cat_words.get_unchecked(at as usize) };
        bits >> (c % 32) & 1 == 1
    }
}

/// `v as u32` (negative values 0) for every `v` below 2^32; from there on 4,294,967,040, whose
/// word lies past every bitset (`MAX_SET_WORDS`), as `u32::MAX`'s does. NaN: 0 natively, 0 or
/// 4,294,967,040 in wasm (`clamp_code_bits`); `in_set` reads no bitset for it either way. A
/// clamp and a conversion, without a branch on the value.
#[inline(always)]
fn category_code(v: f32) -> u32 {
    // SAFETY: both clamps return a value in [0, CODE_TOP], which u32 holds.
    unsafe {
        #[cfg(not(target_arch = "wasm32"))]
        return clamp_code_float(v).to_int_unchecked::<u32>();
        // Through i64: Cranelift's unsigned conversion checks both ranges with branches, its
        // signed one only overflow (predicted).
        #[cfg(target_arch = "wasm32")]
        return clamp_code_bits(v).to_int_unchecked::<i64>() as u32;
    }
}

/// The largest f32 below 2^32.
const CODE_TOP: f32 = 4_294_967_040.0;

/// `v` clamped to [0, CODE_TOP], NaN to 0: `maxss` and `minss` natively. (Each clamp is unused
/// on the other target; the unit test checks both on every target.)
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
#[inline(always)]
fn clamp_code_float(v: f32) -> f32 {
    let v = if v > 0.0 { v } else { 0.0 };
    if v < CODE_TOP {
        v
    } else {
        CODE_TOP
    }
}

/// `v` clamped to [0, CODE_TOP] on its bits as an i32 (NaN to 0 or CODE_TOP by its sign):
/// non-negative floats order as their bits do, and every negative float's bits are a negative
/// i32. For wasm, where `clamp_code_float`'s first select is an f32 `select` that Cranelift
/// emits as a branch on `v > 0` (mispredicted on every category 0 and NaN): this is two integer
/// selects. With the conversion through i64, categorical models take 0.85-0.93x the time in
/// wasmtime, 0.84-0.96x in V8.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
#[inline(always)]
fn clamp_code_bits(v: f32) -> f32 {
    f32::from_bits((v.to_bits() as i32).clamp(0, CODE_TOP.to_bits() as i32) as u32)
}

/// Whether any value is NaN. A fold, not `any`, whose early exit makes a compare and a branch
/// per value (15 % of a 10-tree model's row): the fold compares eight at a time. The last
/// eight go again, overlapping, where the length is not a multiple of 8: the compiler's own
/// tail takes them one at a time (42 of a 30-feature row's ~90 instructions).
#[inline(always)]
fn any_nan(x: &[f32]) -> bool {
    let nan = |values: &[f32]| values.iter().fold(false, |seen, v| seen | v.is_nan());
    match x.last_chunk::<8>() {
        Some(last) => nan(&x[..x.len() / 8 * 8]) | nan(last),
        None => nan(x),
    }
}

/// `v == v.trunc()` (false for NaN) without calling `truncf`: x86-64's baseline has no SSE4.1
/// `roundss`, so `trunc` is a libm call (7 % of a categorical model's instructions). Below 2^23
/// the truncating cast round-trips exactly the integers; from 2^23 up every f32 is one (or
/// infinite).
#[inline(always)]
fn is_integer(v: f32) -> bool {
    (v as i32 as f32 == v) | (v.abs() >= 8_388_608.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_integer_is_trunc_equality_on_every_kind_of_f32() {
        let edges = [0.0f32, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, 8_388_607.5, 8_388_608.0, -8_388_608.0, 16_777_217.0, 2_147_483_648.0, -2_147_483_904.0, 3.4e38, -3.4e38, f32::MIN_POSITIVE, 1e-45, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN];
        // Every exponent, with sign and assorted mantissas: a walk over the bit patterns.
        let sweep = (0..=u32::MAX).step_by(65_521).map(f32::from_bits);
        for v in edges.into_iter().chain(sweep) {
            assert_eq!(super::is_integer(v), v == v.trunc(), "{v:e} ({:#010x})", v.to_bits());
        }
    }

    #[test]
    fn category_code_is_the_saturating_cast_below_2_32_and_past_every_bitset_above() {
        use crate::artifact::layout::MAX_SET_WORDS;
        let edges = [0.0f32, -0.0, 0.5, -0.5, 0.999_999_94, 1.0, -1.0, -1.5, 31.5, 32.0, 16_777_217.0, 1_073_741_760.0, 1_073_741_824.0, 1_073_741_952.0, 2_147_483_520.0, 2_147_483_648.0, 4_294_967_040.0, 4_294_967_296.0, 3.4e38, -3.4e38, f32::MIN_POSITIVE, 1e-45, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001), f32::from_bits(0xffff_ffff)];
        let sweep = (0..=u32::MAX).step_by(65_521).map(f32::from_bits);
        // Both clamps, whichever this target uses: the native one and wasm's.
        let clamps: [(&str, fn(f32) -> f32); 2] = [("float", super::clamp_code_float), ("bits", super::clamp_code_bits)];
        for v in edges.into_iter().chain(sweep) {
            for (name, clamp) in clamps {
                let clamped = clamp(v);
                assert!((0.0..=super::CODE_TOP).contains(&clamped), "{name}: {v:e} clamped to {clamped:e}");
                // SAFETY: checked just above to lie in [0, CODE_TOP].
                let c = unsafe { clamped.to_int_unchecked::<u32>() };
                if v.is_nan() {
                    assert!(c == 0 || (name == "bits" && c / 32 >= MAX_SET_WORDS), "{name}: NaN {:#010x} gave code {c}", v.to_bits());
                } else if v < 4_294_967_296.0 {
                    assert_eq!(c, v as u32, "{name}: {v:e} ({:#010x})", v.to_bits());
                } else {
                    assert!(c / 32 >= MAX_SET_WORDS, "{name}: {v:e}: code {c} lies within a bitset of MAX_SET_WORDS");
                }
            }
            assert_eq!(super::category_code(v), if cfg!(target_arch = "wasm32") { super::clamp_code_bits(v) } else { super::clamp_code_float(v) } as u32);
        }
    }

    #[test]
    fn any_nan_sees_a_nan_at_every_position_of_every_length() {
        // Lengths below, at and past the chunks of 8, so that the overlapping last chunk and
        // the short row are covered; signalling and negative NaNs too.
        for len in 0..=35 {
            let mut row: Vec<f32> = (0..len).map(|i| i as f32 - 3.5).collect();
            assert!(!super::any_nan(&row), "len {len}: no NaN");
            for at in 0..len {
                for nan in [f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001)] {
                    let kept = core::mem::replace(&mut row[at], nan);
                    assert!(super::any_nan(&row), "len {len}: NaN {:#010x} at {at}", nan.to_bits());
                    row[at] = kept;
                }
            }
            row.push(f32::INFINITY);
            assert!(!super::any_nan(&row[..len]) && !super::any_nan(&row), "len {len}: infinities are not NaN");
        }
    }
}
