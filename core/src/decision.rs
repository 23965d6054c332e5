//! The whole decision: from the scores (and, on the text path, the NLP verdict) to what the
//! request gets — the action, the per-model bands for metrics, and the exact bytes of every
//! header, filter-state value and local reply, as a list of [`Edit`]s the glue applies in
//! order. Nothing here knows Envoy; the glue reads the host, calls the core, applies edits.
//!
//! The tree decision reuses buffers sized at configuration time and allocates nothing. The
//! text decision runs once per text-path request (which already allocates: the NLP call's
//! body and the verdict) and keeps its own buffers.

use crate::action::{ActionKind, DEFAULT_BLOCK_BODY, DEFAULT_BLOCK_STATUS};
use crate::config::{BotAction, HeaderNames, MetricsConfig, Mode, OnError, PluginConfig, TextConfig};
use crate::request::HeaderMap;
use crate::config::text::{BodyKind, Combine};
use crate::text::TextVerdict;
use std::io::Write as _;

/// Filter-state keys (Envoy stores them as `wasm.<key>`, readable in access logs with
/// `%FILTER_STATE(wasm.edgescore:PLAIN)%`), written only with `filter_state: true` (and the
/// feature log for sampled requests). `edgescore` holds the decision and the scores in one
/// value (`allow bot=0.0180;scanner=0.0474`): one `proxy_set_property` per request, not two.
pub const STATE: &[u8] = b"edgescore";
pub const STATE_FEATURES: &[u8] = b"edgescore.features";
pub const STATE_TEXT: &[u8] = b"edgescore.text";
/// The request's reasons (`config::ExplainConfig`), when it has any.
pub const STATE_REASONS: &[u8] = b"edgescore.reasons";

/// How the decision names a verified agent: `allow;verified_bot=crawler`.
const BOT_KEY: &[u8] = b";verified_bot=";

/// The decision of a request that could not be read or scored.
pub const ERROR_DECISION: &[u8] = b"error";
const ERROR_BODY: &[u8] = b"edgescore: the request could not be scored\n";
const TEXT_ERROR_BODY: &[u8] = b"edgescore: the text of the request could not be scored\n";

/// A configured model: who it is and what its score triggers.
#[derive(Debug, Clone)]
pub struct ModelPolicy {
    /// The artifact's model name (`bot`), used in headers and metric names.
    pub name: String,
    /// `name@version`, as in the decision header.
    pub id: String,
    /// A challenger published with `--shadow`: scored, counted, logged; never acts.
    pub shadow: bool,
    /// Served from the registry (`id` carries the manifest version).
    pub registry: bool,
    pub threshold: f64,
    pub output: usize,
    pub action: ActionKind,
    pub status: u16,
    pub body: Vec<u8>,
}

impl ModelPolicy {
    /// The action band `score` falls in: the model's action at or above its threshold.
    pub fn band(&self, score: f32) -> ActionKind {
        if score as f64 >= self.threshold {
            self.action
        } else {
            ActionKind::Allow
        }
    }
}

/// What the trees decided: the strongest action among models at or above their threshold, and
/// the first model (in configuration order) that asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub action: ActionKind,
    pub by: Option<usize>,
    /// The feature-log line was written for this request.
    pub sampled: bool,
}

/// Which `edgescore.decision.*` counter a request lands in (each request in exactly one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionCount {
    Allow,
    Tag,
    Block,
    /// A block in shadow mode: counted, never enforced.
    ShadowBlock,
}

impl DecisionCount {
    /// Every variant, in declaration order (`as usize` indexes it).
    pub const ALL: [DecisionCount; 4] = [DecisionCount::Allow, DecisionCount::Tag, DecisionCount::Block, DecisionCount::ShadowBlock];
}

/// One change to the request, in the order the glue must apply them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit<'a> {
    /// Add a request header the client did not send (Envoy's `addCopy`: about half the cost
    /// of a replace).
    AddHeader(&'a [u8], &'a [u8]),
    /// Set a request header, dropping any value the client sent (`setCopy`).
    ReplaceHeader(&'a [u8], &'a [u8]),
    /// Remove every value of a request header.
    RemoveHeader(&'a [u8]),
    /// Set filter state `wasm.<key>`.
    SetState(&'static [u8], &'a [u8]),
    /// Answer locally and stop the request. `headers` is a serialised header map.
    Reply { status: u16, details: &'static [u8], body: &'a [u8], headers: &'a [u8] },
}

const MAX_EDITS: usize = 6;

/// The edits of one outcome (a fixed array: building it allocates nothing).
#[derive(Debug, Clone, Copy)]
pub struct Edits<'a> {
    items: [Option<Edit<'a>>; MAX_EDITS],
    len: usize,
}

impl<'a> Edits<'a> {
    fn new() -> Edits<'a> {
        Edits { items: [None; MAX_EDITS], len: 0 }
    }
    fn push(&mut self, e: Edit<'a>) {
        // Every outcome below pushes at most MAX_EDITS (checked by the tests).
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = Some(e);
            self.len += 1;
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = Edit<'a>> + '_ {
        self.items[..self.len].iter().flatten().copied()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The local reply, if the outcome stops the request.
    pub fn reply(&self) -> Option<Edit<'a>> {
        self.iter().find(|e| matches!(e, Edit::Reply { .. }))
    }
}

/// What one request gets from the trees.
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    pub verdict: Verdict,
    pub edits: Edits<'a>,
    pub count: DecisionCount,
    /// Per model, its band (empty when `metrics.model_counters` is off).
    pub bands: &'a [ActionKind],
    /// Per model, its score in per mille for the score histograms (`None`: not recorded —
    /// histograms off, or a non-finite score).
    pub permille: &'a [Option<u64>],
    /// Where the request goes next: `Some` when it waits for its body for the text path.
    pub text: Option<TextHold>,
}

/// A request held for the text path: what its body is and what the trees decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextHold {
    pub kind: BodyKind,
    pub tree: ActionKind,
}

/// What a text verdict changed: the new decision counted apart (`edgescore.text.decision.*`),
/// so that every request stays in exactly one `edgescore.decision.*` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raised {
    Tag,
    Block,
    ShadowBlock,
}

/// What a request on the text path gets once the NLP service answered.
#[derive(Debug)]
pub struct TextOutcome<'a> {
    pub edits: Edits<'a>,
    /// Indices (in `text.labels` order) of the labels whose probability reached their threshold.
    pub crossed: Vec<usize>,
    pub raised: Option<Raised>,
}

/// Per configuration: the policies and the buffers every decision reuses.
pub struct Decision {
    mode: Mode,
    on_error: OnError,
    headers: HeaderNames,
    filter_state: bool,
    metrics: MetricsConfig,
    text: Option<TextConfig>,
    policies: Vec<ModelPolicy>,
    /// What a verified agent gets (`verified_bots.action`); `None` without the section.
    bots: Option<BotAction>,
    /// The last request's verified agent (empty: none), named in the decision.
    agent: Vec<u8>,
    bands: Vec<ActionKind>,
    permille: Vec<Option<u64>>,
    scores_header: Vec<u8>,
    decision_header: Vec<u8>,
    state_value: Vec<u8>,
    reply_headers: Vec<u8>,
    /// The text decision's own buffers (the tree buffers may belong to another request by then).
    text_decision: Vec<u8>,
    text_state: Vec<u8>,
    text_value: Vec<u8>,
    text_reply_headers: Vec<u8>,
}

impl Decision {
    pub fn new(cfg: &PluginConfig, policies: Vec<ModelPolicy>) -> Decision {
        let n = policies.len();
        let bot_room = cfg.verified_bots.as_ref().map_or(0, |v| BOT_KEY.len() + v.longest_name());
        let decision_room = 64 + policies.iter().map(|p| p.id.len()).max().unwrap_or(0) + bot_room;
        // `;id~shadow=` and the longest `{:.4}` of an f32 (`-340282346638528859811704183484516925440.0000`).
        let header_room: usize = policies.iter().map(|p| p.id.len() + 56).sum();
        Decision {
            mode: cfg.mode,
            on_error: cfg.on_error,
            headers: cfg.headers.clone(),
            filter_state: cfg.filter_state,
            metrics: cfg.metrics,
            text: cfg.text.clone(),
            bands: vec![ActionKind::Allow; n],
            permille: vec![None; n],
            policies,
            bots: cfg.verified_bots.as_ref().map(|v| v.action),
            agent: Vec::with_capacity(bot_room),
            scores_header: Vec::with_capacity(header_room),
            decision_header: Vec::with_capacity(decision_room),
            state_value: Vec::with_capacity(decision_room + 1 + header_room),
            reply_headers: Vec::with_capacity(64 + decision_room + cfg.headers.decision_or_scores().len()),
            text_decision: Vec::new(),
            text_state: Vec::new(),
            text_value: Vec::new(),
            text_reply_headers: Vec::new(),
        }
    }

    pub fn models(&self) -> &[ModelPolicy] {
        &self.policies
    }
    pub fn mode(&self) -> Mode {
        self.mode
    }
    pub fn header_names(&self) -> &HeaderNames {
        &self.headers
    }
    pub fn metrics_config(&self) -> MetricsConfig {
        self.metrics
    }
    pub fn text_config(&self) -> Option<&TextConfig> {
        self.text.as_ref()
    }

    /// The strongest action among the models' bands, and the first model that asked for it.
    pub fn verdict(&self, scores: &[f32], sampled: bool) -> Verdict {
        let mut v = Verdict { action: ActionKind::Allow, by: None, sampled };
        for (i, (p, &s)) in self.policies.iter().zip(scores).enumerate() {
            let band = p.band(s);
            if band > v.action && !p.shadow {
                v.action = band;
                v.by = Some(i);
            }
        }
        v
    }

    /// [`Decision::verdict`] for a request whose signature verified as `agent`'s (or did not:
    /// `None`): the agent is named in the decision, and with `verified_bots.action` `allow`
    /// the request is allowed whatever the models say. No allocation.
    pub fn verdict_for(&mut self, scores: &[f32], sampled: bool, agent: Option<&str>) -> Verdict {
        let v = self.verdict(scores, sampled);
        self.agent.clear();
        let Some(agent) = agent.filter(|_| self.bots.is_some()) else { return v };
        // Room for the longest configured name was reserved; a longer one is not named.
        if agent.len() <= self.agent.capacity() {
            self.agent.extend_from_slice(agent.as_bytes());
        }
        match self.bots {
            Some(BotAction::Allow) => Verdict { action: ActionKind::Allow, by: None, sampled },
            _ => v,
        }
    }

    /// The outcome of scoring `headers` (the request's parsed header map) to `scores`, with
    /// the feature-log line `feature_log` when the request was sampled and its `reasons`
    /// (empty: none). `end_of_stream`: the request has no body. No allocation.
    pub fn decide<'a>(
        &'a mut self, headers: &HeaderMap<'_>, scores: &[f32], verdict: Verdict, feature_log: &'a [u8], reasons: &'a [u8], end_of_stream: bool,
    ) -> Outcome<'a> {
        self.write_values(scores, verdict);
        for (i, (p, &s)) in self.policies.iter().zip(scores).enumerate() {
            self.bands[i] = p.band(s);
            self.permille[i] = (self.metrics.score_histograms && s.is_finite()).then(|| (s.clamp(0.0, 1.0) * 1000.0).round() as u64);
        }
        let enforce = self.mode == Mode::Enforce;
        let count = match verdict.action {
            ActionKind::Allow => DecisionCount::Allow,
            ActionKind::Tag => DecisionCount::Tag,
            ActionKind::Block if enforce => DecisionCount::Block,
            ActionKind::Block => DecisionCount::ShadowBlock,
        };
        let block_by = match (verdict.action, verdict.by) {
            (ActionKind::Block, Some(i)) if enforce => Some(i),
            _ => None,
        };
        if block_by.is_some() {
            HeaderMap::encode_into(&mut self.reply_headers, &[(self.headers.decision_or_scores().as_bytes(), &self.decision_header[..])]);
        }
        let Decision { headers: names, scores_header, decision_header, state_value, reply_headers, policies, text, .. } = &*self;
        let mut edits = Edits::new();
        // One header by default: the decision and the scores in the filter-state format.
        let writes = match &names.decision {
            None => [Some((&names.scores, &state_value[..])), None],
            Some(decision) => [Some((&names.scores, &scores_header[..])), Some((decision, &decision_header[..]))],
        };
        // A client must not be able to send its own score header upstream: replace a header the
        // request has; add one it has not (cheaper; the parsed map says which).
        for (name, value) in writes.into_iter().flatten() {
            edits.push(match headers.get(name.as_bytes()) {
                Some(_) => Edit::ReplaceHeader(name.as_bytes(), value),
                None => Edit::AddHeader(name.as_bytes(), value),
            });
        }
        if self.filter_state {
            edits.push(Edit::SetState(STATE, state_value));
        }
        if verdict.sampled {
            edits.push(Edit::SetState(STATE_FEATURES, feature_log));
        }
        if !reasons.is_empty() {
            edits.push(Edit::SetState(STATE_REASONS, reasons));
        }
        let mut hold = None;
        if let Some(i) = block_by {
            let policy = &policies[i];
            edits.push(Edit::Reply { status: policy.status, details: b"edgescore_block", body: &policy.body, headers: reply_headers });
        } else if let Some(t) = text {
            // Nor its own text verdict (the map is parsed: no host call unless it is there).
            if headers.get(t.header.as_bytes()).is_some() {
                edits.push(Edit::RemoveHeader(t.header.as_bytes()));
            }
            let gated = t.combine == Combine::TreeGated && verdict.action == ActionKind::Allow;
            if !end_of_stream && !gated {
                hold = t
                    .qualifies(headers.get(b":method").unwrap_or_default(), headers.get(b"content-type"), headers.get(b"content-encoding"))
                    .map(|kind| TextHold { kind, tree: verdict.action });
            }
        }
        let bands = if self.metrics.model_counters { &self.bands[..] } else { &[] };
        Outcome { verdict, edits, count, bands, permille: &self.permille, text: hold }
    }

    /// The request could not be read or scored: marked `error`, passed on or answered 503 as
    /// `on_error` says.
    pub fn error(&mut self) -> Edits<'_> {
        let mut edits = Edits::new();
        if self.filter_state {
            edits.push(Edit::SetState(STATE, ERROR_DECISION));
        }
        let name = self.headers.decision_or_scores().as_bytes();
        match self.on_error {
            OnError::Allow => edits.push(Edit::ReplaceHeader(name, ERROR_DECISION)),
            OnError::Block => {
                HeaderMap::encode_into(&mut self.reply_headers, &[(name, ERROR_DECISION)]);
                edits.push(Edit::Reply { status: 503, details: b"edgescore_error", body: ERROR_BODY, headers: &self.reply_headers });
            }
        }
        edits
    }

    /// The NLP call failed (`why`: `error=unavailable`, `error=status`, …): marked on the text
    /// header and filter state; passed on or answered 503 as `text.fail_open` says.
    pub fn text_failed(&mut self, why: &'static [u8]) -> Edits<'_> {
        let mut edits = Edits::new();
        let Some(t) = &self.text else { return edits };
        edits.push(Edit::ReplaceHeader(t.header.as_bytes(), why));
        if self.filter_state {
            edits.push(Edit::SetState(STATE_TEXT, why));
        }
        if !t.fail_open {
            HeaderMap::encode_into(&mut self.text_reply_headers, &[(self.headers.decision_or_scores().as_bytes(), ERROR_DECISION)]);
            edits.push(Edit::Reply { status: 503, details: b"edgescore_text_unavailable", body: TEXT_ERROR_BODY, headers: &self.text_reply_headers });
        }
        edits
    }

    /// A text verdict on a request whose trees decided `tree` and whose score header was
    /// `scores_header`. The verdict only strengthens the tree decision.
    pub fn decide_text(&mut self, tree: ActionKind, scores_header: &[u8], verdict: &TextVerdict) -> TextOutcome<'_> {
        let mut edits = Edits::new();
        let Some(t) = &self.text else { return TextOutcome { edits, crossed: Vec::new(), raised: None } };
        let (action, label) = verdict.decide(t);
        self.text_value.clear();
        self.text_value.extend_from_slice(verdict.header_value().as_bytes());
        let crossed = verdict.crossed(t).collect();
        let mut raised = None;
        if action > tree {
            let shadow = self.mode == Mode::Shadow && action == ActionKind::Block;
            self.text_decision.clear();
            let _ = write!(self.text_decision, "{};text={}{}", action.name(), label.unwrap_or_default(), if shadow { ";shadow" } else { "" });
            self.text_state.clear();
            self.text_state.extend_from_slice(&self.text_decision);
            self.text_state.push(b' ');
            self.text_state.extend_from_slice(scores_header);
            raised = Some(match action {
                ActionKind::Block if shadow => Raised::ShadowBlock,
                ActionKind::Block => Raised::Block,
                _ => Raised::Tag,
            });
            if raised == Some(Raised::Block) {
                HeaderMap::encode_into(&mut self.text_reply_headers, &[(self.headers.decision_or_scores().as_bytes(), &self.text_decision[..])]);
            }
        }
        edits.push(Edit::ReplaceHeader(t.header.as_bytes(), &self.text_value));
        if self.filter_state {
            edits.push(Edit::SetState(STATE_TEXT, &self.text_value));
        }
        if raised.is_some() {
            // The raised decision replaces the tree's where it was written: its own header,
            // or the combined one (decision, space, scores: `text_state`).
            match &self.headers.decision {
                Some(decision) => edits.push(Edit::ReplaceHeader(decision.as_bytes(), &self.text_decision)),
                None => edits.push(Edit::ReplaceHeader(self.headers.scores.as_bytes(), &self.text_state)),
            }
            if self.filter_state {
                edits.push(Edit::SetState(STATE, &self.text_state));
            }
        }
        if raised == Some(Raised::Block) {
            let body = t.body.as_deref().unwrap_or(DEFAULT_BLOCK_BODY).as_bytes();
            let status = t.status.unwrap_or(DEFAULT_BLOCK_STATUS);
            edits.push(Edit::Reply { status, details: b"edgescore_text_block", body, headers: &self.text_reply_headers });
        }
        TextOutcome { edits, crossed, raised }
    }

    /// `scores_header`: `bot=0.9312;abuse=0.0204`; `decision_header`: `allow` |
    /// `tag;model=bot@v1` | `block;model=bot@v1` (+ `;shadow` in shadow mode, then
    /// `;verified_bot=<agent>` for a verified signature); the filter-state
    /// value: the decision header, a space, the scores header. Writing into a Vec with reserved
    /// room cannot fail or reallocate.
    fn write_values(&mut self, scores: &[f32], v: Verdict) {
        let h = &mut self.scores_header;
        h.clear();
        for (i, (p, s)) in self.policies.iter().zip(scores).enumerate() {
            if i > 0 {
                h.push(b';');
            }
            // Registry models name their manifest version (`bot@7`), shadows are marked.
            h.extend_from_slice(if p.registry { p.id.as_bytes() } else { p.name.as_bytes() });
            if p.shadow {
                h.extend_from_slice(b"~shadow");
            }
            h.push(b'=');
            push_fixed4(h, *s);
        }
        let d = &mut self.decision_header;
        d.clear();
        d.extend_from_slice(v.action.name().as_bytes());
        if let Some(i) = v.by {
            d.extend_from_slice(b";model=");
            d.extend_from_slice(self.policies[i].id.as_bytes());
            if self.mode == Mode::Shadow && v.action == ActionKind::Block {
                d.extend_from_slice(b";shadow");
            }
        }
        if !self.agent.is_empty() {
            d.extend_from_slice(BOT_KEY);
            d.extend_from_slice(&self.agent);
        }
        let st = &mut self.state_value;
        st.clear();
        st.extend_from_slice(d);
        st.push(b' ');
        st.extend_from_slice(h);
    }

    /// The last tree decision's score header (a text-path request keeps a copy).
    pub fn scores_header(&self) -> &[u8] {
        &self.scores_header
    }
    pub fn decision_header(&self) -> &[u8] {
        &self.decision_header
    }
    pub fn state_value(&self) -> &[u8] {
        &self.state_value
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

fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(decimal(n, &mut digits));
}

/// `n` in decimal, written at the end of `digits` (no allocation, no formatter).
pub(crate) fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[at..]
}

#[cfg(test)]
mod tests;
