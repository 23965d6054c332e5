//! Safe wrappers over the ABI calls (`abi`): the configuration's (main thread, or any Envoy
//! thread for counters) and a stream's (its worker, inside one of its hooks). Nothing here
//! allocates on a request.

use crate::abi::*;
use std::ffi::c_void;

/// Logs under Envoy's `dynamic_modules` logger.
pub fn log(level: u32, message: &str) {
    // SAFETY: the buffer is valid during the call; any thread may log.
    unsafe { envoy_dynamic_module_callback_log(level, ModuleBuffer::of(message.as_bytes())) }
}

/// Envoy's worker count (main thread only).
pub fn concurrency() -> u32 {
    // SAFETY: no arguments; called from `on_http_filter_config_new`, on the main thread.
    unsafe { envoy_dynamic_module_callback_get_concurrency() }
}

/// Envoy's side of one filter configuration; valid until `on_http_filter_config_destroy`.
#[derive(Clone, Copy)]
pub struct EnvoyConfig(EnvoyPtr);

// SAFETY: the pointer is only dereferenced by Envoy, in calls the ABI allows from the thread
// making them (definitions and callouts on the main thread, counters on Envoy's threads).
unsafe impl Send for EnvoyConfig {}
unsafe impl Sync for EnvoyConfig {}

type Define = unsafe extern "C" fn(EnvoyPtr, ModuleBuffer, *mut ModuleBuffer, usize, *mut usize) -> u32;

impl EnvoyConfig {
    pub fn new(ptr: EnvoyPtr) -> EnvoyConfig {
        EnvoyConfig(ptr)
    }

    fn define(self, f: Define, name: &str, labels: &[&str]) -> Option<usize> {
        let mut id = 0;
        let mut names: Vec<ModuleBuffer> = labels.iter().map(|l| ModuleBuffer::of(l.as_bytes())).collect();
        let ptr = if names.is_empty() { std::ptr::null_mut() } else { names.as_mut_ptr() };
        // SAFETY: valid buffers and out-param for the call.
        let r = unsafe { f(self.0, ModuleBuffer::of(name.as_bytes()), ptr, names.len(), &mut id) };
        (r == METRICS_SUCCESS).then_some(id)
    }

    /// A counter with labels, whose values come with each increment (Envoy makes a series
    /// per set of values: `name{label="value"}` in Prometheus).
    pub fn define_labelled_counter(self, name: &str, labels: &[&str]) -> Option<usize> {
        self.define(envoy_dynamic_module_callback_http_filter_config_define_counter, name, labels)
    }
    /// A gauge with labels, as [`EnvoyConfig::define_labelled_counter`].
    pub fn define_labelled_gauge(self, name: &str, labels: &[&str]) -> Option<usize> {
        self.define(envoy_dynamic_module_callback_http_filter_config_define_gauge, name, labels)
    }

    /// `values`: one per label the counter was defined with, in that order, at most
    /// [`MAX_LABELS`] (a flush on the main thread makes these calls: no allocation).
    pub fn increment_labelled(self, id: usize, values: &[&str], n: u64) {
        let (mut buffers, len) = label_buffers(values);
        // SAFETY: as many label values as defined, valid for the call.
        unsafe { envoy_dynamic_module_callback_http_filter_config_increment_counter(self.0, id, buffers.as_mut_ptr(), len, n) };
    }
    pub fn set_labelled_gauge(self, id: usize, values: &[&str], value: u64) {
        let (mut buffers, len) = label_buffers(values);
        // SAFETY: as many label values as defined, valid for the call.
        unsafe { envoy_dynamic_module_callback_http_filter_config_set_gauge(self.0, id, buffers.as_mut_ptr(), len, value) };
    }
    pub fn define_counter(self, name: &str) -> Option<usize> {
        self.define(envoy_dynamic_module_callback_http_filter_config_define_counter, name, &[])
    }
    pub fn define_gauge(self, name: &str) -> Option<usize> {
        self.define(envoy_dynamic_module_callback_http_filter_config_define_gauge, name, &[])
    }
    pub fn define_histogram(self, name: &str) -> Option<usize> {
        self.define(envoy_dynamic_module_callback_http_filter_config_define_histogram, name, &[])
    }

    pub fn increment(self, id: usize, n: u64) {
        // SAFETY: plain values, no labels.
        unsafe { envoy_dynamic_module_callback_http_filter_config_increment_counter(self.0, id, std::ptr::null_mut(), 0, n) };
    }
    pub fn set_gauge(self, id: Option<usize>, value: u64) {
        if let Some(id) = id {
            // SAFETY: as above.
            unsafe { envoy_dynamic_module_callback_http_filter_config_set_gauge(self.0, id, std::ptr::null_mut(), 0, value) };
        }
    }
    pub fn record(self, id: Option<usize>, value: u64) {
        if let Some(id) = id {
            // SAFETY: as above.
            unsafe { envoy_dynamic_module_callback_http_filter_config_record_histogram_value(self.0, id, std::ptr::null_mut(), 0, value) };
        }
    }

    /// A GET to `cluster` (main thread); the answer comes to
    /// `on_http_filter_config_http_callout_done` with the returned id.
    pub fn get(self, cluster: &str, path: &str, authority: &str, timeout_ms: u64) -> Result<u64, u32> {
        let call = Callout { method: b"GET", cluster, path, authority, last: (b"accept", b"application/json, application/octet-stream"), body: &[], timeout_ms };
        // SAFETY: the configuration's pointer, on the main thread.
        call.send(|id, cluster, headers, n, body, timeout| unsafe {
            envoy_dynamic_module_callback_http_filter_config_http_callout(self.0, id, cluster, headers, n, body, timeout)
        })
    }

    /// A scheduler whose commits run `on_http_filter_config_scheduled` on the main thread.
    pub fn scheduler(self) -> Scheduler {
        // SAFETY: called from `on_http_filter_config_new`, on the main thread.
        Scheduler(unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_new(self.0) })
    }
}

/// The most labels a metric of the module has (the drift counters': model, feature, bin).
pub const MAX_LABELS: usize = 3;

/// Label values as the ABI takes them, on the stack (values past [`MAX_LABELS`] are dropped,
/// which Envoy then refuses as a label count mismatch).
fn label_buffers(values: &[&str]) -> ([ModuleBuffer; MAX_LABELS], usize) {
    let mut buffers = [ModuleBuffer::NULL; MAX_LABELS];
    for (b, v) in buffers.iter_mut().zip(values) {
        *b = ModuleBuffer::of(v.as_bytes());
    }
    (buffers, values.len().min(MAX_LABELS))
}

fn header<'a>(key: &'a [u8], value: &'a [u8]) -> ModuleHeader {
    ModuleHeader { key: ModuleBuffer::of(key), value: ModuleBuffer::of(value) }
}

/// One HTTP callout (the configuration's and a stream's take the same arguments).
struct Callout<'a> {
    method: &'static [u8],
    cluster: &'a str,
    path: &'a str,
    authority: &'a str,
    /// The header after the pseudo-headers and `host` (`accept`, `content-type`).
    last: (&'static [u8], &'static [u8]),
    body: &'a [u8],
    timeout_ms: u64,
}

impl Callout<'_> {
    /// Makes the call through `f` (one of the ABI's callout functions); the callout's id.
    fn send(&self, f: impl FnOnce(*mut u64, ModuleBuffer, *mut ModuleHeader, usize, ModuleBuffer, u64) -> u32) -> Result<u64, u32> {
        let mut headers = [
            header(b":method", self.method),
            header(b":path", self.path.as_bytes()),
            header(b":authority", self.authority.as_bytes()),
            header(b"host", self.authority.as_bytes()),
            header(self.last.0, self.last.1),
        ];
        let body = if self.body.is_empty() { ModuleBuffer::NULL } else { ModuleBuffer::of(self.body) };
        let mut id = 0;
        // Envoy copies the headers and the body before it returns.
        let r = f(&mut id, ModuleBuffer::of(self.cluster.as_bytes()), headers.as_mut_ptr(), headers.len(), body, self.timeout_ms);
        if r == CALLOUT_SUCCESS {
            Ok(id)
        } else {
            Err(r)
        }
    }
}

/// A configuration scheduler: the one ABI object a module thread may use.
pub struct Scheduler(*mut c_void);

// SAFETY: `scheduler_commit` may be called from any thread (the ABI says so); delete runs once,
// on drop.
unsafe impl Send for Scheduler {}
unsafe impl Sync for Scheduler {}

impl Scheduler {
    pub fn commit(&self, event: u64) {
        // SAFETY: the scheduler lives until drop, after every committing thread has stopped.
        unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_commit(self.0, event) }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // SAFETY: created by `scheduler_new`, deleted once.
        unsafe { envoy_dynamic_module_callback_http_filter_config_scheduler_delete(self.0) }
    }
}

/// One stream's filter, used on its worker inside its hooks.
#[derive(Clone, Copy)]
pub struct Stream(EnvoyPtr);

impl Stream {
    pub fn new(ptr: EnvoyPtr) -> Stream {
        Stream(ptr)
    }

    /// The stream's identity while it lives (Envoy's filter pointer).
    pub fn id(self) -> usize {
        self.0 as usize
    }

    pub fn worker_index(self) -> usize {
        // SAFETY: a live filter pointer, on its worker.
        unsafe { envoy_dynamic_module_callback_http_filter_get_worker_index(self.0) as usize }
    }

    /// The request headers into `out` (cleared; grown only when a request has more headers
    /// than any before it on this worker).
    pub fn request_headers(self, out: &mut Vec<EnvoyHeader>) -> bool {
        // SAFETY: `out` has room for `n` entries when Envoy writes them.
        unsafe {
            let n = envoy_dynamic_module_callback_http_get_headers_size(self.0, REQUEST_HEADERS);
            out.clear();
            out.reserve(n);
            if !envoy_dynamic_module_callback_http_get_headers(self.0, REQUEST_HEADERS, out.as_mut_ptr()) {
                return false;
            }
            out.set_len(n);
        }
        true
    }

    /// A string attribute (`abi::ATTR_*`): borrowed from Envoy until the hook returns.
    pub fn attribute<'a>(self, id: u32) -> Option<&'a [u8]> {
        let mut out = EnvoyBuffer::NULL;
        // SAFETY: out-param valid for writes; Envoy's bytes live until the hook returns.
        unsafe { envoy_dynamic_module_callback_http_filter_get_attribute_string(self.0, id, &mut out).then(|| out.bytes()) }
    }

    pub fn attribute_int(self, id: u32) -> Option<u64> {
        let mut out = 0;
        // SAFETY: out-param valid for writes.
        unsafe { envoy_dynamic_module_callback_http_filter_get_attribute_int(self.0, id, &mut out).then_some(out) }
    }

    pub fn add_header(self, name: &[u8], value: &[u8]) -> bool {
        // SAFETY: buffers valid during the call.
        unsafe { envoy_dynamic_module_callback_http_add_header(self.0, REQUEST_HEADERS, ModuleBuffer::of(name), ModuleBuffer::of(value)) }
    }

    /// Sets `name` to `value`, dropping the values the client sent.
    pub fn set_header(self, name: &[u8], value: &[u8]) -> bool {
        // SAFETY: as above. An empty `value` keeps a non-null pointer (Envoy: "set empty").
        let value = ModuleBuffer { ptr: if value.is_empty() { b"".as_ptr() } else { value.as_ptr() }, len: value.len() };
        unsafe { envoy_dynamic_module_callback_http_set_header(self.0, REQUEST_HEADERS, ModuleBuffer::of(name), value) }
    }

    pub fn remove_header(self, name: &[u8]) -> bool {
        // SAFETY: a null value removes (the ABI has no remove call of its own).
        unsafe { envoy_dynamic_module_callback_http_set_header(self.0, REQUEST_HEADERS, ModuleBuffer::of(name), ModuleBuffer::NULL) }
    }

    pub fn set_filter_state(self, key: &[u8], value: &[u8]) -> bool {
        // SAFETY: buffers valid during the call; Envoy copies them.
        unsafe { envoy_dynamic_module_callback_http_set_filter_state_bytes(self.0, ModuleBuffer::of(key), ModuleBuffer::of(value)) }
    }

    /// Bytes of request body so far: buffered, plus the chunk this body hook received.
    pub fn request_body_len(self) -> usize {
        // SAFETY: a live filter pointer, inside its body hook.
        unsafe {
            let buffered = envoy_dynamic_module_callback_http_get_body_size(self.0, BUFFERED_REQUEST_BODY);
            if envoy_dynamic_module_callback_http_received_buffered_request_body(self.0) {
                buffered
            } else {
                buffered + envoy_dynamic_module_callback_http_get_body_size(self.0, RECEIVED_REQUEST_BODY)
            }
        }
    }

    /// The request body so far (buffered, then the chunk this hook received), at most `max`
    /// bytes. Allocates: the text path's, never the tree path's.
    pub fn request_body(self, max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        // SAFETY: chunk arrays sized by Envoy's own count; Envoy's bytes live until the hook
        // returns, and are copied here.
        unsafe {
            let received_is_buffered = envoy_dynamic_module_callback_http_received_buffered_request_body(self.0);
            let kinds: &[u32] = if received_is_buffered { &[BUFFERED_REQUEST_BODY] } else { &[BUFFERED_REQUEST_BODY, RECEIVED_REQUEST_BODY] };
            for &kind in kinds {
                let n = envoy_dynamic_module_callback_http_get_body_chunks_size(self.0, kind);
                let mut chunks = vec![EnvoyBuffer::NULL; n];
                if n == 0 || !envoy_dynamic_module_callback_http_get_body_chunks(self.0, kind, chunks.as_mut_ptr()) {
                    continue;
                }
                for c in chunks {
                    let room = max.saturating_sub(out.len());
                    let b = c.bytes();
                    out.extend_from_slice(&b[..b.len().min(room)]);
                }
            }
        }
        out
    }

    /// A POST of `body` (JSON) to `cluster`, tied to this stream.
    pub fn callout(self, cluster: &str, path: &str, authority: &str, body: &[u8], timeout_ms: u64) -> Result<u64, u32> {
        let call = Callout { method: b"POST", cluster, path, authority, last: (b"content-type", b"application/json"), body, timeout_ms };
        // SAFETY: a live filter pointer, on its worker.
        call.send(|id, cluster, headers, n, body, timeout| unsafe {
            envoy_dynamic_module_callback_http_filter_http_callout(self.0, id, cluster, headers, n, body, timeout)
        })
    }

    /// Resumes a request whose headers a hook stopped.
    pub fn continue_decoding(self) {
        // SAFETY: a live filter pointer, on its worker.
        unsafe { envoy_dynamic_module_callback_http_filter_continue_decoding(self.0) }
    }

    pub fn send_response(self, status: u32, headers: &mut [ModuleHeader], body: &[u8], details: &[u8]) {
        // SAFETY: buffers valid during the call; Envoy copies them. Envoy may run this stream's
        // `stream_complete` before returning (the module keeps no borrow across it).
        unsafe {
            envoy_dynamic_module_callback_http_send_response(self.0, status, headers.as_mut_ptr(), headers.len(), ModuleBuffer::of(body), ModuleBuffer::of(details))
        }
    }
}
