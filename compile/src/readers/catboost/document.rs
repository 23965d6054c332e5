//! The CatBoost model as its JSON export (`save_model(format="json")`) lays it out: serde reads
//! the JSON into these types, and `cbm` builds them from a `.cbm` file, so one reader gives
//! both the same meaning. Only the fields the reader uses are kept.

use super::ctr::{self, CtrJson};
use super::error::malformed;
use crate::readers::error::ReadError;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;

/// A CatBoost JSON model.
pub(super) fn from_json(bytes: &[u8]) -> Result<Model, ReadError> {
    serde_json::from_slice(bytes).map_err(|e| malformed(format!("not a CatBoost JSON model: {e}")))
}

#[derive(Deserialize)]
pub(super) struct Model {
    #[serde(default)]
    pub(super) features_info: FeaturesInfo,
    #[serde(default)]
    pub(super) model_info: Option<Value>,
    #[serde(default)]
    pub(super) oblivious_trees: Option<Vec<ObliviousTree>>,
    /// Non-symmetric trees (grow_policy Depthwise / Lossguide).
    #[serde(default)]
    pub(super) trees: Option<Value>,
    #[serde(default)]
    pub(super) scale_and_bias: Option<(f64, Vec<f64>)>,
    #[serde(default)]
    pub(super) ctr_data: Option<HashMap<String, ctr::Table>>,
}

#[derive(Deserialize, Default)]
pub(super) struct FeaturesInfo {
    #[serde(default)]
    pub(super) float_features: Vec<FloatFeature>,
    #[serde(default)]
    pub(super) categorical_features: Vec<CatFeature>,
    #[serde(default)]
    pub(super) text_features: Vec<Value>,
    #[serde(default)]
    pub(super) embedding_features: Vec<Value>,
    #[serde(default)]
    pub(super) ctrs: Vec<CtrJson>,
}

#[derive(Deserialize)]
pub(super) struct FloatFeature {
    pub(super) feature_index: u32,
    pub(super) flat_feature_index: u32,
    #[serde(default)]
    pub(super) feature_id: Option<String>,
    #[serde(default)]
    pub(super) has_nans: bool,
    #[serde(default)]
    pub(super) borders: Vec<f64>,
    #[serde(default)]
    pub(super) nan_value_treatment: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct CatFeature {
    pub(super) feature_index: u32,
    pub(super) flat_feature_index: u32,
    #[serde(default)]
    pub(super) feature_id: Option<String>,
    /// Hashes of the one-hot encoded categories (i32 or u32 in the JSON).
    #[serde(default)]
    pub(super) values: Vec<i64>,
}

#[derive(Deserialize)]
pub(super) struct ObliviousTree {
    pub(super) splits: Vec<Split>,
    pub(super) leaf_values: Vec<f64>,
    /// The training rows (or their sample weights' sum) that reached each leaf; empty in
    /// models saved without them.
    #[serde(default)]
    pub(super) leaf_weights: Vec<f64>,
}

#[derive(Deserialize, Clone)]
pub(super) struct Split {
    /// Borrowed when the `.cbm` reader makes it (one per split of every tree: no allocation).
    pub(super) split_type: std::borrow::Cow<'static, str>,
    #[serde(default)]
    pub(super) float_feature_index: Option<u32>,
    #[serde(default)]
    pub(super) border: Option<f64>,
    #[serde(default)]
    pub(super) cat_feature_index: Option<u32>,
    /// One-hot: the category hash.
    #[serde(default)]
    pub(super) value: Option<i64>,
    /// Index among the model's binary features: float borders, one-hot values, CTR borders.
    #[serde(default)]
    pub(super) split_index: Option<usize>,
}
