//! One request, one direction: features → hashes → bucketed shared vector → every model →
//! [`Decision`] (header values, edits) and the feature-log line. Built once per configuration;
//! `score` and `decide` reuse its buffers and allocate nothing.

use crate::action::{DEFAULT_BLOCK_BODY, DEFAULT_BLOCK_STATUS};
use crate::action::ActionKind;
use crate::config::{ClientKey, ConfigError, HeaderNames, MetricsConfig, Mode, OnError, PluginConfig};
use crate::decision::{Decision, ModelPolicy, Outcome, Verdict};
use crate::drift;
use crate::ensemble::{Model, ScoreError};
use crate::features::{FeatureSchema, Properties, Slot, VelocityNeeds};
use crate::model_set::ModelSet;
use crate::request::Request;
use base64::Engine as _;
use std::io::Write as _;

pub struct Scorer {
    on_error: OnError,
    decision: Decision,
    schema: FeatureSchema,
    shared: Vec<f32>,
    set: ModelSet,
    /// Per model: its number of outputs.
    n_outputs: Vec<usize>,
    outputs: Vec<f32>,
    scores: Vec<f32>,
    sampler: Sampler,
    log_line: Vec<u8>,
    /// The live drift counts of the active models compiled with a reference.
    drift: drift::Tally,
    reasons: Reasons,
    /// The configured client key reads the downstream address.
    velocity_address: bool,
    /// Whether the client key reads the JA4 (only a TLS connection's is Envoy's).
    velocity_ja4: bool,
}

/// Per-request reasons (`config::ExplainConfig`): buffers sized when the scorer is built.
struct Reasons {
    sampler: Sampler,
    top_k: usize,
    /// One model's credits (`TreeEnsemble::explain`), the largest model's size.
    credits: Vec<f64>,
    /// Per model: whether reasons can name it (active, with node values).
    named: Vec<bool>,
    /// One model's top features: (feature, credit).
    top: Vec<(u32, f64)>,
    /// The last request's reasons: (model, feature, credit), models in order.
    items: Vec<(u32, u32, f64)>,
    /// The same as text, for filter state (`bot:ua_family=+1.234,header_count=-0.402`).
    text: Vec<u8>,
}

/// A model the registry delivered, as [`Scorer::served`] takes it.
pub struct RegistryModel<'m> {
    pub name: &'m str,
    /// The manifest's version.
    pub version: u64,
    pub shadow: bool,
    pub model: &'m Model,
}

/// A model ready to serve: its validated bytes and where it came from.
#[derive(Clone)]
pub struct Served {
    pub model: Model,
    /// Its policy: the index in the configuration's `models`.
    pub policy: usize,
    /// The registry manifest's version; `None` for a bootstrap model from the configuration
    /// (named by its artifact's own version string).
    pub version: Option<u64>,
    /// Scored, counted and feature-logged beside the active model of the same name; never acts.
    pub shadow: bool,
}

/// `model` with path attribution's tables if reasons can name it (active, `top_k` > 0). Built
/// once per model: building copies the model when clones share it, and takes milliseconds for
/// a 300-tree model (on the main thread, for every worker's scorer, at each registry swap).
fn explainable(cfg: &PluginConfig, model: Model, shadow: bool) -> Model {
    if cfg.explain.top_k > 0 && !shadow {
        model.with_explainer()
    } else {
        model
    }
}

impl Scorer {
    /// The configuration's bootstrap artifacts, decoded and validated. `seed` seeds the
    /// feature-log sampler.
    pub fn new(cfg: &PluginConfig, seed: u64) -> Result<Scorer, ConfigError> {
        Scorer::build(cfg, seed, Scorer::bootstrap(cfg)?)
    }

    /// The configuration's inline artifacts, validated, in configuration order.
    pub fn bootstrap(cfg: &PluginConfig) -> Result<Vec<Served>, ConfigError> {
        let mut out = Vec::with_capacity(cfg.models.len());
        for (i, m) in cfg.models.iter().enumerate() {
            let Some(artifact) = &m.artifact else { continue };
            let field = format!("models[{i}].artifact");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(artifact.trim())
                .map_err(|e| ConfigError::new(&field, format!("not valid base64: {e}")))?;
            let model = Model::load(&bytes).map_err(|e| ConfigError::new(&field, format!("not a valid edgescore artifact: {e}")))?;
            if let Some(name) = &m.name {
                if model.ensemble().name() != name {
                    return Err(ConfigError::new(&field, format!("the artifact's model is `{}`, not `{name}`", model.ensemble().name())));
                }
            }
            out.push(Served { model: explainable(cfg, model, false), policy: i, version: None, shadow: false });
        }
        Ok(out)
    }

    /// The models a configuration serves: each registry model under the policy of the
    /// configured model of its name (one the configuration does not name is left out), then
    /// each bootstrap model whose policy no active registry model serves yet. Builds path
    /// attribution's tables (`explainable`): assemble once and clone the result for each
    /// scorer, whose clones share them.
    pub fn served<'m>(cfg: &PluginConfig, registry: impl IntoIterator<Item = RegistryModel<'m>>, bootstrap: &[Served]) -> Vec<Served> {
        let mut models: Vec<Served> = registry
            .into_iter()
            .filter_map(|r| {
                let policy = cfg.models.iter().position(|m| m.name.as_deref() == Some(r.name))?;
                Some(Served { model: explainable(cfg, r.model.clone(), r.shadow), policy, version: Some(r.version), shadow: r.shadow })
            })
            .collect();
        for b in bootstrap {
            if !models.iter().any(|m| !m.shadow && m.policy == b.policy) {
                models.push(b.clone());
            }
        }
        models
    }

    /// A scorer over `models` (each with its policy), laying out the shared feature vector:
    /// active models in configuration order, then shadow models.
    pub fn build(cfg: &PluginConfig, seed: u64, mut models: Vec<Served>) -> Result<Scorer, ConfigError> {
        models.sort_by_key(|m| (m.shadow, m.policy));
        let mut schema = FeatureSchema::new(cfg.hash_key.as_bytes());
        let mut set = ModelSet::new(Vec::new());
        let mut policies = Vec::with_capacity(models.len());
        let mut max_outputs = 1;
        let mut n_outputs_of = Vec::with_capacity(models.len());
        let mut drift = drift::Tally::default();
        for served in models {
            let i = served.policy;
            let Some(m) = cfg.models.get(i) else { return Err(ConfigError::new("models", format!("no model {i}"))) };
            let field = format!("models[{i}].artifact");
            // Built by `served`/`bootstrap` already, for models from there (a no-op then).
            let model = explainable(cfg, served.model, served.shadow);
            let e = model.ensemble();
            let gather = schema.admit(e).map_err(|err| ConfigError::new(&field, format!("model `{}`: {err}", e.name())))?;
            let n_outputs = e.n_outputs();
            let output = match m.output {
                Some(o) if (o as usize) < n_outputs => o as usize,
                Some(o) => return Err(ConfigError::new(format!("models[{i}].output"), format!("{o} is out of range: model `{}` has {n_outputs} outputs", e.name()))),
                None if n_outputs == 1 => 0,
                None => return Err(ConfigError::new(format!("models[{i}].output"), format!("required: model `{}` has {n_outputs} outputs", e.name()))),
            };
            let name = e.name().to_string();
            if policies.iter().any(|p: &ModelPolicy| p.name == name && p.shadow == served.shadow) {
                return Err(ConfigError::new(&field, format!("a model named `{name}` is already configured")));
            }
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) {
                return Err(ConfigError::new(&field, format!("model name {name:?} must be non-empty ASCII letters, digits, `_`, `-` or `.` (it appears in headers and metric names)")));
            }
            if !e.version().bytes().all(|b| b.is_ascii_graphic() && !b"\";\\,".contains(&b)) {
                return Err(ConfigError::new(&field, format!("model version {:?} must be printable ASCII without quotes, `;`, `,` or `\\`", e.version())));
            }
            let id = match served.version {
                Some(v) => format!("{name}@{v}"),
                None if e.version().is_empty() => name.clone(),
                None => format!("{name}@{}", e.version()),
            };
            max_outputs = max_outputs.max(n_outputs);
            n_outputs_of.push(n_outputs);
            // A shadow challenger sees the active model's inputs: only active models count.
            if cfg.metrics.drift && !served.shadow {
                drift.add_model(policies.len(), &name, e, &gather, output);
            }
            policies.push(ModelPolicy {
                name,
                id,
                shadow: served.shadow,
                registry: served.version.is_some(),
                threshold: m.threshold,
                output,
                action: m.action,
                status: m.status.unwrap_or(DEFAULT_BLOCK_STATUS),
                body: m.body.clone().unwrap_or_else(|| DEFAULT_BLOCK_BODY.to_string()).into_bytes(),
            });
            set.push_gathered(model, gather);
        }
        // After the models, so their slots keep the names their gathers were made with.
        for (i, f) in cfg.feature_log.features.iter().enumerate() {
            let field = format!("feature_log.features[{i}]");
            // Its answer is a model's table's: a model that carries one logs it.
            if crate::features::Feature::parse(&f.name) == Some(crate::features::Feature::TlsUaConsistent) {
                return Err(ConfigError::new(field, "`tls_ua_consistent` reads a model's UA fingerprint table: the feature log carries it for a model that reads it"));
            }
            schema.slot(&f.name, f.buckets).map_err(|err| ConfigError::new(field, err.to_string()))?;
        }
        if let (None, Some(slot)) = (&cfg.velocity, schema.slots().iter().find(|s| crate::features::Feature::parse(&s.name).is_some_and(|f| f.is_velocity()))) {
            return Err(ConfigError::new("velocity", format!("required: a model or the feature log reads `{}`, a client's count", slot.name)));
        }
        if let (None, Some(slot)) = (&cfg.verified_bots, schema.slots().iter().find(|s| crate::features::Feature::parse(&s.name).is_some_and(|f| f.is_signature()))) {
            return Err(ConfigError::new("verified_bots", format!("required: a model or the feature log reads `{}`, a request's signature", slot.name)));
        }
        let n_slots = schema.slots().len();
        let n_models = policies.len();
        let top_k = cfg.explain.top_k as usize;
        let longest_name = schema.slots().iter().map(|s| s.name.len()).max().unwrap_or(0);
        // Per model: its name and, per feature listed, its name and a credit (at most 24 bytes
        // as `{:+.3}` of a finite f64 below 1e20; larger ones are written as their sign).
        let reasons_room = policies.iter().map(|p| p.name.len() + 4 + top_k * (longest_name + 40)).sum::<usize>();
        let log_room = 96
            + policies.iter().map(|p| p.id.len() + 40).sum::<usize>()
            + schema.slots().iter().map(|s| s.name.len() + 64).sum::<usize>()
            + 16
            + reasons_room;
        let explain_len = (0..set.len()).map(|i| set.ensemble(i).explain_len()).max().unwrap_or(0);
        let named = policies.iter().enumerate().map(|(i, p)| top_k > 0 && !p.shadow && set.ensemble(i).explainer().is_some()).collect();
        Ok(Scorer {
            on_error: cfg.on_error,
            decision: Decision::new(cfg, policies),
            shared: vec![f32::NAN; n_slots],
            schema,
            set,
            n_outputs: n_outputs_of,
            outputs: vec![0.0; max_outputs],
            scores: vec![f32::NAN; n_models],
            sampler: Sampler::new(cfg.feature_log.sample_rate, seed),
            log_line: Vec::with_capacity(log_room),
            drift,
            reasons: Reasons {
                // Its own stream of draws, so that the feature log's sample stays as it was.
                sampler: Sampler::new(cfg.explain.sample, seed ^ 0x9e37_79b9_7f4a_7c15),
                top_k,
                credits: vec![0.0; explain_len],
                named,
                top: vec![(0, 0.0); top_k],
                items: Vec::with_capacity(n_models * top_k),
                text: Vec::with_capacity(reasons_room),
            },
            velocity_address: cfg.velocity.as_ref().is_some_and(|v| v.key.reads_address()),
            velocity_ja4: cfg.velocity.as_ref().is_some_and(|v| v.key == ClientKey::AddressJa4),
        })
    }

    /// The connection properties the configured models need (fetch only these per request),
    /// the client key's address included.
    pub fn properties(&self) -> Properties {
        let mut p = self.schema.properties();
        p.source_address |= self.velocity_address && self.schema.velocity().requests;
        p.tls_version |= self.velocity_ja4 && self.schema.velocity().requests;
        p
    }
    /// Which of a client's counts the models read: whether the glue counts the request in its
    /// `velocity::Clients` (and sets `Request::velocity`), and whether it counts the answers.
    pub fn velocity(&self) -> VelocityNeeds {
        self.schema.velocity()
    }
    pub fn mode(&self) -> Mode {
        self.decision.mode()
    }
    pub fn on_error(&self) -> OnError {
        self.on_error
    }
    pub fn header_names(&self) -> &HeaderNames {
        self.decision.header_names()
    }
    /// Which per-model metrics to record.
    pub fn metrics_config(&self) -> MetricsConfig {
        self.decision.metrics_config()
    }
    pub fn models(&self) -> &[ModelPolicy] {
        self.decision.models()
    }
    pub fn slots(&self) -> &[Slot] {
        self.schema.slots()
    }
    pub fn decision(&self) -> &Decision {
        &self.decision
    }
    /// The decision half, for outcomes that do not start from scores (errors, text verdicts).
    pub fn decision_mut(&mut self) -> &mut Decision {
        &mut self.decision
    }

    /// Scores `req` with every model; afterwards the scores and (when sampled) the
    /// feature-log line are ready to read. No allocation.
    pub fn score(&mut self, req: &Request<'_>) -> Result<Verdict, ScoreError> {
        self.schema.compute(req, &mut self.shared);
        for (i, (p, &n)) in self.decision.models().iter().zip(&self.n_outputs).enumerate() {
            self.set.score(i, &self.shared, &mut self.outputs[..n])?;
            self.scores[i] = self.outputs[p.output];
        }
        self.drift.count(&self.shared, &self.scores);
        let agent = req.signature.and_then(|s| s.ok()).map(|v| v.agent);
        let verdict = self.decision.verdict_for(&self.scores, self.sampler.sample(), agent);
        self.reasons.items.clear();
        self.reasons.text.clear();
        // `||` in this order: a request that is not blocked draws from the sampler; with
        // `sample` 0 the draw is a compare.
        if self.reasons.top_k > 0 && (verdict.action == ActionKind::Block || self.reasons.sampler.sample()) {
            self.explain(verdict);
        }
        if verdict.sampled {
            self.write_log_line(verdict);
        }
        Ok(verdict)
    }

    /// One request, the whole way: scores, then the decision with every edit the request
    /// gets. `end_of_stream`: the request has no body. No allocation.
    pub fn decide(&mut self, req: &Request<'_>, end_of_stream: bool) -> Result<Outcome<'_>, ScoreError> {
        let verdict = self.score(req)?;
        Ok(self.decision.decide(&req.headers, &self.scores, verdict, &self.log_line, &self.reasons.text, end_of_stream))
    }

    /// The reasons of the last request, when it had any (`bot:ua_family=+1.234,…`, models
    /// separated by `;`): empty otherwise.
    pub fn reasons(&self) -> &[u8] {
        &self.reasons.text
    }

    /// Path attribution for the model that decided the request, or with none (a sampled
    /// request no model acted on) for every active model; each model's `top_k` features by
    /// the size of their credit to its score's output. Models without node values are
    /// skipped. No allocation.
    ///
    /// The model is walked again here rather than its leaves kept on every request: a request
    /// that is neither blocked nor sampled pays nothing for reasons.
    fn explain(&mut self, v: Verdict) {
        let r = &mut self.reasons;
        for (i, p) in self.decision.models().iter().enumerate() {
            if !r.named[i] || v.by.is_some_and(|by| by != i) {
                continue;
            }
            if self.set.explain(i, &self.shared, &mut r.credits).is_err() {
                continue;
            }
            let e = self.set.ensemble(i);
            let nf = e.n_features();
            let own = &r.credits[p.output * (nf + 1)..p.output * (nf + 1) + nf];
            let n = crate::ensemble::explain::top_by_magnitude(own, r.top_k, &mut r.top);
            if n == 0 {
                continue;
            }
            if !r.text.is_empty() {
                r.text.push(b';');
            }
            r.text.extend_from_slice(p.name.as_bytes());
            r.text.push(b':');
            for (k, &(f, credit)) in r.top[..n].iter().enumerate() {
                r.items.push((i as u32, f, credit));
                if k > 0 {
                    r.text.push(b',');
                }
                r.text.extend_from_slice(e.feature_name(f as usize).as_bytes());
                r.text.push(b'=');
                signed_number(&mut r.text, credit);
            }
        }
    }

    /// The drift counts not yet handed to Envoy (empty when no model has a reference or
    /// `metrics.drift` is off).
    pub fn drift(&self) -> &drift::Tally {
        &self.drift
    }
    pub fn drift_mut(&mut self) -> &mut drift::Tally {
        &mut self.drift
    }

    /// The scores of the last request, in model order.
    pub fn scores(&self) -> &[f32] {
        &self.scores
    }
    /// The shared feature vector of the last request, in slot order.
    pub fn features(&self) -> &[f32] {
        &self.shared
    }
    /// The last decision's score header (`bot=0.9312;abuse=0.0204`).
    pub fn scores_header(&self) -> &[u8] {
        self.decision.scores_header()
    }
    /// The last sampled request's feature-log line (a one-line JSON object).
    pub fn feature_log(&self) -> &[u8] {
        &self.log_line
    }

    fn write_log_line(&mut self, v: Verdict) {
        let l = &mut self.log_line;
        l.clear();
        let _ = write!(l, "{{\"v\":1,\"decision\":\"{}\",\"mode\":\"{}\",\"scores\":{{", v.action.name(), mode_name(self.decision.mode()));
        for (i, (p, s)) in self.decision.models().iter().zip(&self.scores).enumerate() {
            // As in the score header: a shadow challenger is marked (room: the 40 per model above).
            let _ = write!(l, "{}\"{}{}\":", if i > 0 { "," } else { "" }, p.id, if p.shadow { "~shadow" } else { "" });
            json_number(l, *s);
        }
        l.extend_from_slice(b"},\"features\":{");
        for (i, (slot, x)) in self.schema.slots().iter().zip(&self.shared).enumerate() {
            let _ = write!(l, "{}\"{}\":", if i > 0 { "," } else { "" }, slot.name);
            json_number(l, *x);
        }
        l.push(b'}');
        if !self.reasons.items.is_empty() {
            l.extend_from_slice(b",\"reasons\":{");
            let mut model = u32::MAX;
            for &(i, f, credit) in &self.reasons.items {
                if i != model {
                    let _ = write!(l, "{}\"{}\":{{", if model == u32::MAX { "" } else { "}," }, self.decision.models()[i as usize].name);
                } else {
                    l.push(b',');
                }
                model = i;
                let _ = write!(l, "\"{}\":", self.set.ensemble(i as usize).feature_name(f as usize));
                // JSON has no `+`: six decimals, null for what `signed_number` writes as inf.
                if credit.abs() < 1e20 {
                    let _ = write!(l, "{credit:.6}");
                } else {
                    l.extend_from_slice(b"null");
                }
            }
            l.extend_from_slice(b"}}");
        }
        l.push(b'}');
    }
}

/// A credit with its sign and three decimals (`+1.234`, `-0.402`), written without allocating:
/// one too large for that (1e20 and beyond, never a tree sum in practice) is written as its
/// sign and `inf`, so the buffers sized for 24 bytes are never outgrown.
fn signed_number(out: &mut Vec<u8>, x: f64) {
    if x.abs() < 1e20 {
        let _ = write!(out, "{x:+.3}");
    } else {
        out.extend_from_slice(if x < 0.0 { b"-inf" } else { b"+inf" });
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Enforce => "enforce",
        Mode::Shadow => "shadow",
    }
}

/// Shortest round-trip decimal (f32 `Display`), `null` for missing.
fn json_number(out: &mut Vec<u8>, x: f32) {
    if x.is_finite() {
        let _ = write!(out, "{x}");
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Bernoulli sampling for the feature log with a xorshift64* generator: deterministic per
/// seed, no host call per request.
struct Sampler {
    state: u64,
    /// Sample when the next draw is below this; `u64::MAX` with `always` for rate 1.
    below: u64,
    always: bool,
}

impl Sampler {
    fn new(rate: f64, seed: u64) -> Sampler {
        Sampler { state: seed | 1, below: (rate * 18_446_744_073_709_551_616.0) as u64, always: rate >= 1.0 }
    }

    fn sample(&mut self) -> bool {
        if self.always {
            return true;
        }
        if self.below == 0 {
            return false;
        }
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) < self.below
    }
}
