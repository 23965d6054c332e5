//! CSV rows → feature vectors in the model's order, and outputs → printed lines.

use anyhow::{bail, Context, Result};
use crate::ir::Task;
use edgescore_core::TreeEnsemble;
use std::path::Path;

/// Reads a CSV with a header row. Columns are matched to the model's features by name; when
/// no header name matches a feature name (e.g. unnamed ONNX inputs), by position.
/// An empty cell is a missing value (NaN).
pub fn read_rows(path: &Path, model: &TreeEnsemble) -> Result<Vec<Vec<f32>>> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let header: Vec<String> = reader.headers()?.iter().map(|h| h.trim().to_string()).collect();
    let n = model.n_features();
    let by_name: Vec<Option<usize>> = (0..n).map(|i| header.iter().position(|h| h == model.feature_name(i))).collect();
    let columns: Vec<usize> = if by_name.iter().all(Option::is_some) {
        by_name.into_iter().flatten().collect()
    } else if by_name.iter().all(Option::is_none) && header.len() >= n {
        (0..n).collect()
    } else {
        let missing: Vec<&str> = (0..n).filter(|&i| by_name[i].is_none()).map(|i| model.feature_name(i)).collect();
        bail!("{}: no column for feature(s) {}", path.display(), missing.join(", "));
    };
    let mut rows = Vec::new();
    for (r, record) in reader.records().enumerate() {
        let record = record.with_context(|| format!("{}: row {}", path.display(), r + 1))?;
        let mut row = Vec::with_capacity(n);
        for (i, &c) in columns.iter().enumerate() {
            let cell = record.get(c).unwrap_or("").trim();
            let v = if cell.is_empty() {
                f32::NAN
            } else {
                cell.parse::<f32>().with_context(|| {
                    format!("{}: row {}, column {:?}: {cell:?} is not a number", path.display(), r + 1, model.feature_name(i))
                })?
            };
            row.push(v);
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Which of the model's outputs a user sees: a binary classifier's positive class only.
pub fn reported(model: &TreeEnsemble, outputs: &[f64], raw: bool) -> Vec<f64> {
    if raw {
        return outputs.to_vec();
    }
    if model.objective() == "multi:softmax" {
        // XGBoost's `predict` gives the class index; the artifact keeps the probabilities (what
        // the filter's decisions threshold), whose first largest is that index.
        let best = outputs.iter().enumerate().fold((0, f64::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
        return vec![best.0 as f64];
    }
    if model.task() == Task::BinaryClassification && outputs.len() == 2 {
        outputs[1..].to_vec()
    } else {
        outputs.to_vec()
    }
}

/// Nine significant digits, shortest form.
pub fn format_value(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let s = format!("{v:.8e}");
    // Round-trip through the 9-digit text so trailing zeros drop: 0.500000000 → 0.5.
    let parsed: f64 = s.parse().unwrap_or(v);
    format!("{parsed}")
}
