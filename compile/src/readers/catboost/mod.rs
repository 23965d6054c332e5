//! CatBoost models: JSON (`model.save_model(path, format="json")`) and CatBoost's default binary
//! format (`.cbm`), CatBoost 1.2.x. Both are read into one typed document (`document`: the
//! JSON export's layout; `cbm` builds it from the binary file, with `flatbuf`), whose CTR
//! features `ctr` evaluates; this module turns the document into the IR.
//!
//! Semantics (CatBoost's CPU evaluator, confirmed against `predict` of CatBoost 1.2.10):
//! - Every split of an oblivious tree is binary: bit = `x > border`, compared in f32 (borders are
//!   f32 values; the reader rounds the JSON number to f32 as CatBoost does on load).
//! - NaN: when the feature has `has_nans: true` and `nan_value_treatment: AsTrue`, NaN is
//!   replaced by +inf (bit 1); with `AsFalse` by -inf (bit 0); with `AsIs`, or when `has_nans`
//!   is false, NaN is compared as is and `NaN > border` is false (bit 0).
//! - Leaf index = Σ bit_j << j, j = the split's position in the tree's `splits` list.
//! - `leaf_values` holds `dimension` values per leaf, interleaved: value of output `o` at leaf
//!   `l` is `leaf_values[l * dimension + o]`.
//! - Raw prediction = scale * Σ leaves + bias[o] (`scale_and_bias: [scale, [bias...]]`). The
//!   reader multiplies every leaf by `scale` and puts `bias` into the base score.
//!
//! - One-hot categorical split: bit = `CalcCatFeatureHash(category string) == value`, the hash
//!   being the low 32 bits of CatBoost's CityHash64 (v1.0) of the string. Our rows carry integer
//!   category codes whose CatBoost string is their decimal form, so the reader hashes the
//!   decimal strings of the codes `0..2^20` and turns each split into
//!   `InSet { categories: the codes with that hash, invalid_at_or_below: -1.0 }` (NaN: not in the
//!   set, like any category unseen in training). A split value no code in that range hashes to
//!   (e.g. a string category such as "red", or "-1") is refused.
//!
//! Each oblivious tree becomes, per output, an IR `Node::Oblivious`: level k tests split k, the
//! test holding = bit 1 (`Test::Gt(border)` / the one-hot set), leaf k is CatBoost's leaf k.

mod cbm;
mod ctr;
mod document;
mod error;
mod flatbuf;

use crate::ir::{Aggregate, CoverKind, Covers, FeatureDef, FeatureKind, Level, Link, ModelIr, Node, SourceFormat, Task, Test, Tree};
use crate::readers::error::ReadError;
use document::Model;
use edgescore_core::ensemble::ctr::code_hash as category_hash;
use error::{malformed, unsupported};
use rayon::prelude::*;
use serde_json::Value;
use std::collections::HashMap;

/// CatBoost trains trees of depth at most 16.
const MAX_DEPTH: usize = 16;

/// Largest flat feature index accepted (keeps a tiny file from asking for a huge feature table).
const MAX_FLAT_INDEX: u32 = 1 << 20;

/// One-hot splits are matched against the category codes `0..ONE_HOT_CODES`.
const ONE_HOT_CODES: u32 = 1 << 20;

/// Link and task for a loss function (`model_info.params.loss_function.type`).
fn loss_semantics(loss: &str, dimension: usize) -> Result<(Task, Link), ReadError> {
    let single = || {
        if dimension == 1 {
            Ok(())
        } else {
            Err(malformed(format!("loss function {loss} with {dimension} outputs")))
        }
    };
    Ok(match loss {
        "Logloss" | "CrossEntropy" => {
            single()?;
            (Task::BinaryClassification, Link::Sigmoid { scale: 1.0 })
        }
        "MultiClass" => (Task::MulticlassClassification, Link::Softmax),
        "MultiClassOneVsAll" => (Task::MulticlassClassification, Link::Sigmoid { scale: 1.0 }),
        "Poisson" | "Tweedie" => {
            single()?;
            (Task::Regression, Link::Exp)
        }
        "RMSE" | "MAE" | "Quantile" | "MAPE" | "Huber" | "Lq" | "Expectile" | "LogLinQuantile" | "LogCosh"
        | "MultiRMSE" | "MultiQuantile" | "YetiRank" | "YetiRankPairwise" | "PairLogit" | "PairLogitPairwise"
        | "QueryRMSE" | "QuerySoftMax" | "StochasticFilter" | "StochasticRank" | "LambdaMart" => {
            (Task::Regression, Link::Identity)
        }
        _ => return Err(unsupported(format!("loss function `{loss}`"), None)),
    })
}

fn loss_function(model_info: Option<&Value>) -> Option<&str> {
    model_info?.get("params")?.get("loss_function")?.get("type")?.as_str()
}

fn catboost_version(model_info: Option<&Value>) -> String {
    let info = model_info.and_then(|m| m.get("catboost_version_info")).and_then(Value::as_str).unwrap_or("");
    info.split_once("tags/v")
        .map(|(_, rest)| rest.split_whitespace().next().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// What a float split needs: the IR feature and where NaN goes.
struct FloatSplitInfo {
    flat: u32,
    nan_yes: bool,
}

/// One CatBoost tree as read: a tree per output, (feature, buckets) its one-hot splits saw,
/// and its leaves' covers where the file has them.
type ExpandedTree = (Vec<Tree>, Vec<(usize, u32)>, Option<Vec<f64>>);

pub fn read(bytes: &[u8]) -> Result<ModelIr, ReadError> {
    let model: Model = if cbm::is_cbm(bytes) { cbm::to_model(bytes)? } else { document::from_json(bytes)? };
    let Some(oblivious) = model.oblivious_trees else {
        if model.trees.is_some() {
            return Err(unsupported("non-symmetric trees (grow_policy Depthwise or Lossguide)", None));
        }
        return Err(malformed("no `oblivious_trees`"));
    };
    let info = model.features_info;
    if !info.text_features.is_empty() {
        return Err(unsupported("CatBoost text features", None));
    }
    if !info.embedding_features.is_empty() {
        return Err(unsupported("CatBoost embedding features", None));
    }

    // Features, by flat index.
    let mut n_features = 0usize;
    for flat in info.float_features.iter().map(|f| f.flat_feature_index).chain(info.categorical_features.iter().map(|f| f.flat_feature_index)) {
        if flat >= MAX_FLAT_INDEX {
            return Err(malformed(format!("flat_feature_index {flat}")));
        }
        n_features = n_features.max(flat as usize + 1);
    }
    let mut features: Vec<Option<FeatureDef>> = vec![None; n_features];
    let name = |id: &Option<String>, flat: u32| match id.as_deref() {
        Some(id) if !id.is_empty() => id.to_string(),
        _ => format!("f{flat}"),
    };
    let mut float_splits: Vec<Option<FloatSplitInfo>> = Vec::new();
    for f in &info.float_features {
        let slot = &mut features[f.flat_feature_index as usize];
        if slot.is_some() {
            return Err(malformed(format!("two features with flat_feature_index {}", f.flat_feature_index)));
        }
        *slot = Some(FeatureDef { name: name(&f.feature_id, f.flat_feature_index), kind: FeatureKind::Numeric });
        let nan_yes = match f.nan_value_treatment.as_deref() {
            None | Some("AsIs") | Some("AsFalse") => false,
            Some("AsTrue") => f.has_nans,
            Some(other) => return Err(malformed(format!("float feature {}: nan_value_treatment `{other}`", f.feature_index))),
        };
        let i = f.feature_index as usize;
        if i >= MAX_FLAT_INDEX as usize {
            return Err(malformed(format!("float feature_index {i}")));
        }
        if float_splits.len() <= i {
            float_splits.resize_with(i + 1, || None);
        }
        if float_splits[i].replace(FloatSplitInfo { flat: f.flat_feature_index, nan_yes }).is_some() {
            return Err(malformed(format!("two float features with feature_index {i}")));
        }
    }
    let mut cat_flat: HashMap<u32, u32> = HashMap::new();
    for f in &info.categorical_features {
        let slot = &mut features[f.flat_feature_index as usize];
        if slot.is_some() {
            return Err(malformed(format!("two features with flat_feature_index {}", f.flat_feature_index)));
        }
        *slot = Some(FeatureDef { name: name(&f.feature_id, f.flat_feature_index), kind: FeatureKind::Categorical { buckets: 1 } });
        if cat_flat.insert(f.feature_index, f.flat_feature_index).is_some() {
            return Err(malformed(format!("two categorical features with feature_index {}", f.feature_index)));
        }
    }
    // Codes for every one-hot hash the model mentions (split values and declared values).
    let mut wanted: Vec<u32> = oblivious
        .iter()
        .flat_map(|t| &t.splits)
        .filter(|s| s.split_type == "OneHotFeature")
        .filter_map(|s| s.value.map(hash_bits))
        .collect();
    if !wanted.is_empty() {
        wanted.extend(info.categorical_features.iter().flat_map(|f| f.values.iter().map(|&v| hash_bits(v))));
    }
    let codes = codes_with_hashes(wanted);
    for f in &info.categorical_features {
        let max_code = f.values.iter().filter_map(|&v| codes.get(&hash_bits(v))).flatten().max();
        if let (Some(&max), Some(def)) = (max_code, features[f.flat_feature_index as usize].as_mut()) {
            def.kind = FeatureKind::Categorical { buckets: max + 1 };
        }
    }
    let mut features: Vec<FeatureDef> = features
        .into_iter()
        .enumerate()
        .map(|(i, f)| f.unwrap_or_else(|| FeatureDef { name: format!("f{i}"), kind: FeatureKind::Numeric }))
        .collect();

    // CTR features: split feature `features.len() + k` is CTR k. Their binary features come
    // after every float border and one-hot value, in `ctrs` order.
    let ctr_data = model.ctr_data.unwrap_or_default();
    let float_flat = |i: u32| float_splits.get(i as usize).and_then(Option::as_ref).map(|f| (f.flat, f.nan_yes));
    let ctrs = ctr::read(&info.ctrs, &ctr_data, &ctr::Inputs { cat_flat: &cat_flat, float_flat: &float_flat })?;
    let ctr_base = info.float_features.iter().map(|f| f.borders.len()).sum::<usize>()
        + info.categorical_features.iter().map(|f| f.values.len()).sum::<usize>();
    // Binary feature index (relative to ctr_base) → (CTR, border index).
    let ctr_splits: Vec<(usize, usize)> = ctrs.iter().enumerate().flat_map(|(k, c)| (0..c.borders.len()).map(move |j| (k, j))).collect();
    let n_inputs = features.len() as u32;

    // Output dimension and scale/bias.
    let (scale, bias) = match model.scale_and_bias {
        Some((scale, bias)) => {
            if bias.is_empty() {
                return Err(malformed("scale_and_bias has no bias"));
            }
            (scale, bias)
        }
        None => {
            let dim = match oblivious.first() {
                Some(t) => t.leaf_values.len() >> t.splits.len().min(MAX_DEPTH + 1),
                None => 1,
            };
            (1.0, vec![0.0; dim.max(1)])
        }
    };
    if !scale.is_finite() || bias.iter().any(|b| !b.is_finite()) {
        return Err(malformed("scale_and_bias is not finite"));
    }
    let dimension = bias.len();
    if dimension > 1 << 16 {
        return Err(malformed(format!("{dimension} outputs")));
    }

    let loss = loss_function(model.model_info.as_ref())
        .ok_or_else(|| unsupported("model without model_info.params.loss_function (cannot tell the link)", None))?
        .to_string();
    let (task, link) = loss_semantics(&loss, dimension)?;

    // Trees are read on every core; the first error in tree order is reported. One-hot
    // splits report (feature, buckets) for the feature table, merged after.
    let expanded: Vec<Result<ExpandedTree, ReadError>> = oblivious
        .par_iter()
        .enumerate()
        .map(|(t, tree)| {
            let mut buckets_seen = Vec::new();
            let depth = tree.splits.len();
            if depth > MAX_DEPTH {
                return Err(malformed(format!("tree {t}: depth {depth} (CatBoost trees have at most {MAX_DEPTH} levels)")));
            }
            let mut levels = Vec::with_capacity(depth);
            for (k, split) in tree.splits.iter().enumerate() {
                match &*split.split_type {
                    "FloatFeature" => {}
                    "OnlineCtr" => {
                        let at = split.split_index.ok_or_else(|| malformed(format!("tree {t}: CTR split {k} has no split_index")))?;
                        let &(c, j) = at
                            .checked_sub(ctr_base)
                            .and_then(|i| ctr_splits.get(i))
                            .ok_or_else(|| malformed(format!("tree {t}: CTR split {k} has split_index {at}, not a CTR border")))?;
                        let border = ctrs[c].borders[j];
                        if split.border.map(|b| b as f32) != Some(border) {
                            return Err(malformed(format!("tree {t}: CTR split {k}: border {:?} is not CTR {c}'s border {border}", split.border)));
                        }
                        // CTR values are never NaN.
                        levels.push(Level { feature: n_inputs + c as u32, test: Test::Gt(border as f64), missing_yes: false });
                        continue;
                    }
                    "OneHotFeature" => {
                        let c = split
                            .cat_feature_index
                            .ok_or_else(|| malformed(format!("tree {t}: split {k} has no cat_feature_index")))?;
                        let flat = *cat_flat
                            .get(&c)
                            .ok_or_else(|| malformed(format!("tree {t}: split {k} uses unknown categorical feature {c}")))?;
                        let value = split.value.ok_or_else(|| malformed(format!("tree {t}: split {k} has no value")))?;
                        let Some(categories) = codes.get(&hash_bits(value)) else {
                            return Err(unsupported(
                                format!(
                                    "CatBoost one-hot split on a category (hash {value}) that is not an integer code in 0..{ONE_HOT_CODES}"
                                ),
                                Some(t),
                            ));
                        };
                        let categories = categories.clone();
                        // Codes come out ascending.
                        buckets_seen.push((flat as usize, categories.last().map_or(1, |&m| m + 1)));
                        levels.push(Level { feature: flat, test: Test::InSet { categories, invalid_at_or_below: -1.0 }, missing_yes: false });
                        continue;
                    }
                    other => return Err(unsupported(format!("CatBoost split type `{other}`"), Some(t))),
                }
                let f = split
                    .float_feature_index
                    .ok_or_else(|| malformed(format!("tree {t}: split {k} has no float_feature_index")))?;
                let fs = float_splits
                    .get(f as usize)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| malformed(format!("tree {t}: split {k} uses unknown float feature {f}")))?;
                let border = split.border.ok_or_else(|| malformed(format!("tree {t}: split {k} has no border")))?;
                if border.is_nan() {
                    return Err(malformed(format!("tree {t}: split {k} has a NaN border")));
                }
                // CatBoost keeps borders as f32.
                let border = border as f32 as f64;
                levels.push(Level { feature: fs.flat, test: Test::Gt(border), missing_yes: fs.nan_yes });
            }
            let n_leaves = 1usize << depth;
            if tree.leaf_values.len() != n_leaves * dimension {
                return Err(malformed(format!(
                    "tree {t}: {} leaf values, expected {n_leaves} leaves x {dimension} outputs",
                    tree.leaf_values.len()
                )));
            }
            if let Some(v) = tree.leaf_values.iter().find(|v| !v.is_finite()) {
                return Err(malformed(format!("tree {t}: leaf value {v} is not finite")));
            }
            let trees = (0..dimension)
                .map(|o| Tree {
                    output: o as u32,
                    nodes: vec![Node::Oblivious {
                        levels: levels.clone().into(),
                        leaves: (0..n_leaves).map(|leaf| tree.leaf_values[leaf * dimension + o] * scale).collect(),
                    }],
                })
                .collect();
            // Each output's tree has the same leaves, so the same covers.
            let covers = (tree.leaf_weights.len() == n_leaves).then(|| tree.leaf_weights.clone());
            Ok((trees, buckets_seen, covers))
        })
        .collect();
    let mut trees = Vec::with_capacity(oblivious.len() * dimension);
    let mut covers = Some(Vec::with_capacity(oblivious.len() * dimension));
    for result in expanded {
        let (expanded, buckets_seen, tree_covers) = result?;
        // Covers for every tree, or none.
        covers = covers.zip(tree_covers).map(|(mut all, c)| {
            all.extend(std::iter::repeat_n(c, expanded.len()));
            all
        });
        trees.extend(expanded);
        for (flat, seen) in buckets_seen {
            // `cat_flat` only holds categorical features.
            if let FeatureKind::Categorical { buckets } = &mut features[flat].kind {
                *buckets = (*buckets).max(seen);
            }
        }
    }
    if features.is_empty() {
        return Err(malformed("no features"));
    }

    Ok(ModelIr {
        ua_fingerprints: Vec::new(),
        name: String::new(),
        version: catboost_version(model.model_info.as_ref()),
        source: SourceFormat::CatBoost,
        objective: loss,
        task,
        link,
        aggregate: Aggregate::Sum,
        base_score: bias,
        features,
        ctrs: ctrs.into_iter().map(|c| c.def).collect(),
        trees,
        covers: covers.map(|per_tree| Covers { kind: CoverKind::Rows, per_tree }),
    })
}

/// A category hash as it appears in the JSON (i32 or u32) → its 32 bits.
fn hash_bits(v: i64) -> u32 {
    v as u32
}

/// Every code in `0..ONE_HOT_CODES` whose hash is one of `wanted`, by hash.
fn codes_with_hashes(mut wanted: Vec<u32>) -> HashMap<u32, Vec<u32>> {
    let mut out: HashMap<u32, Vec<u32>> = HashMap::new();
    if wanted.is_empty() {
        return out;
    }
    wanted.sort_unstable();
    wanted.dedup();
    for code in 0..ONE_HOT_CODES {
        let h = category_hash(code);
        if wanted.binary_search(&h).is_ok() {
            out.entry(h).or_default().push(code);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readers::library_check::{message, Damage, Library};

    const CATBOOST: Library = Library { format: "CatBoost", prefix: "catboost_reader", extension: "json", read, raw_is_sum: false };

    fn check_against_library(name: &str) -> ModelIr {
        let ir = CATBOOST.check(name);
        assert_eq!(ir.source, SourceFormat::CatBoost);
        assert_eq!(ir.version, "1.2.10");
        ir
    }

    /// Every level of every (oblivious) tree.
    fn levels(ir: &ModelIr) -> impl Iterator<Item = &Level> {
        ir.trees.iter().flat_map(|t| &t.nodes).flat_map(|n| match n {
            Node::Oblivious { levels, .. } => &levels[..],
            _ => panic!("CatBoost trees are read as oblivious trees"),
        })
    }

    fn nan_directions(ir: &ModelIr) -> Vec<(u32, bool)> {
        let mut v: Vec<(u32, bool)> = levels(ir).map(|l| (l.feature, l.missing_yes)).collect();
        v.sort();
        v.dedup();
        v
    }

    #[test]
    fn binary_nan_as_false() {
        let ir = check_against_library("binary_nan_min");
        assert_eq!(ir.task, Task::BinaryClassification);
        assert_eq!(ir.link, Link::Sigmoid { scale: 1.0 });
        assert_eq!(ir.objective, "Logloss");
        let names: Vec<&str> = ir.features.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["alpha", "beta", "gamma", "delta"]);
        assert!(nan_directions(&ir).iter().all(|&(_, yes)| !yes));
        assert_eq!(ir.trees.len(), 15);
        assert!(matches!(&ir.trees[0].nodes[..], [Node::Oblivious { levels, leaves }] if leaves.len() == 1 << levels.len()));
    }

    #[test]
    fn binary_nan_as_true() {
        let ir = check_against_library("binary_nan_max");
        // Only feature 0 had NaNs in training (AsTrue); the others are AsIs: NaN → bit 0.
        let dirs = nan_directions(&ir);
        assert!(dirs.contains(&(0, true)));
        assert!(dirs.iter().all(|&(f, yes)| yes == (f == 0)));
    }

    #[test]
    fn multiclass_interleaved_leaves() {
        let ir = check_against_library("multiclass");
        assert_eq!(ir.task, Task::MulticlassClassification);
        assert_eq!(ir.link, Link::Softmax);
        assert_eq!(ir.n_outputs(), 3);
        assert_eq!(ir.trees.len(), 30);
        assert_eq!(ir.trees.iter().map(|t| t.output).take(4).collect::<Vec<_>>(), [0, 1, 2, 0]);
        let ova = check_against_library("multiclass_ova");
        assert_eq!(ova.link, Link::Sigmoid { scale: 1.0 });
    }

    #[test]
    fn one_hot_integer_codes() {
        let ir = check_against_library("onehot");
        let names: Vec<&str> = ir.features.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["x", "code", "z"]);
        let sets: Vec<&Vec<u32>> = levels(&ir)
            .filter_map(|l| match l {
                Level { feature: 1, test: Test::InSet { categories, invalid_at_or_below }, missing_yes } => {
                    assert_eq!(*invalid_at_or_below, -1.0);
                    assert!(!missing_yes);
                    Some(categories)
                }
                _ => None,
            })
            .collect();
        assert!(!sets.is_empty());
        assert!(sets.iter().all(|c| c.len() == 1));
        let FeatureKind::Categorical { buckets } = ir.features[1].kind else { panic!("code is categorical") };
        assert!(buckets > sets.iter().map(|c| c[0]).max().unwrap());
    }

    #[test]
    fn category_hash_matches_catboost() {
        // Hashes CatBoost 1.2.10 stored for these integer categories (one-hot split values).
        let known: &[(u32, i64)] = &[
            (0, -1438285038),
            (1, 1121341681),
            (3, 593172586),
            (7, -17943309),
            (12, 1445320840),
            (123, 1577207979),
            (4567, 937364610),
            (12345, 151767304),
            (678901, 658162862),
            (1234567, 215762447),
            (23456789, 694041104),
            (123456789, 1389760245),
            (1000000000, 1103833535),
            (2147483647, -1631395706),
        ];
        for &(code, hash) in known {
            assert_eq!(category_hash(code), hash_bits(hash), "{code}");
        }
    }

    #[test]
    fn regression_scale_and_bias() {
        let ir = check_against_library("regression_scaled");
        assert_eq!(ir.link, Link::Identity);
        assert_eq!(ir.task, Task::Regression);
        assert!(ir.base_score[0] > 5.0);
        assert_eq!(check_against_library("poisson").link, Link::Exp);
    }

    #[test]
    fn refusals() {
        // CTR features are read (tests/tests/parity_catboost.rs checks their values).
        let ctr = CATBOOST.read_file("ctr_small.json").unwrap();
        assert!(!ctr.ctrs.is_empty() && ctr.ctrs.iter().all(|c| !c.table.is_empty()));
        let m = message(CATBOOST.read_file("onehot_strings.refuse.json"));
        assert!(m.starts_with("unsupported in catboost model: CatBoost one-hot split on a category (hash "), "{m}");
        assert!(m.ends_with(") that is not an integer code in 0..1048576 (tree 0)"), "{m}");
        assert_eq!(
            message(CATBOOST.read_file("depthwise.refuse.json")),
            "unsupported in catboost model: non-symmetric trees (grow_policy Depthwise or Lossguide)"
        );
        let text = std::fs::read_to_string(CATBOOST.data("poisson.json")).unwrap().replace("\"Poisson\"", "\"RMSEWithUncertainty\"");
        assert_eq!(message(read(text.as_bytes())), "unsupported in catboost model: loss function `RMSEWithUncertainty`");
    }

    #[test]
    fn malformed_models() {
        let base: Value = serde_json::from_slice(&std::fs::read(CATBOOST.data("multiclass.json")).unwrap()).unwrap();
        let edit = |f: &dyn Fn(&mut Value)| {
            let mut v = base.clone();
            f(&mut v);
            message(read(serde_json::to_string(&v).unwrap().as_bytes()))
        };
        let m = edit(&|v| {
            v["oblivious_trees"][1]["leaf_values"].as_array_mut().unwrap().pop();
        });
        assert!(m.contains("tree 1: 23 leaf values, expected 8 leaves x 3 outputs"), "{m}");
        let m = edit(&|v| v["oblivious_trees"][2]["splits"][0]["float_feature_index"] = 9.into());
        assert!(m.contains("tree 2: split 0 uses unknown float feature 9"), "{m}");
        let m = edit(&|v| {
            v["oblivious_trees"][0]["splits"][1].as_object_mut().unwrap().remove("border");
        });
        assert!(m.contains("tree 0: split 1 has no border"), "{m}");
        let m = edit(&|v| v["features_info"]["float_features"][0]["nan_value_treatment"] = "Sometimes".into());
        assert!(m.contains("nan_value_treatment `Sometimes`"), "{m}");
        let m = edit(&|v| {
            v.as_object_mut().unwrap().remove("oblivious_trees");
        });
        assert!(m.contains("no `oblivious_trees`"), "{m}");
        let m = edit(&|v| v["oblivious_trees"][0]["splits"][0]["split_type"] = "EstimatedFeature".into());
        assert_eq!(m, "unsupported in catboost model: CatBoost split type `EstimatedFeature` (tree 0)");
        assert!(message(read(b"{\"oblivious_trees\": [")).starts_with("malformed catboost model: not a CatBoost JSON model"));
        assert!(message(read(b"\xff")).starts_with("malformed catboost model:"));
    }

    #[test]
    fn oblivious_bit_order() {
        // Two levels: leaf index = bit0 + 2 * bit1 where bit_j = x_j > 0 (NaN: level 1 only).
        // Gt is normalised with the children swapped, so the compiled table is permuted: the
        // artifact must still give CatBoost's leaf for every row.
        let level = |feature, missing_yes| Level { feature, test: Test::Gt(0.0), missing_yes };
        let tree = Tree { output: 0, nodes: vec![Node::Oblivious { levels: [level(0, false), level(1, true)].into(), leaves: [0.0, 1.0, 2.0, 3.0].into() }] };
        let numeric = |name: &str| FeatureDef { name: name.into(), kind: FeatureKind::Numeric };
        let mut ir = ModelIr::binary_logistic("bits", vec![numeric("a"), numeric("b")], vec![tree.clone()]);
        ir.link = Link::Identity;
        let model = edgescore_core::Model::load(&crate::write::write(&ir).unwrap()).unwrap();
        for (row, want) in [([-1.0, -1.0], 0.0), ([1.0, -1.0], 1.0), ([-1.0, 1.0], 2.0), ([1.0, 1.0], 3.0), ([1.0, f32::NAN], 3.0), ([f32::NAN, f32::NAN], 2.0)] {
            assert_eq!(tree.leaf_value(&row), want, "{row:?}");
            let mut out = [0f64];
            model.ensemble().margins(&row, &mut out).unwrap();
            assert_eq!(out[0], want, "{row:?}");
        }
    }

    #[test]
    fn never_panics_on_damaged_input() {
        let damage = Damage { prefix_step: 331, rounds: 200, max_edits: 3, noise: b"-091[]\".e", seed: 0x9e37_79b9_7f4a_7c15 };
        CATBOOST.read_damaged("multiclass.json", damage);
    }
}
