//! Split gain as the training library recorded it (XGBoost `loss_changes`, LightGBM
//! `split_gain`), summed per split feature, for `edgescore inspect --html` on a trained model.
//!
//! Neither the IR nor the artifact keeps gain: the filter never needs it, a per-node gain would
//! grow every IR node (see `ir::tests::a_node_stays_small`), and the XGBoost reader skips
//! `loss_changes` unparsed for compile speed. So a report that wants gain reads it here, in a
//! pass of its own over the same bytes the reader compiled. The report checks that this pass
//! counted the same splits per feature as the artifact holds, so the two readings cannot
//! silently disagree.

use super::error::ReadError;
use super::{lightgbm, xgboost, Format};
use serde::Deserialize;

/// One feature's gain over every split that tests it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FeatureGain {
    pub splits: usize,
    /// The sum of the splits' gains (XGBoost's `total_gain`, LightGBM's `gain` importance).
    pub total: f64,
}

/// What a model file says about split gain.
#[derive(Debug, Clone, PartialEq)]
pub enum GainRecord {
    /// Indexed by split feature; features no split tests are zero.
    Recorded(Vec<FeatureGain>),
    /// The format keeps no gain; the string names the format.
    NotRecorded(&'static str),
}

/// Reads the gain of every split of a (decompressed) model file.
pub fn read(bytes: &[u8], format: Format) -> Result<GainRecord, ReadError> {
    let format = if format == Format::Auto { super::detect(bytes)? } else { format };
    match format {
        Format::Xgboost => xgboost_gains(bytes),
        Format::Lightgbm => lightgbm_gains(bytes),
        Format::Catboost => Ok(GainRecord::NotRecorded("CatBoost")),
        Format::Onnx => Ok(GainRecord::NotRecorded("ONNX")),
        Format::Auto => unreachable!("resolved above"),
    }
}

fn add(gains: &mut Vec<FeatureGain>, feature: usize, gain: f64) {
    if gains.len() <= feature {
        gains.resize(feature + 1, FeatureGain::default());
    }
    gains[feature].splits += 1;
    gains[feature].total += gain;
}

// Only what gain needs; serde skips the rest of the document.
#[derive(Deserialize)]
struct XgbDocument {
    learner: XgbLearner,
}

#[derive(Deserialize)]
struct XgbLearner {
    gradient_booster: XgbBooster,
}

#[derive(Deserialize)]
struct XgbBooster {
    /// gbtree
    #[serde(default)]
    model: Option<XgbTrees>,
    /// dart
    #[serde(default)]
    gbtree: Option<XgbDart>,
}

#[derive(Deserialize)]
struct XgbDart {
    model: XgbTrees,
}

#[derive(Deserialize)]
struct XgbTrees {
    trees: Vec<XgbTree>,
}

#[derive(Deserialize)]
struct XgbTree {
    left_children: Vec<i64>,
    right_children: Vec<i64>,
    split_indices: Vec<i64>,
    #[serde(default)]
    loss_changes: Option<Vec<f64>>,
}

fn xgboost_gains(bytes: &[u8]) -> Result<GainRecord, ReadError> {
    let malformed = |detail: String| ReadError::malformed("XGBoost", detail);
    let doc: XgbDocument = xgboost::deserialize(bytes)?;
    let booster = doc.learner.gradient_booster;
    let trees = booster.model.or(booster.gbtree.map(|d| d.model)).ok_or_else(|| malformed("no trees".into()))?.trees;
    let mut gains = Vec::new();
    for (t, tree) in trees.iter().enumerate() {
        let Some(loss) = &tree.loss_changes else {
            return Ok(GainRecord::NotRecorded("XGBoost (this file has no loss_changes)"));
        };
        let n = tree.left_children.len();
        if [tree.right_children.len(), tree.split_indices.len(), loss.len()].iter().any(|&l| l != n) {
            return Err(malformed(format!("tree {t}: node arrays differ in length")));
        }
        // Walk from the root, as the reader does: only reachable splits count.
        let mut stack = vec![0usize];
        let mut visited = 0usize;
        while let Some(j) = stack.pop() {
            visited += 1;
            if j >= n || visited > n {
                return Err(malformed(format!("tree {t}: node {j} out of range or in a cycle")));
            }
            let (left, right) = (tree.left_children[j], tree.right_children[j]);
            if left == -1 {
                continue;
            }
            let feature = usize::try_from(tree.split_indices[j]).map_err(|_| malformed(format!("tree {t}: node {j}: split index {}", tree.split_indices[j])))?;
            add(&mut gains, feature, loss[j]);
            for child in [left, right] {
                stack.push(usize::try_from(child).map_err(|_| malformed(format!("tree {t}: node {j}: child {child}")))?);
            }
        }
    }
    Ok(GainRecord::Recorded(gains))
}

fn lightgbm_gains(bytes: &[u8]) -> Result<GainRecord, ReadError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ReadError::malformed("lightgbm", format!("not UTF-8 text: {e}")))?;
    let sections = lightgbm::split_sections(text)?;
    let mut gains = Vec::new();
    for (t, block) in sections.trees.iter().enumerate() {
        let n_leaves = lightgbm::tree_int(t, block, "num_leaves")?.unwrap_or(1);
        // A one-leaf tree has no splits (and no split lines).
        let n_internal = usize::try_from(n_leaves - 1).unwrap_or(0);
        if n_internal == 0 {
            continue;
        }
        let features: Vec<usize> = lightgbm::list(t, block, "split_feature", n_internal)?;
        let split_gain: Vec<f64> = lightgbm::list(t, block, "split_gain", n_internal)?;
        for (f, g) in features.into_iter().zip(split_gain) {
            add(&mut gains, f, g);
        }
    }
    Ok(GainRecord::Recorded(gains))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(dir: &str, file: &str) -> Vec<u8> {
        std::fs::read(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/models").join(dir).join(file)).unwrap()
    }

    /// Split counts per feature from the reader's IR (every `Split` node, every oblivious level).
    fn ir_split_counts(ir: &crate::ir::ModelIr) -> Vec<usize> {
        let mut counts = vec![0usize; ir.features.len() + ir.ctrs.len()];
        for tree in &ir.trees {
            for node in &tree.nodes {
                match node {
                    crate::ir::Node::Split { feature, .. } => counts[*feature as usize] += 1,
                    crate::ir::Node::Oblivious { levels, .. } => levels.iter().for_each(|l| counts[l.feature as usize] += 1),
                    _ => {}
                }
            }
        }
        counts
    }

    /// The gain pass and the compiling reader see the same splits, in every tree shape the
    /// fixtures hold (dart, categorical sets, vector leaves, UBJSON, linear trees, one-leaf trees).
    #[test]
    fn counts_the_splits_the_reader_compiles() {
        for (dir, file) in [
            ("xgb_binary", "model.json"),
            ("xgb_dart", "model.json"),
            ("xgb_categorical", "model.json"),
            ("xgb_vector_multiclass", "model.json"),
            ("xgb_ubj_multiclass", "model.ubj"),
            ("xgb_ubj_vector", "model.ubj"),
            ("lgb_binary", "model.txt"),
            ("lgb_categorical", "model.txt"),
            ("lgb_dart", "model.txt"),
            ("lgb_linear", "model.txt"),
            ("lgb_multiclass", "model.txt"),
            ("lgb_reader_constant", "model.txt"),
        ] {
            let bytes = fixture(dir, file);
            let ir = super::super::read(&bytes, Format::Auto).unwrap();
            let GainRecord::Recorded(gains) = read(&bytes, Format::Auto).unwrap() else { panic!("{dir}: no gain") };
            let mut counted: Vec<usize> = gains.iter().map(|g| g.splits).collect();
            counted.resize(ir.features.len(), 0);
            assert_eq!(counted, ir_split_counts(&ir), "{dir}");
            assert!(gains.iter().all(|g| g.total >= 0.0 && g.total.is_finite()), "{dir}: {gains:?}");
        }
    }

    /// The JSON and UBJSON saves of one model record the same gains (UBJSON stores f32s,
    /// JSON their shortest text).
    #[test]
    fn ubjson_and_json_agree() {
        for dir in ["xgb_ubj_multiclass", "xgb_ubj_vector"] {
            let from_ubj = read(&fixture(dir, "model.ubj"), Format::Auto).unwrap();
            let from_json = read(&fixture(dir, "same_model.json"), Format::Auto).unwrap();
            let (GainRecord::Recorded(a), GainRecord::Recorded(b)) = (&from_ubj, &from_json) else { panic!("{dir}") };
            assert_eq!(a.len(), b.len(), "{dir}");
            for (x, y) in a.iter().zip(b) {
                assert_eq!(x.splits, y.splits, "{dir}");
                assert!((x.total - y.total).abs() <= 1e-6 * y.total.abs().max(1.0), "{dir}: {x:?} vs {y:?}");
            }
        }
    }

    #[test]
    fn formats_without_gain_say_so() {
        assert_eq!(read(&fixture("catboost_binary", "model.json"), Format::Auto).unwrap(), GainRecord::NotRecorded("CatBoost"));
        assert_eq!(read(&fixture("onnx_rf_regressor", "model.onnx"), Format::Auto).unwrap(), GainRecord::NotRecorded("ONNX"));
    }

    /// A hand-written LightGBM model: the gains are summed per feature as written.
    #[test]
    fn lightgbm_gains_are_summed_per_feature() {
        let text = "tree\nversion=v4\nnum_class=1\nmax_feature_idx=2\nfeature_names=a b c\n\n\
            Tree=0\nnum_leaves=3\nsplit_feature=2 0\nsplit_gain=1.5 0.25\n\n\
            Tree=1\nnum_leaves=2\nsplit_feature=2\nsplit_gain=4\n\n\
            Tree=2\nnum_leaves=1\n\nend of trees\n";
        let GainRecord::Recorded(g) = read(text.as_bytes(), Format::Lightgbm).unwrap() else { panic!() };
        assert_eq!(g, vec![FeatureGain { splits: 1, total: 0.25 }, FeatureGain::default(), FeatureGain { splits: 2, total: 5.5 }]);
        let short = text.replace("split_gain=4", "split_gain=");
        assert!(read(short.as_bytes(), Format::Lightgbm).unwrap_err().to_string().contains("split_gain"));
    }
}
