//! The intermediate representation between a training library's model file and the artifact.
//!
//! Readers (in `compile/`) translate each library's semantics into these plain structs; the
//! writer (`artifact::write`) lays them out for the evaluator. Everything a library does
//! differently — comparison operator, where missing values go, categorical sets, base score,
//! link function — is spelled out here, so the writer and evaluator never ask "which library?".

/// Which training library produced the model (recorded in the artifact for `inspect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum SourceFormat {
    XGBoost = 1,
    LightGBM = 2,
    CatBoost = 3,
    Onnx = 4,
}

/// What the model predicts; decides how outputs are reported (e.g. binary: positive class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Task {
    Regression = 1,
    /// One or two outputs; the last one is the positive class.
    BinaryClassification = 2,
    /// One output per class.
    MulticlassClassification = 3,
}

/// Function from summed margins to reported outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Link {
    Identity,
    /// `1 / (1 + exp(-scale * margin))`, per output (LightGBM's `sigmoid:` parameter is the scale).
    Sigmoid { scale: f64 },
    /// Softmax over all outputs.
    Softmax,
    /// `exp(margin)` (Poisson, Gamma, Tweedie objectives).
    Exp,
}

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
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Leaf {
        value: f64,
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
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// Which output (class) this tree's leaves add to.
    pub output: u32,
    /// `nodes[0]` is the root.
    pub nodes: Vec<Node>,
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
    pub trees: Vec<Tree>,
}

impl ModelIr {
    pub fn n_outputs(&self) -> usize {
        self.base_score.len()
    }
}
