//! NaN-low columns (format 4): a `x < t` test whose missing values go to its yes side reads
//! its input with NaN as −∞, so rows with missing values take the walk without NaN tests. The
//! artifact must score every row exactly as the IR's reference reading does, whichever tests
//! moved to a column and whichever kept their NaN test.

use edgescore_compile::inspect;
use edgescore_compile::ir::{self, FeatureKind, ModelIr, Test, Tree};
use edgescore_compile::write::write;
use edgescore_core::artifact::layout::*;
use edgescore_core::Model;
use edgescore_tests::artifact_edit::assert_column_flag_checked;
use edgescore_tests::ir_build::{self, format_version, leaf, numeric, split};

/// Comparisons only, NaN going either way, and `x < −∞` with NaN to the yes side (a test for
/// "missing"): every test that must see NaN can move to a column. Its trees twice over: the
/// writer wants 4 tree levels per input before a row of columns pays (14 levels, 3 inputs).
fn comparison_model() -> ModelIr {
    let mut m = comparison_trees();
    m.trees.extend(m.trees.clone());
    m
}

fn comparison_trees() -> ModelIr {
    let trees = vec![
        Tree { output: 0, nodes: vec![split(0, Test::Lt(0.5), true, 1, 2), split(1, Test::Le(-1.0), false, 3, 4), leaf(2.0), leaf(-1.0), leaf(0.25)] },
        Tree { output: 0, nodes: vec![split(1, Test::Gt(0.0), true, 1, 2), leaf(0.5), split(0, Test::Ge(3.0), true, 3, 4), leaf(4.0), leaf(-4.0)] },
        Tree { output: 0, nodes: vec![split(2, Test::Lt(f64::NEG_INFINITY), true, 1, 2), leaf(8.0), leaf(-8.0)] },
        Tree { output: 0, nodes: vec![split(2, Test::Lt(-f32::MAX as f64 * 0.5), true, 1, 2), leaf(16.0), split(0, Test::Lt(1.0), false, 3, 4), leaf(32.0), leaf(-32.0)] },
    ];
    ModelIr::binary_logistic("cmp", numeric(3), trees)
}

/// Tests that must see NaN and cannot move: a set and zero-as-missing with NaN to the yes
/// side, beside comparisons that could.
fn mixed_model() -> ModelIr {
    let mut m = comparison_model();
    m.features[2].kind = FeatureKind::Categorical { buckets: 4 };
    m.trees.push(Tree { output: 0, nodes: vec![split(2, Test::InSet { categories: vec![0, 2], invalid_at_or_below: -1.0 }, true, 1, 2), leaf(64.0), leaf(-64.0)] });
    m.trees.push(Tree { output: 0, nodes: vec![split(0, Test::LeZeroAsMissing(0.0), true, 1, 2), leaf(128.0), leaf(-128.0)] });
    m
}

fn rows(n_features: usize) -> Vec<Vec<f32>> {
    let vals = [f32::NEG_INFINITY, -f32::MAX, -f32::MAX * 0.5, -2.0, -1.0, -0.0, 0.0, 1e-36, 0.5, 1.0, 3.0, f32::INFINITY, f32::NAN];
    let mut out = Vec::new();
    for a in vals {
        for b in vals {
            for c in vals {
                let mut row = vec![a, b, c];
                row.resize(n_features, f32::NAN);
                out.push(row);
            }
        }
    }
    out
}

fn assert_matches_reference(m: &ModelIr, bytes: &[u8]) {
    ir_build::assert_matches_reference(m, bytes, &rows(m.features.len()));
}

#[test]
fn missing_goes_yes_tests_read_columns_and_score_exactly() {
    let m = comparison_model();
    let bytes = write(&m).unwrap();
    let e = Model::load(&bytes).unwrap();
    let e = e.ensemble();
    assert_eq!(format_version(&bytes), 4);
    assert_ne!(e.header_flags() & flags::NAN_LOW_COLUMNS, 0);
    // Columns start after the three inputs. Tests whose NaN goes yes read a column (`x < −∞`
    // as `column < −f32::MAX`); the others read their input.
    let low = nan_low_start(3, 0) as u16;
    let mut moved = 0;
    for n in e.nodes().iter().filter(|n| n.flags & node::LEAF == 0) {
        assert_eq!(n.feature >= low, n.flags & node::MISSING_YES != 0, "{n:?}");
        assert_eq!(e.tested_feature(n.feature), (n.feature % low) as usize);
        assert_ne!(f32::from_bits(n.payload), f32::NEG_INFINITY, "{n:?}");
        moved += usize::from(n.feature >= low);
    }
    // `Gt` and `Ge` with NaN to the yes side are negated `x < t` tests, NaN to the no side.
    assert_eq!(moved, 6);
    assert_matches_reference(&m, &bytes);
}

#[test]
fn tests_that_must_see_nan_keep_the_inputs() {
    // A set and a zero-as-missing test with NaN to the yes side: columns would not spare the
    // NaN-aware walk, so the model is written without them, in the lowest format.
    let m = mixed_model();
    ir_build::assert_written_as(&m, 1, &rows(m.features.len()));
    // So is a model with too few tree levels to repay the row of columns (7 levels, 3 inputs).
    let small = comparison_trees();
    ir_build::assert_written_as(&small, 1, &rows(small.features.len()));
    // And `x < −f32::MAX` with NaN to the yes side: on a column, −∞ would pass it too.
    let mut edge = comparison_model();
    edge.trees.push(Tree { output: 0, nodes: vec![split(1, Test::Lt(-f32::MAX as f64), true, 1, 2), leaf(64.0), leaf(-64.0)] });
    ir_build::assert_written_as(&edge, 1, &rows(edge.features.len()));
}

#[test]
fn columns_are_validated() {
    let good = write(&comparison_model()).unwrap();
    assert_column_flag_checked(&good, flags::NAN_LOW_COLUMNS, 3..6, 3, 3);
}

#[test]
fn numeric_models_with_missing_values_score_exactly() {
    // The common case: only `x < t` tests, half of them NaN-to-yes; rows full of NaN and
    // infinities take the walk without NaN tests.
    let tree = |t: f64, s: f64| Tree {
        output: 0,
        nodes: vec![
            split(0, Test::Lt(t), true, 1, 2),
            split(1, Test::Lt(-t), false, 3, 4),
            split(2, Test::Le(t), true, 5, 6),
            leaf(s),
            leaf(2.0 * s),
            leaf(-s),
            leaf(0.5 * s),
        ],
    };
    let m = ModelIr::binary_logistic("num", numeric(3), (0..11).map(|k| tree(k as f64 - 5.0, (1u64 << k) as f64)).collect());
    ir_build::assert_written_as(&m, 4, &rows(m.features.len()));
}

#[test]
fn too_many_features_for_columns_keep_their_nan_tests() {
    // 600 inputs: with 600 columns the row would pass MAX_CTR_ROW, so the writer keeps the
    // NaN tests and the lowest format that holds the model.
    let n = 600;
    assert!(2 * n > MAX_CTR_ROW as usize);
    let m = ModelIr::binary_logistic("wide", numeric(n), vec![Tree { output: 0, nodes: vec![split(599, Test::Lt(0.5), true, 1, 2), leaf(1.0), leaf(-1.0)] }]);
    let bytes = write(&m).unwrap();
    assert_eq!(format_version(&bytes), 1);
    let model = Model::load(&bytes).unwrap();
    let mut out = [0f64];
    let mut row = vec![0.0f32; n];
    row[599] = f32::NAN;
    model.ensemble().margins(&row, &mut out).unwrap();
    assert_eq!(out, [1.0]);
    row[599] = 1.0;
    model.ensemble().margins(&row, &mut out).unwrap();
    assert_eq!(out, [-1.0]);
}

#[test]
fn inspect_counts_a_column_split_on_its_input() {
    let bytes = write(&comparison_model()).unwrap();
    let model = Model::load(&bytes).unwrap();
    let report = inspect::report(&model.ensemble());
    let used: Vec<(String, usize)> = report.features_used.iter().map(|f| (f.name.clone(), f.splits)).collect();
    assert_eq!(used, [("f0".to_string(), 6), ("f1".to_string(), 4), ("f2".to_string(), 4)]);
}

#[test]
fn an_older_fleet_gets_an_older_format() {
    // `compile --max-format 3`: the same model without columns, scoring the same; a model that
    // needs a newer format than asked for is refused with what needs it.
    let m = comparison_model();
    let bytes = edgescore_compile::write::write_for(&m, 3).unwrap();
    assert_eq!(format_version(&bytes), 1);
    let e = Model::load(&bytes).unwrap();
    assert_eq!(e.ensemble().header_flags() & flags::NAN_LOW_COLUMNS, 0);
    assert_matches_reference(&m, &bytes);
    let mut vector = m.clone();
    vector.trees[0].nodes[2] = ir::Node::VectorLeaf { values: vec![2.0] };
    vector.trees[0].nodes[3] = ir::Node::VectorLeaf { values: vec![-1.0] };
    vector.trees[0].nodes[4] = ir::Node::VectorLeaf { values: vec![0.25] };
    let err = edgescore_compile::write::write_for(&vector, 1).unwrap_err().to_string();
    assert!(err.contains("need format 2, above the highest format asked for (1)"), "{err}");
    let err = edgescore_compile::write::write_for(&m, 9).unwrap_err().to_string();
    assert!(err.contains("format 9"), "{err}");
}
