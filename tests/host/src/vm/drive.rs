//! Driving a stream as Envoy's HTTP filter does: the request and response callbacks
//! (headers, body, trailers) with Envoy's flow control, and the end of the stream (`done`).

use super::{dir_mut, release, Action, Dir, Stream, Vm};
use crate::headers::{HeaderMap, IntoHeaders};
use crate::state::*;
use anyhow::{bail, Result};

impl Vm {
    fn check(&self, s: &Stream) -> Result<()> {
        if s.vm != self.serial {
            bail!("stream {} belongs to another Vm", s.id);
        }
        if s.state.lock().unwrap().deleted {
            bail!("stream {} is already done (deleted)", s.id);
        }
        Ok(())
    }

    /// One of Envoy's filter callbacks on `s`: `drive` it, then run what the filter deferred
    /// meanwhile.
    fn deliver(
        &mut self,
        s: &Stream,
        drive: impl FnOnce(&mut Self) -> Result<Action>,
    ) -> Result<Action> {
        self.check(s)?;
        let r = drive(self)?;
        self.run_after()?;
        Ok(r)
    }

    fn ensure_created(&mut self, s: &Stream) -> Result<()> {
        if s.state.lock().unwrap().created {
            return Ok(());
        }
        s.state.lock().unwrap().created = true;
        self.store.data_mut().streams.insert(s.id, s.state.clone());
        let root = self.root_context_id();
        self.invoke::<(i32, i32), ()>("proxy_on_context_create", s.id, (s.id as i32, root as i32))?;
        Ok(())
    }

    /// After a trap in a stream callback Envoy (fail_closed, the default) answers 503
    /// `wasm_fail_stream`; recorded as the stream's local reply.
    fn on_trap(&mut self, s: &Stream, e: anyhow::Error) -> anyhow::Error {
        let mut st = s.state.lock().unwrap();
        st.failed = true;
        if st.local_reply.is_none() {
            st.local_reply = Some(LocalReply {
                status: 503,
                body: Vec::new(),
                headers: HeaderMap::new(),
                details: "wasm_fail_stream".into(),
                grpc_status: 14,
            });
        }
        e
    }

    fn callback(&mut self, s: &Stream, name: &str, args: (i32, i32, i32)) -> Result<Option<i32>> {
        match self.invoke::<(i32, i32, i32), i32>(name, s.id, args) {
            Ok(v) => Ok(v),
            Err(e) => Err(self.on_trap(s, e)),
        }
    }

    pub(super) fn drive_headers(
        &mut self,
        s: &Stream,
        dir: Dir,
        headers: HeaderMap,
        eos: bool,
    ) -> Result<Action> {
        self.ensure_created(s)?;
        let n = headers.len();
        {
            let mut st = s.state.lock().unwrap();
            if st.reset || (dir == Dir::Request && st.local_reply.is_some()) {
                return Ok(Action::NotCalled);
            }
            st.eos = eos;
            let d = dir_mut(&mut st, dir);
            if d.headers.is_some() && d.flow != Flow::Idle {
                bail!("{dir:?} headers already sent on stream {}", s.id);
            }
            d.headers = Some(headers);
            d.headers_live = true;
            d.eos_seen = eos;
        }
        let name = if dir == Dir::Request {
            "proxy_on_request_headers"
        } else {
            "proxy_on_response_headers"
        };
        let r = self.callback(s, name, (s.id as i32, n as i32, eos as i32))?;
        let allow_stop = self.host.opts.allow_on_headers_stop_iteration;
        let mut st = s.state.lock().unwrap();
        // sendLocalResponse sets stopNextIteration: whatever was returned becomes
        // StopAllIterationAndWatermark.
        let stopped_by_reply = st.pending_local_reply.is_some();
        let d = dir_mut(&mut st, dir);
        match r {
            _ if stopped_by_reply => d.flow = Flow::StopAll,
            // Missing export, Continue, or ContinueAndEndStream (Envoy maps 2 to Continue).
            None | Some(0) | Some(2) => {
                d.headers_live = false;
                release(d);
                if eos {
                    d.ended = true;
                    d.flow = Flow::Ended;
                } else {
                    d.flow = Flow::Iterating;
                }
            }
            Some(1) if allow_stop => d.flow = Flow::HeadersStopped,
            Some(_) => d.flow = Flow::StopAll,
        }
        Ok(r.map(Action::from_raw).unwrap_or(Action::NotCalled))
    }

    pub(super) fn drive_body(
        &mut self,
        s: &Stream,
        dir: Dir,
        chunk: &[u8],
        eos: bool,
    ) -> Result<Action> {
        let size = {
            let mut st = s.state.lock().unwrap();
            if st.reset || (dir == Dir::Request && st.local_reply.is_some()) {
                return Ok(Action::NotCalled);
            }
            st.eos = eos;
            let d = dir_mut(&mut st, dir);
            match d.flow {
                Flow::Idle => bail!("{dir:?} body before headers on stream {}", s.id),
                Flow::Ended => return Ok(Action::NotCalled),
                Flow::StopAll => {
                    d.held_body.extend_from_slice(chunk);
                    d.held_eos |= eos;
                    d.eos_seen |= eos;
                    return Ok(Action::NotCalled);
                }
                Flow::Buffering => d.body.extend_from_slice(chunk),
                Flow::Iterating | Flow::HeadersStopped => d.body = chunk.to_vec(),
            }
            d.body_live = true;
            d.eos_seen |= eos;
            d.body.len()
        };
        let name = if dir == Dir::Request {
            "proxy_on_request_body"
        } else {
            "proxy_on_response_body"
        };
        let r = self.callback(s, name, (s.id as i32, size as i32, eos as i32))?;
        let mut st = s.state.lock().unwrap();
        let stopped_by_reply = st.pending_local_reply.is_some();
        let d = dir_mut(&mut st, dir);
        match r {
            // isNextIterationStopped → StopIterationNoBuffer.
            _ if stopped_by_reply => d.body.clear(),
            None | Some(0) => {
                d.body_live = false;
                release(d);
                // (After headers StopIteration, a body Continue resumes iteration: headers and
                // body pass.)
                if eos {
                    d.ended = true;
                    d.flow = Flow::Ended;
                } else {
                    d.flow = Flow::Iterating;
                }
            }
            // StopIterationAndBuffer / StopIterationAndWatermark.
            Some(1) | Some(2) => d.flow = Flow::Buffering,
            // StopIterationNoBuffer: the chunk is not kept.
            Some(3) => d.body.clear(),
            Some(_) => {
                d.body_live = false;
                release(d);
            }
        }
        Ok(r.map(Action::from_raw).unwrap_or(Action::NotCalled))
    }

    pub(super) fn drive_trailers(
        &mut self,
        s: &Stream,
        dir: Dir,
        trailers: HeaderMap,
    ) -> Result<Action> {
        let n = trailers.len();
        {
            let mut st = s.state.lock().unwrap();
            if st.reset || (dir == Dir::Request && st.local_reply.is_some()) {
                return Ok(Action::NotCalled);
            }
            st.eos = true;
            let d = dir_mut(&mut st, dir);
            d.eos_seen = true;
            match d.flow {
                Flow::Idle => bail!("{dir:?} trailers before headers on stream {}", s.id),
                Flow::Ended => return Ok(Action::NotCalled),
                Flow::StopAll => {
                    d.held_trailers = Some(trailers);
                    return Ok(Action::NotCalled);
                }
                _ => {}
            }
            d.trailers = Some(trailers);
            d.trailers_live = true;
        }
        let name = if dir == Dir::Request {
            "proxy_on_request_trailers"
        } else {
            "proxy_on_response_trailers"
        };
        // ABI 0.2.1: proxy_on_{request,response}_trailers(context_id, num_trailers), two
        // parameters (headers and bodies have a third, end_of_stream).
        let r = match self.invoke::<(i32, i32), i32>(name, s.id, (s.id as i32, n as i32)) {
            Ok(v) => v,
            Err(e) => return Err(self.on_trap(s, e)),
        };
        let mut st = s.state.lock().unwrap();
        let stopped_by_reply = st.pending_local_reply.is_some();
        let d = dir_mut(&mut st, dir);
        match r {
            _ if stopped_by_reply => {}
            // Continue resumes everything held (headers, buffered body) plus the trailers.
            None | Some(0) => {
                d.trailers_live = false;
                release(d);
                d.ended = true;
                d.flow = Flow::Ended;
            }
            Some(_) => {}
        }
        Ok(r.map(Action::from_raw).unwrap_or(Action::NotCalled))
    }

    /// `decodeHeaders`: creates the context on first use, then `proxy_on_request_headers`.
    /// Names are lower-cased like Envoy's codecs do. After Continue the filter can no longer
    /// reach the request headers (Envoy nulls the pointer).
    pub fn request_headers(
        &mut self,
        s: &Stream,
        headers: impl IntoHeaders,
        end_of_stream: bool,
    ) -> Result<Action> {
        self.deliver(s, |vm| {
            vm.drive_headers(s, Dir::Request, headers.into_headers(), end_of_stream)
        })
    }

    /// `decodeData` for one chunk. While buffering (the filter returned Pause from a body
    /// callback) chunks accumulate and the filter sees the whole buffer; while the headers are
    /// StopAll-paused the chunk is held and [`Action::NotCalled`] returned.
    pub fn request_body(
        &mut self,
        s: &Stream,
        chunk: &[u8],
        end_of_stream: bool,
    ) -> Result<Action> {
        self.deliver(s, |vm| vm.drive_body(s, Dir::Request, chunk, end_of_stream))
    }

    pub fn request_trailers(&mut self, s: &Stream, trailers: impl IntoHeaders) -> Result<Action> {
        self.deliver(s, |vm| {
            vm.drive_trailers(s, Dir::Request, trailers.into_headers())
        })
    }

    /// `encodeHeaders` (the upstream's response reaching this filter).
    pub fn response_headers(
        &mut self,
        s: &Stream,
        headers: impl IntoHeaders,
        end_of_stream: bool,
    ) -> Result<Action> {
        self.deliver(s, |vm| {
            vm.drive_headers(s, Dir::Response, headers.into_headers(), end_of_stream)
        })
    }

    pub fn response_body(
        &mut self,
        s: &Stream,
        chunk: &[u8],
        end_of_stream: bool,
    ) -> Result<Action> {
        self.deliver(s, |vm| {
            vm.drive_body(s, Dir::Response, chunk, end_of_stream)
        })
    }

    pub fn response_trailers(&mut self, s: &Stream, trailers: impl IntoHeaders) -> Result<Action> {
        self.deliver(s, |vm| {
            vm.drive_trailers(s, Dir::Response, trailers.into_headers())
        })
    }

    /// The end of the stream as Envoy runs it: access log (`proxy_on_log`, with the final
    /// request/response headers readable but not writable), then `proxy_on_done` and
    /// `proxy_on_delete`. A stream never started still gets its context created first.
    pub fn done(&mut self, s: &Stream) -> Result<()> {
        self.check(s)?;
        self.ensure_created(s)?;
        let id = s.id;
        self.store.data_mut().access_log_phase = true;
        let r = self.invoke::<(i32,), ()>("proxy_on_log", id, (id as i32,));
        self.store.data_mut().access_log_phase = false;
        r.map_err(|e| self.on_trap(s, e))?;
        self.invoke::<(i32,), i32>("proxy_on_done", id, (id as i32,))
            .map_err(|e| self.on_trap(s, e))?;
        self.invoke::<(i32,), ()>("proxy_on_delete", id, (id as i32,))
            .map_err(|e| self.on_trap(s, e))?;
        self.store.data_mut().streams.remove(&id);
        s.state.lock().unwrap().deleted = true;
        self.run_after()?;
        Ok(())
    }

    /// Convenience: a whole request/response exchange (headers, optional body, response
    /// headers `:status`, `done`). Returns the actions of request headers and body.
    pub fn request(
        &mut self,
        s: &Stream,
        headers: impl IntoHeaders,
        body: Option<&[u8]>,
    ) -> Result<(Action, Option<Action>)> {
        let a = self.request_headers(s, headers, body.is_none())?;
        let b = match body {
            Some(b) => Some(self.request_body(s, b, true)?),
            None => None,
        };
        Ok((a, b))
    }
}
