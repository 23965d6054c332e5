//! `Host` (compiled module + per-process stores), `Vm` (one instance + root context) and
//! `Stream` (one HTTP context), driving the guest the way Envoy's HTTP filter does.
//!
//! The types are defined here; their methods by concern:
//! * `compile` — compiling and linking the module, `Host` construction, instantiating a `Vm`;
//! * `lifecycle` — the root context and VM lifecycle (`_initialize`, `proxy_on_vm_start`,
//!   `proxy_on_configure`), new streams, calling guest exports;
//! * `drive` — the stream callbacks (request/response headers, body, trailers, `done`);
//! * `deferred` — what Envoy runs after a VM call returns (continue/close stream, local replies);
//! * `callouts` — HTTP call responses, ticks and queue-ready notifications;
//! * `inspect` — what tests read back: metrics, shared data, queues, logs;
//! * `stream` — the `Stream` handle: per-stream properties and what the filter did.

use crate::state::*;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use wasmtime::{Instance, Store};

mod callouts;
mod compile;
mod deferred;
mod drive;
mod inspect;
mod lifecycle;
mod stream;

/// What a filter callback returned (proxy-wasm `Action`), or that the host, like Envoy, did not
/// call the filter at all (held data while paused, after a local reply or reset, or the export
/// is missing).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    Pause,
    /// Any other raw value (e.g. 3/4 StopAllIteration*, 2 ContinueAndEndStream / watermark).
    Other(u32),
    NotCalled,
}

impl Action {
    fn from_raw(v: i32) -> Action {
        match v {
            0 => Action::Continue,
            1 => Action::Pause,
            v => Action::Other(v as u32),
        }
    }
}

/// Options for a [`Host`]; `Default` gives Envoy's defaults.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// `vm_config.vm_id` (shared data / queues are keyed by it; Envoy's default is "").
    pub vm_id: String,
    /// The plugin's `root_id` (property `plugin_root_id`).
    pub root_id: String,
    /// The plugin's `name` (property `plugin_name`).
    pub plugin_name: String,
    /// What `proxy_get_log_level` reports (Envoy's default level is info). Every `proxy_log`
    /// call is captured regardless of level.
    pub log_level: LogLevel,
    /// Envoy's `allow_on_headers_stop_iteration` (default false: a Pause from the headers
    /// callback becomes StopAllIterationAndWatermark, so the body is held without calling the
    /// filter until it continues the stream).
    pub allow_on_headers_stop_iteration: bool,
    /// Send local replies through this filter's response callbacks, as Envoy's filter chain
    /// does (default true).
    pub encode_local_replies: bool,
    /// Cluster names `proxy_http_call` accepts; others get BadArgument ("cluster not found").
    pub clusters: Vec<String>,
    /// Initial wall clock (ns since the Unix epoch).
    pub start_time_ns: u64,
    /// Print captured log lines to stderr as they happen (default: env `PROXY_HOST_LOG` set).
    pub echo_logs: bool,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            vm_id: String::new(),
            root_id: String::new(),
            plugin_name: "test_plugin".into(),
            log_level: LogLevel::Info,
            allow_on_headers_stop_iteration: false,
            encode_local_replies: true,
            clusters: Vec::new(),
            start_time_ns: 1_700_000_000_000_000_000,
            echo_logs: std::env::var_os("PROXY_HOST_LOG").is_some(),
        }
    }
}

/// A compiled proxy-wasm module plus the state Envoy keeps per process (shared data, shared
/// queues, stats, the cluster list, the clock). Cheap to clone; every [`Vm`] made from it (a
/// "worker") shares that state.
#[derive(Clone)]
pub struct Host {
    compiled: Arc<compile::Compiled>,
    shared: Arc<Mutex<Shared>>,
    clock: Arc<Clock>,
    opts: Arc<HostOptions>,
}

static VM_SERIAL: AtomicU64 = AtomicU64::new(1);

/// One instance of the module (Envoy: one per worker thread) with its root context.
pub struct Vm {
    host: Host,
    store: Store<VmState>,
    instance: Instance,
    serial: u64,
    next_context_id: u32,
    poisoned: Option<String>,
}

/// One HTTP stream (Envoy: one filter instance / HTTP context). Created by [`Vm::stream`]; the
/// guest context is created lazily by the first driver call, as Envoy does in `decodeHeaders`.
/// Clones refer to the same stream.
#[derive(Clone)]
pub struct Stream {
    id: u32,
    vm: u64,
    state: Arc<Mutex<StreamState>>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Dir {
    Request,
    Response,
}

fn dir_mut(st: &mut StreamState, dir: Dir) -> &mut Direction {
    match dir {
        Dir::Request => &mut st.request,
        Dir::Response => &mut st.response,
    }
}

/// Passes what this filter holds to the next one.
fn release(d: &mut Direction) {
    if d.forwarded_headers.is_none() {
        d.forwarded_headers = d.headers.clone();
    }
    let body = std::mem::take(&mut d.body);
    d.forwarded_body.extend_from_slice(&body);
    if d.trailers.is_some() && d.forwarded_trailers.is_none() {
        d.forwarded_trailers = d.trailers.clone();
    }
}
