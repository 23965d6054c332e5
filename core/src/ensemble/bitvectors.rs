//! QuickScorer's bitvectors (Lucchese et al., SIGIR 2015), for rows whose features sit beyond
//! most thresholds: request counts and lengths often do, and then compiled if-else trees run
//! on perfectly predicted branches while the lockstep walk still walks every level.
//!
//! Every leaf of a tree is a bit, left to right (the yes side first). A test that fails
//! ("no") rules out the leaves of its yes subtree; one that holds rules out those of its no
//! subtree. Whatever set of failed tests is applied, the tree's exit leaf is the lowest bit
//! left standing; whatever set of holding tests, the highest. So a row needs only the tests
//! on one side of each feature's value. A feature's tests, sorted by threshold, fail for a
//! prefix (`t <= x`) and hold for the rest; a row beyond all but the top (or bottom) 32nd or
//! 8th of them scans only those, selecting each test's mask without a branch. The row takes
//! the side on which its largest feature scans fewer. On skewed rows that is a few
//! percent of the tests; on rows between thresholds it is all of them, and
//! [`Bitvectors::budget`] sends those to the lockstep walk after a column or two.
//!
//! Built at load from the validated nodes (it is derived data, like `Parts`: the artifact
//! format is unchanged, and nothing read from the file is trusted beyond what validation
//! proved). Only for models whose walked trees all have at most 64 leaves and only `x < t`
//! tests, on rows the walk would take without NaN tests (the caller checks): a NaN then fails
//! every `x < t`, as the scan also has it.

use super::TreeEnsemble;
use crate::artifact::layout::{flags, node, tree_layout};
use core::mem::MaybeUninit;

/// The most walked trees: each needs a u64 on the stack per row.
const MAX_TREES: usize = 1024;
/// The most tests indexed: 24 bytes each (threshold, two masks, tree), so 1.5 MiB at most.
const MAX_TESTS: usize = 1 << 16;
/// A column's near tests: these shares of its tests, rounded up, narrowest first.
const NEAR_SHARES: [usize; 2] = [32, 8];

/// The tests of one feature: `start..end` in the sorted arrays. A row at or above `high[k]`
/// holds at most the top `near[k]` tests (`x < t` is true only there); one below `low[k]`
/// fails at most the bottom `near[k]`: then only those need scanning. Two widths, a 32nd and
/// an 8th of the column, each row taking the narrowest that covers it.
#[derive(Clone, Copy)]
struct Column {
    feature: u32,
    start: u32,
    end: u32,
    near: [u32; 2],
    high: [f32; 2],
    low: [f32; 2],
}

impl Column {
    /// How many tests a row at `v` scans on the failed side (`FAILED`) or the held side. NaN
    /// holds no test (`x < t` is false), so it scans the narrowest held side (`!(v < high)`, not
    /// `v >= high`, which would send a row with one missing input to the lockstep walk).
    #[inline(always)]
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn scan<const FAILED: bool>(&self, v: f32) -> usize {
        let near = if FAILED {
            if v < self.low[0] {
                self.near[0]
            } else if v < self.low[1] {
                self.near[1]
            } else {
                self.end - self.start
            }
        } else if !(v < self.high[0]) {
            self.near[0]
        } else if !(v < self.high[1]) {
            self.near[1]
        } else {
            self.end - self.start
        };
        near as usize
    }
}

/// A walked tree's first leaf value in [`Bitvectors::values`], and its output.
#[derive(Clone, Copy)]
struct TreeLeaves {
    first: u32,
    output: u32,
}

#[derive(Clone)]
pub(crate) struct Bitvectors {
    columns: Vec<Column>,
    /// Per column, ascending; NaN thresholds stored as −∞ (`!(x < NaN)` and `!(x < −∞)` are
    /// both always true, so either sorts first).
    thresholds: Vec<f32>,
    /// The leaves a failed test rules out, cleared.
    masks_no: Vec<u64>,
    /// The leaves a holding test rules out, cleared.
    masks_yes: Vec<u64>,
    /// Which walked tree each test belongs to.
    tree_of: Vec<u32>,
    /// Each walked tree's leaves, all standing.
    full: Vec<u64>,
    trees: Vec<TreeLeaves>,
    /// Leaf values, tree by tree, left to right.
    values: Vec<f64>,
    /// The most tests a row may scan before the lockstep walk is the cheaper way.
    budget: usize,
}

/// `1` bits for leaves `lo..hi` (hi ≤ 64).
fn span(lo: u32, hi: u32) -> u64 {
    (((1u128 << hi) - 1) ^ ((1u128 << lo) - 1)) as u64
}

struct Test {
    column: u32,
    threshold: f32,
    tree: u32,
    mask_no: u64,
    mask_yes: u64,
}

/// What a model's tables hold: the tests they index and their heap bytes. Each loaded copy of
/// the model (one per Envoy worker) holds its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BitvectorsSize {
    pub tests: usize,
    pub bytes: usize,
}

impl Bitvectors {
    pub(crate) fn size(&self) -> BitvectorsSize {
        use core::mem::size_of_val;
        let bytes = size_of_val(&self.columns[..])
            + size_of_val(&self.thresholds[..])
            + size_of_val(&self.masks_no[..])
            + size_of_val(&self.masks_yes[..])
            + size_of_val(&self.tree_of[..])
            + size_of_val(&self.full[..])
            + size_of_val(&self.trees[..])
            + size_of_val(&self.values[..]);
        BitvectorsSize { tests: self.thresholds.len(), bytes }
    }

    /// The index for `e`'s walked trees, if every one qualifies (see the module doc), the
    /// tables stay small and (unless `every_row`, for tests and the fuzz oracle: then every
    /// row goes through it) the costs below say some rows gain.
    pub(crate) fn build(e: &TreeEnsemble, every_row: bool) -> Option<Bitvectors> {
        if e.flags & (flags::HAS_CATEGORICAL | flags::HAS_RARE_TESTS | flags::RICH_LEAVES) != 0 || e.n_walked == 0 || e.n_walked > MAX_TREES {
            return None;
        }
        let mut tests = Vec::new();
        let mut full = Vec::with_capacity(e.n_walked);
        let mut trees = Vec::with_capacity(e.n_walked);
        let mut values = Vec::new();
        let mut lockstep_levels = 0usize;
        for (t, tree) in e.trees[..e.n_walked].iter().enumerate() {
            if tree.layout != tree_layout::NODES {
                return None;
            }
            let first = values.len() as u32;
            let mut leaves = 0u32;
            visit(e, tree.root, 0, t as u32, &mut leaves, &mut tests, &mut values)?;
            if tests.len() > MAX_TESTS {
                return None;
            }
            full.push(span(0, leaves));
            trees.push(TreeLeaves { first, output: tree.output });
            lockstep_levels += tree.depth as usize;
        }
        let key = |t: f32| if t.is_nan() { f32::NEG_INFINITY } else { t };
        tests.sort_unstable_by(|a, b| a.column.cmp(&b.column).then(key(a.threshold).total_cmp(&key(b.threshold))));
        let thresholds: Vec<f32> = tests.iter().map(|t| key(t.threshold)).collect();
        let mut columns: Vec<Column> = Vec::new();
        let mut start = 0;
        while start < tests.len() {
            let column = tests[start].column;
            let end = start + tests[start..].iter().take_while(|t| t.column == column).count();
            let n = end - start;
            let mut c = Column { feature: column, start: start as u32, end: end as u32, near: [0; 2], high: [0.0; 2], low: [0.0; 2] };
            for (k, share) in NEAR_SHARES.into_iter().enumerate() {
                let near = n.div_ceil(share);
                // A column of `near` tests or fewer is scanned whole: bounds no row can miss.
                (c.near[k], c.high[k], c.low[k]) =
                    if near < n { (near as u32, thresholds[end - near - 1], thresholds[start + near]) } else { (n as u32, f32::NEG_INFINITY, f32::INFINITY) };
            }
            columns.push(c);
            start = end;
        }
        // Costs in instructions, counted with callgrind: the lockstep walk about 8 per tree and
        // level; here about 8 per test scanned, 11 per tree (its leaf) and 33 per column (the
        // row's check and the scan's setup, counted with a check of both sides: the one-sided
        // check costs ~12 less, and lowering the constant would build tables for models whose
        // "between" rows have not been counted). A test scanned is budgeted at twice its count:
        // the scan's branches mispredict where the walk's do not (lgb_defaults_t100 skewed:
        // 0.8x the instructions, 1.5x the time at 1x). A model whose trees are too shallow
        // for its columns never gains.
        let (n_trees, n_columns) = (e.n_walked, columns.len());
        let budget = if every_row {
            usize::MAX
        } else {
            let budget = (8 * lockstep_levels).checked_sub(11 * n_trees + 33 * n_columns)? / 16;
            // Nor does one where even a row far out on every feature would scan more than half
            // the budget: most rows would check every column only to take the walk after all
            // (xgb_d6_t100: +7 % instructions on skewed rows).
            if columns.iter().map(|c| c.near[0] as usize).sum::<usize>() * 2 > budget {
                return None;
            }
            budget
        };
        // The largest columns first: a row between thresholds is sent to the lockstep walk
        // after one or two of them.
        columns.sort_unstable_by_key(|c| core::cmp::Reverse(c.end - c.start));
        Some(Bitvectors {
            columns,
            thresholds,
            masks_no: tests.iter().map(|t| t.mask_no).collect(),
            masks_yes: tests.iter().map(|t| t.mask_yes).collect(),
            tree_of: tests.iter().map(|t| t.tree).collect(),
            full,
            trees,
            values,
            budget,
        })
    }

    /// Adds every walked tree's leaf for `x` as the lockstep walk would (same values, same
    /// order: into `sum` for a single output, else into `acc`), or returns false, having
    /// added nothing, when the row would scan more tests than [`Self::budget`].
    #[inline(always)]
    pub(crate) fn accumulate(&self, x: &[f32], single: bool, sum: &mut f64, acc: &mut [f64]) -> bool {
        // The side is the largest column's narrower one: a row far out on every feature is
        // far out the same way on most. Checking both sides of every column cost ~30
        // instructions a column, a fifth of a skewed row of lgb_defaults_t100 (54 columns).
        let failed = self.columns.first().is_some_and(|c| {
            let v = x[c.feature as usize];
            c.scan::<true>(v) < c.scan::<false>(v)
        });
        // A copy of the scan per side, kind of sum and stack table: each decided once per row,
        // not per test and tree.
        match (failed, single, self.full.len() <= 64) {
            (true, true, true) => self.apply::<true, true, 64>(x, sum, acc),
            (true, false, true) => self.apply::<true, false, 64>(x, sum, acc),
            (false, true, true) => self.apply::<false, true, 64>(x, sum, acc),
            (false, false, true) => self.apply::<false, false, 64>(x, sum, acc),
            (true, true, false) => self.apply::<true, true, MAX_TREES>(x, sum, acc),
            (true, false, false) => self.apply::<true, false, MAX_TREES>(x, sum, acc),
            (false, true, false) => self.apply::<false, true, MAX_TREES>(x, sum, acc),
            (false, false, false) => self.apply::<false, false, MAX_TREES>(x, sum, acc),
        }
    }

    #[inline(always)]
    fn apply<const FAILED: bool, const SINGLE: bool, const N: usize>(&self, x: &[f32], sum: &mut f64, acc: &mut [f64]) -> bool {
        // What the side scans: a column's near tests where the row is far out, else all of
        // them. Over budget, the lockstep walk is cheaper.
        let mut scans = 0usize;
        for c in &self.columns {
            scans += c.scan::<FAILED>(x[c.feature as usize]);
            if scans > self.budget {
                return false;
            }
        }
        let mut standing = [MaybeUninit::<u64>::uninit(); N];
        for (v, &f) in standing.iter_mut().zip(&self.full) {
            v.write(f);
        }
        // SAFETY: `full.len() <= N` (the caller picks N), all of them written above.
        let standing = unsafe { core::slice::from_raw_parts_mut(standing.as_mut_ptr().cast::<u64>(), self.full.len()) };
        let (thresholds, tree_of) = (&self.thresholds[..], &self.tree_of[..]);
        let masks = if FAILED { &self.masks_no[..] } else { &self.masks_yes[..] };
        for c in &self.columns {
            let v = x[c.feature as usize];
            let scan = c.scan::<FAILED>(v);
            let range = if FAILED { c.start as usize..c.start as usize + scan } else { c.end as usize - scan..c.end as usize };
            for i in range {
                // SAFETY: `range` lies in the column's tests, and every `tree_of` entry is a
                // walked tree's index (`build`).
                unsafe {
                    let t = *thresholds.get_unchecked(i);
                    // A test on the other side ANDs all ones, selected without a branch:
                    // LLVM's branch on `v < t` was mispredicted near the row's value.
                    // `!(v < t)`, not `v >= t`: a NaN fails every test, as in the walk.
                    #[allow(clippy::neg_cmp_op_on_partial_ord)]
                    let other = if FAILED { v < t } else { !(v < t) };
                    let mask = core::hint::select_unpredictable(other, u64::MAX, *masks.get_unchecked(i));
                    *standing.get_unchecked_mut(*tree_of.get_unchecked(i) as usize) &= mask;
                }
            }
        }
        let values = &self.values[..];
        let mut local = 0f64;
        for (v, tree) in standing.iter().zip(&self.trees) {
            // The exit leaf is never ruled out (module doc), so `v` is never 0 and the bit
            // index is below the tree's leaf count.
            let leaf = if FAILED { v.trailing_zeros() } else { 63 - v.leading_zeros() };
            let value = values[(tree.first + leaf) as usize];
            if SINGLE {
                local += value;
            } else {
                acc[tree.output as usize] += value;
            }
        }
        if SINGLE {
            *sum += local;
        }
        true
    }
}

/// Numbers the leaves under `at` from `*leaves` on, pushing a test per split.
fn visit(e: &TreeEnsemble, at: u32, depth: u32, tree: u32, leaves: &mut u32, tests: &mut Vec<Test>, values: &mut Vec<f64>) -> Option<()> {
    let n = *e.nodes.get(at as usize)?;
    if n.flags & node::LEAF != 0 {
        if *leaves >= 64 {
            return None;
        }
        values.push(e.leaf_value(n));
        *leaves += 1;
        return Some(());
    }
    // A tree of at most 64 leaves is at most 63 splits deep.
    if depth >= 63 || n.flags & node::OP_MASK != node::OP_LT {
        return None;
    }
    let lo = *leaves;
    visit(e, n.left, depth + 1, tree, leaves, tests, values)?;
    let mid = *leaves;
    visit(e, n.left.checked_add(1)?, depth + 1, tree, leaves, tests, values)?;
    let hi = *leaves;
    tests.push(Test { column: n.feature as u32, threshold: f32::from_bits(n.payload), tree, mask_no: !span(lo, mid), mask_yes: !span(mid, hi) });
    Some(())
}
