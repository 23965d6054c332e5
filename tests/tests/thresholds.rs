//! f64 thresholds (LightGBM, ONNX doubles) against f32 inputs: every f32 around a threshold
//! takes the branch the f64 comparison takes, for every comparison operator.

use edgescore_compile::ir::{Node, Test, Tree};
use edgescore_compile::write::write;
use edgescore_tests::ir_build::regression;
use edgescore_core::Model;

fn one_split(test: Test, missing_yes: bool) -> Tree {
    Tree {
        output: 0,
        nodes: vec![
            Node::Split { feature: 0, test, missing_yes, yes: 1, no: 2 },
            Node::Leaf { value: 1.0 },
            Node::Leaf { value: -1.0 },
        ],
    }
}

fn neighbourhood(t: f64) -> Vec<f32> {
    let c = t as f32;
    let mut v = vec![c, c.next_up(), c.next_down(), c.next_up().next_up(), c.next_down().next_down()];
    v.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN, f32::NAN, 1e-36, -1e-36, f32::from_bits(1)]);
    v
}

#[test]
fn every_operator_at_awkward_thresholds() {
    let thresholds = [
        0.1, 0.5, -0.5, 1.0 / 3.0, 0.0, -0.0, 1e300, -1e300, f64::INFINITY, f64::NEG_INFINITY, f32::MAX as f64,
        f32::MAX as f64 * 1.5, 1e-40, 1.0000000000000002, 0.30000001192092896, 0.300000011920929,
    ];
    let mut checked = 0;
    for &t in &thresholds {
        let mut tests = vec![Test::Lt(t), Test::Le(t), Test::Gt(t), Test::Ge(t), Test::Eq(t), Test::Ne(t)];
        if t.is_finite() {
            tests.push(Test::LeZeroAsMissing(t));
        }
        for test in tests {
            for missing_yes in [false, true] {
                let tree = one_split(test.clone(), missing_yes);
                let ir = regression(vec![tree.clone()], 1, 1);
                let m = Model::load(&write(&ir).unwrap()).unwrap();
                for x in neighbourhood(t) {
                    let mut got = [0f64];
                    m.ensemble().margins(&[x], &mut got).unwrap();
                    let want = tree.leaf_value(&[x]) + 0.25;
                    assert_eq!(got[0], want, "{test:?} missing_yes={missing_yes} x={x:e} ({:#x})", x.to_bits());
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 2000);
}
