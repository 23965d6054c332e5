//! Random models with every kind of test, compiled and evaluated, agree with the reference
//! evaluator that reads the IR literally (f64 comparisons, no normalisation), row for row.

use edgescore_compile::write::write;
use edgescore_tests::ir_build::regression;
use edgescore_tests::random_ir::{random_row, random_tree, test_seed, Rng};
use edgescore_core::Model;

#[test]
fn compiled_models_agree_with_the_ir() {
    let seed = test_seed(0x2545f4914f6cdd1d);
    let mut rng = Rng::new(seed);
    for round in 0..300 {
        let n_features = 1 + rng.below(6) as u32;
        let n_outputs = 1 + rng.below(3) as usize;
        let n_trees = 1 + rng.below(40) as usize;
        let depth = rng.below(9) as u32;
        let trees = (0..n_trees).map(|t| random_tree(&mut rng, n_features, depth, (t % n_outputs) as u32)).collect();
        let ir = regression(trees, n_features as usize, n_outputs);
        let bytes = write(&ir).unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
        let m = Model::load(&bytes).unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
        let e = m.ensemble();
        let mut got = vec![0f64; n_outputs];
        for _ in 0..50 {
            let row = random_row(&mut rng, n_features as usize);
            e.margins(&row, &mut got).unwrap();
            let want = ir.margins(&row);
            for o in 0..n_outputs {
                // Trees are summed in another order (deepest first): allow f64 rounding only.
                assert!((got[o] - want[o]).abs() <= 1e-12 * (1.0 + want[o].abs()), "seed {seed} round {round} row {row:?}: {got:?} vs {want:?}");
            }
        }
    }
}

#[test]
fn single_tree_is_bitwise_exact() {
    // One tree per output: no reordering, so the sums must be identical to the bit.
    let seed = test_seed(7);
    let mut rng = Rng::new(seed);
    for _ in 0..2000 {
        let tree = random_tree(&mut rng, 3, 6, 0);
        let ir = regression(vec![tree], 3, 1);
        let m = Model::load(&write(&ir).unwrap()).unwrap();
        let mut got = [0f64];
        for _ in 0..20 {
            let row = random_row(&mut rng, 3);
            m.ensemble().margins(&row, &mut got).unwrap();
            assert_eq!(got[0].to_bits(), ir.margins(&row)[0].to_bits(), "seed {seed} row {row:?}");
        }
    }
}
