//! The lockstep walk of leaf-wise trees: a group of trees deeper than their leaf count needs
//! checks partway down whether every tree has reached its leaf, and stops there if so, else
//! checks again 2, 4, ... levels further (`TreeEnsemble::walk_group`; the rows below end the
//! spines, 2 to 14 deep, before, at and between those checks). Rows that stop early, rows that
//! go on, and rows where only some trees of a group are done must all score exactly as the
//! IR's reference reading. The trees past the last full group are walked with it, in one
//! group of up to 16 lanes (an even count: an extra lane walks the last tree again), and
//! alone when there is no full group (in wasm, also after two or more): every count of them
//! too.

use edgescore_compile::ir::{self, ModelIr, Test, Tree};
use edgescore_compile::write::write;
use edgescore_tests::ir_build::{assert_matches_reference, classifier, numeric};

/// A spine of `depth` splits on `feature`: split i sends `x < threshold_i` to a leaf and the
/// rest on down, as LightGBM's leaf-wise growth makes them (depth + 1 leaves, depth splits).
/// Thresholds rise, so small values stop at the top and large ones go to the bottom.
fn spine(output: u32, feature: u32, depth: u32, first: f64, value_base: f64, missing_yes: bool) -> Tree {
    let mut nodes = Vec::new();
    for i in 0..depth {
        let at = nodes.len() as u32;
        // Split at `at`, its yes leaf at `at + 1`, the next split (or the last leaf) at `at + 2`.
        nodes.push(ir::Node::Split { feature, test: Test::Lt(first + i as f64), missing_yes: missing_yes ^ (i % 3 == 0), yes: at + 1, no: at + 2 });
        nodes.push(ir::Node::Leaf { value: value_base + i as f64 });
    }
    nodes.push(ir::Node::Leaf { value: value_base + depth as f64 });
    Tree { output, nodes }
}

/// `n_trees` spines of assorted depths (2 to 14) on 3 features: more than one group of
/// lockstep lanes plus a remainder, groups mixing trees that stop early and trees that don't.
fn spines(n_trees: u32, n_outputs: u32) -> ModelIr {
    let trees = (0..n_trees)
        .map(|t| spine(t % n_outputs, t % 3, 2 + (t * 5) % 13, (t % 4) as f64 - 1.0, 100.0 * t as f64, t % 2 == 0))
        .collect();
    classifier("spines", numeric(3), trees, n_outputs)
}

fn assert_scores_as_reference(m: &ModelIr) {
    let values = [f32::NEG_INFINITY, -2.0, -0.5, 0.0, 0.5, 1.5, 3.0, 6.5, 9.0, 12.5, 20.0, f32::NAN];
    let mut rows = Vec::new();
    for a in values {
        for b in values {
            rows.extend(values.map(|c| vec![a, b, c]));
        }
    }
    // Leaf values are integers: every order of summing them is exact.
    assert_matches_reference(m, &write(m).unwrap(), &rows);
}

#[test]
fn spines_score_exactly_whether_the_group_stops_early_or_not() {
    for n_trees in [8, 19, 40] {
        assert_scores_as_reference(&spines(n_trees, 1));
    }
}

#[test]
fn every_count_of_trees_past_the_last_full_group_scores_exactly() {
    // 1 to 7 trees alone, then 8 plus each remainder, then two full groups plus each.
    for n_trees in (1..=15).chain(17..=23) {
        assert_scores_as_reference(&spines(n_trees, 1));
    }
}

#[test]
fn spines_of_several_outputs_score_exactly() {
    assert_scores_as_reference(&spines(27, 3));
}
