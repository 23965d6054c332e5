//! The host side of the proxy-wasm ABI 0.2.1 (`env.proxy_*`), with Envoy's semantics
//! (proxy-wasm-cpp-host `src/exports.cc` + Envoy `source/extensions/common/wasm/context.cc`),
//! and the WASI functions Envoy overrides (stdout/stderr → logs, clocks from the host clock).
//!
//! Every function takes the guest's i32 "Words" (wasm32) and returns a `WasmResult` code; a trap
//! in the guest allocator called from here propagates as a trap.

use super::headers::{deserialize_pairs, HeaderMap};
use super::state::{
    status::*, After, HttpCall, LocalReply, LogLevel, MetricKind, StreamState, VmState,
};
use anyhow::Result;
use std::collections::HashSet;
use std::sync::Arc;
use wasmtime::{Caller, ExternType, Linker, Module, Val, ValType};

type C<'a> = Caller<'a, VmState>;
type R = wasmtime::Result<i32>;

// ---- guest memory helpers ------------------------------------------------------------------

fn read(c: &C, ptr: i32, len: i32) -> Option<Vec<u8>> {
    let m = c.data().memory?;
    let data = m.data(c);
    let (p, l) = (ptr as u32 as usize, len as u32 as usize);
    data.get(p..p.checked_add(l)?).map(|s| s.to_vec())
}

fn write(c: &mut C, ptr: i32, bytes: &[u8]) -> bool {
    let Some(m) = c.data().memory else {
        return false;
    };
    let p = ptr as u32 as usize;
    match m.data_mut(c).get_mut(p..p + bytes.len()) {
        Some(dst) => {
            dst.copy_from_slice(bytes);
            true
        }
        None => false,
    }
}

fn write_u32(c: &mut C, ptr: i32, v: u32) -> bool {
    write(c, ptr, &v.to_le_bytes())
}

fn write_u64(c: &mut C, ptr: i32, v: u64) -> bool {
    write(c, ptr, &v.to_le_bytes())
}

/// cpp-host `copyToPointerSize`: empty → writes (0, 0) without allocating; otherwise calls the
/// guest's exported allocator (counted), copies, and writes (ptr, len).
fn copy_out(c: &mut C, bytes: &[u8], ptr_ptr: i32, size_ptr: i32) -> R {
    let mut ptr = 0u32;
    if !bytes.is_empty() {
        let Some(alloc) = c.data().alloc.clone() else {
            return Ok(INVALID_MEMORY_ACCESS);
        };
        c.data_mut().alloc_calls += 1;
        c.data_mut().alloc_bytes += bytes.len() as u64;
        ptr = alloc.call(&mut *c, bytes.len() as i32)? as u32;
        if ptr == 0 || !write(c, ptr as i32, bytes) {
            return Ok(INVALID_MEMORY_ACCESS);
        }
    }
    if !write_u32(c, ptr_ptr, ptr) || !write_u32(c, size_ptr, bytes.len() as u32) {
        return Ok(INVALID_MEMORY_ACCESS);
    }
    Ok(OK)
}

macro_rules! mem {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return Ok(INVALID_MEMORY_ACCESS),
        }
    };
}

macro_rules! st {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return Ok(code),
        }
    };
}

// ---- header maps ---------------------------------------------------------------------------

const MAP_MAX: i32 = 7;

/// Envoy `getConstMap`: what reads see. `Ok(None)` is Envoy's nullptr (pairs → empty list,
/// single value → BadArgument).
fn const_map(s: &VmState, ty: i32) -> Result<Option<HeaderMap>, i32> {
    if !(0..=MAP_MAX).contains(&ty) {
        return Err(BAD_ARGUMENT);
    }
    match ty {
        6 => return Ok(s.call_response.as_ref().map(|r| r.headers.clone())),
        7 => return Ok(s.call_response.as_ref().and_then(|r| r.trailers.clone())),
        4 | 5 => return Ok(None), // gRPC metadata: not implemented, always absent
        _ => {}
    }
    let Some(stream) = s.stream() else {
        return Ok(None);
    };
    let st = stream.lock().unwrap();
    let alp = s.access_log_phase;
    Ok(match ty {
        0 if alp => st.request.headers.clone(),
        0 => st
            .request
            .headers
            .clone()
            .filter(|_| st.request.headers_live),
        1 if alp => None,
        1 => st
            .request
            .trailers
            .clone()
            .filter(|_| st.request.trailers_live),
        2 if alp => st.response.headers.clone(),
        2 => st
            .response
            .headers
            .clone()
            .filter(|_| st.response.headers_live),
        3 if alp => st.response.trailers.clone(),
        3 => st
            .response
            .trailers
            .clone()
            .filter(|_| st.response.trailers_live),
        _ => unreachable!(),
    })
}

/// Envoy `getMap`: the mutable map, or BadArgument. Trailers are created on demand in the last
/// body callback (Envoy's `addDecodedTrailers`/`addEncodedTrailers`).
fn with_map<T>(s: &VmState, ty: i32, f: impl FnOnce(&mut HeaderMap) -> T) -> Result<T, i32> {
    if !(0..=MAP_MAX).contains(&ty) {
        return Err(BAD_ARGUMENT);
    }
    let Some(stream) = s.stream() else {
        return Err(BAD_ARGUMENT);
    };
    let mut guard = stream.lock().unwrap();
    let st: &mut StreamState = &mut guard;
    let eos = st.eos;
    let (dir, trailers) = match ty {
        0 => (&mut st.request, false),
        1 => (&mut st.request, true),
        2 => (&mut st.response, false),
        3 => (&mut st.response, true),
        _ => return Err(BAD_ARGUMENT),
    };
    if trailers {
        if !dir.trailers_live && dir.body_live && eos && dir.trailers.is_none() {
            dir.trailers = Some(HeaderMap::new());
            dir.trailers_live = true;
        }
        match dir.trailers.as_mut() {
            Some(m) if dir.trailers_live => Ok(f(m)),
            _ => Err(BAD_ARGUMENT),
        }
    } else {
        match dir.headers.as_mut() {
            Some(m) if dir.headers_live => Ok(f(m)),
            _ => Err(BAD_ARGUMENT),
        }
    }
}

// ---- buffers -------------------------------------------------------------------------------

/// Envoy `getBuffer`: `Ok(None)` is nullptr (NotFound); a "buffer with no instance" reads as
/// empty.
fn get_buffer(s: &VmState, ty: i32) -> Result<Option<Vec<u8>>, i32> {
    Ok(match ty {
        0 | 1 => {
            let Some(stream) = s.stream() else {
                return Ok(Some(Vec::new()));
            };
            let st = stream.lock().unwrap();
            let d = if ty == 0 { &st.request } else { &st.response };
            Some(if d.body_live {
                d.body.clone()
            } else {
                Vec::new()
            })
        }
        2 | 3 | 5 | 8 => Some(Vec::new()),
        4 => s.call_response.as_ref().map(|r| r.body.clone()),
        6 => Some(s.vm_config.clone()),
        7 => s.plugin_config.clone(),
        _ => return Err(BAD_ARGUMENT),
    })
}

/// Envoy `Buffer::copyFrom` on a mutable body buffer: start 0 → drain `length` then prepend;
/// start ≥ size → append; anything else BadArgument. Other buffers are immutable.
fn set_buffer(s: &VmState, ty: i32, start: u32, length: u32, data: &[u8]) -> i32 {
    if !(0..=8).contains(&ty) {
        return BAD_ARGUMENT;
    }
    if ty > 1 {
        return BAD_ARGUMENT;
    }
    let Some(stream) = s.stream() else {
        return BAD_ARGUMENT;
    };
    let mut st = stream.lock().unwrap();
    let d = if ty == 0 {
        &mut st.request
    } else {
        &mut st.response
    };
    if !d.body_live {
        return BAD_ARGUMENT;
    }
    let (start, length) = (start as usize, length as usize);
    if start == 0 {
        let n = length.min(d.body.len());
        d.body.drain(..n);
        let mut nb = data.to_vec();
        nb.extend_from_slice(&d.body);
        d.body = nb;
        OK
    } else if start >= d.body.len() {
        d.body.extend_from_slice(data);
        OK
    } else {
        BAD_ARGUMENT
    }
}

// ---- properties ----------------------------------------------------------------------------

fn split_path(path: &[u8]) -> Vec<&[u8]> {
    path.split(|b| *b == 0).collect()
}

/// Envoy `getProperty`: test-provided values first (stream, then Vm level), then the few
/// values derived from the live header maps, then filter state (`wasm.<top-level name>`).
fn get_property(s: &VmState, path: &[u8]) -> Result<Vec<u8>, i32> {
    let stream = s.stream();
    if let Some(stream) = &stream {
        if let Some(v) = stream.lock().unwrap().properties.get(path) {
            return Ok(v.clone());
        }
    }
    if let Some(v) = s.properties.get(path) {
        return Ok(v.clone());
    }
    let parts = split_path(path);
    let top = parts[0];
    match top {
        b"plugin_name" if parts.len() == 1 => return Ok(s.opts.plugin_name.as_bytes().to_vec()),
        b"plugin_root_id" if parts.len() == 1 => return Ok(s.opts.root_id.as_bytes().to_vec()),
        b"plugin_vm_id" if parts.len() == 1 => return Ok(s.opts.vm_id.as_bytes().to_vec()),
        _ => {}
    }
    let Some(stream) = stream else {
        return Err(NOT_FOUND);
    };
    let st = stream.lock().unwrap();
    let alp = s.access_log_phase;
    if top == b"request" || top == b"response" {
        // Envoy's StreamActivation reads `request_headers_` (null once continued) or the
        // access-log headers.
        let dir = if top == b"request" {
            &st.request
        } else {
            &st.response
        };
        let headers = dir.headers.as_ref().filter(|_| alp || dir.headers_live);
        let sub = parts.get(1).copied();
        if top == b"response" && sub == Some(b"code") && parts.len() == 2 {
            if let Some(code) = dir
                .forwarded_headers
                .as_ref()
                .or(dir.headers.as_ref())
                .and_then(|h| h.get(":status"))
            {
                if let Some(n) = std::str::from_utf8(code)
                    .ok()
                    .and_then(|c| c.parse::<i64>().ok())
                {
                    return Ok(n.to_le_bytes().to_vec());
                }
            }
            return Err(NOT_FOUND);
        }
        let Some(h) = headers else {
            return Err(NOT_FOUND);
        };
        let path_v = h.get(":path").unwrap_or(b"");
        let (url_path, query) = match path_v.iter().position(|b| *b == b'?') {
            Some(i) => (&path_v[..i], &path_v[i + 1..]),
            None => (path_v, &b""[..]),
        };
        let v: Option<Vec<u8>> = match (top, sub, parts.len()) {
            (b"request", Some(b"path"), 2) => h.get(":path").map(<[u8]>::to_vec),
            (b"request", Some(b"url_path"), 2) => h.get(":path").map(|_| url_path.to_vec()),
            (b"request", Some(b"query"), 2) => h.get(":path").map(|_| query.to_vec()),
            (b"request", Some(b"host"), 2) => h.get(":authority").map(<[u8]>::to_vec),
            (b"request", Some(b"scheme"), 2) => h.get(":scheme").map(<[u8]>::to_vec),
            (b"request", Some(b"method"), 2) => h.get(":method").map(<[u8]>::to_vec),
            (b"request", Some(b"referer"), 2) => h.get("referer").map(<[u8]>::to_vec),
            (b"request", Some(b"useragent"), 2) => h.get("user-agent").map(<[u8]>::to_vec),
            (b"request", Some(b"id"), 2) => h.get("x-request-id").map(<[u8]>::to_vec),
            (_, Some(b"headers"), 2) => Some(h.serialize()),
            (_, Some(b"headers"), 3) => h.get(parts[2]).map(<[u8]>::to_vec),
            _ => None,
        };
        return v.ok_or(NOT_FOUND);
    }
    let mut key = b"wasm.".to_vec();
    key.extend_from_slice(top);
    match st.filter_state.get(&key) {
        // A CelState of the default (bytes) prototype cannot be indexed further.
        Some(v) if parts.len() == 1 => Ok(v.clone()),
        _ => Err(NOT_FOUND),
    }
}

// ---- linker --------------------------------------------------------------------------------

/// Imports Envoy (proxy-wasm-cpp-host) provides; anything else would make Envoy refuse to load
/// the module ("Failed to load Wasm module due to a missing import").
pub(crate) fn envoy_provides(module: &str, name: &str) -> bool {
    const ENV: &[&str] = &[
        "log",
        "get_status",
        "set_property",
        "get_property",
        "send_local_response",
        "get_shared_data",
        "set_shared_data",
        "register_shared_queue",
        "resolve_shared_queue",
        "dequeue_shared_queue",
        "enqueue_shared_queue",
        "get_header_map_value",
        "add_header_map_value",
        "replace_header_map_value",
        "remove_header_map_value",
        "get_header_map_pairs",
        "set_header_map_pairs",
        "get_header_map_size",
        "get_buffer_status",
        "get_buffer_bytes",
        "set_buffer_bytes",
        "http_call",
        "grpc_call",
        "grpc_stream",
        "grpc_close",
        "grpc_cancel",
        "grpc_send",
        "set_tick_period_milliseconds",
        "get_current_time_nanoseconds",
        "define_metric",
        "increment_metric",
        "record_metric",
        "get_metric",
        "set_effective_context",
        "done",
        "call_foreign_function",
        "get_configuration",
        "continue_request",
        "continue_response",
        "clear_route_cache",
        "continue_stream",
        "close_stream",
        "get_log_level",
    ];
    const WASI: &[&str] = &[
        "fd_write",
        "fd_read",
        "fd_seek",
        "fd_close",
        "fd_fdstat_get",
        "environ_get",
        "environ_sizes_get",
        "args_get",
        "args_sizes_get",
        "clock_time_get",
        "random_get",
        "proc_exit",
        "path_open",
        "fd_prestat_get",
        "fd_prestat_dir_name",
    ];
    match module {
        "env" => {
            name == "pthread_equal"
                || name == "emscripten_notify_memory_growth"
                || name
                    .strip_prefix("proxy_")
                    .is_some_and(|n| ENV.contains(&n))
        }
        "wasi_snapshot_preview1" | "wasi_unstable" => WASI.contains(&name),
        _ => false,
    }
}

fn stream_type_ok(t: i32) -> bool {
    (0..=3).contains(&t)
}

fn defer(c: &mut C, a: After) {
    c.data_mut().after.push(a);
}

fn continue_stream(c: &mut C, t: i32) -> i32 {
    if !stream_type_ok(t) {
        return BAD_ARGUMENT;
    }
    let ctx = c.data().ctx();
    if let Some(s) = c.data().stream() {
        s.lock().unwrap().continue_calls.push(t as u32);
    }
    match t {
        3 => return UNIMPLEMENTED, // Envoy: continueStream(Upstream) is Unimplemented
        2 => return OK,            // no network filter callbacks on an HTTP stream
        _ => {}
    }
    if c.data().streams.contains_key(&ctx) {
        defer(c, After::Continue(ctx, t as u32));
    }
    OK
}

fn close_stream(c: &mut C, t: i32) -> i32 {
    if !stream_type_ok(t) {
        return BAD_ARGUMENT;
    }
    let ctx = c.data().ctx();
    if let Some(s) = c.data().stream() {
        s.lock().unwrap().close_calls.push(t as u32);
        if t <= 1 {
            defer(c, After::Close(ctx, t as u32));
        }
    }
    OK
}

/// Builds the linker for one module: wasmtime-wasi preview1 (no preopens, no env, nothing
/// inherited), Envoy's overrides of a few WASI calls, every `env.proxy_*` call, and a stub that
/// returns Unimplemented (12) for any other function import.
pub(crate) fn linker(engine: &wasmtime::Engine, module: &Module) -> Result<Linker<VmState>> {
    let mut l: Linker<VmState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut l, |s: &mut VmState| &mut s.wasi)?;
    l.allow_shadowing(true);
    define_wasi_overrides(&mut l)?;
    define_env(&mut l)?;
    l.allow_shadowing(false);
    let mut defined: HashSet<(String, String)> = HashSet::new();
    for imp in module.imports() {
        if let ExternType::Func(ft) = imp.ty() {
            let (m, n) = (imp.module().to_string(), imp.name().to_string());
            let known =
                m == "wasi_snapshot_preview1" || (m == "env" && ENV_DEFINED.contains(&n.as_str()));
            if known || !defined.insert((m.clone(), n.clone())) {
                continue;
            }
            let label = format!("{m}.{n}");
            let defaults: Vec<Val> = ft.results().map(|t| default_val(&t)).collect();
            l.func_new(
                &m,
                &n,
                ft.clone(),
                move |mut c: C, _params: &[Val], results: &mut [Val]| {
                    c.data_mut().unimplemented_calls.push(label.clone());
                    results.clone_from_slice(&defaults);
                    Ok(())
                },
            )?;
        }
    }
    Ok(l)
}

/// What an unknown import returns: Unimplemented (12) for an i32 status, zero otherwise.
fn default_val(t: &ValType) -> Val {
    match t {
        ValType::I32 => Val::I32(UNIMPLEMENTED),
        ValType::I64 => Val::I64(0),
        ValType::F32 => Val::F32(0),
        ValType::F64 => Val::F64(0),
        _ => Val::I32(0),
    }
}

const ENV_DEFINED: &[&str] = &[
    "proxy_log",
    "proxy_get_log_level",
    "proxy_get_current_time_nanoseconds",
    "proxy_set_tick_period_milliseconds",
    "proxy_get_buffer_bytes",
    "proxy_get_buffer_status",
    "proxy_set_buffer_bytes",
    "proxy_get_header_map_pairs",
    "proxy_set_header_map_pairs",
    "proxy_get_header_map_value",
    "proxy_remove_header_map_value",
    "proxy_replace_header_map_value",
    "proxy_add_header_map_value",
    "proxy_get_header_map_size",
    "proxy_get_property",
    "proxy_set_property",
    "proxy_get_shared_data",
    "proxy_set_shared_data",
    "proxy_register_shared_queue",
    "proxy_resolve_shared_queue",
    "proxy_dequeue_shared_queue",
    "proxy_enqueue_shared_queue",
    "proxy_continue_stream",
    "proxy_close_stream",
    "proxy_continue_request",
    "proxy_continue_response",
    "proxy_clear_route_cache",
    "proxy_send_local_response",
    "proxy_http_call",
    "proxy_grpc_call",
    "proxy_grpc_stream",
    "proxy_grpc_send",
    "proxy_grpc_cancel",
    "proxy_grpc_close",
    "proxy_get_status",
    "proxy_set_effective_context",
    "proxy_call_foreign_function",
    "proxy_done",
    "proxy_define_metric",
    "proxy_get_metric",
    "proxy_record_metric",
    "proxy_increment_metric",
    "proxy_get_configuration",
];

fn define_wasi_overrides(l: &mut Linker<VmState>) -> Result<()> {
    const W: &str = "wasi_snapshot_preview1";
    // Envoy's writevImpl: fd 1 → an Info log line, fd 2 → Error, trailing newline dropped;
    // other fds EBADF.
    l.func_wrap(
        W,
        "fd_write",
        |mut c: C, fd: i32, iovs: i32, iovs_len: i32, nwritten: i32| -> R {
            let level = match fd {
                1 => LogLevel::Info,
                2 => LogLevel::Error,
                _ => return Ok(8),
            };
            let mut s = Vec::new();
            for i in 0..iovs_len.max(0) {
                let Some(iov) = read(&c, iovs.wrapping_add(i * 8), 8) else {
                    return Ok(21);
                };
                let buf = i32::from_le_bytes(iov[0..4].try_into().unwrap());
                let len = i32::from_le_bytes(iov[4..8].try_into().unwrap());
                if len != 0 {
                    let Some(b) = read(&c, buf, len) else {
                        return Ok(21);
                    };
                    s.extend_from_slice(&b);
                }
            }
            let written = s.len() as u32;
            if !s.is_empty() {
                if s.last() == Some(&b'\n') {
                    s.pop();
                }
                c.data_mut()
                    .push_log(level, String::from_utf8_lossy(&s).into_owned());
            }
            Ok(if write_u32(&mut c, nwritten, written) {
                0
            } else {
                21
            })
        },
    )?;
    // Envoy: reading is not supported (ENOSYS).
    l.func_wrap(
        W,
        "fd_read",
        |_c: C, _fd: i32, _iovs: i32, _len: i32, _nread: i32| -> R { Ok(52) },
    )?;
    // Envoy: realtime → the host's wall clock, monotonic → its monotonic clock, others ENOTSUP.
    l.func_wrap(
        W,
        "clock_time_get",
        |mut c: C, id: i32, _precision: i64, out: i32| -> R {
            let t = match id {
                0 => c.data().clock.wall_ns(),
                1 => c.data().clock.mono_ns(),
                _ => return Ok(58),
            };
            Ok(if write_u64(&mut c, out, t) { 0 } else { 21 })
        },
    )?;
    // Envoy uses RAND_bytes; here a deterministic stream so tests are reproducible.
    l.func_wrap(W, "random_get", |mut c: C, buf: i32, len: i32| -> R {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (len as u64);
        let bytes: Vec<u8> = (0..len.max(0) as usize)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Ok(if write(&mut c, buf, &bytes) { 0 } else { 21 })
    })?;
    Ok(())
}

fn define_env(l: &mut Linker<VmState>) -> Result<()> {
    const E: &str = "env";

    l.func_wrap(
        E,
        "proxy_log",
        |mut c: C, level: i32, ptr: i32, len: i32| -> R {
            let Some(level) = LogLevel::from_u32(level as u32) else {
                return Ok(BAD_ARGUMENT);
            };
            let msg = mem!(read(&c, ptr, len));
            c.data_mut()
                .push_log(level, String::from_utf8_lossy(&msg).into_owned());
            Ok(OK)
        },
    )?;
    l.func_wrap(E, "proxy_get_log_level", |mut c: C, out: i32| -> R {
        let lvl = c.data().opts.log_level as u32;
        Ok(if write_u32(&mut c, out, lvl) {
            OK
        } else {
            INVALID_MEMORY_ACCESS
        })
    })?;
    l.func_wrap(
        E,
        "proxy_get_current_time_nanoseconds",
        |mut c: C, out: i32| -> R {
            let t = c.data().clock.wall_ns();
            Ok(if write_u64(&mut c, out, t) {
                OK
            } else {
                INVALID_MEMORY_ACCESS
            })
        },
    )?;
    l.func_wrap(
        E,
        "proxy_set_tick_period_milliseconds",
        |mut c: C, period: i32| -> R {
            c.data_mut().tick_period_ms = period as u32;
            Ok(OK)
        },
    )?;

    // -- buffers
    l.func_wrap(
        E,
        "proxy_get_buffer_bytes",
        |mut c: C, ty: i32, start: i32, len: i32, pp: i32, sp: i32| -> R {
            let buf = match st!(get_buffer(c.data(), ty)) {
                Some(b) => b,
                None => return Ok(NOT_FOUND),
            };
            let (start, mut len) = (start as u32 as usize, len as u32 as usize);
            if start > buf.len() {
                // cpp-host would compute `size - start` unsigned and over-read; reject instead.
                return Ok(BAD_ARGUMENT);
            }
            if start + len > buf.len() {
                len = buf.len() - start;
            }
            if len > 0 {
                // Envoy's copyTo; a zero length writes nothing (the SDK sees a null pointer → None).
                return copy_out(&mut c, &buf[start..start + len], pp, sp);
            }
            Ok(OK)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_get_buffer_status",
        |mut c: C, ty: i32, len_ptr: i32, flags_ptr: i32| -> R {
            let buf = match st!(get_buffer(c.data(), ty)) {
                Some(b) => b,
                None => return Ok(NOT_FOUND),
            };
            if !write_u32(&mut c, len_ptr, buf.len() as u32) || !write_u32(&mut c, flags_ptr, 0) {
                return Ok(INVALID_MEMORY_ACCESS);
            }
            Ok(OK)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_set_buffer_bytes",
        |c: C, ty: i32, start: i32, len: i32, dp: i32, ds: i32| -> R {
            if !(0..=8).contains(&ty) {
                return Ok(BAD_ARGUMENT);
            }
            match get_buffer(c.data(), ty) {
                Ok(None) => return Ok(NOT_FOUND),
                Err(e) => return Ok(e),
                Ok(Some(_)) => {}
            }
            let data = mem!(read(&c, dp, ds));
            Ok(set_buffer(c.data(), ty, start as u32, len as u32, &data))
        },
    )?;

    // -- header maps
    l.func_wrap(
        E,
        "proxy_get_header_map_pairs",
        |mut c: C, ty: i32, pp: i32, sp: i32| -> R {
            let map = st!(const_map(c.data(), ty)).unwrap_or_default();
            let bytes = if map.is_empty() {
                Vec::new()
            } else {
                map.serialize()
            };
            copy_out(&mut c, &bytes, pp, sp)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_set_header_map_pairs",
        |c: C, ty: i32, ptr: i32, size: i32| -> R {
            let data = mem!(read(&c, ptr, size));
            // cpp-host's toPairs silently yields nothing on a malformed buffer.
            let pairs = deserialize_pairs(&data).unwrap_or_default();
            Ok(st!(with_map(c.data(), ty, |m| {
                m.0.clear();
                for (k, v) in pairs {
                    m.add(k, v);
                }
                OK
            })))
        },
    )?;
    l.func_wrap(
        E,
        "proxy_get_header_map_value",
        |mut c: C, ty: i32, kp: i32, ks: i32, pp: i32, sp: i32| -> R {
            let key = mem!(read(&c, kp, ks));
            let Some(map) = st!(const_map(c.data(), ty)) else {
                // Envoy: a map that is not available is BadArgument (NotFound in the access-log
                // phase for ABI 0.2).
                return Ok(if c.data().access_log_phase {
                    NOT_FOUND
                } else {
                    BAD_ARGUMENT
                });
            };
            // Envoy returns only the first value of a repeated header.
            match map.get(&key) {
                Some(v) => {
                    let v = v.to_vec();
                    copy_out(&mut c, &v, pp, sp)
                }
                None => Ok(NOT_FOUND),
            }
        },
    )?;
    l.func_wrap(
        E,
        "proxy_remove_header_map_value",
        |c: C, ty: i32, kp: i32, ks: i32| -> R {
            let key = mem!(read(&c, kp, ks));
            Ok(st!(with_map(c.data(), ty, |m| {
                m.remove(&key);
                OK
            })))
        },
    )?;
    l.func_wrap(
        E,
        "proxy_replace_header_map_value",
        |c: C, ty: i32, kp: i32, ks: i32, vp: i32, vs: i32| -> R {
            let key = mem!(read(&c, kp, ks));
            let value = mem!(read(&c, vp, vs));
            Ok(st!(with_map(c.data(), ty, |m| {
                m.replace(&key, &value);
                OK
            })))
        },
    )?;
    l.func_wrap(
        E,
        "proxy_add_header_map_value",
        |c: C, ty: i32, kp: i32, ks: i32, vp: i32, vs: i32| -> R {
            let key = mem!(read(&c, kp, ks));
            let value = mem!(read(&c, vp, vs));
            Ok(st!(with_map(c.data(), ty, |m| {
                m.add(&key, &value);
                OK
            })))
        },
    )?;
    l.func_wrap(
        E,
        "proxy_get_header_map_size",
        |mut c: C, ty: i32, out: i32| -> R {
            // Envoy quirk: this is `byteSize()` (total key+value bytes), not the entry count, and
            // it uses the mutable map (BadArgument once the headers were continued).
            let size = st!(with_map(c.data(), ty, |m| m.byte_size()));
            Ok(if write_u32(&mut c, out, size as u32) {
                OK
            } else {
                INVALID_MEMORY_ACCESS
            })
        },
    )?;

    // -- properties
    l.func_wrap(
        E,
        "proxy_get_property",
        |mut c: C, pp: i32, ps: i32, rpp: i32, rsp: i32| -> R {
            let path = mem!(read(&c, pp, ps));
            let v = st!(get_property(c.data(), &path));
            copy_out(&mut c, &v, rpp, rsp)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_set_property",
        |c: C, pp: i32, ps: i32, vp: i32, vs: i32| -> R {
            let path = mem!(read(&c, pp, ps));
            let value = mem!(read(&c, vp, vs));
            // Envoy: no stream info (root context) → NotFound. Stored as filter state under
            // `wasm.<path>` with the raw path bytes (NULs included).
            let Some(stream) = c.data().stream() else {
                return Ok(NOT_FOUND);
            };
            let mut key = b"wasm.".to_vec();
            key.extend_from_slice(&path);
            stream.lock().unwrap().filter_state.insert(key, value);
            Ok(OK)
        },
    )?;

    // -- shared data / queues
    l.func_wrap(
        E,
        "proxy_get_shared_data",
        |mut c: C, kp: i32, ks: i32, pp: i32, sp: i32, cas_ptr: i32| -> R {
            let key = mem!(read(&c, kp, ks));
            let entry = c
                .data()
                .shared
                .lock()
                .unwrap()
                .shared_data
                .get(&key)
                .cloned();
            let Some((value, cas)) = entry else {
                return Ok(NOT_FOUND);
            };
            let r = copy_out(&mut c, &value, pp, sp)?;
            if r != OK {
                return Ok(r);
            }
            Ok(if write_u32(&mut c, cas_ptr, cas) {
                OK
            } else {
                INVALID_MEMORY_ACCESS
            })
        },
    )?;
    l.func_wrap(
        E,
        "proxy_set_shared_data",
        |c: C, kp: i32, ks: i32, vp: i32, vs: i32, cas: i32| -> R {
            let key = mem!(read(&c, kp, ks));
            let value = mem!(read(&c, vp, vs));
            let mut sh = c.data().shared.lock().unwrap();
            let cas = cas as u32;
            // cpp-host SharedData::set: cas 0 = unconditional; a cas on a missing key is ignored.
            if let Some((_, cur)) = sh.shared_data.get(&key) {
                if cas != 0 && cas != *cur {
                    return Ok(CAS_MISMATCH);
                }
            }
            let next = sh.next_cas();
            sh.shared_data.insert(key, (value, next));
            Ok(OK)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_register_shared_queue",
        |mut c: C, np: i32, ns: i32, out: i32| -> R {
            let name = String::from_utf8_lossy(&mem!(read(&c, np, ns))).into_owned();
            let vm_id = c.data().opts.vm_id.clone();
            let owner = Arc::downgrade(&c.data().queue_ready);
            let token = {
                let mut sh = c.data().shared.lock().unwrap();
                let existing = sh
                    .queues
                    .iter()
                    .find(|(_, q)| q.vm_id == vm_id && q.name == name)
                    .map(|(t, _)| *t);
                match existing {
                    Some(t) => {
                        sh.queues.get_mut(&t).unwrap().owner = owner;
                        t
                    }
                    None => {
                        sh.next_queue_token += 1;
                        let t = sh.next_queue_token;
                        sh.queues.insert(
                            t,
                            super::state::Queue {
                                vm_id,
                                name,
                                items: Default::default(),
                                owner,
                            },
                        );
                        t
                    }
                }
            };
            Ok(if write_u32(&mut c, out, token) {
                OK
            } else {
                INVALID_MEMORY_ACCESS
            })
        },
    )?;
    l.func_wrap(
        E,
        "proxy_resolve_shared_queue",
        |mut c: C, vp: i32, vs: i32, np: i32, ns: i32, out: i32| -> R {
            let vm_id = String::from_utf8_lossy(&mem!(read(&c, vp, vs))).into_owned();
            let name = String::from_utf8_lossy(&mem!(read(&c, np, ns))).into_owned();
            let t = c
                .data()
                .shared
                .lock()
                .unwrap()
                .queues
                .iter()
                .find(|(_, q)| q.vm_id == vm_id && q.name == name)
                .map(|(t, _)| *t);
            let Some(t) = t else { return Ok(NOT_FOUND) };
            Ok(if write_u32(&mut c, out, t) {
                OK
            } else {
                INVALID_MEMORY_ACCESS
            })
        },
    )?;
    l.func_wrap(
        E,
        "proxy_dequeue_shared_queue",
        |mut c: C, token: i32, pp: i32, sp: i32| -> R {
            let item = {
                let mut sh = c.data().shared.lock().unwrap();
                let Some(q) = sh.queues.get_mut(&(token as u32)) else {
                    return Ok(NOT_FOUND);
                };
                match q.items.pop_front() {
                    Some(v) => v,
                    None => return Ok(EMPTY),
                }
            };
            copy_out(&mut c, &item, pp, sp)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_enqueue_shared_queue",
        |c: C, token: i32, vp: i32, vs: i32| -> R {
            let value = mem!(read(&c, vp, vs));
            let mut sh = c.data().shared.lock().unwrap();
            let Some(q) = sh.queues.get_mut(&(token as u32)) else {
                return Ok(NOT_FOUND);
            };
            q.items.push_back(value);
            // Envoy posts onQueueReady to the registering VM's thread; here it is recorded and
            // delivered by `Vm::dispatch_queue_ready`.
            if let Some(owner) = q.owner.upgrade() {
                owner.lock().unwrap().push(token as u32);
            }
            Ok(OK)
        },
    )?;

    // -- stream control
    l.func_wrap(E, "proxy_continue_stream", |mut c: C, t: i32| -> R {
        Ok(continue_stream(&mut c, t))
    })?;
    l.func_wrap(E, "proxy_close_stream", |mut c: C, t: i32| -> R {
        Ok(close_stream(&mut c, t))
    })?;
    l.func_wrap(E, "proxy_continue_request", |mut c: C| -> R {
        Ok(continue_stream(&mut c, 0))
    })?;
    l.func_wrap(E, "proxy_continue_response", |mut c: C| -> R {
        Ok(continue_stream(&mut c, 1))
    })?;
    l.func_wrap(E, "proxy_clear_route_cache", |c: C| -> R {
        if let Some(s) = c.data().stream() {
            s.lock().unwrap().route_cache_clears += 1;
        }
        Ok(OK)
    })?;
    l.func_wrap(
        E,
        "proxy_send_local_response",
        |mut c: C,
         code: i32,
         dp: i32,
         ds: i32,
         bp: i32,
         bs: i32,
         hp: i32,
         hs: i32,
         grpc: i32|
         -> R {
            let details = mem!(read(&c, dp, ds));
            let body = mem!(read(&c, bp, bs));
            let hdrs = mem!(read(&c, hp, hs));
            let headers = HeaderMap::from_pairs(deserialize_pairs(&hdrs).unwrap_or_default());
            let details: String = String::from_utf8_lossy(&details)
                .chars()
                .map(|ch| if ch.is_whitespace() { '_' } else { ch })
                .collect();
            let reply = LocalReply {
                status: code as u32,
                body,
                headers,
                details,
                grpc_status: grpc,
            };
            let ctx = c.data().ctx();
            // Envoy only acts with decoder callbacks (an HTTP stream); the reply itself is sent
            // after the VM call returns. Always Ok.
            if let Some(s) = c.data().stream() {
                let mut st = s.lock().unwrap();
                if st.local_reply.is_some() || st.pending_local_reply.is_some() {
                    st.extra_local_replies.push(reply);
                } else {
                    st.pending_local_reply = Some(reply);
                    drop(st);
                    defer(&mut c, After::LocalReply(ctx));
                }
            }
            Ok(OK)
        },
    )?;
    l.func_wrap(E, "proxy_set_effective_context", |mut c: C, id: i32| -> R {
        let id = id as u32;
        let exists = id == c.data().root_id || c.data().streams.contains_key(&id);
        if !exists {
            return Ok(BAD_ARGUMENT);
        }
        c.data_mut().effective = id;
        Ok(OK)
    })?;
    l.func_wrap(E, "proxy_done", |mut c: C| -> R {
        // Envoy's WasmBase::done: only meaningful for a root context that returned false from
        // proxy_on_done; recorded here.
        if c.data().ctx() != c.data().root_id {
            return Ok(NOT_FOUND);
        }
        c.data_mut().done_calls += 1;
        Ok(OK)
    })?;
    l.func_wrap(
        E,
        "proxy_get_status",
        |mut c: C, code_ptr: i32, pp: i32, sp: i32| -> R {
            let (code, msg) = c.data().status.clone();
            if !write_u32(&mut c, code_ptr, code) {
                return Ok(INVALID_MEMORY_ACCESS);
            }
            copy_out(&mut c, &msg, pp, sp)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_get_configuration",
        |mut c: C, pp: i32, sp: i32| -> R {
            let v = c
                .data()
                .plugin_config
                .clone()
                .unwrap_or_else(|| c.data().vm_config.clone());
            copy_out(&mut c, &v, pp, sp)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_call_foreign_function",
        |c: C, np: i32, ns: i32, ap: i32, as_: i32, _rpp: i32, _rsp: i32| -> R {
            let name = mem!(read(&c, np, ns));
            let _args = mem!(read(&c, ap, as_));
            // Of Envoy's foreign functions only clear_route_cache is modelled.
            if name == b"clear_route_cache" {
                if let Some(s) = c.data().stream() {
                    s.lock().unwrap().route_cache_clears += 1;
                }
                return Ok(OK);
            }
            Ok(NOT_FOUND)
        },
    )?;

    // -- HTTP callouts
    l.func_wrap(
        E,
        "proxy_http_call",
        |mut c: C,
         up: i32,
         us: i32,
         hp: i32,
         hs: i32,
         bp: i32,
         bs: i32,
         tp: i32,
         ts: i32,
         timeout: i32,
         token_ptr: i32|
         -> R {
            let upstream = mem!(read(&c, up, us));
            let body = mem!(read(&c, bp, bs));
            let hdrs = mem!(read(&c, hp, hs));
            let trls = mem!(read(&c, tp, ts));
            // cpp-host writes a 0 token first to validate the pointer.
            if !write_u32(&mut c, token_ptr, 0) {
                return Ok(INVALID_MEMORY_ACCESS);
            }
            if timeout < 0 {
                return Ok(BAD_ARGUMENT);
            }
            let upstream = String::from_utf8_lossy(&upstream).into_owned();
            // Envoy: `getThreadLocalCluster(cluster) == nullptr` → BadArgument.
            if !c.data().shared.lock().unwrap().clusters.contains(&upstream) {
                return Ok(BAD_ARGUMENT);
            }
            let mut headers = HeaderMap::from_pairs(deserialize_pairs(&hdrs).unwrap_or_default());
            // Envoy requires :path, :method and :authority (Host).
            if !headers.contains(":path")
                || !headers.contains(":method")
                || !headers.contains(":authority")
            {
                return Ok(BAD_ARGUMENT);
            }
            if !body.is_empty() {
                headers.replace("content-length", body.len().to_string());
            }
            let trailers = HeaderMap::from_pairs(deserialize_pairs(&trls).unwrap_or_default());
            let s = c.data_mut();
            // cpp-host callout ids advance by 4 (low bits = callout type, 0 for HTTP).
            s.next_http_token += 4;
            let token = s.next_http_token;
            let dispatched_from = s.ctx();
            s.http_calls.insert(
                token,
                HttpCall {
                    token,
                    upstream,
                    headers,
                    body,
                    trailers,
                    timeout_ms: timeout as u32,
                    dispatched_from,
                },
            );
            Ok(if write_u32(&mut c, token_ptr, token) {
                OK
            } else {
                INVALID_MEMORY_ACCESS
            })
        },
    )?;

    // -- gRPC: not implemented (Unimplemented), calls recorded.
    macro_rules! grpc_stub {
        ($name:literal, $($a:ident),*) => {
            l.func_wrap(E, $name, |mut c: C, $($a: i32),*| -> R {
                $(let _ = $a;)*
                c.data_mut().unimplemented_calls.push(concat!("env.", $name).to_string());
                Ok(UNIMPLEMENTED)
            })?;
        };
    }
    grpc_stub!("proxy_grpc_call", a, b, d, e, f, g, h, i, j, k, m, n);
    grpc_stub!("proxy_grpc_stream", a, b, d, e, f, g, h, i, j);
    grpc_stub!("proxy_grpc_send", a, b, d, e);
    grpc_stub!("proxy_grpc_cancel", a);
    grpc_stub!("proxy_grpc_close", a);

    // -- metrics
    l.func_wrap(
        E,
        "proxy_define_metric",
        |mut c: C, ty: i32, np: i32, ns: i32, out: i32| -> R {
            let kind = match ty {
                0 => MetricKind::Counter,
                1 => MetricKind::Gauge,
                2 => MetricKind::Histogram,
                _ => return Ok(BAD_ARGUMENT),
            };
            let name = String::from_utf8_lossy(&mem!(read(&c, np, ns))).into_owned();
            let s = c.data_mut();
            // Envoy: ids advance by 4 per type, low 2 bits = type; the stat itself is looked up by
            // name in the process-wide store (defining twice gives a new id for the same stat).
            s.next_metric_id[ty as usize] += 4;
            let id = s.next_metric_id[ty as usize];
            s.metric_ids.insert(id, (kind, name.clone()));
            s.shared
                .lock()
                .unwrap()
                .metrics
                .entry((name, kind))
                .or_default();
            Ok(if write_u32(&mut c, out, id) {
                OK
            } else {
                INVALID_MEMORY_ACCESS
            })
        },
    )?;
    l.func_wrap(
        E,
        "proxy_increment_metric",
        |c: C, id: i32, offset: i64| -> R {
            let Some((kind, name)) = c.data().metric_ids.get(&(id as u32)).cloned() else {
                return Ok(match id & 3 {
                    0 | 1 => NOT_FOUND,
                    _ => BAD_ARGUMENT,
                });
            };
            let mut sh = c.data().shared.lock().unwrap();
            let m = sh.metrics.entry((name, kind)).or_default();
            match kind {
                // Envoy: a counter increment must be > 0 (0 or negative → BadArgument).
                MetricKind::Counter if offset > 0 => m.value = m.value.wrapping_add(offset as u64),
                MetricKind::Counter => return Ok(BAD_ARGUMENT),
                MetricKind::Gauge if offset > 0 => m.value = m.value.wrapping_add(offset as u64),
                MetricKind::Gauge => m.value = m.value.wrapping_sub(offset.unsigned_abs()),
                MetricKind::Histogram => return Ok(BAD_ARGUMENT),
            }
            Ok(OK)
        },
    )?;
    l.func_wrap(E, "proxy_record_metric", |c: C, id: i32, value: i64| -> R {
        let Some((kind, name)) = c.data().metric_ids.get(&(id as u32)).cloned() else {
            return Ok(NOT_FOUND);
        };
        let mut sh = c.data().shared.lock().unwrap();
        let m = sh.metrics.entry((name, kind)).or_default();
        match kind {
            MetricKind::Counter => m.value = m.value.wrapping_add(value as u64),
            MetricKind::Gauge => m.value = value as u64,
            MetricKind::Histogram => m.recorded.push(value as u64),
        }
        Ok(OK)
    })?;
    l.func_wrap(E, "proxy_get_metric", |mut c: C, id: i32, out: i32| -> R {
        let Some((kind, name)) = c.data().metric_ids.get(&(id as u32)).cloned() else {
            return Ok(match id & 3 {
                0 | 1 => NOT_FOUND,
                _ => BAD_ARGUMENT,
            });
        };
        if kind == MetricKind::Histogram {
            return Ok(BAD_ARGUMENT);
        }
        let v = c
            .data()
            .shared
            .lock()
            .unwrap()
            .metrics
            .get(&(name, kind))
            .map(|m| m.value)
            .unwrap_or(0);
        Ok(if write_u64(&mut c, out, v) {
            OK
        } else {
            INVALID_MEMORY_ACCESS
        })
    })?;

    Ok(())
}
