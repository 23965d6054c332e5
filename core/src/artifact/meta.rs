//! What an artifact declares about its model besides the trees: which library it came from,
//! what it predicts, and the link from margins to outputs. The compiler's IR and the evaluator
//! share these definitions.

/// Which training library produced the model (recorded in the artifact for `inspect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum SourceFormat {
    XGBoost = 1,
    LightGBM = 2,
    CatBoost = 3,
    Onnx = 4,
}

/// What a model's node covers (its NODE_VALUES section, format 6) count: how much training
/// data reached each leaf, which node expected values and TreeSHAP weigh by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum CoverKind {
    /// Sums of the training rows' hessians (XGBoost `sum_hessian`).
    Hessian = 1,
    /// Training rows (LightGBM `leaf_count`, CatBoost leaf weights: row counts unless the
    /// training data had sample weights, then their sums).
    Rows = 2,
    /// The source records none (ONNX, scikit-learn through ONNX): every leaf weighs the same.
    Equal = 3,
}

impl CoverKind {
    pub fn from_u32(v: u32) -> Option<CoverKind> {
        match v {
            1 => Some(CoverKind::Hessian),
            2 => Some(CoverKind::Rows),
            3 => Some(CoverKind::Equal),
            _ => None,
        }
    }
    /// How `inspect` names it.
    pub fn describe(self) -> &'static str {
        match self {
            CoverKind::Hessian => "hessian sums",
            CoverKind::Rows => "training rows",
            CoverKind::Equal => "equal leaf weights (the source records no covers)",
        }
    }
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
    /// `1` if `margin > 0`, else `0` (XGBoost `binary:hinge`). Format 2.
    Step,
}

impl Link {
    /// Margins → outputs, in place. The one definition of each link function: the evaluator
    /// and every reference check call this.
    pub fn apply(self, m: &mut [f64]) {
        match self {
            Link::Identity => {}
            Link::Sigmoid { scale } => m.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-scale * *v).exp())),
            Link::Softmax => {
                let max = m.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for v in m.iter_mut() {
                    *v = (*v - max).exp();
                    sum += *v;
                }
                m.iter_mut().for_each(|v| *v /= sum);
            }
            Link::Exp => m.iter_mut().for_each(|v| *v = v.exp()),
            Link::Step => m.iter_mut().for_each(|v| *v = if *v > 0.0 { 1.0 } else { 0.0 }),
        }
    }
}

