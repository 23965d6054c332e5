//! What the integration tests (`tests/tests/`) share: building models by hand (`ir_build`),
//! random models and rows (`random_ir`), category-set models (`category_sets`), byte edits of
//! artifacts (`artifact_edit`), the filter's test models (`filter_models`), signed requests
//! (`signed`), and here the
//! fixtures: `tests/models/<name>/` holds a model file written by the real training library,
//! the rows it was asked about (`rows.csv`) and its own answers (`expected.csv`,
//! `expected_raw.csv`), all produced by the generators in `tests/fixtures/`.

pub mod artifact_edit;
pub mod category_sets;
pub mod filter_models;
pub mod ir_build;
pub mod random_ir;
pub mod signed;

use anyhow::{Context, Result};
use edgescore_compile::readers::Format;
use edgescore_core::Model;
use std::path::{Path, PathBuf};

pub fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models")
}

pub struct Fixture {
    pub name: String,
    pub dir: PathBuf,
    pub model_path: PathBuf,
    pub task: String,
    pub format: String,
}

/// Every fixture whose directory name starts with `prefix`.
pub fn fixtures(prefix: &str) -> Vec<Fixture> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(models_dir()) else { return out };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(prefix) {
            continue;
        }
        let dir = entry.path();
        let meta: serde_json::Value = match std::fs::read(dir.join("meta.json")) {
            Ok(b) => serde_json::from_slice(&b).expect("meta.json is JSON"),
            Err(_) => continue,
        };
        let model_path = ["model.json", "model.txt", "model.onnx", "model.ubj", "model.json.gz", "model.txt.gz"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("fixture {name} has no model file"));
        out.push(Fixture {
            name,
            dir,
            model_path,
            task: meta["task"].as_str().unwrap_or("").to_string(),
            format: meta["format"].as_str().unwrap_or("").to_string(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

impl Fixture {
    /// Compiles the fixture's model exactly as `edgescore compile` does.
    pub fn compile(&self) -> Result<Model> {
        let ir = edgescore_compile::load_model(&self.model_path, Format::Auto)?;
        let bytes = edgescore_compile::compile(&ir)?;
        Ok(Model::load(&bytes)?)
    }

    pub fn rows(&self, model: &Model) -> Result<Vec<Vec<f32>>> {
        edgescore_compile::rows::read_rows(&self.dir.join("rows.csv"), &model.ensemble())
    }

    /// `expected.csv` (or another such file): one line per row, comma-separated floats.
    pub fn expected(&self, file: &str) -> Result<Option<Vec<Vec<f64>>>> {
        let path = self.dir.join(file);
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)?;
        let rows = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.split(',').map(|v| v.trim().parse::<f64>().with_context(|| format!("{}: {v:?}", path.display()))).collect())
            .collect::<Result<Vec<Vec<f64>>>>()?;
        Ok(Some(rows))
    }
}

/// Within the tolerance: 1e-5 absolute on probabilities, 1e-4 + 1e-5·|v| on values.
pub fn close(task: &str, got: f64, want: f64) -> bool {
    let tol = if task == "regression" { 1e-4 + 1e-5 * want.abs() } else { 1e-5 };
    // `got == want` covers infinities (a linear leaf on an infinite feature), whose difference is NaN.
    got == want || (got - want).abs() <= tol || (got.is_nan() && want.is_nan())
}

/// Scores every row of a fixture and compares with the library's answers; returns a list of
/// mismatches (empty when the fixture passes).
pub fn parity(f: &Fixture) -> Result<Vec<String>> {
    let model = f.compile().with_context(|| format!("fixture {}", f.name))?;
    let e = model.ensemble();
    let rows = f.rows(&model)?;
    let mut failures = Vec::new();
    for (file, raw) in [("expected.csv", false), ("expected_raw.csv", true)] {
        let Some(expected) = f.expected(file)? else { continue };
        anyhow::ensure!(expected.len() == rows.len(), "{}: {} has {} lines for {} rows", f.name, file, expected.len(), rows.len());
        let mut out = vec![0f64; e.n_outputs()];
        // Margins can be large; compare them with the regression tolerance.
        let task = if raw { "regression" } else { f.task.as_str() };
        for (r, (row, want)) in rows.iter().zip(&expected).enumerate() {
            if raw { e.margins(row, &mut out)? } else { e.score_f64(row, &mut out)? }
            let got = edgescore_compile::rows::reported(&e, &out, raw);
            if got.len() != want.len() || got.iter().zip(want).any(|(g, w)| !close(task, *g, *w)) {
                failures.push(format!("{} {file} row {r}: got {got:?}, want {want:?}, row {row:?}", f.name));
            }
        }
    }
    Ok(failures)
}

/// Runs [`parity`] over every fixture with `prefix` and panics with all mismatches.
pub fn assert_parity(prefix: &str, at_least: usize) {
    let fixtures = fixtures(prefix);
    assert!(fixtures.len() >= at_least, "expected at least {at_least} fixtures named {prefix}*, found {}", fixtures.len());
    let mut failures = Vec::new();
    for f in &fixtures {
        match parity(f) {
            Ok(mut fs) => failures.append(&mut fs),
            Err(e) => failures.push(format!("{}: {e:#}", f.name)),
        }
    }
    let shown: Vec<&String> = failures.iter().take(20).collect();
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"));
}
