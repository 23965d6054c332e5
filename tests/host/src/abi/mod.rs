//! The host side of the proxy-wasm ABI 0.2.1 (`env.proxy_*`), with Envoy's semantics
//! (proxy-wasm-cpp-host `src/exports.cc` + Envoy `source/extensions/common/wasm/context.cc`),
//! and the WASI functions Envoy overrides (stdout/stderr → logs, clocks from the host clock).
//!
//! Every function takes the guest's i32 "Words" (wasm32) and returns a `WasmResult` code; a trap
//! in the guest allocator called from here propagates as a trap.
//!
//! One file per concern, each adding its imports to the linker with `define`:
//! * `memory` — reading and writing guest memory, handing bytes to the guest's allocator;
//! * `imports` — what Envoy provides (and what this host defines);
//! * `log_time` — logging, log level, the clock, the tick period;
//! * `buffers`, `header_maps`, `properties` — what the filter reads and edits;
//! * `stream` — continue/close stream, local replies, route cache;
//! * `context` — effective context, `proxy_done`, status, configuration;
//! * `http` — HTTP calls (and the gRPC stubs);
//! * `shared` — shared data and shared queues;
//! * `metrics`;
//! * `wasi` — Envoy's overrides of a few WASI calls.

use crate::state::{status::UNIMPLEMENTED, VmState};
use anyhow::Result;
use std::collections::HashSet;
use wasmtime::{Caller, ExternType, Linker, Module, Val, ValType};

type C<'a> = Caller<'a, VmState>;
type R = wasmtime::Result<i32>;

/// The import module of every `proxy_*` function.
const E: &str = "env";

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

mod buffers;
mod context;
mod header_maps;
mod http;
mod imports;
mod log_time;
mod memory;
mod metrics;
mod properties;
mod shared;
mod stream;
mod wasi;

pub(crate) use imports::envoy_provides;

/// Builds the linker for one module: wasmtime-wasi preview1 (no preopens, no env, nothing
/// inherited), Envoy's overrides of a few WASI calls, every `env.proxy_*` call, and a stub that
/// returns Unimplemented (12) for any other function import.
pub(crate) fn linker(engine: &wasmtime::Engine, module: &Module) -> Result<Linker<VmState>> {
    let mut l: Linker<VmState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut l, |s: &mut VmState| &mut s.wasi)?;
    l.allow_shadowing(true);
    wasi::define(&mut l)?;
    define_env(&mut l)?;
    l.allow_shadowing(false);
    let mut defined: HashSet<(String, String)> = HashSet::new();
    for imp in module.imports() {
        if let ExternType::Func(ft) = imp.ty() {
            let (m, n) = (imp.module().to_string(), imp.name().to_string());
            let known = m == "wasi_snapshot_preview1"
                || (m == "env" && imports::ENV_DEFINED.contains(&n.as_str()));
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

/// Every `env.proxy_*` function this host defines (the list is `imports::ENV_DEFINED`).
fn define_env(l: &mut Linker<VmState>) -> Result<()> {
    log_time::define(l)?;
    buffers::define(l)?;
    header_maps::define(l)?;
    properties::define(l)?;
    shared::define(l)?;
    stream::define(l)?;
    context::define(l)?;
    http::define(l)?;
    metrics::define(l)?;
    Ok(())
}
