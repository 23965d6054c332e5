//! One reader per training library's model format. A reader only translates the library's
//! semantics into [`ModelIr`]; layout and validation are the artifact's business.

use crate::ir::ModelIr;

pub mod catboost;
mod catboost_cbm;
mod catboost_ctr;
pub mod flatbuf;
#[cfg(test)]
mod library_check;
pub mod lightgbm;
pub mod onnx;
mod ubjson;
pub mod xgboost;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Auto,
    Xgboost,
    Lightgbm,
    Catboost,
    Onnx,
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot tell the model format from its contents; pass --format")]
    UnknownFormat,
    #[error("malformed {format} model: {detail}")]
    Malformed { format: &'static str, detail: String },
    #[error("unsupported in {format} model: {construct}{}", tree.map(|t| format!(" (tree {t})")).unwrap_or_default())]
    Unsupported { format: &'static str, construct: String, tree: Option<usize> },
}

impl ReadError {
    pub fn malformed(format: &'static str, detail: impl Into<String>) -> Self {
        ReadError::Malformed { format, detail: detail.into() }
    }
    pub fn unsupported(format: &'static str, construct: impl Into<String>, tree: Option<usize>) -> Self {
        ReadError::Unsupported { format, construct: construct.into(), tree }
    }
}

/// Guesses the format from the first bytes of an (already decompressed) model file.
pub fn detect(bytes: &[u8]) -> Result<Format, ReadError> {
    let head = &bytes[..bytes.len().min(4096)];
    let text = String::from_utf8_lossy(head);
    let trimmed = text.trim_start();
    if bytes.starts_with(b"CBM1") {
        return Ok(Format::Catboost);
    }
    if trimmed.starts_with("tree\n") || trimmed.starts_with("tree\r\n") {
        return Ok(Format::Lightgbm);
    }
    if trimmed.starts_with('{') {
        if text.contains("\"learner\"") {
            return Ok(Format::Xgboost);
        }
        if text.contains("\"oblivious_trees\"") || text.contains("\"features_info\"") || text.contains("\"model_info\"") {
            return Ok(Format::Catboost);
        }
        // Keys may come in any order: look further than the head before giving up.
        let all = String::from_utf8_lossy(bytes);
        if all.contains("\"learner\"") {
            return Ok(Format::Xgboost);
        }
        if all.contains("\"oblivious_trees\"") {
            return Ok(Format::Catboost);
        }
    }
    // UBJSON object start followed by a short-string key.
    if bytes.first() == Some(&b'{') && bytes.get(1).is_some_and(|b| matches!(b, b'L' | b'i' | b'U' | b'l')) {
        return Ok(Format::Xgboost);
    }
    if looks_like_onnx(bytes) {
        return Ok(Format::Onnx);
    }
    Err(ReadError::UnknownFormat)
}

/// ONNX ModelProto starts with field 1 (ir_version, varint: 0x08) in every exporter we know, and
/// names the `ai.onnx.ml` domain somewhere (onnxmltools writes the opset imports after the graph).
fn looks_like_onnx(bytes: &[u8]) -> bool {
    bytes.first() == Some(&0x08) && bytes.windows(7).any(|w| w == b"ai.onnx")
}

pub fn read(bytes: &[u8], format: Format) -> Result<ModelIr, ReadError> {
    let format = if format == Format::Auto { detect(bytes)? } else { format };
    match format {
        Format::Xgboost => xgboost::read(bytes),
        Format::Lightgbm => lightgbm::read(bytes),
        Format::Catboost => catboost::read(bytes),
        Format::Onnx => onnx::read(bytes),
        Format::Auto => unreachable!("resolved above"),
    }
}
