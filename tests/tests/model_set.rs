//! Several models over one shared feature vector: each model reads its own features by name,
//! whatever order the shared vector keeps them in, and scores as it does alone.

use edgescore_core::ModelSet;
use edgescore_tests::fixtures;

#[test]
fn models_share_one_feature_vector() {
    let fx = fixtures("xgb_binary").pop().unwrap();
    let lg = fixtures("lgb_binary").pop().unwrap();
    let (a, b) = (fx.compile().unwrap(), lg.compile().unwrap());
    let (ea, eb) = (a.ensemble(), b.ensemble());
    // The shared vector: every feature of both models, reversed, plus an unused slot.
    let mut names: Vec<String> = (0..ea.n_features()).map(|i| ea.feature_name(i).to_string()).collect();
    for i in 0..eb.n_features() {
        let n = eb.feature_name(i).to_string();
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names.push("unused".into());
    names.reverse();
    let mut set = ModelSet::new(names.clone());
    let ia = set.push(a.as_bytes()).unwrap();
    let ib = set.push(b.as_bytes()).unwrap();

    let (rows_a, rows_b) = (fx.rows(&a).unwrap(), lg.rows(&b).unwrap());
    for (ra, rb) in rows_a.iter().zip(&rows_b) {
        let mut shared = vec![f32::NAN; names.len()];
        let mut taken = vec![false; names.len()];
        for (i, v) in ra.iter().enumerate() {
            let slot = names.iter().position(|n| n == ea.feature_name(i)).unwrap();
            shared[slot] = *v;
            taken[slot] = true;
        }
        // Model b alone sees its own row; in the set it sees a's values where names collide,
        // so build b's expectation from the shared vector.
        for (i, v) in rb.iter().enumerate() {
            let slot = names.iter().position(|n| n == eb.feature_name(i)).unwrap();
            if !taken[slot] {
                shared[slot] = *v;
            }
        }
        let b_row: Vec<f32> = (0..eb.n_features()).map(|i| shared[names.iter().position(|n| n == eb.feature_name(i)).unwrap()]).collect();
        let (mut alone, mut together) = ([0f32; 1], [0f32; 1]);
        ea.score(ra, &mut alone).unwrap();
        set.score(ia, &shared, &mut together).unwrap();
        assert_eq!(alone, together);
        eb.score(&b_row, &mut alone).unwrap();
        set.score(ib, &shared, &mut together).unwrap();
        assert_eq!(alone, together);
    }
}

#[test]
fn unknown_feature_is_refused_by_name() {
    let fx = fixtures("xgb_binary").pop().unwrap();
    let m = fx.compile().unwrap();
    let mut set = ModelSet::new(vec!["something_else".into()]);
    let err = set.push(m.as_bytes()).expect_err("refused").to_string();
    assert!(err.contains("is not in the shared feature vector"), "{err}");
}
