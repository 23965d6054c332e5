//! The ONNX reader's errors, named for the format.

use crate::readers::error::ReadError;

const FORMAT: &str = "onnx";

pub(super) fn malformed(detail: impl Into<String>) -> ReadError {
    ReadError::malformed(FORMAT, detail)
}

pub(super) fn unsupported(construct: impl Into<String>) -> ReadError {
    ReadError::unsupported(FORMAT, construct, None)
}
