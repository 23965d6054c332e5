//! Every `tests/models/xgb_*` fixture scores exactly as xgboost itself predicted.
#[test]
fn matches_xgboost_predictions() {
    edgescore_tests::assert_parity("xgb_", 6);
}

/// A booster saved as UBJSON (`model.ubj`, what `save_model` writes for a non-`.json` name and
/// `save_raw()` returns) compiles to exactly the bytes of the same booster saved as JSON.
#[test]
fn ubjson_and_json_compile_to_identical_artifacts() {
    use edgescore_compile::readers::Format;
    let mut pairs = 0;
    for f in edgescore_tests::fixtures("xgb_") {
        let (ubj, json) = (f.dir.join("model.ubj"), f.dir.join("same_model.json"));
        if !ubj.exists() {
            continue;
        }
        let compile = |p: &std::path::Path| edgescore_compile::compile(&edgescore_compile::load_model(p, Format::Auto).unwrap()).unwrap();
        assert!(compile(&ubj) == compile(&json), "{}: the .ubj and .json artifacts differ", f.name);
        pairs += 1;
    }
    assert!(pairs >= 2, "expected UBJSON fixtures, found {pairs}");
}

/// Trees are decoded apart from the document (on every core); a tree that is sound UBJSON but
/// not an XGBoost tree is still refused as such, naming what it lacks.
#[test]
fn a_ubjson_tree_without_its_children_is_refused() {
    let path = edgescore_tests::models_dir().join("xgb_ubj_vector/model.ubj");
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes.windows(13).position(|w| w == b"left_children").expect("a tree");
    bytes[at + 12] = b'X';
    let err = edgescore_compile::readers::read(&bytes, edgescore_compile::readers::Format::Auto).unwrap_err().to_string();
    assert_eq!(err, "malformed XGBoost model: not an XGBoost UBJSON model: missing field `left_children`");
}

/// Damaged UBJSON is reported as damaged UBJSON, with where it broke.
#[test]
fn damaged_ubjson_names_the_damage() {
    let path = edgescore_tests::models_dir().join("xgb_ubj_vector/model.ubj");
    let bytes = std::fs::read(path).unwrap();
    let cut = &bytes[..bytes.len() / 2];
    let err = edgescore_compile::readers::read(cut, edgescore_compile::readers::Format::Auto).unwrap_err().to_string();
    assert!(err.starts_with("malformed XGBoost model: damaged UBJSON: ") && err.contains("byte"), "{err}");
}
