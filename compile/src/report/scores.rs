//! The score distribution on rows: what `edgescore score` would print for each row (the
//! reported outputs: a binary classifier's positive class only), as a histogram and quantiles
//! per output.

use super::{Bin, ReportError, Rows};
use crate::rows::reported;
use edgescore_core::artifact::Task;
use edgescore_core::TreeEnsemble;

/// The quantiles the page lists, 0 and 1 being the minimum and maximum.
pub const QUANTILES: [f64; 9] = [0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 1.0];
/// Histogram bins per output.
const BINS: usize = 40;

#[derive(Debug, Clone, PartialEq)]
pub struct ScoreDistribution {
    pub source: String,
    pub rows: usize,
    pub outputs: Vec<OutputScores>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutputScores {
    pub label: String,
    /// At [`QUANTILES`], interpolated linearly between order statistics (NumPy's default);
    /// empty if no row gave a finite score.
    pub quantiles: Vec<f64>,
    pub mean: f64,
    /// Rows whose score is NaN or infinite (left out of the rest).
    pub non_finite: usize,
    pub histogram: Vec<Bin>,
}

pub(super) fn distribution(e: &TreeEnsemble, rows: Rows) -> Result<ScoreDistribution, ReportError> {
    let mut out = vec![0f64; e.n_outputs()];
    let mut columns: Vec<Vec<f64>> = Vec::new();
    for (i, row) in rows.rows.iter().enumerate() {
        e.score_f64(row, &mut out).map_err(|source| ReportError::Score { row: i + 1, source })?;
        let shown = reported(e, &out, false);
        columns.resize_with(shown.len(), Vec::new);
        for (column, v) in columns.iter_mut().zip(shown) {
            column.push(v);
        }
    }
    let labels = labels(e, columns.len());
    // Probabilities keep the whole [0, 1] axis, so two models' pages compare at a glance.
    let probabilities = matches!(e.task(), Task::BinaryClassification | Task::MulticlassClassification) && e.objective() != "multi:softmax";
    let outputs = columns.into_iter().zip(labels).map(|(values, label)| summarise(label, values, probabilities)).collect();
    Ok(ScoreDistribution { source: rows.source.to_string(), rows: rows.rows.len(), outputs })
}

fn labels(e: &TreeEnsemble, n: usize) -> Vec<String> {
    match (e.task(), n) {
        (_, 1) if e.objective() == "multi:softmax" => vec!["predicted class".into()],
        (Task::BinaryClassification, 1) => vec!["score (positive class)".into()],
        (Task::MulticlassClassification, _) => (0..n).map(|k| format!("class {k}")).collect(),
        (_, 1) => vec!["value".into()],
        _ => (0..n).map(|k| format!("output {k}")).collect(),
    }
}

fn summarise(label: String, mut values: Vec<f64>, probabilities: bool) -> OutputScores {
    let before = values.len();
    values.retain(|v| v.is_finite());
    let non_finite = before - values.len();
    values.sort_by(f64::total_cmp);
    let quantiles = if values.is_empty() { Vec::new() } else { QUANTILES.iter().map(|&q| quantile(&values, q)).collect() };
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let (lo, hi) = match (values.first(), values.last()) {
        (Some(&min), Some(&max)) if probabilities && min >= 0.0 && max <= 1.0 => (0.0, 1.0),
        (Some(&min), Some(&max)) => (min, max),
        _ => (0.0, 1.0),
    };
    OutputScores { label, quantiles, mean, non_finite, histogram: histogram(&values, lo, hi) }
}

/// `q` of ascending `sorted` (not empty), linear between the order statistics around
/// `q * (n - 1)`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let h = q * (sorted.len() - 1) as f64;
    let below = h.floor() as usize;
    let above = (below + 1).min(sorted.len() - 1);
    sorted[below] + (h - below as f64) * (sorted[above] - sorted[below])
}

/// [`BINS`] equal bins over `[lo, hi]`, or one bin when every value is the same.
fn histogram(values: &[f64], lo: f64, hi: f64) -> Vec<Bin> {
    if hi <= lo {
        return vec![Bin { lo, hi, count: values.len() }];
    }
    let width = (hi - lo) / BINS as f64;
    let mut bins: Vec<Bin> = (0..BINS).map(|k| Bin { lo: lo + k as f64 * width, hi: lo + (k + 1) as f64 * width, count: 0 }).collect();
    bins[BINS - 1].hi = hi;
    for &v in values {
        let k = (((v - lo) / width) as usize).min(BINS - 1);
        bins[k].count += 1;
    }
    bins
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        let sorted = [1.0, 2.0, 4.0, 8.0];
        assert_eq!(quantile(&sorted, 0.0), 1.0);
        assert_eq!(quantile(&sorted, 1.0), 8.0);
        // h = 1.5: halfway between 2 and 4.
        assert_eq!(quantile(&sorted, 0.5), 3.0);
        // h = 0.03: 1 + 0.03 * (2 - 1).
        assert!((quantile(&sorted, 0.01) - 1.03).abs() < 1e-12);
        assert_eq!(quantile(&[5.0], 0.25), 5.0);
    }

    #[test]
    fn histogram_puts_every_value_in_a_bin() {
        let values: Vec<f64> = (0..=100).map(|i| i as f64 / 100.0).collect();
        let bins = histogram(&values, 0.0, 1.0);
        assert_eq!(bins.len(), BINS);
        assert_eq!(bins.iter().map(|b| b.count).sum::<usize>(), 101);
        // 1.0 is in the last bin, not past it.
        assert_eq!(bins[BINS - 1].hi, 1.0);
        assert!(bins[BINS - 1].count >= 1);
        assert_eq!(histogram(&[2.0, 2.0], 2.0, 2.0), vec![Bin { lo: 2.0, hi: 2.0, count: 2 }]);
    }

    #[test]
    fn non_finite_scores_are_counted_apart() {
        let s = summarise("value".into(), vec![f64::NAN, 1.0, 3.0, f64::INFINITY], false);
        assert_eq!(s.non_finite, 2);
        assert_eq!(s.mean, 2.0);
        assert_eq!(s.quantiles.first(), Some(&1.0));
        assert_eq!(s.quantiles.last(), Some(&3.0));
        assert_eq!(s.histogram.iter().map(|b| b.count).sum::<usize>(), 2);
        let none = summarise("value".into(), vec![f64::NAN], true);
        assert!(none.quantiles.is_empty() && none.histogram.iter().all(|b| b.count == 0));
    }
}
