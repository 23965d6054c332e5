//! Every `tests/models/xgb_*` fixture scores exactly as xgboost itself predicted.
#[test]
fn matches_xgboost_predictions() {
    edgescore_tests::assert_parity("xgb_", 6);
}
