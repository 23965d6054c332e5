//! What the streams of one configuration share — the scorer, its metric ids, the connection
//! cache — and how a request runs through them: read the host, call the core, apply its edits,
//! count. The decision itself is the core's (`edgescore_core::decision`).
//!
//! The tree path allocates nothing (host buffers come from the arena, see `heap`) and nothing
//! here panics: a request the filter cannot read gets the configured `on_error` behaviour, an
//! NLP call that fails gets `text.fail_open`, and both are counted.

use crate::apply::apply;
use crate::heap::host_buffers;
use crate::host::{self, HostBuffer, HTTP_CALL_RESPONSE_BODY, HTTP_CALL_RESPONSE_HEADERS, REQUEST_BODY, REQUEST_HEADERS};
use crate::metrics::{self, Metrics};
use edgescore_core::action::ActionKind;
use edgescore_core::conn_cache::ConnCache;
use edgescore_core::decision::{Edits, Raised, TextHold};
use edgescore_core::request::{HeaderMap, Property, Request};
use edgescore_core::scorer::Scorer;
use edgescore_core::signatures::Bots;
use edgescore_core::text::{self, TextVerdict};
use edgescore_core::velocity::Clients;
use proxy_wasm::hostcalls;
use proxy_wasm::types::Action;
use std::time::Duration;

/// The id that keys remembered connection properties.
const CONNECTION_ID: &[u8] = b"connection_id";
/// The status Envoy answered the stream with (an int64, little-endian).
const RESPONSE_CODE: &[u8] = b"response\0code";

/// Connections whose properties are remembered per worker (a direct-mapped table of ~370-byte
/// slots: 96 KiB).
const CONN_SLOTS: usize = 256;

/// Where a request is on the text path.
#[derive(Clone)]
pub enum TextState {
    /// Not on the text path (or finished).
    None,
    /// Headers held; waiting for the body. Keeps the tree decision for combining.
    AwaitingBody { hold: TextHold, scores: Vec<u8> },
    /// Call in flight.
    Calling { token: u32, started_ns: u64, tree: ActionKind, scores: Vec<u8> },
}

pub struct Serving {
    pub scorer: Scorer,
    pub metrics: Metrics,
    /// Connection properties by connection id (see [`ConnCache`]).
    conns: ConnCache,
    /// This worker's clients (`velocity`), handed from serving to serving by `Plugin::serve`.
    pub clients: Option<Clients>,
    /// This worker's signature checks (`verified_bots`), with the keys the poller published.
    pub bots: Option<Bots>,
}

impl Serving {
    pub fn new(scorer: Scorer, clients: Option<Clients>, bots: Option<Bots>) -> Serving {
        let labels: Vec<&str> = scorer.decision().text_config().iter().flat_map(|t| t.labels.keys().map(String::as_str)).collect();
        let metrics = Metrics::define(scorer.models(), scorer.metrics_config(), &labels, scorer.drift().bins(), bots.is_some());
        Serving { scorer, metrics, conns: ConnCache::new(CONN_SLOTS), clients, bots }
    }

    /// Hands every count (the drift counts the scorer kept included) to Envoy: the tick's work.
    pub fn flush(&mut self) {
        self.metrics.take_drift(self.scorer.drift_mut());
        if let Some(c) = self.clients.as_mut() {
            self.metrics.tally.add(self.metrics.velocity_evictions, c.take_evictions());
        }
        if let Some(b) = self.bots.as_mut() {
            self.metrics.take_bots(b.take_counts());
        }
        self.metrics.tally.flush();
    }

    /// `client`: set to the request's client when the models read its answers' shares, for
    /// [`Serving::on_stream_end`].
    pub fn on_request_headers(&mut self, end_of_stream: bool, text: &mut TextState, client: &mut Option<u64>) -> Action {
        if !self.scorer.models().iter().any(|p| !p.shadow) {
            // No active model: registry models not delivered yet and no bootstrap artifact
            // (docs/registry.md, "Start-up"). The configured `on_error`, counted.
            return self.fail();
        }
        let props = self.scorer.properties();
        let wanted = props.wanted();
        // Two or more properties: read `connection_id`, and the properties only when the
        // connection is new to `conns` (each property found costs a call back into the module;
        // see `conn_cache`). One property: read it, which costs no more than the id.
        let by_connection = props.count() >= 2;
        let conns = &self.conns;
        let (headers, connection, fetched) = host_buffers(|| {
            let headers = host::header_pairs(REQUEST_HEADERS);
            let connection = if by_connection { host::property(CONNECTION_ID).and_then(|b| Some(u64::from_le_bytes(b.bytes().try_into().ok()?))) } else { None };
            let known = connection.is_some_and(|id| conns.get(id).is_some());
            let fetched: [Option<HostBuffer>; 4] = Property::ALL.map(|p| if wanted[p as usize] && !known { host::property(p.path()) } else { None });
            (headers, connection, fetched)
        });
        let map = match headers.as_ref().map(|b| HeaderMap::parse(b.bytes())) {
            Some(Ok(map)) => map,
            // Envoy always has request headers here; a failure means a host we do not know.
            _ => return self.fail(),
        };
        let fetched = fetched.each_ref().map(|b| b.as_ref().map(HostBuffer::bytes));
        if let Some(id) = connection {
            if self.conns.get(id).is_none() {
                // A value too long for the table is not remembered: read again next time.
                self.conns.put(id, fetched);
            }
        }
        let properties = match connection.and_then(|id| self.conns.get(id)) {
            Some(remembered) => remembered,
            None => fetched,
        };
        let mut request = Request::with_properties(map, properties);
        let needs = self.scorer.velocity();
        // One host call for the clock, whichever of the two reads it.
        let now_s = if (needs.requests && self.clients.is_some()) || self.bots.is_some() { now_s() } else { 0 };
        if let (true, Some(clients)) = (needs.requests, self.clients.as_mut()) {
            if let Some((c, v)) = clients.request(&request, now_s) {
                request.velocity = Some(v);
                *client = needs.answers.then_some(c);
            }
        }
        if let Some(bots) = self.bots.as_mut() {
            request.signature = bots.check(&request.headers, now_s as u64);
        }
        let outcome = match self.scorer.decide(&request, end_of_stream) {
            Ok(o) => o,
            Err(_) => return self.fail(),
        };
        let replied = apply(&outcome.edits);
        // Counted in memory, flushed to Envoy on the tick (`metrics`).
        let m = &mut self.metrics;
        let t = &mut m.tally;
        if outcome.verdict.sampled {
            t.add(m.feature_log_lines, 1);
        }
        t.add(m.requests_scored, 1);
        for (band, ids) in outcome.bands.iter().zip(&m.models) {
            t.add(
                match band {
                    ActionKind::Allow => ids.allow,
                    ActionKind::Tag => ids.tag,
                    ActionKind::Block => ids.block,
                },
                1,
            );
        }
        for (permille, ids) in outcome.permille.iter().zip(&m.models) {
            if let (Some(v), Some(h)) = (permille, &ids.scores) {
                t.record(h, *v);
            }
        }
        m.decision(outcome.count);
        if replied {
            return Action::Pause;
        }
        match outcome.text {
            // Only qualifying requests with a body wait. Holding the headers needs
            // `allow_on_headers_stop_iteration: true` in the Wasm filter config (Envoy >= 1.35):
            // otherwise Envoy sends them upstream before the body arrives and the text header
            // could not be added. The text path allocates (the call, the verdict): off the
            // tree path, only for qualifying requests.
            Some(hold) => {
                *text = TextState::AwaitingBody { hold, scores: self.scorer.scores_header().to_vec() };
                Action::Pause
            }
            None => Action::Continue,
        }
    }

    /// The stream ended (its context is being deleted): counts the status it was answered with
    /// for `client`. Read from `response.code` in `proxy_on_delete`, which Envoy calls for every
    /// stream anyway: exporting `proxy_on_response_headers` would cost every request a VM entry
    /// (~2 µs of Envoy CPU, filter/callbacks.txt), this costs one host call, and only for
    /// requests of a client whose shares a model reads.
    pub fn on_stream_end(&mut self, client: u64) {
        let status = host_buffers(|| host::property(RESPONSE_CODE).and_then(|b| Some(i64::from_le_bytes(b.bytes().try_into().ok()?))));
        if let (Some(status), Some(clients)) = (status.and_then(|s| u16::try_from(s).ok()), self.clients.as_mut()) {
            clients.answer(client, status, now_s());
        }
    }

    pub fn on_request_body(&mut self, body_size: usize, end_of_stream: bool, text: &mut TextState) -> Action {
        match text {
            TextState::AwaitingBody { .. } => {}
            // More body while the call is in flight: keep buffering until the verdict.
            TextState::Calling { .. } => return Action::Pause,
            TextState::None => return Action::Continue,
        }
        let Some(t) = self.scorer.decision().text_config() else { return Action::Continue };
        if !end_of_stream && body_size < t.max_body_bytes as usize {
            return Action::Pause;
        }
        self.call_text(text)
    }

    /// Request trailers end the body without a body callback at end of stream: score what was
    /// buffered (without this a client could skip the text path by sending trailers).
    pub fn on_request_trailers(&mut self, text: &mut TextState) -> Action {
        match text {
            TextState::AwaitingBody { .. } => self.call_text(text),
            TextState::Calling { .. } => Action::Pause,
            TextState::None => Action::Continue,
        }
    }

    /// The body is complete or `max_body_bytes` long: extract its text and call the service.
    fn call_text(&mut self, text: &mut TextState) -> Action {
        let TextState::AwaitingBody { hold, scores } = std::mem::replace(text, TextState::None) else { return Action::Continue };
        let Some(t) = self.scorer.decision().text_config() else { return Action::Continue };
        let body = host::buffer(REQUEST_BODY, 0, t.max_body_bytes as usize);
        let content = text::extract(t, hold.kind, body.as_ref().map_or(&[][..], |b| b.bytes()));
        drop(body);
        if content.trim().is_empty() {
            self.metrics.bump(self.metrics.text.skipped_empty);
            return Action::Continue;
        }
        let call_headers = vec![(":method", "POST"), (":path", t.path.as_str()), (":authority", t.authority.as_str()), ("content-type", "application/json")];
        self.metrics.bump(self.metrics.text.calls);
        // Through the SDK, not a raw `proxy_http_call`: the SDK's `proxy_on_http_call_response`
        // routes the answer by the token it registered at dispatch and panics ("invalid
        // token_id") on any other. It returns Envoy's BadArgument (unknown cluster) and
        // InternalFailure as errors.
        let body = text::request_body(&content);
        let timeout = Duration::from_millis(t.timeout_ms as u64);
        match hostcalls::dispatch_http_call(&t.cluster, call_headers, Some(&body), vec![], timeout) {
            Ok(token) => {
                *text = TextState::Calling { token, started_ns: host::now_ns(), tree: hold.tree, scores };
                Action::Pause
            }
            Err(_) => self.text_failed(b"error=dispatch"),
        }
    }

    /// The NLP service answered (or the call failed: Envoy reports a timeout or reset as a
    /// response without headers). Runs outside a request callback: resumes the request itself.
    pub fn on_text_verdict(&mut self, num_headers: usize, body_size: usize, started_ns: u64, tree: ActionKind, scores: &[u8]) {
        let Some(t) = self.scorer.decision().text_config() else {
            host::continue_request();
            return;
        };
        let timeout_ms = t.timeout_ms as u64;
        let elapsed_ms = host::now_ns().saturating_sub(started_ns) / 1_000_000;
        host::record(self.metrics.text.latency_ms, elapsed_ms);
        if num_headers == 0 {
            // Envoy's onFailure (reset, no healthy upstream, …) arrives without headers.
            if matches!(self.text_failed(b"error=unavailable"), Action::Continue) {
                host::continue_request();
            }
            return;
        }
        let headers = host::header_pairs(HTTP_CALL_RESPONSE_HEADERS);
        let status: [u8; 3] = headers
            .as_ref()
            .and_then(|b| HeaderMap::parse(b.bytes()).ok())
            .and_then(|m| m.get(b":status"))
            .and_then(|s| s.try_into().ok())
            .unwrap_or(*b"000");
        drop(headers);
        let body = host::buffer(HTTP_CALL_RESPONSE_BODY, 0, body_size);
        // Envoy reports the call's timeout as a 504 local reply from its router ("upstream
        // request timeout"), not a failure. The body is the sure sign: libevent arms timers
        // from the loop's cached time, so on a busy worker the reply can come a few ms before
        // `timeout_ms` by our clock (seen under CI load: 2 of 3 timeouts counted). The clock
        // rule stays for proxies in between that word it differently.
        let router_timeout = body.as_ref().is_some_and(|b| b.bytes() == b"upstream request timeout");
        if status == *b"504" && (router_timeout || elapsed_ms + 5 >= timeout_ms) {
            self.metrics.bump(self.metrics.text.timeouts);
        }
        let ok_status = status[0] == b'2';
        let verdict = if ok_status { body.as_ref().and_then(|b| TextVerdict::parse(b.bytes())) } else { None };
        let Some(verdict) = verdict else {
            if matches!(self.text_failed(if ok_status { b"error=bad_answer" } else { b"error=status" }), Action::Continue) {
                host::continue_request();
            }
            return;
        };
        let outcome = self.scorer.decision_mut().decide_text(tree, scores, &verdict);
        let replied = apply(&outcome.edits);
        // The service's own label: a metric defined on first sight, counted directly.
        host::increment(metrics::text_verdict(&verdict.label));
        let (t, m) = (&mut self.metrics.tally, &self.metrics.text);
        for &i in &outcome.crossed {
            if let Some(&c) = m.labels.get(i) {
                t.add(c, 1);
            }
        }
        if let Some(raised) = outcome.raised {
            let c = match raised {
                Raised::ShadowBlock => m.raised_shadow_block,
                Raised::Block => m.raised_block,
                Raised::Tag => m.raised_tag,
            };
            t.add(c, 1);
        }
        if !replied {
            host::continue_request();
        }
    }

    /// The NLP call failed: count it and apply `text.fail_open`. The caller resumes the
    /// request when it is outside a request callback.
    fn text_failed(&mut self, why: &'static [u8]) -> Action {
        self.metrics.bump(self.metrics.text.errors);
        finish(&self.scorer.decision_mut().text_failed(why))
    }

    /// The request could not be read or scored: count it and apply `on_error`.
    fn fail(&mut self) -> Action {
        self.metrics.bump(self.metrics.errors);
        finish(&self.scorer.decision_mut().error())
    }
}

/// A swap or reconfiguration replaces the serving: its drift counts go to the tally, which
/// flushes as it is dropped.
impl Drop for Serving {
    fn drop(&mut self) {
        self.metrics.take_drift(self.scorer.drift_mut());
        if let Some(b) = self.bots.as_mut() {
            self.metrics.take_bots(b.take_counts());
        }
    }
}

fn finish(edits: &Edits<'_>) -> Action {
    if apply(edits) {
        Action::Pause
    } else {
        Action::Continue
    }
}

/// The host's clock (proxy-wasm's current time) in whole seconds, as the velocity table counts.
fn now_s() -> u32 {
    (host::now_ns() / 1_000_000_000) as u32
}
