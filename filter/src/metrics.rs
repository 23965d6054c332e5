//! The filter's metrics, counted in the module's own memory and handed to Envoy on the root
//! context's tick ([`Tally::flush`]): a request makes no metric host call (each cost ~1k
//! instructions of Envoy's, plus a V8 exit). A flush makes one `increment_metric` per metric
//! that changed since the last one, on every worker, every `metrics.flush_ms`; a tally also
//! flushes when dropped (a swap or reconfiguration replaces it; Envoy deletes the root
//! context when the plugin is removed), so counts are exact, only late by up to `flush_ms`.
//! A VM that traps loses what it had not flushed.
//!
//! Envoy 1.40 keeps the names under `wasmcustom.` in `/stats`
//! (`wasmcustom.edgescore.model.bot.requests.block`) and strips that prefix in
//! `/stats/prometheus`, where dots become underscores. The names put each variable part (a
//! model, an action, a label, a reason, a bucket bound) in one dot-separated segment after a
//! fixed stem, so that envoy.yaml's `stats_config.stats_tags` can lift it into a Prometheus
//! label: `edgescore_model_requests{model="bot",action="block"}` (docs/metrics.md lists them).

use edgescore_core::config::MetricsConfig;
use edgescore_core::decision::{DecisionCount, ModelPolicy};
use edgescore_core::metric_names as names;
use edgescore_core::metric_names::SCORE_BOUNDS;
use edgescore_core::registry::REASONS;
use edgescore_core::signatures::{BotCounts, DIRECTORY_REASONS, REASONS as SIGNATURE_REASONS};
use edgescore_core::drift::BinInfo;
use proxy_wasm::hostcalls::{define_metric, increment_metric, record_metric};
use proxy_wasm::types::MetricType;

/// A counter kept in a [`Tally`]; [`Count::OFF`] for one turned off in the configuration.
#[derive(Clone, Copy)]
pub struct Count(u32);

impl Count {
    pub const OFF: Count = Count(0);
}

/// Per model: the score distribution as a Prometheus histogram made of counters (bounds in
/// [`SCORE_BOUNDS`]). With the `stats_tags` entries in envoy.yaml the bucket counters show in
/// `/stats/prometheus` as `edgescore_model_score_permille_bucket{model="bot",le="950"}`, with
/// `_sum` and `_count`, as an Envoy histogram would (`histogram_quantile` works on them).
pub struct ScoreHistogram {
    /// Per upper bound, then `+Inf`: requests scored at or below it (cumulative, as
    /// Prometheus wants them; the `+Inf` bucket is also `_count`).
    buckets: [Count; SCORE_BOUNDS.len() + 1],
    count: Count,
    sum: Count,
}

/// Per model: requests it put in each action band, and its score distribution.
pub struct ModelMetrics {
    pub allow: Count,
    pub tag: Count,
    pub block: Count,
    pub scores: Option<ScoreHistogram>,
}

pub struct Metrics {
    pub tally: Tally,
    pub requests_scored: Count,
    /// By [`DecisionCount`], in its declaration order.
    decisions: [Count; 4],
    pub errors: Count,
    pub feature_log_lines: Count,
    pub velocity_evictions: Count,
    /// Signature checks (`verified_bots`): verified, then refused per reason.
    verified: Count,
    signature_refused: [Count; SIGNATURE_REASONS.len()],
    pub models: Vec<ModelMetrics>,
    pub text: TextMetrics,
    /// Per drift bin of the scorer (`edgescore_core::drift::Tally::bins`), its counter.
    pub drift: Vec<Count>,
    /// Per drift bin, its reference gauge's name and id.
    drift_references: Vec<(String, u32)>,
}

/// The text path: calls to the NLP service and what came back.
pub struct TextMetrics {
    pub calls: Count,
    pub errors: Count,
    pub timeouts: Count,
    /// A histogram recorded per NLP call (a call costs far more than the record).
    pub latency_ms: u32,
    pub skipped_empty: Count,
    /// Per configured label (in the config's order): requests whose verdict reached the label's rule.
    pub labels: Vec<Count>,
    /// Requests whose decision the text verdict raised above the tree decision, by the new
    /// action (`edgescore.decision.*` keeps counting the tree decision).
    pub raised_tag: Count,
    pub raised_block: Count,
    pub raised_shadow_block: Count,
}

/// A counter for the service's answer label, defined on first use (the service may answer with
/// labels the configuration does not name).
pub fn text_verdict(label: &str) -> u32 {
    counter(&names::text::verdict(label))
}

/// Defined at VM start so that a configuration refused before any model exists is counted.
pub fn config_errors() -> Option<u32> {
    define_metric(MetricType::Counter, names::CONFIG_ERRORS).ok()
}

/// A metric Envoy counts directly (`u32::MAX`, which Envoy rejects, when it cannot be defined:
/// a missing metric is not worth failing over).
pub fn counter(name: &str) -> u32 {
    define_metric(MetricType::Counter, name).unwrap_or(u32::MAX)
}
pub fn gauge(name: &str) -> u32 {
    define_metric(MetricType::Gauge, name).unwrap_or(u32::MAX)
}
pub fn histogram(name: &str) -> u32 {
    define_metric(MetricType::Histogram, name).unwrap_or(u32::MAX)
}

/// The registry poller's counters and gauges (process-wide in Envoy: the poller is their only
/// writer).
pub struct PollerMetrics {
    pub polls: u32,
    pub manifests_accepted: u32,
    pub models_accepted: u32,
    /// Per [`REASONS`] entry.
    pub refused: Vec<u32>,
    pub seconds_since_good_poll: u32,
    pub manifest_sequence: u32,
}

impl PollerMetrics {
    pub fn define() -> PollerMetrics {
        PollerMetrics {
            polls: counter(names::registry::POLLS),
            manifests_accepted: counter(names::registry::MANIFESTS_ACCEPTED),
            models_accepted: counter(names::registry::MODELS_ACCEPTED),
            refused: REASONS.iter().map(|r| counter(&names::registry::refused(r))).collect(),
            seconds_since_good_poll: gauge(names::registry::SECONDS_SINCE_GOOD_POLL),
            manifest_sequence: gauge(names::registry::MANIFEST_SEQUENCE),
        }
    }
}

/// The poller's side of verified bots: the directories' answers and the keys handed over.
pub struct DirectoryMetrics {
    pub accepted: u32,
    /// Per [`DIRECTORY_REASONS`] entry.
    pub refused: Vec<u32>,
    pub keys: u32,
}

impl DirectoryMetrics {
    pub fn define() -> DirectoryMetrics {
        DirectoryMetrics {
            accepted: counter(names::verified_bots::DIRECTORIES_ACCEPTED),
            refused: DIRECTORY_REASONS.iter().map(|r| counter(&names::verified_bots::directory_refused(r))).collect(),
            keys: gauge(names::verified_bots::KEYS),
        }
    }
}

/// A worker's side of model updates (every worker adds to the same process-wide counters).
pub struct UpdateMetrics {
    pub swaps: u32,
    pub copy_faults: u32,
    pub refused: u32,
    /// Microseconds of update work per tick (copying, checking, building, swapping).
    pub tick_us: u32,
}

impl UpdateMetrics {
    pub fn define() -> UpdateMetrics {
        UpdateMetrics {
            swaps: counter(names::registry::SWAPS),
            copy_faults: counter(names::registry::COPY_FAULTS),
            refused: counter(names::registry::SWAPS_REFUSED),
            tick_us: histogram(names::registry::TICK_US),
        }
    }
}

/// Counts not yet handed to Envoy, by metric.
pub struct Tally {
    /// Envoy's metric id per count; index 0 is [`Count::OFF`], never flushed.
    ids: Vec<u32>,
    pending: Vec<u64>,
}

impl Tally {
    fn new() -> Tally {
        Tally { ids: vec![u32::MAX], pending: vec![0] }
    }

    /// `define_metric` returns the existing id for a known name, so a reconfiguration keeps
    /// adding to the same counters.
    fn counter(&mut self, name: &str) -> Count {
        match define_metric(MetricType::Counter, name) {
            Ok(id) => {
                self.ids.push(id);
                self.pending.push(0);
                Count(self.ids.len() as u32 - 1)
            }
            Err(_) => Count::OFF,
        }
    }

    #[inline]
    pub fn add(&mut self, c: Count, n: u64) {
        if let Some(p) = self.pending.get_mut(c.0 as usize) {
            *p += n;
        }
    }

    /// `permille` in the histogram: every bucket at or above it (a few additions in memory),
    /// the count and the sum.
    #[inline]
    pub fn record(&mut self, h: &ScoreHistogram, permille: u64) {
        let first = SCORE_BOUNDS.iter().position(|&b| permille <= b as u64).unwrap_or(SCORE_BOUNDS.len());
        for &c in &h.buckets[first..] {
            self.add(c, 1);
        }
        self.add(h.count, 1);
        self.add(h.sum, permille);
    }

    /// Hands every pending count to Envoy: one host call per metric that changed.
    pub fn flush(&mut self) {
        for (id, pending) in self.ids.iter().zip(self.pending.iter_mut()).skip(1) {
            if *pending > 0 {
                let _ = increment_metric(*id, i64::try_from(*pending).unwrap_or(i64::MAX));
                *pending = 0;
            }
        }
    }

    /// The histogram's counters: `_bucket.<le>`, `_count`, `_sum`.
    fn histogram(&mut self, prefix: &str) -> ScoreHistogram {
        let mut buckets = [Count::OFF; SCORE_BOUNDS.len() + 1];
        for (i, slot) in buckets.iter_mut().enumerate() {
            *slot = self.counter(&names::score_bucket(prefix, SCORE_BOUNDS.get(i).copied()));
        }
        let count = self.counter(&names::score_count(prefix));
        let sum = self.counter(&names::score_sum(prefix));
        ScoreHistogram { buckets, count, sum }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.flush();
    }
}

impl Metrics {
    /// Per-model metrics turned off in `metrics` are not defined.
    pub fn define(models: &[ModelPolicy], per_model: MetricsConfig, text_labels: &[&str], drift: &[BinInfo], bots: bool) -> Metrics {
        let mut t = Tally::new();
        let verified = if bots { t.counter(names::verified_bots::VERIFIED) } else { Count::OFF };
        let signature_refused = SIGNATURE_REASONS.map(|r| if bots { t.counter(&names::verified_bots::refused(r)) } else { Count::OFF });
        let mut drift_references = Vec::with_capacity(drift.len());
        let drift = drift
            .iter()
            .map(|b| {
                let name = names::drift::reference(&b.model, b.feature.as_deref(), &b.bin);
                let reference = gauge(&name);
                let _ = record_metric(reference, b.reference_ppm);
                drift_references.push((name, reference));
                t.counter(&names::drift::bin(&b.model, b.feature.as_deref(), &b.bin))
            })
            .collect();
        let models = models
            .iter()
            .map(|m| {
                let prefix = names::model_prefix(&m.name, m.shadow);
                let mut band = |b: &str| if per_model.model_counters { t.counter(&names::model_requests(&prefix, b)) } else { Count::OFF };
                let (allow, tag, block) = (band("allow"), band("tag"), band("block"));
                let scores = per_model.score_histograms.then(|| t.histogram(&prefix));
                ModelMetrics { allow, tag, block, scores }
            })
            .collect();
        Metrics {
            requests_scored: t.counter(names::REQUESTS_SCORED),
            decisions: DecisionCount::ALL.map(|d| t.counter(names::decision(d))),
            errors: t.counter(names::ERRORS),
            feature_log_lines: t.counter(names::FEATURE_LOG_LINES),
            velocity_evictions: t.counter(names::VELOCITY_EVICTIONS),
            verified,
            signature_refused,
            models,
            text: TextMetrics {
                calls: t.counter(names::text::CALLS),
                errors: t.counter(names::text::ERRORS),
                timeouts: t.counter(names::text::TIMEOUTS),
                latency_ms: histogram(names::text::LATENCY_MS),
                skipped_empty: t.counter(names::text::SKIPPED_EMPTY),
                labels: text_labels.iter().map(|l| t.counter(&names::text::label(l))).collect(),
                raised_tag: t.counter(names::text::RAISED_TAG),
                raised_block: t.counter(names::text::RAISED_BLOCK),
                raised_shadow_block: t.counter(names::text::RAISED_SHADOW_BLOCK),
            },
            drift,
            drift_references,
            tally: t,
        }
    }

    /// Sets to 0 the reference gauges of bins `next` does not define (a model replaced by one
    /// with other bins, or without a reference).
    pub fn retire_drift_references(&self, next: &Metrics) {
        for (name, id) in &self.drift_references {
            if !next.drift_references.iter().any(|(n, _)| n == name) {
                let _ = record_metric(*id, 0);
            }
        }
    }

    /// Moves the scorer's drift counts into the tally (flushed with the rest).
    pub fn take_drift(&mut self, drift: &mut edgescore_core::drift::Tally) {
        let (t, ids) = (&mut self.tally, &self.drift);
        drift.drain(|i, _, n| {
            if let Some(&c) = ids.get(i) {
                t.add(c, n);
            }
        });
    }

    /// Moves a worker's signature counts into the tally.
    pub fn take_bots(&mut self, counts: BotCounts) {
        self.tally.add(self.verified, counts.verified);
        for (&c, n) in self.signature_refused.iter().zip(counts.refused) {
            self.tally.add(c, n);
        }
    }

    /// Counts one unit of `c`.
    #[inline]
    pub fn bump(&mut self, c: Count) {
        self.tally.add(c, 1);
    }

    /// Counts one request's decision.
    #[inline]
    pub fn decision(&mut self, d: DecisionCount) {
        self.tally.add(self.decisions[d as usize], 1);
    }
}
