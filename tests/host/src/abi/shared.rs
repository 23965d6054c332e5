//! Shared data (CAS) and shared queues, kept per Host as Envoy keeps them per process.

use super::memory::{copy_out, out_u32, read};
use super::{C, E, R};
use crate::state::{status::*, Queue, VmState};
use anyhow::Result;
use std::sync::Arc;
use wasmtime::Linker;

pub(super) fn define(l: &mut Linker<VmState>) -> Result<()> {
    l.func_wrap(
        E,
        "proxy_get_shared_data",
        |mut c: C, kp: i32, ks: i32, pp: i32, sp: i32, cas_ptr: i32| -> R {
            let key = mem!(read(&c, kp, ks));
            let entry = c
                .data()
                .shared
                .lock()
                .unwrap()
                .shared_data
                .get(&key)
                .cloned();
            let Some((value, cas)) = entry else {
                return Ok(NOT_FOUND);
            };
            let r = copy_out(&mut c, &value, pp, sp)?;
            if r != OK {
                return Ok(r);
            }
            out_u32(&mut c, cas_ptr, cas)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_set_shared_data",
        |c: C, kp: i32, ks: i32, vp: i32, vs: i32, cas: i32| -> R {
            let key = mem!(read(&c, kp, ks));
            let value = mem!(read(&c, vp, vs));
            let mut sh = c.data().shared.lock().unwrap();
            let cas = cas as u32;
            // cpp-host SharedData::set: cas 0 = unconditional; a cas on a missing key is ignored.
            if let Some((_, cur)) = sh.shared_data.get(&key) {
                if cas != 0 && cas != *cur {
                    return Ok(CAS_MISMATCH);
                }
            }
            let next = sh.next_cas();
            sh.shared_data.insert(key, (value, next));
            Ok(OK)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_register_shared_queue",
        |mut c: C, np: i32, ns: i32, out: i32| -> R {
            let name = String::from_utf8_lossy(&mem!(read(&c, np, ns))).into_owned();
            let vm_id = c.data().opts.vm_id.clone();
            let owner = Arc::downgrade(&c.data().queue_ready);
            let token = {
                let mut sh = c.data().shared.lock().unwrap();
                let existing = sh
                    .queues
                    .iter()
                    .find(|(_, q)| q.vm_id == vm_id && q.name == name)
                    .map(|(t, _)| *t);
                match existing {
                    Some(t) => {
                        sh.queues.get_mut(&t).unwrap().owner = owner;
                        t
                    }
                    None => {
                        sh.next_queue_token += 1;
                        let t = sh.next_queue_token;
                        sh.queues.insert(
                            t,
                            Queue {
                                vm_id,
                                name,
                                items: Default::default(),
                                owner,
                            },
                        );
                        t
                    }
                }
            };
            out_u32(&mut c, out, token)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_resolve_shared_queue",
        |mut c: C, vp: i32, vs: i32, np: i32, ns: i32, out: i32| -> R {
            let vm_id = String::from_utf8_lossy(&mem!(read(&c, vp, vs))).into_owned();
            let name = String::from_utf8_lossy(&mem!(read(&c, np, ns))).into_owned();
            let t = c
                .data()
                .shared
                .lock()
                .unwrap()
                .queues
                .iter()
                .find(|(_, q)| q.vm_id == vm_id && q.name == name)
                .map(|(t, _)| *t);
            let Some(t) = t else { return Ok(NOT_FOUND) };
            out_u32(&mut c, out, t)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_dequeue_shared_queue",
        |mut c: C, token: i32, pp: i32, sp: i32| -> R {
            let item = {
                let mut sh = c.data().shared.lock().unwrap();
                let Some(q) = sh.queues.get_mut(&(token as u32)) else {
                    return Ok(NOT_FOUND);
                };
                match q.items.pop_front() {
                    Some(v) => v,
                    None => return Ok(EMPTY),
                }
            };
            copy_out(&mut c, &item, pp, sp)
        },
    )?;
    l.func_wrap(
        E,
        "proxy_enqueue_shared_queue",
        |c: C, token: i32, vp: i32, vs: i32| -> R {
            let value = mem!(read(&c, vp, vs));
            let mut sh = c.data().shared.lock().unwrap();
            let Some(q) = sh.queues.get_mut(&(token as u32)) else {
                return Ok(NOT_FOUND);
            };
            q.items.push_back(value);
            // Envoy posts onQueueReady to the registering VM's thread; here it is recorded and
            // delivered by `Vm::dispatch_queue_ready`.
            if let Some(owner) = q.owner.upgrade() {
                owner.lock().unwrap().push(token as u32);
            }
            Ok(OK)
        },
    )?;
    Ok(())
}
