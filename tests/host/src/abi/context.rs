//! The effective context, `proxy_done`, `proxy_get_status` and `proxy_get_configuration`.

use super::memory::{copy_out, write_u32};
use super::{C, E, R};
use crate::state::{status::*, VmState};
use anyhow::Result;
use wasmtime::Linker;

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
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
    Ok(())
}
