//! edgescore's scoring core: the `.esm` artifact (layout, validation, writer), the IR the
//! compiler produces, and the zero-allocation evaluator. Plain Rust that builds natively and
//! for `wasm32-wasip1`; the proxy-wasm glue lives beside it and is compiled only for Wasm.

pub mod artifact;
pub mod ensemble;
pub mod ir;
pub mod model_set;

pub use artifact::{ArtifactError, Model, ScoreError};
pub use ensemble::TreeEnsemble;
pub use model_set::ModelSet;

/// Most outputs (classes) a model may have; the evaluator accumulates on the stack.
pub const MAX_OUTPUTS: usize = 256;
