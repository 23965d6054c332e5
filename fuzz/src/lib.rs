//! Shared code for the edgescore fuzz targets (see `fuzz/README.md`):
//! - `gen`: IR models from fuzzer bytes;
//! - `reference`: the IR's documented semantics, evaluated directly (f64 comparisons);
//! - `oracle`: an independent bounds-checked reading of accepted artifacts, and `exercise`,
//!   which scores a loaded model every way the API allows and cross-checks the results;
//! - `mutate`: structure-aware mutations of valid artifacts and the checksum re-seal;
//! - `request_spec`, `schema_spec`: requests and feature schemas from fuzzer bytes;
//! - `wire_map`: proxy-wasm's header-map format, written and read without the core;
//! - `feature_reference`: every catalogue feature computed the plain way;
//! - `writer_pool`: the writer's rayon pool, run inline on the fuzzer's thread.

pub mod feature_reference;
pub mod gen;
pub mod mutate;
pub mod oracle;
pub mod reference;
pub mod request_spec;
pub mod schema_spec;
pub mod wire_map;
pub mod writer_pool;
