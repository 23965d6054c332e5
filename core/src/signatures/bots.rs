//! A worker's verified-bots state: the verifier (its reused signature base), the keys the poller
//! last delivered, and the counts of verified and refused signatures not yet handed to Envoy.
//! The glue calls [`Bots::check`] per request and puts the result in `Request::signature`.

use super::{Directory, Refusal, Verified, Verifier, REASONS};
use crate::config::{BotAction, PluginConfig};
use crate::request::HeaderMap;
use std::sync::Arc;

/// Counts since the last [`Bots::take_counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BotCounts {
    pub verified: u64,
    /// Per [`REASONS`] entry.
    pub refused: [u64; REASONS.len()],
}

pub struct Bots {
    verifier: Verifier,
    directory: Arc<Directory>,
    action: BotAction,
    counts: BotCounts,
}

impl Bots {
    /// `None` without a `verified_bots` section. No keys until the poller delivers some: every
    /// signature is refused as `unknown_key` until then.
    pub fn new(cfg: &PluginConfig) -> Option<Bots> {
        let v = cfg.verified_bots.as_ref()?;
        Some(Bots { verifier: Verifier::new(v.policy()), directory: Arc::default(), action: v.action, counts: BotCounts::default() })
    }

    /// [`Bots::new`] keeping `old`'s keys: a reconfigured worker verifies with what the poller
    /// last delivered until it delivers again.
    pub fn carry(old: Option<&Bots>, cfg: &PluginConfig) -> Option<Bots> {
        let mut bots = Bots::new(cfg)?;
        if let Some(old) = old {
            bots.directory = old.directory.clone();
        }
        Some(bots)
    }

    /// The keys to verify with from the next request on (off the request path).
    pub fn set_directory(&mut self, directory: Arc<Directory>) {
        self.directory = directory;
    }

    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    pub fn action(&self) -> BotAction {
        self.action
    }

    /// `None` for an unsigned request; the verified agent or why not otherwise, counted. No
    /// allocation.
    pub fn check(&mut self, headers: &HeaderMap<'_>, now_s: u64) -> Option<Result<Verified<'_>, Refusal>> {
        let result = self.verifier.verify(headers, now_s, &*self.directory).transpose()?;
        match &result {
            Ok(_) => self.counts.verified += 1,
            Err(r) => {
                if let Some(i) = REASONS.iter().position(|x| *x == r.reason()) {
                    self.counts.refused[i] += 1;
                }
            }
        }
        Some(result)
    }

    /// The counts since the last call, zeroed.
    pub fn take_counts(&mut self) -> BotCounts {
        std::mem::take(&mut self.counts)
    }
}
