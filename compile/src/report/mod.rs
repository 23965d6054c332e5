//! `edgescore inspect --html`: one self-contained HTML page of pictures of a model — its shape,
//! schema, feature importance, split thresholds and, given rows, its score distribution.
//!
//! Everything but gain is read from the artifact as the filter loads it, so the page shows
//! what will run (thresholds as the evaluator compares them, `x < t` in f32). Gain is not in
//! the artifact; it comes from the source model's own record (`readers::gain`) when `inspect`
//! is given the trained model rather than the `.esm`.
//!
//! The data (`ModelReport`) is built apart from its rendering (`html`, `svg`), so tests check
//! the numbers without parsing markup.

mod html;
mod importance;
mod scores;
mod shape;
mod svg;
mod thresholds;

pub use importance::{FeatureImportance, Gain};
pub use scores::{OutputScores, ScoreDistribution, QUANTILES};
pub use shape::{SchemaFeature, Shape};
pub use thresholds::FeatureThresholds;

use crate::inspect;
use crate::readers::gain::GainRecord;
use edgescore_core::ensemble::ScoreError;
use edgescore_core::TreeEnsemble;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The gain pass over the source and the compiled artifact disagree: the report would
    /// attribute gain to the wrong feature.
    #[error("the source model records {gain_splits} split(s) on feature {feature} `{name}` but its artifact has {artifact_splits}")]
    GainMismatch { feature: usize, name: String, gain_splits: usize, artifact_splits: usize },
    #[error("row {row}: {source}")]
    Score { row: usize, source: ScoreError },
}

/// Rows to score for the score distribution, and where they came from (shown on the page).
pub struct Rows<'a> {
    pub source: &'a str,
    pub rows: &'a [Vec<f32>],
}

/// Where the model came from: an artifact alone (no gain), or a trained model compiled in
/// memory with what its file records about gain.
pub enum Origin {
    Artifact,
    Source(GainRecord),
}

/// A histogram bin: values in `[lo, hi)` (the last bin also holds `hi`).
#[derive(Debug, Clone, PartialEq)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    pub count: usize,
}

pub struct ModelReport {
    /// What `inspect` prints: name, objective, counts, depth histogram, split counts.
    pub summary: inspect::Report,
    pub schema: Vec<SchemaFeature>,
    pub shape: Shape,
    /// One entry per feature some split tests, most splits first.
    pub importance: Vec<FeatureImportance>,
    pub gain: Gain,
    /// One entry per feature some split tests, in feature order.
    pub thresholds: Vec<FeatureThresholds>,
    pub scores: Option<ScoreDistribution>,
}

pub fn build(e: &TreeEnsemble, origin: Origin, rows: Option<Rows>) -> Result<ModelReport, ReportError> {
    let summary = inspect::report(e);
    let (importance, gain) = importance::importance(&summary, origin)?;
    Ok(ModelReport {
        schema: shape::schema(e),
        shape: shape::shape(e),
        importance,
        gain,
        thresholds: thresholds::thresholds(e),
        scores: rows.map(|r| scores::distribution(e, r)).transpose()?,
        summary,
    })
}

/// The whole page: inline CSS and SVG, no script, nothing fetched.
pub fn render_html(report: &ModelReport) -> String {
    html::page(report).into_string()
}
