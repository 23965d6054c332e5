//! edgescore as a native Envoy dynamic module: the same core as the `.wasm` (features, hashing,
//! models, decision, registry checks), loaded in-process by Envoy's dynamic-modules HTTP filter
//! (`envoy.extensions.filters.http.dynamic_modules`), with the same plugin JSON, the same
//! decisions bit for bit and the same metrics. `abi` declares the part of Envoy 1.40's ABI it
//! uses and `envoy` wraps it; `filter` is one configuration (the root: parses the JSON, defines
//! the metrics, holds a scorer per worker in `workers`; the configurations of one plugin JSON
//! share the registry poller and the verified bots' key directories, `poll_group` over `poller`
//! and `directories`);
//! `stream` is one request, `text` a request held for the text path. Every hook below runs
//! inside `guard::catch`.
//!
//! The module is tied to the Envoy minor version it was built for (the ABI is not stable
//! across minors): Envoy 1.40, ABI `v0.2.0`.

// Envoy calls the hooks below with the pointers its ABI defines: they cannot be `unsafe fn`s,
// and each dereference is behind a SAFETY note.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod abi;
#[cfg(feature = "count-allocations")]
mod counting;
mod directories;
mod envoy;
mod filter;
mod guard;
mod metrics;
mod poll_group;
mod poller;
mod stream;
mod stream_clients;
mod text;
mod workers;

use abi::*;
use envoy::{EnvoyConfig, Stream};
use filter::Filter;
use std::ffi::c_void;
use std::sync::Arc;

#[cfg(feature = "count-allocations")]
#[global_allocator]
static COUNTING: counting::Counting = counting::Counting;

/// # Safety
/// `ptr` is a pointer this module returned from `on_http_filter_config_new` and Envoy has not
/// destroyed yet (Envoy keeps the configuration alive while any of its streams lives).
unsafe fn filter<'a>(ptr: *const c_void) -> &'a Filter {
    &*(ptr as *const Filter)
}

/// An array Envoy hands to a hook (a callout's headers or body chunks).
///
/// # Safety
/// `ptr` is null (no array) or points at `len` elements valid for `'a`.
unsafe fn envoy_array<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if ptr.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(ptr, len)
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const u8 {
    ABI_VERSION.as_ptr()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(envoy_cfg: EnvoyPtr, _name: EnvoyBuffer, config: EnvoyBuffer) -> *const c_void {
    let envoy = EnvoyConfig::new(envoy_cfg);
    guard::catch(
        || {
            // SAFETY: Envoy's bytes, valid during this call (the core copies what it keeps).
            let json = unsafe { config.bytes() };
            match Filter::new(envoy, json) {
                Ok(f) => Arc::into_raw(f) as *const c_void,
                Err(e) => {
                    filter::refused(envoy, &e);
                    std::ptr::null()
                }
            }
        },
        || {
            envoy::log(LOG_ERROR, "edgescore: configuration refused: the module panicked while loading it");
            std::ptr::null()
        },
        std::ptr::null(),
    )
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(cfg: *const c_void) {
    // SAFETY: the pointer came from `Arc::into_raw` in `config_new`; Envoy destroys it once.
    guard::catch(
        || {
            drop(unsafe { Arc::from_raw(cfg as *const Filter) });
            poll_group::leave();
        },
        || (),
        (),
    )
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(_envoy_cfg: EnvoyPtr, cfg: *const c_void, event: u64) {
    if event == filter::TICK_EVENT {
        // SAFETY: a live configuration (see `filter`).
        guard::catch(|| unsafe { filter(cfg) }.on_tick(), || (), ())
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _envoy_cfg: EnvoyPtr,
    cfg: *const c_void,
    callout_id: u64,
    result: u32,
    headers: *const EnvoyHeader,
    n_headers: usize,
    chunks: *const EnvoyBuffer,
    n_chunks: usize,
) {
    guard::catch(
        || {
            // SAFETY: Envoy's arrays, valid during this call.
            let (headers, chunks) = unsafe { (envoy_array(headers, n_headers), envoy_array(chunks, n_chunks)) };
            let status = headers.iter().find(|h| unsafe { h.name_bytes() } == b":status").map(|h| unsafe { h.value_bytes() });
            let answer = match (result, status) {
                (CALLOUT_RESULT_SUCCESS, Some(b"200")) => Ok(chunks.iter().flat_map(|c| unsafe { c.bytes() }).copied().collect()),
                (CALLOUT_RESULT_SUCCESS, Some(s)) => Err(format!("HTTP {}", String::from_utf8_lossy(s))),
                _ => Err("no response (connection failure or timeout)".to_string()),
            };
            // SAFETY: a live configuration.
            unsafe { filter(cfg) }.on_callout(callout_id, answer)
        },
        || (),
        (),
    )
}

/// A stream needs nothing of its own on the tree path: its pointer is its configuration's (no
/// allocation per request). Never null: Envoy would close the stream.
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(cfg: *const c_void, _envoy_filter: EnvoyPtr) -> *const c_void {
    cfg
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(envoy_filter: EnvoyPtr, cfg: *const c_void, end_of_stream: bool) -> u32 {
    let s = Stream::new(envoy_filter);
    // SAFETY: a live configuration (every stream's module pointer is its configuration's).
    let f = unsafe { filter(cfg) };
    guard::catch(|| stream::request_headers(f, s, end_of_stream), || stream::after_panic(f, s), HEADERS_CONTINUE)
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(envoy_filter: EnvoyPtr, cfg: *const c_void, end_of_stream: bool) -> u32 {
    let s = Stream::new(envoy_filter);
    // SAFETY: a live configuration.
    let f = unsafe { filter(cfg) };
    guard::catch(|| text::request_body(f, s, end_of_stream), || stream::count_panic(f, s, BODY_CONTINUE), BODY_CONTINUE)
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(envoy_filter: EnvoyPtr, cfg: *const c_void) -> u32 {
    let s = Stream::new(envoy_filter);
    // SAFETY: a live configuration.
    let f = unsafe { filter(cfg) };
    guard::catch(|| text::request_trailers(f, s), || stream::count_panic(f, s, TRAILERS_CONTINUE), TRAILERS_CONTINUE)
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(_f: EnvoyPtr, _m: *const c_void, _end_of_stream: bool) -> u32 {
    HEADERS_CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(_f: EnvoyPtr, _m: *const c_void, _end_of_stream: bool) -> u32 {
    BODY_CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(_f: EnvoyPtr, _m: *const c_void) -> u32 {
    TRAILERS_CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(envoy_filter: EnvoyPtr, cfg: *const c_void) {
    let s = Stream::new(envoy_filter);
    // SAFETY: a live configuration.
    let f = unsafe { filter(cfg) };
    guard::catch(|| stream::complete(f, s), || (), ())
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(_m: *const c_void) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    envoy_filter: EnvoyPtr,
    cfg: *const c_void,
    callout_id: u64,
    result: u32,
    headers: *const EnvoyHeader,
    n_headers: usize,
    chunks: *const EnvoyBuffer,
    n_chunks: usize,
) {
    let s = Stream::new(envoy_filter);
    // SAFETY: a live configuration; Envoy's arrays, valid during this call.
    let f = unsafe { filter(cfg) };
    let (headers, chunks) = unsafe { (envoy_array(headers, n_headers), envoy_array(chunks, n_chunks)) };
    guard::catch(|| text::verdict(f, s, callout_id, result, headers, chunks), || stream::resume_after_panic(f, s), ())
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(_f: EnvoyPtr, _m: *const c_void, _id: u64, _h: *const EnvoyHeader, _n: usize, _end: bool) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(_f: EnvoyPtr, _m: *const c_void, _id: u64, _d: *const EnvoyBuffer, _n: usize, _end: bool) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(_f: EnvoyPtr, _m: *const c_void, _id: u64, _t: *const EnvoyHeader, _n: usize) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(_f: EnvoyPtr, _m: *const c_void, _id: u64) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(_f: EnvoyPtr, _m: *const c_void, _id: u64, _reason: u32) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(_f: EnvoyPtr, _m: *const c_void, _event: u64) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(_f: EnvoyPtr, _m: *const c_void) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(_f: EnvoyPtr, _m: *const c_void) {}
