//! `Host` (compiled module + per-process stores), `Vm` (one instance + root context) and
//! `Stream` (one HTTP context), driving the guest the way Envoy's HTTP filter does.

use super::abi;
use super::headers::{HeaderMap, IntoHeaders};
use super::state::*;
use anyhow::{anyhow, bail, Context as _, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use wasmtime::{
    Config, Engine, Instance, InstancePre, Module, OptLevel, Store, ValType, WasmParams,
    WasmResults,
};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtxBuilder};

/// What a filter callback returned (proxy-wasm `Action`), or that the host, like Envoy, did not
/// call the filter at all (held data while paused, after a local reply or reset, or the export
/// is missing).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    Pause,
    /// Any other raw value (e.g. 3/4 StopAllIteration*, 2 ContinueAndEndStream / watermark).
    Other(u32),
    NotCalled,
}

impl Action {
    fn from_raw(v: i32) -> Action {
        match v {
            0 => Action::Continue,
            1 => Action::Pause,
            v => Action::Other(v as u32),
        }
    }
}

/// Options for a [`Host`]; `Default` gives Envoy's defaults.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// `vm_config.vm_id` (shared data / queues are keyed by it; Envoy's default is "").
    pub vm_id: String,
    /// The plugin's `root_id` (property `plugin_root_id`).
    pub root_id: String,
    /// The plugin's `name` (property `plugin_name`).
    pub plugin_name: String,
    /// What `proxy_get_log_level` reports (Envoy's default level is info). Every `proxy_log`
    /// call is captured regardless of level.
    pub log_level: LogLevel,
    /// Envoy's `allow_on_headers_stop_iteration` (default false: a Pause from the headers
    /// callback becomes StopAllIterationAndWatermark, so the body is held without calling the
    /// filter until it continues the stream).
    pub allow_on_headers_stop_iteration: bool,
    /// Send local replies through this filter's response callbacks, as Envoy's filter chain
    /// does (default true).
    pub encode_local_replies: bool,
    /// Cluster names `proxy_http_call` accepts; others get BadArgument ("cluster not found").
    pub clusters: Vec<String>,
    /// Initial wall clock (ns since the Unix epoch).
    pub start_time_ns: u64,
    /// Print captured log lines to stderr as they happen (default: env `PROXY_HOST_LOG` set).
    pub echo_logs: bool,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            vm_id: String::new(),
            root_id: String::new(),
            plugin_name: "test_plugin".into(),
            log_level: LogLevel::Info,
            allow_on_headers_stop_iteration: false,
            encode_local_replies: true,
            clusters: Vec::new(),
            start_time_ns: 1_700_000_000_000_000_000,
            echo_logs: std::env::var_os("PROXY_HOST_LOG").is_some(),
        }
    }
}

struct Compiled {
    pre: InstancePre<VmState>,
    imports: Vec<String>,
    exports: Vec<String>,
    non_envoy_imports: Vec<String>,
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

/// A compiled proxy-wasm module plus the state Envoy keeps per process (shared data, shared
/// queues, stats, the cluster list, the clock). Cheap to clone; every [`Vm`] made from it (a
/// "worker") shares that state.
#[derive(Clone)]
pub struct Host {
    compiled: Arc<Compiled>,
    shared: Arc<Mutex<Shared>>,
    clock: Arc<Clock>,
    opts: Arc<VmOptions>,
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
            opts: Arc::new(VmOptions {
                vm_id: o.vm_id,
                root_id: o.root_id,
                plugin_name: o.plugin_name,
                log_level: o.log_level,
                allow_on_headers_stop_iteration: o.allow_on_headers_stop_iteration,
                encode_local_replies: o.encode_local_replies,
                echo_logs: o.echo_logs,
            }),
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

    /// Counter or gauge value by the name the guest defined (Envoy shows it as
    /// `wasmcustom.<name>`; the prefix is not part of this name).
    pub fn metric(&self, name: &str) -> Option<u64> {
        let sh = self.shared.lock().unwrap();
        [MetricKind::Counter, MetricKind::Gauge]
            .iter()
            .find_map(|k| sh.metrics.get(&(name.to_string(), *k)).map(|m| m.value))
    }

    /// Every value recorded into histogram `name` (empty if none / undefined).
    pub fn histogram(&self, name: &str) -> Vec<u64> {
        self.shared
            .lock()
            .unwrap()
            .metrics
            .get(&(name.to_string(), MetricKind::Histogram))
            .map(|m| m.recorded.clone())
            .unwrap_or_default()
    }

    /// All defined metrics: name → (kind, counter/gauge value, histogram values).
    pub fn metrics(&self) -> BTreeMap<String, (MetricKind, u64, Vec<u64>)> {
        let sh = self.shared.lock().unwrap();
        sh.metrics
            .iter()
            .map(|((n, k), m)| (n.clone(), (*k, m.value, m.recorded.clone())))
            .collect()
    }

    /// Shared data value and CAS, as `proxy_get_shared_data` would return them.
    pub fn shared_data(&self, key: impl AsRef<[u8]>) -> Option<(Vec<u8>, u32)> {
        self.shared
            .lock()
            .unwrap()
            .shared_data
            .get(key.as_ref())
            .cloned()
    }

    /// Sets shared data unconditionally (new CAS), as another worker would.
    pub fn set_shared_data(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let mut sh = self.shared.lock().unwrap();
        let cas = sh.next_cas();
        sh.shared_data
            .insert(key.as_ref().to_vec(), (value.as_ref().to_vec(), cas));
    }

    /// Items currently in shared queue `name` (of this Host's vm_id).
    pub fn queue_items(&self, name: &str) -> Vec<Vec<u8>> {
        let sh = self.shared.lock().unwrap();
        sh.queues
            .values()
            .filter(|q| q.vm_id == self.opts.vm_id && q.name == name)
            .flat_map(|q| q.items.iter().cloned())
            .collect()
    }

    /// Every import of the module as `module.name`.
    pub fn imports(&self) -> &[String] {
        &self.compiled.imports
    }

    pub fn exports(&self) -> &[String] {
        &self.compiled.exports
    }

    /// Imports Envoy does not provide: Envoy would refuse to load the module if non-empty.
    pub fn non_envoy_imports(&self) -> &[String] {
        &self.compiled.non_envoy_imports
    }
}

static VM_SERIAL: AtomicU64 = AtomicU64::new(1);

/// One instance of the module (Envoy: one per worker thread) with its root context.
pub struct Vm {
    host: Host,
    store: Store<VmState>,
    instance: Instance,
    serial: u64,
    next_context_id: u32,
    poisoned: Option<String>,
}

/// One HTTP stream (Envoy: one filter instance / HTTP context). Created by [`Vm::stream`]; the
/// guest context is created lazily by the first driver call, as Envoy does in `decodeHeaders`.
/// Clones refer to the same stream.
#[derive(Clone)]
pub struct Stream {
    id: u32,
    vm: u64,
    state: Arc<Mutex<StreamState>>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Dir {
    Request,
    Response,
}

impl Vm {
    fn new(host: Host, vm_config: &[u8], plugin_config: &[u8]) -> Result<Vm> {
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
    fn invoke<P: WasmParams, Rt: WasmResults>(
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

    // ---- deferred actions ----------------------------------------------------------------

    /// Runs what Envoy defers until the VM call returns (continue/close stream, local replies),
    /// including the callbacks those trigger.
    fn run_after(&mut self) -> Result<()> {
        while !self.store.data().after.is_empty() {
            let a = self.store.data_mut().after.remove(0);
            match a {
                After::Continue(ctx, t) => {
                    let Some(s) = self.stream_by_id(ctx) else {
                        continue;
                    };
                    self.continue_stream(&s, t)?;
                }
                After::Close(ctx, _t) => {
                    let Some(s) = self.stream_by_id(ctx) else {
                        continue;
                    };
                    // Envoy resets the stream (the filter later gets on_log/on_done/on_delete).
                    s.state.lock().unwrap().reset = true;
                }
                After::LocalReply(ctx) => {
                    let Some(s) = self.stream_by_id(ctx) else {
                        continue;
                    };
                    self.apply_local_reply(&s)?;
                }
            }
        }
        Ok(())
    }

    fn stream_by_id(&self, id: u32) -> Option<Stream> {
        self.store.data().streams.get(&id).map(|st| Stream {
            id,
            vm: self.serial,
            state: st.clone(),
        })
    }

    /// Envoy's continueDecoding/continueEncoding. Quirk kept: `Context::continueStream` nulls
    /// the request header/body/trailer pointers for *both* request and response continues.
    fn continue_stream(&mut self, s: &Stream, t: u32) -> Result<()> {
        let dir = if t == 0 { Dir::Request } else { Dir::Response };
        let (flow, deliver) = {
            let mut st = s.state.lock().unwrap();
            if st.local_reply.is_some() && dir == Dir::Request {
                return Ok(());
            }
            st.request.headers_live = false;
            st.request.body_live = false;
            st.request.trailers_live = false;
            let d = dir_mut(&mut st, dir);
            let flow = d.flow;
            match flow {
                Flow::StopAll => {
                    release(d);
                    let held = std::mem::take(&mut d.held_body);
                    let eos = d.held_eos;
                    let trailers = d.held_trailers.take();
                    d.held_eos = false;
                    if d.eos_seen && held.is_empty() && !eos && trailers.is_none() {
                        d.ended = true;
                        d.flow = Flow::Ended;
                    } else {
                        d.flow = Flow::Iterating;
                    }
                    (flow, Some((held, eos, trailers)))
                }
                Flow::HeadersStopped | Flow::Buffering | Flow::Iterating => {
                    release(d);
                    if d.eos_seen {
                        d.ended = true;
                        d.flow = Flow::Ended;
                    } else {
                        d.flow = Flow::Iterating;
                    }
                    (flow, None)
                }
                Flow::Idle | Flow::Ended => (flow, None),
            }
        };
        let _ = flow;
        if let Some((held, eos, trailers)) = deliver {
            if !held.is_empty() || (eos && trailers.is_none()) {
                self.drive_body(s, dir, &held, eos)?;
            }
            if let Some(t) = trailers {
                self.drive_trailers(s, dir, t)?;
            }
        }
        Ok(())
    }

    fn apply_local_reply(&mut self, s: &Stream) -> Result<()> {
        let (reply, encode) = {
            let mut st = s.state.lock().unwrap();
            let Some(reply) = st.pending_local_reply.take() else {
                return Ok(());
            };
            st.local_reply = Some(reply.clone());
            st.request.flow = Flow::Ended;
            st.request.held_body.clear();
            st.request.held_trailers = None;
            let started = st.response.headers.is_some();
            (reply, !started && !st.reset)
        };
        if !encode {
            return Ok(());
        }
        // Envoy's Utility::sendLocalReply: :status, the filter's headers (addCopy), then
        // content-length/content-type for a non-empty body.
        let mut h = HeaderMap::new();
        h.add(":status", reply.status.to_string());
        for (k, v) in reply.headers.iter() {
            h.add(k, v);
        }
        if !reply.body.is_empty() {
            h.replace("content-length", reply.body.len().to_string());
            if !h.contains("content-type") {
                h.add("content-type", "text/plain");
            }
        }
        if self.host.opts.encode_local_replies {
            self.drive_headers(s, Dir::Response, h, reply.body.is_empty())?;
            if !reply.body.is_empty() {
                self.drive_body(s, Dir::Response, &reply.body, true)?;
            }
        } else {
            let mut st = s.state.lock().unwrap();
            st.response.headers = Some(h.clone());
            st.response.forwarded_headers = Some(h);
            st.response.forwarded_body = reply.body;
            st.response.ended = true;
            st.response.flow = Flow::Ended;
        }
        Ok(())
    }

    // ---- stream driving ------------------------------------------------------------------

    fn check(&self, s: &Stream) -> Result<()> {
        if s.vm != self.serial {
            bail!("stream {} belongs to another Vm", s.id);
        }
        if s.state.lock().unwrap().deleted {
            bail!("stream {} is already done (deleted)", s.id);
        }
        Ok(())
    }

    fn ensure_created(&mut self, s: &Stream) -> Result<()> {
        if s.state.lock().unwrap().created {
            return Ok(());
        }
        s.state.lock().unwrap().created = true;
        self.store.data_mut().streams.insert(s.id, s.state.clone());
        let root = self.root_context_id();
        self.invoke::<(i32, i32), ()>("proxy_on_context_create", s.id, (s.id as i32, root as i32))?;
        Ok(())
    }

    /// After a trap in a stream callback Envoy (fail_closed, the default) answers 503
    /// `wasm_fail_stream`; recorded as the stream's local reply.
    fn on_trap(&mut self, s: &Stream, e: anyhow::Error) -> anyhow::Error {
        let mut st = s.state.lock().unwrap();
        st.failed = true;
        if st.local_reply.is_none() {
            st.local_reply = Some(LocalReply {
                status: 503,
                body: Vec::new(),
                headers: HeaderMap::new(),
                details: "wasm_fail_stream".into(),
                grpc_status: 14,
            });
        }
        e
    }

    fn callback(&mut self, s: &Stream, name: &str, args: (i32, i32, i32)) -> Result<Option<i32>> {
        match self.invoke::<(i32, i32, i32), i32>(name, s.id, args) {
            Ok(v) => Ok(v),
            Err(e) => Err(self.on_trap(s, e)),
        }
    }

    fn drive_headers(
        &mut self,
        s: &Stream,
        dir: Dir,
        headers: HeaderMap,
        eos: bool,
    ) -> Result<Action> {
        self.ensure_created(s)?;
        let n = headers.len();
        {
            let mut st = s.state.lock().unwrap();
            if st.reset || (dir == Dir::Request && st.local_reply.is_some()) {
                return Ok(Action::NotCalled);
            }
            st.eos = eos;
            let d = dir_mut(&mut st, dir);
            if d.headers.is_some() && d.flow != Flow::Idle {
                bail!("{dir:?} headers already sent on stream {}", s.id);
            }
            d.headers = Some(headers);
            d.headers_live = true;
            d.eos_seen = eos;
        }
        let name = if dir == Dir::Request {
            "proxy_on_request_headers"
        } else {
            "proxy_on_response_headers"
        };
        let r = self.callback(s, name, (s.id as i32, n as i32, eos as i32))?;
        let allow_stop = self.host.opts.allow_on_headers_stop_iteration;
        let mut st = s.state.lock().unwrap();
        // sendLocalResponse sets stopNextIteration: whatever was returned becomes
        // StopAllIterationAndWatermark.
        let stopped_by_reply = st.pending_local_reply.is_some();
        let d = dir_mut(&mut st, dir);
        match r {
            _ if stopped_by_reply => d.flow = Flow::StopAll,
            // Missing export, Continue, or ContinueAndEndStream (Envoy maps 2 to Continue).
            None | Some(0) | Some(2) => {
                d.headers_live = false;
                release(d);
                if eos {
                    d.ended = true;
                    d.flow = Flow::Ended;
                } else {
                    d.flow = Flow::Iterating;
                }
            }
            Some(1) if allow_stop => d.flow = Flow::HeadersStopped,
            Some(_) => d.flow = Flow::StopAll,
        }
        Ok(r.map(Action::from_raw).unwrap_or(Action::NotCalled))
    }

    fn drive_body(&mut self, s: &Stream, dir: Dir, chunk: &[u8], eos: bool) -> Result<Action> {
        let size = {
            let mut st = s.state.lock().unwrap();
            if st.reset || (dir == Dir::Request && st.local_reply.is_some()) {
                return Ok(Action::NotCalled);
            }
            st.eos = eos;
            let d = dir_mut(&mut st, dir);
            match d.flow {
                Flow::Idle => bail!("{dir:?} body before headers on stream {}", s.id),
                Flow::Ended => return Ok(Action::NotCalled),
                Flow::StopAll => {
                    d.held_body.extend_from_slice(chunk);
                    d.held_eos |= eos;
                    d.eos_seen |= eos;
                    return Ok(Action::NotCalled);
                }
                Flow::Buffering => d.body.extend_from_slice(chunk),
                Flow::Iterating | Flow::HeadersStopped => d.body = chunk.to_vec(),
            }
            d.body_live = true;
            d.eos_seen |= eos;
            d.body.len()
        };
        let name = if dir == Dir::Request {
            "proxy_on_request_body"
        } else {
            "proxy_on_response_body"
        };
        let r = self.callback(s, name, (s.id as i32, size as i32, eos as i32))?;
        let mut st = s.state.lock().unwrap();
        let stopped_by_reply = st.pending_local_reply.is_some();
        let d = dir_mut(&mut st, dir);
        match r {
            // isNextIterationStopped → StopIterationNoBuffer.
            _ if stopped_by_reply => d.body.clear(),
            None | Some(0) => {
                d.body_live = false;
                release(d);
                // (After headers StopIteration, a body Continue resumes iteration: headers and
                // body pass.)
                if eos {
                    d.ended = true;
                    d.flow = Flow::Ended;
                } else {
                    d.flow = Flow::Iterating;
                }
            }
            // StopIterationAndBuffer / StopIterationAndWatermark.
            Some(1) | Some(2) => d.flow = Flow::Buffering,
            // StopIterationNoBuffer: the chunk is not kept.
            Some(3) => d.body.clear(),
            Some(_) => {
                d.body_live = false;
                release(d);
            }
        }
        Ok(r.map(Action::from_raw).unwrap_or(Action::NotCalled))
    }

    fn drive_trailers(&mut self, s: &Stream, dir: Dir, trailers: HeaderMap) -> Result<Action> {
        let n = trailers.len();
        {
            let mut st = s.state.lock().unwrap();
            if st.reset || (dir == Dir::Request && st.local_reply.is_some()) {
                return Ok(Action::NotCalled);
            }
            st.eos = true;
            let d = dir_mut(&mut st, dir);
            d.eos_seen = true;
            match d.flow {
                Flow::Idle => bail!("{dir:?} trailers before headers on stream {}", s.id),
                Flow::Ended => return Ok(Action::NotCalled),
                Flow::StopAll => {
                    d.held_trailers = Some(trailers);
                    return Ok(Action::NotCalled);
                }
                _ => {}
            }
            d.trailers = Some(trailers);
            d.trailers_live = true;
        }
        let name = if dir == Dir::Request {
            "proxy_on_request_trailers"
        } else {
            "proxy_on_response_trailers"
        };
        // ABI 0.2.1: proxy_on_{request,response}_trailers(context_id, num_trailers), two
        // parameters (headers and bodies have a third, end_of_stream).
        let r = match self.invoke::<(i32, i32), i32>(name, s.id, (s.id as i32, n as i32)) {
            Ok(v) => v,
            Err(e) => return Err(self.on_trap(s, e)),
        };
        let mut st = s.state.lock().unwrap();
        let stopped_by_reply = st.pending_local_reply.is_some();
        let d = dir_mut(&mut st, dir);
        match r {
            _ if stopped_by_reply => {}
            // Continue resumes everything held (headers, buffered body) plus the trailers.
            None | Some(0) => {
                d.trailers_live = false;
                release(d);
                d.ended = true;
                d.flow = Flow::Ended;
            }
            Some(_) => {}
        }
        Ok(r.map(Action::from_raw).unwrap_or(Action::NotCalled))
    }

    /// `decodeHeaders`: creates the context on first use, then `proxy_on_request_headers`.
    /// Names are lower-cased like Envoy's codecs do. After Continue the filter can no longer
    /// reach the request headers (Envoy nulls the pointer).
    pub fn request_headers(
        &mut self,
        s: &Stream,
        headers: impl IntoHeaders,
        end_of_stream: bool,
    ) -> Result<Action> {
        self.check(s)?;
        let r = self.drive_headers(s, Dir::Request, headers.into_headers(), end_of_stream)?;
        self.run_after()?;
        Ok(r)
    }

    /// `decodeData` for one chunk. While buffering (the filter returned Pause from a body
    /// callback) chunks accumulate and the filter sees the whole buffer; while the headers are
    /// StopAll-paused the chunk is held and [`Action::NotCalled`] returned.
    pub fn request_body(
        &mut self,
        s: &Stream,
        chunk: &[u8],
        end_of_stream: bool,
    ) -> Result<Action> {
        self.check(s)?;
        let r = self.drive_body(s, Dir::Request, chunk, end_of_stream)?;
        self.run_after()?;
        Ok(r)
    }

    pub fn request_trailers(&mut self, s: &Stream, trailers: impl IntoHeaders) -> Result<Action> {
        self.check(s)?;
        let r = self.drive_trailers(s, Dir::Request, trailers.into_headers())?;
        self.run_after()?;
        Ok(r)
    }

    /// `encodeHeaders` (the upstream's response reaching this filter).
    pub fn response_headers(
        &mut self,
        s: &Stream,
        headers: impl IntoHeaders,
        end_of_stream: bool,
    ) -> Result<Action> {
        self.check(s)?;
        let r = self.drive_headers(s, Dir::Response, headers.into_headers(), end_of_stream)?;
        self.run_after()?;
        Ok(r)
    }

    pub fn response_body(
        &mut self,
        s: &Stream,
        chunk: &[u8],
        end_of_stream: bool,
    ) -> Result<Action> {
        self.check(s)?;
        let r = self.drive_body(s, Dir::Response, chunk, end_of_stream)?;
        self.run_after()?;
        Ok(r)
    }

    pub fn response_trailers(&mut self, s: &Stream, trailers: impl IntoHeaders) -> Result<Action> {
        self.check(s)?;
        let r = self.drive_trailers(s, Dir::Response, trailers.into_headers())?;
        self.run_after()?;
        Ok(r)
    }

    /// The end of the stream as Envoy runs it: access log (`proxy_on_log`, with the final
    /// request/response headers readable but not writable), then `proxy_on_done` and
    /// `proxy_on_delete`. A stream never started still gets its context created first.
    pub fn done(&mut self, s: &Stream) -> Result<()> {
        self.check(s)?;
        self.ensure_created(s)?;
        let id = s.id;
        self.store.data_mut().access_log_phase = true;
        let r = self.invoke::<(i32,), ()>("proxy_on_log", id, (id as i32,));
        self.store.data_mut().access_log_phase = false;
        r.map_err(|e| self.on_trap(s, e))?;
        self.invoke::<(i32,), i32>("proxy_on_done", id, (id as i32,))
            .map_err(|e| self.on_trap(s, e))?;
        self.invoke::<(i32,), ()>("proxy_on_delete", id, (id as i32,))
            .map_err(|e| self.on_trap(s, e))?;
        self.store.data_mut().streams.remove(&id);
        s.state.lock().unwrap().deleted = true;
        self.run_after()?;
        Ok(())
    }

    /// Convenience: a whole request/response exchange (headers, optional body, response
    /// headers `:status`, `done`). Returns the actions of request headers and body.
    pub fn request(
        &mut self,
        s: &Stream,
        headers: impl IntoHeaders,
        body: Option<&[u8]>,
    ) -> Result<(Action, Option<Action>)> {
        let a = self.request_headers(s, headers, body.is_none())?;
        let b = match body {
            Some(b) => Some(self.request_body(s, b, true)?),
            None => None,
        };
        Ok((a, b))
    }

    // ---- HTTP callouts -------------------------------------------------------------------

    /// Calls dispatched with `proxy_http_call` and not yet answered.
    pub fn pending_http_calls(&self) -> Vec<HttpCall> {
        self.store.data().http_calls.values().cloned().collect()
    }

    /// Completes a call: `proxy_on_http_call_response(root, token, headers, body, trailers)`
    /// with the response readable via HttpCallResponseHeaders/Body during the callback.
    pub fn respond_http_call(
        &mut self,
        token: u32,
        headers: impl IntoHeaders,
        body: &[u8],
    ) -> Result<()> {
        self.respond(token, headers.into_headers(), body, None)
    }

    pub fn respond_http_call_with_trailers(
        &mut self,
        token: u32,
        headers: impl IntoHeaders,
        body: &[u8],
        trailers: impl IntoHeaders,
    ) -> Result<()> {
        self.respond(
            token,
            headers.into_headers(),
            body,
            Some(trailers.into_headers()),
        )
    }

    /// Envoy's onHttpCallFailure (stream reset, no healthy upstream connection, response over
    /// the buffer limit): `proxy_on_http_call_response(root, token, 0, 0, 0)` with
    /// `proxy_get_status` = (11 BrokenConnection, "reset") during the callback.
    pub fn fail_http_call(&mut self, token: u32) -> Result<()> {
        if self.store.data_mut().http_calls.remove(&token).is_none() {
            bail!("no pending http call {token}");
        }
        let root = self.root_context_id();
        self.store.data_mut().status = (BROKEN_CONNECTION_U32, b"reset".to_vec());
        let r = self.invoke::<(i32, i32, i32, i32, i32), ()>(
            "proxy_on_http_call_response",
            root,
            (root as i32, token as i32, 0, 0, 0),
        );
        self.store.data_mut().status = (0, Vec::new());
        r?;
        self.run_after()
    }

    /// A timeout is not a failure in Envoy: the async client delivers the router's local
    /// reply through onSuccess — `:status 504`, body `upstream request timeout`.
    pub fn timeout_http_call(&mut self, token: u32) -> Result<()> {
        let body = b"upstream request timeout";
        self.respond(
            token,
            HeaderMap::from_pairs([
                (":status", "504"),
                ("content-length", "24"),
                ("content-type", "text/plain"),
            ]),
            body,
            None,
        )
    }

    fn respond(
        &mut self,
        token: u32,
        headers: HeaderMap,
        body: &[u8],
        trailers: Option<HeaderMap>,
    ) -> Result<()> {
        if self.store.data_mut().http_calls.remove(&token).is_none() {
            bail!("no pending http call {token}");
        }
        let root = self.root_context_id();
        let (nh, nt) = (headers.len(), trailers.as_ref().map_or(0, |t| t.len()));
        self.store.data_mut().call_response = Some(CallResponse {
            headers,
            body: body.to_vec(),
            trailers,
        });
        let r = self.invoke::<(i32, i32, i32, i32, i32), ()>(
            "proxy_on_http_call_response",
            root,
            (
                root as i32,
                token as i32,
                nh as i32,
                body.len() as i32,
                nt as i32,
            ),
        );
        self.store.data_mut().call_response = None;
        r?;
        self.run_after()
    }

    // ---- timers, queues ------------------------------------------------------------------

    /// The period set with `proxy_set_tick_period_milliseconds` (None if 0).
    pub fn tick_period(&self) -> Option<Duration> {
        let ms = self.store.data().tick_period_ms;
        (ms > 0).then(|| Duration::from_millis(ms as u64))
    }

    /// Fires `proxy_on_tick(root)` if a tick period is set; returns whether it fired. (The
    /// clock is not moved; use [`Host::advance`].)
    pub fn tick(&mut self) -> Result<bool> {
        if self.tick_period().is_none() {
            return Ok(false);
        }
        let root = self.root_context_id();
        self.invoke::<(i32,), ()>("proxy_on_tick", root, (root as i32,))?;
        self.run_after()?;
        Ok(true)
    }

    /// Delivers `proxy_on_queue_ready(root, token)` for every enqueue since the last call on a
    /// queue this Vm registered. Returns how many were delivered.
    pub fn dispatch_queue_ready(&mut self) -> Result<usize> {
        let tokens: Vec<u32> = std::mem::take(&mut *self.store.data().queue_ready.lock().unwrap());
        let root = self.root_context_id();
        for t in &tokens {
            self.invoke::<(i32, i32), ()>("proxy_on_queue_ready", root, (root as i32, *t as i32))?;
            self.run_after()?;
        }
        Ok(tokens.len())
    }

    // ---- observations --------------------------------------------------------------------

    pub fn logs(&self) -> &[LogLine] {
        &self.store.data().logs
    }

    pub fn log_messages(&self) -> Vec<String> {
        self.store
            .data()
            .logs
            .iter()
            .map(|l| l.message.clone())
            .collect()
    }

    pub fn take_logs(&mut self) -> Vec<LogLine> {
        std::mem::take(&mut self.store.data_mut().logs)
    }

    /// (calls, bytes) the host made to the guest's exported allocator
    /// (`proxy_on_memory_allocate` or `malloc`) to hand data to the guest.
    pub fn allocator_calls(&self) -> (u64, u64) {
        (self.store.data().alloc_calls, self.store.data().alloc_bytes)
    }

    pub fn metric(&self, name: &str) -> Option<u64> {
        self.host.metric(name)
    }

    pub fn histogram(&self, name: &str) -> Vec<u64> {
        self.host.histogram(name)
    }

    /// A Vm-level property (visible to the root context and every stream; stream properties
    /// win). `path` segments are joined with NUL as the SDK sends them.
    pub fn set_property(&mut self, path: &[&str], value: impl AsRef<[u8]>) {
        self.store
            .data_mut()
            .properties
            .insert(path.join("\0").into_bytes(), value.as_ref().to_vec());
    }

    /// Imports the guest called that the host does not implement (gRPC, unknown ones).
    pub fn unimplemented_calls(&self) -> Vec<String> {
        self.store.data().unimplemented_calls.clone()
    }

    /// Times the root context called `proxy_done`.
    pub fn done_calls(&self) -> u32 {
        self.store.data().done_calls
    }

    /// Bytes of guest linear memory.
    pub fn memory_size(&self) -> usize {
        self.store
            .data()
            .memory
            .map(|m| m.data_size(&self.store))
            .unwrap_or(0)
    }
}

const BROKEN_CONNECTION_U32: u32 = status::BROKEN_CONNECTION as u32;

fn dir_mut(st: &mut StreamState, dir: Dir) -> &mut Direction {
    match dir {
        Dir::Request => &mut st.request,
        Dir::Response => &mut st.response,
    }
}

/// Passes what this filter holds to the next one.
fn release(d: &mut Direction) {
    if d.forwarded_headers.is_none() {
        d.forwarded_headers = d.headers.clone();
    }
    let body = std::mem::take(&mut d.body);
    d.forwarded_body.extend_from_slice(&body);
    if d.trailers.is_some() && d.forwarded_trailers.is_none() {
        d.forwarded_trailers = d.trailers.clone();
    }
}

impl Stream {
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Sets a property for this stream (raw, Envoy-serialised bytes: strings as-is, ints as
    /// 8-byte little-endian, bools as one byte). `path` like `&["source", "address"]`.
    pub fn set_property(&self, path: &[&str], value: impl AsRef<[u8]>) {
        self.state
            .lock()
            .unwrap()
            .properties
            .insert(path.join("\0").into_bytes(), value.as_ref().to_vec());
    }

    /// An int64 property (e.g. `source.port`, `connection.id`), serialised as Envoy does.
    pub fn set_property_i64(&self, path: &[&str], v: i64) {
        self.set_property(path, v.to_le_bytes())
    }

    pub fn set_property_bool(&self, path: &[&str], v: bool) {
        self.set_property(path, [v as u8])
    }

    /// The request headers as they are now (after the filter's changes).
    pub fn request_headers(&self) -> HeaderMap {
        self.state
            .lock()
            .unwrap()
            .request
            .headers
            .clone()
            .unwrap_or_default()
    }

    /// The request body so far: what passed the filter plus what it is holding.
    pub fn request_body(&self) -> Vec<u8> {
        let st = self.state.lock().unwrap();
        let mut b = st.request.forwarded_body.clone();
        b.extend_from_slice(&st.request.body);
        b.extend_from_slice(&st.request.held_body);
        b
    }

    pub fn request_trailers(&self) -> Option<HeaderMap> {
        self.state.lock().unwrap().request.trailers.clone()
    }

    /// What reached the upstream side of the filter: headers (None while held), body, and
    /// whether end of stream passed.
    pub fn upstream_request(&self) -> (Option<HeaderMap>, Vec<u8>, bool) {
        let st = self.state.lock().unwrap();
        (
            st.request.forwarded_headers.clone(),
            st.request.forwarded_body.clone(),
            st.request.ended,
        )
    }

    pub fn response_headers(&self) -> HeaderMap {
        self.state
            .lock()
            .unwrap()
            .response
            .headers
            .clone()
            .unwrap_or_default()
    }

    pub fn response_body(&self) -> Vec<u8> {
        let st = self.state.lock().unwrap();
        let mut b = st.response.forwarded_body.clone();
        b.extend_from_slice(&st.response.body);
        b.extend_from_slice(&st.response.held_body);
        b
    }

    /// What reached the client side of the filter.
    pub fn downstream_response(&self) -> (Option<HeaderMap>, Vec<u8>, bool) {
        let st = self.state.lock().unwrap();
        (
            st.response.forwarded_headers.clone(),
            st.response.forwarded_body.clone(),
            st.response.ended,
        )
    }

    pub fn local_reply(&self) -> Option<LocalReply> {
        self.state.lock().unwrap().local_reply.clone()
    }

    /// Filter state written by `proxy_set_property(path, value)` (Envoy key `wasm.<path>`);
    /// `path` is the raw path the guest passed (segments joined by NUL).
    pub fn filter_state(&self, path: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        let mut key = b"wasm.".to_vec();
        key.extend_from_slice(path.as_ref());
        self.state.lock().unwrap().filter_state.get(&key).cloned()
    }

    /// All filter state, keys as Envoy has them (`wasm.` prefix, NULs shown as `\0`).
    pub fn filter_state_all(&self) -> BTreeMap<String, Vec<u8>> {
        self.state
            .lock()
            .unwrap()
            .filter_state
            .iter()
            .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.clone()))
            .collect()
    }

    pub fn request_flow(&self) -> Flow {
        self.state.lock().unwrap().request.flow
    }

    pub fn response_flow(&self) -> Flow {
        self.state.lock().unwrap().response.flow
    }

    /// True while the request is held by the filter (paused headers or buffering body).
    pub fn request_paused(&self) -> bool {
        matches!(
            self.request_flow(),
            Flow::StopAll | Flow::HeadersStopped | Flow::Buffering
        )
    }

    pub fn is_reset(&self) -> bool {
        self.state.lock().unwrap().reset
    }

    pub fn failed(&self) -> bool {
        self.state.lock().unwrap().failed
    }

    /// A copy of everything recorded for this stream.
    pub fn snapshot(&self) -> StreamState {
        self.state.lock().unwrap().clone()
    }
}
