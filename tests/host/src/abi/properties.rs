//! Properties (`proxy_get_property`, `proxy_set_property`): test-set values, the few derived
//! from the live header maps, and filter state.

use super::memory::{copy_out, read};
use super::{C, E, R};
use crate::state::{status::*, VmState};
use anyhow::Result;
use wasmtime::Linker;

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

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
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
    Ok(())
}
