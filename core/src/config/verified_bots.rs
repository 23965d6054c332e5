//! The `verified_bots` section: which key directories to trust for HTTP message signatures
//! (`crate::signatures`), how they are fetched (by the poller, off the request path) and what a
//! verified agent gets (`allow` or `tag`).

use super::ConfigError;
use crate::signatures::Policy;
use serde::Deserialize;

/// Longest directory name: it appears in the decision header and the feature's hash.
pub const MAX_NAME_LEN: usize = 64;
/// Most directories one configuration may list.
pub const MAX_DIRECTORIES: usize = 16;
/// Where Web Bot Auth signers publish their keys.
pub const DEFAULT_DIRECTORY_PATH: &str = "/.well-known/http-message-signatures-directory";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifiedBotsConfig {
    /// The key directories (JWK sets) whose keys may sign requests.
    pub directories: Vec<DirectoryConfig>,
    /// What a verified request gets: `tag` (scored as usual, the agent named in the decision)
    /// or `allow` (passes whatever the models say, the decision says why).
    #[serde(default)]
    pub action: BotAction,
    /// Clock skew allowed on a signature's `created` and `expires`, seconds.
    #[serde(default = "default_skew")]
    pub skew_s: u64,
    /// Longest `expires` − `created` accepted, seconds.
    #[serde(default = "default_max_validity")]
    pub max_validity_s: u64,
    /// Seconds between two fetches of each directory (a failed fetch keeps the last good one).
    #[serde(default = "default_refresh")]
    pub refresh_seconds: u32,
    /// Timeout of each directory request.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u32,
    /// Largest directory accepted, bytes.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryConfig {
    /// The agent whose keys these are: the name the decision and the feature carry.
    pub name: String,
    /// Envoy cluster of the server that publishes the directory.
    pub cluster: String,
    #[serde(default = "default_path")]
    pub path: String,
    /// `:authority` of the request (default: the cluster's name).
    #[serde(default)]
    pub authority: Option<String>,
}

impl DirectoryConfig {
    pub fn authority(&self) -> &str {
        self.authority.as_deref().unwrap_or(&self.cluster)
    }
}

/// What a verified agent's request gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BotAction {
    /// Scored and decided as usual; the agent is named in the decision.
    #[default]
    Tag,
    /// Allowed whatever the models say; the agent is named in the decision.
    Allow,
}

fn default_skew() -> u64 {
    60
}
fn default_max_validity() -> u64 {
    24 * 3600
}
fn default_refresh() -> u32 {
    300
}
fn default_timeout() -> u32 {
    5_000
}
fn default_max_bytes() -> u32 {
    64 << 10
}
fn default_path() -> String {
    DEFAULT_DIRECTORY_PATH.into()
}

impl VerifiedBotsConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        let f = |name: &str| format!("verified_bots.{name}");
        if self.directories.is_empty() || self.directories.len() > MAX_DIRECTORIES {
            return Err(ConfigError::new(f("directories"), format!("list 1 to {MAX_DIRECTORIES} directories")));
        }
        for (i, d) in self.directories.iter().enumerate() {
            let at = |field: &str| format!("verified_bots.directories[{i}].{field}");
            let token = |b: u8| b.is_ascii_digit() || b.is_ascii_lowercase() || b"_-.".contains(&b);
            if d.name.is_empty() || d.name.len() > MAX_NAME_LEN || !d.name.bytes().all(token) {
                return Err(ConfigError::new(at("name"), format!("{:?} is not 1 to {MAX_NAME_LEN} lower-case letters, digits, `_`, `-` or `.`", d.name)));
            }
            if self.directories[..i].iter().any(|o| o.name == d.name) {
                return Err(ConfigError::new(at("name"), format!("a directory named `{}` is already listed", d.name)));
            }
            if d.cluster.is_empty() {
                return Err(ConfigError::new(at("cluster"), "must name an Envoy cluster"));
            }
            if !d.path.starts_with('/') {
                return Err(ConfigError::new(at("path"), "must start with `/`"));
            }
            if d.authority.as_ref().is_some_and(|a| a.is_empty()) {
                return Err(ConfigError::new(at("authority"), "must not be empty"));
            }
        }
        if self.skew_s > 3600 {
            return Err(ConfigError::new(f("skew_s"), format!("{} is not 0..=3600", self.skew_s)));
        }
        if !(1..=7 * 86_400).contains(&self.max_validity_s) {
            return Err(ConfigError::new(f("max_validity_s"), format!("{} is not 1..=604800", self.max_validity_s)));
        }
        if !(1..=86_400).contains(&self.refresh_seconds) {
            return Err(ConfigError::new(f("refresh_seconds"), format!("{} is not 1..=86400", self.refresh_seconds)));
        }
        if !(1..=600_000).contains(&self.timeout_ms) {
            return Err(ConfigError::new(f("timeout_ms"), format!("{} is not 1..=600000", self.timeout_ms)));
        }
        if !(256..=(1 << 20)).contains(&self.max_bytes) {
            return Err(ConfigError::new(f("max_bytes"), format!("{} is not 256..=1048576", self.max_bytes)));
        }
        Ok(())
    }

    /// What a signature must satisfy: Web Bot Auth's (`tag="web-bot-auth"`, `@authority`
    /// covered, `expires` required) with the configured clock limits.
    pub fn policy(&self) -> Policy {
        Policy { skew_s: self.skew_s, max_validity_s: self.max_validity_s, ..Policy::default() }
    }

    /// The longest directory name (the decision's buffers are sized for it).
    pub fn longest_name(&self) -> usize {
        self.directories.iter().map(|d| d.name.len()).max().unwrap_or(0)
    }

    /// The poller's start-up log line (after `edgescore verified bots: `).
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.directories.iter().map(|d| d.name.as_str()).collect();
        format!("fetching {} director(ies) [{}] every {} s, action {:?}", names.len(), names.join(", "), self.refresh_seconds, self.action)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PluginConfig;

    const DIR: &str = r#"{"name":"crawler","cluster":"bots"}"#;

    fn parse(section: &str) -> Result<Option<VerifiedBotsConfig>, String> {
        let json = format!(r#"{{"hash_key":"0123456789abcdef","models":[{{"artifact":"","threshold":0.5}}],"verified_bots":{section}}}"#);
        PluginConfig::parse(json.as_bytes()).map(|c| c.verified_bots).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults() {
        let v = parse(&format!(r#"{{"directories":[{DIR}]}}"#)).unwrap().unwrap();
        assert_eq!((v.action, v.skew_s, v.max_validity_s, v.refresh_seconds, v.timeout_ms, v.max_bytes), (BotAction::Tag, 60, 86_400, 300, 5_000, 65_536));
        assert_eq!((v.directories[0].path.as_str(), v.directories[0].authority()), (DEFAULT_DIRECTORY_PATH, "bots"));
        let p = v.policy();
        assert_eq!((p.tag.as_deref(), p.skew_s, p.require_expires), (Some("web-bot-auth"), 60, true));
        let v = parse(&format!(r#"{{"directories":[{DIR}],"action":"allow","skew_s":5}}"#)).unwrap().unwrap();
        assert_eq!((v.action, v.policy().skew_s), (BotAction::Allow, 5));
    }

    #[test]
    fn bad_values_name_the_field() {
        for (section, want) in [
            (r#"{"directories":[]}"#.to_string(), "verified_bots.directories: list 1 to 16 directories"),
            (r#"{}"#.to_string(), "verified_bots: missing field `directories`"),
            (format!(r#"{{"directories":[{DIR}],"action":"block"}}"#), "verified_bots.action: unknown variant `block`"),
            (format!(r#"{{"directories":[{DIR}],"skew":1}}"#), "verified_bots.skew: unknown field `skew`"),
            (format!(r#"{{"directories":[{DIR}],"skew_s":3601}}"#), "verified_bots.skew_s: 3601 is not 0..=3600"),
            (format!(r#"{{"directories":[{DIR}],"max_validity_s":0}}"#), "verified_bots.max_validity_s: 0 is not 1..=604800"),
            (format!(r#"{{"directories":[{DIR}],"refresh_seconds":0}}"#), "verified_bots.refresh_seconds: 0 is not 1..=86400"),
            (format!(r#"{{"directories":[{DIR}],"timeout_ms":0}}"#), "verified_bots.timeout_ms: 0 is not 1..=600000"),
            (format!(r#"{{"directories":[{DIR}],"max_bytes":100}}"#), "verified_bots.max_bytes: 100 is not 256..=1048576"),
            (format!(r#"{{"directories":[{DIR},{DIR}]}}"#), "verified_bots.directories[1].name: a directory named `crawler` is already listed"),
            (r#"{"directories":[{"name":"Crawler","cluster":"b"}]}"#.to_string(), "verified_bots.directories[0].name: \"Crawler\" is not"),
            (r#"{"directories":[{"name":"c","cluster":""}]}"#.to_string(), "verified_bots.directories[0].cluster: must name an Envoy cluster"),
            (r#"{"directories":[{"name":"c","cluster":"b","path":"x"}]}"#.to_string(), "verified_bots.directories[0].path: must start with `/`"),
            (r#"{"directories":[{"name":"c","cluster":"b","url":"x"}]}"#.to_string(), "verified_bots.directories[0].url: unknown field `url`"),
        ] {
            let err = parse(&section).unwrap_err();
            assert!(err.starts_with(want), "{section}: {err}");
        }
    }
}
