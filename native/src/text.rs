//! The text path in the native module: a request the core holds for its body (`TextHold`) waits
//! with its headers stopped while Envoy buffers the body; then its text goes to the NLP service
//! by Envoy's own per-stream HTTP callout, and the verdict strengthens the tree decision
//! (`Decision::decide_text`), as in the Wasm filter. Only qualifying requests take this path,
//! and only they allocate (the body's text, the call).
//!
//! Envoy's filter state from a module is read-only once set: the tree decision's `edgescore`
//! value of a held request is written when its text decision is known (the raised decision, or
//! the tree's when the verdict does not raise it, the call fails or the body has no text).

use crate::abi::*;
use crate::envoy::Stream;
use crate::filter::Filter;
use crate::stream::apply;
use edgescore_core::decision::{Edit, Raised, TextHold, STATE};
use edgescore_core::text::{self, TextVerdict};
use std::time::Instant;

/// A held request of this worker.
pub struct TextStream {
    /// Envoy's filter pointer: the stream's identity while it lives.
    filter: usize,
    hold: TextHold,
    /// The tree decision's score header (the verdict's decision quotes it).
    scores: Vec<u8>,
    /// The tree decision's filter-state value, written when the text decision is known.
    state: Vec<u8>,
    phase: Phase,
}

enum Phase {
    AwaitingBody,
    /// The callout is being made (the slot is unlocked meanwhile: Envoy may deliver a failure
    /// inside the call).
    Dispatching { started: Instant },
    Calling { id: u64, started: Instant },
}

impl TextStream {
    pub fn new(s: Stream, hold: TextHold, scores: &[u8], state: Vec<u8>) -> TextStream {
        TextStream { filter: s.id(), hold, scores: scores.to_vec(), state, phase: Phase::AwaitingBody }
    }
}

fn find(held: &[TextStream], s: Stream) -> Option<usize> {
    held.iter().position(|t| t.filter == s.id())
}

/// `on_http_filter_request_body`.
pub fn request_body(f: &Filter, s: Stream, end_of_stream: bool) -> u32 {
    let slot = f.workers.lock(s.worker_index());
    let Some(i) = find(&slot.text, s) else { return BODY_CONTINUE };
    if matches!(slot.text[i].phase, Phase::Calling { .. }) {
        // More body while the call is in flight: keep buffering until the verdict.
        return BODY_STOP_AND_BUFFER;
    }
    let max = f.cfg.text.as_ref().map_or(0, |t| t.max_body_bytes as usize);
    if !end_of_stream && s.request_body_len() < max {
        return BODY_STOP_AND_BUFFER;
    }
    drop(slot);
    call(f, s)
}

/// `on_http_filter_request_trailers`: trailers end the body without a body callback at end of
/// stream, so score what was buffered (a client cannot skip the text path with trailers).
pub fn request_trailers(f: &Filter, s: Stream) -> u32 {
    let slot = f.workers.lock(s.worker_index());
    let Some(i) = find(&slot.text, s) else { return TRAILERS_CONTINUE };
    if matches!(slot.text[i].phase, Phase::Calling { .. }) {
        return TRAILERS_STOP;
    }
    drop(slot);
    if call(f, s) == BODY_CONTINUE {
        TRAILERS_CONTINUE
    } else {
        TRAILERS_STOP
    }
}

/// The body is complete or `max_body_bytes` long: extract its text and call the service.
fn call(f: &Filter, s: Stream) -> u32 {
    let Some(t) = &f.cfg.text else { return BODY_CONTINUE };
    let body = s.request_body(t.max_body_bytes as usize);
    let payload = {
        let mut guard = f.workers.lock(s.worker_index());
        let slot = &mut *guard;
        let Some(i) = find(&slot.text, s) else { return BODY_CONTINUE };
        let content = text::extract(t, slot.text[i].hold.kind, &body);
        if content.trim().is_empty() {
            slot.pending.add(f.metrics.text.skipped_empty, 1);
            let held = slot.text.swap_remove(i);
            s.set_filter_state(STATE, &held.state);
            return BODY_CONTINUE;
        }
        slot.pending.add(f.metrics.text.calls, 1);
        slot.text[i].phase = Phase::Dispatching { started: Instant::now() };
        slot.inline_verdict = None;
        text::request_body(&content)
    };
    let sent = s.callout(&t.cluster, &t.path, &t.authority, &payload, t.timeout_ms as u64);
    let mut guard = f.workers.lock(s.worker_index());
    let slot = &mut *guard;
    if let Some(replied) = slot.inline_verdict.take() {
        // Envoy answered inside the call (`verdict` ran and did not resume the request itself).
        return if replied { BODY_STOP_AND_BUFFER } else { BODY_CONTINUE };
    }
    let Some(i) = find(&slot.text, s) else { return BODY_CONTINUE };
    match (sent, &slot.text[i].phase) {
        (Ok(id), Phase::Dispatching { started }) => {
            slot.text[i].phase = Phase::Calling { id, started: *started };
            BODY_STOP_AND_BUFFER
        }
        _ => {
            let held = slot.text.swap_remove(i);
            if failed(f, slot, s, &held, b"error=dispatch") {
                BODY_STOP_AND_BUFFER
            } else {
                BODY_CONTINUE
            }
        }
    }
}

/// `on_http_filter_http_callout_done`: the service answered (or the call failed).
pub fn verdict(f: &Filter, s: Stream, id: u64, result: u32, headers: &[EnvoyHeader], chunks: &[EnvoyBuffer]) {
    let Some(t) = &f.cfg.text else { return };
    let Some(mut guard) = f.workers.lock_unless_reentrant(s.worker_index()) else { return };
    let slot = &mut *guard;
    let found = slot.text.iter().position(|h| {
        h.filter == s.id()
            && match h.phase {
                Phase::Dispatching { .. } => true,
                Phase::Calling { id: c, .. } => c == id,
                Phase::AwaitingBody => false,
            }
    });
    let Some(i) = found else { return };
    let held = slot.text.swap_remove(i);
    let (started, inline) = match held.phase {
        Phase::Calling { started, .. } => (started, false),
        Phase::Dispatching { started } => (started, true),
        Phase::AwaitingBody => return,
    };
    // Inside the callout call (`call` resumes the request by its return value) or later, from
    // Envoy's event loop (the request is resumed here).
    let resume = |slot: &mut crate::workers::Slot, replied: bool| {
        if inline {
            slot.inline_verdict = Some(replied);
        } else if !replied {
            s.continue_decoding();
        }
    };
    let elapsed_ms = started.elapsed().as_millis() as u64;
    f.envoy.record(f.metrics.text.latency_ms, elapsed_ms);
    // SAFETY: Envoy's arrays, valid during this hook.
    let status = headers.iter().find(|h| unsafe { h.name_bytes() } == b":status").map(|h| unsafe { h.value_bytes() });
    let Some(status) = status.filter(|_| result == CALLOUT_RESULT_SUCCESS) else {
        // A reset, no healthy upstream, or an answer too large.
        let replied = failed(f, slot, s, &held, b"error=unavailable");
        return resume(slot, replied);
    };
    let body: Vec<u8> = chunks.iter().flat_map(|c| unsafe { c.bytes() }).copied().collect();
    // Envoy answers the call's own timeout with a 504 from its router ("upstream request
    // timeout"); the clock rule covers proxies in between that word it differently.
    if status == b"504" && (body == b"upstream request timeout" || elapsed_ms + 5 >= t.timeout_ms as u64) {
        slot.pending.add(f.metrics.text.timeouts, 1);
    }
    let ok = status.first() == Some(&b'2');
    let Some(verdict) = ok.then(|| TextVerdict::parse(&body)).flatten() else {
        let replied = failed(f, slot, s, &held, if ok { b"error=bad_answer" } else { b"error=status" });
        return resume(slot, replied);
    };
    let Some(worker) = slot.current.as_mut() else { return resume(slot, false) };
    let outcome = worker.scorer.decision_mut().decide_text(held.hold.tree, &held.scores, &verdict);
    if !outcome.edits.iter().any(|e| matches!(e, Edit::SetState(k, _) if k == STATE)) {
        s.set_filter_state(STATE, &held.state);
    }
    let replied = apply(s, &outcome.edits);
    let m = &f.metrics.text;
    slot.pending.verdict(&verdict.label);
    let mut count = |c| slot.pending.add(c, 1);
    for &i in &outcome.crossed {
        if let Some(&c) = m.labels.get(i) {
            count(c);
        }
    }
    if let Some(raised) = outcome.raised {
        count(match raised {
            Raised::ShadowBlock => m.raised_shadow_block,
            Raised::Block => m.raised_block,
            Raised::Tag => m.raised_tag,
        });
    }
    resume(slot, replied);
}

/// The call failed: counted, and `text.fail_open` applied. True when the request was answered
/// locally (503).
fn failed(f: &Filter, slot: &mut crate::workers::Slot, s: Stream, held: &TextStream, why: &'static [u8]) -> bool {
    slot.pending.add(f.metrics.text.errors, 1);
    s.set_filter_state(STATE, &held.state);
    let Some(worker) = slot.current.as_mut() else { return false };
    apply(s, &worker.scorer.decision_mut().text_failed(why))
}

/// At the end of a stream (`stream::complete`): a held stream that ends (a reset, a client
/// gone) is forgotten.
pub fn forget(slot: &mut crate::workers::Slot, s: Stream) {
    if let Some(i) = find(&slot.text, s) {
        slot.text.swap_remove(i);
    }
}
