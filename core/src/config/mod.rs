//! The plugin configuration: the JSON in the Wasm filter's `configuration`, documented in
//! `docs/configuration.md` (schema: `docs/configuration.schema.json`). Parsing is strict:
//! unknown fields and out-of-range values are refused with the path of the offending field, so
//! Envoy rejects the configuration and keeps serving the previous one.

use serde::Deserialize;

mod error;
pub mod registry;
mod secret;
pub mod text;
pub mod velocity;
pub mod verified_bots;

pub use crate::action::{ActionKind, DEFAULT_BLOCK_BODY, DEFAULT_BLOCK_STATUS};
pub use error::ConfigError;
pub use registry::RegistryConfig;
pub use secret::SecretSource;
pub use text::TextConfig;
pub use velocity::{ClientKey, VelocityConfig};
pub use verified_bots::{BotAction, VerifiedBotsConfig};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Blocks requests above a `block` model's threshold.
    #[default]
    Enforce,
    /// Scores and tags, never blocks: the decision header says what enforce would have done.
    Shadow,
}

/// What to do with a request that could not be scored (a malformed header map from the host).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Fail open: pass the request on, marked `error`.
    #[default]
    Allow,
    /// Fail closed: reply 503.
    Block,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginConfig {
    #[serde(default)]
    pub mode: Mode,
    /// Where the hash key comes from: the key itself, or `{"env": "NAME"}` (`secret`).
    #[serde(rename = "hash_key")]
    pub hash_key_source: SecretSource,
    /// Secret for categorical hashing (≥ 16 bytes), resolved from `hash_key_source` by
    /// `parse`. Models must be trained on features logged with the same key.
    #[serde(skip)]
    pub hash_key: String,
    #[serde(default)]
    pub on_error: OnError,
    #[serde(default)]
    pub headers: HeaderNames,
    /// Also write the decision and scores to filter state (`wasm.edgescore`, and
    /// `wasm.edgescore.text` on the text path) for access logs: one more host call per request,
    /// so off unless an access log reads it.
    #[serde(default)]
    pub filter_state: bool,
    #[serde(default)]
    pub feature_log: FeatureLogConfig,
    /// Per-request reasons: the features that moved a model's score most on this request.
    #[serde(default)]
    pub explain: ExplainConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    pub models: Vec<ModelConfig>,
    /// The text path: qualifying bodies go to the NLP service (absent: no text scoring).
    #[serde(default)]
    pub text: Option<TextConfig>,
    /// The signed model registry (absent: only the bootstrap artifacts above are served).
    #[serde(default)]
    pub registry: Option<RegistryConfig>,
    /// Whose requests the per-client velocity features count (absent: models cannot read them).
    #[serde(default)]
    pub velocity: Option<VelocityConfig>,
    /// Key directories for signed requests (HTTP message signatures) and what a verified
    /// agent gets (absent: signatures are not read, models cannot read `verified_bot*`).
    #[serde(default)]
    pub verified_bots: Option<VerifiedBotsConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeaderNames {
    /// Added to the upstream request. Alone (the default), it carries the decision, a space and
    /// the scores: `tag;model=bot@v1 bot=0.9312;abuse=0.0204`; with `decision` set, only the
    /// scores: `bot=0.9312;abuse=0.0204`.
    pub scores: String,
    /// The decision in a header of its own (`allow`, `tag;model=bot@v1`, …): one more header
    /// write per request (~0.5 µs of Envoy CPU on the bench machine), so unset by default.
    /// A block reply carries the decision in this header, or else in `scores`, never the scores.
    pub decision: Option<String>,
}

impl HeaderNames {
    /// The header a local reply names the decision in.
    pub fn decision_or_scores(&self) -> &str {
        self.decision.as_deref().unwrap_or(&self.scores)
    }
}

impl Default for HeaderNames {
    fn default() -> Self {
        HeaderNames { scores: "x-edgescore".into(), decision: None }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureLogConfig {
    /// Fraction of requests whose feature vector is written to filter state, 0 to 1.
    #[serde(default)]
    pub sample_rate: f64,
    /// Catalogue features computed and logged beside the ones the models read: how a team logs
    /// a signal before any model reads it, to train the first one that does.
    #[serde(default)]
    pub features: Vec<LoggedFeature>,
}

/// A feature the log carries: the shape of a schema file's entry (`{"name": "tls_ja4",
/// "buckets": 1024}`; `buckets` for categorical features only).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggedFeature {
    pub name: String,
    #[serde(default)]
    pub buckets: u32,
}

/// Reasons (path attribution over the trees the request walked: each split's change in its
/// node's expected value, credited to the split's feature) for every blocked request and for a
/// sample of the others, written to filter state (`wasm.edgescore.reasons`) and to the feature
/// log line: `bot:ua_family=+1.234,header_count=-0.402`. Models compiled without node values
/// give none.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExplainConfig {
    /// Fraction of the requests not blocked that get reasons too, 0 to 1.
    pub sample: f64,
    /// How many features per model, largest contribution first; 0: no reasons at all.
    pub top_k: u32,
}

/// The most features a reason lists per model.
pub const MAX_TOP_K: u32 = 16;

impl Default for ExplainConfig {
    fn default() -> Self {
        ExplainConfig { sample: 0.0, top_k: 3 }
    }
}

/// The filter counts in its own memory and hands the counts to Envoy every `flush_ms` (a host
/// call per changed metric per flush, none per request). The per-model metrics can be turned
/// off (fewer series for Prometheus); both are on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `edgescore.model.<name>.score_permille_*`: per model, the score distribution.
    pub score_histograms: bool,
    /// `edgescore.model.<name>.requests.{allow,tag,block}` counters.
    pub model_counters: bool,
    /// How often each worker hands its counts to Envoy (milliseconds): what `/stats` lags by.
    pub flush_ms: u32,
    /// `edgescore.drift.*`: per active model compiled with `--reference`, the live count of its
    /// inputs' and its score's reference bins, and the reference shares (docs/metrics.md).
    pub drift: bool,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig { score_histograms: true, model_counters: true, flush_ms: 1000, drift: true }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The model's name (as its artifact names it): how registry models find their policy.
    /// Required without `artifact`; must match the artifact's name with it.
    #[serde(default)]
    pub name: Option<String>,
    /// A compiled `.esm` artifact, standard base64: the bootstrap model, served until the
    /// registry delivers this model (and always, without a registry).
    #[serde(default)]
    pub artifact: Option<String>,
    /// The score at or above which the action applies.
    pub threshold: f64,
    /// Which output is the score (class index for multiclass models; default 0).
    #[serde(default)]
    pub output: Option<u32>,
    #[serde(default)]
    pub action: ActionKind,
    /// Local reply status for `block` (default 403).
    #[serde(default)]
    pub status: Option<u16>,
    /// Local reply body for `block`.
    #[serde(default)]
    pub body: Option<String>,
}

impl PluginConfig {
    /// Parses and checks everything that does not need the artifacts decoded; secrets named
    /// as environment variables are read from the process's (the Wasm VM's) environment.
    pub fn parse(json: &[u8]) -> Result<PluginConfig, ConfigError> {
        PluginConfig::parse_with_env(json, &|name| std::env::var(name).ok())
    }

    /// [`PluginConfig::parse`] with `env` looking environment variables up.
    pub fn parse_with_env(json: &[u8], env: &dyn Fn(&str) -> Option<String>) -> Result<PluginConfig, ConfigError> {
        let de = &mut serde_json::Deserializer::from_slice(json);
        let mut cfg: PluginConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            // serde_path_to_error says "." for the root and "?" where the JSON is too broken to
            // name a position; both mean the document as a whole.
            let field = if path == "." || path == "?" { "configuration".to_string() } else { path };
            ConfigError::new(field, e.into_inner().to_string())
        })?;
        cfg.hash_key = cfg.hash_key_source.resolve("hash_key", env)?;
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if self.hash_key.len() < crate::features::hash::MIN_KEY_LEN {
            let field = if matches!(self.hash_key_source, SecretSource::Env(_)) { "hash_key.env" } else { "hash_key" };
            return Err(ConfigError::new(field, format!("must be at least {} bytes", crate::features::hash::MIN_KEY_LEN)));
        }
        let names = [("headers.scores", Some(&self.headers.scores)), ("headers.decision", self.headers.decision.as_ref())];
        for (field, name) in names.into_iter().filter_map(|(f, n)| Some((f, n?))) {
            let token = |b: u8| b.is_ascii_digit() || b.is_ascii_lowercase() || b"!#$%&'*+-.^_`|~".contains(&b);
            if name.is_empty() || !name.bytes().all(token) {
                return Err(ConfigError::new(field, format!("{name:?} is not a lower-case HTTP header name")));
            }
        }
        if self.headers.decision.as_ref() == Some(&self.headers.scores) {
            return Err(ConfigError::new("headers.decision", "must differ from headers.scores"));
        }
        if !(10..=60_000).contains(&self.metrics.flush_ms) {
            return Err(ConfigError::new("metrics.flush_ms", "must be 10..=60000"));
        }
        let rate = self.feature_log.sample_rate;
        if !(0.0..=1.0).contains(&rate) {
            return Err(ConfigError::new("feature_log.sample_rate", format!("{rate} is not between 0 and 1")));
        }
        let sample = self.explain.sample;
        if !(0.0..=1.0).contains(&sample) {
            return Err(ConfigError::new("explain.sample", format!("{sample} is not between 0 and 1")));
        }
        if self.explain.top_k > MAX_TOP_K {
            return Err(ConfigError::new("explain.top_k", format!("{} is more than {MAX_TOP_K}", self.explain.top_k)));
        }
        if self.models.is_empty() {
            return Err(ConfigError::new("models", "at least one model is required"));
        }
        for (i, m) in self.models.iter().enumerate() {
            match (&m.name, &m.artifact, &self.registry) {
                (None, None, _) => return Err(ConfigError::new(format!("models[{i}]"), "needs `name` (a registry model) or `artifact` (a bootstrap model)")),
                (Some(_), None, None) => return Err(ConfigError::new(format!("models[{i}].artifact"), "required without a `registry`")),
                _ => {}
            }
            if let Some(name) = &m.name {
                if self.models[..i].iter().any(|o| o.name.as_ref() == Some(name)) {
                    return Err(ConfigError::new(format!("models[{i}].name"), format!("a model named `{name}` is already configured")));
                }
            }
            if !m.threshold.is_finite() {
                return Err(ConfigError::new(format!("models[{i}].threshold"), "must be a finite number"));
            }
            if m.action != ActionKind::Block && (m.status.is_some() || m.body.is_some()) {
                return Err(ConfigError::new(format!("models[{i}].status"), "status and body apply only to action \"block\""));
            }
            if let Some(s) = m.status {
                if !(200..=599).contains(&s) {
                    return Err(ConfigError::new(format!("models[{i}].status"), format!("{s} is not an HTTP status (200-599)")));
                }
            }
        }
        if let Some(r) = &self.registry {
            r.check()?;
            // A floor for a name no model has is a typo that would protect nothing.
            if let Some(name) = r.min_versions.keys().find(|n| !self.models.iter().any(|m| m.name.as_ref() == Some(*n))) {
                return Err(ConfigError::new(format!("registry.min_versions.{name}"), format!("no model named `{name}` is configured (models[].name)")));
            }
        }
        if let Some(v) = &self.velocity {
            v.check()?;
        }
        if let Some(b) = &self.verified_bots {
            b.check()?;
        }
        if let Some(t) = &self.text {
            t.check()?;
            if t.header == self.headers.scores || self.headers.decision.as_ref() == Some(&t.header) {
                return Err(ConfigError::new("text.header", "must differ from the other edgescore headers"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(json: &str) -> String {
        PluginConfig::parse(json.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_field() {
        let ok = r#"{"hash_key":"0123456789abcdef","models":[{"artifact":"","threshold":0.5}]}"#;
        assert!(PluginConfig::parse(ok.as_bytes()).is_ok());
        assert!(err(r#"{"hash_key":"0123456789abcdef","modes":"x","models":[]}"#).starts_with("modes: unknown field"));
        assert!(err(r#"{"hash_key":"short","models":[]}"#).starts_with("hash_key:"));
        assert!(err(r#"{"hash_key":"0123456789abcdef","models":[{"artifact":"","threshold":"x"}]}"#).starts_with("models[0].threshold:"));
        assert!(err(r#"{"hash_key":"0123456789abcdef","models":[{"artifact":"","threshold":1,"action":"tag","status":403}]}"#)
            .starts_with("models[0].status:"));
        assert!(err(r#"{"hash_key":"0123456789abcdef","mode":"loud","models":[]}"#).starts_with("mode: unknown variant"));
        assert!(err(r#"{"hash_key":"0123456789abcdef","headers":{"scores":"X-Up"},"models":[]}"#).starts_with("headers.scores:"));
        assert!(err(r#"{"hash_key":"0123456789abcdef","feature_log":{"sample_rate":2},"models":[]}"#).starts_with("feature_log.sample_rate:"));
        assert!(err("[").starts_with("configuration:"));
        assert_eq!(err(r#"{"hash_key":"0123456789abcdef","explain":{"sample":-0.5},"models":[]}"#), "explain.sample: -0.5 is not between 0 and 1");
        assert_eq!(err(r#"{"hash_key":"0123456789abcdef","explain":{"top_k":17},"models":[]}"#), "explain.top_k: 17 is more than 16");
        assert!(err(r#"{"hash_key":"0123456789abcdef","explain":{"topk":1},"models":[]}"#).contains("unknown field `topk`"));
    }
}

#[cfg(test)]
mod secret_tests {
    use super::*;

    const MODELS: &str = r#""models":[{"artifact":"","threshold":0.5}]"#;

    fn parse(hash_key: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<PluginConfig, String> {
        PluginConfig::parse_with_env(format!(r#"{{"hash_key":{hash_key},{MODELS}}}"#).as_bytes(), env).map_err(|e| e.to_string())
    }

    #[test]
    fn hash_key_from_the_vm_environment() {
        let env = |name: &str| (name == "EDGESCORE_HASH_KEY").then(|| "key-from-the-environment".to_string());
        let cfg = parse(r#"{"env":"EDGESCORE_HASH_KEY"}"#, &env).unwrap();
        assert_eq!(cfg.hash_key, "key-from-the-environment");
        assert_eq!(cfg.hash_key_source, SecretSource::Env("EDGESCORE_HASH_KEY".into()));
        // Inline keys are untouched by the environment.
        assert_eq!(parse(r#""0123456789abcdef""#, &env).unwrap().hash_key, "0123456789abcdef");
    }

    #[test]
    fn hash_key_refusals_name_the_field() {
        let none = |_: &str| None;
        let e = parse(r#"{"env":"MISSING"}"#, &none).unwrap_err();
        assert!(e.starts_with("hash_key.env: the Wasm VM has no environment variable `MISSING`"), "{e}");
        let short = |_: &str| Some("short".to_string());
        assert_eq!(parse(r#"{"env":"K"}"#, &short).unwrap_err(), "hash_key.env: must be at least 16 bytes");
        assert!(parse(r#"{"file":"/etc/key"}"#, &none).unwrap_err().starts_with("hash_key: unknown field `file`"));
        assert!(parse(r#"{}"#, &none).unwrap_err().starts_with("hash_key: missing field `env`"));
        assert!(parse(r#"{"env":""}"#, &none).unwrap_err().starts_with("hash_key: invalid value"));
        assert!(parse("7", &none).unwrap_err().starts_with("hash_key: invalid type: integer `7`, expected the secret as a string"));
    }
}
