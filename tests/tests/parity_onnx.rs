//! Every `tests/models/onnx_*` fixture scores exactly as onnx itself predicted.
#[test]
fn matches_onnx_predictions() {
    edgescore_tests::assert_parity("onnx_", 4);
}
