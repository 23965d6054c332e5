//! One filter configuration (`on_http_filter_config_new`, main thread): the plugin JSON parsed
//! by the core, its metrics defined, a scorer per worker, and — with a `registry` or
//! `verified_bots` — a member of the group of configurations that share the registry poller and
//! the key directories' fetch (`poll_group`). Every worker's streams share it, so everything in
//! it is `Sync`: the per-worker state sits behind each worker's own lock (`workers`).
//!
//! Envoy gives a filter configuration no timer: a module thread ([`Ticker`]) commits a
//! scheduler event every tick, and the main thread, in `on_http_filter_config_scheduled`,
//! flushes the workers' counts and drives the registry poll with Envoy's own HTTP callouts.

use crate::abi::{LOG_ERROR, LOG_INFO};
use crate::envoy::{self, EnvoyConfig, Scheduler};
use crate::metrics::Defined;
use crate::poll_group;
use crate::workers::{Worker, Workers};
use edgescore_core::config::{ConfigError, PluginConfig};
use edgescore_core::scorer::{RegistryModel, Scorer, Served};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Filter {
    pub envoy: EnvoyConfig,
    pub cfg: PluginConfig,
    /// The configuration's inline artifacts, validated once.
    pub bootstrap: Vec<Served>,
    pub metrics: Defined,
    pub workers: Workers,
    pub seed: u64,
    /// Held for its drop: stops the thread, then deletes the scheduler.
    _ticker: Ticker,
}

impl Filter {
    /// Parses `json` and builds everything a request needs; the error is logged by the caller.
    pub fn new(envoy: EnvoyConfig, json: &[u8]) -> Result<Arc<Filter>, ConfigError> {
        let cfg = PluginConfig::parse(json)?;
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64);
        let bootstrap = Scorer::bootstrap(&cfg)?;
        // Built here first so that a configuration the core refuses is refused at load. Without
        // a bootstrap artifact it has no model: requests get `on_error` until the registry's
        // models arrive (docs/registry.md, "Start-up").
        let first = Scorer::build(&cfg, seed, bootstrap.clone())?;
        let names = model_names(&cfg, &bootstrap);
        let metrics = Defined::define(&envoy, &cfg, &names);
        metrics.set_drift_reference(&envoy, first.drift());
        let models: Vec<String> = first.models().iter().map(|m| m.id.clone()).collect();
        let slots = first.slots().len();
        let mut first = Some(first);
        let workers = Workers::new(envoy::concurrency() as usize, &cfg, &metrics, || first.take().or_else(|| Scorer::build(&cfg, seed, bootstrap.clone()).ok()));
        let tick_ms = match cfg.registry.is_some() || cfg.verified_bots.is_some() {
            // Polls and fetches are due in whole seconds; the tick also flushes the workers' counts.
            true => cfg.metrics.flush_ms.min(1000),
            false => cfg.metrics.flush_ms,
        };
        let from_registry = match &cfg.registry {
            Some(r) => format!("; from the registry (cluster `{}`): {}", r.cluster, names.join(", ")),
            None => String::new(),
        };
        envoy::log(
            LOG_INFO,
            &format!(
                "edgescore: configured {} model(s) [{}], {} feature slot(s), mode {:?}{from_registry} (native module, {} worker slot(s))",
                models.len(),
                models.join(", "),
                slots,
                cfg.mode,
                workers.len()
            ),
        );
        if let Some(reg) = &cfg.registry {
            envoy::log(LOG_INFO, &format!("edgescore registry: {}", reg.describe()));
        }
        // The ticker holds only the scheduler: the filter's lifetime stays Envoy's. Its first
        // event comes a period after start, once this configuration is Envoy's.
        let _ticker = Ticker::start(envoy.scheduler(), Duration::from_millis(tick_ms as u64));
        let filter = Arc::new(Filter { envoy, cfg, bootstrap, metrics, workers, seed, _ticker });
        if filter.polls() {
            poll_group::join(&filter, json);
        }
        Ok(filter)
    }

    /// The main thread's tick: the workers' counts to Envoy, replaced scorers freed, the key
    /// directories fetched and the registry polled when due (the group's leader's tick; timed
    /// into `edgescore.registry.tick_us` with the update work an answer brings).
    pub fn on_tick(&self) {
        self.workers.tick(&self.metrics, &self.envoy);
        #[cfg(feature = "count-allocations")]
        self.envoy.set_gauge(self.metrics.allocations, crate::counting::edgescore_native_allocations());
        if self.polls() {
            poll_group::tick(self);
        }
    }

    /// Whether the configuration fetches anything (the registry's models, the key directories).
    fn polls(&self) -> bool {
        self.cfg.registry.is_some() || self.cfg.verified_bots.is_some()
    }

    /// An answer to a directory or registry request (main thread).
    pub fn on_callout(&self, id: u64, answer: Result<Vec<u8>, String>) {
        poll_group::answer(self, id, answer);
    }

    /// Builds a scorer per worker over `registry` (plus the bootstrap models it does not
    /// replace) and leaves each in its worker's slot, which serves it from its next request on:
    /// a swap per worker (`edgescore.registry.swaps`; the Wasm filter also counts the root on Envoy's
    /// main thread, which has no counterpart here). The error
    /// is the configuration's refusal.
    pub fn offer<'m>(&self, registry: &[RegistryModel<'m>]) -> Result<Vec<String>, ConfigError> {
        // Assembled once: each worker's scorer shares its models (and their tables).
        let served = Scorer::served(&self.cfg, registry.iter().map(|r| RegistryModel { name: r.name, version: r.version, shadow: r.shadow, model: r.model }), &self.bootstrap);
        let probe = Scorer::build(&self.cfg, self.seed, served.clone())?;
        let ids = probe.models().iter().map(|m| m.id.clone()).collect();
        self.metrics.set_drift_reference(&self.envoy, probe.drift());
        let mut probe = Some(probe);
        self.workers.offer(|| {
            let scorer = probe.take().map_or_else(|| Scorer::build(&self.cfg, self.seed, served.clone()), Ok);
            // The same inputs built once already: a second build cannot fail.
            Worker::new(scorer.expect("built before"), &self.metrics)
        });
        self.metrics.add_now(&self.envoy, self.metrics.swaps, self.workers.len() as u64);
        Ok(ids)
    }
}

/// The configured models' names (a bootstrap artifact names its model when the configuration
/// does not).
fn model_names(cfg: &PluginConfig, bootstrap: &[Served]) -> Vec<String> {
    let mut names: Vec<String> = cfg.models.iter().filter_map(|m| m.name.clone()).collect();
    for b in bootstrap {
        let name = b.model.ensemble().name().to_string();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// Logs and counts a refused configuration the way the Wasm filter does (Envoy then refuses
/// the filter: a bad configuration fails at start-up, or the update is rejected and the
/// previous configuration keeps serving).
pub fn refused(envoy: EnvoyConfig, e: &ConfigError) {
    envoy::log(LOG_ERROR, &format!("edgescore: configuration refused: {e}"));
    if let Some(id) = envoy.define_counter(edgescore_core::metric_names::CONFIG_ERRORS) {
        envoy.increment(id, 1);
    }
}

/// The module thread that paces the main thread's tick (see the module's doc).
struct Ticker {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    /// Dropped (deleted in Envoy) after `drop` has joined the thread that commits to it.
    _scheduler: Arc<Scheduler>,
}

/// The scheduler event of a tick.
pub const TICK_EVENT: u64 = 1;

impl Ticker {
    fn start(scheduler: Scheduler, period: Duration) -> Ticker {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let scheduler = Arc::new(scheduler);
        let (s, sched) = (stop.clone(), scheduler.clone());
        let thread = std::thread::Builder::new()
            .name("edgescore-tick".into())
            .spawn(move || {
                let (lock, cv) = &*s;
                let mut stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
                // The first tick a period after start: the registry cluster is ready by then.
                while !*stopped {
                    let (guard, timeout) = cv.wait_timeout(stopped, period).unwrap_or_else(|p| p.into_inner());
                    stopped = guard;
                    if timeout.timed_out() && !*stopped {
                        sched.commit(TICK_EVENT);
                    }
                }
            })
            .ok();
        Ticker { stop, thread, _scheduler: scheduler }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
