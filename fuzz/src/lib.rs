//! Shared code for the edgescore fuzz targets (see `fuzz/README.md`):
//! - `gen`: IR models from fuzzer bytes;
//! - `reference`: the IR's documented semantics, evaluated directly (f64 comparisons);
//! - `oracle`: an independent bounds-checked reading of accepted artifacts, and `exercise`,
//!   which scores a loaded model every way the API allows and cross-checks the results;
//! - `mutate`: structure-aware mutations of valid artifacts and the checksum re-seal.

pub mod gen;
pub mod mutate;
pub mod oracle;
pub mod reference;
