//! The model's shape (depth and leaves of every tree) and its schema (each input feature's kind
//! and what the filter computes for it).

use super::Bin;
use edgescore_core::artifact::layout::{node, tree_layout, FEATURE_CATEGORICAL};
use edgescore_core::features::{Feature, Kind, CATALOGUE};
use edgescore_core::TreeEnsemble;

/// Per tree, in artifact order (the writer sorts trees by depth, not in training order).
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub depths: Vec<u32>,
    pub leaves: Vec<usize>,
}

/// At most this many columns in the leaves-per-tree chart; more distinct counts are binned.
const MAX_LEAF_COLUMNS: usize = 32;

impl Shape {
    /// Trees per leaf count: one column per count from the fewest to the most leaves while
    /// that fits, else equal-width ranges of counts.
    pub fn leaves_histogram(&self) -> Vec<Bin> {
        let (Some(&min), Some(&max)) = (self.leaves.iter().min(), self.leaves.iter().max()) else {
            return Vec::new();
        };
        let width = (max - min + 1).div_ceil(MAX_LEAF_COLUMNS);
        let mut bins: Vec<Bin> = (min..=max)
            .step_by(width)
            .map(|lo| Bin { lo: lo as f64, hi: (lo + width) as f64, count: 0 })
            .collect();
        for &l in &self.leaves {
            bins[(l - min) / width].count += 1;
        }
        bins
    }
}

pub(super) fn shape(e: &TreeEnsemble) -> Shape {
    let nodes = e.nodes();
    let leaves = e
        .trees()
        .iter()
        .map(|t| {
            if t.layout == tree_layout::OBLIVIOUS {
                1usize << t.depth
            } else {
                nodes[t.root as usize..t.end as usize].iter().filter(|n| n.flags & node::LEAF != 0).count()
            }
        })
        .collect();
    Shape { depths: e.trees().iter().map(|t| u32::from(t.depth)).collect(), leaves }
}

/// How the filter fills an input feature.
#[derive(Debug, Clone, PartialEq)]
pub enum FeatureKind {
    Numeric,
    /// A keyed hash of a request string, reduced to `buckets` (a catalogue categorical).
    Hashed { buckets: u32 },
    /// Integer codes the model treats as categories, not a hashed catalogue feature.
    Categorical { buckets: u32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct SchemaFeature {
    pub index: usize,
    pub name: String,
    pub kind: FeatureKind,
    /// The filter's catalogue entry, if the name is one (a model compiled without `--schema`
    /// may have names the filter does not compute).
    pub meaning: Option<&'static str>,
}

pub(super) fn schema(e: &TreeEnsemble) -> Vec<SchemaFeature> {
    e.features()
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let name = e.feature_name(index);
            let feature = Feature::parse(name);
            let meaning = feature.as_ref().and_then(|_| catalogue_meaning(name));
            let kind = match (spec.kind, feature.map(|f| f.kind())) {
                (FEATURE_CATEGORICAL, Some(Kind::Categorical)) => FeatureKind::Hashed { buckets: spec.buckets },
                (FEATURE_CATEGORICAL, _) => FeatureKind::Categorical { buckets: spec.buckets },
                _ => FeatureKind::Numeric,
            };
            SchemaFeature { index, name: name.to_string(), kind, meaning }
        })
        .collect()
}

/// The catalogue's line for a name the filter computes; parametrised names
/// (`header_present:referer`) share their prefix's entry (`header_present:<name>`).
fn catalogue_meaning(name: &str) -> Option<&'static str> {
    fn prefix(n: &str) -> &str {
        n.split(':').next().unwrap_or(n)
    }
    CATALOGUE.iter().find(|(n, ..)| prefix(n) == prefix(name)).map(|(.., meaning)| *meaning)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaf_counts_get_a_column_each_until_they_need_ranges() {
        let few = Shape { depths: vec![], leaves: vec![3, 5, 5, 8] };
        let bins = few.leaves_histogram();
        assert_eq!(bins.len(), 6);
        assert_eq!(bins.iter().map(|b| b.count).collect::<Vec<_>>(), [1, 0, 2, 0, 0, 1]);
        assert_eq!((bins[0].lo, bins[0].hi), (3.0, 4.0));

        let many = Shape { depths: vec![], leaves: (1..=100).collect() };
        let bins = many.leaves_histogram();
        assert!(bins.len() <= MAX_LEAF_COLUMNS, "{}", bins.len());
        assert_eq!(bins.iter().map(|b| b.count).sum::<usize>(), 100);
        assert!(bins.windows(2).all(|w| w[0].hi == w[1].lo));
        assert!(bins.last().unwrap().hi > 100.0);
        assert!(Shape { depths: vec![], leaves: vec![] }.leaves_histogram().is_empty());
    }
}
