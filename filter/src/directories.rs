//! The verified bots' key directories, fetched by the registry poller's service VM: every
//! `refresh_seconds` each directory is fetched from its cluster; what to take is the core's
//! decision ([`DirectoryFetch`]). The keys of every good directory go to the workers through
//! shared data ([`DIRECTORY_KEY`]), read on their tick. A refused answer keeps the last good
//! keys, counts a refusal by reason and logs one line.

use crate::metrics::DirectoryMetrics;
use edgescore_core::config::VerifiedBotsConfig;
use edgescore_core::signatures::{DirectoryFetch, DIRECTORY_KEY, DIRECTORY_REASONS};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, LogLevel, MapType};
use std::time::Duration;

pub struct Directories {
    fetch: DirectoryFetch,
    metrics: DirectoryMetrics,
    /// The calls in flight: (token, directory).
    calls: Vec<(u32, usize)>,
}

impl Directories {
    pub fn new(cfg: &VerifiedBotsConfig) -> Directories {
        log(LogLevel::Info, &format!("edgescore verified bots: {}", cfg.describe()));
        Directories { fetch: DirectoryFetch::new(cfg), metrics: DirectoryMetrics::define(), calls: Vec::new() }
    }

    /// Fetches the directories that are due.
    pub fn tick(&mut self, now_s: u64) {
        for i in self.fetch.due(now_s) {
            let d = self.fetch.source(i);
            let headers = vec![(":method", "GET"), (":path", d.path.as_str()), (":authority", d.authority()), ("accept", "application/http-message-signatures-directory+json, application/json")];
            let timeout = Duration::from_millis(self.fetch.timeout_ms() as u64);
            match hostcalls::dispatch_http_call(&d.cluster, headers, None, vec![], timeout) {
                Ok(token) => self.calls.push((token, i)),
                Err(e) => {
                    let why = format!("cannot call cluster `{}`: {e:?}", d.cluster);
                    self.take(i, Err(why), now_s);
                }
            }
        }
    }

    /// The answer to call `token`, if it is one of these; `false` otherwise.
    pub fn answer(&mut self, token: u32, num_headers: usize, body_size: usize, now_s: u64) -> bool {
        let Some(at) = self.calls.iter().position(|(t, _)| *t == token) else { return false };
        let (_, i) = self.calls.swap_remove(at);
        let status = if num_headers == 0 { None } else { hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status").ok().flatten() };
        // Never more than one byte past the limit is read: that byte refuses it as too large.
        let read = body_size.min(self.fetch.read_limit());
        let body = if read > 0 { hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, read).ok().flatten() } else { None };
        let answer = match status {
            Some(s) if s == "200" => Ok(body.unwrap_or_default()),
            Some(s) => Err(format!("HTTP {s}")),
            None => Err("no response (connection failure or timeout)".to_string()),
        };
        self.take(i, answer, now_s);
        true
    }

    fn take(&mut self, i: usize, answer: Result<Vec<u8>, String>, now_s: u64) {
        let name = self.fetch.source(i).name.clone();
        match self.fetch.answer(i, answer.as_deref().map_err(String::clone), now_s) {
            Ok(changed) => {
                let _ = hostcalls::increment_metric(self.metrics.accepted, 1);
                if changed {
                    let merged = self.fetch.merged();
                    if let Err(e) = hostcalls::set_shared_data(DIRECTORY_KEY, Some(&merged.encode()), None) {
                        log(LogLevel::Error, &format!("edgescore verified bots: shared data write failed: {e:?}; the previous keys stay"));
                        return;
                    }
                    let _ = hostcalls::record_metric(self.metrics.keys, merged.keys().len() as u64);
                    log(LogLevel::Info, &format!("edgescore verified bots: directory `{name}` taken; {} key(s) from {} director(ies)", merged.keys().len(), self.fetch.ready()));
                }
            }
            Err(r) => {
                log(LogLevel::Warn, &format!("edgescore verified bots: refused directory `{name}`: {}: {r}; its last good keys stay", r.reason()));
                if let Some(i) = DIRECTORY_REASONS.iter().position(|x| *x == r.reason()) {
                    let _ = hostcalls::increment_metric(self.metrics.refused[i], 1);
                }
            }
        }
    }
}

fn log(level: LogLevel, message: &str) {
    let _ = hostcalls::log(level, message);
}
