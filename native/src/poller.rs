//! The registry poller of a group of filter configurations (`poll_group`), on Envoy's main
//! thread: every `poll_seconds` it fetches the signed manifest with the leading configuration's
//! HTTP callout to the `registry` cluster, then the artifacts of versions it has not accepted;
//! what to accept is the core's decision ([`Poll`], the same checks as the Wasm filter's service
//! VM). An accepted set becomes a scorer per worker of every configuration of the group
//! ([`Filter::offer`]); each worker swaps before its next request.
//!
//! Each method takes the group's live configurations, the leading one first: its callouts, its
//! metrics (which every configuration of the group defines alike).
//!
//! A refusal never hurts serving: the refused version is skipped, the previous one keeps
//! serving, a counter per reason increments and one log line says what and why.

use crate::abi::{LOG_INFO, LOG_WARN};
use crate::envoy;
use crate::filter::Filter;
use edgescore_core::config::{PluginConfig, RegistryConfig};
use edgescore_core::ensemble::Model;
use edgescore_core::poll::{refused_what, Next, Plan, Poll, Refused};
use edgescore_core::registry::{ModelMode, Refusal, REASONS};
use edgescore_core::scorer::RegistryModel;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

pub struct Poller {
    reg: RegistryConfig,
    poll: Poll,
    /// The callout in flight, if any.
    waiting: Option<u64>,
    next_poll: Option<Instant>,
    last_good: Instant,
    generation: u64,
    /// The served set's models by SHA-256, loaded at the last publish: a manifest that changes
    /// one model reloads that one only (a load validates and derives the walk, milliseconds for
    /// a large model on the main thread, which shares the CPUs with the workers).
    loaded: HashMap<String, Model>,
}

impl Poller {
    pub fn new(cfg: &PluginConfig, reg: &RegistryConfig) -> Poller {
        Poller {
            reg: reg.clone(),
            poll: Poll::new(cfg).expect("a configuration with a registry"),
            waiting: None,
            next_poll: None,
            last_good: Instant::now(),
            generation: 0,
            loaded: HashMap::new(),
        }
    }

    pub fn tick(&mut self, fs: &[Arc<Filter>]) {
        let f = &*fs[0];
        let now = Instant::now();
        f.envoy.set_gauge(f.metrics.seconds_since_good_poll, now.duration_since(self.last_good).as_secs());
        if self.waiting.is_some() || self.next_poll.is_some_and(|t| now < t) {
            return;
        }
        self.next_poll = Some(now + std::time::Duration::from_secs(self.reg.poll_seconds as u64));
        f.metrics.add_now(&f.envoy, f.metrics.polls, 1);
        let path = self.reg.path.clone();
        if let Err(why) = self.get(f, &path) {
            self.refuse(f, vec![(None, Refusal::Unreachable(why))]);
        }
    }

    pub fn answer(&mut self, fs: &[Arc<Filter>], id: u64, answer: Result<Vec<u8>, String>) {
        let f = &*fs[0];
        if self.waiting != Some(id) {
            return;
        }
        self.waiting = None;
        let mut refused = Vec::new();
        let next = if self.poll.busy() { self.poll.artifact(answer, &mut refused) } else { self.poll.manifest(answer, unix_now_s(), &mut refused) };
        self.refuse(f, refused);
        self.follow(fs, next);
    }

    /// The leading configuration is gone with its callout: the next one asks again.
    pub fn forget_callout(&mut self) {
        self.waiting = None;
        self.next_poll = None;
    }

    /// A configuration joining the group: the models the registry serves, from its first
    /// request on (nothing before the first accepted manifest).
    pub fn hand_over(&self, f: &Filter) {
        let registry: Vec<RegistryModel<'_>> = self
            .poll
            .served()
            .values()
            .filter_map(|(e, _)| Some(RegistryModel { name: &e.name, version: e.version, shadow: e.mode == ModelMode::Shadow, model: self.loaded.get(&e.sha256)? }))
            .collect();
        if registry.is_empty() {
            return;
        }
        match f.offer(&registry) {
            Ok(ids) => envoy::log(LOG_INFO, &format!("edgescore: registry generation {} serving [{}] (a configuration joined)", self.generation, ids.join(", "))),
            Err(e) => {
                envoy::log(LOG_WARN, &format!("edgescore: registry generation {} refused by this configuration: {e}", self.generation));
                f.metrics.add_now(&f.envoy, f.metrics.swaps_refused, 1);
            }
        }
    }

    fn follow(&mut self, fs: &[Arc<Filter>], mut next: Next) {
        let f = &*fs[0];
        loop {
            match next {
                Next::Idle => return,
                Next::Current { sequence, new } => {
                    if new {
                        f.metrics.add_now(&f.envoy, f.metrics.manifests_accepted, 1);
                    }
                    return self.good_poll(f, sequence);
                }
                Next::Publish(plan) => return self.publish(fs, plan),
                Next::Fetch(path) => match self.get(f, &path) {
                    Ok(()) => return,
                    Err(why) => {
                        let mut refused = Vec::new();
                        next = self.poll.artifact(Err(why), &mut refused);
                        self.refuse(f, refused);
                    }
                },
            }
        }
    }

    fn get(&mut self, f: &Filter, path: &str) -> Result<(), String> {
        let id = f
            .envoy
            .get(&self.reg.cluster, path, &self.reg.authority, self.reg.timeout_ms as u64)
            .map_err(|code| format!("cannot call cluster `{}` (callout result {code})", self.reg.cluster))?;
        self.waiting = Some(id);
        Ok(())
    }

    fn publish(&mut self, fs: &[Arc<Filter>], plan: Box<Plan>) {
        let f = &*fs[0];
        let sequence = plan.sequence();
        let mut loaded = Vec::with_capacity(plan.set().len());
        for (entry, bytes) in plan.set().values() {
            if let Some(model) = self.loaded.remove(&entry.sha256) {
                loaded.push((entry, model));
                continue;
            }
            // The poll validated these exact bytes: only a different build could refuse them.
            match Model::load(bytes) {
                Ok(model) => loaded.push((entry, model)),
                Err(e) => {
                    envoy::log(LOG_WARN, &format!("edgescore registry: manifest {sequence}: {} v{}: {e}; the previous models keep serving", entry.name, entry.version));
                    f.metrics.add_now(&f.envoy, f.metrics.swaps_refused, 1);
                    return;
                }
            }
        }
        let registry: Vec<RegistryModel<'_>> =
            loaded.iter().map(|(e, model)| RegistryModel { name: &e.name, version: e.version, shadow: e.mode == ModelMode::Shadow, model }).collect();
        self.generation += 1;
        let models: Vec<String> = loaded.iter().map(|(m, _)| format!("{}@{}{}", m.name, m.version, if m.mode == ModelMode::Shadow { " (shadow)" } else { "" })).collect();
        // Every configuration of the group parsed the same JSON: each accepts what the first does.
        match fs.iter().map(|m| m.offer(&registry)).collect::<Result<Vec<_>, _>>() {
            Ok(ids) => {
                envoy::log(LOG_INFO, &format!("edgescore registry: manifest {sequence} accepted, serving [{}] (generation {})", models.join(", "), self.generation));
                envoy::log(LOG_INFO, &format!("edgescore: registry generation {} (manifest {sequence}) serving [{}]", self.generation, ids[0].join(", ")));
            }
            Err(e) => {
                envoy::log(
                    LOG_WARN,
                    &format!("edgescore: registry generation {} refused by this configuration: {e}; the previous models keep serving", self.generation),
                );
                f.metrics.add_now(&f.envoy, f.metrics.swaps_refused, 1);
                return;
            }
        }
        // The gauges name the versions served; 0 for a model the new set no longer has.
        for (name, active, shadow) in &f.metrics.versions {
            let version = |mode: ModelMode| loaded.iter().find(|(e, _)| e.name == *name && e.mode == mode).map_or(0, |(e, _)| e.version);
            f.envoy.set_gauge(*active, version(ModelMode::Active));
            f.envoy.set_gauge(*shadow, version(ModelMode::Shadow));
        }
        drop(registry);
        self.loaded = loaded.into_iter().map(|(e, model)| (e.sha256.clone(), model)).collect();
        let fresh = self.poll.commit(*plan);
        f.metrics.add_now(&f.envoy, f.metrics.models_accepted, fresh as u64);
        f.metrics.add_now(&f.envoy, f.metrics.manifests_accepted, 1);
        self.good_poll(f, sequence);
    }

    fn good_poll(&mut self, f: &Filter, sequence: u64) {
        self.last_good = Instant::now();
        f.envoy.set_gauge(f.metrics.manifest_sequence, sequence);
        f.envoy.set_gauge(f.metrics.seconds_since_good_poll, 0);
    }

    fn refuse(&self, f: &Filter, refused: Vec<Refused>) {
        for (entry, r) in refused {
            envoy::log(LOG_WARN, &format!("edgescore registry: refused {}: {}: {r}; the previous models keep serving", refused_what(entry.as_ref()), r.reason()));
            if let Some(i) = REASONS.iter().position(|x| *x == r.reason()) {
                f.metrics.add_now(&f.envoy, f.metrics.refused[i], 1);
            }
        }
    }
}

/// The wall clock for the manifest's expiry, seconds since the Unix epoch. A clock before 1970
/// is broken: it reads as the end of time, so every manifest is refused as expired rather than
/// every expiry ignored.
fn unix_now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(u64::MAX, |d| d.as_secs())
}
