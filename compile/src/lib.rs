//! The `edgescore` CLI's library: model readers → the IR (`ir`) → the writer (`write`, laying
//! the IR out in the format `edgescore_core::artifact::layout` defines), and the commands built
//! on them, so tests and benches call exactly what the CLI runs.
pub mod features;
pub mod inspect;
pub mod ir;
pub mod readers;
pub mod registry;
pub mod rows;
pub mod schema;
pub mod write;

use anyhow::{Context, Result};
use crate::ir::ModelIr;
use std::io::Read;
use std::path::Path;

/// Reads a model file, gunzipping it if it starts with the gzip magic.
pub fn read_model_file(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .with_context(|| format!("{} looks gzip-compressed but does not decompress", path.display()))?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// Reads and translates a trained model into the IR.
pub fn load_model(path: &Path, format: readers::Format) -> Result<ModelIr> {
    let bytes = read_model_file(path)?;
    readers::read(&bytes, format).with_context(|| format!("cannot compile {}", path.display()))
}

/// Model file → artifact bytes.
pub fn compile(model: &ModelIr) -> Result<Vec<u8>> {
    Ok(crate::write::write(model)?)
}
