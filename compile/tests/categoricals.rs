//! Categorical splits: XGBoost's (x < 0 invalid) and LightGBM's (trunc(x) < 0 invalid) rules,
//! fractional codes, codes past the bitset, huge values, NaN.

mod common;
use common::*;
use edgescore_compile::ir::{Node, Test, Tree};
use edgescore_compile::write::write;
use edgescore_core::Model;

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
                let ir = model(vec![tree.clone()], 1, 1);
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
