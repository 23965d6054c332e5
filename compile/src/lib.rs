//! The `edgescore` CLI's library: model readers → the IR (`ir`) → the writer (`write`, laying
//! the IR out in the format `edgescore_core::artifact::layout` defines), and the commands built
//! on them, so tests and benches call exactly what the CLI runs.
pub mod drift;
pub mod explain;
pub mod features;
pub mod inspect;
pub mod ir;
pub mod readers;
pub mod registry;
pub mod report;
pub mod rows;
pub mod schema;
pub mod ua_fingerprints;
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

/// As [`compile`], for filters that read formats up to `max_format` (`compile --max-format`).
pub fn compile_for(model: &ModelIr, max_format: u32) -> Result<Vec<u8>> {
    Ok(crate::write::write_for(model, max_format)?)
}

/// As [`compile_for`], with the drift reference of `reference_rows` (a CSV as `score` reads
/// it: the training rows or a sample; `compile --reference`): the model is laid out, scored on
/// the rows as the filter scores, and written again with the reference (format 6).
pub fn compile_with_reference(model: &ModelIr, max_format: u32, reference_rows: &Path, n_bins: usize) -> Result<Vec<u8>> {
    const DRIFT_FORMAT: u32 = 6;
    if max_format < DRIFT_FORMAT {
        anyhow::bail!("a drift reference (--reference) needs format {DRIFT_FORMAT}, above the highest format asked for ({max_format})");
    }
    // Laid out as the final artifact is, less the reference: the same scores.
    let plain = crate::write::write_for(model, max_format)?;
    let loaded = edgescore_core::Model::load(&plain).context("the compiled artifact failed validation (compiler bug)")?;
    let e = loaded.ensemble();
    let rows = crate::rows::read_rows(reference_rows, e)?;
    let reference = crate::drift::DriftReference::build(e, &rows, n_bins).with_context(|| format!("cannot build the drift reference from {}", reference_rows.display()))?;
    Ok(crate::write::write_with_reference(model, max_format, Some(&reference))?)
}

/// The name `compile` records when given none: the file stem, without a `.json`/`.txt` left
/// by a `.gz`.
pub fn default_model_name(path: &Path) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    stem.trim_end_matches(".json").trim_end_matches(".txt").to_string()
}

/// What `compile` takes besides the model file; `inspect` of a trained model takes the same.
pub struct SourceOptions<'a> {
    pub format: readers::Format,
    /// The name recorded in the artifact; [`default_model_name`] if `None`.
    pub name: Option<&'a str>,
    pub version: Option<&'a str>,
    /// The feature schema (`schema::SchemaFile`) to stamp into the artifact.
    pub schema: Option<&'a Path>,
    /// The UA fingerprint table (`ua_fingerprints`) to store in the artifact.
    pub ua_fingerprints: Option<&'a Path>,
}

/// A trained model read for compiling, and what the reading left out, each said in a line.
pub struct Source {
    pub ir: ModelIr,
    pub notes: Vec<String>,
}

/// A trained model's IR as `compile` makes it: read, named, versioned, schema applied.
pub fn read_source(path: &Path, bytes: &[u8], options: &SourceOptions) -> Result<Source> {
    let mut ir = readers::read(bytes, options.format).with_context(|| format!("cannot compile {}", path.display()))?;
    let mut notes = Vec::new();
    // The model scores the same without its covers; only reasons and `explain` need them.
    if let Some((t, i, cover)) = ir.covers.as_ref().and_then(ir::Covers::first_unusable) {
        ir.covers = None;
        notes.push(format!(
            "{}: tree {t}: node {i}: cover {cover} ({} {}; the artifact holds covers of 0 or more): compiled without node values, so no per-request reasons and no `explain`",
            path.display(),
            ir.objective,
            if cover.is_finite() { "hessian sums can be negative" } else { "covers are not finite" },
        ));
    }
    ir.name = options.name.map_or_else(|| default_model_name(path), str::to_string);
    if let Some(v) = options.version {
        ir.version = v.to_string();
    }
    if let Some(schema_path) = options.schema {
        let s = schema::SchemaFile::read(schema_path)?;
        schema::apply(&mut ir, &s).with_context(|| format!("{} does not fit schema {}", path.display(), schema_path.display()))?;
    }
    if let Some(table) = options.ua_fingerprints {
        ir.ua_fingerprints = ua_fingerprints::read(table)?;
    }
    ua_fingerprints::require_table(ir.features.iter().map(|f| &f.name), &ir.ua_fingerprints).with_context(|| format!("cannot compile {}", path.display()))?;
    Ok(Source { ir, notes })
}

/// What `inspect` describes: an artifact as it is, or a trained model compiled in memory
/// exactly as `compile` would (nothing written), with its file's gain record.
pub struct Inspected {
    pub model: edgescore_core::Model,
    pub origin: report::Origin,
    /// What compiling a trained model left out ([`Source::notes`]).
    pub notes: Vec<String>,
}

pub fn load_for_inspect(path: &Path, options: &SourceOptions) -> Result<Inspected> {
    let bytes = read_model_file(path)?;
    // A damaged artifact may have lost its magic: by its `.esm` name it still gets the
    // artifact validator's error (which names the damage), not "cannot tell the format".
    let named_esm = path.extension().is_some_and(|e| e == "esm");
    if named_esm || bytes.starts_with(&edgescore_core::artifact::layout::MAGIC) {
        let given = options.schema.is_some() || options.name.is_some() || options.version.is_some() || options.ua_fingerprints.is_some();
        if given || options.format != readers::Format::Auto {
            anyhow::bail!("{} is a compiled artifact: --schema, --ua-fingerprints, --format, --name and --version apply to trained models", path.display());
        }
        let model = edgescore_core::Model::load(&bytes).with_context(|| format!("{} is not a valid artifact", path.display()))?;
        return Ok(Inspected { model, origin: report::Origin::Artifact, notes: Vec::new() });
    }
    let Source { ir, notes } = read_source(path, &bytes, options)?;
    let artifact = compile(&ir).with_context(|| format!("cannot compile {}", path.display()))?;
    let model = edgescore_core::Model::load(&artifact).context("the compiled artifact failed validation (compiler bug)")?;
    let gain = readers::gain::read(&bytes, options.format).with_context(|| format!("cannot read the split gains of {}", path.display()))?;
    Ok(Inspected { model, origin: report::Origin::Source(gain), notes })
}
