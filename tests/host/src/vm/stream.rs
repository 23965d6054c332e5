//! The test's `Stream` handle: per-stream properties, and what the filter did to the request
//! and response.

use super::{Dir, Stream};
use crate::headers::HeaderMap;
use crate::state::*;
use std::collections::BTreeMap;

impl Stream {
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Sets a property for this stream (raw, Envoy-serialised bytes: strings as-is, ints as
    /// 8-byte little-endian, bools as one byte). `path` like `&["source", "address"]`.
    pub fn set_property(&self, path: &[&str], value: impl AsRef<[u8]>) {
        self.state
            .lock()
            .unwrap()
            .properties
            .insert(path.join("\0").into_bytes(), value.as_ref().to_vec());
    }

    /// An int64 property (e.g. `source.port`, `connection.id`), serialised as Envoy does.
    pub fn set_property_i64(&self, path: &[&str], v: i64) {
        self.set_property(path, v.to_le_bytes())
    }

    pub fn set_property_bool(&self, path: &[&str], v: bool) {
        self.set_property(path, [v as u8])
    }

    fn direction<T>(&self, dir: Dir, f: impl FnOnce(&Direction) -> T) -> T {
        let st = self.state.lock().unwrap();
        f(match dir {
            Dir::Request => &st.request,
            Dir::Response => &st.response,
        })
    }

    /// The request headers as they are now (after the filter's changes).
    pub fn request_headers(&self) -> HeaderMap {
        self.direction(Dir::Request, headers_now)
    }

    /// The request body so far: what passed the filter plus what it is holding.
    pub fn request_body(&self) -> Vec<u8> {
        self.direction(Dir::Request, body_so_far)
    }

    pub fn request_trailers(&self) -> Option<HeaderMap> {
        self.direction(Dir::Request, |d| d.trailers.clone())
    }

    /// What reached the upstream side of the filter: headers (None while held), body, and
    /// whether end of stream passed.
    pub fn upstream_request(&self) -> (Option<HeaderMap>, Vec<u8>, bool) {
        self.direction(Dir::Request, passed)
    }

    pub fn response_headers(&self) -> HeaderMap {
        self.direction(Dir::Response, headers_now)
    }

    pub fn response_body(&self) -> Vec<u8> {
        self.direction(Dir::Response, body_so_far)
    }

    /// What reached the client side of the filter.
    pub fn downstream_response(&self) -> (Option<HeaderMap>, Vec<u8>, bool) {
        self.direction(Dir::Response, passed)
    }

    pub fn local_reply(&self) -> Option<LocalReply> {
        self.state.lock().unwrap().local_reply.clone()
    }

    /// Filter state written by `proxy_set_property(path, value)` (Envoy key `wasm.<path>`);
    /// `path` is the raw path the guest passed (segments joined by NUL).
    pub fn filter_state(&self, path: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        let mut key = b"wasm.".to_vec();
        key.extend_from_slice(path.as_ref());
        self.state.lock().unwrap().filter_state.get(&key).cloned()
    }

    /// All filter state, keys as Envoy has them (`wasm.` prefix, NULs shown as `\0`).
    pub fn filter_state_all(&self) -> BTreeMap<String, Vec<u8>> {
        self.state
            .lock()
            .unwrap()
            .filter_state
            .iter()
            .map(|(k, v)| (String::from_utf8_lossy(k).into_owned(), v.clone()))
            .collect()
    }

    pub fn request_flow(&self) -> Flow {
        self.direction(Dir::Request, |d| d.flow)
    }

    pub fn response_flow(&self) -> Flow {
        self.direction(Dir::Response, |d| d.flow)
    }

    /// True while the request is held by the filter (paused headers or buffering body).
    pub fn request_paused(&self) -> bool {
        matches!(
            self.request_flow(),
            Flow::StopAll | Flow::HeadersStopped | Flow::Buffering
        )
    }

    pub fn is_reset(&self) -> bool {
        self.state.lock().unwrap().reset
    }

    pub fn failed(&self) -> bool {
        self.state.lock().unwrap().failed
    }

    /// A copy of everything recorded for this stream.
    pub fn snapshot(&self) -> StreamState {
        self.state.lock().unwrap().clone()
    }
}

fn headers_now(d: &Direction) -> HeaderMap {
    d.headers.clone().unwrap_or_default()
}

fn body_so_far(d: &Direction) -> Vec<u8> {
    [&d.forwarded_body[..], &d.body, &d.held_body].concat()
}

/// What passed the filter: headers (None while held), body, and whether end of stream passed.
fn passed(d: &Direction) -> (Option<HeaderMap>, Vec<u8>, bool) {
    (
        d.forwarded_headers.clone(),
        d.forwarded_body.clone(),
        d.ended,
    )
}
