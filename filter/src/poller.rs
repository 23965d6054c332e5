//! The registry poller: the root context of the singleton service VM (`bootstrap_extensions`,
//! `envoy.bootstrap.wasm`, `singleton: true`, the same `vm_id` and `.wasm` as the filter).
//! Every `poll_seconds` it fetches the signed manifest and the artifacts of versions it has not
//! accepted yet; what to accept is decided by the core ([`Poll`]), which it hands the answers
//! to. It hands the accepted set to the workers through shared data
//! (`edgescore_core::handoff`). All of this runs on Envoy's main thread, never on a worker's
//! event loop: a model update costs the request path nothing here.
//!
//! A refusal never hurts serving: the refused version is skipped, the previously accepted one
//! keeps serving, a counter per reason increments and one log line says what and why.
//!
//! With `verified_bots`, the same VM fetches the key directories too (`directories`); a
//! configuration may have either section or both.

use crate::directories::Directories;
use crate::host::now_ns;
use crate::metrics::PollerMetrics;
use edgescore_core::config::PluginConfig;
use edgescore_core::handoff::{Accepted, Publisher};
use edgescore_core::poll::{refused_what, Next, Plan, Poll, Refused};
use edgescore_core::registry::{ModelMode, Refusal, REASONS};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, RootContext};
use proxy_wasm::types::{BufferType, LogLevel, MapType};
use std::time::Duration;

/// What the poller is waiting for.
#[derive(PartialEq)]
enum Waiting {
    Nothing,
    Manifest { token: u32 },
    Artifact { token: u32 },
}

#[derive(Default)]
pub struct Poller {
    cfg: Option<PluginConfig>,
    poll: Option<Poll>,
    metrics: Option<PollerMetrics>,
    waiting: Option<Waiting>,
    publisher: Publisher,
    directories: Option<Directories>,
    next_poll_ns: u64,
    last_good_ns: u64,
}

impl Context for Poller {
    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body_size: usize, _num_trailers: usize) {
        if let Some(d) = self.directories.as_mut() {
            if d.answer(token, num_headers, body_size, now_ns() / 1_000_000_000) {
                return;
            }
        }
        let status = if num_headers == 0 { None } else { hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status").ok().flatten() };
        let body = if body_size > 0 { hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size).ok().flatten() } else { None };
        let answer = match status {
            Some(s) if s == "200" => Ok(body.unwrap_or_default()),
            Some(s) => Err(format!("HTTP {s}")),
            None => Err("no response (connection failure or timeout)".to_string()),
        };
        let Some(poll) = self.poll.as_mut() else { return };
        let mut refused = Vec::new();
        let next = match self.waiting {
            Some(Waiting::Manifest { token: t }) if t == token => poll.manifest(answer, now_ns() / 1_000_000_000, &mut refused),
            Some(Waiting::Artifact { token: t }) if t == token => poll.artifact(answer, &mut refused),
            _ => return,
        };
        self.waiting = Some(Waiting::Nothing);
        self.refuse(refused);
        self.follow(next);
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
        if cfg.registry.is_none() && cfg.verified_bots.is_none() {
            log(LogLevel::Error, "edgescore registry: configuration refused: registry: required for the registry service VM (or verified_bots)");
            return false;
        }
        if let Some(reg) = &cfg.registry {
            log(LogLevel::Info, &format!("edgescore registry: {}", reg.describe()));
            self.metrics.get_or_insert_with(PollerMetrics::define);
        }
        self.poll = Poll::new(&cfg);
        self.directories = cfg.verified_bots.as_ref().map(Directories::new);
        self.cfg = Some(cfg);
        self.waiting = Some(Waiting::Nothing);
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
        if self.poll.is_some() && self.waiting == Some(Waiting::Nothing) && now >= self.next_poll_ns {
            self.start_poll(now);
        }
        if let Some(d) = self.directories.as_mut() {
            d.tick(now / 1_000_000_000);
        }
    }
}

impl Poller {
    fn start_poll(&mut self, now: u64) {
        let Some(reg) = self.cfg.as_ref().and_then(|c| c.registry.as_ref()) else { return };
        self.next_poll_ns = now + reg.poll_seconds as u64 * 1_000_000_000;
        if let Some(m) = &self.metrics {
            let _ = hostcalls::increment_metric(m.polls, 1);
        }
        let path = reg.path.clone();
        match self.get(&path) {
            Ok(token) => self.waiting = Some(Waiting::Manifest { token }),
            Err(why) => self.refuse(vec![(None, Refusal::Unreachable(why))]),
        }
    }

    /// Does what the core asks next: fetch an artifact, publish a set, or record a good poll.
    fn follow(&mut self, mut next: Next) {
        loop {
            match next {
                Next::Idle => return,
                Next::Current { sequence, new } => {
                    if new {
                        if let Some(m) = &self.metrics {
                            let _ = hostcalls::increment_metric(m.manifests_accepted, 1);
                        }
                    }
                    return self.good_poll(sequence);
                }
                Next::Publish(plan) => return self.publish(plan),
                Next::Fetch(path) => match self.get(&path) {
                    Ok(token) => {
                        self.waiting = Some(Waiting::Artifact { token });
                        return;
                    }
                    Err(why) => {
                        let Some(poll) = self.poll.as_mut() else { return };
                        let mut refused = Vec::new();
                        next = poll.artifact(Err(why), &mut refused);
                        self.refuse(refused);
                    }
                },
            }
        }
    }

    fn get(&self, path: &str) -> Result<u32, String> {
        let Some(reg) = self.cfg.as_ref().and_then(|c| c.registry.as_ref()) else { return Err("no registry".into()) };
        let headers = vec![(":method", "GET"), (":path", path), (":authority", reg.authority.as_str()), ("accept", "application/json, application/octet-stream")];
        hostcalls::dispatch_http_call(&reg.cluster, headers, None, vec![], Duration::from_millis(reg.timeout_ms as u64))
            .map_err(|e| format!("cannot call cluster `{}`: {e:?}", reg.cluster))
    }

    fn publish(&mut self, plan: Box<Plan>) {
        let sequence = plan.sequence();
        let accepted: Vec<Accepted<'_>> =
            plan.set().values().map(|(e, bytes)| Accepted { name: &e.name, version: e.version, mode: e.mode, sha256: &e.sha256, bytes }).collect();
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
        let Some(poll) = self.poll.as_mut() else { return };
        let fresh = poll.commit(*plan);
        if let Some(m) = &self.metrics {
            let _ = hostcalls::increment_metric(m.models_accepted, fresh as i64);
            let _ = hostcalls::increment_metric(m.manifests_accepted, 1);
        }
        self.good_poll(sequence);
    }

    fn good_poll(&mut self, sequence: u64) {
        self.last_good_ns = now_ns();
        if let Some(m) = &self.metrics {
            let _ = hostcalls::record_metric(m.manifest_sequence, sequence);
            let _ = hostcalls::record_metric(m.seconds_since_good_poll, 0);
        }
    }

    fn refuse(&self, refused: Vec<Refused>) {
        for (entry, r) in refused {
            log(LogLevel::Warn, &format!("edgescore registry: refused {}: {}: {r}; the previous models keep serving", refused_what(entry.as_ref()), r.reason()));
            if let (Some(m), Some(i)) = (&self.metrics, REASONS.iter().position(|x| *x == r.reason())) {
                let _ = hostcalls::increment_metric(m.refused[i], 1);
            }
        }
    }
}

fn log(level: LogLevel, message: &str) {
    let _ = hostcalls::log(level, message);
}
