//! XGBoost JSON and UBJSON models (`Booster.save_model("m.json")` / `("m.ubj")`, `save_raw()`;
//! XGBoost 1.6 – 3.x). Both forms deserialize into one typed document (UBJSON through
//! `ubjson`'s serde deserializer), so they give the same artifact.
//!
//! Semantics reproduced (XGBoost `src/predictor/predict_fn.h`): `x < split_condition` goes
//! left; NaN goes to the default child; categorical splits send a category that is in the
//! node's set to the RIGHT, and invalid categories (negative, beyond the set) to the left.
//! `base_score` is stored in output space and converted to a margin per objective.

mod ubjson;

use crate::readers::error::ReadError;
use crate::ir::{Aggregate, CoverKind, Covers, FeatureDef, FeatureKind, Link, ModelIr, Node, SourceFormat, Task, Test, Tree};
use rayon::prelude::*;
use serde::Deserialize;
use serde_json::value::RawValue;

const FORMAT: &str = "XGBoost";

fn malformed(detail: impl Into<String>) -> ReadError {
    ReadError::malformed(FORMAT, detail)
}

// The document, typed: only the fields the reader uses are kept; serde skips the rest (e.g.
// `loss_changes`) without allocating. Typed parsing is several times faster
// than a `serde_json::Value` tree on multi-megabyte models.
#[derive(Deserialize)]
struct Document<'a> {
    #[serde(borrow)]
    learner: Learner<'a>,
}

#[derive(Deserialize)]
struct Learner<'a> {
    #[serde(default)]
    feature_names: Vec<String>,
    #[serde(default)]
    feature_types: Vec<String>,
    #[serde(borrow)]
    gradient_booster: Booster<'a>,
    learner_model_param: ModelParam,
    objective: ObjectiveName,
}

#[derive(Deserialize)]
struct Booster<'a> {
    name: String,
    /// gbtree (gblinear's `model` holds `weights` instead: refused by name, see `read`)
    #[serde(borrow, default)]
    model: Option<TreeModel<'a>>,
    /// dart: the trees, and one weight per tree
    #[serde(borrow, default)]
    gbtree: Option<DartTrees<'a>>,
    #[serde(default)]
    weight_drop: Option<Vec<f64>>,
}

#[derive(Deserialize)]
struct DartTrees<'a> {
    #[serde(borrow)]
    model: TreeModel<'a>,
}

/// Optional fields so that a `gblinear` booster's `model` (no trees) deserializes and is refused
/// by its name, not as a missing field.
#[derive(Deserialize)]
struct TreeModel<'a> {
    #[serde(borrow, default)]
    trees: Option<Vec<TreeSource<'a>>>,
    #[serde(default)]
    tree_info: Option<Vec<i64>>,
}

#[derive(Deserialize)]
struct ModelParam {
    base_score: String,
    #[serde(default)]
    num_class: Option<String>,
    num_feature: String,
    #[serde(default)]
    num_target: Option<String>,
}

#[derive(Deserialize)]
struct ObjectiveName {
    name: String,
}

/// XGBoost 1.x wrote `default_left` as booleans, 2.x and later as 0/1. (A visitor rather than
/// an untagged enum: that tries `bool` first and builds an error message for every 0/1.)
#[derive(Clone, Copy)]
struct Flag(bool);

impl Flag {
    fn set(self) -> bool {
        self.0
    }
}

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a boolean or an integer")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Flag, E> {
                Ok(Flag(v >= 1))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Flag, E> {
                Ok(Flag(v >= 1))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
struct TreeJson<'a> {
    left_children: Vec<i64>,
    right_children: Vec<i64>,
    #[serde(borrow)]
    split_conditions: F32s<'a>,
    split_indices: Vec<i64>,
    default_left: Vec<Flag>,
    #[serde(default)]
    split_type: Vec<i64>,
    #[serde(default)]
    categories: Vec<i64>,
    #[serde(default)]
    categories_nodes: Vec<i64>,
    #[serde(default)]
    categories_segments: Vec<i64>,
    #[serde(default)]
    categories_sizes: Vec<i64>,
    #[serde(default)]
    tree_param: Option<TreeParam>,
    /// Vector-leaf trees (XGBoost 3.x): `size_leaf_vector` values per leaf; a leaf node's
    /// `right_children` entry is its leaf index.
    #[serde(borrow, default)]
    leaf_weights: Option<F32s<'a>>,
    /// Vector-leaf trees (XGBoost 2.x): `size_leaf_vector` values per node, a leaf's own
    /// values among them.
    #[serde(borrow, default)]
    base_weights: Option<F32s<'a>>,
    /// Each node's cover: the sum of the hessians of the training rows that reached it.
    #[serde(borrow, default)]
    sum_hessian: Option<F32s<'a>>,
}

/// An array of XGBoost's f32 values. From JSON it is kept as text, parsed when its tree is
/// read: XGBoost writes each f32 in its shortest form, and parsing that text as f32 gives
/// exactly the value XGBoost holds (through f64 it could round twice). From UBJSON it is the
/// binary f32s themselves (see `ubjson::F32_ARRAY`).
enum F32s<'a> {
    Text(&'a RawValue),
    Values(Vec<f32>),
}

impl<'de: 'a, 'a> Deserialize<'de> for F32s<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = F32s<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of numbers")
            }
            // serde_json: the raw text of the array.
            fn visit_newtype_struct<D: serde::Deserializer<'de>>(self, d: D) -> Result<F32s<'a>, D::Error> {
                <&RawValue>::deserialize(d).map(F32s::Text)
            }
            // UBJSON: the values.
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<F32s<'a>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(v) = seq.next_element::<f32>()? {
                    out.push(v);
                }
                Ok(F32s::Values(out))
            }
        }
        d.deserialize_newtype_struct(ubjson::F32_ARRAY, V(std::marker::PhantomData))
    }
}

/// A tree as the document gives it: from JSON, deserialized where it stands (serde_json reads
/// in one pass); from UBJSON, its bytes only (`ubjson::SPAN`), decoded with the tree's other
/// work on every core (decoding the trees is most of a `.ubj` compile).
enum TreeSource<'a> {
    Read(Box<TreeJson<'a>>),
    Ubjson(&'a [u8]),
}

impl<'de: 'a, 'a> Deserialize<'de> for TreeSource<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = TreeSource<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a tree")
            }
            fn visit_newtype_struct<D: serde::Deserializer<'de>>(self, d: D) -> Result<TreeSource<'a>, D::Error> {
                TreeJson::deserialize(d).map(|t| TreeSource::Read(Box::new(t)))
            }
            fn visit_borrowed_bytes<E: serde::de::Error>(self, bytes: &'de [u8]) -> Result<TreeSource<'a>, E> {
                Ok(TreeSource::Ubjson(bytes))
            }
        }
        d.deserialize_newtype_struct(ubjson::SPAN, V(std::marker::PhantomData))
    }
}

fn ubjson_error(e: ubjson::Error) -> ReadError {
    match e.schema {
        true => malformed(format!("not an XGBoost UBJSON model: {e}")),
        false => malformed(format!("damaged UBJSON: {e}")),
    }
}

#[derive(Deserialize)]
struct TreeParam {
    #[serde(default)]
    size_leaf_vector: Option<String>,
}

fn parse_usize(s: &str, what: &str) -> Result<usize, ReadError> {
    s.trim().parse().map_err(|_| malformed(format!("{what} {s:?} is not an integer")))
}

fn f32_array<'a>(array: &'a F32s, t: usize, what: &str) -> Result<std::borrow::Cow<'a, [f32]>, ReadError> {
    let raw = match array {
        F32s::Values(v) => return Ok(std::borrow::Cow::Borrowed(v)),
        F32s::Text(raw) => raw,
    };
    let text = raw.get().trim();
    let inner = text
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| malformed(format!("tree {t}: {what} is not an array")))?;
    if inner.trim().is_empty() {
        return Ok(Vec::new().into());
    }
    inner
        .split(',')
        .map(|v| v.trim().parse::<f32>().map_err(|_| malformed(format!("tree {t}: {what} value {:?} is not a number", v.trim()))))
        .collect::<Result<Vec<_>, _>>()
        .map(Into::into)
}

/// Whether `bytes` is UBJSON rather than JSON text: an object whose first key is announced by
/// a UBJSON integer marker (JSON text has `"` or whitespace there), or an optimised container.
pub(super) fn is_ubjson(bytes: &[u8]) -> bool {
    bytes.first() == Some(&b'{') && bytes.get(1).is_some_and(|b| matches!(b, b'i' | b'U' | b'I' | b'l' | b'L' | b'$' | b'#'))
}

/// "[5E-1]" or "5E-1" or "[1E0,2E0]" → values.
fn parse_base_score(s: &str) -> Result<Vec<f64>, ReadError> {
    let inner = s.trim().trim_start_matches('[').trim_end_matches(']');
    inner
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse::<f32>().map(f64::from).map_err(|_| malformed(format!("base_score {s:?} is not a number"))))
        .collect()
}

struct Objective {
    task_binary: bool,
    task_multi: bool,
    link: Link,
    /// How `base_score` (output space) maps to a margin.
    base_to_margin: fn(f64) -> f64,
}

fn objective(name: &str) -> Result<Objective, ReadError> {
    fn logit(p: f64) -> f64 {
        // XGBoost's ProbToMargin for logistic objectives: -log(1/p - 1), in float.
        let p = p as f32;
        (-(1.0f32 / p - 1.0).ln()) as f64
    }
    fn log(v: f64) -> f64 {
        ((v as f32).ln()) as f64
    }
    fn identity(v: f64) -> f64 {
        v
    }
    let sigmoid = Link::Sigmoid { scale: 1.0 };
    Ok(match name {
        "binary:logistic" => Objective { task_binary: true, task_multi: false, link: sigmoid, base_to_margin: logit },
        // LogisticRaw keeps base_score as the margin (no ProbToMargin), unlike binary:logistic.
        "binary:logitraw" => Objective { task_binary: true, task_multi: false, link: Link::Identity, base_to_margin: identity },
        "binary:hinge" => Objective { task_binary: true, task_multi: false, link: Link::Step, base_to_margin: identity },
        "reg:logistic" => Objective { task_binary: false, task_multi: false, link: sigmoid, base_to_margin: logit },
        "multi:softprob" | "multi:softmax" => {
            Objective { task_binary: false, task_multi: true, link: Link::Softmax, base_to_margin: identity }
        }
        "count:poisson" | "reg:gamma" | "reg:tweedie" | "survival:cox" | "survival:aft" => {
            Objective { task_binary: false, task_multi: false, link: Link::Exp, base_to_margin: log }
        }
        "reg:squarederror" | "reg:linear" | "reg:squaredlogerror" | "reg:pseudohubererror" | "reg:absoluteerror"
        | "reg:quantileerror" | "reg:expectileerror" | "rank:pairwise" | "rank:ndcg" | "rank:map" => {
            Objective { task_binary: false, task_multi: false, link: Link::Identity, base_to_margin: identity }
        }
        other => return Err(ReadError::unsupported(FORMAT, format!("objective {other:?}"), None)),
    })
}

/// A JSON or UBJSON model file as the typed document `T` (the reader's, or `gain`'s).
pub(super) fn deserialize<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ReadError> {
    if is_ubjson(bytes) {
        ubjson::from_slice(bytes).map_err(ubjson_error)
    } else {
        serde_json::from_slice(bytes).map_err(|e| json_error(bytes, e))
    }
}

/// XGBoost's JSON writer prints a value that is not finite as `NaN`, `Infinity` or
/// `-Infinity`, which JSON has no number for: said as such, not as a syntax error.
fn json_error(bytes: &[u8], e: serde_json::Error) -> ReadError {
    let line_start = bytes.split_inclusive(|&b| b == b'\n').take(e.line().saturating_sub(1)).map(<[u8]>::len).sum::<usize>();
    // serde_json points at the token, or past a leading '-'.
    let at = (line_start + e.column()).saturating_sub(2);
    let near = bytes.get(at..bytes.len().min(at + 10)).unwrap_or_default();
    match [&b"NaN"[..], b"Infinity"].into_iter().find(|word| near.windows(word.len()).take(3).any(|w| w == *word)) {
        Some(word) => malformed(format!(
            "line {} column {}: {} is not a number JSON can hold: the model has a value that is not finite (a leaf of a training that diverged?)",
            e.line(),
            e.column(),
            String::from_utf8_lossy(word)
        )),
        None => malformed(format!("not an XGBoost JSON model: {e}")),
    }
}

/// One tree as read: its IR, the largest category each categorical split tests (feature,
/// code), and its nodes' covers where the file has them.
type ReadTree = (Tree, Vec<(usize, u32)>, Option<Vec<f64>>);

pub fn read(bytes: &[u8]) -> Result<ModelIr, ReadError> {
    let doc: Document = deserialize(bytes)?;
    let learner = doc.learner;
    let booster = learner.gradient_booster;
    let (model, weights) = match booster.name.as_str() {
        "gbtree" => (booster.model.ok_or_else(|| malformed("gbtree booster without model"))?, None),
        "dart" => {
            let trees = booster.gbtree.ok_or_else(|| malformed("dart booster without gbtree"))?;
            let w = booster.weight_drop.ok_or_else(|| malformed("dart booster without weight_drop"))?;
            (trees.model, Some(w))
        }
        "gblinear" => {
            return Err(ReadError::unsupported(
                FORMAT,
                "booster `gblinear` (a linear model, not a tree ensemble: edgescore compiles gbtree and dart)",
                None,
            ))
        }
        other => return Err(ReadError::unsupported(FORMAT, format!("booster `{other}` (edgescore compiles gbtree and dart)"), None)),
    };
    let trees = model.trees.ok_or_else(|| malformed("the booster's model has no `trees`"))?;
    let tree_info = model.tree_info.ok_or_else(|| malformed("the booster's model has no `tree_info`"))?;
    let obj_name = learner.objective.name.as_str();
    let obj = objective(obj_name)?;
    let params = &learner.learner_model_param;
    let n_features = parse_usize(&params.num_feature, "num_feature")?;
    let num_class = params.num_class.as_deref().map(|s| parse_usize(s, "num_class")).transpose()?.unwrap_or(0);
    let num_target = params.num_target.as_deref().map(|s| parse_usize(s, "num_target")).transpose()?.unwrap_or(1).max(1);
    let n_outputs = if obj.task_multi { num_class.max(1) } else { num_target };
    let task = if obj.task_multi {
        Task::MulticlassClassification
    } else if obj.task_binary {
        Task::BinaryClassification
    } else {
        Task::Regression
    };
    let base = parse_base_score(&params.base_score)?;
    let base_score: Vec<f64> = match base.len() {
        1 => vec![(obj.base_to_margin)(base[0]); n_outputs],
        n if n == n_outputs => base.iter().map(|&b| (obj.base_to_margin)(b)).collect(),
        n => return Err(malformed(format!("base_score has {n} values for {n_outputs} outputs"))),
    };
    if tree_info.len() != trees.len() {
        return Err(malformed("tree_info and trees differ in length"));
    }
    if let Some(w) = &weights {
        if w.len() != trees.len() {
            return Err(malformed("weight_drop and trees differ in length"));
        }
    }
    let (feature_types, feature_names) = (learner.feature_types, learner.feature_names);
    let mut max_category = vec![None::<u32>; n_features];

    // Trees are independent: read on every core; the first error in tree order is reported.
    let read: Vec<Result<ReadTree, ReadError>> = trees
        .par_iter()
        .enumerate()
        .map(|(t, source)| {
            let decoded;
            let tj = match source {
                TreeSource::Read(tj) => &**tj,
                TreeSource::Ubjson(span) => {
                    decoded = ubjson::from_span::<TreeJson>(bytes, span).map_err(ubjson_error)?;
                    &decoded
                }
            };
            let output = tree_info[t];
            if output < 0 || output as usize >= n_outputs {
                return Err(malformed(format!("tree {t}: output {output} of {n_outputs}")));
            }
            let size_leaf = tj.tree_param.as_ref().and_then(|p| p.size_leaf_vector.as_deref()).unwrap_or("1");
            let size_leaf = parse_usize(size_leaf, "size_leaf_vector")?.max(1);
            if size_leaf > 1 && size_leaf != n_outputs {
                return Err(malformed(format!("tree {t}: leaf vectors of {size_leaf} values for {n_outputs} outputs")));
            }
            let weight = weights.as_ref().map_or(1.0, |w| w[t]);
            let (mut nodes, categories) = read_tree(tj, t, n_features, weight)?;
            if size_leaf > 1 {
                vector_leaves(tj, t, size_leaf, weight, &mut nodes)?;
            }
            let covers = match &tj.sum_hessian {
                Some(h) => Some(f32_array(h, t, "sum_hessian")?.iter().map(|&c| c as f64).collect::<Vec<_>>()).filter(|c| c.len() == nodes.len()),
                None => None,
            };
            Ok((Tree { output: if size_leaf > 1 { 0 } else { output as u32 }, nodes }, categories, covers))
        })
        .collect();
    let mut trees = Vec::with_capacity(read.len());
    let mut covers = Some(Vec::with_capacity(read.len()));
    for result in read {
        let (tree, categories, tree_covers) = result?;
        // Covers for every tree, or none: a model saved without them has no node values.
        covers = covers.zip(tree_covers).map(|(mut all, c)| {
            all.push(c);
            all
        });
        for (f, m) in categories {
            let slot = &mut max_category[f];
            *slot = Some(slot.map_or(m, |s| s.max(m)));
        }
        trees.push(tree);
    }

    let features = (0..n_features)
        .map(|i| {
            let categorical = feature_types.get(i).is_some_and(|t| t == "c") || max_category[i].is_some();
            FeatureDef {
                name: feature_names.get(i).filter(|n| !n.is_empty()).cloned().unwrap_or_else(|| format!("f{i}")),
                kind: if categorical {
                    FeatureKind::Categorical { buckets: max_category[i].map_or(1, |m| m + 1) }
                } else {
                    FeatureKind::Numeric
                },
            }
        })
        .collect();
    Ok(ModelIr {
        ua_fingerprints: Vec::new(),
        name: "xgboost-model".into(),
        version: "0".into(),
        source: SourceFormat::XGBoost,
        objective: obj_name.to_string(),
        task,
        link: obj.link,
        aggregate: Aggregate::Sum,
        base_score,
        features,
        ctrs: Vec::new(),
        trees,
        covers: covers.map(|per_tree| Covers { kind: CoverKind::Hessian, per_tree }),
    })
}

/// Replaces the leaves of a vector-leaf tree by their value vectors (XGBoost
/// `MultiTargetTree`: leaf `right_children[i]` indexes `leaf_weights` in 3.x; in 2.x the leaf's
/// values are its own `base_weights`).
fn vector_leaves(tj: &TreeJson, t: usize, k: usize, weight: f64, nodes: &mut [Node]) -> Result<(), ReadError> {
    let (values, by_leaf_index) = match (&tj.leaf_weights, &tj.base_weights) {
        (Some(w), _) => (f32_array(w, t, "leaf_weights")?, true),
        (None, Some(w)) => (f32_array(w, t, "base_weights")?, false),
        (None, None) => return Err(malformed(format!("tree {t}: vector-leaf tree without leaf_weights or base_weights"))),
    };
    for (i, node) in nodes.iter_mut().enumerate() {
        if let Node::Leaf { .. } = node {
            let slot = if by_leaf_index { tj.right_children[i] } else { i as i64 };
            let at = usize::try_from(slot).ok().and_then(|s| s.checked_mul(k)).filter(|&a| a + k <= values.len());
            let at = at.ok_or_else(|| malformed(format!("tree {t}: leaf node {i} has leaf index {slot} beyond its {} weights", values.len())))?;
            *node = Node::VectorLeaf { values: values[at..at + k].iter().map(|&v| v as f64 * weight).collect() };
        }
    }
    Ok(())
}

/// One tree's nodes, and the largest category each categorical split tests: (feature, code).
fn read_tree(tj: &TreeJson, t: usize, n_features: usize, weight: f64) -> Result<(Vec<Node>, Vec<(usize, u32)>), ReadError> {
    let mut max_category = Vec::new();
    let (left, right, feat) = (&tj.left_children, &tj.right_children, &tj.split_indices);
    let cond = f32_array(&tj.split_conditions, t, "split_conditions")?;
    let default_left: Vec<bool> = tj.default_left.iter().map(|f| f.set()).collect();
    let n = left.len();
    if [right.len(), cond.len(), feat.len(), default_left.len()].iter().any(|&l| l != n) || n == 0 {
        return Err(malformed(format!("tree {t}: node arrays differ in length")));
    }
    let split_type = if tj.split_type.is_empty() { vec![0; n] } else { tj.split_type.clone() };
    if split_type.len() != n {
        return Err(malformed(format!("tree {t}: split_type length")));
    }
    // Categorical sets: categories_nodes[k] owns categories[segments[k] .. segments[k] + sizes[k]].
    let mut sets: Vec<Option<Vec<u32>>> = vec![None; n];
    if split_type.contains(&1) {
        let (cat_nodes, segments, sizes, cats) = (&tj.categories_nodes, &tj.categories_segments, &tj.categories_sizes, &tj.categories);
        if cat_nodes.len() != segments.len() || cat_nodes.len() != sizes.len() {
            return Err(malformed(format!("tree {t}: categorical arrays differ in length")));
        }
        for k in 0..cat_nodes.len() {
            let (node, beg, size) = (cat_nodes[k], segments[k], sizes[k]);
            if node < 0 || node as usize >= n || beg < 0 || size < 0 || beg.saturating_add(size) as usize > cats.len() {
                return Err(malformed(format!("tree {t}: categorical segment {k} out of range")));
            }
            let set: Vec<u32> = cats[beg as usize..(beg + size) as usize]
                .iter()
                .map(|&c| u32::try_from(c).map_err(|_| malformed(format!("tree {t}: negative category {c}"))))
                .collect::<Result<_, _>>()?;
            if set.iter().any(|&c| c >= 1 << 24) {
                return Err(malformed(format!("tree {t}: category beyond XGBoost's limit")));
            }
            sets[node as usize] = Some(set);
        }
    }
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        if left[i] == -1 {
            // A vector-leaf tree's leaves are filled in by `vector_leaves`.
            nodes.push(Node::Leaf { value: cond[i] as f64 * weight });
            continue;
        }
        let (l, r) = (left[i], right[i]);
        if l <= 0 || r <= 0 || l as usize >= n || r as usize >= n {
            return Err(malformed(format!("tree {t}: node {i} has children out of range")));
        }
        let f = feat[i];
        if f < 0 || f as usize >= n_features {
            return Err(malformed(format!("tree {t}: node {i} splits on feature {f} of {n_features}")));
        }
        let missing_left = default_left[i];
        let node = if split_type[i] == 1 {
            let set = sets[i].take().ok_or_else(|| malformed(format!("tree {t}: categorical node {i} has no category set")))?;
            if let Some(&m) = set.iter().max() {
                max_category.push((f as usize, m));
            }
            // In the set goes right: the IR's "yes" is the right child.
            Node::Split {
                feature: f as u32,
                test: Test::InSet { categories: set, invalid_at_or_below: -f32::from_bits(1) },
                missing_yes: !missing_left,
                yes: r as u32,
                no: l as u32,
            }
        } else {
            if cond[i].is_nan() {
                return Err(malformed(format!("tree {t}: node {i} has a NaN split condition")));
            }
            Node::Split { feature: f as u32, test: Test::Lt(cond[i] as f64), missing_yes: missing_left, yes: l as u32, no: r as u32 }
        };
        nodes.push(node);
    }
    Ok((nodes, max_category))
}

#[cfg(test)]
mod tests {
    use crate::readers::{detect, Format};

    /// A gblinear booster saved by XGBoost (`tests/fixtures/xgboost.py`), as JSON and as
    /// UBJSON, is refused by name, not as a tree model missing its trees.
    #[test]
    fn a_linear_booster_is_refused_by_name() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/models/xgb_gblinear_refuse");
        for file in ["model.json", "model.ubj"] {
            let bytes = std::fs::read(dir.join(file)).unwrap();
            assert_eq!(detect(&bytes).unwrap(), Format::Xgboost, "{file}");
            let err = super::read(&bytes).err().unwrap_or_else(|| panic!("{file} compiled")).to_string();
            assert_eq!(
                err,
                "unsupported in XGBoost model: booster `gblinear` (a linear model, not a tree ensemble: edgescore compiles gbtree and dart)",
                "{file}"
            );
        }
    }

    /// XGBoost writes a value that is not finite as a bare `NaN` or `Infinity`: the error says
    /// so and where, not only that a JSON value was expected.
    #[test]
    fn a_value_json_cannot_hold_is_named() {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/models/xgb_binary/model.json");
        let text = std::fs::read_to_string(path).unwrap();
        for (word, shown) in [("NaN", "NaN"), ("Infinity", "Infinity"), ("\n-Infinity", "Infinity")] {
            let broken = text.replacen("\"base_weights\":[", &format!("\"base_weights\":[{word},"), 1);
            assert_ne!(broken, text);
            let err = super::read(broken.as_bytes()).err().expect("a model with a bare NaN compiled").to_string();
            assert!(err.contains(&format!(": {shown} is not a number JSON can hold: the model has a value that is not finite")), "{word}: {err}");
            assert!(err.contains(if word.starts_with('\n') { "line 2 column " } else { "line 1 column " }), "{word}: {err}");
        }
    }
}
