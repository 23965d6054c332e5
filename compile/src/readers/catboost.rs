use super::ReadError;
use edgescore_filter::ir::ModelIr;

pub fn read(_bytes: &[u8]) -> Result<ModelIr, ReadError> {
    Err(ReadError::unsupported("catboost", "reader not written yet", None))
}
