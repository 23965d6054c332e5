//! The verified bots' key directories of a group of filter configurations (`poll_group`), on
//! Envoy's main thread: every `refresh_seconds` each directory is fetched with the leading
//! configuration's HTTP callout; what to take is the core's decision ([`DirectoryFetch`], the
//! same as the Wasm filter's service VM). The keys of every good directory go to every worker's
//! slot of every configuration of the group ([`Workers::set_directory`]). A refused answer keeps
//! the last good keys, counts a refusal by reason and logs one line.
//!
//! Each method takes the group's live configurations, the leading one first (as `poller`).
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
}

impl Directories {
    pub fn new(cfg: &VerifiedBotsConfig) -> Directories {
        envoy::log(LOG_INFO, &format!("edgescore verified bots: {}", cfg.describe()));
        Directories { fetch: DirectoryFetch::new(cfg), calls: Vec::new() }
    }

    /// Sends the requests of the directories due now.
    pub fn tick(&mut self, fs: &[Arc<Filter>]) {
        let f = &*fs[0];
        let timeout_ms = self.fetch.timeout_ms() as u64;
        for index in self.fetch.due(unix_now_s()) {
            let d = self.fetch.source(index);
            match f.envoy.get(&d.cluster, &d.path, d.authority(), timeout_ms) {
                Ok(id) => self.calls.push((id, index)),
                Err(code) => {
                    let why = format!("cannot call cluster `{}` (callout result {code})", d.cluster);
                    self.take(fs, index, Err(why), unix_now_s());
                }
            }
        }
    }

    /// The leading configuration is gone with its callouts: their directories are due again.
    pub fn forget_callouts(&mut self) {
        for (_, index) in self.calls.drain(..) {
            self.fetch.forget(index);
        }
    }

    /// A configuration joining the group: the keys taken so far.
    pub fn hand_over(&self, f: &Filter) {
        if self.fetch.ready() > 0 {
            f.workers.set_directory(&Arc::new(self.fetch.merged()));
        }
    }

    /// The answer to callout `id`, if it is one of these; `false` otherwise.
    pub fn answer(&mut self, fs: &[Arc<Filter>], id: u64, answer: &Result<Vec<u8>, String>) -> bool {
        let Some(at) = self.calls.iter().position(|(c, _)| *c == id) else { return false };
        let (_, i) = self.calls.swap_remove(at);
        self.take(fs, i, answer.as_deref().map_err(String::clone), unix_now_s());
        true
    }

    fn take(&mut self, fs: &[Arc<Filter>], i: usize, answer: Result<&[u8], String>, now_s: u64) {
        let f = &*fs[0];
        let name = self.fetch.source(i).name.clone();
        match self.fetch.answer(i, answer, now_s) {
            Ok(changed) => {
                f.metrics.add_now(&f.envoy, f.metrics.directories_accepted, 1);
                if changed {
                    let merged = Arc::new(self.fetch.merged());
                    for m in fs {
                        m.workers.set_directory(&merged);
                    }
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
