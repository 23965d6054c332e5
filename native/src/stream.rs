//! One request on its worker: read the headers (Envoy's array of pointers into its own header
//! map, read in place by the core) and the connection attributes the models need, call the
//! core, apply its edits, count. The decision itself is the core's
//! (`edgescore_core::decision`), bit for bit the Wasm filter's.
//!
//! No allocation on this path once a worker's buffers have grown to its largest request, and no
//! call into Envoy's stats (the counts go to the worker's slot, see `metrics`).

use crate::abi::*;
use crate::envoy::Stream;
use crate::filter::Filter;
use crate::text::TextStream;
use crate::workers::Slot;
use edgescore_core::action::ActionKind;
use edgescore_core::decision::{Edit, Edits, STATE};
use edgescore_core::request::{HeaderMap, Property, Request};

/// Envoy's attribute for each [`Property`], in [`Property::ALL`] order.
const ATTRIBUTES: [u32; 4] = [ATTR_REQUEST_PROTOCOL, ATTR_CONNECTION_TLS_VERSION, ATTR_CONNECTION_REQUESTED_SERVER_NAME, ATTR_SOURCE_ADDRESS];

/// Most headers a local reply carries (the core writes one or two).
const MAX_REPLY_HEADERS: usize = 16;

/// `on_http_filter_request_headers`.
pub fn request_headers(f: &Filter, s: Stream, end_of_stream: bool) -> u32 {
    let mut guard = f.workers.lock(s.worker_index());
    guard.take_next();
    let Slot { current, pending, headers, text, clients, stream_clients, bots, .. } = &mut *guard;
    if clients.is_some() {
        // What an earlier stream at this address left, were it never completed: not this one's.
        stream_clients.take(s.id());
    }
    let Some(worker) = current.as_mut() else { return HEADERS_CONTINUE };
    if !worker.scorer.models().iter().any(|p| !p.shadow) || !s.request_headers(headers) {
        // No active model yet (registry models not delivered, no bootstrap artifact), or a
        // header map Envoy would not hand over: the configured `on_error`, counted.
        pending.add(f.metrics.errors, 1);
        return finish(s, &worker.scorer.decision_mut().error());
    }
    #[cfg(feature = "test-panic")]
    crate::guard::test_panic(headers);
    // SAFETY: Envoy's header bytes live, unchanged, until this hook returns.
    let map = unsafe { HeaderMap::from_c_headers(headers) };
    let wanted = worker.scorer.properties().wanted();
    let properties = Property::ALL.map(|p| if wanted[p as usize] { s.attribute(ATTRIBUTES[p as usize]) } else { None });
    let mut request = Request::with_properties(map, properties);
    let needs = worker.scorer.velocity();
    let now = if needs.requests || bots.is_some() { now_s() } else { 0 };
    if let (true, Some(c)) = (needs.requests, clients.as_mut()) {
        let counted = c.request(&request, now);
        request.velocity = counted.map(|(_, v)| v);
        if needs.answers {
            stream_clients.remember(s.id(), counted.map(|(client, _)| client));
        }
    }
    if let Some(b) = bots.as_mut() {
        request.signature = b.check(&request.headers, now as u64);
    }
    let outcome = match worker.scorer.decide(&request, end_of_stream) {
        Ok(o) => o,
        Err(_) => {
            pending.add(f.metrics.errors, 1);
            return finish(s, &worker.scorer.decision_mut().error());
        }
    };
    // A request held for its body (the text path) gets its filter-state decision when the text
    // decision is known (Envoy's filter state from a module is read-only once set).
    let held_state = outcome.text.map(|_| outcome.edits.iter().find(|e| matches!(e, Edit::SetState(k, _) if *k == STATE)));
    let replied = match held_state {
        Some(_) => apply_except_state(s, &outcome.edits),
        None => apply(s, &outcome.edits),
    };
    let m = &f.metrics;
    if outcome.verdict.sampled {
        pending.add(m.feature_log_lines, 1);
    }
    pending.add(m.requests_scored, 1);
    for (band, counts) in outcome.bands.iter().zip(&worker.models) {
        let i = match band {
            ActionKind::Allow => 0,
            ActionKind::Tag => 1,
            ActionKind::Block => 2,
        };
        pending.add(counts.bands[i], 1);
    }
    for (permille, counts) in outcome.permille.iter().zip(&worker.models) {
        if let Some(v) = permille {
            pending.record(counts, *v);
        }
    }
    pending.add(m.decisions[outcome.count as usize], 1);
    if replied {
        return HEADERS_STOP_ITERATION;
    }
    match outcome.text {
        // Only qualifying requests with a body wait; the text path allocates (the held
        // request's record, the call, the verdict), off the tree path.
        Some(hold) => {
            let state = match held_state.flatten() {
                Some(Edit::SetState(_, v)) => v.to_vec(),
                _ => Vec::new(),
            };
            let scores = worker.scorer.scores_header();
            text.push(TextStream::new(s, hold, scores, state));
            HEADERS_STOP_ITERATION
        }
        None => HEADERS_CONTINUE,
    }
}

/// `on_http_filter_stream_complete`: forgets a held stream, and counts the status the stream
/// was answered with for its client when the models read a client's shares. Envoy calls this
/// hook for every stream anyway (the Wasm filter reads the same `response.code` as its stream
/// is deleted); the client is the one its request headers remembered (`stream_clients`), or,
/// if another stream took its slot, found again from the request headers, still readable here.
/// Envoy 1.40 runs it after the hook that sent a local reply returned (the module's own block
/// replies count here, tests/test_velocity.py); were it ever re-entrant, the module forgot the
/// stream before it called into Envoy, and that one answer would go uncounted.
pub fn complete(f: &Filter, s: Stream) {
    let Some(mut guard) = f.workers.lock_unless_reentrant(s.worker_index()) else { return };
    crate::text::forget(&mut guard, s);
    let Slot { current, headers, clients, stream_clients, .. } = &mut *guard;
    let (Some(worker), Some(clients)) = (current.as_ref(), clients.as_mut()) else { return };
    let remembered = stream_clients.take(s.id());
    if !worker.scorer.velocity().answers || remembered == Some(None) {
        return;
    }
    let Some(status) = s.attribute_int(ATTR_RESPONSE_CODE).and_then(|c| u16::try_from(c).ok()) else { return };
    if let Some(Some(id)) = remembered {
        return clients.answer(id, status, now_s());
    }
    if !s.request_headers(headers) {
        return;
    }
    // SAFETY: Envoy's header bytes live, unchanged, until this hook returns.
    let mut request = Request::new(unsafe { HeaderMap::from_c_headers(headers) });
    if clients.key().reads_address() {
        request.source_address = s.attribute(ATTR_SOURCE_ADDRESS);
    }
    if let Some(id) = clients.client(&request) {
        clients.answer(id, status, now_s());
    }
}

/// The system clock in whole seconds, as the velocity table counts.
fn now_s() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as u32)
}

/// A request whose hook panicked (caught at the FFI boundary): counted, and given the
/// configured `on_error`.
pub fn after_panic(f: &Filter, s: Stream) -> u32 {
    let mut guard = f.workers.lock(s.worker_index());
    let Slot { current, pending, .. } = &mut *guard;
    pending.add(f.metrics.panics, 1);
    pending.add(f.metrics.errors, 1);
    match current.as_mut() {
        Some(worker) => finish(s, &worker.scorer.decision_mut().error()),
        None => HEADERS_CONTINUE,
    }
}

/// A body or trailers hook that panicked: counted; the request goes on as `fallback` says.
pub fn count_panic(f: &Filter, s: Stream, fallback: u32) -> u32 {
    let mut slot = f.workers.lock(s.worker_index());
    slot.pending.add(f.metrics.panics, 1);
    slot.pending.add(f.metrics.errors, 1);
    fallback
}

/// A verdict hook that panicked: counted, and the held request resumed (never left hanging).
pub fn resume_after_panic(f: &Filter, s: Stream) {
    count_panic(f, s, 0);
    s.continue_decoding();
}

fn finish(s: Stream, edits: &Edits<'_>) -> u32 {
    if apply(s, edits) {
        HEADERS_STOP_ITERATION
    } else {
        HEADERS_CONTINUE
    }
}

/// Applies `edits` in order; true when one answered the request locally.
pub fn apply(s: Stream, edits: &Edits<'_>) -> bool {
    apply_where(s, edits, |_| true)
}

/// [`apply`] without the `edgescore` filter-state value (a held request's, written later).
fn apply_except_state(s: Stream, edits: &Edits<'_>) -> bool {
    apply_where(s, edits, |e| !matches!(e, Edit::SetState(k, _) if *k == STATE))
}

fn apply_where(s: Stream, edits: &Edits<'_>, keep: impl Fn(&Edit<'_>) -> bool) -> bool {
    let mut replied = false;
    for edit in edits.iter().filter(|e| keep(e)) {
        match edit {
            Edit::AddHeader(name, value) => {
                s.add_header(name, value);
            }
            Edit::ReplaceHeader(name, value) => {
                s.set_header(name, value);
            }
            Edit::RemoveHeader(name) => {
                s.remove_header(name);
            }
            Edit::SetState(key, value) => {
                s.set_filter_state(key, value);
            }
            Edit::Reply { status, details, body, headers } => {
                let mut out = [ModuleHeader { key: ModuleBuffer::NULL, value: ModuleBuffer::NULL }; MAX_REPLY_HEADERS];
                let mut n = 0;
                if let Ok(map) = HeaderMap::parse(headers) {
                    for ((name, value), slot) in map.iter().zip(out.iter_mut()) {
                        *slot = ModuleHeader { key: ModuleBuffer::of(name), value: ModuleBuffer::of(value) };
                        n += 1;
                    }
                }
                s.send_response(status as u32, &mut out[..n], body, details);
                replied = true;
            }
        }
    }
    replied
}
