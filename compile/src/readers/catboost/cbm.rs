//! CatBoost's binary model format (`.cbm`, what `save_model` writes by default) → the same typed
//! model the JSON export (`save_model(format="json")`) deserializes into, so one reader
//! (`catboost::read`) gives both the same meaning, and the same artifact. Built directly, not
//! through a JSON document: that detour cost ten times CatBoost's own load time.
//!
//! The file (CatBoost 1.2.x `TFullModel::Save`): `CBM1`, a u32 length, the model core (a
//! FlatBuffer, root `TModelCore`, schema `catboost/libs/model/flatbuffers/model.fbs`), then the
//! parts `ModelPartIds` names: `static_provider_v1` is the CTR tables, a u32 count then per
//! table a u32 length and a `TCtrValueTable` FlatBuffer (`ctr_data.fbs`): CatBoost's
//! open-addressing index (packed 12-byte buckets: the u64 key, the u32 row; `u64::MAX` marks an
//! empty bucket) and the counters blob (i32 per target class, i32 counts, or f32 sum + i32 count).
//!
//! Field slots are the schema's field order; `TModelTrees` (formerly `TObliviousTrees`) gained
//! `Scale` (14), `Bias` (15) and `MultiBias` (16) after `EstimatedFeatures` (13).

use super::ctr::{self, CtrJson, Element, Entries};
use super::document::{CatFeature, FeaturesInfo, FloatFeature, Model, ObliviousTree, Split};
use super::error::{malformed, unsupported};
use super::flatbuf::{self, f32s, i32s, Table};
use crate::readers::error::ReadError;
use rayon::prelude::*;
use serde_json::{Map, Value};
use std::collections::HashMap;

fn fb(e: flatbuf::FbError) -> ReadError {
    malformed(format!("damaged .cbm FlatBuffer: {e}"))
}

pub fn is_cbm(bytes: &[u8]) -> bool {
    bytes.starts_with(b"CBM1")
}

/// Length-prefixed chunk at `at`: (its bytes, where the next one starts).
fn chunk<'a>(bytes: &'a [u8], at: usize, what: &str) -> Result<(&'a [u8], usize), ReadError> {
    let len = bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let len = len.ok_or_else(|| malformed(format!(".cbm truncated before the {what} length")))?;
    let body = bytes.get(at + 4..at + 4 + len).ok_or_else(|| malformed(format!(".cbm truncated inside the {what} ({len} bytes)")))?;
    Ok((body, at + 4 + len))
}

const CTR_TYPES: [&str; 6] = ["Borders", "Buckets", "BinarizedTargetMeanValue", "FloatTargetMeanValue", "Counter", "FeatureFreq"];
const NAN_TREATMENT: [&str; 3] = ["AsIs", "AsFalse", "AsTrue"];

/// A `TModelCtrBase`: (projection elements, type, identifier). The identifier only has to
/// match between a CTR feature and its table; it is the one CatBoost's JSON export writes (the
/// keys in serde_json's sorted order), for messages — written directly, not through a
/// `serde_json::Value`, as a model can hold thousands of CTRs.
fn ctr_base(t: &Table) -> Result<(Vec<Element>, String, String), ReadError> {
    use std::fmt::Write;
    let combination = t.table(0).map_err(fb)?.ok_or_else(|| malformed("CTR without a feature combination"))?;
    let mut elements = Vec::new();
    let mut described = Vec::new();
    for c in i32s(&combination.words(0, 1).map_err(fb)?) {
        described.push(format!(r#"{{"cat_feature_index":{c},"combination_element":"cat_feature_value"}}"#));
        elements.push(Element { combination_element: "cat_feature_value".into(), cat_feature_index: u32::try_from(c).ok(), float_feature_index: None, border: None, value: None });
    }
    for s in combination.words(1, 2).map_err(fb)?.chunks(2) {
        let (index, border) = (i32::from_le_bytes(s[0]), f32::from_le_bytes(s[1]));
        let number = serde_json::to_string(&(border as f64)).unwrap_or_default();
        described.push(format!(r#"{{"border":{number},"combination_element":"float_feature","float_feature_index":{index}}}"#));
        elements.push(Element { combination_element: "float_feature".into(), cat_feature_index: None, float_feature_index: u32::try_from(index).ok(), border: Some(border as f64), value: None });
    }
    for s in combination.words(2, 2).map_err(fb)?.chunks(2) {
        let (index, value) = (i32::from_le_bytes(s[0]), i32::from_le_bytes(s[1]));
        described.push(format!(r#"{{"cat_feature_index":{index},"combination_element":"cat_feature_exact_value","value":{value}}}"#));
        elements.push(Element { combination_element: "cat_feature_exact_value".into(), cat_feature_index: u32::try_from(index).ok(), float_feature_index: None, border: None, value: Some(value as i64) });
    }
    let kind = t.u8(1, 0).map_err(fb)? as usize;
    let kind = CTR_TYPES.get(kind).ok_or_else(|| malformed(format!("unknown CTR type {kind}")))?.to_string();
    let classifier = t.i32(2, 0).map_err(fb)?;
    let mut identifier = String::with_capacity(64 + described.iter().map(String::len).sum::<usize>());
    let _ = write!(identifier, r#"{{"identifier":[{}],"target_classifier":{classifier},"type":"{kind}"}}"#, described.join(","));
    Ok((elements, kind, identifier))
}

/// One `TCtrValueTable` → (identifier, the `ctr_data` entry CatBoost's JSON export writes).
fn value_table(buf: &[u8]) -> Result<(String, ctr::Table), ReadError> {
    let t = flatbuf::root(buf).map_err(fb)?;
    let base = t.table(0).map_err(fb)?.ok_or_else(|| malformed("CTR table without its CTR"))?;
    let (_, kind, identifier) = ctr_base(&base)?;
    let index = t.bytes(1).map_err(fb)?;
    let blob = t.bytes(2).map_err(fb)?;
    let denominator = t.i32(3, 0).map_err(fb)?;
    let classes = t.i32(4, 0).map_err(fb)?;
    if !index.len().is_multiple_of(12) || !blob.len().is_multiple_of(4) {
        return Err(malformed(format!("CTR table {identifier}: index of {} bytes, blob of {} bytes", index.len(), blob.len())));
    }
    let stride = match kind.as_str() {
        "Counter" | "FeatureFreq" => 2usize,
        "BinarizedTargetMeanValue" | "FloatTargetMeanValue" => 3,
        _ => usize::try_from(classes).ok().filter(|&c| (1..=1 << 16).contains(&c)).ok_or_else(|| malformed(format!("CTR table with {classes} target classes")))? + 1,
    };
    let counters = stride - 1;
    let rows = blob.len() / 4 / counters;
    // Bounded by the bytes present, not by `classes` (a damaged file could claim 65,536).
    let (mut keys, mut words) = (Vec::with_capacity(index.len() / 12), Vec::with_capacity(blob.len() / 4));
    for bucket in index.chunks_exact(12) {
        let key = u64::from_le_bytes(bucket[..8].try_into().unwrap_or_default());
        if key == u64::MAX {
            continue;
        }
        let row = u32::from_le_bytes(bucket[8..12].try_into().unwrap_or_default()) as usize;
        if row >= rows {
            return Err(malformed(format!("CTR table {identifier}: row {row} past its counters")));
        }
        keys.push(key);
        words.extend(blob[4 * row * counters..4 * (row + 1) * counters].chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])));
    }
    let hash_map = Entries::Packed { keys, counters: words };
    Ok((identifier, ctr::Table { counter_denominator: denominator as i64, hash_map, hash_stride: stride }))
}

/// The `.cbm` file as the model CatBoost's JSON export describes.
pub(super) fn to_model(bytes: &[u8]) -> Result<Model, ReadError> {
    let (core, mut at) = chunk(bytes, 4, "model core")?;
    let root = flatbuf::root(core).map_err(fb)?;
    let mut tables = Vec::new();
    for part in &root.strings(3).map_err(fb)? {
        if part != "static_provider_v1" {
            return Err(unsupported(format!("model part {part:?} in a .cbm file"), None));
        }
        let count = bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let count = count.ok_or_else(|| malformed(".cbm truncated before the CTR tables"))?;
        at += 4;
        for _ in 0..count {
            let (table, next) = chunk(bytes, at, "CTR table")?;
            tables.push(table);
            at = next;
        }
    }
    // The CTR tables are decoded on every core while the trees and features are read on one
    // (that reading was a third of a `.cbm` compile's reading, before the tables started). The
    // first error in file order is reported.
    let (model, decoded) = rayon::join(
        || structure(&root),
        || tables.par_iter().map(|t| value_table(t)).collect::<Vec<Result<(String, ctr::Table), ReadError>>>(),
    );
    let mut model = model?;
    model.ctr_data = Some(decoded.into_iter().collect::<Result<HashMap<_, _>, _>>()?);
    Ok(model)
}

/// The model core but the CTR tables.
fn structure(root: &Table) -> Result<Model, ReadError> {
    let trees = root.table(1).map_err(fb)?.ok_or_else(|| malformed(".cbm model core without trees"))?;

    let mut model_info = Map::new();
    for kv in root.tables(2).map_err(fb)? {
        let (Some(k), Some(v)) = (kv.string(0).map_err(fb)?, kv.string(1).map_err(fb)?) else { continue };
        // Only `params` is read as JSON (the loss function); the rest (`training` can be
        // large) stays text, as nothing else of it is read.
        let value = if k == "params" { serde_json::from_str(&v).unwrap_or(Value::String(v)) } else { Value::String(v) };
        model_info.insert(k, value);
    }

    for (slot, what) in [(10, "non-symmetric trees (grow_policy Depthwise or Lossguide)"), (12, "CatBoost text features"), (13, "CatBoost estimated features"), (18, "CatBoost embedding features")] {
        if !trees.words(slot, 1).map_err(fb)?.is_empty() {
            return Err(unsupported(what, None));
        }
    }
    let dimension = trees.i32(0, 1).map_err(fb)?.max(1);
    let mut binary: Vec<Split> = Vec::new();
    let split = |split_type: &'static str| Split { split_type: split_type.into(), float_feature_index: None, border: None, cat_feature_index: None, value: None, split_index: None };
    let mut float_features = Vec::new();
    for f in trees.tables(5).map_err(fb)? {
        let index = f.i32(1, -1).map_err(fb)?;
        let borders = f32s(&f.words(3, 1).map_err(fb)?);
        for &b in &borders {
            binary.push(Split { float_feature_index: u32::try_from(index).ok(), border: Some(b as f64), ..split("FloatFeature") });
        }
        let nan = f.u8(5, 0).map_err(fb)? as usize;
        float_features.push(FloatFeature {
            feature_index: index_u32(index, "float feature_index")?,
            flat_feature_index: index_u32(f.i32(2, -1).map_err(fb)?, "flat_feature_index")?,
            feature_id: f.string(4).map_err(fb)?,
            has_nans: f.u8(0, 0).map_err(fb)? != 0,
            nan_value_treatment: Some(NAN_TREATMENT.get(nan).copied().unwrap_or("AsIs").to_string()),
            borders: borders.iter().map(|&b| b as f64).collect(),
        });
    }
    let mut one_hot: std::collections::HashMap<i32, Vec<i32>> = std::collections::HashMap::new();
    for o in trees.tables(6).map_err(fb)? {
        let index = o.i32(0, -1).map_err(fb)?;
        let values = i32s(&o.words(1, 1).map_err(fb)?);
        if !o.strings(2).map_err(fb)?.is_empty() && values.is_empty() {
            return Err(unsupported("one-hot features stored as strings", None));
        }
        for &v in &values {
            binary.push(Split { cat_feature_index: u32::try_from(index).ok(), value: Some(v as i64), ..split("OneHotFeature") });
        }
        one_hot.insert(index, values);
    }
    let mut categorical_features = Vec::new();
    for c in trees.tables(4).map_err(fb)? {
        let index = c.i32(0, -1).map_err(fb)?;
        categorical_features.push(CatFeature {
            feature_index: index_u32(index, "categorical feature_index")?,
            flat_feature_index: index_u32(c.i32(1, -1).map_err(fb)?, "flat_feature_index")?,
            feature_id: c.string(2).map_err(fb)?,
            values: one_hot.get(&index).map(|v| v.iter().map(|&v| v as i64).collect()).unwrap_or_default(),
        });
    }
    let mut ctrs = Vec::new();
    for (k, c) in trees.tables(7).map_err(fb)?.iter().enumerate() {
        let ctr = c.table(0).map_err(fb)?.ok_or_else(|| malformed(format!("CTR feature {k} without its CTR")))?;
        let base = ctr.table(0).map_err(fb)?.ok_or_else(|| malformed(format!("CTR feature {k} without its base")))?;
        let (elements, kind, identifier) = ctr_base(&base)?;
        let borders = f32s(&c.words(1, 1).map_err(fb)?);
        for &b in &borders {
            binary.push(Split { border: Some(b as f64), ..split("OnlineCtr") });
        }
        ctrs.push(CtrJson {
            borders: borders.iter().map(|&b| b as f64).collect(),
            ctr_type: kind,
            elements,
            identifier,
            prior_numerator: ctr.f32(2, 0.0).map_err(fb)? as f64,
            prior_denomerator: ctr.f32(3, 1.0).map_err(fb)? as f64,
            shift: ctr.f32(4, 0.0).map_err(fb)? as f64,
            scale: Some(ctr.f32(5, 1.0).map_err(fb)? as f64),
            target_border_idx: ctr.i32(1, 0).map_err(fb)? as i64,
        });
    }

    let splits = i32s(&trees.words(1, 1).map_err(fb)?);
    let sizes = i32s(&trees.words(2, 1).map_err(fb)?);
    let leaves = trees.f64s(8).map_err(fb)?;
    // `LeafWeights`: one per leaf of each tree (not per output), as the JSON's `leaf_weights`.
    let weights = trees.f64s(9).map_err(fb)?;
    let mut next_weight = 0usize;
    let (mut next_split, mut next_leaf) = (0usize, 0usize);
    let mut oblivious = Vec::with_capacity(sizes.len());
    for (t, &depth) in sizes.iter().enumerate() {
        let depth = usize::try_from(depth).ok().filter(|&d| d <= 16).ok_or_else(|| malformed(format!("tree {t}: depth {depth}")))?;
        let ids = splits.get(next_split..next_split + depth).ok_or_else(|| malformed(format!("tree {t}: splits past TreeSplits")))?;
        let mut tree_splits = Vec::with_capacity(depth);
        for &s in ids {
            let split = usize::try_from(s).ok().and_then(|s| binary.get(s)).ok_or_else(|| malformed(format!("tree {t}: split {s} is no binary feature")))?;
            tree_splits.push(Split { split_index: Some(s as usize), ..split.clone() });
        }
        let n = (1usize << depth) * dimension as usize;
        let values = leaves.get(next_leaf..next_leaf + n).ok_or_else(|| malformed(format!("tree {t}: leaf values past LeafValues")))?;
        let leaf_weights = weights.get(next_weight..next_weight + (1usize << depth)).map_or(Vec::new(), <[f64]>::to_vec);
        next_weight += 1usize << depth;
        oblivious.push(ObliviousTree { splits: tree_splits, leaf_values: values.to_vec(), leaf_weights });
        next_split += depth;
        next_leaf += n;
    }
    let scale = trees.f64(14, 1.0).map_err(fb)?;
    let mut bias = trees.f64s(16).map_err(fb)?;
    if bias.is_empty() {
        bias = vec![trees.f64(15, 0.0).map_err(fb)?; dimension as usize];
    }

    Ok(Model {
        features_info: FeaturesInfo { float_features, categorical_features, text_features: Vec::new(), embedding_features: Vec::new(), ctrs },
        model_info: Some(Value::Object(model_info)),
        oblivious_trees: Some(oblivious),
        trees: None,
        scale_and_bias: Some((scale, bias)),
        ctr_data: None,
    })
}

/// CatBoost writes -1 for an absent index; the JSON reader would refuse a negative one too.
fn index_u32(v: i32, what: &str) -> Result<u32, ReadError> {
    u32::try_from(v).map_err(|_| malformed(format!("{what} {v}")))
}
