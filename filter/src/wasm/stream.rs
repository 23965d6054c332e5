//! One HTTP request: read the headers and properties the models need, score, act. Nothing here
//! allocates (host buffers come from the arena, see `heap`) and nothing panics: a request the
//! filter cannot read gets the configured `on_error` behaviour and a counted metric.

use super::heap::host_buffers;
use super::host::{self, REQUEST_HEADERS};
use super::plugin::Active;
use crate::config::{ActionKind, Mode, OnError};
use crate::request::{HeaderMap, Request};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::cell::RefCell;
use std::rc::Rc;

/// Filter-state keys (Envoy stores them as `wasm.<key>`, readable in access logs with
/// `%FILTER_STATE(wasm.edgescore.scores:PLAIN)%`).
const STATE_SCORES: &[u8] = b"edgescore.scores";
const STATE_DECISION: &[u8] = b"edgescore.decision";
const STATE_FEATURES: &[u8] = b"edgescore.features";

const ERROR_DECISION: &[u8] = b"error";
const ERROR_BODY: &[u8] = b"edgescore: the request could not be scored\n";

pub struct Stream {
    active: Rc<RefCell<Option<Active>>>,
}

impl Stream {
    pub fn new(active: Rc<RefCell<Option<Active>>>) -> Stream {
        Stream { active }
    }
}

impl Context for Stream {}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        match self.active.try_borrow_mut() {
            Ok(mut active) => match active.as_mut() {
                Some(a) => a.on_request_headers(),
                None => Action::Continue,
            },
            Err(_) => Action::Continue,
        }
    }
}

impl Active {
    fn on_request_headers(&mut self) -> Action {
        let props = self.scorer.properties();
        let fetch = |wanted: bool, path: &[u8]| if wanted { host::property(path) } else { None };
        let (headers, protocol, tls, sni, source) = host_buffers(|| {
            (
                host::header_pairs(REQUEST_HEADERS),
                fetch(props.protocol, b"request\0protocol"),
                fetch(props.tls_version, b"connection\0tls_version"),
                fetch(props.sni, b"connection\0requested_server_name"),
                fetch(props.source_address, b"source\0address"),
            )
        });
        let map = match headers.as_ref().map(|b| HeaderMap::parse(b.bytes())) {
            Some(Ok(map)) => map,
            // Envoy always has request headers here; a failure means a host we do not know.
            _ => return self.fail(),
        };
        let request = Request {
            headers: map,
            protocol: protocol.as_ref().map(|b| b.bytes()),
            tls_version: tls.as_ref().map(|b| b.bytes()),
            sni: sni.as_ref().map(|b| b.bytes()),
            source_address: source.as_ref().map(|b| b.bytes()),
        };
        let verdict = match self.scorer.score(&request) {
            Ok(v) => v,
            Err(_) => return self.fail(),
        };
        let s = &self.scorer;
        let names = s.header_names();
        // Replace, not add: a client must not be able to send its own score header upstream.
        host::replace_header(REQUEST_HEADERS, names.scores.as_bytes(), s.scores_header());
        host::replace_header(REQUEST_HEADERS, names.decision.as_bytes(), s.decision_header());
        host::set_property(STATE_SCORES, s.scores_header());
        host::set_property(STATE_DECISION, s.decision_header());
        let m = &self.metrics;
        if verdict.sampled {
            host::set_property(STATE_FEATURES, s.feature_log());
            host::increment(m.feature_log_lines);
        }
        host::increment(m.requests_scored);
        for ((policy, &score), ids) in s.models().iter().zip(s.scores()).zip(&m.models) {
            let band = if score as f64 >= policy.threshold { policy.action } else { ActionKind::Allow };
            host::increment(match band {
                ActionKind::Allow => ids.allow,
                ActionKind::Tag => ids.tag,
                ActionKind::Block => ids.block,
            });
            if score.is_finite() {
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
        match (verdict.action, verdict.by) {
            (ActionKind::Block, Some(i)) if enforce => {
                let policy = &s.models()[i];
                HeaderMap::encode_into(&mut self.reply_headers, &[(names.decision.as_bytes(), s.decision_header())]);
                host::send_local_response(policy.status as u32, b"edgescore_block", &policy.body, &self.reply_headers);
                Action::Pause
            }
            _ => Action::Continue,
        }
    }

    /// The request could not be read or scored: count it, mark it, and fail open or closed.
    fn fail(&mut self) -> Action {
        host::increment(self.metrics.errors);
        host::set_property(STATE_DECISION, ERROR_DECISION);
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
