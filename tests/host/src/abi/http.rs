//! HTTP calls (`proxy_http_call`; the response is delivered by `Vm::respond_http_call` and
//! friends), and the gRPC calls, which are not implemented.

use super::memory::{out_u32, read, write_u32};
use super::{C, E, R};
use crate::headers::{deserialize_pairs, HeaderMap};
use crate::state::{status::*, HttpCall, VmState};
use anyhow::Result;
use wasmtime::Linker;

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
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
            out_u32(&mut c, token_ptr, token)
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
    Ok(())
}
