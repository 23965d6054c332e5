//! One reader per training library's model format. A reader only translates the library's
//! semantics into [`ModelIr`]; layout and validation are the artifact's business.
//!
//! Each reader builds on its format's parsers and never the other way round: a format with
//! helpers of its own is a folder (`catboost/`, `onnx/`, `xgboost/`) whose `mod.rs` is the
//! reader and whose other files are the parsers it uses. `gain` reads split gains from the
//! same files for `inspect --html`; `error` is the error every reader returns.

use crate::ir::ModelIr;

pub mod catboost;
mod error;
pub mod gain;
#[cfg(test)]
mod library_check;
pub mod lightgbm;
pub mod onnx;
pub mod xgboost;

pub use error::ReadError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Auto,
    Xgboost,
    Lightgbm,
    Catboost,
    Onnx,
}

/// Guesses the format from the first bytes of an (already decompressed) model file.
pub fn detect(bytes: &[u8]) -> Result<Format, ReadError> {
    if bytes.starts_with(b"CBM1") {
        return Ok(Format::Catboost);
    }
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
    let trimmed = &bytes[start..];
    if trimmed.starts_with(b"tree\n") || trimmed.starts_with(b"tree\r\n") {
        return Ok(Format::Lightgbm);
    }
    if xgboost::is_ubjson(bytes) {
        return Ok(Format::Xgboost);
    }
    if trimmed.starts_with(b"{") {
        // Keys may come in any order: the head first (cheap), then the whole file.
        let head = &bytes[..bytes.len().min(4096)];
        for text in [head, bytes] {
            if contains(text, b"\"learner\"") {
                return Ok(Format::Xgboost);
            }
            if contains(text, b"\"oblivious_trees\"") || contains(text, b"\"features_info\"") || contains(text, b"\"model_info\"") {
                return Ok(Format::Catboost);
            }
        }
    }
    if looks_like_onnx(bytes) {
        return Ok(Format::Onnx);
    }
    Err(ReadError::UnknownFormat)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// ONNX ModelProto starts with field 1 (ir_version, varint: 0x08) in every exporter we know, and
/// names the `ai.onnx.ml` domain somewhere (onnxmltools writes the opset imports after the graph).
fn looks_like_onnx(bytes: &[u8]) -> bool {
    bytes.first() == Some(&0x08) && contains(bytes, b"ai.onnx")
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
