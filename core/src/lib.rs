//! edgescore's scoring core: everything between the bytes Envoy hands over and the edits the
//! filter applies, in plain Rust that builds natively (unit tests, benches, dhat, the CLI) and
//! for `wasm32-wasip1` alike.
//!
//! One request, one direction: [`request`] (a borrowed view of the host's header map and
//! connection properties) → [`features`] (the catalogue, keyed hashes, one shared `[f32]`) →
//! [`ensemble`] (the zero-allocation tree walk over a validated [`artifact`]) → [`decision`]
//! (bands, action, header and filter-state bytes, the list of edits). [`Scorer`] runs that
//! path for one configuration; [`config`] is the plugin JSON; [`text`] is the text path's
//! body extraction and verdicts. [`registry`] verifies signed model manifests and artifacts
//! (the CLI signs them) and [`poll`] decides, without I/O, what a poller accepts from them; [`handoff`] is how verified model bytes are to travel from the
//! registry poller to every worker through shared data, a bounded slice per tick.
//! [`signatures`] verifies HTTP message signatures (RFC 9421) of signed bots against trusted
//! key directories; [`velocity`] counts each client's requests, paths and 4xx answers over
//! the last seconds in a fixed-size table per worker. [`drift`] counts each request's inputs
//! and score into the bins of a model's reference distribution, for the drift watch.

pub mod action;
pub mod artifact;
pub mod config;
pub mod conn_cache;
pub mod decision;
pub mod drift;
pub mod ensemble;
pub mod features;
pub mod handoff;
pub mod metric_names;
pub mod model_set;
pub mod poll;
pub mod registry;
pub mod replay;
pub mod request;
pub mod scorer;
pub mod signatures;
pub mod velocity;
pub mod text;

pub use action::ActionKind;
pub use artifact::ArtifactError;
pub use config::{ConfigError, PluginConfig};
pub use ensemble::{BitvectorsSize, Model, ScoreError, TreeEnsemble};
pub use model_set::ModelSet;
pub use request::{HeaderMap, OwnedRequest, Property, Request};
pub use scorer::Scorer;

/// Most outputs (classes) a model may have; the evaluator accumulates on the stack.
pub const MAX_OUTPUTS: usize = 256;
