//! Buffers: request/response bodies, the HTTP call response body, the VM and plugin
//! configuration (`proxy_get_buffer_bytes`, `proxy_get_buffer_status`, `proxy_set_buffer_bytes`).

use super::memory::{copy_out, read, write_u32};
use super::{C, E, R};
use crate::state::{status::*, VmState};
use anyhow::Result;
use wasmtime::Linker;

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

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
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
    Ok(())
}
