//! Every `tests/models/catboost_*` fixture scores exactly as catboost itself predicted.
#[test]
fn matches_catboost_predictions() {
    edgescore_tests::assert_parity("catboost_", 3);
}
