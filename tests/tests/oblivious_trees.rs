//! Oblivious trees (CatBoost's): the evaluator has a copy of their walk with the levels
//! unrolled for depths 4 to 8 and a loop for the others (`TreeEnsemble::add_oblivious`), and
//! adds a single output's leaves in a register after the node trees' sum. Every depth from 1
//! to 10, mixed depths in one model, node trees before oblivious ones, several outputs, NaN
//! rows with and without NaN-low columns, and set and equality tests on a level must all
//! score exactly as the IR's reference reading.

use edgescore_compile::ir::{self, Level, ModelIr, Test, Tree};
use edgescore_compile::write::write;
use edgescore_core::artifact::layout::flags;
use edgescore_core::Model;
use edgescore_tests::ir_build::{assert_matches_reference, classifier, leaf, numeric, split};

/// A tree of `depth` levels over features 0..3 (thresholds spread over the rows' values) with
/// integer leaves: every order of summing them is exact.
fn oblivious(output: u32, depth: usize, seed: usize, test: impl Fn(usize) -> Option<Test>) -> Tree {
    let levels: Vec<Level> = (0..depth)
        .map(|k| {
            let t = ((seed * 7 + k * 3) % 11) as f64 - 3.0;
            Level { feature: ((seed + k) % 3) as u32, test: test(k).unwrap_or(Test::Gt(t)), missing_yes: (seed + k) % 2 == 0 }
        })
        .collect();
    let leaves = (0..1usize << depth).map(|i| (seed * 1024 + i) as f64).collect();
    Tree { output, nodes: vec![ir::Node::Oblivious { levels: levels.into(), leaves }] }
}

/// Every combination of values around the thresholds, and NaN, on the 3 tested features; the
/// rest of a wider row is 0.
fn rows(n_features: usize) -> Vec<Vec<f32>> {
    let values = [f32::NEG_INFINITY, -4.0, -2.5, -1.0, 0.0, 0.5, 2.0, 3.0, 4.5, 7.0, 9.0, f32::NAN];
    let mut rows = Vec::new();
    for a in values {
        for b in values {
            for c in values {
                let mut row = vec![0f32; n_features];
                row[..3].copy_from_slice(&[a, b, c]);
                rows.push(row);
            }
        }
    }
    rows
}

/// Scores every row exactly as the reference, and returns the artifact's header flags (what
/// the writer chose decides which copy of the walk runs).
fn assert_scores_as_reference(m: &ModelIr) -> u32 {
    let bytes = write(m).unwrap();
    assert_matches_reference(m, &bytes, &rows(m.features.len()));
    Model::load(&bytes).unwrap().ensemble().header_flags()
}

#[test]
fn every_depth_scores_exactly() {
    for depth in 1..=10 {
        let trees: Vec<Tree> = (0..12).map(|s| oblivious(0, depth, s, |_| None)).collect();
        // 3 inputs: NaN-low columns; 40: too few levels for them, the NaN-aware walk.
        for n_features in [3, 40] {
            let written = assert_scores_as_reference(&classifier(&format!("depth{depth}"), numeric(n_features), trees.clone(), 1));
            assert_eq!(written & flags::NAN_LOW_COLUMNS != 0, n_features == 3, "depth {depth}, {n_features} inputs: flags {written:#x}");
        }
    }
}

#[test]
fn mixed_depths_and_several_outputs_score_exactly() {
    let trees: Vec<Tree> = (0..30).map(|s| oblivious(0, 1 + s % 10, s, |_| None)).collect();
    assert_scores_as_reference(&classifier("mixed", numeric(3), trees, 1));
    let trees = (0..30).map(|s| oblivious((s % 3) as u32, 3 + s % 7, s, |_| None)).collect();
    assert_scores_as_reference(&classifier("classes", numeric(40), trees, 3));
}

#[test]
fn node_trees_then_oblivious_trees_add_in_order() {
    // Node trees first (the format's order), then oblivious ones of an unrolled depth: the
    // single output's sum carries on from the node trees' into the oblivious trees'.
    let mut trees: Vec<Tree> = (0..11)
        .map(|s| Tree {
            output: 0,
            nodes: vec![
                split(s % 3, Test::Lt(s as f64 - 4.0), s % 2 == 0, 1, 2),
                leaf(s as f64 * 3.0),
                split((s + 1) % 3, Test::Lt(1.5), false, 3, 4),
                leaf(-(s as f64)),
                leaf(s as f64 + 0.5),
            ],
        })
        .collect();
    trees.extend((0..9).map(|s| oblivious(0, 6, s, |_| None)));
    for n_features in [3, 40] {
        assert_scores_as_reference(&classifier("node_then_oblivious", numeric(n_features), trees.clone(), 1));
    }
}

#[test]
fn set_and_equality_levels_score_exactly() {
    // A `Member` level takes the categorical copy of the walk; an `Eq` level the rare tests'
    // (which keeps the loop at every depth).
    for depth in [3, 5, 6, 8, 9] {
        let member = (0..8).map(|s| oblivious(0, depth, s, |k| (k == 1).then(|| Test::Member { categories: vec![0, 2, 3, 7] }))).collect();
        let written = assert_scores_as_reference(&classifier("member", numeric(40), member, 1));
        assert_ne!(written & flags::HAS_CATEGORICAL, 0);
        let eq = (0..8).map(|s| oblivious(0, depth, s, |k| (k == 2).then_some(Test::Eq(2.0)))).collect();
        let written = assert_scores_as_reference(&classifier("eq", numeric(40), eq, 1));
        assert_ne!(written & flags::HAS_RARE_TESTS, 0);
    }
}
