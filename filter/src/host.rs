//! The host calls the per-request path makes, declared directly: the SDK's wrappers allocate
//! (`String`/`Vec` results, serialised property paths) and panic on unexpected statuses, and
//! neither may happen on a request. Buffers the host returns are wrapped in [`HostBuffer`],
//! allocated inside [`crate::heap::host_buffers`].

use std::alloc::Layout;

const OK: u32 = 0;

/// proxy-wasm map types.
pub const REQUEST_HEADERS: u32 = 0;
pub const HTTP_CALL_RESPONSE_HEADERS: u32 = 6;
/// proxy-wasm buffer types.
pub const REQUEST_BODY: u32 = 0;
pub const HTTP_CALL_RESPONSE_BODY: u32 = 4;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_get_header_map_pairs(map_type: u32, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_add_header_map_value(map_type: u32, key: *const u8, key_size: usize, value: *const u8, value_size: usize) -> u32;
    fn proxy_replace_header_map_value(map_type: u32, key: *const u8, key_size: usize, value: *const u8, value_size: usize) -> u32;
    fn proxy_remove_header_map_value(map_type: u32, key: *const u8, key_size: usize) -> u32;
    fn proxy_get_property(path: *const u8, path_size: usize, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_set_property(path: *const u8, path_size: usize, value: *const u8, value_size: usize) -> u32;
    fn proxy_increment_metric(id: u32, offset: i64) -> u32;
    fn proxy_get_buffer_bytes(buffer_type: u32, start: usize, max_size: usize, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_continue_stream(stream_type: u32) -> u32;
    fn proxy_get_current_time_nanoseconds(time: *mut u64) -> u32;
    fn proxy_record_metric(id: u32, value: u64) -> u32;
    #[allow(clippy::too_many_arguments)]
    fn proxy_send_local_response(
        status: u32,
        details: *const u8,
        details_size: usize,
        body: *const u8,
        body_size: usize,
        headers: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> u32;
}

/// A buffer the host allocated through `proxy_on_memory_allocate`; freed on drop.
pub struct HostBuffer {
    ptr: *mut u8,
    len: usize,
}

impl HostBuffer {
    pub fn bytes(&self) -> &[u8] {
        if self.ptr.is_null() || self.len == 0 {
            return &[];
        }
        // SAFETY: the host wrote `len` bytes at `ptr`, which it got from our allocator.
        unsafe { core::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if !self.ptr.is_null() && self.len != 0 {
            // SAFETY: the SDK's `proxy_on_memory_allocate` allocates exactly `len` bytes with
            // alignment 1 (a boxed byte slice).
            unsafe { std::alloc::dealloc(self.ptr, Layout::from_size_align_unchecked(self.len, 1)) }
        }
    }
}

fn take(status: u32, ptr: *mut u8, len: usize) -> Option<HostBuffer> {
    let buf = HostBuffer { ptr, len };
    (status == OK).then_some(buf)
}

pub fn header_pairs(map_type: u32) -> Option<HostBuffer> {
    let (mut ptr, mut len) = (core::ptr::null_mut(), 0);
    // SAFETY: out-params are valid for writes.
    let status = unsafe { proxy_get_header_map_pairs(map_type, &mut ptr, &mut len) };
    take(status, ptr, len)
}

/// `path` is the property path with NUL-separated segments, e.g. `b"source\0address"`.
pub fn property(path: &[u8]) -> Option<HostBuffer> {
    let (mut ptr, mut len) = (core::ptr::null_mut(), 0);
    // SAFETY: as above; `path` is valid for reads.
    let status = unsafe { proxy_get_property(path.as_ptr(), path.len(), &mut ptr, &mut len) };
    take(status, ptr, len)
}

pub fn set_property(path: &[u8], value: &[u8]) -> bool {
    // SAFETY: both slices are valid for reads during the call.
    unsafe { proxy_set_property(path.as_ptr(), path.len(), value.as_ptr(), value.len()) == OK }
}

/// Sets `name` to `value`, dropping any value the client sent (Envoy's `setCopy`).
pub fn replace_header(map_type: u32, name: &[u8], value: &[u8]) -> bool {
    // SAFETY: as above.
    unsafe { proxy_replace_header_map_value(map_type, name.as_ptr(), name.len(), value.as_ptr(), value.len()) == OK }
}

/// Adds a value of `name` (Envoy's `addCopy`): for a header the request does not have, the
/// same as [`replace_header`] at about half the cost (measured in Envoy 1.40: ~2.6k fewer
/// instructions per call; `setCopy` looks the name up and removes it first).
pub fn add_header(map_type: u32, name: &[u8], value: &[u8]) -> bool {
    // SAFETY: as above.
    unsafe { proxy_add_header_map_value(map_type, name.as_ptr(), name.len(), value.as_ptr(), value.len()) == OK }
}

/// Removes every value of `name`.
pub fn remove_header(map_type: u32, name: &[u8]) -> bool {
    // SAFETY: as above.
    unsafe { proxy_remove_header_map_value(map_type, name.as_ptr(), name.len()) == OK }
}

pub fn increment(id: u32) {
    // SAFETY: plain values. A missing metric is not worth failing a request over.
    let _ = unsafe { proxy_increment_metric(id, 1) };
}

pub fn record(id: u32, value: u64) {
    // SAFETY: plain values.
    let _ = unsafe { proxy_record_metric(id, value) };
}

/// `headers` is a serialised header map (`edgescore_core::HeaderMap::encode_into`).
pub fn send_local_response(status: u32, details: &[u8], body: &[u8], headers: &[u8]) -> bool {
    // SAFETY: all slices are valid for reads during the call. grpc_status -1: not gRPC.
    unsafe {
        proxy_send_local_response(status, details.as_ptr(), details.len(), body.as_ptr(), body.len(), headers.as_ptr(), headers.len(), -1)
            == OK
    }
}

pub fn buffer(buffer_type: u32, start: usize, max: usize) -> Option<HostBuffer> {
    let (mut ptr, mut len) = (core::ptr::null_mut(), 0);
    // SAFETY: out-params are valid for writes.
    let status = unsafe { proxy_get_buffer_bytes(buffer_type, start, max, &mut ptr, &mut len) };
    take(status, ptr, len)
}

/// Resumes the request held by `on_http_request_headers`/`_body`. After a stream reset Envoy
/// answers NotFound; that is not an error worth a trap.
pub fn continue_request() -> bool {
    // SAFETY: plain value; 0 = StreamType::HttpRequest.
    unsafe { proxy_continue_stream(0) == OK }
}

pub fn now_ns() -> u64 {
    let mut t = 0;
    // SAFETY: out-param valid for writes.
    unsafe { proxy_get_current_time_nanoseconds(&mut t) };
    t
}
