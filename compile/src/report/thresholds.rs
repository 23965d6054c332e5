//! The thresholds each feature is split at, as the evaluator compares them: every numeric test
//! is normalised by the writer to `x < t` in f32 (`x <= 0.5` from LightGBM reads as
//! `x < 0.50000006`), categorical tests are sets of codes.

use crate::inspect;
use edgescore_core::artifact::layout::node;
use edgescore_core::TreeEnsemble;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct FeatureThresholds {
    pub index: usize,
    pub name: String,
    /// Distinct finite thresholds of comparison tests (`<`, `==`, `!=`), ascending.
    pub values: Vec<f32>,
    /// Comparison splits (`<`, LightGBM's zero-as-missing `<`, `==`, `!=`).
    pub comparisons: usize,
    /// Of those, splits at ±∞: a test the writer found constant (e.g. `x <= f64::MAX`) or a
    /// library's own infinite threshold. Not plotted.
    pub infinite: usize,
    /// Categorical set splits (`trunc(x)` or `x` in a set of codes).
    pub sets: usize,
}

pub(super) fn thresholds(e: &TreeEnsemble) -> Vec<FeatureThresholds> {
    let mut by_feature: BTreeMap<usize, FeatureThresholds> = BTreeMap::new();
    for n in e.nodes() {
        if n.flags & node::LEAF != 0 {
            continue;
        }
        let index = e.tested_feature(n.feature);
        let t = by_feature.entry(index).or_insert_with(|| FeatureThresholds {
            index,
            name: inspect::feature_name(e, index),
            values: Vec::new(),
            comparisons: 0,
            infinite: 0,
            sets: 0,
        });
        match n.flags & node::OP_MASK {
            node::OP_IN_SET | node::OP_MEMBER => t.sets += 1,
            _ => {
                t.comparisons += 1;
                let threshold = f32::from_bits(n.payload);
                if threshold.is_finite() {
                    t.values.push(threshold);
                } else {
                    t.infinite += 1;
                }
            }
        }
    }
    let mut features: Vec<FeatureThresholds> = by_feature.into_values().collect();
    for t in &mut features {
        t.values.sort_by(f32::total_cmp);
        // -0.0 and 0.0 compare the same in every test: one threshold.
        t.values.dedup_by(|a, b| a == b);
    }
    features
}
