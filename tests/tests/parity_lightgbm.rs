//! Every `tests/models/lgb_*` fixture scores exactly as lightgbm itself predicted.
#[test]
fn matches_lightgbm_predictions() {
    edgescore_tests::assert_parity("lgb_", 6);
}
