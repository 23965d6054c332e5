//! Every metric name edgescore defines in Envoy, for the Wasm filter and the native module
//! alike (`docs/metrics.md` lists them with their Prometheus form). Each variable part (a model,
//! an action, a label, a reason, a bucket bound) is one dot-separated segment after a fixed
//! stem, so that `stats_config.stats_tags` in the Envoy configuration can lift it into a
//! Prometheus label: `edgescore.model.bot.requests.block` →
//! `edgescore_model_requests{model="bot",action="block"}`.

use crate::decision::DecisionCount;

pub const REQUESTS_SCORED: &str = "edgescore.requests_scored";
pub const ERRORS: &str = "edgescore.errors";
pub const CONFIG_ERRORS: &str = "edgescore.config_errors";
pub const FEATURE_LOG_LINES: &str = "edgescore.feature_log.lines";
/// A panic caught at the native module's FFI boundary (the request got `on_error`).
pub const PANICS: &str = "edgescore.panics";
/// Clients a worker's velocity table evicted to make room (`velocity.capacity` too small for
/// the clients of the last minute).
pub const VELOCITY_EVICTIONS: &str = "edgescore.velocity.evictions";
/// The native module's test build: allocations its global allocator has served (a gauge).
pub const NATIVE_ALLOCATIONS: &str = "edgescore.native_allocations";

/// The request's decision, by the action the trees chose.
pub fn decision(d: DecisionCount) -> &'static str {
    match d {
        DecisionCount::Allow => "edgescore.decision.allow",
        DecisionCount::Tag => "edgescore.decision.tag",
        DecisionCount::Block => "edgescore.decision.block",
        DecisionCount::ShadowBlock => "edgescore.decision.shadow_block",
    }
}

/// The stem of a model's metrics: a shadow challenger counts apart from the active model of
/// the same name.
pub fn model_prefix(name: &str, shadow: bool) -> String {
    if shadow {
        format!("edgescore.shadow.{name}")
    } else {
        format!("edgescore.model.{name}")
    }
}

/// Requests a model put in an action band (`allow`, `tag`, `block`).
pub fn model_requests(prefix: &str, band: &str) -> String {
    format!("{prefix}.requests.{band}")
}

/// Upper bounds (per mille) of the score histograms, made of counters: exact, where Envoy's
/// own histograms are approximate, and no host call per request.
pub const SCORE_BOUNDS: [u16; 16] = [10, 50, 100, 200, 300, 400, 500, 600, 700, 800, 850, 900, 950, 980, 990, 1000];

/// The score histogram's bucket counter for upper bound `le` (`None`: `+Inf`).
pub fn score_bucket(prefix: &str, le: Option<u16>) -> String {
    match le {
        Some(b) => format!("{prefix}.score_permille_bucket.{b}"),
        None => format!("{prefix}.score_permille_bucket.+Inf"),
    }
}
pub fn score_count(prefix: &str) -> String {
    format!("{prefix}.score_permille_count")
}
pub fn score_sum(prefix: &str) -> String {
    format!("{prefix}.score_permille_sum")
}

/// The drift watch (`crate::drift`): per active model compiled with a reference, the live
/// count of each reference bin of its inputs and of its score, and each bin's reference share.
/// The Wasm filter names a metric per bin (`edgescore.drift.bin.<model>.<feature>.<bin>`,
/// labelled by envoy.yaml's stats tags); the native module defines each stem once with the
/// same labels. Either way Prometheus sees
/// `edgescore_drift_bin{model="bot",feature="path_length",bin="3"}`.
pub mod drift {
    /// Requests whose input fell in a bin (a counter).
    pub const BIN: &str = "edgescore.drift.bin";
    /// The bin's share of the reference rows, in parts per million (a gauge).
    pub const REFERENCE_PPM: &str = "edgescore.drift.reference_ppm";
    /// Requests whose score fell in a bin.
    pub const SCORE_BIN: &str = "edgescore.drift.score_bin";
    pub const SCORE_REFERENCE_PPM: &str = "edgescore.drift.score_reference_ppm";

    /// The Wasm filter's name of a bin's counter (`feature: None`: the score's).
    pub fn bin(model: &str, feature: Option<&str>, bin: &str) -> String {
        match feature {
            Some(f) => format!("{BIN}.{model}.{f}.{bin}"),
            None => format!("{SCORE_BIN}.{model}.{bin}"),
        }
    }
    /// The Wasm filter's name of a bin's reference gauge.
    pub fn reference(model: &str, feature: Option<&str>, bin: &str) -> String {
        match feature {
            Some(f) => format!("{REFERENCE_PPM}.{model}.{f}.{bin}"),
            None => format!("{SCORE_REFERENCE_PPM}.{model}.{bin}"),
        }
    }
}

/// The text path.
pub mod text {
    pub const CALLS: &str = "edgescore.text.calls";
    pub const ERRORS: &str = "edgescore.text.errors";
    pub const TIMEOUTS: &str = "edgescore.text.timeouts";
    /// A histogram, recorded per NLP call.
    pub const LATENCY_MS: &str = "edgescore.text.latency_ms";
    pub const SKIPPED_EMPTY: &str = "edgescore.text.skipped_empty";
    pub const RAISED_TAG: &str = "edgescore.text.decision.tag";
    pub const RAISED_BLOCK: &str = "edgescore.text.decision.block";
    pub const RAISED_SHADOW_BLOCK: &str = "edgescore.text.decision.shadow_block";

    /// Requests whose verdict reached a configured label's rule.
    pub fn label(label: &str) -> String {
        format!("edgescore.text.label.{label}")
    }
    /// The service's answer label (it may answer with labels the configuration does not name).
    pub fn verdict(label: &str) -> String {
        format!("{VERDICT}.{label}")
    }
    /// [`verdict`]'s stem: the native module's counter, labelled by `label`.
    pub const VERDICT: &str = "edgescore.text.verdict";
}

/// The model registry: the poller's and the workers' sides.
pub mod registry {
    pub const POLLS: &str = "edgescore.registry.polls";
    pub const MANIFESTS_ACCEPTED: &str = "edgescore.registry.manifests_accepted";
    pub const MODELS_ACCEPTED: &str = "edgescore.registry.models_accepted";
    pub const SECONDS_SINCE_GOOD_POLL: &str = "edgescore.registry.seconds_since_good_poll";
    pub const MANIFEST_SEQUENCE: &str = "edgescore.registry.manifest_sequence";
    pub const SWAPS: &str = "edgescore.registry.swaps";
    pub const COPY_FAULTS: &str = "edgescore.registry.copy_faults";
    pub const SWAPS_REFUSED: &str = "edgescore.registry.swaps_refused";
    /// A histogram: microseconds of update work per worker tick.
    pub const TICK_US: &str = "edgescore.registry.tick_us";

    /// Refusals by [`crate::registry::Refusal::reason`].
    pub fn refused(reason: &str) -> String {
        format!("edgescore.registry.refused.{reason}")
    }
    /// The gauge naming the version served of a model (`shadow`: of its challenger).
    pub fn version(name: &str, shadow: bool) -> String {
        let kind = if shadow { "shadow_version" } else { "version" };
        format!("edgescore.registry.{kind}.{name}")
    }
}

/// Verified bots (`crate::signatures`): the workers' signature checks and the poller's
/// directory fetches.
pub mod verified_bots {
    /// Requests whose signature verified.
    pub const VERIFIED: &str = "edgescore.verified_bots.verified";
    /// Directory answers taken (keys changed or not).
    pub const DIRECTORIES_ACCEPTED: &str = "edgescore.verified_bots.directories_accepted";
    /// A gauge: the keys the workers verify with.
    pub const KEYS: &str = "edgescore.verified_bots.keys";

    /// Signed requests refused, by [`crate::signatures::Refusal::reason`].
    pub fn refused(reason: &str) -> String {
        format!("edgescore.verified_bots.refused.{reason}")
    }
    /// Directory answers refused, by [`crate::signatures::DirectoryRefusal::reason`].
    pub fn directory_refused(reason: &str) -> String {
        format!("edgescore.verified_bots.directory_refused.{reason}")
    }
}
