"""Peer comparison: edgescore vs tl2cgen, lleaves, ONNX Runtime and the libraries (README)."""
