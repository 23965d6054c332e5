//! The CatBoost reader's errors, named for the format.

use crate::readers::error::ReadError;

const FORMAT: &str = "catboost";

pub(super) fn malformed(detail: impl Into<String>) -> ReadError {
    ReadError::malformed(FORMAT, detail)
}

pub(super) fn unsupported(construct: impl Into<String>, tree: Option<usize>) -> ReadError {
    ReadError::unsupported(FORMAT, construct, tree)
}
