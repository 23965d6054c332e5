//! The intermediate representation between a training library's model file and the artifact.
//!
//! Readers (in `compile/`) translate each library's semantics into these plain structs; the
//! writer (`write`) lays them out for the evaluator. Everything a library does
//! differently — comparison operator, where missing values go, categorical sets, base score,
//! link function — is spelled out here, so the writer and evaluator never ask "which library?".
//! The IR and the writer belong to the compiler; the runtime (`edgescore-core`) only reads
//! artifacts. What both need to agree on — the source format, task and link recorded in an
//! artifact — is defined once, in `edgescore_core::artifact::meta`.

pub use edgescore_core::artifact::layout::{ctr_part, CtrPart, UaFingerprint};
pub use edgescore_core::artifact::{Link, SourceFormat, Task};

/// How tree outputs combine into a margin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Aggregate {
    /// margin[o] = base[o] + sum of the leaves of the trees of output o.
    Sum,
    /// margin[o] = base[o] + (sum of the leaves of the trees of output o) / divisor
    /// (random forests: the number of trees per output).
    Average { divisor: f64 },
}

#[derive(Debug, Clone, PartialEq)]
pub enum FeatureKind {
    Numeric,
    /// Integer category codes in `0..buckets` (hashed request features use the bucket count).
    Categorical { buckets: u32 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct FeatureDef {
    pub name: String,
    pub kind: FeatureKind,
}

/// A split's test on the feature value `x` (an `f32`, as every library feeds it).
/// The test being true sends the row to `yes`, false to `no`; NaN never reaches the test
/// (see [`Node::Split::missing_yes`]) except where the variant says otherwise.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// `x < t` (XGBoost; ONNX BRANCH_LT).
    Lt(f64),
    /// `x <= t` (LightGBM with thresholds in f64; ONNX BRANCH_LEQ).
    Le(f64),
    /// `x > t` (CatBoost borders; ONNX BRANCH_GT).
    Gt(f64),
    /// `x >= t` (ONNX BRANCH_GTE).
    Ge(f64),
    /// `x == t` (ONNX BRANCH_EQ).
    Eq(f64),
    /// `x != t` (ONNX BRANCH_NEQ).
    Ne(f64),
    /// LightGBM's `missing_type = Zero`: `x <= t`, except that values with `|x| <= 1e-35`
    /// take the missing direction as NaN does.
    LeZeroAsMissing(f64),
    /// `trunc(x)` is one of `categories`. Values `x <= invalid_at_or_below` (and values beyond
    /// every category) are not in the set: XGBoost treats `x < 0` as invalid, LightGBM
    /// `trunc(x) < 0`, i.e. `x <= -1`.
    InSet { categories: Vec<u32>, invalid_at_or_below: f32 },
    /// `x` equals one of `categories` (ONNX `BRANCH_MEMBER` over integer codes): like `InSet`
    /// but without truncation, so `2.5` is in no set.
    Member { categories: Vec<u32> },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Leaf {
        value: f64,
    },
    /// One value per output, added to every output (XGBoost `multi_output_tree`). A tree with
    /// vector leaves has only vector leaves, each of `n_outputs` values; its `output` is 0.
    VectorLeaf {
        values: Vec<f64>,
    },
    /// LightGBM `linear_tree`: `constant + sum(coeff * x[feature])`, the terms added in order
    /// in f64; when any of the terms' features is NaN the leaf is worth `fallback` (its plain
    /// `leaf_value`) instead (LightGBM `Tree::Predict`, `LinearTreeLearner`).
    LinearLeaf {
        constant: f64,
        /// (feature, coefficient) pairs.
        terms: Vec<(u32, f64)>,
        fallback: f64,
    },
    Split {
        feature: u32,
        test: Test,
        /// Where a NaN feature value goes: `yes` when true.
        missing_yes: bool,
        /// Indices into the tree's `nodes`.
        yes: u32,
        no: u32,
    },
    /// A whole oblivious tree (CatBoost's): every node of level k tests the same split, so the
    /// tree is its levels and a table of `2^levels.len()` leaves; level k's test holding (or a
    /// NaN value with `missing_yes`) sets bit k of the leaf's index. Always the only node of
    /// its tree: reading it as one node keeps CatBoost's 2^d − 1 identical splits per tree out
    /// of the IR and out of the artifact.
    Oblivious {
        levels: Box<[Level]>,
        leaves: Box<[f64]>,
    },
}

/// One level of an oblivious tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    pub feature: u32,
    pub test: Test,
    pub missing_yes: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// Which output (class) this tree's leaves add to.
    pub output: u32,
    /// `nodes[0]` is the root.
    pub nodes: Vec<Node>,
}

/// A CatBoost online CTR feature: splits name CTR `k` as feature `features.len() + k`. Its
/// value for a row is `table`'s value at the key of the row's projection (`parts`, folded as
/// `edgescore_core::ensemble::ctr::projection_key` does), or `empty_value` for a key not in
/// the table. The parts are the artifact's own (`layout::CtrPart`): they mean the same thing in
/// both places.
#[derive(Debug, Clone, PartialEq)]
pub struct CtrDef {
    pub parts: Vec<CtrPart>,
    /// (projection key, CTR value), ascending by key.
    pub table: Vec<(u64, f32)>,
    pub empty_value: f32,
}

impl CtrDef {
    pub fn value(&self, x: &[f32]) -> f32 {
        let key = edgescore_core::ensemble::ctr::projection_key(&self.parts, x);
        self.table.binary_search_by_key(&key, |e| e.0).map_or(self.empty_value, |i| self.table[i].1)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelIr {
    pub name: String,
    pub version: String,
    pub source: SourceFormat,
    /// Free-form objective as the library names it (e.g. `binary:logistic`), for `inspect`.
    pub objective: String,
    pub task: Task,
    pub link: Link,
    pub aggregate: Aggregate,
    /// Per output, in margin space.
    pub base_score: Vec<f64>,
    pub features: Vec<FeatureDef>,
    /// CatBoost CTR features, computed from the inputs (empty for other libraries).
    pub ctrs: Vec<CtrDef>,
    pub trees: Vec<Tree>,
    /// How much training data reached each node, where the source records it: what node
    /// expected values and TreeSHAP weigh by (the artifact's NODE_VALUES section).
    pub covers: Option<Covers>,
    /// The table `tls_ua_consistent` reads (`compile --ua-fingerprints`; the artifact's
    /// UA_FINGERPRINTS section): sorted, valid by `edgescore_core::features::ua_fingerprints::check`;
    /// empty without one.
    pub ua_fingerprints: Vec<UaFingerprint>,
}

/// Per tree, the cover of each node: `per_tree[t][i]` for `trees[t].nodes[i]`, or for an
/// oblivious tree one per leaf of its table (in the IR's leaf order).
#[derive(Debug, Clone, PartialEq)]
pub struct Covers {
    pub kind: CoverKind,
    pub per_tree: Vec<Vec<f64>>,
}

pub use edgescore_core::artifact::CoverKind;

impl Covers {
    /// Every leaf weighing the same, for sources that record no covers.
    pub fn equal(trees: &[Tree]) -> Covers {
        let per_tree = trees
            .iter()
            .map(|t| match &t.nodes[..] {
                [Node::Oblivious { leaves, .. }] => vec![1.0; leaves.len()],
                nodes => vec![1.0; nodes.len()],
            })
            .collect();
        Covers { kind: CoverKind::Equal, per_tree }
    }

    /// The first cover an artifact cannot hold, as (tree, index, cover): negative or not
    /// finite. Covers weigh paths; XGBoost's `survival:cox` hessians, and so its hessian sums,
    /// can be negative.
    pub fn first_unusable(&self) -> Option<(usize, usize, f64)> {
        self.per_tree.iter().enumerate().find_map(|(t, covers)| {
            covers.iter().position(|c| !(c.is_finite() && *c >= 0.0)).map(|i| (t, i, covers[i]))
        })
    }
}

impl ModelIr {
    pub fn n_outputs(&self) -> usize {
        self.base_score.len()
    }

    /// A binary classifier with XGBoost's conventions (`sigmoid(margin)`, base score 0,
    /// version "1"): what hand-built test models start from.
    pub fn binary_logistic(name: &str, features: Vec<FeatureDef>, trees: Vec<Tree>) -> ModelIr {
        ModelIr {
            ua_fingerprints: Vec::new(),
            name: name.into(),
            version: "1".into(),
            source: SourceFormat::XGBoost,
            objective: "binary:logistic".into(),
            task: Task::BinaryClassification,
            link: Link::Sigmoid { scale: 1.0 },
            aggregate: Aggregate::Sum,
            base_score: vec![0.0],
            features,
            ctrs: Vec::new(),
            trees,
            covers: None,
        }
    }
}

/// The IR's meaning, read literally: f64 comparisons exactly as [`Test`] documents them, no
/// normalisation, trees in file order. Slow and allocating — it is the one reference the
/// readers' tests, the writer's tests and the fuzzers check the compiled artifact against.
impl Tree {
    /// The leaf the tree sends `x` to; `None` if the walk leaves the tree, reads past `x`, or
    /// does not end (the readers never make such a tree; the fuzzers' generator does on purpose).
    pub fn try_leaf(&self, x: &[f32]) -> Option<&Node> {
        let mut i = 0usize;
        for _ in 0..=self.nodes.len() {
            match self.nodes.get(i)? {
                Node::Split { feature, test, missing_yes, yes, no } => {
                    let v = *x.get(*feature as usize)?;
                    let go_yes = if v.is_nan() { *missing_yes } else { test.holds(v, *missing_yes) };
                    i = if go_yes { *yes } else { *no } as usize;
                }
                leaf => return Some(leaf),
            }
        }
        None
    }

    /// The value of the leaf `x` reaches, for trees of scalar (plain or linear) leaves; `None`
    /// where [`Tree::try_leaf`] is, or at a vector leaf.
    pub fn try_leaf_value(&self, x: &[f32]) -> Option<f64> {
        match self.try_leaf(x)? {
            Node::Leaf { value } => Some(*value),
            Node::Oblivious { levels, leaves } => {
                let mut index = 0usize;
                for (k, l) in levels.iter().enumerate() {
                    let v = *x.get(l.feature as usize)?;
                    let bit = if v.is_nan() { l.missing_yes } else { l.test.holds(v, l.missing_yes) };
                    index |= usize::from(bit).checked_shl(k as u32)?;
                }
                leaves.get(index).copied()
            }
            Node::LinearLeaf { constant, terms, fallback } => {
                let mut value = *constant;
                for &(f, coeff) in terms {
                    let v = *x.get(f as usize)?;
                    if v.is_nan() {
                        return Some(*fallback);
                    }
                    value += v as f64 * coeff;
                }
                Some(value)
            }
            _ => None,
        }
    }

    /// [`Tree::try_leaf_value`], NaN where that is `None`.
    pub fn leaf_value(&self, x: &[f32]) -> f64 {
        self.try_leaf_value(x).unwrap_or(f64::NAN)
    }
}

impl Test {
    /// Whether the test holds for a non-NaN `v` (`missing_yes` only matters for
    /// `LeZeroAsMissing`, where tiny values count as missing).
    pub fn holds(&self, v: f32, missing_yes: bool) -> bool {
        let d = v as f64;
        match self {
            Test::Lt(t) => d < *t,
            Test::Le(t) => d <= *t,
            Test::Gt(t) => d > *t,
            Test::Ge(t) => d >= *t,
            Test::Eq(t) => d == *t,
            Test::Ne(t) => d != *t,
            Test::LeZeroAsMissing(t) => {
                if v.abs() <= 1e-35 {
                    missing_yes
                } else {
                    d <= *t
                }
            }
            Test::InSet { categories, invalid_at_or_below } => {
                v > *invalid_at_or_below && v < 4294967296.0 && categories.contains(&(v.trunc() as u32))
            }
            Test::Member { categories } => v >= 0.0 && v < 4294967296.0 && v == v.trunc() && categories.contains(&(v as u32)),
        }
    }
}

/// The reference reading of one row: margins, and per output the magnitude the rounding error
/// of a reordered sum scales with (sum of |leaf| / divisor + |base|).
pub struct ReferenceMargins {
    pub margins: Vec<f64>,
    pub magnitudes: Vec<f64>,
}

impl ModelIr {
    /// Margins and magnitudes by the reference reading; `None` if a tree's walk failed (see
    /// [`Tree::try_leaf_value`]).
    pub fn try_reference(&self, x: &[f32]) -> Option<ReferenceMargins> {
        let extended: Vec<f32>;
        let x = if self.ctrs.is_empty() {
            x
        } else {
            let inputs = x.get(..self.features.len())?;
            if self.ctrs.iter().flat_map(|c| &c.parts).any(|p| p.feature as usize >= inputs.len()) {
                return None;
            }
            extended = inputs.iter().copied().chain(self.ctrs.iter().map(|c| c.value(inputs))).collect();
            &extended
        };
        let n = self.n_outputs();
        let mut acc = vec![0f64; n];
        let mut mag = vec![0f64; n];
        for t in &self.trees {
            if let Node::VectorLeaf { values } = t.try_leaf(x)? {
                if values.len() != n {
                    return None;
                }
                for (o, v) in values.iter().enumerate() {
                    acc[o] += v;
                    mag[o] += v.abs();
                }
                continue;
            }
            let v = t.try_leaf_value(x)?;
            *acc.get_mut(t.output as usize)? += v;
            mag[t.output as usize] += v.abs();
        }
        let divisor = match self.aggregate {
            Aggregate::Sum => 1.0,
            Aggregate::Average { divisor } => divisor,
        };
        let margins = acc.iter().zip(&self.base_score).map(|(a, b)| if divisor == 1.0 { a + b } else { a / divisor + b }).collect();
        let magnitudes = mag.iter().zip(&self.base_score).map(|(a, b)| a / divisor + b.abs()).collect();
        Some(ReferenceMargins { margins, magnitudes })
    }

    /// Margins by the reference reading; all NaN where [`ModelIr::try_reference`] fails.
    pub fn margins(&self, x: &[f32]) -> Vec<f64> {
        self.try_reference(x).map_or_else(|| vec![f64::NAN; self.n_outputs()], |r| r.margins)
    }

    /// Outputs (after the link) by the reference reading.
    pub fn outputs(&self, x: &[f32]) -> Vec<f64> {
        let mut m = self.margins(x);
        self.link.apply(&mut m);
        m
    }
}

#[cfg(test)]
mod tests {
    /// Readers hold every node of a model at once (a quarter of a million for 2,000 trees of
    /// depth 6): a variant that grows the enum grows every model's compile time.
    #[test]
    fn a_node_stays_small() {
        assert!(std::mem::size_of::<super::Node>() <= 48, "{}", std::mem::size_of::<super::Node>());
    }
}
