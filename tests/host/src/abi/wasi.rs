//! The WASI calls Envoy implements itself instead of the WASI defaults: `fd_write` (stdout and
//! stderr become log lines), `fd_read`, `clock_time_get` and `random_get`.

use super::memory::{read, write, write_u32, write_u64};
use super::{C, R};
use crate::state::{LogLevel, VmState};
use anyhow::Result;
use wasmtime::Linker;

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
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
