//! The poller's side of the key directories, without I/O: which directory is due, what to make
//! of its answer, and the keys to hand to the workers. The glue (the Wasm service VM, the
//! native module's main thread) does the HTTP requests and counts the refusals by
//! [`DirectoryRefusal::reason`]. A refused answer keeps the directory's last good keys.

use super::directory::{Directory, DirectoryError};
use crate::config::verified_bots::{DirectoryConfig, VerifiedBotsConfig};

/// Why a directory's answer was not taken (its last good keys stay).
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum DirectoryRefusal {
    /// The call failed or answered other than 200: why.
    #[error("{0}")]
    Unreachable(String),
    #[error("larger than max_bytes ({max})")]
    TooLarge { max: usize },
    #[error("{0}")]
    Invalid(DirectoryError),
}

/// Every [`DirectoryRefusal::reason`], in order: define the per-reason metrics up front.
pub const DIRECTORY_REASONS: [&str; 6] = ["unreachable", "too_large", "not_jwks", "too_many_keys", "bad_key", "no_key"];

impl DirectoryRefusal {
    /// The metric label (one of [`DIRECTORY_REASONS`]).
    pub fn reason(&self) -> &'static str {
        DIRECTORY_REASONS[match self {
            DirectoryRefusal::Unreachable(_) => 0,
            DirectoryRefusal::TooLarge { .. } => 1,
            DirectoryRefusal::Invalid(DirectoryError::NotJwks(_)) => 2,
            DirectoryRefusal::Invalid(DirectoryError::TooManyKeys) => 3,
            DirectoryRefusal::Invalid(DirectoryError::BadKey { .. }) => 4,
            DirectoryRefusal::Invalid(DirectoryError::NoKey) => 5,
        }]
    }
}

/// A directory that failed with no good keys yet is tried again this soon (seconds), not a
/// whole `refresh_seconds` later.
const RETRY_S: u64 = 10;

/// The directories' fetch state.
pub struct DirectoryFetch {
    sources: Vec<DirectoryConfig>,
    max_bytes: usize,
    refresh_s: u64,
    timeout_ms: u32,
    /// Per directory: its last good keys, when to fetch it next, whether a fetch is out.
    good: Vec<Option<Directory>>,
    due_s: Vec<u64>,
    in_flight: Vec<bool>,
}

impl DirectoryFetch {
    pub fn new(cfg: &VerifiedBotsConfig) -> DirectoryFetch {
        let n = cfg.directories.len();
        DirectoryFetch {
            sources: cfg.directories.clone(),
            max_bytes: cfg.max_bytes as usize,
            refresh_s: cfg.refresh_seconds as u64,
            timeout_ms: cfg.timeout_ms,
            good: vec![None; n],
            due_s: vec![0; n],
            in_flight: vec![false; n],
        }
    }

    /// The directories to fetch now (each marked as fetching until its [`DirectoryFetch::answer`]).
    pub fn due(&mut self, now_s: u64) -> Vec<usize> {
        let due: Vec<usize> = (0..self.sources.len()).filter(|&i| !self.in_flight[i] && now_s >= self.due_s[i]).collect();
        for &i in &due {
            self.in_flight[i] = true;
            self.due_s[i] = now_s + self.refresh_s;
        }
        due
    }

    /// Directory `i`'s fetch will never be answered (the glue lost its callout): due again now.
    pub fn forget(&mut self, i: usize) {
        if let Some(in_flight) = self.in_flight.get_mut(i) {
            *in_flight = false;
            self.due_s[i] = 0;
        }
    }

    pub fn source(&self, i: usize) -> &DirectoryConfig {
        &self.sources[i]
    }

    pub fn timeout_ms(&self) -> u32 {
        self.timeout_ms
    }

    /// Bytes of an answer worth reading: one more than `max_bytes` is refused as too large.
    pub fn read_limit(&self) -> usize {
        self.max_bytes + 1
    }

    /// The answer to directory `i`'s fetch: `Ok(true)` when the keys changed (hand
    /// [`DirectoryFetch::merged`] to the workers), `Ok(false)` when they are the same.
    pub fn answer(&mut self, i: usize, answer: Result<&[u8], String>, now_s: u64) -> Result<bool, DirectoryRefusal> {
        let Some(source) = self.sources.get(i) else { return Ok(false) };
        self.in_flight[i] = false;
        let taken = answer.map_err(DirectoryRefusal::Unreachable).and_then(|body| {
            if body.len() > self.max_bytes {
                return Err(DirectoryRefusal::TooLarge { max: self.max_bytes });
            }
            Directory::from_jwks(&source.name, body).map_err(DirectoryRefusal::Invalid)
        });
        match taken {
            Ok(d) => {
                let changed = !self.good[i].as_ref().is_some_and(|old| old.same_keys(&d));
                self.good[i] = Some(d);
                Ok(changed)
            }
            Err(r) => {
                if self.good[i].is_none() {
                    self.due_s[i] = self.due_s[i].min(now_s + RETRY_S);
                }
                Err(r)
            }
        }
    }

    /// Every directory's last good keys together (a keyid in two keeps the first's agent).
    pub fn merged(&self) -> Directory {
        self.good.iter().flatten().fold(Directory::default(), |all, d| all.merged(d))
    }

    /// How many directories have good keys.
    pub fn ready(&self) -> usize {
        self.good.iter().flatten().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn cfg(extra: &str) -> VerifiedBotsConfig {
        let json = format!(r#"{{"directories":[{{"name":"a","cluster":"c"}},{{"name":"b","cluster":"c","path":"/b"}}]{extra}}}"#);
        serde_json::from_str(&json).unwrap()
    }

    fn jwks(seed: u8) -> String {
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]).verifying_key();
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.as_bytes());
        format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}"}}]}}"#)
    }

    #[test]
    fn fetched_refreshed_and_kept_on_failure() {
        let mut f = DirectoryFetch::new(&cfg(r#","refresh_seconds":60,"max_bytes":300"#));
        assert_eq!(f.due(100), [0, 1]);
        assert_eq!(f.due(100), [] as [usize; 0], "in flight");
        assert_eq!(f.answer(0, Ok(jwks(1).as_bytes()), 100), Ok(true));
        assert_eq!(f.answer(1, Err("HTTP 503".into()), 100).unwrap_err().reason(), "unreachable");
        assert_eq!((f.ready(), f.merged().keys().len()), (1, 1));
        // b failed with nothing good yet: retried soon; a in a refresh.
        assert_eq!(f.due(109), [] as [usize; 0]);
        assert_eq!(f.due(110), [1]);
        assert_eq!(f.answer(1, Ok(jwks(2).as_bytes()), 110), Ok(true));
        assert_eq!(f.due(160), [0]);
        assert_eq!(f.answer(0, Ok(jwks(1).as_bytes()), 160), Ok(false), "the same keys");
        // Refusals by reason; the last good keys stay.
        for (body, reason) in [("x".repeat(301), "too_large"), ("[]".to_string(), "not_jwks"), (r#"{"keys":[]}"#.to_string(), "no_key")] {
            f.due(10_000);
            assert_eq!(f.answer(0, Ok(body.as_bytes()), 10_000).unwrap_err().reason(), reason);
        }
        let bad = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AA"}]}"#;
        assert_eq!(f.answer(0, Ok(bad.as_bytes()), 10_000).unwrap_err().reason(), "bad_key");
        let merged = f.merged();
        assert_eq!(merged.keys().len(), 2);
        assert!(merged.keys().iter().any(|k| k.agent == "a") && merged.keys().iter().any(|k| k.agent == "b"));
        // What the workers receive is what the poller merged.
        assert!(Directory::decode(&merged.encode()).unwrap().same_keys(&merged));
        assert!(Directory::decode(&[3, b'a']).is_none());
    }

    #[test]
    fn every_reason_is_listed() {
        let refusals = [
            DirectoryRefusal::Unreachable(String::new()),
            DirectoryRefusal::TooLarge { max: 0 },
            DirectoryRefusal::Invalid(DirectoryError::NotJwks(String::new())),
            DirectoryRefusal::Invalid(DirectoryError::TooManyKeys),
            DirectoryRefusal::Invalid(DirectoryError::BadKey { index: 0, why: String::new() }),
            DirectoryRefusal::Invalid(DirectoryError::NoKey),
        ];
        assert_eq!(refusals.map(|r| r.reason()), DIRECTORY_REASONS);
    }
}
