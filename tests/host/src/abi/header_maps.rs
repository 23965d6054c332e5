//! Header maps: what the filter can read and write of the request/response headers and
//! trailers and the HTTP call response, as Envoy exposes them (`proxy_*_header_map_*`).

use super::memory::{copy_out, read, write_u32};
use super::{C, E, R};
use crate::headers::{deserialize_pairs, HeaderMap};
use crate::state::{status::*, StreamState, VmState};
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
    Ok(())
}
