//! Every `tests/models/catboost_*` fixture scores exactly as catboost itself predicted.
#[test]
fn matches_catboost_predictions() {
    edgescore_tests::assert_parity("catboost_", 3);
}

/// A model with CTR features gets golden rows for the registry like any other: the rows cut
/// at the inputs' own thresholds (CTR splits test derived values and are skipped), and they
/// score the same through the artifact as through `golden_rows`.
#[test]
fn ctr_models_get_golden_rows() {
    let mut seen = 0;
    for f in edgescore_tests::fixtures("catboost_ctr_") {
        let model = f.compile().unwrap();
        let e = model.ensemble();
        assert!(!e.ctr_features().is_empty(), "{}: no CTR features", f.name);
        let inputs = edgescore_core::registry::default_golden_inputs(&e);
        assert!(inputs.len() > 1, "{}", f.name);
        let rows = edgescore_core::registry::golden_rows(&e, &inputs);
        for row in &rows {
            edgescore_core::registry::row_matches(&e, row).unwrap_or_else(|m| panic!("{}: {m}", f.name));
        }
        seen += 1;
    }
    assert!(seen >= 3, "CTR fixtures missing");
}

/// CatBoost's default binary format (`.cbm`) compiles to exactly the artifact of the same
/// model exported as JSON.
#[test]
fn cbm_and_json_compile_to_identical_artifacts() {
    use edgescore_compile::readers::Format;
    let mut pairs = 0;
    for f in edgescore_tests::fixtures("catboost_") {
        let cbm = f.dir.join("same_model.cbm");
        if !cbm.exists() {
            continue;
        }
        let compile = |p: &std::path::Path| edgescore_compile::compile(&edgescore_compile::load_model(p, Format::Auto).unwrap()).unwrap();
        assert!(compile(&cbm) == compile(&f.model_path), "{}: the .cbm and .json artifacts differ", f.name);
        pairs += 1;
    }
    assert!(pairs >= 4, "expected .cbm fixtures, found {pairs}");
}

/// A damaged `.cbm` is an error naming the damage, never a panic.
#[test]
fn damaged_cbm_never_panics() {
    let path = edgescore_tests::models_dir().join("catboost_ctr_binary/same_model.cbm");
    let bytes = std::fs::read(path).unwrap();
    // Reading a model with one-hot splits hashes 2^20 codes: a few dozen cuts and flips.
    for cut in (0..bytes.len()).step_by(bytes.len() / 40) {
        let r = edgescore_compile::readers::read(&bytes[..cut], edgescore_compile::readers::Format::Catboost);
        assert!(r.is_err(), "a .cbm cut at {cut} bytes was accepted");
    }
    let mut flipped = bytes.clone();
    for i in (8..flipped.len()).step_by(flipped.len() / 40) {
        flipped[i] ^= 0x5a;
        let _ = edgescore_compile::readers::read(&flipped, edgescore_compile::readers::Format::Catboost);
        flipped[i] ^= 0x5a;
    }
}
