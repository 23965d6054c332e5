//! Metrics: counters, gauges and histograms, by name in the Host's store.

use super::memory::{out_u32, out_u64, read};
use super::{C, E, R};
use crate::state::{status::*, MetricKind, VmState};
use anyhow::Result;
use wasmtime::Linker;

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
    l.func_wrap(
        E,
        "proxy_define_metric",
        |mut c: C, ty: i32, np: i32, ns: i32, out: i32| -> R {
            let kind = match ty {
                0 => MetricKind::Counter,
                1 => MetricKind::Gauge,
                2 => MetricKind::Histogram,
                _ => return Ok(BAD_ARGUMENT),
            };
            let name = String::from_utf8_lossy(&mem!(read(&c, np, ns))).into_owned();
            let s = c.data_mut();
            // Envoy: ids advance by 4 per type, low 2 bits = type; the stat itself is looked up by
            // name in the process-wide store (defining twice gives a new id for the same stat).
            s.next_metric_id[ty as usize] += 4;
            let id = s.next_metric_id[ty as usize];
            s.metric_ids.insert(id, (kind, name.clone()));
            s.shared
                .lock()
                .unwrap()
                .metrics
                .entry((name, kind))
                .or_default();
            out_u32(&mut c, out, id)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_increment_metric",
        |c: C, id: i32, offset: i64| -> R {
            let Some((kind, name)) = c.data().metric_ids.get(&(id as u32)).cloned() else {
                return Ok(match id & 3 {
                    0 | 1 => NOT_FOUND,
                    _ => BAD_ARGUMENT,
                });
            };
            let mut sh = c.data().shared.lock().unwrap();
            let m = sh.metrics.entry((name, kind)).or_default();
            match kind {
                // Envoy: a counter increment must be > 0 (0 or negative → BadArgument).
                MetricKind::Counter if offset > 0 => m.value = m.value.wrapping_add(offset as u64),
                MetricKind::Counter => return Ok(BAD_ARGUMENT),
                MetricKind::Gauge if offset > 0 => m.value = m.value.wrapping_add(offset as u64),
                MetricKind::Gauge => m.value = m.value.wrapping_sub(offset.unsigned_abs()),
                MetricKind::Histogram => return Ok(BAD_ARGUMENT),
            }
            Ok(OK)
        },
    )?;
    l.func_wrap(E, "proxy_record_metric", |c: C, id: i32, value: i64| -> R {
        let Some((kind, name)) = c.data().metric_ids.get(&(id as u32)).cloned() else {
            return Ok(NOT_FOUND);
        };
        let mut sh = c.data().shared.lock().unwrap();
        let m = sh.metrics.entry((name, kind)).or_default();
        match kind {
            MetricKind::Counter => m.value = m.value.wrapping_add(value as u64),
            MetricKind::Gauge => m.value = value as u64,
            MetricKind::Histogram => m.recorded.push(value as u64),
        }
        Ok(OK)
    })?;
    l.func_wrap(E, "proxy_get_metric", |mut c: C, id: i32, out: i32| -> R {
        let Some((kind, name)) = c.data().metric_ids.get(&(id as u32)).cloned() else {
            return Ok(match id & 3 {
                0 | 1 => NOT_FOUND,
                _ => BAD_ARGUMENT,
            });
        };
        if kind == MetricKind::Histogram {
            return Ok(BAD_ARGUMENT);
        }
        let v = c
            .data()
            .shared
            .lock()
            .unwrap()
            .metrics
            .get(&(name, kind))
            .map(|m| m.value)
            .unwrap_or(0);
        out_u64(&mut c, out, v)
    })?;
    Ok(())
}
