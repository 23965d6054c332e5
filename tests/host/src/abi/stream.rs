//! Stream control: continue/close stream, local replies (`proxy_send_local_response`) and the
//! route cache. What Envoy defers until the VM call returns is queued as an `After`.

use super::memory::read;
use super::{C, E, R};
use crate::headers::{deserialize_pairs, HeaderMap};
use crate::state::{status::*, After, LocalReply, StreamState, VmState};
use anyhow::Result;
use wasmtime::Linker;

fn stream_type_ok(t: i32) -> bool {
    (0..=3).contains(&t)
}

fn defer(c: &mut C, a: After) {
    c.data_mut().after.push(a);
}

/// Checks a continue/close call's stream type `t` and records the call, in the list `calls`
/// picks, on the stream it was made on: that stream's context (None: no stream), or BadArgument.
fn record_call(
    c: &mut C,
    t: i32,
    calls: fn(&mut StreamState) -> &mut Vec<u32>,
) -> Result<Option<u32>, i32> {
    if !stream_type_ok(t) {
        return Err(BAD_ARGUMENT);
    }
    let ctx = c.data().ctx();
    Ok(c.data().stream().map(|s| {
        calls(&mut s.lock().unwrap()).push(t as u32);
        ctx
    }))
}

fn continue_stream(c: &mut C, t: i32) -> i32 {
    let stream = match record_call(c, t, |s| &mut s.continue_calls) {
        Ok(stream) => stream,
        Err(code) => return code,
    };
    match t {
        3 => return UNIMPLEMENTED, // Envoy: continueStream(Upstream) is Unimplemented
        2 => return OK,            // no network filter callbacks on an HTTP stream
        _ => {}
    }
    if let Some(ctx) = stream {
        defer(c, After::Continue(ctx, t as u32));
    }
    OK
}

fn close_stream(c: &mut C, t: i32) -> i32 {
    match record_call(c, t, |s| &mut s.close_calls) {
        Ok(Some(ctx)) if t <= 1 => defer(c, After::Close(ctx, t as u32)),
        Ok(_) => {}
        Err(code) => return code,
    }
    OK
}

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
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
    Ok(())
}
