//! Metric ids, defined once per configuration. Envoy 1.40 keeps them under `wasmcustom.` in
//! `/stats` (`wasmcustom.edgescore.requests_scored`) but strips that prefix in
//! `/stats/prometheus`, where dots become underscores: `edgescore_requests_scored`.

use edgescore_core::config::MetricsConfig;
use edgescore_core::decision::ModelPolicy;
use proxy_wasm::hostcalls::define_metric;
use proxy_wasm::types::MetricType;

/// Per model: requests it put in each action band, and its score histogram (per mille).
pub struct ModelMetrics {
    pub allow: u32,
    pub tag: u32,
    pub block: u32,
    pub score_permille: u32,
}

pub struct Metrics {
    pub requests_scored: u32,
    pub decision_allow: u32,
    pub decision_tag: u32,
    pub decision_block: u32,
    pub decision_shadow_block: u32,
    pub errors: u32,
    pub feature_log_lines: u32,
    pub models: Vec<ModelMetrics>,
    pub text: TextMetrics,
}

/// The text path: calls to the NLP service and what came back.
pub struct TextMetrics {
    pub calls: u32,
    pub errors: u32,
    pub timeouts: u32,
    pub latency_ms: u32,
    pub skipped_empty: u32,
    /// Per configured label (in the config's order): requests whose verdict reached the label's rule.
    pub labels: Vec<u32>,
    /// Requests whose decision the text verdict raised above the tree decision, by the new
    /// action (`edgescore.decision.*` keeps counting the tree decision).
    pub raised_tag: u32,
    pub raised_block: u32,
    pub raised_shadow_block: u32,
}

/// A counter for the service's answer label, defined on first use (the service may answer with
/// labels the configuration does not name).
pub fn text_verdict(label: &str) -> u32 {
    define_metric(MetricType::Counter, &format!("edgescore.text.verdict.{label}")).unwrap_or(u32::MAX)
}

/// Defined at VM start so that a configuration refused before any model exists is counted.
pub fn config_errors() -> Option<u32> {
    define_metric(MetricType::Counter, "edgescore.config_errors").ok()
}

impl Metrics {
    /// `define_metric` returns the existing id for a known name, so a reconfiguration reuses
    /// the same counters.
    /// Per-model metrics turned off in `metrics` are not defined (their ids are `u32::MAX`).
    pub fn define(models: &[ModelPolicy], per_model: MetricsConfig, text_labels: &[&str]) -> Metrics {
        let counter = |name: &str| define_metric(MetricType::Counter, name).unwrap_or(u32::MAX);
        let model_counter = |name: &str| if per_model.model_counters { counter(name) } else { u32::MAX };
        Metrics {
            requests_scored: counter("edgescore.requests_scored"),
            decision_allow: counter("edgescore.decision.allow"),
            decision_tag: counter("edgescore.decision.tag"),
            decision_block: counter("edgescore.decision.block"),
            decision_shadow_block: counter("edgescore.decision.shadow_block"),
            errors: counter("edgescore.errors"),
            feature_log_lines: counter("edgescore.feature_log.lines"),
            models: models
                .iter()
                .map(|m| {
                    // A shadow challenger counts apart from the active model of the same name.
                    let prefix = if m.shadow { format!("edgescore.shadow.{}", m.name) } else { format!("edgescore.model.{}", m.name) };
                    ModelMetrics {
                        allow: model_counter(&format!("{prefix}.allow")),
                        tag: model_counter(&format!("{prefix}.tag")),
                        block: model_counter(&format!("{prefix}.block")),
                        score_permille: match per_model.score_histograms {
                            true => define_metric(MetricType::Histogram, &format!("{prefix}.score_permille")).unwrap_or(u32::MAX),
                            false => u32::MAX,
                        },
                    }
                })
                .collect(),
            text: TextMetrics {
                calls: counter("edgescore.text.calls"),
                errors: counter("edgescore.text.errors"),
                timeouts: counter("edgescore.text.timeouts"),
                latency_ms: define_metric(MetricType::Histogram, "edgescore.text.latency_ms").unwrap_or(u32::MAX),
                skipped_empty: counter("edgescore.text.skipped_empty"),
                labels: text_labels.iter().map(|l| counter(&format!("edgescore.text.label.{l}"))).collect(),
                raised_tag: counter("edgescore.text.decision.tag"),
                raised_block: counter("edgescore.text.decision.block"),
                raised_shadow_block: counter("edgescore.text.decision.shadow_block"),
            },
        }
    }
}
