//! The shipped `.wasm`'s post-link step. Envoy skips a proxy-wasm callback the module does not
//! export (proxy-wasm-cpp-host checks each one before calling it), but the Rust SDK exports
//! every callback, so Envoy enters the VM for `on_response_headers`, `on_log`, `on_done`, … on
//! every request although the filter does nothing there. [`trim`] removes each `proxy_on_*`
//! export not in the keep list (`filter/callbacks.txt`) and the code only it reached.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum TrimError {
    #[error("not a WebAssembly module: {0}")]
    Parse(String),
    #[error("`{0}` is in the keep list but the module does not export it (a typo, or the SDK renamed it)")]
    NotExported(String),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// What [`trim`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trimmed {
    pub removed: Vec<String>,
    pub bytes_before: usize,
    pub bytes_after: usize,
}

/// The callback names in a keep list: one per line, `#` comments and blank lines ignored.
pub fn keep_list(text: &str) -> Vec<&str> {
    text.lines().map(|l| l.split('#').next().unwrap_or_default().trim()).filter(|l| !l.is_empty()).collect()
}

/// A module [`trim`] changed.
#[derive(Debug)]
pub struct TrimmedModule {
    pub wasm: Vec<u8>,
    /// The exports removed.
    pub removed: Vec<String>,
}

/// `wasm` without the `proxy_on_*` exports outside `keep` and without the functions, globals
/// and data only they used. Exports other than callbacks (memory, the ABI version marker,
/// `_initialize`, the allocator) are left alone. Returns `None` when nothing is to be removed.
pub fn trim(wasm: &[u8], keep: &[&str]) -> Result<Option<TrimmedModule>, TrimError> {
    let mut module = walrus::Module::from_buffer(wasm).map_err(|e| TrimError::Parse(format!("{e:#}")))?;
    if let Some(missing) = keep.iter().find(|k| module.exports.iter().all(|e| e.name != **k)) {
        return Err(TrimError::NotExported(missing.to_string()));
    }
    let unused: Vec<(walrus::ExportId, String)> = module
        .exports
        .iter()
        .filter(|e| e.name.starts_with("proxy_on_") && !keep.contains(&e.name.as_str()))
        .map(|e| (e.id(), e.name.clone()))
        .collect();
    if unused.is_empty() {
        return Ok(None);
    }
    for (id, _) in &unused {
        module.exports.delete(*id);
    }
    walrus::passes::gc::run(&mut module);
    Ok(Some(TrimmedModule { wasm: module.emit_wasm(), removed: unused.into_iter().map(|(_, n)| n).collect() }))
}

/// Trims the module at `path` in place. Idempotent: a module already trimmed is not rewritten
/// (tests read it concurrently). The file is rewritten, not replaced, so that cargo's hard link
/// to it in `deps/` stays one file and a later no-op `cargo build` keeps the trimmed module.
pub fn trim_file(path: &Path, keep_file: &Path) -> Result<Trimmed, TrimError> {
    fn io(p: &Path) -> impl Fn(std::io::Error) -> TrimError + '_ {
        move |e| TrimError::Io(p.display().to_string(), e)
    }
    let keep_text = std::fs::read_to_string(keep_file).map_err(io(keep_file))?;
    let wasm = std::fs::read(path).map_err(io(path))?;
    let before = wasm.len();
    match trim(&wasm, &keep_list(&keep_text))? {
        Some(TrimmedModule { wasm: out, removed }) => {
            std::fs::write(path, &out).map_err(io(path))?;
            Ok(Trimmed { removed, bytes_before: before, bytes_after: out.len() })
        }
        None => Ok(Trimmed { removed: Vec::new(), bytes_before: before, bytes_after: before }),
    }
}
