//! The module's metrics, with the Wasm filter's names (`edgescore_core::metric_names`), so the
//! same `stats_tags`, dashboards and alerts serve both. Envoy lets a module define metrics only
//! while its configuration is created, so every name a configuration can need is defined then:
//! per configured model, its active and shadow counters.
//!
//! A request makes no call into Envoy's stats: each worker counts into its slot's
//! [`Pending`] (plain memory, under the slot's lock it already holds), and the main thread hands
//! the counts to Envoy on the configuration's tick ([`Defined::flush`]), as the Wasm filter does.

use crate::envoy::EnvoyConfig;
use edgescore_core::config::PluginConfig;
use edgescore_core::decision::{DecisionCount, ModelPolicy};
use edgescore_core::drift::Tally;
use edgescore_core::metric_names::{self as names, SCORE_BOUNDS};
use edgescore_core::registry::REASONS;
use edgescore_core::signatures::{BotCounts, DIRECTORY_REASONS, REASONS as SIGNATURE_REASONS};

/// A counter's index in [`Defined::counters`] (and in every [`Pending`]); 0 is "not defined".
#[derive(Clone, Copy, Default)]
pub struct Count(usize);

/// One model's counters.
#[derive(Clone)]
pub struct ModelCounts {
    pub name: String,
    pub shadow: bool,
    pub bands: [Count; 3],
    /// Per [`SCORE_BOUNDS`] entry, then `+Inf`; `None` when histograms are off.
    pub buckets: Option<[Count; SCORE_BOUNDS.len() + 1]>,
    pub count: Count,
    pub sum: Count,
}

/// The text path's counters.
pub struct TextCounts {
    pub calls: Count,
    pub errors: Count,
    pub timeouts: Count,
    pub skipped_empty: Count,
    /// Per configured label, in the configuration's order.
    pub labels: Vec<Count>,
    /// The service's answer label, whatever it is: one counter with a `label` label (Envoy lets
    /// a module define metrics only when its configuration loads; the Wasm filter defines a
    /// counter per label on first sight, which envoy.yaml's stats tags turn into the same
    /// series, `edgescore_text_verdict{label="ok"}`).
    pub verdict: Option<usize>,
    pub raised_tag: Count,
    pub raised_block: Count,
    pub raised_shadow_block: Count,
    pub latency_ms: Option<usize>,
}

/// Every metric of one configuration, as Envoy numbered them.
pub struct Defined {
    /// Envoy's id per [`Count`] (index 0 unused).
    counters: Vec<usize>,
    pub requests_scored: Count,
    pub decisions: [Count; 4],
    pub errors: Count,
    pub panics: Count,
    pub feature_log_lines: Count,
    pub velocity_evictions: Count,
    pub swaps: Count,
    pub swaps_refused: Count,
    pub polls: Count,
    pub manifests_accepted: Count,
    pub models_accepted: Count,
    pub refused: Vec<Count>,
    /// Signature checks (`verified_bots`): verified, then refused per reason.
    pub verified: Count,
    pub signature_refused: [Count; SIGNATURE_REASONS.len()],
    /// The directories' answers: taken, then refused per [`DIRECTORY_REASONS`] entry.
    pub directories_accepted: Count,
    pub directory_refused: Vec<Count>,
    /// A gauge: the keys the workers verify with.
    pub directory_keys: Option<usize>,
    pub models: Vec<ModelCounts>,
    pub text: TextCounts,
    /// Gauges: Envoy ids.
    pub seconds_since_good_poll: Option<usize>,
    pub manifest_sequence: Option<usize>,
    /// Per configured model name: (active, shadow) version gauges.
    pub versions: Vec<(String, Option<usize>, Option<usize>)>,
    pub tick_us: Option<usize>,
    /// The drift watch's labelled counters and gauges (`metrics.drift`).
    pub drift: Option<DriftIds>,
    /// The reference gauges last set, by their label values (main thread).
    drift_references: std::sync::Mutex<Vec<Vec<String>>>,
    /// The test build's allocation count (feature `count-allocations`).
    #[cfg_attr(not(feature = "count-allocations"), allow(dead_code))]
    pub allocations: Option<usize>,
}

impl Defined {
    /// Defines the metrics `cfg` can need. `model_names`: the configured models' names.
    pub fn define(envoy: &EnvoyConfig, cfg: &PluginConfig, model_names: &[String]) -> Defined {
        let mut counters = vec![usize::MAX];
        let mut counter = |name: &str| match envoy.define_counter(name) {
            Some(id) => {
                counters.push(id);
                Count(counters.len() - 1)
            }
            None => Count(0),
        };
        let per_model = cfg.metrics;
        let mut models = Vec::new();
        for name in model_names {
            for shadow in [false, true] {
                let prefix = names::model_prefix(name, shadow);
                let mut band = |b: &str| if per_model.model_counters { counter(&names::model_requests(&prefix, b)) } else { Count(0) };
                let bands = [band("allow"), band("tag"), band("block")];
                let (buckets, count, sum) = if per_model.score_histograms {
                    let mut buckets = [Count(0); SCORE_BOUNDS.len() + 1];
                    for (i, slot) in buckets.iter_mut().enumerate() {
                        *slot = counter(&names::score_bucket(&prefix, SCORE_BOUNDS.get(i).copied()));
                    }
                    (Some(buckets), counter(&names::score_count(&prefix)), counter(&names::score_sum(&prefix)))
                } else {
                    (None, Count(0), Count(0))
                };
                models.push(ModelCounts { name: name.clone(), shadow, bands, buckets, count, sum });
            }
        }
        let registry = cfg.registry.is_some();
        let reg = |c: &mut dyn FnMut(&str) -> Count, name: &str| if registry { c(name) } else { Count(0) };
        let requests_scored = counter(names::REQUESTS_SCORED);
        let decisions = DecisionCount::ALL.map(|d| counter(names::decision(d)));
        let errors = counter(names::ERRORS);
        let panics = counter(names::PANICS);
        let feature_log_lines = counter(names::FEATURE_LOG_LINES);
        let velocity_evictions = counter(names::VELOCITY_EVICTIONS);
        let swaps = reg(&mut counter, names::registry::SWAPS);
        let swaps_refused = reg(&mut counter, names::registry::SWAPS_REFUSED);
        let polls = reg(&mut counter, names::registry::POLLS);
        let manifests_accepted = reg(&mut counter, names::registry::MANIFESTS_ACCEPTED);
        let models_accepted = reg(&mut counter, names::registry::MODELS_ACCEPTED);
        let refused = REASONS.iter().map(|r| reg(&mut counter, &names::registry::refused(r))).collect();
        let bots = cfg.verified_bots.is_some();
        let bot = |c: &mut dyn FnMut(&str) -> Count, name: &str| if bots { c(name) } else { Count(0) };
        let verified = bot(&mut counter, names::verified_bots::VERIFIED);
        let signature_refused = SIGNATURE_REASONS.map(|r| bot(&mut counter, &names::verified_bots::refused(r)));
        let directories_accepted = bot(&mut counter, names::verified_bots::DIRECTORIES_ACCEPTED);
        let directory_refused = DIRECTORY_REASONS.iter().map(|r| bot(&mut counter, &names::verified_bots::directory_refused(r))).collect();
        let labels: Vec<&String> = cfg.text.iter().flat_map(|t| t.labels.keys()).collect();
        let text = TextCounts {
            calls: counter(names::text::CALLS),
            errors: counter(names::text::ERRORS),
            timeouts: counter(names::text::TIMEOUTS),
            skipped_empty: counter(names::text::SKIPPED_EMPTY),
            labels: labels.iter().map(|l| counter(&names::text::label(l))).collect(),
            verdict: envoy.define_labelled_counter(names::text::VERDICT, &["label"]),
            raised_tag: counter(names::text::RAISED_TAG),
            raised_block: counter(names::text::RAISED_BLOCK),
            raised_shadow_block: counter(names::text::RAISED_SHADOW_BLOCK),
            latency_ms: envoy.define_histogram(names::text::LATENCY_MS),
        };
        let gauge = |name: &str| if registry { envoy.define_gauge(name) } else { None };
        Defined {
            requests_scored,
            decisions,
            errors,
            panics,
            feature_log_lines,
            velocity_evictions,
            swaps,
            swaps_refused,
            polls,
            manifests_accepted,
            models_accepted,
            refused,
            verified,
            signature_refused,
            directories_accepted,
            directory_refused,
            directory_keys: if bots { envoy.define_gauge(names::verified_bots::KEYS) } else { None },
            models,
            text,
            seconds_since_good_poll: gauge(names::registry::SECONDS_SINCE_GOOD_POLL),
            manifest_sequence: gauge(names::registry::MANIFEST_SEQUENCE),
            versions: model_names.iter().map(|n| (n.clone(), gauge(&names::registry::version(n, false)), gauge(&names::registry::version(n, true)))).collect(),
            tick_us: if registry { envoy.define_histogram(names::registry::TICK_US) } else { None },
            drift: cfg.metrics.drift.then(|| DriftIds::define(envoy)).flatten(),
            drift_references: std::sync::Mutex::new(Vec::new()),
            allocations: if cfg!(feature = "count-allocations") { envoy.define_gauge(names::NATIVE_ALLOCATIONS) } else { None },
            counters,
        }
    }

    /// A zeroed count per counter, for one worker.
    pub fn pending(&self) -> Pending {
        Pending { counts: vec![0; self.counters.len()], verdicts: Vec::new() }
    }

    /// The counters of the scorer's models, in the scorer's model order (a model whose name has
    /// no counters, which configuration checks rule out, counts nowhere).
    pub fn for_models(&self, policies: &[ModelPolicy]) -> Vec<ModelCounts> {
        let none = ModelCounts { name: String::new(), shadow: false, bands: [Count(0); 3], buckets: None, count: Count(0), sum: Count(0) };
        policies.iter().map(|p| self.models.iter().find(|m| m.name == p.name && m.shadow == p.shadow).cloned().unwrap_or_else(|| none.clone())).collect()
    }

    /// Counts `n` of `c` in Envoy at once (the main thread's own counts: polls, refusals).
    pub fn add_now(&self, envoy: &EnvoyConfig, c: Count, n: u64) {
        if c.0 != 0 && n > 0 {
            envoy.increment(self.counters[c.0], n);
        }
    }

    /// Hands `pending`'s counts to Envoy (main thread) and zeroes them.
    pub fn flush(&self, envoy: &EnvoyConfig, pending: &mut Pending) {
        for (id, n) in self.counters.iter().zip(pending.counts.iter_mut()).skip(1) {
            if *n > 0 {
                envoy.increment(*id, *n);
                *n = 0;
            }
        }
        if let Some(id) = self.text.verdict {
            for (label, n) in pending.verdicts.iter_mut().filter(|(_, n)| *n > 0) {
                envoy.increment_labelled(id, &[label], *n);
                *n = 0;
            }
        }
    }
}

/// The drift stems (`names::drift`), each defined once with its labels: the models and their
/// features arrive with the registry, after Envoy allows definitions.
pub struct DriftIds {
    bin: usize,
    reference: usize,
    score_bin: usize,
    score_reference: usize,
}

const FEATURE_LABELS: [&str; 3] = ["model", "feature", "bin"];
const SCORE_LABELS: [&str; 2] = ["model", "bin"];

impl DriftIds {
    fn define(envoy: &EnvoyConfig) -> Option<DriftIds> {
        Some(DriftIds {
            bin: envoy.define_labelled_counter(names::drift::BIN, &FEATURE_LABELS)?,
            reference: envoy.define_labelled_gauge(names::drift::REFERENCE_PPM, &FEATURE_LABELS)?,
            score_bin: envoy.define_labelled_counter(names::drift::SCORE_BIN, &SCORE_LABELS)?,
            score_reference: envoy.define_labelled_gauge(names::drift::SCORE_REFERENCE_PPM, &SCORE_LABELS)?,
        })
    }
}

impl Defined {
    /// Sets the reference gauges of a scorer's drift bins (main thread, as its models are
    /// served), and to 0 those of bins the previous models had and these do not, so that
    /// Prometheus' sums over a feature's bins hold only the reference in force.
    pub fn set_drift_reference(&self, envoy: &EnvoyConfig, drift: &Tally) {
        let Some(ids) = &self.drift else { return };
        let labels = |b: &edgescore_core::drift::BinInfo| -> Vec<String> { [Some(b.model.clone()), b.feature.clone(), Some(b.bin.clone())].into_iter().flatten().collect() };
        let set = |values: &[String], ppm: u64| {
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            let id = if values.len() == FEATURE_LABELS.len() { ids.reference } else { ids.score_reference };
            envoy.set_labelled_gauge(id, &values, ppm);
        };
        let new: Vec<Vec<String>> = drift.bins().iter().map(labels).collect();
        let mut last = self.drift_references.lock().unwrap_or_else(|p| p.into_inner());
        for old in last.iter().filter(|old| !new.contains(old)) {
            set(old, 0);
        }
        for (values, b) in new.iter().zip(drift.bins()) {
            set(values, b.reference_ppm);
        }
        *last = new;
    }

    /// Hands a scorer's drift counts to Envoy and zeroes them (main thread).
    pub fn flush_drift(&self, envoy: &EnvoyConfig, drift: &mut Tally) {
        let Some(ids) = &self.drift else { return };
        drift.drain(|_, b, n| match &b.feature {
            Some(f) => envoy.increment_labelled(ids.bin, &[&b.model, f, &b.bin], n),
            None => envoy.increment_labelled(ids.score_bin, &[&b.model, &b.bin], n),
        });
    }
}

/// One worker's counts not yet handed to Envoy.
pub struct Pending {
    counts: Vec<u64>,
    /// Text verdicts by the service's label (a label's first verdict on a worker allocates its
    /// entry: the text path's, never the tree path's).
    verdicts: Vec<(String, u64)>,
}

impl Pending {
    #[inline]
    pub fn add(&mut self, c: Count, n: u64) {
        if c.0 != 0 {
            if let Some(p) = self.counts.get_mut(c.0) {
                *p += n;
            }
        }
    }

    /// One verdict the service labelled `label`.
    pub fn verdict(&mut self, label: &str) {
        match self.verdicts.iter_mut().find(|(l, _)| l == label) {
            Some((_, n)) => *n += 1,
            None => self.verdicts.push((label.to_string(), 1)),
        }
    }

    /// A worker's signature counts.
    pub fn bots(&mut self, d: &Defined, counts: BotCounts) {
        self.add(d.verified, counts.verified);
        for (&c, n) in d.signature_refused.iter().zip(counts.refused) {
            self.add(c, n);
        }
    }

    /// A score in per mille into a model's histogram: every bucket at or above it.
    #[inline]
    pub fn record(&mut self, m: &ModelCounts, permille: u64) {
        let Some(buckets) = &m.buckets else { return };
        let first = SCORE_BOUNDS.iter().position(|&b| permille <= b as u64).unwrap_or(SCORE_BOUNDS.len());
        for &c in &buckets[first..] {
            self.add(c, 1);
        }
        self.add(m.count, 1);
        self.add(m.sum, permille);
    }
}
