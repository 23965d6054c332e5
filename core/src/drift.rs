//! The drift watch: a model's reference distributions (`compile --reference`: per input and per
//! output, bin edges and the reference rows' share of each bin; `layout::DriftSeries`) and the
//! filter's live count of the same bins. The filter counts every request into a [`Tally`]
//! sized at model load (one binary search per input, no allocation) and hands the counts to
//! Envoy on its tick; Prometheus compares them with the reference (the population stability
//! index, `deploy/prometheus/edgescore.rules.yml`).

use crate::artifact::layout::DriftSeries;

/// A model's drift reference, as validation left it (series contiguous, edges ascending).
#[derive(Clone, Copy)]
pub struct Reference<'a> {
    n_features: usize,
    series: &'a [DriftSeries],
    edges: &'a [f32],
    shares: &'a [f32],
}

/// One series: its edges and its bins' reference shares (`edges.len() + 2` of them, the last
/// the missing bin).
#[derive(Clone, Copy, Debug)]
pub struct Bins<'a> {
    pub edges: &'a [f32],
    pub shares: &'a [f32],
}

impl<'a> Reference<'a> {
    pub(crate) fn new(n_features: usize, series: &'a [DriftSeries], edges: &'a [f32], shares: &'a [f32]) -> Reference<'a> {
        Reference { n_features, series, edges, shares }
    }

    /// Input feature `i`'s bins.
    pub fn feature(&self, i: usize) -> Bins<'a> {
        self.series(i)
    }

    /// Output `o`'s score bins.
    pub fn output(&self, o: usize) -> Bins<'a> {
        self.series(self.n_features + o)
    }

    fn series(&self, i: usize) -> Bins<'a> {
        let s = self.series[i];
        let first_share: usize = self.series[..i].iter().map(|s| s.n_edges as usize + 2).sum();
        let (from, n) = (s.first_edge as usize, s.n_edges as usize);
        Bins { edges: &self.edges[from..from + n], shares: &self.shares[first_share..first_share + n + 2] }
    }
}

/// The bin of `x` among `edges` (ascending): the number of edges at or below it, or the
/// missing bin (`edges.len() + 1`) for NaN.
#[inline]
pub fn bin(edges: &[f32], x: f32) -> usize {
    if x.is_nan() {
        return edges.len() + 1;
    }
    edges.partition_point(|&e| e <= x)
}

/// A bin's label in metric names and reports: its number, or `missing`.
pub fn bin_label(bin: usize, n_edges: usize) -> String {
    if bin == n_edges + 1 {
        "missing".to_string()
    } else {
        bin.to_string()
    }
}

/// What one count is: a model's input (`feature: Some`) or score bin, and its reference share
/// in parts per million (what the reference gauges hold: Envoy's gauges are integers).
pub struct BinInfo {
    pub model: String,
    pub feature: Option<String>,
    pub bin: String,
    pub reference_ppm: u64,
}

/// One counted series: where its value is, its edges in [`Tally::edges`], its first count.
struct Counted {
    /// The shared-vector slot (an input) or the model's index in the scorer (its score).
    at: u32,
    edges: (u32, u32),
    first: u32,
}

/// The live bin counts of a scorer's models, not yet handed to Envoy.
#[derive(Default)]
pub struct Tally {
    inputs: Vec<Counted>,
    scores: Vec<Counted>,
    edges: Vec<f32>,
    counts: Vec<u64>,
    bins: Vec<BinInfo>,
}

impl Tally {
    /// Adds model `index` (its name, the shared-vector slot of each of its inputs, the output
    /// the filter reports) when it has a reference.
    pub fn add_model(&mut self, index: usize, name: &str, model: &crate::TreeEnsemble, slots: &[u32], output: usize) {
        let Some(reference) = model.drift_reference() else { return };
        for (i, &slot) in slots.iter().enumerate() {
            let c = self.series(name, Some(model.feature_name(i)), reference.feature(i), slot);
            self.inputs.push(c);
        }
        let c = self.series(name, None, reference.output(output), index as u32);
        self.scores.push(c);
    }

    fn series(&mut self, model: &str, feature: Option<&str>, bins: Bins, at: u32) -> Counted {
        let from = self.edges.len() as u32;
        self.edges.extend_from_slice(bins.edges);
        let first = self.counts.len() as u32;
        for (b, share) in bins.shares.iter().enumerate() {
            self.counts.push(0);
            self.bins.push(BinInfo {
                model: model.to_string(),
                feature: feature.map(str::to_string),
                bin: bin_label(b, bins.edges.len()),
                reference_ppm: (*share as f64 * 1e6).round() as u64,
            });
        }
        Counted { at, edges: (from, self.edges.len() as u32), first }
    }

    /// Whether any model has a reference.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Counts one request: `shared` the feature vector, `scores` each model's reported score.
    /// No allocation.
    #[inline]
    pub fn count(&mut self, shared: &[f32], scores: &[f32]) {
        for (series, values) in [(&self.inputs, shared), (&self.scores, scores)] {
            for c in series {
                let x = values.get(c.at as usize).copied().unwrap_or(f32::NAN);
                let b = bin(&self.edges[c.edges.0 as usize..c.edges.1 as usize], x);
                if let Some(n) = self.counts.get_mut(c.first as usize + b) {
                    *n += 1;
                }
            }
        }
    }

    /// Every count, in the order of [`Tally::bins`].
    pub fn bins(&self) -> &[BinInfo] {
        &self.bins
    }

    /// Hands each count that changed to `f` (with its index in [`Tally::bins`] and what it
    /// counts) and zeroes it.
    pub fn drain(&mut self, mut f: impl FnMut(usize, &BinInfo, u64)) {
        for (i, (n, b)) in self.counts.iter_mut().zip(&self.bins).enumerate() {
            if *n > 0 {
                f(i, b, *n);
                *n = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_half_open_with_nan_last() {
        let edges = [1.0, 2.0, 5.0];
        assert_eq!(bin(&edges, 0.5), 0);
        assert_eq!(bin(&edges, 1.0), 1);
        assert_eq!(bin(&edges, 1.9), 1);
        assert_eq!(bin(&edges, 5.0), 3);
        assert_eq!(bin(&edges, f32::INFINITY), 3);
        assert_eq!(bin(&edges, f32::NEG_INFINITY), 0);
        assert_eq!(bin(&edges, f32::NAN), 4);
        assert_eq!(bin(&[], 3.0), 0);
        assert_eq!(bin(&[], f32::NAN), 1);
        assert_eq!(bin_label(4, 3), "missing");
        assert_eq!(bin_label(3, 3), "3");
    }
}
