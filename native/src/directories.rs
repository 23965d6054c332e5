//! The verified bots' key directories of one filter configuration, on Envoy's main thread:
//! every `refresh_seconds` each directory is fetched with Envoy's own HTTP callout; what to take
//! is the core's decision ([`DirectoryFetch`], the same as the Wasm filter's service VM). The
//! keys of every good directory go to every worker's slot ([`Workers::set_directory`]). A
//! refused answer keeps the last good keys, counts a refusal by reason and logs one line.
//!
//! Envoy may answer a callout inside the call that sends it (a cluster without a healthy host):
//! the caller holds no lock while it sends ([`Directories::begin`], [`Directories::sent`]), and an
//! answer that arrives for a callout not yet registered is kept until its id is known.
//!
//! [`Workers::set_directory`]: crate::workers::Workers::set_directory

use crate::abi::{LOG_INFO, LOG_WARN};
use crate::envoy;
use crate::filter::Filter;
use edgescore_core::config::VerifiedBotsConfig;
use edgescore_core::signatures::{DirectoryFetch, DIRECTORY_REASONS};
use std::sync::Arc;

pub struct Directories {
    fetch: DirectoryFetch,
    /// The callouts in flight: (callout id, directory).
    calls: Vec<(u64, usize)>,
    /// Between [`Directories::begin`] and [`Directories::end`]: callouts are being sent.
    sending: bool,
    /// Answers Envoy gave while a callout was being sent, before its id was known.
    early: Vec<(u64, Result<Vec<u8>, String>)>,
}

/// A directory request to send (`Filter::on_tick` sends it with no lock held).
pub struct Call {
    pub index: usize,
    pub cluster: String,
    pub path: String,
    pub authority: String,
    pub timeout_ms: u64,
}

impl Directories {
    pub fn new(cfg: &VerifiedBotsConfig) -> Directories {
        envoy::log(LOG_INFO, &format!("edgescore verified bots: {}", cfg.describe()));
        Directories { fetch: DirectoryFetch::new(cfg), calls: Vec::new(), sending: false, early: Vec::new() }
    }

    /// The directories due now, to send; [`Directories::end`] once they are sent.
    pub fn begin(&mut self) -> Vec<Call> {
        self.sending = true;
        let timeout_ms = self.fetch.timeout_ms() as u64;
        let due = self.fetch.due(unix_now_s());
        due.into_iter()
            .map(|index| {
                let d = self.fetch.source(index);
                Call { index, cluster: d.cluster.clone(), path: d.path.clone(), authority: d.authority().to_string(), timeout_ms }
            })
            .collect()
    }

    /// `call` was sent: its callout id, or Envoy's refusal to send it.
    pub fn sent(&mut self, f: &Filter, call: &Call, result: Result<u64, u32>) {
        match result {
            Ok(id) => match self.early.iter().position(|(e, _)| *e == id) {
                Some(at) => {
                    let (_, answer) = self.early.swap_remove(at);
                    self.take(f, call.index, answer.as_deref().map_err(String::clone), unix_now_s());
                }
                None => self.calls.push((id, call.index)),
            },
            Err(code) => {
                let why = format!("cannot call cluster `{}` (callout result {code})", call.cluster);
                self.take(f, call.index, Err(why), unix_now_s());
            }
        }
    }

    pub fn end(&mut self) {
        self.sending = false;
        self.early.clear();
    }

    /// The answer to callout `id`, if it is one of these; `false` otherwise.
    pub fn answer(&mut self, f: &Filter, id: u64, answer: &Result<Vec<u8>, String>) -> bool {
        let Some(at) = self.calls.iter().position(|(c, _)| *c == id) else {
            if self.sending {
                self.early.push((id, answer.clone()));
                return true;
            }
            return false;
        };
        let (_, i) = self.calls.swap_remove(at);
        self.take(f, i, answer.as_deref().map_err(String::clone), unix_now_s());
        true
    }

    fn take(&mut self, f: &Filter, i: usize, answer: Result<&[u8], String>, now_s: u64) {
        let name = self.fetch.source(i).name.clone();
        match self.fetch.answer(i, answer, now_s) {
            Ok(changed) => {
                f.metrics.add_now(&f.envoy, f.metrics.directories_accepted, 1);
                if changed {
                    let merged = Arc::new(self.fetch.merged());
                    f.workers.set_directory(&merged);
                    f.envoy.set_gauge(f.metrics.directory_keys, merged.keys().len() as u64);
                    envoy::log(LOG_INFO, &format!("edgescore verified bots: directory `{name}` taken; {} key(s) from {} director(ies)", merged.keys().len(), self.fetch.ready()));
                }
            }
            Err(r) => {
                envoy::log(LOG_WARN, &format!("edgescore verified bots: refused directory `{name}`: {}: {r}; its last good keys stay", r.reason()));
                if let Some(i) = DIRECTORY_REASONS.iter().position(|x| *x == r.reason()) {
                    f.metrics.add_now(&f.envoy, f.metrics.directory_refused[i], 1);
                }
            }
        }
    }
}

/// The wall clock, seconds since the Unix epoch (0 for a clock before 1970: every directory is
/// then due at once, as at start).
fn unix_now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}
