//! ONNX classifiers scored by an independent implementation: tract-onnx runs the original
//! `.onnx` file, and edgescore's compiled artifact must give the same probabilities.
//! (tract has no TreeEnsembleRegressor op, so regressors are checked against onnxruntime's
//! answers in `parity_onnx.rs` only.)

use edgescore_tests::{close, fixtures};
use tract_onnx::prelude::*;

/// Probabilities from tract for every row, as rows of f32 (all classes).
fn tract_probabilities(path: &std::path::Path, rows: &[Vec<f32>]) -> TractResult<Vec<Vec<f32>>> {
    let n_features = rows[0].len();
    let model = tract_onnx::onnx().model_for_path(path)?;
    // The probabilities are the ensemble's second output; follow it through Identity/Cast.
    let outputs = model.output_outlets()?.to_vec();
    let model = model.with_input_fact(0, f32::fact([rows.len(), n_features]).into())?.into_optimized()?.into_runnable()?;
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    let input = tract_ndarray::Array2::from_shape_vec((rows.len(), n_features), flat)?;
    let result = model.run(tvec!(input.into_tensor().into()))?;
    anyhow::ensure!(outputs.len() >= 2, "expected label and probabilities outputs");
    let probs = result[1].cast_to::<f32>()?.into_owned();
    let view = probs.to_plain_array_view::<f32>()?;
    let view = view.into_dimensionality::<tract_ndarray::Ix2>()?;
    Ok(view.rows().into_iter().map(|r| r.to_vec()).collect())
}

#[test]
fn onnx_classifiers_match_tract() {
    let classifiers: Vec<_> = fixtures("onnx_").into_iter().filter(|f| f.task != "regression").collect();
    assert!(classifiers.len() >= 3, "expected ONNX classifier fixtures, found {}", classifiers.len());
    let mut failures = Vec::new();
    let mut compared = 0;
    for f in &classifiers {
        let model = f.compile().unwrap();
        let e = model.ensemble();
        let rows = f.rows(&model).unwrap();
        let theirs = match tract_probabilities(&f.model_path, &rows) {
            Ok(t) => t,
            Err(err) => {
                // tract's own limits (e.g. it wants one base value for a binary GBT model).
                eprintln!("{}: skipped, tract cannot run it: {err:#}", f.name);
                continue;
            }
        };
        compared += 1;
        let mut out = vec![0f64; e.n_outputs()];
        for (r, (row, t)) in rows.iter().zip(&theirs).enumerate() {
            e.score_f64(row, &mut out).unwrap();
            let ours = edgescore_compile::rows::reported(&e, &out, false);
            // Binary: tract reports both classes, we report the positive one.
            let t: Vec<f64> = if f.task == "binary" { vec![*t.last().unwrap() as f64] } else { t.iter().map(|&v| v as f64).collect() };
            if ours.len() != t.len() || ours.iter().zip(&t).any(|(a, b)| !close("binary", *a, *b)) {
                failures.push(format!("{} row {r}: ours {ours:?}, tract {t:?}, row {row:?}", f.name));
            }
        }
    }
    assert!(compared >= 3, "tract ran only {compared} of the ONNX classifiers");
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.iter().take(10).cloned().collect::<Vec<_>>().join("\n"));
}
