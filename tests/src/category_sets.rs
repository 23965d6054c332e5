//! Models of category sets (`IN_SET`, `MEMBER`) and rows of every kind of value at their edges:
//! for `tests/categorical_sets.rs` (against the IR's reference reading) and
//! `tests/wasm_scores.rs` (wasm against native).

use crate::ir_build::{classifier, leaf, numeric, split};
use edgescore_compile::ir::{ModelIr, Test, Tree};

/// Sets that cover the edges: codes in the first word, at a word's last bit, deep in a long
/// bitset, the empty set, and a lone large code.
fn set(k: u32) -> Vec<u32> {
    match k % 5 {
        0 => vec![0, 1, 5, 31],
        1 => vec![2, 32, 63, 64, 100],
        2 => vec![],
        3 => vec![0, 999, 4_999],
        _ => vec![1_000_000],
    }
}

/// IN_SET bounds: LightGBM's and CatBoost's -1, and others a compiler may write, below and
/// above -1 and above 0, so values between the bound and 0 (code 0) are tested too.
const BOUNDS: [f32; 5] = [-1.0, -5.0, -0.5, 0.0, 3.0];

/// Tree `t`: a set test on feature `t % 2` at the root, a threshold test and a second set test
/// (IN_SET or MEMBER, by `member`) below it, on features that vary by tree.
fn tree(t: u32, member: bool) -> Tree {
    let in_set = |k: u32| Test::InSet { categories: set(k), invalid_at_or_below: BOUNDS[(k % 5) as usize] };
    let second = if member { Test::Member { categories: set(t + 1) } } else { in_set(t + 1) };
    let value = |i: u32| f64::from(1u32 << ((t * 3 + i) % 30));
    Tree {
        output: 0,
        nodes: vec![
            split(t % 2, in_set(t), t % 3 == 0, 1, 2),
            split((t + 1) % 3, Test::Lt(f64::from(t % 7) - 2.5), t % 2 == 0, 3, 4),
            split(2, second, t % 4 == 1, 5, 6),
            leaf(value(0)),
            leaf(value(1)),
            leaf(value(2)),
            leaf(value(3)),
        ],
    }
}

/// `n_trees` trees of set tests, IN_SET or MEMBER (by `member`) below the root.
pub fn model(n_trees: u32, member: bool) -> ModelIr {
    classifier("sets", numeric(3), (0..n_trees).map(|t| tree(t, member)).collect(), 1)
}

/// Values for every edge of the sets and bounds above: NaN (both signs, quiet and signalling), infinities, the bounds and their
/// neighbours, negative zero, fractions that truncate into a set, the bits at each end of a
/// word, codes past each bitset, and values from 2^24 to past 2^32 (the clamp is just below 2^32).
fn values() -> Vec<f32> {
    let mut v = vec![f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001), f32::from_bits(0xff80_0001), f32::NEG_INFINITY, f32::INFINITY, -f32::MAX, f32::MAX, -0.0, 0.0, 1e-45, -1e-45];
    v.extend([-5.5, -5.0, -4.5, -3.0, -1.0, -0.999_999_94, -0.5, 0.5, 0.999_999_94, 1.0, 1.5, 2.0, 3.0, 3.5, 4.0, 5.0, 5.9]);
    v.extend([30.5, 31.0, 31.5, 32.0, 33.0, 63.0, 63.5, 64.0, 95.0, 96.0, 100.0, 100.5, 127.0, 128.0, 159.0, 160.0]);
    v.extend([998.0, 999.0, 999.5, 1_000.0, 4_999.0, 4_999.9, 5_000.0, 5_024.0, 999_999.0, 1_000_000.0, 1_000_000.1, 1_000_001.0]);
    v.extend([16_777_216.0, 16_777_218.0, 1_073_741_760.0, 1_073_741_824.0, 2_147_483_648.0, 4_294_967_040.0, 4_294_967_296.0, 1e20]);
    v
}

/// Each value on each feature, the others walking a spread of values with it.
pub fn edge_rows() -> Vec<Vec<f32>> {
    let values = values();
    let mut rows = Vec::new();
    for (i, &a) in values.iter().enumerate() {
        for k in 0..5 {
            let b = values[(i * 7 + k * 13) % values.len()];
            let c = values[(i * 11 + k * 5 + 3) % values.len()];
            rows.extend([vec![a, b, c], vec![b, a, c], vec![c, b, a]]);
        }
    }
    rows
}

/// Tree counts for every lockstep group size: 1 to 7 trees (one group of 2, 4 or 8 lanes), 8
/// plus each rest (10 to 16 lanes), two whole groups and a rest.
pub fn tree_counts() -> impl Iterator<Item = u32> {
    (1..=17).chain([23])
}
