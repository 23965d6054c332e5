//! Category sets (`IN_SET`: `trunc(x)` in the set; `MEMBER`: `x` an integer in the set): every
//! kind of value, below, inside, at the edges of and past a set's bitset, scores exactly as
//! the IR's reference reading, in every lockstep group size and mixed with threshold tests. The
//! walk tests a set without a branch on the value (`TreeEnsemble::in_set`: a clamped code, and
//! a value outside the set reads a word of zeros), so every edge is worth a row here
//! (`edgescore_tests::category_sets`; the same models in wasm: `wasm_scores.rs`). Codes of
//! 2^31 and above are refused by the writer (`MAX_SET_WORDS`). One set test alone covers
//! XGBoost's (x < 0 invalid) and LightGBM's (trunc(x) < 0 invalid) rules on fractional codes,
//! codes past the bitset, huge values and NaN, with either side for missing values.

use edgescore_compile::ir::{Node, Test, Tree};
use edgescore_compile::write::write;
use edgescore_core::Model;
use edgescore_tests::category_sets::{edge_rows, model, tree_counts};
use edgescore_tests::ir_build::{assert_matches_reference, classifier, leaf, numeric, regression, split};

fn assert_scores_as_reference(n_trees: u32, member: bool) {
    let m = model(n_trees, member);
    // Leaf values are powers of two: every order of summing them is exact.
    assert_matches_reference(&m, &write(&m).unwrap(), &edge_rows());
}

#[test]
fn in_set_scores_every_edge_value_exactly_in_every_group_size() {
    for n_trees in tree_counts() {
        assert_scores_as_reference(n_trees, false);
    }
}

#[test]
fn member_scores_every_edge_value_exactly_in_every_group_size() {
    for n_trees in tree_counts() {
        assert_scores_as_reference(n_trees, true);
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

#[test]
fn set_membership_edges() {
    let inputs = [
        -2.0f32, -1.0, -0.99, -0.5, -0.0, 0.0, 0.5, 0.99, 1.0, 1.5, 2.0, 31.0, 32.0, 33.0, 63.0, 64.0, 95.0, 1e6, 1e10,
        4294967295.0, 4294967296.0, 1e30, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::from_bits(1),
    ];
    for invalid_at_or_below in [-1.0, -f32::from_bits(1)] {
        for categories in [vec![], vec![0], vec![1, 32, 63], vec![0, 31, 32, 95], vec![5]] {
            for missing_yes in [false, true] {
                let tree = Tree {
                    output: 0,
                    nodes: vec![
                        Node::Split {
                            feature: 0,
                            test: Test::InSet { categories: categories.clone(), invalid_at_or_below },
                            missing_yes,
                            yes: 1,
                            no: 2,
                        },
                        Node::Leaf { value: 1.0 },
                        Node::Leaf { value: -1.0 },
                    ],
                };
                let ir = regression(vec![tree.clone()], 1, 1);
                let m = Model::load(&write(&ir).unwrap()).unwrap();
                for x in inputs {
                    let mut got = [0f64];
                    m.ensemble().margins(&[x], &mut got).unwrap();
                    assert_eq!(got[0], tree.leaf_value(&[x]) + 0.25, "{categories:?} invalid<={invalid_at_or_below} x={x}");
                }
            }
        }
    }
}
