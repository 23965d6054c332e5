//! The registry section of the plugin configuration (`registry`): where the signed manifest
//! is, which keys may sign it, how often to poll and how much work a worker does per tick.
//! Models are published to the registry, never written here, so a model update never changes
//! Envoy's configuration (docs/registry.md).

use super::error::ConfigError;
use crate::registry::{parse_public_key, PublicKey};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// Envoy cluster of the static HTTP server (or bucket) that serves the registry.
    pub cluster: String,
    /// Path of the signed manifest; artifact paths in it are relative to its directory.
    #[serde(default = "default_path")]
    pub path: String,
    /// `:authority` of the requests (the bucket's host name, for virtual-hosted buckets).
    #[serde(default = "default_authority")]
    pub authority: String,
    /// Seconds between two polls of the manifest (by the one service VM, not by workers).
    #[serde(default = "default_poll")]
    pub poll_seconds: u32,
    /// Timeout of each registry request.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u32,
    /// The keys that may sign the manifest: the JSON of each `NAME.pub` (`edgescore keygen`).
    /// Several keys let a team rotate: add the new key, publish with it, remove the old one.
    pub public_keys: Vec<serde_json::Value>,
    /// Largest artifact accepted.
    #[serde(default = "default_max_artifact")]
    pub max_artifact_bytes: u64,
    /// How often each worker looks for a new model (milliseconds; jittered per worker).
    #[serde(default = "default_check")]
    pub check_ms: u32,
    /// Bytes of a new model each worker copies per tick: bounds the pause a swap adds.
    #[serde(default = "default_slice")]
    pub slice_bytes: u32,
}

/// A worker copies at least one chunk per tick (`handoff::CHUNK_BYTES`).
const MIN_SLICE: u32 = 64 << 10;

/// A key as written in the configuration: the `NAME.pub` JSON object, or its bare base64.
fn parse_key(k: &serde_json::Value) -> Result<PublicKey, String> {
    let text = match k {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    parse_public_key(&text).map_err(|e| e.to_string())
}

fn default_path() -> String {
    "/manifest.json".into()
}
fn default_authority() -> String {
    "registry".into()
}
fn default_poll() -> u32 {
    10
}
fn default_timeout() -> u32 {
    5_000
}
fn default_max_artifact() -> u64 {
    32 << 20
}
fn default_check() -> u32 {
    250
}
fn default_slice() -> u32 {
    256 << 10
}

impl RegistryConfig {
    pub fn check(&self) -> Result<(), ConfigError> {
        let f = |name: &str| format!("registry.{name}");
        if self.cluster.is_empty() {
            return Err(ConfigError::new(f("cluster"), "must name an Envoy cluster"));
        }
        if !self.path.starts_with('/') {
            return Err(ConfigError::new(f("path"), "must start with `/`"));
        }
        if !(1..=86_400).contains(&self.poll_seconds) {
            return Err(ConfigError::new(f("poll_seconds"), "must be 1..=86400"));
        }
        if !(1..=600_000).contains(&self.timeout_ms) {
            return Err(ConfigError::new(f("timeout_ms"), "must be 1..=600000"));
        }
        if self.public_keys.is_empty() {
            return Err(ConfigError::new(f("public_keys"), "name at least one key that may sign the manifest"));
        }
        for (i, k) in self.public_keys.iter().enumerate() {
            parse_key(k).map_err(|e| ConfigError::new(format!("registry.public_keys[{i}]"), e))?;
        }
        if !(1024..=(1 << 30)).contains(&self.max_artifact_bytes) {
            return Err(ConfigError::new(f("max_artifact_bytes"), "must be 1024..=1073741824"));
        }
        if !(10..=60_000).contains(&self.check_ms) {
            return Err(ConfigError::new(f("check_ms"), "must be 10..=60000"));
        }
        if !(MIN_SLICE..=(64 << 20)).contains(&self.slice_bytes) {
            return Err(ConfigError::new(f("slice_bytes"), format!("must be {MIN_SLICE}..=67108864")));
        }
        Ok(())
    }

    /// The keys that may sign the manifest (`check` has parsed every one).
    pub fn keys(&self) -> Vec<PublicKey> {
        self.public_keys.iter().filter_map(|k| parse_key(k).ok()).collect()
    }

    /// The path of an artifact the manifest names (relative to the manifest's directory).
    pub fn artifact_path(&self, artifact: &str) -> String {
        let dir = &self.path[..self.path.rfind('/').map_or(0, |i| i + 1)];
        format!("{dir}{artifact}")
    }
}
