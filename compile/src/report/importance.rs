//! Feature importance: how many splits test each feature (from the artifact) and, where the
//! source model records it, the gain those splits brought in training.

use super::{Origin, ReportError};
use crate::inspect::Report;
use crate::readers::gain::{FeatureGain, GainRecord};

#[derive(Debug, Clone, PartialEq)]
pub struct FeatureImportance {
    pub index: usize,
    pub name: String,
    pub splits: usize,
    /// Total gain of those splits, when the source records it.
    pub gain: Option<f64>,
}

/// Whether the page can show gain, and if not, why.
#[derive(Debug, Clone, PartialEq)]
pub enum Gain {
    Recorded,
    Unavailable(String),
}

pub(super) fn importance(summary: &Report, origin: Origin) -> Result<(Vec<FeatureImportance>, Gain), ReportError> {
    let (gains, gain) = match origin {
        Origin::Artifact => (
            None,
            Gain::Unavailable(
                "the .esm artifact does not keep split gain; run `edgescore inspect` on the trained model (with the same --schema as `compile`) to see it".into(),
            ),
        ),
        Origin::Source(GainRecord::NotRecorded(format)) => (None, Gain::Unavailable(format!("{format} model files do not record split gain"))),
        Origin::Source(GainRecord::Recorded(gains)) => {
            check_counts(summary, &gains)?;
            (Some(gains), Gain::Recorded)
        }
    };
    let mut features: Vec<FeatureImportance> = summary
        .features_used
        .iter()
        .map(|f| FeatureImportance {
            index: f.index,
            name: f.name.clone(),
            splits: f.splits,
            gain: gains.as_ref().map(|g| g.get(f.index).map_or(0.0, |g| g.total)),
        })
        .collect();
    features.sort_by(|a, b| b.splits.cmp(&a.splits).then(a.index.cmp(&b.index)));
    Ok((features, gain))
}

/// The gain pass read the source on its own: its split count per feature must be the
/// artifact's, or gain would be attributed to the wrong features.
fn check_counts(summary: &Report, gains: &[FeatureGain]) -> Result<(), ReportError> {
    let artifact = |i: usize| summary.features_used.iter().find(|f| f.index == i).map_or(0, |f| f.splits);
    let last = gains.len().max(summary.features_used.iter().map(|f| f.index + 1).max().unwrap_or(0));
    for i in 0..last {
        let gain_splits = gains.get(i).map_or(0, |g| g.splits);
        if gain_splits != artifact(i) {
            let name = summary.features_used.iter().find(|f| f.index == i).map_or_else(|| format!("#{i}"), |f| f.name.clone());
            return Err(ReportError::GainMismatch { feature: i, name, gain_splits, artifact_splits: artifact(i) });
        }
    }
    Ok(())
}
