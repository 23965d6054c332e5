//! What Envoy defers until the outermost VM call returns (continue/close stream, local
//! replies), and the callbacks those trigger.

use super::{dir_mut, release, Dir, Stream, Vm};
use crate::headers::HeaderMap;
use crate::state::*;
use anyhow::Result;

impl Vm {
    /// Runs what Envoy defers until the VM call returns (continue/close stream, local replies),
    /// including the callbacks those trigger.
    pub(super) fn run_after(&mut self) -> Result<()> {
        while !self.store.data().after.is_empty() {
            let a = self.store.data_mut().after.remove(0);
            match a {
                After::Continue(ctx, t) => {
                    let Some(s) = self.stream_by_id(ctx) else {
                        continue;
                    };
                    self.continue_stream(&s, t)?;
                }
                After::Close(ctx, _t) => {
                    let Some(s) = self.stream_by_id(ctx) else {
                        continue;
                    };
                    // Envoy resets the stream (the filter later gets on_log/on_done/on_delete).
                    s.state.lock().unwrap().reset = true;
                }
                After::LocalReply(ctx) => {
                    let Some(s) = self.stream_by_id(ctx) else {
                        continue;
                    };
                    self.apply_local_reply(&s)?;
                }
            }
        }
        Ok(())
    }

    fn stream_by_id(&self, id: u32) -> Option<Stream> {
        self.store.data().streams.get(&id).map(|st| Stream {
            id,
            vm: self.serial,
            state: st.clone(),
        })
    }

    /// Envoy's continueDecoding/continueEncoding. Quirk kept: `Context::continueStream` nulls
    /// the request header/body/trailer pointers for *both* request and response continues.
    fn continue_stream(&mut self, s: &Stream, t: u32) -> Result<()> {
        let dir = if t == 0 { Dir::Request } else { Dir::Response };
        let (flow, deliver) = {
            let mut st = s.state.lock().unwrap();
            if st.local_reply.is_some() && dir == Dir::Request {
                return Ok(());
            }
            st.request.headers_live = false;
            st.request.body_live = false;
            st.request.trailers_live = false;
            let d = dir_mut(&mut st, dir);
            let flow = d.flow;
            match flow {
                Flow::StopAll => {
                    release(d);
                    let held = std::mem::take(&mut d.held_body);
                    let eos = d.held_eos;
                    let trailers = d.held_trailers.take();
                    d.held_eos = false;
                    if d.eos_seen && held.is_empty() && !eos && trailers.is_none() {
                        d.ended = true;
                        d.flow = Flow::Ended;
                    } else {
                        d.flow = Flow::Iterating;
                    }
                    (flow, Some((held, eos, trailers)))
                }
                Flow::HeadersStopped | Flow::Buffering | Flow::Iterating => {
                    release(d);
                    if d.eos_seen {
                        d.ended = true;
                        d.flow = Flow::Ended;
                    } else {
                        d.flow = Flow::Iterating;
                    }
                    (flow, None)
                }
                Flow::Idle | Flow::Ended => (flow, None),
            }
        };
        let _ = flow;
        if let Some((held, eos, trailers)) = deliver {
            if !held.is_empty() || (eos && trailers.is_none()) {
                self.drive_body(s, dir, &held, eos)?;
            }
            if let Some(t) = trailers {
                self.drive_trailers(s, dir, t)?;
            }
        }
        Ok(())
    }

    fn apply_local_reply(&mut self, s: &Stream) -> Result<()> {
        let (reply, encode) = {
            let mut st = s.state.lock().unwrap();
            let Some(reply) = st.pending_local_reply.take() else {
                return Ok(());
            };
            st.local_reply = Some(reply.clone());
            st.request.flow = Flow::Ended;
            st.request.held_body.clear();
            st.request.held_trailers = None;
            let started = st.response.headers.is_some();
            (reply, !started && !st.reset)
        };
        if !encode {
            return Ok(());
        }
        // Envoy's Utility::sendLocalReply: :status, the filter's headers (addCopy), then
        // content-length/content-type for a non-empty body.
        let mut h = HeaderMap::new();
        h.add(":status", reply.status.to_string());
        for (k, v) in reply.headers.iter() {
            h.add(k, v);
        }
        if !reply.body.is_empty() {
            h.replace("content-length", reply.body.len().to_string());
            if !h.contains("content-type") {
                h.add("content-type", "text/plain");
            }
        }
        if self.host.opts.encode_local_replies {
            self.drive_headers(s, Dir::Response, h, reply.body.is_empty())?;
            if !reply.body.is_empty() {
                self.drive_body(s, Dir::Response, &reply.body, true)?;
            }
        } else {
            let mut st = s.state.lock().unwrap();
            st.response.headers = Some(h.clone());
            st.response.forwarded_headers = Some(h);
            st.response.forwarded_body = reply.body;
            st.response.ended = true;
            st.response.flow = Flow::Ended;
        }
        Ok(())
    }
}
