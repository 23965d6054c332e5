//! Every `tests/models/onnx_*` fixture scores exactly as onnx itself predicted.
#[test]
fn matches_onnx_predictions() {
    edgescore_tests::assert_parity("onnx_", 4);
}

/// Every `tests/models/onnx5_*` fixture (the opset-5 `TreeEnsemble` operator) scores as ONNX
/// Runtime does.
#[test]
fn tree_ensemble_opset_5_matches_onnxruntime() {
    edgescore_tests::assert_parity("onnx5_", 5);
}
