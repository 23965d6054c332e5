//! LightGBM text models (`Booster.save_model`, LightGBM 3.x/4.x, `version=v3`/`v4`).
//!
//! Semantics follow LightGBM 4.x's `Tree::NumericalDecision` / `Tree::CategoricalDecision`
//! (include/LightGBM/tree.h) applied to the feature value widened to `f64`, plus the C API's
//! row conversion, which drops every value with `|x| <= kZeroThreshold` (so the tree sees 0.0):
//!
//! - Numerical node, `x <= threshold` goes left (IR `yes` = left):
//!   - missing type None (0): NaN is replaced by 0.0, so `missing_yes = 0.0 <= threshold`;
//!   - missing type NaN (2): NaN goes to the default child (`default_left` bit);
//!   - missing type Zero (1): NaN becomes 0.0, and 0.0 (i.e. `|x| <= kZeroThreshold`) goes to
//!     the default child: [`Test::LeZeroAsMissing`] with `missing_yes = default_left`.
//!
//!   `kZeroThreshold` is the C++ `const double kZeroThreshold = 1e-35f`, i.e. the f32 `1e-35`
//!   = 1.0000000180025095e-35 (inclusive). Because tiny values reach the tree as 0.0, a
//!   threshold `t` in `[-kZeroThreshold, kZeroThreshold)` is rewritten so that comparing the
//!   raw value gives LightGBM's answer: `-kZ <= t < 0` becomes `x < -kZ`, `0 <= t < kZ` becomes
//!   `x <= kZ` (other thresholds are unchanged).
//! - Categorical node: NaN goes right (4.x, whatever the missing type); `(int)x < 0` goes right;
//!   otherwise left iff bit `(int)x` is set in the node's bitset (values past the bitset are not
//!   in it). IR: `InSet { categories: every set bit, invalid_at_or_below: -1.0 }`, yes = left,
//!   `missing_yes = false`. (`(int)x` of values beyond i32 is INT_MIN on x86 → right; the
//!   evaluator's "beyond every category" rule gives the same.)
//! - Leaves already include shrinkage and the initial score (boost_from_average is folded into
//!   the first tree), so the base score is 0 per output. Tree `i` adds to output
//!   `i % num_tree_per_iteration`. `average_output` (random forest) divides each output's sum
//!   by the number of iterations.

use crate::readers::error::ReadError;
use crate::ir::{Aggregate, CoverKind, Covers, FeatureDef, FeatureKind, Link, ModelIr, Node, SourceFormat, Task, Test, Tree};
use rayon::prelude::*;
use std::collections::HashMap;

const FORMAT: &str = "lightgbm";

/// LightGBM's `kZeroThreshold` (`1e-35f` stored in a double).
const K_ZERO_THRESHOLD: f64 = 1e-35_f32 as f64;

fn malformed(detail: impl Into<String>) -> ReadError {
    ReadError::malformed(FORMAT, detail)
}

fn tree_err(t: usize, detail: impl std::fmt::Display) -> ReadError {
    malformed(format!("tree {t}: {detail}"))
}

/// `key=value` lines of the header (and bare flags such as `average_output`), then one block
/// per `Tree=N` section.
pub(super) struct Sections<'a> {
    header: HashMap<&'a str, &'a str>,
    flags: Vec<&'a str>,
    pub(super) trees: Vec<HashMap<&'a str, &'a str>>,
}

pub(super) fn split_sections(text: &str) -> Result<Sections<'_>, ReadError> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    match lines.next() {
        Some("tree") => {}
        _ => return Err(malformed("does not start with a `tree` line")),
    }
    let mut sections = Sections { header: HashMap::new(), flags: Vec::new(), trees: Vec::new() };
    let mut ended = false;
    for line in lines {
        if line == "end of trees" {
            ended = true;
            break;
        }
        if line.starts_with("Tree=") {
            sections.trees.push(HashMap::new());
            continue;
        }
        match (line.split_once('='), sections.trees.last_mut()) {
            (Some((key, value)), None) => {
                if sections.header.insert(key.trim(), value.trim()).is_some() {
                    return Err(malformed(format!("header key `{}` appears twice", key.trim())));
                }
            }
            (None, None) => sections.flags.push(line),
            (Some((key, value)), Some(tree)) => {
                if tree.insert(key.trim(), value.trim()).is_some() {
                    let t = sections.trees.len() - 1;
                    return Err(tree_err(t, format_args!("key `{}` appears twice", key.trim())));
                }
            }
            (None, Some(_)) => {
                let t = sections.trees.len() - 1;
                return Err(tree_err(t, format_args!("unexpected line `{}`", truncate(line))));
            }
        }
    }
    if !ended {
        return Err(malformed("no `end of trees` line (truncated file?)"));
    }
    Ok(sections)
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(60) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn header_int(header: &HashMap<&str, &str>, key: &str) -> Result<Option<i64>, ReadError> {
    header
        .get(key)
        .map(|v| v.parse::<i64>().map_err(|_| malformed(format!("header `{key}` is not an integer: `{}`", truncate(v)))))
        .transpose()
}

/// What the objective line means for the reported outputs.
struct Objective {
    task: Task,
    link: Link,
}

fn objective_param(tokens: &[&str], name: &str) -> Result<Option<f64>, ReadError> {
    for tok in tokens {
        if let Some((k, v)) = tok.split_once(':') {
            if k == name {
                let x = v.parse::<f64>().map_err(|_| malformed(format!("objective parameter `{tok}` is not a number")))?;
                return Ok(Some(x));
            }
        }
    }
    Ok(None)
}

fn sigmoid_scale(objective: &str, tokens: &[&str]) -> Result<f64, ReadError> {
    match objective_param(tokens, "sigmoid")? {
        Some(s) if s.is_finite() && s > 0.0 => Ok(s),
        Some(s) => Err(malformed(format!("objective `{objective}`: sigmoid parameter {s} is not positive"))),
        None => Err(malformed(format!("objective `{objective}` has no `sigmoid:` parameter"))),
    }
}

fn parse_objective(objective: Option<&str>, n_outputs: usize) -> Result<Objective, ReadError> {
    let raw = |n_outputs: usize| Objective {
        task: if n_outputs > 1 { Task::MulticlassClassification } else { Task::Regression },
        link: Link::Identity,
    };
    let Some(objective) = objective else {
        // No objective line: LightGBM predicts raw scores (e.g. a custom objective).
        return Ok(raw(n_outputs));
    };
    let tokens: Vec<&str> = objective.split_whitespace().collect();
    let Some(&kind) = tokens.first() else {
        return Ok(raw(n_outputs));
    };
    let single = |what: &str| {
        if n_outputs == 1 {
            Ok(())
        } else {
            Err(malformed(format!("objective `{what}` with {n_outputs} trees per iteration")))
        }
    };
    let regression = |link| Objective { task: Task::Regression, link };
    Ok(match kind {
        "binary" => {
            single(kind)?;
            Objective { task: Task::BinaryClassification, link: Link::Sigmoid { scale: sigmoid_scale(objective, &tokens)? } }
        }
        "multiclass" | "multiclassova" => {
            if let Some(k) = objective_param(&tokens, "num_class")? {
                if k != n_outputs as f64 {
                    return Err(malformed(format!("objective `{objective}` but {n_outputs} trees per iteration")));
                }
            }
            let link = if kind == "multiclass" { Link::Softmax } else { Link::Sigmoid { scale: sigmoid_scale(objective, &tokens)? } };
            Objective { task: Task::MulticlassClassification, link }
        }
        "regression" | "regression_l1" | "quantile" | "fair" | "mape" | "mean_absolute_percentage_error" => {
            single(kind)?;
            if tokens.contains(&"sqrt") {
                return Err(ReadError::unsupported(
                    FORMAT,
                    format!("objective `{objective}` (reg_sqrt: LightGBM squares the prediction)"),
                    None,
                ));
            }
            regression(Link::Identity)
        }
        // LightGBM disables `sqrt` for huber itself.
        "huber" | "lambdarank" | "rank_xendcg" => {
            single(kind)?;
            regression(Link::Identity)
        }
        "poisson" | "gamma" | "tweedie" => {
            single(kind)?;
            regression(Link::Exp)
        }
        "cross_entropy" | "xentropy" => {
            single(kind)?;
            regression(Link::Sigmoid { scale: 1.0 })
        }
        "none" | "null" | "custom" | "na" => raw(n_outputs),
        _ => return Err(ReadError::unsupported(FORMAT, format!("objective `{objective}`"), None)),
    })
}

/// Parses a whitespace-separated list of exactly `len` values.
pub(super) fn list<T: std::str::FromStr>(
    t: usize,
    tree: &HashMap<&str, &str>,
    key: &str,
    len: usize,
) -> Result<Vec<T>, ReadError> {
    let Some(text) = tree.get(key) else {
        return Err(tree_err(t, format_args!("missing `{key}`")));
    };
    let mut out = Vec::with_capacity(len.min(1 << 16));
    for tok in text.split_whitespace() {
        if out.len() == len {
            return Err(tree_err(t, format_args!("`{key}` has more than {len} values")));
        }
        let v = tok.parse::<T>().map_err(|_| tree_err(t, format_args!("`{key}`: bad value `{}`", truncate(tok))))?;
        out.push(v);
    }
    if out.len() != len {
        return Err(tree_err(t, format_args!("`{key}` has {} values, expected {len}", out.len())));
    }
    Ok(out)
}

pub(super) fn tree_int(t: usize, tree: &HashMap<&str, &str>, key: &str) -> Result<Option<i64>, ReadError> {
    tree.get(key)
        .map(|v| v.parse::<i64>().map_err(|_| tree_err(t, format_args!("`{key}` is not an integer: `{}`", truncate(v)))))
        .transpose()
}

/// Per-feature facts gathered from the header and the splits.
#[derive(Clone)]
struct FeatureInfo {
    categorical: bool,
    /// One past the largest category code seen (feature_infos or split bitsets).
    buckets: u64,
}

fn parse_feature_infos(text: &str, n_features: usize) -> Result<Vec<FeatureInfo>, ReadError> {
    let tokens: Vec<&str> = text.split_whitespace().collect();
    if tokens.len() != n_features {
        return Err(malformed(format!("feature_infos has {} entries for {n_features} features", tokens.len())));
    }
    tokens
        .iter()
        .enumerate()
        .map(|(i, tok)| {
            if *tok == "none" || tok.starts_with('[') {
                return Ok(FeatureInfo { categorical: false, buckets: 0 });
            }
            let mut buckets = 0u64;
            for c in tok.split(':') {
                let c: i64 = c
                    .parse()
                    .map_err(|_| malformed(format!("feature_infos entry {i} is neither a range nor categories: `{}`", truncate(tok))))?;
                if c >= 0 {
                    buckets = buckets.max(c as u64 + 1);
                }
            }
            Ok(FeatureInfo { categorical: true, buckets })
        })
        .collect()
}

/// Child reference (`>= 0` internal node, `< 0` `~leaf`) → IR node index.
fn child_index(t: usize, child: i32, n_internal: usize, n_leaves: usize) -> Result<usize, ReadError> {
    if child >= 0 {
        let c = child as usize;
        if c >= n_internal {
            return Err(tree_err(t, format_args!("child node {c} out of range ({n_internal} internal nodes)")));
        }
        Ok(c)
    } else {
        let leaf = !child as usize;
        if leaf >= n_leaves {
            return Err(tree_err(t, format_args!("child leaf {leaf} out of range ({n_leaves} leaves)")));
        }
        Ok(n_internal + leaf)
    }
}

/// The numeric test LightGBM applies to the raw value `x` once tiny values are read as 0.0
/// (see the module docs).
fn numeric_le(threshold: f64) -> Test {
    if (-K_ZERO_THRESHOLD..0.0).contains(&threshold) {
        Test::Lt(-K_ZERO_THRESHOLD)
    } else if (0.0..K_ZERO_THRESHOLD).contains(&threshold) {
        Test::Le(K_ZERO_THRESHOLD)
    } else {
        Test::Le(threshold)
    }
}

/// One tree, and the categorical features its bitsets use: (feature, one past the largest
/// category), merged into the feature table by the caller (trees are read in parallel).
/// One tree as read: its IR, (feature, category count) of its categorical splits, and its
/// nodes' covers (internal nodes, then leaves) where the file has them.
type ReadTree = (Tree, Vec<(usize, u64)>, Option<Vec<f64>>);

fn read_tree(
    t: usize,
    block: &HashMap<&str, &str>,
    n_outputs: usize,
    n_features: usize,
) -> Result<ReadTree, ReadError> {
    let mut categorical = Vec::new();
    let output = (t % n_outputs) as u32;
    let n_leaves = tree_int(t, block, "num_leaves")?.ok_or_else(|| tree_err(t, "missing `num_leaves`"))?;
    if !(1..=(1 << 24)).contains(&n_leaves) {
        return Err(tree_err(t, format_args!("num_leaves = {n_leaves}")));
    }
    let n_leaves = n_leaves as usize;
    let leaf_values: Vec<f64> = list(t, block, "leaf_value", n_leaves)?;
    if let Some(v) = leaf_values.iter().find(|v| !v.is_finite()) {
        return Err(tree_err(t, format_args!("leaf value {v} is not finite")));
    }
    let leaves = match tree_int(t, block, "is_linear")? {
        Some(0) | None => leaf_values.into_iter().map(|value| Node::Leaf { value }).collect(),
        Some(1) => linear_leaves(t, block, &leaf_values, n_features)?,
        Some(other) => return Err(tree_err(t, format_args!("is_linear = {other}"))),
    };
    // Covers: the training rows that reached each node (internal nodes, then leaves, as the
    // nodes are laid out here); a lone leaf's count does not matter.
    let leaf_counts: Option<Vec<f64>> = list(t, block, "leaf_count", n_leaves).ok();
    if n_leaves == 1 {
        return Ok((Tree { output, nodes: leaves }, categorical, Some(leaf_counts.unwrap_or(vec![1.0]))));
    }
    let n_internal = n_leaves - 1;
    let internal_counts: Option<Vec<f64>> = list(t, block, "internal_count", n_internal).ok();
    let covers = internal_counts.zip(leaf_counts).map(|(i, l)| [i, l].concat());
    let num_cat = tree_int(t, block, "num_cat")?.unwrap_or(0);
    if num_cat < 0 || num_cat > n_internal as i64 {
        return Err(tree_err(t, format_args!("num_cat = {num_cat}")));
    }
    let num_cat = num_cat as usize;
    let split_feature: Vec<i64> = list(t, block, "split_feature", n_internal)?;
    let threshold: Vec<f64> = list(t, block, "threshold", n_internal)?;
    let decision_type: Vec<i64> = list(t, block, "decision_type", n_internal)?;
    let left: Vec<i32> = list(t, block, "left_child", n_internal)?;
    let right: Vec<i32> = list(t, block, "right_child", n_internal)?;
    let (cat_boundaries, cat_threshold): (Vec<i64>, Vec<u32>) = if num_cat > 0 {
        let b: Vec<i64> = list(t, block, "cat_boundaries", num_cat + 1)?;
        let n_words = b[num_cat];
        if !(0..=(1 << 26)).contains(&n_words) {
            return Err(tree_err(t, format_args!("cat_boundaries ends at {n_words}")));
        }
        let words: Vec<u32> = list(t, block, "cat_threshold", n_words as usize)?;
        if b[0] != 0 || b.windows(2).any(|w| w[0] > w[1]) {
            return Err(tree_err(t, "cat_boundaries are not increasing from 0"));
        }
        (b, words)
    } else {
        (Vec::new(), Vec::new())
    };

    // Check the structure is a tree rooted at node 0: every other node has exactly one parent
    // and is reachable from the root.
    let n_nodes = n_internal + n_leaves;
    let mut children = Vec::with_capacity(n_internal);
    let mut parents = vec![0u32; n_nodes];
    for i in 0..n_internal {
        let yes = child_index(t, left[i], n_internal, n_leaves)?;
        let no = child_index(t, right[i], n_internal, n_leaves)?;
        for c in [yes, no] {
            parents[c] += 1;
        }
        children.push((yes, no));
    }
    if parents[0] != 0 {
        return Err(tree_err(t, "the root node is a child of another node (cycle)"));
    }
    if let Some(n) = (1..n_nodes).find(|&n| parents[n] != 1) {
        let what = if n < n_internal { format!("node {n}") } else { format!("leaf {}", n - n_internal) };
        return Err(tree_err(t, format_args!("{what} has {} parents", parents[n])));
    }
    let mut reached = 0usize;
    let mut stack = vec![0usize];
    let mut seen = vec![false; n_nodes];
    while let Some(n) = stack.pop() {
        if std::mem::replace(&mut seen[n], true) {
            return Err(tree_err(t, "cycle among nodes"));
        }
        reached += 1;
        if n < n_internal {
            stack.push(children[n].0);
            stack.push(children[n].1);
        }
    }
    if reached != n_nodes {
        return Err(tree_err(t, "some nodes are not reachable from the root (cycle)"));
    }

    let mut nodes = Vec::with_capacity(n_nodes);
    for i in 0..n_internal {
        let feature = split_feature[i];
        if feature < 0 || feature as usize >= n_features {
            return Err(tree_err(t, format_args!("node {i}: split feature {feature} out of range")));
        }
        let dt = decision_type[i];
        if !(0..16).contains(&dt) {
            return Err(tree_err(t, format_args!("node {i}: decision_type {dt}")));
        }
        let th = threshold[i];
        if th.is_nan() {
            return Err(tree_err(t, format_args!("node {i}: NaN threshold")));
        }
        let default_left = dt & 2 != 0;
        let missing_type = (dt >> 2) & 3;
        let (yes, no) = children[i];
        let (test, missing_yes) = if dt & 1 != 0 {
            // LightGBM only consults the bitsets when the tree has num_cat > 0.
            if num_cat == 0 {
                return Err(tree_err(t, format_args!("node {i}: categorical split in a tree with num_cat=0")));
            }
            if th < 0.0 || th.fract() != 0.0 || th >= num_cat as f64 {
                return Err(tree_err(t, format_args!("node {i}: categorical threshold {th} is not an index below num_cat={num_cat}")));
            }
            let idx = th as usize;
            let (lo, hi) = (cat_boundaries[idx] as usize, cat_boundaries[idx + 1] as usize);
            let mut categories = Vec::new();
            for (w, &word) in cat_threshold[lo..hi].iter().enumerate() {
                for bit in 0..32 {
                    if word >> bit & 1 != 0 {
                        categories.push((w * 32 + bit) as u32);
                    }
                }
            }
            categorical.push((feature as usize, categories.last().map_or(0, |&max| max as u64 + 1)));
            (Test::InSet { categories, invalid_at_or_below: -1.0 }, false)
        } else {
            match missing_type {
                0 => (numeric_le(th), 0.0 <= th),
                1 => (Test::LeZeroAsMissing(th), default_left),
                2 => (numeric_le(th), default_left),
                _ => return Err(tree_err(t, format_args!("node {i}: unknown missing type 3 (decision_type {dt})"))),
            }
        };
        nodes.push(Node::Split { feature: feature as u32, test, missing_yes, yes: yes as u32, no: no as u32 });
    }
    nodes.extend(leaves);
    Ok((Tree { output, nodes }, categorical, covers))
}

/// A linear tree's leaves (`linear_tree=True`): `leaf_const`, then per leaf `num_features`
/// (feature, coefficient) pairs from the flattened `leaf_features` / `leaf_coeff` lists; the
/// plain `leaf_value` is what LightGBM predicts when one of a leaf's features is NaN.
fn linear_leaves(t: usize, block: &HashMap<&str, &str>, leaf_values: &[f64], n_features: usize) -> Result<Vec<Node>, ReadError> {
    let n_leaves = leaf_values.len();
    let constants: Vec<f64> = list(t, block, "leaf_const", n_leaves)?;
    let counts: Vec<usize> = list(t, block, "num_features", n_leaves)?;
    let total = counts.iter().try_fold(0usize, |a, &c| a.checked_add(c)).filter(|&n| n <= 1 << 24);
    let total = total.ok_or_else(|| tree_err(t, "`num_features` adds up to too many terms"))?;
    let features: Vec<i64> = list(t, block, "leaf_features", total)?;
    let coeffs: Vec<f64> = list(t, block, "leaf_coeff", total)?;
    let mut at = 0;
    let mut leaves = Vec::with_capacity(n_leaves);
    for (leaf, (&count, (&constant, &fallback))) in counts.iter().zip(constants.iter().zip(leaf_values)).enumerate() {
        if !constant.is_finite() {
            return Err(tree_err(t, format_args!("leaf {leaf}: leaf_const {constant} is not finite")));
        }
        let mut terms = Vec::with_capacity(count);
        for (&f, &c) in features[at..at + count].iter().zip(&coeffs[at..at + count]) {
            if f < 0 || f as usize >= n_features {
                return Err(tree_err(t, format_args!("leaf {leaf}: linear term on feature {f} of {n_features}")));
            }
            if !c.is_finite() {
                return Err(tree_err(t, format_args!("leaf {leaf}: coefficient {c} is not finite")));
            }
            terms.push((f as u32, c));
        }
        at += count;
        leaves.push(Node::LinearLeaf { constant, terms, fallback });
    }
    Ok(leaves)
}

pub fn read(bytes: &[u8]) -> Result<ModelIr, ReadError> {
    let text = std::str::from_utf8(bytes).map_err(|e| malformed(format!("not UTF-8 text: {e}")))?;
    let sections = split_sections(text)?;
    let header = &sections.header;

    let num_class = header_int(header, "num_class")?.ok_or_else(|| malformed("missing `num_class`"))?;
    let per_iteration = header_int(header, "num_tree_per_iteration")?.unwrap_or(num_class);
    if !(1..=1 << 16).contains(&num_class) || per_iteration != num_class {
        return Err(malformed(format!("num_class = {num_class}, num_tree_per_iteration = {per_iteration}")));
    }
    let n_outputs = per_iteration as usize;
    let max_feature_idx = header_int(header, "max_feature_idx")?.ok_or_else(|| malformed("missing `max_feature_idx`"))?;
    if !(0..1 << 24).contains(&max_feature_idx) {
        return Err(malformed(format!("max_feature_idx = {max_feature_idx}")));
    }
    let n_features = max_feature_idx as usize + 1;

    // Required (as LightGBM does); also bounds the feature table by the input size.
    let names_text = header.get("feature_names").ok_or_else(|| malformed("missing `feature_names`"))?;
    let names: Vec<String> = names_text.split_whitespace().map(str::to_string).collect();
    if names.len() != n_features {
        return Err(malformed(format!("feature_names has {} names for {n_features} features", names.len())));
    }
    let mut infos = match header.get("feature_infos") {
        Some(text) => parse_feature_infos(text, n_features)?,
        None => vec![FeatureInfo { categorical: false, buckets: 0 }; n_features],
    };

    let objective_text = header.get("objective").copied();
    let Objective { task, link } = parse_objective(objective_text, n_outputs)?;

    if sections.trees.len() % n_outputs != 0 {
        return Err(malformed(format!("{} trees is not a multiple of {n_outputs} trees per iteration", sections.trees.len())));
    }
    // Trees are independent: parsed on every core (LightGBM loads them the same way), then
    // the first error in tree order is the one reported.
    let parsed: Vec<_> = sections.trees.par_iter().enumerate().map(|(t, block)| read_tree(t, block, n_outputs, n_features)).collect();
    let mut trees = Vec::with_capacity(parsed.len());
    let mut covers = Some(Vec::with_capacity(parsed.len()));
    for result in parsed {
        let (tree, categorical, tree_covers) = result?;
        // Covers for every tree, or none.
        covers = covers.zip(tree_covers).map(|(mut all, c)| {
            all.push(c);
            all
        });
        for (feature, buckets) in categorical {
            infos[feature].categorical = true;
            infos[feature].buckets = infos[feature].buckets.max(buckets);
        }
        trees.push(tree);
    }

    let aggregate = if sections.flags.contains(&"average_output") {
        let iterations = trees.len() / n_outputs;
        if iterations == 0 {
            return Err(malformed("average_output with no trees"));
        }
        Aggregate::Average { divisor: iterations as f64 }
    } else {
        Aggregate::Sum
    };

    let features = names
        .into_iter()
        .zip(infos)
        .map(|(name, info)| FeatureDef {
            name,
            kind: if info.categorical {
                FeatureKind::Categorical { buckets: info.buckets.clamp(1, u32::MAX as u64) as u32 }
            } else {
                FeatureKind::Numeric
            },
        })
        .collect();

    Ok(ModelIr {
        ua_fingerprints: Vec::new(),
        name: String::new(),
        version: header.get("version").map(|v| v.to_string()).unwrap_or_default(),
        source: SourceFormat::LightGBM,
        objective: objective_text.unwrap_or("").to_string(),
        task,
        link,
        aggregate,
        base_score: vec![0.0; n_outputs],
        features,
        ctrs: Vec::new(),
        trees,
        covers: covers.map(|per_tree| Covers { kind: CoverKind::Rows, per_tree }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readers::library_check::{message, Damage, Library};

    const LIGHTGBM: Library = Library { format: "LightGBM", prefix: "lgb_reader", extension: "txt", read, raw_is_sum: true };

    /// Scores every stored row and compares with LightGBM's own predictions (whose raw score of
    /// an averaging model, a random forest, is the plain sum).
    fn check_against_library(name: &str) -> ModelIr {
        let ir = LIGHTGBM.check(name);
        assert_eq!(ir.source, SourceFormat::LightGBM);
        assert!(ir.base_score.iter().all(|&b| b == 0.0));
        ir
    }

    #[test]
    fn binary_with_nans_and_categories() {
        let ir = check_against_library("binary_nan");
        assert_eq!(ir.task, Task::BinaryClassification);
        assert_eq!(ir.link, Link::Sigmoid { scale: 1.0 });
        assert_eq!(ir.objective, "binary sigmoid:1");
        assert_eq!(ir.trees.len(), 20);
        let names: Vec<&str> = ir.features.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "e"]);
        assert_eq!(ir.features[2].kind, FeatureKind::Categorical { buckets: 10 });
        assert_eq!(ir.features[0].kind, FeatureKind::Numeric);
        assert_eq!(ir.aggregate, Aggregate::Sum);
    }

    #[test]
    fn multiclass_softmax() {
        let ir = check_against_library("multiclass");
        assert_eq!(ir.task, Task::MulticlassClassification);
        assert_eq!(ir.link, Link::Softmax);
        assert_eq!(ir.n_outputs(), 3);
        assert_eq!(ir.trees.iter().map(|t| t.output).take(4).collect::<Vec<_>>(), [0, 1, 2, 0]);
        assert_eq!(ir.features[3].kind, FeatureKind::Categorical { buckets: 50 });
        // Some set reaches past the first bitset word.
        let wide = ir.trees.iter().flat_map(|t| &t.nodes).any(|n| {
            matches!(n, Node::Split { test: Test::InSet { categories, .. }, .. } if categories.iter().any(|&c| c >= 32))
        });
        assert!(wide);
    }

    #[test]
    fn multiclass_one_vs_all() {
        let ir = check_against_library("multiclassova");
        assert_eq!(ir.link, Link::Sigmoid { scale: 0.7 });
        assert_eq!(ir.task, Task::MulticlassClassification);
    }

    #[test]
    fn regression_zero_as_missing() {
        let ir = check_against_library("regression_zero");
        assert_eq!(ir.link, Link::Identity);
        assert_eq!(ir.task, Task::Regression);
        let zero = ir.trees.iter().flat_map(|t| &t.nodes).any(|n| matches!(n, Node::Split { test: Test::LeZeroAsMissing(_), .. }));
        assert!(zero);
    }

    #[test]
    fn categorical_unseen_negative_nan_codes() {
        let ir = check_against_library("categorical");
        assert_eq!(ir.features[0].kind, FeatureKind::Categorical { buckets: 70 });
        assert_eq!(ir.features[1].kind, FeatureKind::Categorical { buckets: 4 });
    }

    #[test]
    fn poisson_random_forest_cross_entropy() {
        assert_eq!(check_against_library("poisson").link, Link::Exp);
        let rf = check_against_library("rf_binary");
        assert_eq!(rf.aggregate, Aggregate::Average { divisor: 6.0 });
        assert_eq!(check_against_library("xentropy").link, Link::Sigmoid { scale: 1.0 });
    }

    #[test]
    fn single_leaf_trees() {
        let ir = check_against_library("constant");
        assert!(ir.trees.iter().all(|t| t.nodes.len() == 1));
    }

    #[test]
    fn thresholds_near_zero_and_hand_written_bitsets() {
        let ir = check_against_library("handmade");
        let tests: Vec<&Test> = ir
            .trees
            .iter()
            .map(|t| match &t.nodes[0] {
                Node::Split { test, .. } => test,
                _ => panic!("expected a split"),
            })
            .collect();
        assert_eq!(tests[0], &Test::Lt(-K_ZERO_THRESHOLD));
        assert_eq!(tests[1], &Test::Le(K_ZERO_THRESHOLD));
        assert_eq!(tests[2], &Test::Lt(-K_ZERO_THRESHOLD));
        assert_eq!(tests[3], &Test::Le(K_ZERO_THRESHOLD));
        assert_eq!(tests[4], &Test::InSet { categories: vec![0, 2, 40], invalid_at_or_below: -1.0 });
        assert_eq!(ir.features[1].kind, FeatureKind::Categorical { buckets: 41 });
        // NaN: None type → 0.0 <= t; NaN type → default child; categorical → right.
        let missing: Vec<bool> = ir
            .trees
            .iter()
            .map(|t| match &t.nodes[0] {
                Node::Split { missing_yes, .. } => *missing_yes,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(missing, [false, false, true, true, false, false]);
    }

    #[test]
    fn refuses_sqrt() {
        assert_eq!(
            message(LIGHTGBM.read_file("sqrt.refuse.txt")),
            "unsupported in lightgbm model: objective `regression sqrt` (reg_sqrt: LightGBM squares the prediction)"
        );
    }

    fn handmade() -> String {
        std::fs::read_to_string(LIGHTGBM.data("handmade.txt")).unwrap()
    }

    #[test]
    fn refuses_unknown_objective() {
        let text = handmade().replace("objective=regression", "objective=cross_entropy_lambda");
        assert_eq!(message(read(text.as_bytes())), "unsupported in lightgbm model: objective `cross_entropy_lambda`");
    }

    #[test]
    fn malformed_models_name_the_tree() {
        let base = handmade();
        let cases: &[(&str, &str, &str)] = &[
            ("left_child=-1\nright_child=-2\nleaf_value=-3", "left_child=5\nright_child=-2\nleaf_value=-3", "tree 2: child node 5 out of range"),
            ("left_child=-1\nright_child=-2\nleaf_value=-3", "left_child=0\nright_child=-2\nleaf_value=-3", "tree 2: the root node is a child"),
            ("left_child=-1\nright_child=-2\nleaf_value=-3", "left_child=-1\nright_child=-1\nleaf_value=-3", "tree 2: leaf 0 has 2 parents"),
            ("left_child=-1\nright_child=-2\nleaf_value=-3", "left_child=-1\nright_child=-3\nleaf_value=-3", "tree 2: child leaf 2 out of range"),
            ("threshold=5.0000000000000001e-36", "threshold=nan", "tree 1: node 0: NaN threshold"),
            ("leaf_value=-1 1", "leaf_value=-1", "tree 0: `leaf_value` has 1 values, expected 2"),
            ("split_feature=1", "split_feature=2", "tree 4: node 0: split feature 2 out of range"),
            ("cat_boundaries=0 2", "cat_boundaries=0 3", "tree 4: `cat_threshold` has 2 values, expected 3"),
            ("threshold=0\ndecision_type=9", "threshold=1\ndecision_type=9", "tree 4: node 0: categorical threshold 1 is not an index below num_cat=1"),
            ("threshold=0\ndecision_type=9", "threshold=0.5\ndecision_type=9", "tree 4: node 0: categorical threshold 0.5"),
            ("decision_type=10", "decision_type=14", "tree 2: node 0: unknown missing type 3"),
            ("num_leaves=2\nnum_cat=0\nsplit_feature=0\nsplit_gain=1\nthreshold=-1", "num_leaves=x\nnum_cat=0\nsplit_feature=0\nsplit_gain=1\nthreshold=-1", "tree 0: `num_leaves` is not an integer"),
            ("end of trees\n\npandas_categorical:null\n", "", "no `end of trees` line"),
            ("end of trees", "", "tree 5: unexpected line `pandas_categorical:null`"),
            ("max_feature_idx=1\n", "", "missing `max_feature_idx`"),
            ("feature_names=x c", "feature_names=x", "feature_names has 1 names for 2 features"),
            ("feature_names=x c\n", "", "missing `feature_names`"),
            ("num_class=1", "num_class=2", "num_class = 2, num_tree_per_iteration = 1"),
        ];
        for (from, to, want) in cases {
            assert!(base.contains(from), "{from}");
            let text = base.replacen(from, to, 1);
            let msg = match read(text.as_bytes()) {
                Ok(_) => panic!("{from:?} -> {to:?} was accepted"),
                Err(e) => e.to_string(),
            };
            assert!(msg.starts_with("malformed lightgbm model: "), "{msg}");
            assert!(msg.contains(want), "{msg:?} should contain {want:?}");
        }
        // A categorical threshold index in a tree whose categorical split has num_cat=0.
        let text = base.replacen("num_cat=1", "num_cat=0", 1);
        assert!(message(read(text.as_bytes())).contains("tree 4: node 0: categorical split in a tree with num_cat=0"));
        assert!(message(read(b"\xff\xfe")).contains("not UTF-8"));
        assert!(message(read(b"")).contains("does not start with a `tree` line"));
    }

    #[test]
    fn cycles_are_rejected() {
        // Internal nodes 1 and 2 point at each other; leaves hang off the root and node 1.
        let tree = "Tree=0\nnum_leaves=4\nnum_cat=0\nsplit_feature=0 0 0\nthreshold=0 1 2\ndecision_type=2 2 2\n\
                    left_child=-1 2 1\nright_child=-2 -3 -4\nleaf_value=1 2 3 4\nshrinkage=1\n\n";
        let text = format!("tree\nnum_class=1\nmax_feature_idx=0\nfeature_names=x\nobjective=regression\n\n{tree}end of trees\n");
        let msg = message(read(text.as_bytes()));
        assert!(msg.contains("tree 0: some nodes are not reachable from the root (cycle)"), "{msg}");
        let tree = tree.replace("left_child=-1 2 1", "left_child=1 2 1").replace("right_child=-2 -3 -4", "right_child=-1 -2 -3");
        let text = format!("tree\nnum_class=1\nmax_feature_idx=0\nfeature_names=x\nobjective=regression\n\n{tree}end of trees\n");
        let msg = message(read(text.as_bytes()));
        assert!(msg.contains("tree 0: "), "{msg}");
    }

    #[test]
    fn never_panics_on_damaged_input() {
        let damage = Damage { prefix_step: 97, rounds: 300, max_edits: 4, noise: b"-09 \n=x.e", seed: 0x2545_f491_4f6c_dd1d };
        LIGHTGBM.read_damaged("multiclass.txt", damage);
    }
}
