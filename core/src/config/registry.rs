//! The registry section of the plugin configuration (`registry`): where the signed manifest
//! is, which keys may sign it and how many must, how fresh it must be and the floors a
//! restarted poller must not go below, how often to poll and how much work a worker does per
//! tick.
//! Models are published to the registry, never written here, so a model update never changes
//! Envoy's configuration (docs/registry.md).

use super::error::ConfigError;
use crate::registry::{parse_public_key, Policy, PolicyError, PublicKey, DEFAULT_MAX_VALIDITY_S};
use serde::Deserialize;
use std::collections::BTreeMap;

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
    /// How many distinct keys of `public_keys` must sign a manifest (k of n).
    #[serde(default = "default_threshold")]
    pub threshold: u32,
    /// Longest validity (`expires` − `published_at`) accepted, seconds: bounds how long a
    /// server can show a frozen manifest.
    #[serde(default = "default_max_validity")]
    pub max_validity_s: u64,
    /// Refuse a manifest without `expires`; `false` only while migrating a registry published
    /// before manifests carried one.
    #[serde(default = "default_require_expiry")]
    pub require_expiry: bool,
    /// The lowest manifest sequence accepted: what a restarted poller must not go below.
    #[serde(default)]
    pub min_sequence: u64,
    /// The lowest version accepted per model name.
    #[serde(default)]
    pub min_versions: BTreeMap<String, u64>,
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

fn default_threshold() -> u32 {
    1
}
fn default_max_validity() -> u64 {
    DEFAULT_MAX_VALIDITY_S
}
fn default_require_expiry() -> bool {
    true
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
        self.policy().validate().map_err(|e| {
            let field = if matches!(e, PolicyError::Validity(_)) { "max_validity_s" } else { "threshold" };
            ConfigError::new(f(field), e.to_string())
        })?;
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

    /// The poller's start-up log line (after `edgescore registry: `).
    pub fn describe(&self) -> String {
        format!("polling cluster `{}` {} every {} s, {} of {} key(s)", self.cluster, self.path, self.poll_seconds, self.threshold, self.public_keys.len())
    }

    /// What the poller requires of a manifest.
    pub fn policy(&self) -> Policy {
        Policy {
            keys: self.keys(),
            threshold: self.threshold as usize,
            max_validity_s: self.max_validity_s,
            require_expiry: self.require_expiry,
            min_sequence: self.min_sequence,
            min_versions: self.min_versions.clone(),
        }
    }

    /// The path of an artifact the manifest names (relative to the manifest's directory).
    pub fn artifact_path(&self, artifact: &str) -> String {
        let dir = &self.path[..self.path.rfind('/').map_or(0, |i| i + 1)];
        format!("{dir}{artifact}")
    }
}

#[cfg(test)]
mod tests {
    use crate::config::PluginConfig;
    use crate::registry::{public_key_file, Policy};
    use ed25519_dalek::SigningKey;

    fn public(seed: u8) -> String {
        public_key_file(&SigningKey::from_bytes(&[seed; 32]).verifying_key())
    }

    /// The configuration with `bot` and a registry trusting `keys`, plus `extra` registry fields.
    fn parse(keys: &[u8], extra: &str) -> Result<PluginConfig, String> {
        let keys: Vec<String> = keys.iter().map(|&k| public(k)).collect();
        let json = format!(
            r#"{{"hash_key":"0123456789abcdef","models":[{{"name":"bot","threshold":0.5}}],
                "registry":{{"cluster":"registry","public_keys":[{}]{extra}}}}}"#,
            keys.join(",")
        );
        PluginConfig::parse(json.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_configuration_without_the_new_fields_keeps_its_meaning() {
        let cfg = parse(&[1, 2], "").unwrap();
        let reg = cfg.registry.unwrap();
        // One signature by any configured key; an expiry required, at most 31 days after the publish.
        assert_eq!(reg.policy(), Policy::new(reg.keys()));
        assert_eq!((reg.threshold, reg.max_validity_s, reg.require_expiry, reg.min_sequence), (1, 31 * 86_400, true, 0));
        assert_eq!(reg.describe(), "polling cluster `registry` /manifest.json every 10 s, 1 of 2 key(s)");
    }

    #[test]
    fn freshness_floors_and_threshold_are_read() {
        let extra = r#","threshold":2,"max_validity_s":86400,"require_expiry":false,"min_sequence":12,"min_versions":{"bot":7}"#;
        let p = parse(&[1, 2, 3], extra).unwrap().registry.unwrap().policy();
        assert_eq!((p.keys.len(), p.threshold, p.max_validity_s, p.require_expiry, p.min_sequence), (3, 2, 86_400, false, 12));
        assert_eq!(p.min_versions, [("bot".to_string(), 7)].into());
    }

    #[test]
    fn bad_values_name_the_field() {
        for (keys, extra, want) in [
            (vec![1u8], r#","threshold":0"#, "registry.threshold: must be at least 1"),
            (vec![1, 2], r#","threshold":3"#, "registry.threshold: 3 is more than the 2 distinct key(s) configured"),
            (vec![1, 1], r#","threshold":2"#, "registry.threshold: 2 is more than the 1 distinct key(s) configured"),
            (vec![1], r#","threshold":-1"#, "registry.threshold: invalid value: integer `-1`"),
            (vec![1], r#","max_validity_s":59"#, "registry.max_validity_s: 59 s is not 60..=31622400 s (a minute to 366 days)"),
            (vec![1], r#","max_validity_s":31622401"#, "registry.max_validity_s: 31622401 s is not 60..=31622400 s"),
            (vec![1], r#","max_validity_s":"7d""#, "registry.max_validity_s: invalid type: string \"7d\""),
            (vec![1], r#","require_expiry":"no""#, "registry.require_expiry: invalid type"),
            (vec![1], r#","min_sequence":-4"#, "registry.min_sequence: invalid value: integer `-4`"),
            (vec![1], r#","min_versions":{"bot":"7"}"#, "registry.min_versions.bot: invalid type: string \"7\""),
            (vec![1], r#","min_versions":[7]"#, "registry.min_versions: invalid type: sequence"),
            (vec![1], r#","min_versions":{"bott":7}"#, "registry.min_versions.bott: no model named `bott` is configured (models[].name)"),
            (vec![1], r#","min_version":{"bot":7}"#, "registry.min_version: unknown field `min_version`"),
        ] {
            let err = parse(&keys, extra).unwrap_err();
            assert!(err.starts_with(want), "{extra}: {err}");
        }
    }
}
