//! QuickScorer's bitvectors (`core/src/ensemble/bitvectors.rs`): rows far out on every feature
//! scan a few tests per feature instead of walking every tree. They must score every row
//! exactly as the lockstep walk does, bit for bit (same leaves, same order of sums), on every
//! model they accept; the cost model must take them only where they can gain; and models
//! they cannot score (categorical tests, more than 64 leaves) must be left to the walk.

use edgescore_compile::ir::{self, ModelIr, Test, Tree};
use edgescore_compile::write::write;
use edgescore_core::{Model, TreeEnsemble};
use edgescore_tests::fixtures;
use edgescore_tests::ir_build::{classifier, leaf, numeric, split};

/// Bits of `e`'s margins for `row`.
fn margins(e: &TreeEnsemble, row: &[f32]) -> Vec<u64> {
    let mut out = vec![0f64; e.n_outputs()];
    e.margins(row, &mut out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

fn assert_same_as_walk(name: &str, model: &Model, rows: &[Vec<f32>]) {
    let walk_only = model.clone().without_bitvectors();
    let walk = walk_only.ensemble();
    assert!(!walk.uses_bitvectors());
    let e = model.ensemble();
    for row in rows {
        assert_eq!(margins(&e, row), margins(&walk, row), "{name}: row {row:?}");
    }
}

/// Rows far out on every feature (both ways, and at the extremes), rows with one feature far
/// out and the rest at the fixture's values, and the fixture's rows themselves.
fn far_rows(base: &[Vec<f32>], n: usize) -> Vec<Vec<f32>> {
    let mut rows = base.to_vec();
    for v in [f32::NEG_INFINITY, -f32::MAX, -1e30, -1e6, -1.0, 0.0, -0.0, 1.0, 1e6, 1e30, f32::MAX, f32::INFINITY, f32::NAN] {
        rows.push(vec![v; n]);
        for r in base.iter().take(5) {
            for f in 0..n {
                let mut row = r.clone();
                row[f] = v;
                rows.push(row);
            }
        }
    }
    rows
}

#[test]
fn every_fixture_scores_as_the_walk_with_bitvectors_on_every_row() {
    let mut scanned = Vec::new();
    for f in fixtures("") {
        let model = f.compile().unwrap().with_bitvectors_on_every_row();
        let rows = f.rows(&model).unwrap();
        let n = model.ensemble().n_features();
        if model.ensemble().uses_bitvectors() {
            scanned.push(f.name.clone());
        }
        assert_same_as_walk(&f.name, &model, &far_rows(&rows, n));
    }
    // Plain numeric models of every library: XGBoost, LightGBM, sklearn via ONNX.
    for prefix in ["xgb_binary", "lgb_binary", "lgb_multiclass", "xgb_multiclass", "onnx_rf_regressor", "lgb_zero_missing"] {
        assert!(scanned.iter().any(|s| s == prefix), "{prefix} is not scored through bitvectors: {scanned:?}");
    }
}

/// LightGBM-like spines (split i sends `x < t_i` to a leaf, the rest on down): deep trees on
/// few features, the shape the cost model gives bitvectors to.
fn spines(n_trees: u32, n_outputs: u32, depth: u32) -> ModelIr {
    let trees = (0..n_trees)
        .map(|t| {
            let mut nodes = Vec::new();
            for i in 0..depth {
                let at = nodes.len() as u32;
                let threshold = ((t * 7 + i * 3) % 40) as f64 * 0.5 - 10.0;
                nodes.push(ir::Node::Split { feature: (t + i) % 3, test: Test::Lt(threshold), missing_yes: (t + i) % 4 == 0, yes: at + 1, no: at + 2 });
                nodes.push(ir::Node::Leaf { value: (t * 64 + i) as f64 });
            }
            nodes.push(ir::Node::Leaf { value: (t * 64 + depth) as f64 });
            Tree { output: t % n_outputs, nodes }
        })
        .collect();
    classifier("spines", numeric(3), trees, n_outputs)
}

fn grid() -> Vec<Vec<f32>> {
    let values = [f32::NEG_INFINITY, -30.0, -10.0, -9.5, -3.25, 0.0, 0.5, 4.0, 9.5, 10.0, 30.0, f32::INFINITY, f32::NAN];
    let mut rows = Vec::new();
    for a in values {
        for b in values {
            rows.extend(values.map(|c| vec![a, b, c]));
        }
    }
    rows
}

#[test]
fn the_cost_model_takes_bitvectors_for_deep_trees_on_few_features_and_they_score_exactly() {
    // Up to 64 trees, then the larger stack table; one output and several.
    for (n_trees, n_outputs) in [(40, 1), (200, 1), (90, 3)] {
        let m = spines(n_trees, n_outputs, 30);
        let model = Model::load(&write(&m).unwrap()).unwrap();
        assert!(model.ensemble().uses_bitvectors(), "{n_trees} spines of 30 splits on 3 features");
        let rows = grid();
        assert_same_as_walk("spines", &model, &rows);
        // And both equal the IR's reference reading (integer leaves: every sum is exact).
        let e = model.ensemble();
        let mut out = vec![0f64; e.n_outputs()];
        for row in &rows {
            e.margins(row, &mut out).unwrap();
            assert_eq!(out, m.margins(row), "row {row:?}");
        }
    }
}

#[test]
fn the_cost_model_leaves_shallow_trees_on_many_features_to_the_walk() {
    // Depth-2 trees on 30 features: a row checks more columns than the walk takes levels.
    let features = numeric(30);
    let trees = (0..10u32)
        .map(|t| {
            let lt = |feature, yes, no| split(feature, Test::Lt(0.5), false, yes, no);
            let nodes = vec![lt(t, 1, 2), lt(t + 10, 3, 4), lt(t + 20, 5, 6), leaf(1.0), leaf(2.0), leaf(3.0), leaf(4.0)];
            Tree { output: 0, nodes }
        })
        .collect();
    let m = ModelIr::binary_logistic("shallow", features, trees);
    let bytes = write(&m).unwrap();
    assert!(!Model::load(&bytes).unwrap().ensemble().uses_bitvectors());
    // Forced, they still score as the walk.
    let forced = Model::load(&bytes).unwrap().with_bitvectors_on_every_row();
    assert!(forced.ensemble().uses_bitvectors());
    let rows: Vec<Vec<f32>> = (0..64).map(|r| (0..30).map(|f| if (r >> (f % 6)) & 1 == 1 { 1.0 } else { 0.0 }).collect()).collect();
    assert_same_as_walk("shallow", &forced, &rows);
}

#[test]
fn trees_of_more_than_64_leaves_and_categorical_models_are_left_to_the_walk() {
    // A spine of 64 splits has 65 leaves.
    let m = spines(8, 1, 64);
    let model = Model::load(&write(&m).unwrap()).unwrap().with_bitvectors_on_every_row();
    assert!(!model.ensemble().uses_bitvectors(), "65 leaves fit no u64");
    // 63 splits, 64 leaves: the most a tree may have.
    let m = spines(8, 1, 63);
    let model = Model::load(&write(&m).unwrap()).unwrap().with_bitvectors_on_every_row();
    assert!(model.ensemble().uses_bitvectors());
    assert_same_as_walk("64 leaves", &model, &grid());
    for f in fixtures("lgb_categorical").into_iter().chain(fixtures("xgb_categorical")) {
        let model = f.compile().unwrap().with_bitvectors_on_every_row();
        assert!(!model.ensemble().uses_bitvectors(), "{}: categorical tests", f.name);
    }
}
