//! Compiling and linking the module (once per process per file), `Host` construction, and
//! instantiating a store for a new `Vm`.

use super::{Host, HostOptions, Vm};
use crate::abi;
use crate::state::*;
use anyhow::{bail, Context as _, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use wasmtime::{Config, Engine, Instance, InstancePre, Module, OptLevel, Store};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

pub(super) struct Compiled {
    pub(super) pre: InstancePre<VmState>,
    pub(super) imports: Vec<String>,
    pub(super) exports: Vec<String>,
    pub(super) non_envoy_imports: Vec<String>,
}

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        config.cranelift_opt_level(OptLevel::Speed);
        Engine::new(&config).expect("wasmtime engine")
    })
}

/// Compiles (once per process per path + mtime + size) and links a module.
fn compiled(path: &Path) -> Result<Arc<Compiled>> {
    type Key = (PathBuf, Option<std::time::SystemTime>, u64);
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Compiled>>>> = OnceLock::new();
    let meta =
        std::fs::metadata(path).with_context(|| format!("wasm module {}", path.display()))?;
    let key = (path.canonicalize()?, meta.modified().ok(), meta.len());
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(c) = cache.get(&key) {
        return Ok(c.clone());
    }
    let module = Module::from_file(engine(), path)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("compiling {}", path.display()))?;
    let linker = abi::linker(engine(), &module)?;
    let pre = linker.instantiate_pre(&module)?;
    let imports: Vec<String> = module
        .imports()
        .map(|i| format!("{}.{}", i.module(), i.name()))
        .collect();
    let non_envoy_imports = module
        .imports()
        .filter(|i| !abi::envoy_provides(i.module(), i.name()))
        .map(|i| format!("{}.{}", i.module(), i.name()))
        .collect();
    let exports = module.exports().map(|e| e.name().to_string()).collect();
    let c = Arc::new(Compiled {
        pre,
        imports,
        exports,
        non_envoy_imports,
    });
    cache.insert(key, c.clone());
    Ok(c)
}

struct WasiWall(Arc<Clock>);
impl HostWallClock for WasiWall {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.wall_ns())
    }
}
struct WasiMono(Arc<Clock>);
impl HostMonotonicClock for WasiMono {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        self.0.mono_ns()
    }
}

impl Host {
    pub fn new(wasm_path: impl AsRef<Path>) -> Result<Host> {
        Self::with_options(wasm_path, HostOptions::default())
    }

    pub fn with_options(wasm_path: impl AsRef<Path>, o: HostOptions) -> Result<Host> {
        let compiled = compiled(wasm_path.as_ref())?;
        let shared = Shared {
            clusters: o.clusters.iter().cloned().collect(),
            ..Default::default()
        };
        Ok(Host {
            compiled,
            shared: Arc::new(Mutex::new(shared)),
            clock: Arc::new(Clock::new(o.start_time_ns)),
            opts: Arc::new(o),
        })
    }

    /// A new instance: `_initialize`/`_start`, root context created, `proxy_on_vm_start` run
    /// (Err if it returns false, as Envoy fails the VM). Call [`Vm::configure`] next.
    pub fn vm(&self, vm_config: &[u8]) -> Result<Vm> {
        Vm::new(self.clone(), vm_config, &[])
    }

    /// `vm` + `configure`, with the plugin configuration also readable during
    /// `proxy_on_vm_start` (as in Envoy). Err if either callback returns false.
    pub fn start(&self, vm_config: &[u8], plugin_config: &[u8]) -> Result<Vm> {
        let mut vm = Vm::new(self.clone(), vm_config, plugin_config)?;
        if !vm.configure(plugin_config)? {
            bail!(
                "proxy_on_configure returned false; logs: {:?}",
                vm.log_messages()
            );
        }
        Ok(vm)
    }

    /// The same module, process state (shared data, stats, clusters) and clock, for a plugin
    /// with another `root_id`: Envoy's singleton service VM (`envoy.bootstrap.wasm`) beside the
    /// filter's worker VMs, sharing data because they share the `vm_id`.
    pub fn with_root_id(&self, root_id: &str) -> Host {
        let mut opts = (*self.opts).clone();
        opts.root_id = root_id.to_string();
        Host { opts: Arc::new(opts), ..self.clone() }
    }

    /// Makes `name` a known cluster for `proxy_http_call`.
    pub fn add_cluster(&self, name: &str) {
        self.shared
            .lock()
            .unwrap()
            .clusters
            .insert(name.to_string());
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Moves the wall and monotonic clocks forward.
    pub fn advance(&self, d: Duration) {
        self.clock.advance(d)
    }
}

/// A new store for a Vm — WASI preview1 on the Host's clock with deterministic randomness, and
/// the Vm's state — with the module instantiated and the guest's memory and allocator found.
pub(super) fn instantiate(host: &Host, vm_config: &[u8]) -> Result<(Store<VmState>, Instance)> {
    let wasi = WasiCtxBuilder::new()
        .wall_clock(WasiWall(host.clock.clone()))
        .monotonic_clock(WasiMono(host.clock.clone()))
        .secure_random(wasmtime_wasi::Deterministic::new(vec![
            7, 42, 99, 1, 250, 13, 77, 5,
        ]))
        .insecure_random_seed(0x5eed)
        .build_p1();
    let state = VmState {
        wasi,
        shared: host.shared.clone(),
        clock: host.clock.clone(),
        opts: host.opts.clone(),
        memory: None,
        alloc: None,
        alloc_calls: 0,
        alloc_bytes: 0,
        vm_config: vm_config.to_vec(),
        plugin_config: None,
        root_id: 1,
        current: 0,
        effective: 0,
        streams: HashMap::new(),
        logs: Vec::new(),
        metric_ids: HashMap::new(),
        next_metric_id: [0, 1, 2],
        tick_period_ms: 0,
        http_calls: BTreeMap::new(),
        next_http_token: 0,
        call_response: None,
        status: (0, Vec::new()),
        properties: HashMap::new(),
        after: Vec::new(),
        queue_ready: Arc::new(Mutex::new(Vec::new())),
        access_log_phase: false,
        done_calls: 0,
        unimplemented_calls: Vec::new(),
    };
    let mut store = Store::new(engine(), state);
    let instance = host
        .compiled
        .pre
        .instantiate(&mut store)
        .map_err(anyhow::Error::from)
        .context("instantiating module")?;
    let memory = instance.get_memory(&mut store, "memory");
    let alloc = ["proxy_on_memory_allocate", "malloc"]
        .iter()
        .find_map(|n| instance.get_typed_func::<i32, i32>(&mut store, n).ok());
    store.data_mut().memory = memory;
    store.data_mut().alloc = alloc;
    Ok((store, instance))
}
