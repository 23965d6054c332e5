//! `authz-sidecar PLUGIN.json`: the edgescore core behind Envoy's `ext_authz` (HTTP service), as
//! a team would run it to score outside Envoy — variant (d) of `benches/envoy_load/run.py`.
//!
//! It reads the same plugin configuration the Wasm filter gets, listens on 127.0.0.1 (a port
//! the kernel picks, printed as `listening on ADDR` on stdout) and answers every check with the
//! filter's decision: 200 with the score and decision headers (Envoy forwards them upstream,
//! `allowed_upstream_headers`) or the configured block status and body. One thread: the bench
//! pins it to Envoy's CPU, so a second thread would only contend with Envoy there.

use anyhow::{Context, Result};
use edgescore_core::decision::Edit;
use edgescore_core::{HeaderMap, PluginConfig, Request, Scorer};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;

/// Headers of the check request that the client never sent: ext_authz's own `content-length`
/// (0 without `with_request_body`) and the async client's. The filter never sees them.
const AUTHZ_HOP: &[&str] = &["content-length", "x-envoy-internal", "x-envoy-expected-rq-timeout-ms"];
/// What the bench's `authorization_request.headers_to_add` forwards for the two facts the
/// check request loses: the downstream protocol (`%PROTOCOL%`, a connection property for the
/// filter) and the client's own content-length (`%REQ(content-length)%`, absent if it sent none).
const PROTOCOL: &str = "x-edgescore-protocol";
const CONTENT_LENGTH: &str = "x-edgescore-content-length";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(args.len() == 2, "usage: authz-sidecar PLUGIN.json");
    let json = std::fs::read(&args[1]).with_context(|| format!("reading {}", args[1]))?;
    let cfg = PluginConfig::parse(&json)?;
    let scorer = Scorer::new(&cfg, 1)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, serve(Sidecar { scorer, map: Vec::new() }))
}

async fn serve(sidecar: Sidecar) -> Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on {}", listener.local_addr()?);
    // One scorer for every connection: the tasks share the thread, never run at once.
    let sidecar = Rc::new(RefCell::new(sidecar));
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let sidecar = sidecar.clone();
        tokio::task::spawn_local(async move {
            let check = service_fn(move |req| {
                let reply = sidecar.borrow_mut().check(&req);
                async move { Ok::<_, Infallible>(reply) }
            });
            // A connection Envoy resets is simply gone; the next check opens another.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), check).await;
        });
    }
}

struct Sidecar {
    scorer: Scorer,
    /// The request as the filter would receive it, in proxy-wasm's header-map format (reused).
    map: Vec<u8>,
}

impl Sidecar {
    fn check(&mut self, req: &hyper::Request<Incoming>) -> Response<Full<Bytes>> {
        let h = req.headers();
        let value = |name: &str| h.get(name).map(|v| v.as_bytes());
        let path = req.uri().path_and_query().map_or(req.uri().path(), |p| p.as_str());
        // Envoy's header map as the filter sees it: pseudo-headers (`host` is `:authority`),
        // then the client's headers and those Envoy added before the filters (x-request-id,
        // x-forwarded-proto). ext_authz forwards them in protobuf-map order, not the client's.
        let mut pairs: Vec<(&[u8], &[u8])> = vec![(b":method", req.method().as_str().as_bytes()), (b":path", path.as_bytes())];
        if let Some(host) = value("host") {
            pairs.push((b":authority", host));
        }
        for (name, v) in h {
            let n = name.as_str();
            if n != "host" && n != PROTOCOL && n != CONTENT_LENGTH && !AUTHZ_HOP.contains(&n) {
                pairs.push((n.as_bytes(), v.as_bytes()));
            }
        }
        if let Some(length) = value(CONTENT_LENGTH) {
            pairs.push((b"content-length", length));
        }
        HeaderMap::encode_into(&mut self.map, &pairs);
        let reply = Response::builder();
        let Ok(headers) = HeaderMap::parse(&self.map) else { return error(reply) };
        let request = Request::with_properties(headers, [value(PROTOCOL), None, None, None]);
        // No body reaches the sidecar, so the filter's text path (which waits for one) is out.
        let Ok(outcome) = self.scorer.decide(&request, true) else { return error(reply) };
        // The filter's own edits, as the check's answer: its header writes become headers Envoy
        // forwards upstream; its local reply becomes the denial Envoy sends the client.
        let mut reply = reply;
        let mut body = Bytes::new();
        for edit in outcome.edits.iter() {
            match edit {
                Edit::AddHeader(name, value) | Edit::ReplaceHeader(name, value) => reply = reply.header(name, value),
                Edit::Reply { status, body: text, headers, .. } => {
                    reply = Response::builder().status(status);
                    for (name, value) in HeaderMap::parse(headers).map(|m| m.iter()).into_iter().flatten() {
                        reply = reply.header(name, value);
                    }
                    body = Bytes::copy_from_slice(text);
                }
                // Filter state and the text verdict's header removal have no ext_authz answer.
                Edit::RemoveHeader(_) | Edit::SetState(..) => {}
            }
        }
        reply.body(Full::new(body)).unwrap_or_else(|_| error(Response::builder()))
    }
}

/// Envoy treats a 5xx from the check as an error (denied unless `failure_mode_allow`).
fn error(reply: hyper::http::response::Builder) -> Response<Full<Bytes>> {
    let mut r = reply.body(Full::new(Bytes::new())).unwrap_or_default();
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}
