//! Benchmark support: the one scoring loop that `benches/benches/filter_wasm.rs` runs both
//! natively and inside the `.wasm`, so that the two sides do exactly the same work (parse the
//! header map, compute the features, run every model, write the header values).
//!
//! In wasm this module exists only with the cargo feature `bench-exports` (which also adds the
//! guest exports below); the shipped `.wasm` is built without it and is byte for byte the same
//! as without this module.

use crate::artifact::ScoreError;
use crate::request::{HeaderMap, MalformedMap, Request};
use crate::scorer::Scorer;

/// Property names as Envoy spells them (`request.protocol`, ...), in [`OwnedRequest`] order.
pub const PROPERTIES: [&str; 4] = ["request.protocol", "connection.tls_version", "connection.requested_server_name", "source.address"];

/// A request held in the form the filter receives it: the header map in proxy-wasm's wire
/// format and the connection properties as bytes.
#[derive(Clone, Debug, Default)]
pub struct OwnedRequest {
    pub headers: Vec<u8>,
    pub properties: [Option<Vec<u8>>; 4],
}

impl OwnedRequest {
    /// From a header map and a map of properties (both in the proxy-wasm map format; property
    /// names as in [`PROPERTIES`], others ignored). Both maps are validated here.
    pub fn decode(headers: &[u8], properties: &[u8]) -> Result<OwnedRequest, MalformedMap> {
        HeaderMap::parse(headers)?;
        let mut out = OwnedRequest { headers: headers.to_vec(), properties: Default::default() };
        for (name, value) in HeaderMap::parse(properties)?.iter() {
            if let Some(i) = PROPERTIES.iter().position(|p| p.as_bytes() == name) {
                out.properties[i] = Some(value.to_vec());
            }
        }
        Ok(out)
    }

    /// The borrowed view the scorer reads; parses the header map (part of the filter's work).
    pub fn request(&self) -> Result<Request<'_>, MalformedMap> {
        let [protocol, tls_version, sni, source_address] = &self.properties;
        Ok(Request {
            headers: HeaderMap::parse(&self.headers)?,
            protocol: protocol.as_deref(),
            tls_version: tls_version.as_deref(),
            sni: sni.as_deref(),
            source_address: source_address.as_deref(),
        })
    }
}

/// Scores every request `passes` times, in order. Returns a checksum of every score's bits and
/// every decision, in order, so that callers can check two runs did the same work (and so the
/// work cannot be optimised away). Allocates nothing.
pub fn score_all(scorer: &mut Scorer, requests: &[OwnedRequest], passes: u32) -> Result<u64, ScoreError> {
    let mut sum = 0xcbf2_9ce4_8422_2325u64;
    for _ in 0..passes {
        for r in requests {
            // The requests were validated by `decode`; a failure here would be a bug.
            let Ok(req) = r.request() else { return Ok(0) };
            let verdict = scorer.score(&req)?;
            for s in scorer.scores() {
                sum = (sum ^ s.to_bits() as u64).wrapping_mul(0x0100_0000_01b3);
            }
            sum = (sum ^ verdict.action as u64 ^ (scorer.scores_header().len() as u64) << 8).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(sum)
}

/// Guest exports for a wasm host (wasm32 with the feature `bench-exports`). Protocol: the host asks for a
/// buffer of `len` bytes (`edgescore_bench_buffer`), writes into it, then calls
/// `edgescore_bench_configure(len)` with the plugin JSON, `edgescore_bench_add_request(h, p)`
/// with a header map followed by a property map, and `edgescore_bench_score(passes)`.
/// No proxy-wasm host call is made: the scorer is built here, not by `on_configure`.
#[cfg(target_arch = "wasm32")]
mod exports {
    use super::{score_all, OwnedRequest};
    use crate::config::PluginConfig;
    use crate::scorer::Scorer;
    use std::cell::RefCell;

    #[derive(Default)]
    struct State {
        buffer: Vec<u8>,
        scorer: Option<Scorer>,
        requests: Vec<OwnedRequest>,
    }

    thread_local! {
        static STATE: RefCell<State> = RefCell::new(State::default());
    }

    #[no_mangle]
    pub extern "C" fn edgescore_bench_buffer(len: u32) -> *mut u8 {
        STATE.with_borrow_mut(|s| {
            s.buffer.clear();
            s.buffer.resize(len as usize, 0);
            s.buffer.as_mut_ptr()
        })
    }

    /// 1 if the configuration gave a scorer (the seed is fixed, as in the native bench).
    #[no_mangle]
    pub extern "C" fn edgescore_bench_configure(len: u32) -> i32 {
        STATE.with_borrow_mut(|s| {
            let built = s.buffer.get(..len as usize).ok_or(()).and_then(|json| {
                PluginConfig::parse(json).and_then(|cfg| Scorer::new(&cfg, 1)).map_err(|_| ())
            });
            s.requests.clear();
            s.scorer = built.ok();
            s.scorer.is_some() as i32
        })
    }

    /// The number of requests loaded, or -1 if the maps are malformed.
    #[no_mangle]
    pub extern "C" fn edgescore_bench_add_request(headers_len: u32, properties_len: u32) -> i32 {
        STATE.with_borrow_mut(|s| {
            let (h, p) = (headers_len as usize, properties_len as usize);
            let Some(buf) = s.buffer.get(..h.saturating_add(p)) else { return -1 };
            match OwnedRequest::decode(&buf[..h], &buf[h..]) {
                Ok(r) => {
                    s.requests.push(r);
                    s.requests.len() as i32
                }
                Err(_) => -1,
            }
        })
    }

    /// [`score_all`]'s checksum, or 0 without a scorer / on a scoring error.
    #[no_mangle]
    pub extern "C" fn edgescore_bench_score(passes: u32) -> i64 {
        STATE.with_borrow_mut(|s| {
            let State { scorer, requests, .. } = s;
            match scorer {
                Some(scorer) => score_all(scorer, requests, passes).unwrap_or(0) as i64,
                None => 0,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_keeps_known_properties_and_refuses_malformed_maps() {
        let headers = HeaderMap::encode(&[(":path", "/a"), ("user-agent", "curl/8")]);
        let props = HeaderMap::encode(&[("request.protocol", "HTTP/2"), ("source.address", "10.0.0.1:5"), ("other", "x")]);
        let r = OwnedRequest::decode(&headers, &props).unwrap();
        let req = r.request().unwrap();
        assert_eq!(req.headers.get(b"user-agent"), Some(&b"curl/8"[..]));
        assert_eq!(req.protocol, Some(&b"HTTP/2"[..]));
        assert_eq!((req.tls_version, req.sni), (None, None));
        assert_eq!(req.source_address, Some(&b"10.0.0.1:5"[..]));
        assert!(OwnedRequest::decode(&headers[..headers.len() - 1], &props).is_err());
        assert!(OwnedRequest::decode(&headers, &[1, 0, 0, 0]).is_err());
    }
}
