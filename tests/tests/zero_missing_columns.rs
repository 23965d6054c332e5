//! Zero-as-missing columns (format 5): LightGBM's zero-as-missing tests read their input with
//! "missing" (NaN or `|x| <= 1e-35`) already sent to their side, as plain `x < t` tests, so the
//! model takes the walk without NaN or zero tests. The artifact must score every row exactly as
//! the IR's reference reading does.

use edgescore_compile::ir::{ModelIr, Test, Tree};
use edgescore_compile::write::{write, write_for};
use edgescore_core::artifact::layout::*;
use edgescore_core::Model;
use edgescore_tests::artifact_edit::assert_column_flag_checked;
use edgescore_tests::ir_build::{self, format_version, leaf, numeric, split};

/// LightGBM's zero-as-missing splits, missing going either way, thresholds around zero and the
/// extremes, beside a plain comparison whose NaN goes yes (a NaN-low column). Leaf values are
/// distinct powers of two: every order of summing them is exact, and a wrong leaf shows. Enough
/// trees for the writer's 4 levels per input (3 inputs).
fn zero_missing_model() -> ModelIr {
    let tests = [
        (Test::LeZeroAsMissing(0.0), true),
        (Test::LeZeroAsMissing(0.0), false),
        (Test::LeZeroAsMissing(-1.0), true),
        (Test::LeZeroAsMissing(2.5), false),
        (Test::LeZeroAsMissing(-1e-36), true),
        (Test::LeZeroAsMissing(1e-36), false),
        (Test::LeZeroAsMissing(f32::MAX as f64), true),
        (Test::LeZeroAsMissing(-f32::MAX as f64 * 0.5), false),
    ];
    let mut trees = Vec::new();
    let mut k = 0;
    for (i, (test, yes)) in tests.iter().enumerate() {
        let f = (i % 3) as u32;
        let mut value = || {
            k += 1;
            (1u64 << k) as f64
        };
        let (a, b, c, d) = (value(), value(), value(), value());
        trees.push(Tree {
            output: 0,
            nodes: vec![
                split(f, test.clone(), *yes, 1, 2),
                split((f + 1) % 3, Test::LeZeroAsMissing(0.5), !yes, 3, 4),
                split((f + 2) % 3, Test::Lt(1.0), true, 5, 6),
                leaf(a),
                leaf(-a),
                leaf(b + c),
                leaf(-d),
            ],
        });
    }
    ModelIr::binary_logistic("zero", numeric(3), trees)
}

fn rows() -> Vec<Vec<f32>> {
    let vals = [f32::NEG_INFINITY, -f32::MAX, -1.0, -1e-35, -1e-36, -0.0, 0.0, 1e-36, 1e-35, 1.0000001e-35, 0.5, 2.5, f32::MAX, f32::INFINITY, f32::NAN];
    let mut out = Vec::new();
    for a in vals {
        for b in vals {
            for c in vals {
                out.push(vec![a, b, c]);
            }
        }
    }
    out
}

fn assert_matches_reference(m: &ModelIr, bytes: &[u8]) {
    ir_build::assert_matches_reference(m, bytes, &rows());
}

#[test]
fn zero_as_missing_tests_read_columns_and_score_exactly() {
    let m = zero_missing_model();
    let bytes = write(&m).unwrap();
    assert_eq!(format_version(&bytes), 5);
    let model = Model::load(&bytes).unwrap();
    let e = model.ensemble();
    // No test is left that needs to see zero or NaN: the plain walk.
    assert_eq!(e.header_flags() & (flags::HAS_RARE_TESTS | flags::HAS_CATEGORICAL), 0);
    assert_ne!(e.header_flags() & flags::ZERO_MISSING_COLUMNS, 0);
    assert_ne!(e.header_flags() & flags::NAN_LOW_COLUMNS, 0);
    let (low, zero) = (nan_low_start(3, 0) as u16, zero_low_start(3, 0) as u16);
    let mut columns = [0usize; 3];
    for n in e.nodes().iter().filter(|n| n.flags & node::LEAF == 0) {
        assert_eq!(n.flags & node::OP_MASK, node::OP_LT, "{n:?}");
        assert!(n.feature >= low, "{n:?}: a test on an input is left");
        assert_eq!(e.tested_feature(n.feature), (n.feature % 3) as usize);
        columns[((n.feature - low) / 3) as usize] += 1;
        // Missing to the yes side reads the −∞ column, to the no side the +∞ one.
        if n.feature >= zero {
            assert_eq!(n.feature < zero + 3, n.flags & node::MISSING_YES != 0, "{n:?}");
        }
    }
    assert_eq!(columns, [8, 8, 8]);
    assert_matches_reference(&m, &bytes);
}

#[test]
fn an_older_fleet_or_a_test_that_cannot_move_keeps_the_zero_tests() {
    let m = zero_missing_model();
    // `compile --max-format 4`: no zero-as-missing columns, and so no NaN-low columns either
    // (the zero tests still see NaN).
    let bytes = write_for(&m, 4).unwrap();
    assert_eq!(format_version(&bytes), 1);
    assert_ne!(Model::load(&bytes).unwrap().ensemble().header_flags() & flags::HAS_RARE_TESTS, 0);
    assert_matches_reference(&m, &bytes);
    // `x <= −f32::MAX` with missing to the yes side: on a column, −∞ (read as −f32::MAX)
    // would pass it too.
    let mut edge = m.clone();
    edge.trees.push(Tree { output: 0, nodes: vec![split(0, Test::LeZeroAsMissing(f64::NEG_INFINITY), true, 1, 2), leaf(-1.0), leaf(1.0)] });
    ir_build::assert_written_as(&edge, 1, &rows());
    // An equality test on an input sees NaN and has no column: the walk must test NaN anyway.
    let mut eq = m.clone();
    eq.trees.push(Tree { output: 0, nodes: vec![split(1, Test::Eq(0.5), false, 1, 2), leaf(-1.0), leaf(1.0)] });
    ir_build::assert_written_as(&eq, 1, &rows());
}

#[test]
fn zero_columns_are_validated() {
    let good = write(&zero_missing_model()).unwrap();
    assert_column_flag_checked(&good, flags::ZERO_MISSING_COLUMNS, 9..12, 6, 4);
}
