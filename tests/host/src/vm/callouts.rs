//! Delivering what the guest waits for: HTTP call responses (or failures, timeouts), ticks and
//! shared-queue notifications.

use super::Vm;
use crate::headers::{HeaderMap, IntoHeaders};
use crate::state::*;
use anyhow::{bail, Result};
use std::time::Duration;

impl Vm {
    /// Calls dispatched with `proxy_http_call` and not yet answered.
    pub fn pending_http_calls(&self) -> Vec<HttpCall> {
        self.store.data().http_calls.values().cloned().collect()
    }

    /// Completes a call: `proxy_on_http_call_response(root, token, headers, body, trailers)`
    /// with the response readable via HttpCallResponseHeaders/Body during the callback.
    pub fn respond_http_call(
        &mut self,
        token: u32,
        headers: impl IntoHeaders,
        body: &[u8],
    ) -> Result<()> {
        self.respond(token, headers.into_headers(), body, None)
    }

    pub fn respond_http_call_with_trailers(
        &mut self,
        token: u32,
        headers: impl IntoHeaders,
        body: &[u8],
        trailers: impl IntoHeaders,
    ) -> Result<()> {
        self.respond(
            token,
            headers.into_headers(),
            body,
            Some(trailers.into_headers()),
        )
    }

    /// Envoy's onHttpCallFailure (stream reset, no healthy upstream connection, response over
    /// the buffer limit): `proxy_on_http_call_response(root, token, 0, 0, 0)` with
    /// `proxy_get_status` = (11 BrokenConnection, "reset") during the callback.
    pub fn fail_http_call(&mut self, token: u32) -> Result<()> {
        if self.store.data_mut().http_calls.remove(&token).is_none() {
            bail!("no pending http call {token}");
        }
        let root = self.root_context_id();
        self.store.data_mut().status = (BROKEN_CONNECTION_U32, b"reset".to_vec());
        let r = self.invoke::<(i32, i32, i32, i32, i32), ()>(
            "proxy_on_http_call_response",
            root,
            (root as i32, token as i32, 0, 0, 0),
        );
        self.store.data_mut().status = (0, Vec::new());
        r?;
        self.run_after()
    }

    /// A timeout is not a failure in Envoy: the async client delivers the router's local
    /// reply through onSuccess — `:status 504`, body `upstream request timeout`.
    pub fn timeout_http_call(&mut self, token: u32) -> Result<()> {
        let body = b"upstream request timeout";
        self.respond(
            token,
            HeaderMap::from_pairs([
                (":status", "504"),
                ("content-length", "24"),
                ("content-type", "text/plain"),
            ]),
            body,
            None,
        )
    }

    fn respond(
        &mut self,
        token: u32,
        headers: HeaderMap,
        body: &[u8],
        trailers: Option<HeaderMap>,
    ) -> Result<()> {
        if self.store.data_mut().http_calls.remove(&token).is_none() {
            bail!("no pending http call {token}");
        }
        let root = self.root_context_id();
        let (nh, nt) = (headers.len(), trailers.as_ref().map_or(0, |t| t.len()));
        self.store.data_mut().call_response = Some(CallResponse {
            headers,
            body: body.to_vec(),
            trailers,
        });
        let r = self.invoke::<(i32, i32, i32, i32, i32), ()>(
            "proxy_on_http_call_response",
            root,
            (
                root as i32,
                token as i32,
                nh as i32,
                body.len() as i32,
                nt as i32,
            ),
        );
        self.store.data_mut().call_response = None;
        r?;
        self.run_after()
    }

    // ---- timers, queues ------------------------------------------------------------------

    /// The period set with `proxy_set_tick_period_milliseconds` (None if 0).
    pub fn tick_period(&self) -> Option<Duration> {
        let ms = self.store.data().tick_period_ms;
        (ms > 0).then(|| Duration::from_millis(ms as u64))
    }

    /// Fires `proxy_on_tick(root)` if a tick period is set; returns whether it fired. (The
    /// clock is not moved; use [`Host::advance`].)
    pub fn tick(&mut self) -> Result<bool> {
        if self.tick_period().is_none() {
            return Ok(false);
        }
        let root = self.root_context_id();
        self.invoke::<(i32,), ()>("proxy_on_tick", root, (root as i32,))?;
        self.run_after()?;
        Ok(true)
    }

    /// Delivers `proxy_on_queue_ready(root, token)` for every enqueue since the last call on a
    /// queue this Vm registered. Returns how many were delivered.
    pub fn dispatch_queue_ready(&mut self) -> Result<usize> {
        let tokens: Vec<u32> = std::mem::take(&mut *self.store.data().queue_ready.lock().unwrap());
        let root = self.root_context_id();
        for t in &tokens {
            self.invoke::<(i32, i32), ()>("proxy_on_queue_ready", root, (root as i32, *t as i32))?;
            self.run_after()?;
        }
        Ok(tokens.len())
    }
}

const BROKEN_CONNECTION_U32: u32 = status::BROKEN_CONNECTION as u32;
