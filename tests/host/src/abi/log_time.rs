//! Logging (`proxy_log`, `proxy_get_log_level`), the clock and the tick period.

use super::memory::{out_u32, out_u64, read};
use super::{C, E, R};
use crate::state::{status::*, LogLevel, VmState};
use anyhow::Result;
use wasmtime::Linker;

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
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
        out_u32(&mut c, out, lvl)
    })?;
    l.func_wrap(
        E,
        "proxy_get_current_time_nanoseconds",
        |mut c: C, out: i32| -> R {
            let t = c.data().clock.wall_ns();
            out_u64(&mut c, out, t)
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
    Ok(())
}
