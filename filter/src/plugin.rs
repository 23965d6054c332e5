//! The filter's root context (one per worker): turns the plugin configuration into a
//! [`Scorer`] over the bootstrap models and hands it to every stream. On its tick it flushes
//! the streams' metrics to Envoy (`metrics`) and, with a `registry`, picks up models the
//! poller published (`updates`, on a jittered period) and swaps the scorer between two
//! requests; with `verified_bots`, it takes the keys the poller published (`read_directory`).
//! A refused configuration leaves the previous scorer serving (Envoy also keeps the previous
//! configuration when `on_configure` returns false).

use crate::host::now_ns;
use crate::metrics::{self, UpdateMetrics};
use crate::serving::Serving;
use crate::stream::Stream;
use crate::updates::{elapsed_us, registry_models, Tick, Updates};
use edgescore_core::config::{ConfigError, PluginConfig};
use edgescore_core::ensemble::Model;
use edgescore_core::handoff::{Record, RecordModel};
use edgescore_core::metric_names as names;
use edgescore_core::registry::ModelMode;
use edgescore_core::scorer::{RegistryModel, Scorer, Served};
use edgescore_core::signatures::{Bots, Directory, DIRECTORY_KEY};
use edgescore_core::velocity::Clients;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{ContextType, LogLevel};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

#[derive(Default)]
pub struct Plugin {
    serving: Rc<RefCell<Option<Serving>>>,
    config_errors: Option<u32>,
    /// The configuration in force (registry models are built against it).
    cfg: Option<PluginConfig>,
    /// Its bootstrap models, decoded and validated once: a swap clones them (a copy of
    /// validated bytes) instead of decoding the configuration's base64 again.
    bootstrap: Vec<Served>,
    seed: u64,
    updates: Updates,
    update_metrics: Option<UpdateMetrics>,
    /// The registry check's period, when ticks come more often (for metric flushes) than it.
    check_every_ns: Option<u64>,
    next_check_ns: u64,
    /// The verified bots' keys last read from shared data (the poller's encoding).
    directory_seen: Vec<u8>,
}

impl Context for Plugin {}

impl RootContext for Plugin {
    fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        self.config_errors = metrics::config_errors();
        true
    }

    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let json = self.get_plugin_configuration().unwrap_or_default();
        self.seed = self
            .get_current_time()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64);
        let built = PluginConfig::parse(&json).and_then(|cfg| {
            let bootstrap = Scorer::bootstrap(&cfg)?;
            // Models this worker already took from the registry stay: a configuration change
            // (a threshold, say) must not fall back to the bootstrap models.
            let registry = self.updates.loaded().filter(|_| cfg.registry.is_some());
            let scorer = build(&cfg, self.seed, registry, &bootstrap)?;
            Ok((scorer, cfg, bootstrap))
        });
        match built {
            Ok((scorer, cfg, bootstrap)) => {
                let models: Vec<&str> = scorer.models().iter().map(|m| m.id.as_str()).collect();
                let from_registry = match &cfg.registry {
                    Some(r) => format!("; from the registry (cluster `{}`): {}", r.cluster, cfg.models.iter().filter_map(|m| m.name.as_deref()).collect::<Vec<_>>().join(", ")),
                    None => String::new(),
                };
                log(
                    LogLevel::Info,
                    &format!("edgescore: configured {} model(s) [{}], {} feature slot(s), mode {:?}{from_registry}", models.len(), models.join(", "), scorer.slots().len(), scorer.mode()),
                );
                // The previous scorer's metrics are flushed as it is dropped.
                self.serve(scorer, &cfg);
                let flush_ms = cfg.metrics.flush_ms as u64;
                let mut tick_ms = flush_ms;
                self.check_every_ns = None;
                if let Some(reg) = &cfg.registry {
                    self.update_metrics.get_or_insert_with(UpdateMetrics::define);
                    // Jitter spreads the workers' checks (and their copies) over the period.
                    let check_ms = reg.check_ms as u64 + self.seed % (reg.check_ms as u64 / 4 + 1);
                    if check_ms <= flush_ms {
                        tick_ms = check_ms;
                    } else {
                        self.check_every_ns = Some(check_ms * 1_000_000);
                    }
                }
                let _ = hostcalls::set_tick_period(Duration::from_millis(tick_ms));
                self.cfg = Some(cfg);
                self.bootstrap = bootstrap;
                true
            }
            Err(e) => {
                log(LogLevel::Error, &format!("edgescore: configuration refused: {e}"));
                if let Some(id) = self.config_errors {
                    let _ = hostcalls::increment_metric(id, 1);
                }
                false
            }
        }
    }

    fn on_tick(&mut self) {
        if let Ok(mut serving) = self.serving.try_borrow_mut() {
            if let Some(s) = serving.as_mut() {
                s.flush();
                if s.bots.is_some() {
                    read_directory(&mut self.directory_seen, s);
                }
            }
        }
        let (Some(cfg), Some(m)) = (&self.cfg, &self.update_metrics) else { return };
        let Some(reg) = &cfg.registry else { return };
        let start = now_ns();
        if let Some(every) = self.check_every_ns {
            // Ticks come every flush_ms; check on the first one half a tick short of the period.
            if start < self.next_check_ns {
                return;
            }
            self.next_check_ns = start + every - cfg.metrics.flush_ms as u64 * 500_000;
        }
        if let Tick::Ready(record, models) = self.updates.tick(reg.slice_bytes as usize, m) {
            self.swap(record, models);
        }
        if let Some(m) = &self.update_metrics {
            let _ = hostcalls::record_metric(m.tick_us, elapsed_us(start));
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Stream::new(self.serving.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// Takes the keys the poller published, when they changed since `seen` (a host call per tick;
/// the decode allocates here, never on the request path).
fn read_directory(seen: &mut Vec<u8>, serving: &mut Serving) {
    let Ok((Some(bytes), _)) = hostcalls::get_shared_data(DIRECTORY_KEY) else { return };
    // A serving without keys (a new configuration's first) reads them even if `seen` has them.
    let empty = serving.bots.as_ref().is_some_and(|b| b.directory().keys().is_empty());
    if bytes == *seen && !empty {
        return;
    }
    match (Directory::decode(&bytes), serving.bots.as_mut()) {
        (Some(d), Some(bots)) => {
            log(LogLevel::Info, &format!("edgescore: verified bots: {} key(s) from the poller", d.keys().len()));
            bots.set_directory(std::sync::Arc::new(d));
        }
        _ => log(LogLevel::Warn, "edgescore: verified bots: the poller's keys could not be read; the previous keys stay"),
    }
    *seen = bytes;
}

impl Plugin {
    /// Serves `scorer` from the next request on. The drift reference gauges of bins the new
    /// models no longer have go to 0, so that Prometheus' sums over a feature's bins hold only
    /// the reference in force; the old serving's counts are flushed as it is dropped. The
    /// worker's clients pass to the new serving (`Clients::carry`).
    fn serve(&self, scorer: Scorer, cfg: &PluginConfig) {
        let carried = self.serving.borrow_mut().as_mut().and_then(|s| s.clients.take());
        let bots = Bots::carry(self.serving.borrow().as_ref().and_then(|s| s.bots.as_ref()), cfg);
        let new = Serving::new(scorer, Clients::carry(carried, cfg), bots);
        let old = self.serving.borrow_mut().replace(new);
        if let (Some(old), Ok(current)) = (old, self.serving.try_borrow()) {
            if let Some(current) = current.as_ref() {
                old.metrics.retire_drift_references(&current.metrics);
            }
        }
    }

    /// Builds a scorer from a record's models (plus bootstrap models the record does not
    /// replace) and swaps it in. The old scorer is dropped here, between two requests.
    fn swap(&mut self, record: Record, models: Vec<(RecordModel, Model)>) {
        let Some(cfg) = &self.cfg else { return };
        let m = self.update_metrics.as_ref();
        match build(cfg, self.seed, registry_models(&models), &self.bootstrap) {
            Ok(scorer) => {
                let ids: Vec<&str> = scorer.models().iter().map(|m| m.id.as_str()).collect();
                log(LogLevel::Info, &format!("edgescore: registry generation {} (manifest {}) serving [{}]", record.generation, record.sequence, ids.join(", ")));
                // The gauges name the versions served; 0 for a model the new set no longer
                // has (a shadow dropped by its promotion).
                let served = models.iter().map(|(e, _)| (e.name.as_str(), e.mode, e.version));
                let dropped = self.updates.loaded_entries().filter(|old| !models.iter().any(|(e, _)| e.name == old.name && e.mode == old.mode));
                let gauges: Vec<(&str, ModelMode, u64)> = served.chain(dropped.map(|e| (e.name.as_str(), e.mode, 0))).collect();
                for (name, mode, version) in gauges {
                    let _ = hostcalls::record_metric(metrics::gauge(&names::registry::version(name, mode == ModelMode::Shadow)), version);
                }
                self.serve(scorer, cfg);
                self.updates.swapped(models);
                if let Some(m) = m {
                    let _ = hostcalls::increment_metric(m.swaps, 1);
                }
            }
            Err(e) => {
                log(LogLevel::Warn, &format!("edgescore: registry generation {} refused by this configuration: {e}; the previous models keep serving", record.generation));
                self.updates.refused(&record);
                if let Some(m) = m {
                    let _ = hostcalls::increment_metric(m.refused, 1);
                }
            }
        }
    }
}

/// The one way a scorer is built: the registry's models under their configured policies,
/// plus the bootstrap models they do not replace.
fn build<'m>(cfg: &PluginConfig, seed: u64, registry: impl IntoIterator<Item = RegistryModel<'m>>, bootstrap: &[Served]) -> Result<Scorer, ConfigError> {
    Scorer::build(cfg, seed, Scorer::served(cfg, registry, bootstrap))
}

fn log(level: LogLevel, message: &str) {
    let _ = hostcalls::log(level, message);
}
