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

/// A model file's bytes: the file mapped in place, or its gunzipped contents.
pub enum ModelBytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for ModelBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ModelBytes::Mapped(m) => m,
            ModelBytes::Owned(v) => v,
        }
    }
}

/// Reads a model file, gunzipping it if it starts with the gzip magic. The file is mapped, not
/// copied: a model of several megabytes is otherwise read into fresh pages that the kernel
/// zeroes and copies into, a sizeable share of compile time (benches/compile_time).
pub fn read_model_file(path: &Path) -> Result<ModelBytes> {
    let cannot = || format!("cannot read {}", path.display());
    let mut file = std::fs::File::open(path).with_context(cannot)?;
    let meta = file.metadata().with_context(cannot)?;
    let raw = if !meta.is_file() || meta.len() == 0 {
        // Pipes (`<(zcat model.json.gz)`), devices, empty files: nothing to map.
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).with_context(cannot)?;
        ModelBytes::Owned(bytes)
    } else {
        // SAFETY: the map is read-only and private to this process; a model file truncated by
        // another process while we compile could fault (SIGBUS) — the same risk every mmap-ing
        // reader (ripgrep, linkers) takes for files it does not own, accepted for a one-shot CLI.
        ModelBytes::Mapped(unsafe { memmap2::Mmap::map(&file) }.with_context(cannot)?)
    };
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .with_context(|| format!("{} looks gzip-compressed but does not decompress", path.display()))?;
        Ok(ModelBytes::Owned(out))
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
