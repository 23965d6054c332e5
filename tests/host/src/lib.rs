//! A proxy-wasm ABI 0.2.1 host on wasmtime for fast, deterministic tests of a real `.wasm`
//! filter (Rust SDK 0.2.5, `wasm32-wasip1`), with Envoy's semantics and quirks.
//!
//! ```no_run
//! use edgescore_proxy_host::{Action, Host, HostOptions};
//! # fn main() -> anyhow::Result<()> {
//! let host = Host::with_options("target/wasm32-wasip1/wasm/edgescore_filter.wasm",
//!     HostOptions { clusters: vec!["auth".into()], ..Default::default() })?;
//! let mut vm = host.vm(b"")?;                    // _initialize, root ctx 1, on_vm_start
//! assert!(vm.configure(br#"{"models": []}"#)?);  // on_configure(root, len)
//! let s = vm.stream();                            // context id 2, 3, ...
//! s.set_property(&["source", "address"], "10.1.2.3:5555");
//! let a = vm.request_headers(&s, [(":method", "GET"), (":path", "/x"), (":authority", "h")], false)?;
//! let b = vm.request_body(&s, b"{}", true)?;
//! vm.response_headers(&s, [(":status", "200")], true)?;
//! vm.done(&s)?;                                   // on_log, on_done, on_delete
//! let _ = (a == Action::Continue, b, s.request_headers(), s.local_reply(), s.filter_state("edgescore"));
//! let _ = (vm.metric("requests"), vm.histogram("latency"), vm.logs(), vm.pending_http_calls());
//! let (calls, bytes) = vm.allocator_calls();
//! let guest = vm.call_u64_export("edgescore_heap_allocations")?;
//! # let _ = (calls, bytes, guest); Ok(()) }
//! ```
//!
//! # Model
//! * [`Host`]: the module, compiled once per process per path (engine + module + linker cached
//!   in a `OnceLock`), plus what Envoy keeps per process: shared data (CAS), shared queues,
//!   stats, the cluster list and a controllable clock. Several [`Vm`]s of one Host model
//!   several workers.
//! * [`Vm`]: a wasmtime `Store` + `Instance`. Root context id 1; stream contexts 2, 3, ...
//!   Driver calls return `Err` on a guest trap (a Rust panic is `unreachable`) and the Vm is
//!   then poisoned ([`Vm::is_poisoned`]); Envoy would fail the stream (fail_closed: 503
//!   `wasm_fail_stream`, recorded as the stream's [`LocalReply`]) and, with FAIL_RELOAD, build a
//!   new VM — make a new `Vm`.
//! * [`Stream`]: the test's handle on one HTTP context; the state lives behind an `Arc<Mutex>`
//!   shared with the Vm, so it can be inspected at any time.
//! * Bytes handed to the guest go through its exported `proxy_on_memory_allocate` (or
//!   `malloc`); every call is counted ([`Vm::allocator_calls`]). Like cpp-host, empty values
//!   are returned as (null, 0) without allocating.
//!
//! # Envoy behaviours mirrored (quirks marked ⚑)
//! * Context created lazily at the first request headers (`decodeHeaders` → `onCreate`);
//!   `done` runs access log (`proxy_on_log`) then `proxy_on_done` + `proxy_on_delete`, in
//!   Envoy's order (`log` before `destroyFilters`).
//! * ⚑ After a headers callback returns Continue, Envoy nulls its header-map pointer: in later
//!   callbacks reads of that map give BadArgument (`get_header_map_value`) or an empty list
//!   (`get_header_map_pairs`), writes give BadArgument — the Rust SDK panics on BadArgument.
//!   During `proxy_on_log` the final request/response headers are readable (not writable).
//!   `proxy_continue_stream` nulls the *request* pointers for request and response continues.
//! * ⚑ Pause from a headers callback becomes StopAllIterationAndWatermark unless
//!   `allow_on_headers_stop_iteration` is set: body/trailers are held without calling the
//!   filter until it calls `proxy_continue_stream`, then delivered in one body callback.
//!   Pause from a body callback = StopIterationAndBuffer: the next chunk is appended and the
//!   filter sees the whole buffer (`body_size` = buffered size).
//! * Bodies: `get_buffer_bytes` clamps to the buffer, a zero length writes nothing (SDK: None);
//!   `set_buffer_bytes` start 0 = drain `size` then prepend, start ≥ len = append, else
//!   BadArgument. Request/response body buffers exist only in body callbacks (or while
//!   buffering); outside them they read as empty.
//! * Header maps: names lower-cased, values raw bytes; `add` keeps pseudo-headers first;
//!   ⚑ `replace` removes all then appends (moves to the end); ⚑ `get_header_map_size` returns
//!   the byte size, not the count; `get_header_map_value` returns the first of repeated values;
//!   trailers are created on demand in the last body callback.
//! * Local replies (`proxy_send_local_response`): recorded, details' whitespace → `_`, sent
//!   after the VM call returns; the callback's result becomes StopAll(NoBuffer); the request
//!   direction ends; the reply is then encoded through this filter's response callbacks (Envoy
//!   runs local replies through the encoder chain): headers `:status`, the filter's headers,
//!   `content-length` + `content-type: text/plain` for a non-empty body.
//! * Properties: test-set per stream ([`Stream::set_property`]) or per Vm; `plugin_name`,
//!   `plugin_root_id`, `plugin_vm_id`; `request.{path,url_path,query,host,scheme,method,
//!   referer,useragent,id,headers[,name]}` derived from the request headers only while Envoy
//!   can see them (⚑ NotFound after Continue, readable in on_log); `response.code` from
//!   `:status`; missing → NotFound (1). `proxy_set_property` writes filter state
//!   `wasm.<path>` (⚑ NotFound from the root context; ⚑ the raw path with NULs is the key, so
//!   only single-segment paths read back via `proxy_get_property`).
//! * HTTP calls: ⚑ always registered on the root context (`proxy_on_http_call_response`'s
//!   first argument is the root id; the SDK routes by token). Unknown cluster, missing
//!   `:method`/`:path`/`:authority`, or a negative timeout → BadArgument; a body sets
//!   `content-length`. [`Vm::fail_http_call`] = Envoy's onHttpCallFailure (0, 0, 0 with
//!   `proxy_get_status` = (11, "reset")); ⚑ [`Vm::timeout_http_call`] = a 504 "upstream request
//!   timeout" *response* (timeouts are not failures in Envoy). Tokens advance by 4.
//! * Metrics: ids advance by 4 with the type in the low bits; stats are per Host by name
//!   (Envoy shows them as `wasmcustom.<name>`); ⚑ counter increment ≤ 0 → BadArgument;
//!   gauges add/sub; record sets a gauge, adds to a counter, appends to a histogram;
//!   `get_metric` on a histogram → BadArgument.
//! * Shared data: CAS starts at 1; cas 0 = unconditional; mismatch → CasMismatch (8); ⚑ a CAS
//!   for a missing key is ignored. Shared queues keyed by (vm_id, name), tokens from 1;
//!   dequeue on an empty queue → Empty (7); `proxy_on_queue_ready` is delivered by
//!   [`Vm::dispatch_queue_ready`].
//! * WASI: wasmtime-wasi preview1 with no preopens, env or inherited stdio, with Envoy's own
//!   versions of `fd_write` (stdout → Info log line, stderr → Error, trailing newline dropped),
//!   `fd_read` (ENOSYS), `clock_time_get` (realtime/monotonic from the host clock, others
//!   ENOTSUP) and `random_get` (deterministic here; Envoy uses real randomness).
//! * Every import links: Envoy's full `env.proxy_*` set; anything else returns Unimplemented
//!   (12) and is recorded ([`Vm::unimplemented_calls`]); [`Host::non_envoy_imports`] lists
//!   imports Envoy would refuse to load.
//!
//! # Not implemented
//! gRPC calls/streams (Unimplemented), foreign functions other than `clear_route_cache`
//! (NotFound), TCP/network filter callbacks, metadata callbacks, CEL expressions and most of
//! Envoy's attribute set (tests set what they need), `proxy_on_done` returning false for
//! streams (ignored, as Envoy's HTTP filter does), memory limits, real timers (call
//! [`Vm::tick`]), local-reply rewriting (local_reply_config), gRPC local replies, and
//! replacing a response already started when a local reply is sent from a response callback
//! (recorded only).

mod abi;
pub mod cargo;
mod headers;
pub mod score_guest;
mod state;
mod vm;

pub use headers::{deserialize_pairs, serialize_pairs, HeaderMap, IntoHeaders};
pub use state::{
    status, Clock, Direction, Flow, HttpCall, LocalReply, LogLevel, LogLine, MetricKind,
    StreamState,
};
pub use vm::{Action, Host, HostOptions, Stream, Vm};
