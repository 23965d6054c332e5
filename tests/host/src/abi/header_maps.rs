//! Header maps: what the filter can read and write of the request/response headers and
//! trailers and the HTTP call response, as Envoy exposes them (`proxy_*_header_map_*`).

use super::memory::{copy_out, out_u32, read};
use super::{C, E, R};
use crate::headers::{deserialize_pairs, HeaderMap};
use crate::state::{status::*, Direction, StreamState, VmState};
use anyhow::Result;
use wasmtime::Linker;

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
    let mut guard = stream.lock().unwrap();
    let (d, trailers) = stream_map(&mut guard, ty).expect("a stream map: 0..=3");
    Ok(match (trailers, s.access_log_phase) {
        // In the access-log phase every map but the request trailers is readable.
        (true, true) if ty == 1 => None,
        (false, true) => d.headers.clone(),
        (true, true) => d.trailers.clone(),
        (false, false) => d.headers.clone().filter(|_| d.headers_live),
        (true, false) => d.trailers.clone().filter(|_| d.trailers_live),
    })
}

/// Stream map `ty` (0..=3): its direction, and whether it is the trailers (else the headers).
fn stream_map(st: &mut StreamState, ty: i32) -> Option<(&mut Direction, bool)> {
    match ty {
        0 => Some((&mut st.request, false)),
        1 => Some((&mut st.request, true)),
        2 => Some((&mut st.response, false)),
        3 => Some((&mut st.response, true)),
        _ => None,
    }
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
    let Some((dir, trailers)) = stream_map(st, ty) else {
        return Err(BAD_ARGUMENT);
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

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
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
    let set_value: [(&str, fn(&mut HeaderMap, &[u8], &[u8])); 2] = [
        ("proxy_replace_header_map_value", |m, k, v| m.replace(k, v)),
        ("proxy_add_header_map_value", |m, k, v| m.add(k, v)),
    ];
    for (name, set) in set_value {
        l.func_wrap(
            E,
            name,
            move |c: C, ty: i32, kp: i32, ks: i32, vp: i32, vs: i32| -> R {
                let key = mem!(read(&c, kp, ks));
                let value = mem!(read(&c, vp, vs));
                Ok(st!(with_map(c.data(), ty, |m| {
                    set(m, &key, &value);
                    OK
                })))
            },
        )?;
    }
    l.func_wrap(
        E,
        "proxy_get_header_map_size",
        |mut c: C, ty: i32, out: i32| -> R {
            // Envoy quirk: this is `byteSize()` (total key+value bytes), not the entry count, and
            // it uses the mutable map (BadArgument once the headers were continued).
            let size = st!(with_map(c.data(), ty, |m| m.byte_size()));
            out_u32(&mut c, out, size as u32)
        },
    )?;
    Ok(())
}
