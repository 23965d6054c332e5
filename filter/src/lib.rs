//! edgescore's scoring core and its Envoy filter.
//!
//! The core is plain Rust that builds natively (unit tests, benches, dhat, the CLI): the `.esm`
//! artifact (layout, validation, writer), the IR the compiler produces, the zero-allocation
//! evaluator, the request feature catalogue and the [`Scorer`] that runs one request through
//! features → models → decision. The proxy-wasm glue in `wasm/` is compiled only for
//! `wasm32-wasip1` and is the only code that knows Envoy.

pub mod artifact;
/// The scoring loop benches/benches/filter_wasm.rs runs natively and in the `.wasm` (there
/// only with the `bench-exports` feature, so the shipped `.wasm` is the same without it).
#[cfg(any(not(target_arch = "wasm32"), feature = "bench-exports"))]
#[doc(hidden)]
pub mod bench;
pub mod config;
pub mod conn_cache;
pub mod ensemble;
pub mod features;
pub mod ir;
pub mod model_set;
pub mod request;
pub mod scorer;
pub mod text;

#[cfg(target_arch = "wasm32")]
mod wasm;

pub use artifact::{ArtifactError, Model, ScoreError};
pub use config::{ConfigError, PluginConfig};
pub use ensemble::TreeEnsemble;
pub use model_set::ModelSet;
pub use request::{HeaderMap, Request};
pub use scorer::{Scorer, Verdict};

/// Most outputs (classes) a model may have; the evaluator accumulates on the stack.
pub const MAX_OUTPUTS: usize = 256;
