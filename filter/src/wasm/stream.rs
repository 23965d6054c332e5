//! One HTTP request: read the headers and properties the models need, score, act; then, for a
//! request whose body qualifies for the text path, hold it until the NLP service answers.
//!
//! The tree path allocates nothing (host buffers come from the arena, see `heap`) and nothing
//! here panics: a request the filter cannot read gets the configured `on_error` behaviour, an
//! NLP call that fails gets `text.fail_open`, and both are counted.

use super::heap::host_buffers;
use super::host::{self, HostBuffer, HTTP_CALL_RESPONSE_BODY, HTTP_CALL_RESPONSE_HEADERS, REQUEST_BODY, REQUEST_HEADERS};
use super::metrics;
use super::plugin::Active;
use crate::config::{ActionKind, Mode, OnError};
use crate::request::{HeaderMap, Request};
use crate::scorer::action_name;
use crate::text::{self, BodyKind, Combine, TextVerdict};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, MapType};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// Filter-state keys (Envoy stores them as `wasm.<key>`, readable in access logs with
/// `%FILTER_STATE(wasm.edgescore:PLAIN)%`). `edgescore` holds the decision and the scores in
/// one value (`allow bot=0.0180;scanner=0.0474`): one `proxy_set_property` per request, not two.
const STATE: &[u8] = b"edgescore";
const STATE_FEATURES: &[u8] = b"edgescore.features";
const STATE_TEXT: &[u8] = b"edgescore.text";

/// The connection properties features read, in [`crate::conn_cache`] order, and the id that
/// keys them.
const PROPERTY_PATHS: [&[u8]; crate::conn_cache::PROPERTIES] =
    [b"request\0protocol", b"connection\0tls_version", b"connection\0requested_server_name", b"source\0address"];
const CONNECTION_ID: &[u8] = b"connection_id";

const ERROR_DECISION: &[u8] = b"error";
const ERROR_BODY: &[u8] = b"edgescore: the request could not be scored\n";
const TEXT_ERROR_BODY: &[u8] = b"edgescore: the text of the request could not be scored\n";

/// Where a request is on the text path.
#[derive(Clone, Copy)]
enum TextState {
    /// Not on the text path (or finished).
    None,
    /// Headers held; waiting for the body. Keeps the tree action for combining.
    AwaitingBody { kind: BodyKind, tree: ActionKind },
    /// Call in flight.
    Calling { token: u32, started_ns: u64, tree: ActionKind },
}

pub struct Stream {
    active: Rc<RefCell<Option<Active>>>,
    text: TextState,
}

impl Stream {
    pub fn new(active: Rc<RefCell<Option<Active>>>) -> Stream {
        Stream { active, text: TextState::None }
    }

    fn with_active(&mut self, f: impl FnOnce(&mut Active, &mut TextState) -> Action) -> Action {
        match self.active.try_borrow_mut() {
            Ok(mut active) => match active.as_mut() {
                Some(a) => f(a, &mut self.text),
                None => Action::Continue,
            },
            Err(_) => Action::Continue,
        }
    }
}

impl Context for Stream {
    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body_size: usize, _num_trailers: usize) {
        let TextState::Calling { token: t, started_ns, tree } = self.text else { return };
        if t != token {
            return;
        }
        self.text = TextState::None;
        if let Ok(mut active) = self.active.try_borrow_mut() {
            if let Some(a) = active.as_mut() {
                a.on_text_verdict(num_headers, body_size, started_ns, tree);
                return;
            }
        }
        host::continue_request();
    }
}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.with_active(|a, text| a.on_request_headers(end_of_stream, text))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.with_active(|a, text| a.on_request_body(body_size, end_of_stream, text))
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        if matches!(self.text, TextState::None) {
            return Action::Continue;
        }
        self.with_active(|a, text| a.on_request_trailers(text))
    }
}

impl Active {
    fn on_request_headers(&mut self, end_of_stream: bool, text: &mut TextState) -> Action {
        let props = self.scorer.properties();
        let wanted = [props.protocol, props.tls_version, props.sni, props.source_address];
        // Two or more properties: read `connection_id`, and the properties only when the
        // connection is new to `conns` (each property found costs a call back into the module;
        // see `conn_cache`). One property: read it, which costs no more than the id.
        let by_connection = props.count() >= 2;
        let conns = &self.conns;
        let (headers, connection, fetched) = host_buffers(|| {
            let headers = host::header_pairs(REQUEST_HEADERS);
            let connection = if by_connection { host::property(CONNECTION_ID).and_then(|b| Some(u64::from_le_bytes(b.bytes().try_into().ok()?))) } else { None };
            let known = connection.is_some_and(|id| conns.get(id).is_some());
            let fetched: [Option<HostBuffer>; 4] =
                core::array::from_fn(|k| if wanted[k] && !known { host::property(PROPERTY_PATHS[k]) } else { None });
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
        let [protocol, tls_version, sni, source_address] = match connection.and_then(|id| self.conns.get(id)) {
            Some(remembered) => remembered,
            None => fetched,
        };
        let request = Request { headers: map, protocol, tls_version, sni, source_address };
        let verdict = match self.scorer.score(&request) {
            Ok(v) => v,
            Err(_) => return self.fail(),
        };
        let s = &self.scorer;
        let names = s.header_names();
        // A client must not be able to send its own score header upstream: replace a header the
        // request has; add one it has not (cheaper; the parsed map says which).
        let put = |name: &str, value: &[u8]| match map.get(name.as_bytes()) {
            Some(_) => host::replace_header(REQUEST_HEADERS, name.as_bytes(), value),
            None => host::add_header(REQUEST_HEADERS, name.as_bytes(), value),
        };
        put(&names.scores, s.scores_header());
        put(&names.decision, s.decision_header());
        host::set_property(STATE, s.state_value());
        let m = &self.metrics;
        if verdict.sampled {
            host::set_property(STATE_FEATURES, s.feature_log());
            host::increment(m.feature_log_lines);
        }
        host::increment(m.requests_scored);
        let per_model = s.metrics_config();
        for ((policy, &score), ids) in s.models().iter().zip(s.scores()).zip(&m.models) {
            if per_model.model_counters {
                let band = if score as f64 >= policy.threshold { policy.action } else { ActionKind::Allow };
                host::increment(match band {
                    ActionKind::Allow => ids.allow,
                    ActionKind::Tag => ids.tag,
                    ActionKind::Block => ids.block,
                });
            }
            if per_model.score_histograms && score.is_finite() {
                host::record(ids.score_permille, (score.clamp(0.0, 1.0) * 1000.0).round() as u64);
            }
        }
        let enforce = s.mode() == Mode::Enforce;
        host::increment(match verdict.action {
            ActionKind::Allow => m.decision_allow,
            ActionKind::Tag => m.decision_tag,
            ActionKind::Block if enforce => m.decision_block,
            ActionKind::Block => m.decision_shadow_block,
        });
        if let (ActionKind::Block, Some(i)) = (verdict.action, verdict.by) {
            if enforce {
                let policy = &s.models()[i];
                HeaderMap::encode_into(&mut self.reply_headers, &[(names.decision.as_bytes(), s.decision_header())]);
                host::send_local_response(policy.status as u32, b"edgescore_block", &policy.body, &self.reply_headers);
                return Action::Pause;
            }
        }
        // The text path: only qualifying requests with a body wait; everything else goes on.
        if let Some(t) = &self.text {
            // A client must not be able to send its own text verdict upstream either (the map
            // is already parsed: no host call unless the header is there).
            if map.get(t.header.as_bytes()).is_some() {
                host::remove_header(REQUEST_HEADERS, t.header.as_bytes());
            }
            let gated = t.combine == Combine::TreeGated && verdict.action == ActionKind::Allow;
            if !end_of_stream && !gated {
                if let Some(kind) = t.qualifies(map.get(b":method").unwrap_or_default(), map.get(b"content-type"), map.get(b"content-encoding")) {
                    *text = TextState::AwaitingBody { kind, tree: verdict.action };
                    // Holding the headers needs `allow_on_headers_stop_iteration: true` in the
                    // Wasm filter config (Envoy >= 1.35): otherwise Envoy sends them upstream
                    // before the body arrives and the text header could not be added.
                    return Action::Pause;
                }
            }
        }
        Action::Continue
    }

    fn on_request_body(&mut self, body_size: usize, end_of_stream: bool, text: &mut TextState) -> Action {
        let (kind, tree) = match *text {
            TextState::AwaitingBody { kind, tree } => (kind, tree),
            // More body while the call is in flight: keep buffering until the verdict.
            TextState::Calling { .. } => return Action::Pause,
            TextState::None => return Action::Continue,
        };
        let Some(t) = &self.text else { return Action::Continue };
        if !end_of_stream && body_size < t.max_body_bytes as usize {
            return Action::Pause;
        }
        self.call_text(kind, tree, text)
    }

    /// Request trailers end the body without a body callback at end of stream: score what was
    /// buffered (without this a client could skip the text path by sending trailers).
    fn on_request_trailers(&mut self, text: &mut TextState) -> Action {
        match *text {
            TextState::AwaitingBody { kind, tree } => self.call_text(kind, tree, text),
            TextState::Calling { .. } => Action::Pause,
            TextState::None => Action::Continue,
        }
    }

    /// The body is complete or `max_body_bytes` long: extract its text and call the service.
    fn call_text(&mut self, kind: BodyKind, tree: ActionKind, text: &mut TextState) -> Action {
        let Some(t) = &self.text else { return Action::Continue };
        let body = host::buffer(REQUEST_BODY, 0, t.max_body_bytes as usize);
        let content = t.extract(kind, body.as_ref().map_or(&[][..], |b| b.bytes()));
        drop(body);
        if content.trim().is_empty() {
            *text = TextState::None;
            host::increment(self.metrics.text.skipped_empty);
            return Action::Continue;
        }
        let call_headers = vec![
            (":method", "POST"),
            (":path", t.path.as_str()),
            (":authority", t.authority.as_str()),
            ("content-type", "application/json"),
        ];
        host::increment(self.metrics.text.calls);
        // Through the SDK, not a raw `proxy_http_call`: the SDK's `proxy_on_http_call_response`
        // routes the answer by the token it registered at dispatch and panics ("invalid
        // token_id") on any other. It returns Envoy's BadArgument (unknown cluster) and
        // InternalFailure as errors.
        let body = text::request_body(&content);
        let timeout = Duration::from_millis(t.timeout_ms as u64);
        match hostcalls::dispatch_http_call(&t.cluster, call_headers, Some(&body), vec![], timeout) {
            Ok(token) => {
                *text = TextState::Calling { token, started_ns: host::now_ns(), tree };
                Action::Pause
            }
            Err(_) => {
                *text = TextState::None;
                self.text_failed(b"error=dispatch")
            }
        }
    }

    /// The NLP service answered (or the call failed: Envoy reports a timeout or reset as a
    /// response without headers).
    fn on_text_verdict(&mut self, num_headers: usize, body_size: usize, started_ns: u64, tree: ActionKind) {
        let Some(t) = &self.text else {
            host::continue_request();
            return;
        };
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
        // Envoy reports the call's timeout as a 504 response from its router, not a failure.
        if status == *b"504" && elapsed_ms + 5 >= t.timeout_ms as u64 {
            host::increment(self.metrics.text.timeouts);
        }
        let ok_status = status[0] == b'2';
        let body = host::buffer(HTTP_CALL_RESPONSE_BODY, 0, body_size);
        let verdict = if ok_status { body.as_ref().and_then(|b| TextVerdict::parse(b.bytes())) } else { None };
        let Some(verdict) = verdict else {
            if matches!(self.text_failed(if ok_status { b"error=bad_answer" } else { b"error=status" }), Action::Continue) {
                host::continue_request();
            }
            return;
        };
        let (action, label) = t.decide(&verdict);
        let value = verdict.header_value();
        host::replace_header(REQUEST_HEADERS, t.header.as_bytes(), value.as_bytes());
        host::set_property(STATE_TEXT, value.as_bytes());
        host::increment(metrics::text_verdict(&verdict.label));
        for i in t.crossed(&verdict) {
            host::increment(self.metrics.text.labels[i]);
        }
        // The text verdict only strengthens the tree decision. `edgescore.decision.*` counted
        // the tree decision already; what the text verdict raised is counted apart, so every
        // request stays in exactly one `decision` counter.
        if action > tree {
            let shadow = self.scorer.mode() == Mode::Shadow && action == ActionKind::Block;
            let decision = format!("{};text={}{}", action_name(action), label.unwrap_or_default(), if shadow { ";shadow" } else { "" });
            let names = self.scorer.header_names();
            host::replace_header(REQUEST_HEADERS, names.decision.as_bytes(), decision.as_bytes());
            // The scores are this request's: the scorer has moved on to other requests since,
            // the score header we set has not.
            let scores = hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, &names.scores).ok().flatten().unwrap_or_default();
            host::set_property(STATE, &[decision.as_bytes(), b" ", &scores].concat());
            let m = &self.metrics.text;
            host::increment(match action {
                ActionKind::Block if shadow => m.raised_shadow_block,
                ActionKind::Block => m.raised_block,
                _ => m.raised_tag,
            });
            if action == ActionKind::Block && !shadow {
                HeaderMap::encode_into(&mut self.reply_headers, &[(names.decision.as_bytes(), decision.as_bytes())]);
                host::send_local_response(t.block_status() as u32, b"edgescore_text_block", t.block_body(), &self.reply_headers);
                return;
            }
        }
        host::continue_request();
    }

    /// The NLP call failed: count it, mark it, fail open (continue) or closed (503). The caller
    /// resumes the request when it is outside a request callback.
    fn text_failed(&mut self, why: &[u8]) -> Action {
        host::increment(self.metrics.text.errors);
        let Some(t) = &self.text else { return Action::Continue };
        host::replace_header(REQUEST_HEADERS, t.header.as_bytes(), why);
        host::set_property(STATE_TEXT, why);
        if t.fail_open {
            Action::Continue
        } else {
            let names = self.scorer.header_names();
            HeaderMap::encode_into(&mut self.reply_headers, &[(names.decision.as_bytes(), ERROR_DECISION)]);
            host::send_local_response(503, b"edgescore_text_unavailable", TEXT_ERROR_BODY, &self.reply_headers);
            Action::Pause
        }
    }

    /// The request could not be read or scored: count it, mark it, and fail open or closed.
    fn fail(&mut self) -> Action {
        host::increment(self.metrics.errors);
        host::set_property(STATE, ERROR_DECISION);
        let names = self.scorer.header_names();
        match self.scorer.on_error() {
            OnError::Allow => {
                host::replace_header(REQUEST_HEADERS, names.decision.as_bytes(), ERROR_DECISION);
                Action::Continue
            }
            OnError::Block => {
                HeaderMap::encode_into(&mut self.reply_headers, &[(names.decision.as_bytes(), ERROR_DECISION)]);
                host::send_local_response(503, b"edgescore_error", ERROR_BODY, &self.reply_headers);
                Action::Pause
            }
        }
    }
}
