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

/// `inspect` says whether a model has QuickScorer's bitvectors and what they cost: one test
/// per split of the walked trees, at least 24 bytes each (threshold, two masks, tree).
#[test]
fn inspect_reports_the_bitvectors_and_their_memory() {
    use edgescore_core::artifact::layout::{node, tree_layout};
    let mut forced_with_tables = 0;
    for f in edgescore_tests::fixtures("") {
        let model = f.compile().unwrap();
        let r = edgescore_compile::inspect::report(&model.ensemble());
        assert_eq!(r.bitvectors.is_some(), model.ensemble().uses_bitvectors(), "{}", f.name);
        let forced = model.with_bitvectors_on_every_row();
        let e = forced.ensemble();
        let r = edgescore_compile::inspect::report(&e);
        let text = edgescore_compile::inspect::render_text(&r);
        let Some(b) = &r.bitvectors else {
            assert!(!e.uses_bitvectors() && text.contains("lockstep walk for every row"), "{}: {text}", f.name);
            continue;
        };
        let splits = e.trees().iter().filter(|t| t.layout == tree_layout::NODES).flat_map(|t| &e.nodes()[t.root as usize..t.end as usize]).filter(|n| n.flags & node::LEAF == 0).count();
        assert_eq!(b.tests, splits, "{}", f.name);
        assert!(b.bytes >= 24 * b.tests, "{}: {} bytes for {} tests", f.name, b.bytes, b.tests);
        assert!(text.contains(&format!("QuickScorer bitvectors: {} tests, {} bytes", b.tests, b.bytes)), "{}: {text}", f.name);
        forced_with_tables += 1;
    }
    assert!(forced_with_tables >= 10, "only {forced_with_tables} fixtures have bitvectors when forced");
}

/// `inspect` gives the memory of the walk's own copy of the nodes (12 bytes a node, one node of
/// padding), its group starts (40 bytes for each whole lockstep group of 8 trees and one for
/// the rest) and its copy of the category bitsets (4 bytes a word, one word of zeros), made at
/// load on top of the artifact's bytes.
#[test]
fn inspect_reports_the_walk_copy_and_its_memory() {
    use edgescore_core::artifact::layout::tree_layout;
    for f in edgescore_tests::fixtures("") {
        let model = f.compile().unwrap();
        let e = model.ensemble();
        let r = edgescore_compile::inspect::report(&e);
        let nodes = 12 * (e.nodes().len() + 1);
        let walked = e.trees().iter().filter(|t| t.layout == tree_layout::NODES).count();
        let groups = walked.div_ceil(8);
        // A group start: 8 roots, the depth and the first check's level, 4 bytes each.
        let cat_words: usize = e.cat_splits().iter().map(|c| c.n_words as usize).sum();
        let words = 4 * (cat_words + 1);
        assert_eq!(r.walk_bytes, nodes + 40 * groups + words, "{}: {} nodes, {walked} walked trees, {cat_words} set words", f.name, e.nodes().len());
        let text = edgescore_compile::inspect::render_text(&r);
        assert!(text.contains(&format!("walk copy             {} bytes per loaded copy", r.walk_bytes)), "{}: {text}", f.name);
    }
}
