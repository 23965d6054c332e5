//! The FFI boundary: no panic may unwind into Envoy (it would abort the process, and every
//! connection with it). Each hook runs inside [`catch`]; the module is built with
//! `panic = "unwind"` (the `native` profile) so that a panic can be caught at all.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`; on a panic, `on_panic` (itself guarded: a second panic gives `fallback`).
pub fn catch<T>(f: impl FnOnce() -> T, on_panic: impl FnOnce() -> T, fallback: T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => catch_unwind(AssertUnwindSafe(on_panic)).unwrap_or(fallback),
    }
}

/// The panic-guard test's trigger: a request with `x-edgescore-test-panic` panics inside the
/// request hook (feature `test-panic`, never in a release build). Reads the headers the hook
/// already has: the test build counts allocations too.
#[cfg(feature = "test-panic")]
pub fn test_panic(headers: &[crate::abi::EnvoyHeader]) {
    // SAFETY: Envoy's header bytes, valid during the hook.
    if headers.iter().any(|h| unsafe { h.name_bytes() } == b"x-edgescore-test-panic") {
        panic!("x-edgescore-test-panic");
    }
}
