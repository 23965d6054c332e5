//! `compile --reference`: the drift reference of a model, from its training rows (or a sample).
//! Per input feature, quantile bin edges over the rows' values and each bin's share of the
//! rows (the missing bin: NaN); per output, the same over the scores the compiled model itself
//! gives those rows (the values the filter reports). The layout is `layout::DriftSeries`; the
//! bin rule is the core's (`edgescore_core::drift::bin`), so the reference and the live counts
//! bin alike.
//!
//! Hashed categorical features are binned like numeric ones, over their bucket numbers'
//! quantiles: buckets are spread at random by the hash, so a bin holds a fixed set of
//! buckets, and a change in the mix of categories moves shares between bins.

use crate::write::WriteError;
use edgescore_core::artifact::layout::{DriftSeries, MAX_DRIFT_EDGES};
use edgescore_core::drift::bin;
use edgescore_core::TreeEnsemble;

/// The default number of value bins per series (`--reference-bins`), before equal quantiles
/// collapse.
pub const DEFAULT_BINS: usize = 10;

/// A drift reference ready to write: a series per input, then per output.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftReference {
    pub series: Vec<DriftSeries>,
    pub edges: Vec<f32>,
    pub shares: Vec<f32>,
}

/// Why a reference could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("no reference rows")]
    NoRows,
    #[error("--reference-bins {0}: between 1 and {max}", max = MAX_DRIFT_EDGES + 1)]
    Bins(usize),
    #[error("reference row {row}: {reason}")]
    Score { row: usize, reason: String },
}

/// Edges that split `values` (NaN left out) into `n_bins` bins of equal count, as far as equal
/// values allow: the value at each `k/n_bins` quantile, duplicates and the minimum dropped
/// (a first bin below every reference value would be empty).
pub fn quantile_edges(values: &[f32], n_bins: usize) -> Vec<f32> {
    let mut v: Vec<f32> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    v.sort_by(f32::total_cmp);
    let Some(&min) = v.first() else { return Vec::new() };
    let mut edges: Vec<f32> = (1..n_bins).map(|k| v[k * v.len() / n_bins]).filter(|&e| e > min && e.is_finite()).collect();
    edges.dedup();
    edges
}

/// Each bin's share of `values` under `edges`.
fn shares(values: &[f32], edges: &[f32]) -> Vec<f32> {
    let mut counts = vec![0u64; edges.len() + 2];
    for &x in values {
        counts[bin(edges, x)] += 1;
    }
    counts.iter().map(|&c| (c as f64 / values.len() as f64) as f32).collect()
}

impl DriftReference {
    /// The reference of `model` over `rows` (its inputs, in its feature order), with up to
    /// `n_bins` value bins per series.
    pub fn build(model: &TreeEnsemble, rows: &[Vec<f32>], n_bins: usize) -> Result<DriftReference, ReferenceError> {
        if rows.is_empty() {
            return Err(ReferenceError::NoRows);
        }
        if n_bins == 0 || n_bins > MAX_DRIFT_EDGES as usize + 1 {
            return Err(ReferenceError::Bins(n_bins));
        }
        let mut r = DriftReference { series: Vec::new(), edges: Vec::new(), shares: Vec::new() };
        let mut column = Vec::with_capacity(rows.len());
        for f in 0..model.n_features() {
            column.clear();
            column.extend(rows.iter().map(|row| row[f]));
            r.push(&column, n_bins);
        }
        let n_outputs = model.n_outputs();
        let mut scores = vec![Vec::with_capacity(rows.len()); n_outputs];
        let mut out = vec![0f32; n_outputs];
        for (i, row) in rows.iter().enumerate() {
            model.score(row, &mut out).map_err(|e| ReferenceError::Score { row: i + 1, reason: e.to_string() })?;
            for (s, &v) in scores.iter_mut().zip(&out) {
                s.push(v);
            }
        }
        for s in &scores {
            r.push(s, n_bins);
        }
        Ok(r)
    }

    fn push(&mut self, values: &[f32], n_bins: usize) {
        let edges = quantile_edges(values, n_bins);
        self.series.push(DriftSeries { first_edge: self.edges.len() as u32, n_edges: edges.len() as u32 });
        self.shares.extend(shares(values, &edges));
        self.edges.extend(edges);
    }

    /// DRIFT_EDGES: the series table, then the edges.
    pub(crate) fn edges_section(&self, n_inputs: usize, n_outputs: usize) -> Result<Vec<u8>, WriteError> {
        if self.series.len() != n_inputs + n_outputs {
            return Err(WriteError::Model(format!("a drift reference of {} series for {n_inputs} inputs and {n_outputs} outputs", self.series.len())));
        }
        let mut out = Vec::with_capacity(8 * self.series.len() + 4 * self.edges.len());
        out.extend_from_slice(bytemuck::cast_slice(&self.series));
        out.extend_from_slice(bytemuck::cast_slice(&self.edges));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_edges_split_evenly_and_collapse_ties() {
        let v: Vec<f32> = (0..100).map(|i| i as f32).collect();
        assert_eq!(quantile_edges(&v, 4), vec![25.0, 50.0, 75.0]);
        let shares = shares(&v, &quantile_edges(&v, 4));
        assert_eq!(shares, vec![0.25, 0.25, 0.25, 0.25, 0.0]);
        // A constant feature has one value bin; half missing puts half in the missing bin.
        let c = [3.0, 3.0, f32::NAN, f32::NAN];
        assert!(quantile_edges(&c, 10).is_empty());
        assert_eq!(super::shares(&c, &[]), vec![0.5, 0.5]);
        // Two values: one edge between them.
        let two = [0.0, 0.0, 0.0, 1.0];
        assert_eq!(quantile_edges(&two, 10), vec![1.0]);
        assert!(quantile_edges(&[f32::NAN], 10).is_empty());
    }
}
