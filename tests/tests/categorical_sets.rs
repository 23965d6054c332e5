//! Category sets (`IN_SET`: `trunc(x)` in the set; `MEMBER`: `x` an integer in the set): every
//! kind of value, below, inside, at the edges of and past a set's bitset, scores exactly as
//! the IR's reference reading, in every lockstep group size and mixed with threshold tests. The
//! walk tests a set without a branch on the value (`TreeEnsemble::in_set`: a clamped code, and
//! a value outside the set reads a word of zeros), so every edge is worth a row here. Codes of
//! 2^31 and above are refused by the writer (`MAX_SET_WORDS`).

use edgescore_compile::ir::{ModelIr, Test, Tree};
use edgescore_compile::write::write;
use edgescore_tests::ir_build::{assert_matches_reference, classifier, leaf, numeric, split};

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

fn model(n_trees: u32, member: bool) -> ModelIr {
    classifier("sets", numeric(3), (0..n_trees).map(|t| tree(t, member)).collect(), 1)
}

/// Values for every edge of the sets and bounds above: NaN, infinities, the bounds and their
/// neighbours, negative zero, fractions that truncate into a set, the bits at each end of a
/// word, codes past each bitset, and values from 2^24 to past 2^32 (the clamp is just below 2^32).
fn values() -> Vec<f32> {
    let mut v = vec![f32::NAN, f32::NEG_INFINITY, f32::INFINITY, -f32::MAX, f32::MAX, -0.0, 0.0, 1e-45, -1e-45];
    v.extend([-5.5, -5.0, -4.5, -3.0, -1.0, -0.999_999_94, -0.5, 0.5, 0.999_999_94, 1.0, 1.5, 2.0, 3.0, 3.5, 4.0, 5.0, 5.9]);
    v.extend([30.5, 31.0, 31.5, 32.0, 33.0, 63.0, 63.5, 64.0, 95.0, 96.0, 100.0, 100.5, 127.0, 128.0, 159.0, 160.0]);
    v.extend([998.0, 999.0, 999.5, 1_000.0, 4_999.0, 4_999.9, 5_000.0, 5_024.0, 999_999.0, 1_000_000.0, 1_000_000.1, 1_000_001.0]);
    v.extend([16_777_216.0, 16_777_218.0, 1_073_741_760.0, 1_073_741_824.0, 2_147_483_648.0, 4_294_967_040.0, 4_294_967_296.0, 1e20]);
    v
}

fn assert_scores_as_reference(m: &ModelIr) {
    let values = values();
    // Each value on each feature, the others walking a spread of values with it.
    let mut rows = Vec::new();
    for (i, &a) in values.iter().enumerate() {
        for k in 0..5 {
            let b = values[(i * 7 + k * 13) % values.len()];
            let c = values[(i * 11 + k * 5 + 3) % values.len()];
            rows.extend([vec![a, b, c], vec![b, a, c], vec![c, b, a]]);
        }
    }
    // Leaf values are powers of two: every order of summing them is exact.
    assert_matches_reference(m, &write(m).unwrap(), &rows);
}

#[test]
fn in_set_scores_every_edge_value_exactly_in_every_group_size() {
    // 1 to 7 trees (one group of 2, 4 or 8 lanes), 8 plus each rest (10 to 16 lanes), two
    // whole groups and a rest.
    for n_trees in (1..=17).chain([23]) {
        assert_scores_as_reference(&model(n_trees, false));
    }
}

#[test]
fn member_scores_every_edge_value_exactly_in_every_group_size() {
    for n_trees in (1..=17).chain([23]) {
        assert_scores_as_reference(&model(n_trees, true));
    }
}

#[test]
fn a_code_of_2_pow_31_or_more_is_refused_by_the_writer() {
    for (code, refused) in [(1u32 << 20, false), (1 << 31, true), (u32::MAX, true)] {
        let m = classifier("big", numeric(1), vec![Tree { output: 0, nodes: vec![split(0, Test::Member { categories: vec![code] }, false, 1, 2), leaf(1.0), leaf(2.0)] }], 1);
        match write(&m) {
            Ok(_) => assert!(!refused, "code {code} written"),
            Err(e) => {
                assert!(refused, "code {code} refused: {e}");
                assert!(e.to_string().contains(&format!("category code {code} is 2^31 or more")), "{e}");
            }
        }
    }
}
