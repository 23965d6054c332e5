//! One request, one direction: features → hashes → bucketed shared vector → every model →
//! decision → header values and the feature-log line. Built once per configuration; `score`
//! reuses its buffers and allocates nothing.

use crate::artifact::{Model, ScoreError};
use crate::config::{ActionKind, ConfigError, HeaderNames, MetricsConfig, Mode, OnError, PluginConfig, DEFAULT_BLOCK_BODY, DEFAULT_BLOCK_STATUS};
use crate::features::{FeatureSchema, Properties, Slot};
use crate::model_set::ModelSet;
use crate::request::Request;
use base64::Engine as _;
use std::io::Write as _;

/// A configured model: who it is and what its score triggers.
#[derive(Debug, Clone)]
pub struct ModelPolicy {
    /// The artifact's model name (`bot`), used in headers and metric names.
    pub name: String,
    /// `name@version`, as in the decision header.
    pub id: String,
    pub threshold: f64,
    pub output: usize,
    pub action: ActionKind,
    pub status: u16,
    pub body: Vec<u8>,
}

/// What the request gets: the strongest action among models at or above their threshold, and
/// the first model (in configuration order) that asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub action: ActionKind,
    pub by: Option<usize>,
    /// The feature-log line was written for this request.
    pub sampled: bool,
}

pub struct Scorer {
    mode: Mode,
    on_error: OnError,
    headers: HeaderNames,
    metrics: MetricsConfig,
    schema: FeatureSchema,
    shared: Vec<f32>,
    set: ModelSet,
    policies: Vec<ModelPolicy>,
    /// Per model: its number of outputs.
    n_outputs: Vec<usize>,
    outputs: Vec<f32>,
    scores: Vec<f32>,
    sampler: Sampler,
    scores_header: Vec<u8>,
    decision_header: Vec<u8>,
    state_value: Vec<u8>,
    log_line: Vec<u8>,
}

impl Scorer {
    /// Decodes and validates every artifact and lays out the shared feature vector. `seed`
    /// seeds the feature-log sampler.
    pub fn new(cfg: &PluginConfig, seed: u64) -> Result<Scorer, ConfigError> {
        let mut schema = FeatureSchema::new(cfg.hash_key.as_bytes());
        let mut set = ModelSet::new(Vec::new());
        let mut policies = Vec::with_capacity(cfg.models.len());
        let mut max_outputs = 1;
        let mut n_outputs_of = Vec::with_capacity(cfg.models.len());
        for (i, m) in cfg.models.iter().enumerate() {
            let field = format!("models[{i}].artifact");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(m.artifact.trim())
                .map_err(|e| ConfigError::new(&field, format!("not valid base64: {e}")))?;
            let model = Model::load(&bytes).map_err(|e| ConfigError::new(&field, format!("not a valid edgescore artifact: {e}")))?;
            let e = model.ensemble();
            let mut gather = Vec::with_capacity(e.n_features());
            for (j, spec) in e.features().iter().enumerate() {
                let slot = schema
                    .slot(e.feature_name(j), spec.buckets)
                    .map_err(|err| ConfigError::new(&field, format!("model `{}`: {err}", e.name())))?;
                gather.push(slot as u32);
            }
            let n_outputs = e.n_outputs();
            let output = match m.output {
                Some(o) if (o as usize) < n_outputs => o as usize,
                Some(o) => return Err(ConfigError::new(format!("models[{i}].output"), format!("{o} is out of range: model `{}` has {n_outputs} outputs", e.name()))),
                None if n_outputs == 1 => 0,
                None => return Err(ConfigError::new(format!("models[{i}].output"), format!("required: model `{}` has {n_outputs} outputs", e.name()))),
            };
            let name = e.name().to_string();
            if policies.iter().any(|p: &ModelPolicy| p.name == name) {
                return Err(ConfigError::new(&field, format!("a model named `{name}` is already configured")));
            }
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) {
                return Err(ConfigError::new(&field, format!("model name {name:?} must be non-empty ASCII letters, digits, `_`, `-` or `.` (it appears in headers and metric names)")));
            }
            if !e.version().bytes().all(|b| b.is_ascii_graphic() && !b"\";\\,".contains(&b)) {
                return Err(ConfigError::new(&field, format!("model version {:?} must be printable ASCII without quotes, `;`, `,` or `\\`", e.version())));
            }
            let id = if e.version().is_empty() { name.clone() } else { format!("{name}@{}", e.version()) };
            max_outputs = max_outputs.max(n_outputs);
            n_outputs_of.push(n_outputs);
            policies.push(ModelPolicy {
                name,
                id,
                threshold: m.threshold,
                output,
                action: m.action,
                status: m.status.unwrap_or(DEFAULT_BLOCK_STATUS),
                body: m.body.clone().unwrap_or_else(|| DEFAULT_BLOCK_BODY.to_string()).into_bytes(),
            });
            set.push_gathered(model, gather);
        }
        let n_slots = schema.slots().len();
        let decision_room = 64 + policies.iter().map(|p| p.id.len()).max().unwrap_or(0);
        let n_models = policies.len();
        // `;name=` and the longest `{:.4}` of an f32 (`-340282346638528859811704183484516925440.0000`).
        let header_room: usize = policies.iter().map(|p| p.name.len() + 48).sum();
        let log_room = 96 + policies.iter().map(|p| p.id.len() + 40).sum::<usize>() + schema.slots().iter().map(|s| s.name.len() + 64).sum::<usize>();
        Ok(Scorer {
            mode: cfg.mode,
            on_error: cfg.on_error,
            headers: cfg.headers.clone(),
            metrics: cfg.metrics,
            shared: vec![f32::NAN; n_slots],
            schema,
            set,
            policies,
            n_outputs: n_outputs_of,
            outputs: vec![0.0; max_outputs],
            scores: vec![f32::NAN; n_models],
            sampler: Sampler::new(cfg.feature_log.sample_rate, seed),
            scores_header: Vec::with_capacity(header_room),
            decision_header: Vec::with_capacity(decision_room),
            state_value: Vec::with_capacity(decision_room + 1 + header_room),
            log_line: Vec::with_capacity(log_room),
        })
    }

    /// The connection properties the configured models need (fetch only these per request).
    pub fn properties(&self) -> Properties {
        self.schema.properties()
    }
    pub fn mode(&self) -> Mode {
        self.mode
    }
    pub fn on_error(&self) -> OnError {
        self.on_error
    }
    pub fn header_names(&self) -> &HeaderNames {
        &self.headers
    }
    /// Which per-model metrics to record.
    pub fn metrics_config(&self) -> MetricsConfig {
        self.metrics
    }
    pub fn models(&self) -> &[ModelPolicy] {
        &self.policies
    }
    pub fn slots(&self) -> &[Slot] {
        self.schema.slots()
    }

    /// Scores `req` with every model. Afterwards the header values, the scores and (when
    /// sampled) the feature-log line are ready to read. No allocation.
    pub fn score(&mut self, req: &Request<'_>) -> Result<Verdict, ScoreError> {
        self.schema.compute(req, &mut self.shared);
        let mut verdict = Verdict { action: ActionKind::Allow, by: None, sampled: false };
        for (i, (p, &n)) in self.policies.iter().zip(&self.n_outputs).enumerate() {
            self.set.score(i, &self.shared, &mut self.outputs[..n])?;
            let s = self.outputs[p.output];
            self.scores[i] = s;
            if s as f64 >= p.threshold && p.action > verdict.action {
                verdict.action = p.action;
                verdict.by = Some(i);
            }
        }
        verdict.sampled = self.sampler.sample();
        self.write_headers(verdict);
        if verdict.sampled {
            self.write_log_line(verdict);
        }
        Ok(verdict)
    }

    /// The scores of the last request, in model order.
    pub fn scores(&self) -> &[f32] {
        &self.scores
    }
    /// The shared feature vector of the last request, in slot order.
    pub fn features(&self) -> &[f32] {
        &self.shared
    }
    /// `bot=0.9312;abuse=0.0204`
    pub fn scores_header(&self) -> &[u8] {
        &self.scores_header
    }
    /// `allow` | `tag;model=bot@v1` | `block;model=bot@v1` (+ `;shadow` in shadow mode).
    pub fn decision_header(&self) -> &[u8] {
        &self.decision_header
    }
    /// The filter-state value: the decision header, a space, the scores header
    /// (`tag;model=abuse@v1 bot=0.0312;abuse=0.7700`).
    pub fn state_value(&self) -> &[u8] {
        &self.state_value
    }
    /// The last sampled request's feature-log line (a one-line JSON object).
    pub fn feature_log(&self) -> &[u8] {
        &self.log_line
    }

    fn write_headers(&mut self, v: Verdict) {
        let h = &mut self.scores_header;
        h.clear();
        for (i, (p, s)) in self.policies.iter().zip(&self.scores).enumerate() {
            // Writing into a Vec with reserved room cannot fail or reallocate.
            if i > 0 {
                h.push(b';');
            }
            h.extend_from_slice(p.name.as_bytes());
            h.push(b'=');
            push_fixed4(h, *s);
        }
        let d = &mut self.decision_header;
        d.clear();
        d.extend_from_slice(action_name(v.action).as_bytes());
        if let Some(i) = v.by {
            d.extend_from_slice(b";model=");
            d.extend_from_slice(self.policies[i].id.as_bytes());
            if self.mode == Mode::Shadow && v.action == ActionKind::Block {
                d.extend_from_slice(b";shadow");
            }
        }
        let st = &mut self.state_value;
        st.clear();
        st.extend_from_slice(d);
        st.push(b' ');
        st.extend_from_slice(h);
    }

    fn write_log_line(&mut self, v: Verdict) {
        let l = &mut self.log_line;
        l.clear();
        let _ = write!(l, "{{\"v\":1,\"decision\":\"{}\",\"mode\":\"{}\",\"scores\":{{", action_name(v.action), mode_name(self.mode));
        for (i, (p, s)) in self.policies.iter().zip(&self.scores).enumerate() {
            let _ = write!(l, "{}\"{}\":", if i > 0 { "," } else { "" }, p.id);
            json_number(l, *s);
        }
        l.extend_from_slice(b"},\"features\":{");
        for (i, (slot, x)) in self.schema.slots().iter().zip(&self.shared).enumerate() {
            let _ = write!(l, "{}\"{}\":", if i > 0 { "," } else { "" }, slot.name);
            json_number(l, *x);
        }
        l.extend_from_slice(b"}}");
    }
}

pub fn action_name(a: ActionKind) -> &'static str {
    match a {
        ActionKind::Allow => "allow",
        ActionKind::Tag => "tag",
        ActionKind::Block => "block",
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Enforce => "enforce",
        Mode::Shadow => "shadow",
    }
}

/// `x` as `format!("{x:.4}")` writes it. Scores are usually in [0, 1]: those (and any
/// non-negative value below 10^11) are written from an integer, without `core::fmt`'s float
/// machinery (Grisu with a Dragon4 fallback, slow in Wasm), on every request.
fn push_fixed4(out: &mut Vec<u8>, x: f32) {
    // Exact: an f32 has 24 significant bits and 10^4 needs 14, so the product fits an f64.
    let scaled = x as f64 * 10_000.0;
    // `!(x < 0)` would let -0.0 through; `fmt` writes it as `-0.0000`. NaN fails `<`.
    if x.is_sign_positive() && scaled < 1e15 {
        // `fmt` rounds the exact decimal value half to even, as `round_ties_even` does.
        let n = scaled.round_ties_even() as u64;
        push_decimal(out, n / 10_000);
        let frac = (n % 10_000) as u32;
        out.extend_from_slice(&[b'.', b'0' + (frac / 1000) as u8, b'0' + (frac / 100 % 10) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8]);
    } else {
        let _ = write!(out, "{x:.4}");
    }
}

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
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

#[cfg(test)]
mod tests {
    use super::push_fixed4;

    fn fixed4(x: f32) -> String {
        let mut v = Vec::new();
        push_fixed4(&mut v, x);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn fixed4_is_fmt() {
        let mut xs: Vec<f32> = vec![0.0, -0.0, 1.0, 0.5, 0.99995, 0.00005, 0.00015, 0.00025, 1e-8, 0.9999999, 12345.678, 1e10, 9.9999e10, 1e11, 3e12, 1e20, -0.3, -1e-9, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN_POSITIVE, 1e-45];
        // Exact ties at the fourth decimal (k/32, k odd) and their neighbours.
        for k in 0..4096u32 {
            let t = k as f32 / 32.0;
            xs.extend([t, f32::from_bits(t.to_bits() + 1), f32::from_bits(t.to_bits().saturating_sub(1))]);
        }
        // Every 9973rd f32 bit pattern: all magnitudes, both signs, NaNs.
        xs.extend((0..u32::MAX / 9973).map(|i| f32::from_bits(i * 9973)));
        for x in xs {
            assert_eq!(fixed4(x), format!("{x:.4}"), "{x:e} ({:#x})", x.to_bits());
        }
    }
}
