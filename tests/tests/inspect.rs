//! `edgescore inspect` describes every kind of compiled model (vector and linear leaves, CTR
//! features, membership splits) without panicking, and names CTR features by their inputs.

#[test]
fn every_fixture_model_inspects() {
    let mut kinds = std::collections::BTreeSet::new();
    for f in edgescore_tests::fixtures("") {
        let model = f.compile().unwrap();
        let e = model.ensemble();
        let r = edgescore_compile::inspect::report(&e);
        let text = edgescore_compile::inspect::render_text(&r);
        assert_eq!(r.trees, e.trees().len(), "{}", f.name);
        assert_eq!(r.ctr_features, e.ctr_features().len(), "{}", f.name);
        if r.ctr_features > 0 {
            assert!(text.contains("ctr") && text.contains("CTR features"), "{}: {text}", f.name);
        }
        kinds.insert(r.leaf_kind.clone());
    }
    assert_eq!(kinds.into_iter().collect::<Vec<_>>(), ["constant", "linear", "vector"]);
}
