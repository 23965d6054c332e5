//! State behind the host calls: per-Host (shared across Vms, like Envoy's per-process stores)
//! and per-Vm (the wasmtime `Store` data), plus per-stream state shared with the test's
//! [`Stream`](super::Stream) handle.

use crate::headers::HeaderMap;
use crate::vm::HostOptions;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use wasmtime::{Memory, TypedFunc};
use wasmtime_wasi::p1::WasiP1Ctx;

/// proxy-wasm `WasmResult` codes (proxy-wasm-cpp-host `include/proxy-wasm/word.h`).
pub mod status {
    pub const OK: i32 = 0;
    pub const NOT_FOUND: i32 = 1;
    pub const BAD_ARGUMENT: i32 = 2;
    pub const SERIALIZATION_FAILURE: i32 = 3;
    pub const PARSE_FAILURE: i32 = 4;
    pub const INVALID_MEMORY_ACCESS: i32 = 6;
    pub const EMPTY: i32 = 7;
    pub const CAS_MISMATCH: i32 = 8;
    pub const INTERNAL_FAILURE: i32 = 10;
    pub const BROKEN_CONNECTION: i32 = 11;
    pub const UNIMPLEMENTED: i32 = 12;
}

/// Log levels as proxy-wasm numbers them (0 trace .. 5 critical).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Trace = 0,
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
    Critical = 5,
}

impl LogLevel {
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => LogLevel::Trace,
            1 => LogLevel::Debug,
            2 => LogLevel::Info,
            3 => LogLevel::Warn,
            4 => LogLevel::Error,
            5 => LogLevel::Critical,
            _ => return None,
        })
    }
}

/// One captured `proxy_log` call (or a line the guest wrote to stdout (Info) / stderr (Error),
/// which Envoy also turns into log lines).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub message: String,
    /// The context the guest was running in (root id, a stream id, or 0 outside callbacks).
    pub context_id: u32,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Clone, Debug, Default)]
pub struct MetricValue {
    /// Counter/gauge value (gauges wrap below zero like Envoy's u64 gauges in release builds).
    pub value: u64,
    /// Every value recorded into a histogram, in order.
    pub recorded: Vec<u64>,
}

/// A monotonic + wall clock the test controls; every Vm of a Host reads the same clock.
#[derive(Debug)]
pub struct Clock {
    pub(crate) wall_ns: AtomicU64,
    pub(crate) mono_ns: AtomicU64,
}

impl Clock {
    pub fn new(start_wall_ns: u64) -> Self {
        Clock {
            wall_ns: AtomicU64::new(start_wall_ns),
            mono_ns: AtomicU64::new(1_000_000_000),
        }
    }
    pub fn wall_ns(&self) -> u64 {
        self.wall_ns.load(Ordering::SeqCst)
    }
    pub fn mono_ns(&self) -> u64 {
        self.mono_ns.load(Ordering::SeqCst)
    }
    pub fn advance(&self, d: std::time::Duration) {
        let ns = d.as_nanos() as u64;
        self.wall_ns.fetch_add(ns, Ordering::SeqCst);
        self.mono_ns.fetch_add(ns, Ordering::SeqCst);
    }
    pub fn set_wall_ns(&self, ns: u64) {
        self.wall_ns.store(ns, Ordering::SeqCst);
    }
}

pub(crate) struct Queue {
    pub vm_id: String,
    pub name: String,
    pub items: VecDeque<Vec<u8>>,
    /// The registering Vm's notification list and root context, for `proxy_on_queue_ready`.
    pub owner: Weak<Mutex<Vec<u32>>>,
}

/// Per-Host state: Envoy keeps shared data and shared queues per process (keyed by vm_id) and
/// stats in the process-wide store, so every Vm ("worker") of a Host sees the same ones.
#[derive(Default)]
pub(crate) struct Shared {
    pub shared_data: HashMap<Vec<u8>, (Vec<u8>, u32)>,
    pub next_cas: u32,
    pub queues: HashMap<u32, Queue>,
    pub next_queue_token: u32,
    pub metrics: BTreeMap<(String, MetricKind), MetricValue>,
    pub clusters: std::collections::BTreeSet<String>,
}

impl Shared {
    /// proxy-wasm-cpp-host `SharedData::nextCas`: starts at 1 and skips 0 on wrap.
    pub fn next_cas(&mut self) -> u32 {
        if self.next_cas == 0 {
            self.next_cas = 1;
        }
        let r = self.next_cas;
        self.next_cas = self.next_cas.wrapping_add(1);
        if self.next_cas == 0 {
            self.next_cas = 1;
        }
        r
    }
}

/// How far a direction (request or response) of a stream has got through this filter.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Flow {
    /// Nothing has arrived yet.
    #[default]
    Idle,
    /// Headers (and any body so far) have been released downstream of this filter; each new
    /// chunk is shown to the filter and released when it returns Continue.
    Iterating,
    /// Headers returned StopIteration and `allow_on_headers_stop_iteration` is set: headers are
    /// held, body chunks are still shown to the filter.
    HeadersStopped,
    /// Headers returned Pause without `allow_on_headers_stop_iteration` (Envoy's default turns
    /// it into StopAllIterationAndWatermark): body and trailers are held without calling the
    /// filter until it continues the stream; then the held body is delivered in one callback.
    StopAll,
    /// The body callback returned Pause (StopIterationAndBuffer): the next chunk is appended and
    /// the filter sees the whole buffer again.
    Buffering,
    /// No more callbacks in this direction (end of stream released, or a local reply ended it).
    Ended,
}

#[derive(Clone, Debug, Default)]
pub struct Direction {
    /// The current header map (None until headers arrived). Kept after Envoy drops its pointer,
    /// so tests can still look at the final state.
    pub headers: Option<HeaderMap>,
    /// Whether the filter can reach the map: Envoy nulls `request_headers_` once the headers
    /// callback returns Continue (or the filter continues the stream).
    pub headers_live: bool,
    /// The body buffer the filter sees in the current/next body callback.
    pub body: Vec<u8>,
    pub body_live: bool,
    pub trailers: Option<HeaderMap>,
    pub trailers_live: bool,
    pub flow: Flow,
    /// Data held while in [`Flow::StopAll`].
    pub held_body: Vec<u8>,
    pub held_eos: bool,
    pub held_trailers: Option<HeaderMap>,
    /// What passed this filter (what the next filter / the upstream or client would see).
    pub forwarded_headers: Option<HeaderMap>,
    pub forwarded_body: Vec<u8>,
    pub forwarded_trailers: Option<HeaderMap>,
    /// End of stream has passed this filter.
    pub ended: bool,
    /// End of stream has arrived at this filter (with headers, a body chunk or trailers).
    pub eos_seen: bool,
}

/// A local reply the filter sent with `proxy_send_local_response` (or Envoy's fail-closed 503
/// after a trap, `details == "wasm_fail_stream"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalReply {
    pub status: u32,
    pub body: Vec<u8>,
    /// The additional headers the filter passed (names lower-cased).
    pub headers: HeaderMap,
    /// Response code details, whitespace replaced by `_` as Envoy does.
    pub details: String,
    /// -1 (or any value outside 0..=16) means "no grpc-status", as Envoy maps it.
    pub grpc_status: i32,
}

#[derive(Clone, Debug, Default)]
pub struct StreamState {
    pub id: u32,
    /// `proxy_on_context_create` has been called (Envoy does it lazily at the first headers).
    pub created: bool,
    pub deleted: bool,
    /// Properties set by the test (full NUL-joined path → Envoy-serialised value).
    pub properties: HashMap<Vec<u8>, Vec<u8>>,
    /// Envoy filter state written by `proxy_set_property`: key `wasm.<path>` (path bytes as
    /// given, NUL separators included).
    pub filter_state: BTreeMap<Vec<u8>, Vec<u8>>,
    pub request: Direction,
    pub response: Direction,
    /// `end_of_stream_` of the callback in progress.
    pub eos: bool,
    pub local_reply: Option<LocalReply>,
    pub(crate) pending_local_reply: Option<LocalReply>,
    /// Further `proxy_send_local_response` calls after the first (Envoy would reset the stream).
    pub extra_local_replies: Vec<LocalReply>,
    /// `proxy_continue_stream` calls (0 request, 1 response, 2 downstream, 3 upstream).
    pub continue_calls: Vec<u32>,
    /// `proxy_close_stream` calls.
    pub close_calls: Vec<u32>,
    /// The stream was reset (`proxy_close_stream` on request/response).
    pub reset: bool,
    /// A guest trap happened in one of this stream's callbacks.
    pub failed: bool,
    /// Route cache clears requested (`proxy_clear_route_cache` / foreign `clear_route_cache`).
    pub route_cache_clears: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpCall {
    pub token: u32,
    pub upstream: String,
    /// Request headers as Envoy builds them (lower-cased; `content-length` set when there is a
    /// body).
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub trailers: HeaderMap,
    /// 0 = no timeout.
    pub timeout_ms: u32,
    /// The context that dispatched it (Envoy registers the call on the root context; the SDK
    /// routes the response to this context by token).
    pub dispatched_from: u32,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct CallResponse {
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub trailers: Option<HeaderMap>,
}

/// Work Envoy defers until the outermost VM call returns (`addAfterVmCallAction`).
#[derive(Clone, Debug)]
pub(crate) enum After {
    Continue(u32, u32),
    Close(u32, u32),
    LocalReply(u32),
}

pub struct VmState {
    pub(crate) wasi: WasiP1Ctx,
    pub(crate) shared: Arc<Mutex<Shared>>,
    pub(crate) clock: Arc<Clock>,
    /// The Host's options (its clusters and start time are read once, into `shared` and `clock`).
    pub(crate) opts: Arc<HostOptions>,
    pub(crate) memory: Option<Memory>,
    pub(crate) alloc: Option<TypedFunc<i32, i32>>,
    pub(crate) alloc_calls: u64,
    pub(crate) alloc_bytes: u64,
    pub(crate) vm_config: Vec<u8>,
    /// Envoy's `temp_plugin_`: the plugin configuration is readable only during
    /// `proxy_on_vm_start`/`proxy_on_configure`.
    pub(crate) plugin_config: Option<Vec<u8>>,
    pub(crate) root_id: u32,
    pub(crate) current: u32,
    pub(crate) effective: u32,
    pub(crate) streams: HashMap<u32, Arc<Mutex<StreamState>>>,
    pub(crate) logs: Vec<LogLine>,
    pub(crate) metric_ids: HashMap<u32, (MetricKind, String)>,
    pub(crate) next_metric_id: [u32; 3],
    pub(crate) tick_period_ms: u32,
    pub(crate) http_calls: BTreeMap<u32, HttpCall>,
    pub(crate) next_http_token: u32,
    pub(crate) call_response: Option<CallResponse>,
    pub(crate) status: (u32, Vec<u8>),
    pub(crate) properties: HashMap<Vec<u8>, Vec<u8>>,
    pub(crate) after: Vec<After>,
    pub(crate) queue_ready: Arc<Mutex<Vec<u32>>>,
    pub(crate) access_log_phase: bool,
    pub(crate) done_calls: u32,
    pub(crate) unimplemented_calls: Vec<String>,
}

impl VmState {
    /// Envoy's `contextOrEffectiveContext()`: the effective context if one was set and still
    /// exists, else the context whose callback is running.
    pub(crate) fn ctx(&self) -> u32 {
        if self.effective != 0
            && (self.effective == self.root_id || self.streams.contains_key(&self.effective))
        {
            self.effective
        } else {
            self.current
        }
    }

    pub(crate) fn stream(&self) -> Option<Arc<Mutex<StreamState>>> {
        self.streams.get(&self.ctx()).cloned()
    }

    pub(crate) fn push_log(&mut self, level: LogLevel, message: String) {
        if self.opts.echo_logs {
            eprintln!("[proxy_host {:?} ctx {}] {}", level, self.ctx(), message);
        }
        let context_id = self.ctx();
        self.logs.push(LogLine {
            level,
            message,
            context_id,
        });
    }
}
