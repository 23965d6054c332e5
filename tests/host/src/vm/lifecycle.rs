//! The VM and its root context: creating it (`_initialize`, `proxy_on_context_create`,
//! `proxy_on_vm_start`), `proxy_on_configure`, new streams, and calling guest exports (a trap
//! poisons the Vm).

use super::{compile, Host, Stream, Vm, VM_SERIAL};
use crate::state::*;
use anyhow::{anyhow, bail, Context as _, Result};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use wasmtime::{ValType, WasmParams, WasmResults};

impl Vm {
    pub(super) fn new(host: Host, vm_config: &[u8], plugin_config: &[u8]) -> Result<Vm> {
        let (store, instance) = compile::instantiate(&host, vm_config)?;
        let mut vm = Vm {
            host,
            store,
            instance,
            serial: VM_SERIAL.fetch_add(1, Ordering::Relaxed),
            next_context_id: 2,
            poisoned: None,
        };
        // WASI reactor (`_initialize`, what the SDK's `main!` exports), else command (`_start`).
        if vm.invoke::<(), ()>("_initialize", 0, ())?.is_none() {
            vm.invoke::<(), ()>("_start", 0, ())?;
        }
        let root = vm.root_context_id();
        vm.store.data_mut().plugin_config = Some(plugin_config.to_vec());
        vm.invoke::<(i32, i32), ()>("proxy_on_context_create", root, (root as i32, 0))?;
        let started = vm.invoke::<(i32, i32), i32>(
            "proxy_on_vm_start",
            root,
            (root as i32, vm_config.len() as i32),
        );
        vm.store.data_mut().plugin_config = None;
        if started?.unwrap_or(1) == 0 {
            bail!(
                "proxy_on_vm_start returned false; logs: {:?}",
                vm.log_messages()
            );
        }
        vm.run_after()?;
        Ok(vm)
    }

    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Envoy allocates the root context first: id 1; streams get 2, 3, ...
    pub fn root_context_id(&self) -> u32 {
        self.store.data().root_id
    }

    /// `proxy_on_configure(root, size)` with the plugin configuration readable through
    /// `proxy_get_buffer_bytes(PluginConfiguration)` during the call.
    pub fn configure(&mut self, plugin_config: &[u8]) -> Result<bool> {
        let root = self.root_context_id();
        self.store.data_mut().plugin_config = Some(plugin_config.to_vec());
        let r = self.invoke::<(i32, i32), i32>(
            "proxy_on_configure",
            root,
            (root as i32, plugin_config.len() as i32),
        );
        self.store.data_mut().plugin_config = None;
        let ok = r?.unwrap_or(1) != 0;
        self.run_after()?;
        Ok(ok)
    }

    /// A new stream with the next context id.
    pub fn stream(&mut self) -> Stream {
        let id = self.next_context_id;
        self.next_context_id += 1;
        Stream {
            id,
            vm: self.serial,
            state: Arc::new(Mutex::new(StreamState {
                id,
                ..Default::default()
            })),
        }
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    // ---- guest calls ---------------------------------------------------------------------

    /// Calls export `name` (Ok(None) if absent) with `ctx` as the current context. A trap
    /// poisons the Vm (Envoy marks the VM failed; FAIL_RELOAD would make a new one).
    pub(super) fn invoke<P: WasmParams, Rt: WasmResults>(
        &mut self,
        name: &str,
        ctx: u32,
        params: P,
    ) -> Result<Option<Rt>> {
        if let Some(p) = &self.poisoned {
            bail!("vm is poisoned by an earlier trap: {p}");
        }
        let Some(func) = self.instance.get_func(&mut self.store, name) else {
            return Ok(None);
        };
        let func = func
            .typed::<P, Rt>(&self.store)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("export {name} has an unexpected signature"))?;
        let saved = (self.store.data().current, self.store.data().effective);
        self.store.data_mut().current = ctx;
        self.store.data_mut().effective = 0;
        let r = func.call(&mut self.store, params);
        let d = self.store.data_mut();
        (d.current, d.effective) = saved;
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                let critical: Vec<String> = self
                    .store
                    .data()
                    .logs
                    .iter()
                    .rev()
                    .filter(|l| l.level == LogLevel::Critical)
                    .take(1)
                    .map(|l| l.message.clone())
                    .collect();
                let msg = format!(
                    "{name}(ctx {ctx}) trapped: {e:#}{}",
                    critical
                        .first()
                        .map(|c| format!("\nlast critical log: {c}"))
                        .unwrap_or_default()
                );
                self.poisoned = Some(msg.clone());
                Err(anyhow!(msg))
            }
        }
    }

    /// Calls an exported `() -> i64` / `() -> i32` function (e.g. a guest heap counter);
    /// Ok(None) if there is no such export. Not counted as a proxy-wasm callback.
    pub fn call_u64_export(&mut self, name: &str) -> Result<Option<u64>> {
        let Some(f) = self.instance.get_func(&mut self.store, name) else {
            return Ok(None);
        };
        let ty = f.ty(&self.store);
        let results: Vec<ValType> = ty.results().collect();
        let root = self.root_context_id();
        match results.as_slice() {
            [ValType::I64] => Ok(self.invoke::<(), i64>(name, root, ())?.map(|v| v as u64)),
            [ValType::I32] => Ok(self
                .invoke::<(), i32>(name, root, ())?
                .map(|v| v as u32 as u64)),
            _ => bail!("export {name} is {ty:?}, not () -> i64/i32"),
        }
    }
}
