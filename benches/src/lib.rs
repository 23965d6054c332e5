//! Shared by the criterion benches and the `peer-native` driver: load a model and its rows.

use anyhow::Result;
use edgescore_compile::readers::Format;
use edgescore_core::Model;
use std::path::{Path, PathBuf};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Compiles a trained model file (any supported format) into a loaded artifact.
pub fn compile(path: &Path) -> Result<Model> {
    let ir = edgescore_compile::load_model(path, Format::Auto)?;
    Ok(Model::load(&edgescore_compile::compile(&ir)?)?)
}

pub fn rows(path: &Path, model: &Model) -> Result<Vec<Vec<f32>>> {
    edgescore_compile::rows::read_rows(path, &model.ensemble())
}
