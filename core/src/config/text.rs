//! The text path's configuration (`text` in the plugin JSON): which requests qualify, where
//! the NLP service is, and what each label's verdict triggers.

use super::error::ConfigError;
use crate::action::{ActionKind, DEFAULT_BLOCK_BODY, DEFAULT_BLOCK_STATUS};
use serde::Deserialize;
use std::collections::BTreeMap;

/// How a qualifying body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    Plain,
    Json,
    Form,
}

/// How the text verdict meets the tree decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// Every qualifying request is sent; the strongest of the tree and text actions applies.
    #[default]
    Strongest,
    /// Only requests some tree model tagged or blocked (in shadow mode) are sent: the
    /// transformer confirms what the trees suspect, at a fraction of the NLP load.
    TreeGated,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LabelRule {
    pub threshold: f64,
    #[serde(default)]
    pub action: ActionKind,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextConfig {
    /// Envoy cluster of the NLP service (Ray Serve proxies).
    pub cluster: String,
    #[serde(default = "default_path")]
    pub path: String,
    /// `:authority` of the call.
    #[serde(default = "default_authority")]
    pub authority: String,
    #[serde(default = "default_timeout")]
    pub timeout_ms: u32,
    /// On timeout, 5xx, connection failure or an unparseable answer: pass the request on
    /// (true) or reply 503 (false).
    #[serde(default = "default_true")]
    pub fail_open: bool,
    #[serde(default = "default_methods")]
    pub methods: Vec<String>,
    /// `text/*` bodies are sent whole (up to `max_body_bytes`).
    #[serde(default = "default_true")]
    pub plain_text: bool,
    /// String fields taken from `application/json` bodies (top-level keys or dotted paths;
    /// arrays of strings are joined). Empty: JSON bodies do not qualify.
    #[serde(default = "default_fields")]
    pub json_fields: Vec<String>,
    /// Fields taken from `application/x-www-form-urlencoded` bodies.
    #[serde(default = "default_fields")]
    pub form_fields: Vec<String>,
    #[serde(default = "default_max_body")]
    pub max_body_bytes: u32,
    /// Per label of the service's `labels`: threshold and action.
    pub labels: BTreeMap<String, LabelRule>,
    #[serde(default)]
    pub combine: Combine,
    #[serde(default = "default_header")]
    pub header: String,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub body: Option<String>,
}

fn default_path() -> String {
    "/score".into()
}
fn default_authority() -> String {
    "nlp".into()
}
fn default_timeout() -> u32 {
    500
}
fn default_true() -> bool {
    true
}
fn default_methods() -> Vec<String> {
    vec!["POST".into(), "PUT".into(), "PATCH".into()]
}
fn default_fields() -> Vec<String> {
    ["text", "message", "comment", "body", "content"].iter().map(|s| s.to_string()).collect()
}
fn default_max_body() -> u32 {
    16 << 10
}
fn default_header() -> String {
    "x-edgescore-text".into()
}

impl TextConfig {
    pub fn check(&self) -> Result<(), ConfigError> {
        let f = |name: &str| format!("text.{name}");
        if self.cluster.is_empty() {
            return Err(ConfigError::new(f("cluster"), "must name an Envoy cluster"));
        }
        if !self.path.starts_with('/') {
            return Err(ConfigError::new(f("path"), "must start with `/`"));
        }
        if !(1..=60_000).contains(&self.timeout_ms) {
            return Err(ConfigError::new(f("timeout_ms"), "must be 1..=60000"));
        }
        if !(1..=(1 << 20)).contains(&self.max_body_bytes) {
            return Err(ConfigError::new(f("max_body_bytes"), "must be 1..=1048576"));
        }
        if self.labels.is_empty() {
            return Err(ConfigError::new(f("labels"), "name at least one label with a threshold"));
        }
        for (label, rule) in &self.labels {
            if !rule.threshold.is_finite() {
                return Err(ConfigError::new(format!("text.labels.{label}.threshold"), "must be a finite number"));
            }
        }
        if let Some(s) = self.status {
            if !(200..=599).contains(&s) {
                return Err(ConfigError::new(f("status"), format!("{s} is not an HTTP status (200-599)")));
            }
        }
        let token = |b: u8| b.is_ascii_digit() || b.is_ascii_lowercase() || b"!#$%&'*+-.^_`|~".contains(&b);
        if self.header.is_empty() || !self.header.bytes().all(token) {
            return Err(ConfigError::new(f("header"), "is not a lower-case HTTP header name"));
        }
        Ok(())
    }

    pub fn block_status(&self) -> u16 {
        self.status.unwrap_or(DEFAULT_BLOCK_STATUS)
    }
    pub fn block_body(&self) -> &[u8] {
        self.body.as_deref().unwrap_or(DEFAULT_BLOCK_BODY).as_bytes()
    }

    /// The body kind a request with this method, content type and content encoding would
    /// send, if any. A compressed body (any `content-encoding` but `identity`) never qualifies:
    /// the filter would send the service compressed bytes.
    pub fn qualifies(&self, method: &[u8], content_type: Option<&[u8]>, content_encoding: Option<&[u8]>) -> Option<BodyKind> {
        if !self.methods.iter().any(|m| m.as_bytes().eq_ignore_ascii_case(method)) {
            return None;
        }
        if let Some(enc) = content_encoding {
            let enc = enc.trim_ascii();
            if !enc.is_empty() && !enc.eq_ignore_ascii_case(b"identity") {
                return None;
            }
        }
        let ct = content_type?;
        let essence = ct.split(|&b| b == b';').next().unwrap_or(ct).trim_ascii();
        let lower = |s: &[u8], t: &[u8]| s.eq_ignore_ascii_case(t);
        if lower(essence, b"application/json") || (essence.len() > 5 && essence[essence.len() - 5..].eq_ignore_ascii_case(b"+json")) {
            return (!self.json_fields.is_empty()).then_some(BodyKind::Json);
        }
        if lower(essence, b"application/x-www-form-urlencoded") {
            return (!self.form_fields.is_empty()).then_some(BodyKind::Form);
        }
        if self.plain_text && essence.len() > 5 && essence[..5].eq_ignore_ascii_case(b"text/") {
            return Some(BodyKind::Plain);
        }
        None
    }
}
