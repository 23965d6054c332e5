//! The registry poller: the root context of the singleton service VM (`bootstrap_extensions`,
//! `envoy.bootstrap.wasm`, `singleton: true`, the same `vm_id` and `.wasm` as the filter).
//! Every `poll_seconds` it fetches the signed manifest; for each model version it has not
//! accepted yet it fetches the artifact and checks signature, size, SHA-256, validation,
//! feature schema, hash key and golden rows; then it hands the accepted set to the workers
//! through shared data (`edgescore_core::handoff`). All of this runs on Envoy's main thread,
//! never on a worker's event loop: a model update costs the request path nothing here.
//!
//! A refusal never hurts serving: the refused version is skipped, the previously accepted one
//! keeps serving, a counter per reason increments and one log line says what and why.

use crate::host::now_ns;
use edgescore_core::config::PluginConfig;
use edgescore_core::features::FeatureSchema;
use edgescore_core::handoff::{Accepted, Publisher};
use edgescore_core::registry::{self, Manifest, ManifestModel, ModelMode, PublicKey, Refusal};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, RootContext};
use proxy_wasm::types::{LogLevel, MetricType};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The registry's counters and gauges (process-wide in Envoy: the poller is their only writer).
struct PollerMetrics {
    polls: u32,
    manifests_accepted: u32,
    models_accepted: u32,
    /// Per [`registry::REASONS`] entry.
    refused: Vec<u32>,
    seconds_since_good_poll: u32,
    manifest_sequence: u32,
}

impl PollerMetrics {
    fn define() -> PollerMetrics {
        let counter = |n: &str| hostcalls::define_metric(MetricType::Counter, n).unwrap_or(u32::MAX);
        let gauge = |n: &str| hostcalls::define_metric(MetricType::Gauge, n).unwrap_or(u32::MAX);
        PollerMetrics {
            polls: counter("edgescore.registry.polls"),
            manifests_accepted: counter("edgescore.registry.manifests_accepted"),
            models_accepted: counter("edgescore.registry.models_accepted"),
            refused: registry::REASONS.iter().map(|r| counter(&format!("edgescore.registry.refused.{r}"))).collect(),
            seconds_since_good_poll: gauge("edgescore.registry.seconds_since_good_poll"),
            manifest_sequence: gauge("edgescore.registry.manifest_sequence"),
        }
    }
}

/// What the poller is waiting for.
enum Waiting {
    Nothing,
    Manifest { token: u32 },
    Artifact { token: u32, plan: Plan },
}

/// A manifest being applied: the artifacts still to fetch and the set accepted so far.
struct Plan {
    manifest: Manifest,
    queue: VecDeque<ManifestModel>,
    /// (name, mode) → the entry and its bytes, starting from the currently served entries the
    /// manifest still lists.
    set: BTreeMap<(String, ModelMode), (ManifestModel, Vec<u8>)>,
    fetching: Option<ManifestModel>,
}

struct Settings {
    cfg: PluginConfig,
    keys: Vec<PublicKey>,
    hash_key_id: String,
}

#[derive(Default)]
pub struct Poller {
    settings: Option<Settings>,
    metrics: Option<PollerMetrics>,
    waiting: Option<Waiting>,
    publisher: Publisher,
    /// The served set: what the last published record holds, with the bytes.
    served: BTreeMap<(String, ModelMode), (ManifestModel, Vec<u8>)>,
    last_sequence: Option<u64>,
    /// Highest version accepted per model name: versions never go backwards.
    high_water: BTreeMap<String, u64>,
    next_poll_ns: u64,
    last_good_ns: u64,
}

impl Context for Poller {
    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body_size: usize, _num_trailers: usize) {
        let status = if num_headers == 0 { None } else { hostcalls::get_map_value(proxy_wasm::types::MapType::HttpCallResponseHeaders, ":status").ok().flatten() };
        let body = if body_size > 0 { hostcalls::get_buffer(proxy_wasm::types::BufferType::HttpCallResponseBody, 0, body_size).ok().flatten() } else { None };
        let ok = status.as_deref() == Some("200");
        let answer = match (ok, status) {
            (true, _) => Ok(body.unwrap_or_default()),
            (false, Some(s)) => Err(format!("HTTP {s}")),
            (false, None) => Err("no response (connection failure or timeout)".to_string()),
        };
        match self.waiting.take() {
            Some(Waiting::Manifest { token: t }) if t == token => self.on_manifest(answer),
            Some(Waiting::Artifact { token: t, plan }) if t == token => self.on_artifact(plan, answer),
            other => self.waiting = other,
        }
    }
}

impl RootContext for Poller {
    fn on_configure(&mut self, _size: usize) -> bool {
        let json = self.get_plugin_configuration().unwrap_or_default();
        let cfg = match PluginConfig::parse(&json) {
            Ok(cfg) => cfg,
            Err(e) => {
                log(LogLevel::Error, &format!("edgescore registry: configuration refused: {e}"));
                return false;
            }
        };
        let Some(reg) = &cfg.registry else {
            log(LogLevel::Error, "edgescore registry: configuration refused: registry: required for the registry service VM");
            return false;
        };
        let keys = reg.keys();
        let hash_key_id = registry::hash_key_id(cfg.hash_key.as_bytes());
        log(LogLevel::Info, &format!("edgescore registry: polling cluster `{}` {} every {} s, {} key(s)", reg.cluster, reg.path, reg.poll_seconds, keys.len()));
        self.metrics.get_or_insert_with(PollerMetrics::define);
        self.settings = Some(Settings { cfg, keys, hash_key_id });
        self.waiting.get_or_insert(Waiting::Nothing);
        // A 1 s tick: polls when due, and keeps the seconds-since-good-poll gauge current.
        let _ = hostcalls::set_tick_period(Duration::from_secs(1));
        self.next_poll_ns = 0;
        self.last_good_ns = now_ns();
        true
    }

    fn on_tick(&mut self) {
        let now = now_ns();
        if let Some(m) = &self.metrics {
            let _ = hostcalls::record_metric(m.seconds_since_good_poll, now.saturating_sub(self.last_good_ns) / 1_000_000_000);
        }
        if matches!(self.waiting, Some(Waiting::Nothing)) && now >= self.next_poll_ns {
            self.poll(now);
        }
    }
}

impl Poller {
    fn poll(&mut self, now: u64) {
        let Some(s) = &self.settings else { return };
        let Some(reg) = &s.cfg.registry else { return };
        self.next_poll_ns = now + reg.poll_seconds as u64 * 1_000_000_000;
        if let Some(m) = &self.metrics {
            let _ = hostcalls::increment_metric(m.polls, 1);
        }
        match self.get(&reg.path.clone()) {
            Ok(token) => self.waiting = Some(Waiting::Manifest { token }),
            Err(why) => {
                self.refuse(None, Refusal::Unreachable(why));
                self.waiting = Some(Waiting::Nothing);
            }
        }
    }

    fn get(&self, path: &str) -> Result<u32, String> {
        let Some(reg) = self.settings.as_ref().and_then(|s| s.cfg.registry.as_ref()) else { return Err("no registry".into()) };
        let headers = vec![(":method", "GET"), (":path", path), (":authority", reg.authority.as_str()), ("accept", "application/json, application/octet-stream")];
        hostcalls::dispatch_http_call(&reg.cluster, headers, None, vec![], Duration::from_millis(reg.timeout_ms as u64))
            .map_err(|e| format!("cannot call cluster `{}`: {e:?}", reg.cluster))
    }

    fn on_manifest(&mut self, answer: Result<Vec<u8>, String>) {
        self.waiting = Some(Waiting::Nothing);
        let Some(s) = &self.settings else { return };
        let body = match answer {
            Ok(b) => b,
            Err(why) => return self.refuse(None, Refusal::Unreachable(format!("manifest: {why}"))),
        };
        let manifest = match registry::verify_envelope(&body, &s.keys) {
            Ok(m) => m,
            Err(r) => return self.refuse(None, r),
        };
        match self.last_sequence {
            Some(last) if manifest.sequence < last => {
                return self.refuse(None, Refusal::Rollback { name: "manifest sequence".into(), have: last, got: manifest.sequence });
            }
            Some(last) if manifest.sequence == last => {
                self.good_poll(manifest.sequence);
                return;
            }
            _ => {}
        }
        let configured = |name: &str| s.cfg.models.iter().any(|m| m.name.as_deref() == Some(name));
        let mut queue = VecDeque::new();
        let mut refusals = Vec::new();
        for entry in &manifest.models {
            if !configured(&entry.name) {
                refusals.push((entry.clone(), Refusal::SchemaMismatch(format!("no model named `{}` in the filter's configuration (models[].name)", entry.name))));
                continue;
            }
            let current = self.served.get(&(entry.name.clone(), entry.mode));
            if current.is_some_and(|(c, _)| c.version == entry.version && c.sha256 == entry.sha256) {
                continue;
            }
            let high = self.high_water.get(&entry.name).copied().unwrap_or(0);
            // A version equal to the high-water mark is allowed once more in the other mode
            // (a shadow promoted by re-publishing is a new, higher version anyway).
            if entry.version < high || current.is_some_and(|(c, _)| entry.version <= c.version) {
                refusals.push((entry.clone(), Refusal::Rollback { name: entry.name.clone(), have: high, got: entry.version }));
                continue;
            }
            queue.push_back(entry.clone());
        }
        for (entry, r) in refusals {
            self.refuse(Some(&entry), r);
        }
        // The manifest lists the whole set: a served (name, mode) it no longer lists stops
        // being served (the shadow a promotion drops; an active name falls back to its
        // bootstrap artifact, if any). One it lists keeps its version until the new one passes.
        let set = self
            .served
            .iter()
            .filter(|((name, mode), _)| manifest.models.iter().any(|e| e.name == *name && e.mode == *mode))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let plan = Plan { manifest, queue, set, fetching: None };
        self.next(plan);
    }

    /// Fetches the next queued artifact, or publishes the plan when none is left.
    fn next(&mut self, mut plan: Plan) {
        let Some(s) = &self.settings else { return };
        let Some(reg) = &s.cfg.registry else { return };
        while let Some(entry) = plan.queue.pop_front() {
            let path = reg.artifact_path(&entry.artifact);
            match self.get(&path) {
                Ok(token) => {
                    plan.fetching = Some(entry);
                    self.waiting = Some(Waiting::Artifact { token, plan });
                    return;
                }
                Err(why) => self.refuse(Some(&entry), Refusal::Unreachable(why)),
            }
        }
        self.publish(plan);
    }

    fn on_artifact(&mut self, mut plan: Plan, answer: Result<Vec<u8>, String>) {
        self.waiting = Some(Waiting::Nothing);
        let Some(entry) = plan.fetching.take() else { return };
        match answer.map_err(|why| Refusal::Unreachable(format!("{}: {why}", entry.artifact))).and_then(|bytes| self.check(&entry, bytes)) {
            Ok(bytes) => {
                plan.set.insert((entry.name.clone(), entry.mode), (entry, bytes));
            }
            Err(r) => self.refuse(Some(&entry), r),
        }
        self.next(plan);
    }

    /// Everything but the signature, which covered the entry: size, SHA-256, validation, name,
    /// schema hash, hash key, golden rows (`registry::check_artifact`), then whether this
    /// filter's feature catalogue computes every feature the model reads.
    fn check(&self, entry: &ManifestModel, bytes: Vec<u8>) -> Result<Vec<u8>, Refusal> {
        let Some(s) = &self.settings else { return Err(Refusal::Malformed("not configured".into())) };
        let max = s.cfg.registry.as_ref().map_or(0, |r| r.max_artifact_bytes);
        let model = registry::check_artifact(entry, &bytes, max, Some(&s.hash_key_id))?;
        let e = model.ensemble();
        let mut schema = FeatureSchema::new(s.cfg.hash_key.as_bytes());
        for (j, spec) in e.features().iter().enumerate() {
            schema.slot(e.feature_name(j), spec.buckets).map_err(|err| Refusal::SchemaMismatch(format!("{} v{}: {err}", entry.name, entry.version)))?;
        }
        Ok(bytes)
    }

    fn publish(&mut self, plan: Plan) {
        let sequence = plan.manifest.sequence;
        let changed = plan.set.len() != self.served.len() || plan.set.iter().any(|(k, (e, _))| self.served.get(k).is_none_or(|(c, _)| c.version != e.version || c.sha256 != e.sha256));
        if changed {
            let accepted: Vec<Accepted<'_>> = plan
                .set
                .values()
                .map(|(e, bytes)| Accepted { name: &e.name, version: e.version, mode: e.mode, sha256: &e.sha256, bytes })
                .collect();
            let (writes, record) = self.publisher.publish(sequence, &accepted);
            // Chunks first, the record last: a worker that sees the record finds every chunk.
            for (key, value) in &writes {
                if let Err(e) = hostcalls::set_shared_data(key, Some(value), None) {
                    log(LogLevel::Error, &format!("edgescore registry: shared data write of {key} failed: {e:?}; the previous models keep serving"));
                    return;
                }
            }
            let models: Vec<String> = record.models.iter().map(|m| format!("{}@{}{}", m.name, m.version, if m.mode == ModelMode::Shadow { " (shadow)" } else { "" })).collect();
            log(LogLevel::Info, &format!("edgescore registry: manifest {sequence} accepted, serving [{}] (generation {})", models.join(", "), record.generation));
            let fresh = plan.set.iter().filter(|(k, (e, _))| self.served.get(k).is_none_or(|(c, _)| c.version != e.version)).count();
            if let Some(m) = &self.metrics {
                let _ = hostcalls::increment_metric(m.models_accepted, fresh as i64);
            }
            for (e, _) in plan.set.values() {
                let high = self.high_water.entry(e.name.clone()).or_insert(0);
                *high = (*high).max(e.version);
            }
            self.served = plan.set;
        }
        if let Some(m) = &self.metrics {
            let _ = hostcalls::increment_metric(m.manifests_accepted, 1);
        }
        self.good_poll(sequence);
    }

    fn good_poll(&mut self, sequence: u64) {
        self.last_sequence = Some(sequence);
        self.last_good_ns = now_ns();
        if let Some(m) = &self.metrics {
            let _ = hostcalls::record_metric(m.manifest_sequence, sequence);
            let _ = hostcalls::record_metric(m.seconds_since_good_poll, 0);
        }
    }

    fn refuse(&self, entry: Option<&ManifestModel>, r: Refusal) {
        let what = entry.map_or_else(|| "manifest".to_string(), |e| format!("{} v{} ({})", e.name, e.version, if e.mode == ModelMode::Shadow { "shadow" } else { "active" }));
        log(LogLevel::Warn, &format!("edgescore registry: refused {what}: {}: {r}; the previous models keep serving", r.reason()));
        if let (Some(m), Some(i)) = (&self.metrics, registry::REASONS.iter().position(|x| *x == r.reason())) {
            let _ = hostcalls::increment_metric(m.refused[i], 1);
        }
    }
}

fn log(level: LogLevel, message: &str) {
    let _ = hostcalls::log(level, message);
}
