//! XGBoost JSON models (`Booster.save_model("m.json")`, XGBoost 1.6 – 3.x).
//!
//! Semantics reproduced (XGBoost `src/predictor/predict_fn.h`): `x < split_condition` goes
//! left; NaN goes to the default child; categorical splits send a category that is in the
//! node's set to the RIGHT, and invalid categories (negative, beyond the set) to the left.
//! `base_score` is stored in output space and converted to a margin per objective.

use super::ReadError;
use edgescore_filter::ir::{Aggregate, FeatureDef, FeatureKind, Link, ModelIr, Node, SourceFormat, Task, Test, Tree};
use serde_json::{Number, Value};

const FORMAT: &str = "XGBoost";

fn malformed(detail: impl Into<String>) -> ReadError {
    ReadError::malformed(FORMAT, detail)
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Result<&'a Value, ReadError> {
    let mut at = v;
    for key in path {
        at = at.get(key).ok_or_else(|| malformed(format!("missing key {}", path.join("."))))?;
    }
    Ok(at)
}

/// XGBoost writes parameters as strings ("3", "[5E-1]") and arrays as numbers.
fn param_str<'a>(v: &'a Value, path: &[&str]) -> Result<&'a str, ReadError> {
    get(v, path)?.as_str().ok_or_else(|| malformed(format!("{} is not a string", path.join("."))))
}

fn param_usize(v: &Value, path: &[&str]) -> Result<usize, ReadError> {
    param_str(v, path)?.trim().parse().map_err(|_| malformed(format!("{} is not an integer", path.join("."))))
}

/// XGBoost writes floats in their shortest f32 form; parse that text as f32 so the value is
/// exactly the one XGBoost holds (going through f64 could round twice).
fn number_f32(n: &Number) -> Option<f32> {
    n.to_string().parse::<f32>().ok()
}

fn array<'a>(tree: &'a Value, key: &str, t: usize) -> Result<&'a Vec<Value>, ReadError> {
    tree.get(key).and_then(Value::as_array).ok_or_else(|| malformed(format!("tree {t}: missing array {key}")))
}

fn ints(tree: &Value, key: &str, t: usize) -> Result<Vec<i64>, ReadError> {
    array(tree, key, t)?
        .iter()
        .map(|v| v.as_i64().ok_or_else(|| malformed(format!("tree {t}: {key} holds a non-integer"))))
        .collect()
}

fn floats(tree: &Value, key: &str, t: usize) -> Result<Vec<f32>, ReadError> {
    array(tree, key, t)?
        .iter()
        .map(|v| match v {
            Value::Number(n) => number_f32(n),
            _ => None,
        }
        .ok_or_else(|| malformed(format!("tree {t}: {key} holds a non-number"))))
        .collect()
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
        "binary:logitraw" => Objective { task_binary: true, task_multi: false, link: Link::Identity, base_to_margin: logit },
        "reg:logistic" => Objective { task_binary: false, task_multi: false, link: sigmoid, base_to_margin: logit },
        "multi:softprob" | "multi:softmax" => {
            Objective { task_binary: false, task_multi: true, link: Link::Softmax, base_to_margin: identity }
        }
        "count:poisson" | "reg:gamma" | "reg:tweedie" | "survival:cox" => {
            Objective { task_binary: false, task_multi: false, link: Link::Exp, base_to_margin: log }
        }
        "reg:squarederror" | "reg:linear" | "reg:squaredlogerror" | "reg:pseudohubererror" | "reg:absoluteerror"
        | "reg:quantileerror" | "rank:pairwise" | "rank:ndcg" | "rank:map" => {
            Objective { task_binary: false, task_multi: false, link: Link::Identity, base_to_margin: identity }
        }
        other => return Err(ReadError::unsupported(FORMAT, format!("objective {other:?}"), None)),
    })
}

pub fn read(bytes: &[u8]) -> Result<ModelIr, ReadError> {
    let root: Value = serde_json::from_slice(bytes).map_err(|e| malformed(format!("not JSON: {e}")))?;
    let learner = get(&root, &["learner"])?;
    let booster = get(learner, &["gradient_booster"])?;
    let booster_name = param_str(booster, &["name"])?;
    let (gbtree, weights) = match booster_name {
        "gbtree" => (get(booster, &["model"])?, None),
        "dart" => {
            let w: Vec<f64> = get(booster, &["weight_drop"])?
                .as_array()
                .ok_or_else(|| malformed("weight_drop is not an array"))?
                .iter()
                .map(|v| v.as_f64().ok_or_else(|| malformed("weight_drop holds a non-number")))
                .collect::<Result<_, _>>()?;
            (get(booster, &["gbtree", "model"])?, Some(w))
        }
        other => return Err(ReadError::unsupported(FORMAT, format!("booster {other:?} (only tree boosters compile)"), None)),
    };
    let obj_name = param_str(learner, &["objective", "name"])?;
    let obj = objective(obj_name)?;
    let params = get(learner, &["learner_model_param"])?;
    let n_features = param_usize(params, &["num_feature"])?;
    let num_class = param_usize(params, &["num_class"]).unwrap_or(0);
    let num_target = param_usize(params, &["num_target"]).unwrap_or(1).max(1);
    let n_outputs = if obj.task_multi { num_class.max(1) } else { num_target };
    let task = if obj.task_multi {
        Task::MulticlassClassification
    } else if obj.task_binary {
        Task::BinaryClassification
    } else {
        Task::Regression
    };
    let base = parse_base_score(param_str(params, &["base_score"])?)?;
    let base_score: Vec<f64> = match base.len() {
        1 => vec![(obj.base_to_margin)(base[0]); n_outputs],
        n if n == n_outputs => base.iter().map(|&b| (obj.base_to_margin)(b)).collect(),
        n => return Err(malformed(format!("base_score has {n} values for {n_outputs} outputs"))),
    };

    let trees_json = get(gbtree, &["trees"])?.as_array().ok_or_else(|| malformed("trees is not an array"))?;
    let tree_info: Vec<i64> = get(gbtree, &["tree_info"])?
        .as_array()
        .ok_or_else(|| malformed("tree_info is not an array"))?
        .iter()
        .map(|v| v.as_i64().ok_or_else(|| malformed("tree_info holds a non-integer")))
        .collect::<Result<_, _>>()?;
    if tree_info.len() != trees_json.len() {
        return Err(malformed("tree_info and trees differ in length"));
    }
    if let Some(w) = &weights {
        if w.len() != trees_json.len() {
            return Err(malformed("weight_drop and trees differ in length"));
        }
    }
    let feature_types: Vec<String> = learner
        .get("feature_types")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default();
    let feature_names: Vec<String> = learner
        .get("feature_names")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default();
    let mut max_category = vec![None::<u32>; n_features];

    let mut trees = Vec::with_capacity(trees_json.len());
    for (t, tj) in trees_json.iter().enumerate() {
        let output = tree_info[t];
        if output < 0 || output as usize >= n_outputs {
            return Err(malformed(format!("tree {t}: output {output} of {n_outputs}")));
        }
        let size_leaf = tj.get("tree_param").and_then(|p| p.get("size_leaf_vector")).and_then(Value::as_str).unwrap_or("1");
        if size_leaf != "1" && size_leaf != "0" {
            return Err(ReadError::unsupported(FORMAT, "vector-leaf (multi_output_tree) trees", Some(t)));
        }
        let weight = weights.as_ref().map_or(1.0, |w| w[t]);
        let nodes = read_tree(tj, t, n_features, weight, &mut max_category)?;
        trees.push(Tree { output: output as u32, nodes });
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
        name: "xgboost-model".into(),
        version: "0".into(),
        source: SourceFormat::XGBoost,
        objective: obj_name.to_string(),
        task,
        link: obj.link,
        aggregate: Aggregate::Sum,
        base_score,
        features,
        trees,
    })
}

fn read_tree(tj: &Value, t: usize, n_features: usize, weight: f64, max_category: &mut [Option<u32>]) -> Result<Vec<Node>, ReadError> {
    let left = ints(tj, "left_children", t)?;
    let right = ints(tj, "right_children", t)?;
    let cond = floats(tj, "split_conditions", t)?;
    let feat = ints(tj, "split_indices", t)?;
    let default_left = ints(tj, "default_left", t)?;
    let n = left.len();
    if [right.len(), cond.len(), feat.len(), default_left.len()].iter().any(|&l| l != n) || n == 0 {
        return Err(malformed(format!("tree {t}: node arrays differ in length")));
    }
    let split_type = tj.get("split_type").map(|_| ints(tj, "split_type", t)).transpose()?.unwrap_or_else(|| vec![0; n]);
    if split_type.len() != n {
        return Err(malformed(format!("tree {t}: split_type length")));
    }
    // Categorical sets: categories_nodes[k] owns categories[segments[k] .. segments[k] + sizes[k]].
    let mut sets: Vec<Option<Vec<u32>>> = vec![None; n];
    if split_type.contains(&1) {
        let cat_nodes = ints(tj, "categories_nodes", t)?;
        let segments = ints(tj, "categories_segments", t)?;
        let sizes = ints(tj, "categories_sizes", t)?;
        let cats = ints(tj, "categories", t)?;
        if cat_nodes.len() != segments.len() || cat_nodes.len() != sizes.len() {
            return Err(malformed(format!("tree {t}: categorical arrays differ in length")));
        }
        for k in 0..cat_nodes.len() {
            let (node, beg, size) = (cat_nodes[k], segments[k], sizes[k]);
            if node < 0 || node as usize >= n || beg < 0 || size < 0 || (beg + size) as usize > cats.len() {
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
        let missing_left = default_left[i] != 0;
        let node = if split_type[i] == 1 {
            let set = sets[i].take().ok_or_else(|| malformed(format!("tree {t}: categorical node {i} has no category set")))?;
            if let Some(&m) = set.iter().max() {
                let slot = &mut max_category[f as usize];
                *slot = Some(slot.map_or(m, |s| s.max(m)));
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
    Ok(nodes)
}
