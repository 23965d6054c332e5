//! Verified bots in the `.wasm`, on the proxy-wasm host: the service VM (root_id
//! `edgescore_registry`, here with `verified_bots` and no registry) fetches the directory from its
//! cluster and hands the keys to a worker through shared data; the worker verifies each signed
//! request with them. Covered: a verified crawler is named in the decision and in its features,
//! `allow` lets it past a blocking model, `tag` does not; forged, expired, unknown-key and
//! hostile signatures are refused by reason, never with an error; a refused directory keeps the
//! last good keys and counts its reason; signed requests allocate nothing.

use edgescore_proxy_host::{cargo::filter_wasm, Host, HostOptions, Vm};
use edgescore_tests::filter_models::bots_config;
use edgescore_tests::signed;
use std::time::Duration;

const POLLER: &str = "edgescore_registry";
/// 2026-01-01, the host's wall clock at start.
const NOW: u64 = 1_767_225_600;

struct Rig {
    host: Host,
    poller: Vm,
    worker: Vm,
}

impl Rig {
    fn new(action: &str) -> Rig {
        let config = bots_config(action);
        let opts = HostOptions { vm_id: "edgescore".into(), clusters: vec!["bots".into()], start_time_ns: NOW * 1_000_000_000, ..Default::default() };
        let host = Host::with_options(filter_wasm().unwrap(), opts).unwrap();
        let poller = host.with_root_id(POLLER).start(b"", config.as_bytes()).unwrap();
        let worker = host.with_root_id("edgescore").start(b"", config.as_bytes()).unwrap();
        Rig { host, poller, worker }
    }

    /// A second passes and the poller ticks; each directory call gets `(status, body)`.
    fn fetch(&mut self, status: &str, body: &[u8]) {
        self.host.advance(Duration::from_secs(1));
        self.poller.tick().unwrap();
        for call in self.poller.pending_http_calls() {
            assert_eq!((call.upstream.as_str(), call.headers.get_str(":path").as_deref()), ("bots", Some("/keys.json")));
            self.poller.respond_http_call(call.token, vec![(":status", status)], body).unwrap();
        }
    }

    /// One request (with `extra` headers); its decision header, its feature-log line and whether
    /// it was answered locally.
    fn request(&mut self, extra: &[(String, String)]) -> (String, String, bool) {
        let mut h: Vec<(String, String)> = vec![(":method".into(), "GET".into()), (":authority".into(), "Shop.Example".into()), (":path".into(), "/".into())];
        h.extend_from_slice(extra);
        let s = self.worker.stream();
        self.worker.request_headers(&s, h, true).unwrap();
        let decision = match s.local_reply() {
            Some(r) => r.headers.get_str("x-edgescore-decision").unwrap_or_default(),
            None => s.request_headers().get_str("x-edgescore-decision").unwrap_or_default(),
        };
        let log = String::from_utf8(s.filter_state("edgescore.features").unwrap_or_default()).unwrap();
        let replied = s.local_reply().is_some();
        self.worker.done(&s).unwrap();
        (decision, log, replied)
    }

    fn metric(&self, name: &str) -> u64 {
        self.worker.metric(&format!("edgescore.verified_bots.{name}")).unwrap_or(0)
    }
}

fn signed_by(key: &ed25519_dalek::SigningKey, keyid: &str, created: u64, expires: u64) -> Vec<(String, String)> {
    signed::headers(key, keyid, "shop.example", created, expires).to_vec()
}

#[test]
fn a_verified_crawler_is_tagged_and_refusals_are_counted_by_reason() {
    let mut rig = Rig::new("tag");
    let crawler = signed::key(7);
    let keyid = signed::keyid(&crawler);
    // Before any keys: signed requests are refused as unknown keys, scored as usual.
    let (decision, _, blocked) = rig.request(&signed_by(&crawler, &keyid, NOW - 5, NOW + 55));
    assert_eq!((decision.as_str(), blocked), ("block;model=bot@1", true));
    rig.fetch("200", signed::jwks(&crawler).as_bytes());
    assert_eq!(rig.poller.metric("edgescore.verified_bots.keys"), Some(1));
    rig.worker.tick().unwrap();
    let (decision, log, blocked) = rig.request(&signed_by(&crawler, &keyid, NOW - 5, NOW + 55));
    assert_eq!((decision.as_str(), blocked), ("block;model=bot@1;verified_bot=crawler", true), "tag: the models still decide");
    assert!(log.contains(r#""verified_bot":1"#), "{log}");
    let forger = signed::key(9);
    let huge = format!("sig1=(\"@authority\");tag=\"{}\"", "a".repeat(10_000));
    for (extra, reason) in [
        (signed_by(&forger, &keyid, NOW - 5, NOW + 55), "bad_signature"),
        (signed_by(&crawler, &keyid, NOW - 600, NOW - 300), "expired"),
        (signed_by(&forger, &signed::keyid(&forger), NOW - 5, NOW + 55), "unknown_key"),
        (vec![("signature-input".into(), huge), ("signature".into(), "sig1=:AAAA:".into())], "too_large"),
        (vec![("signature-input".into(), "sig1=(\"@authority".into()), ("signature".into(), "sig1=:AAAA:".into())], "malformed"),
    ] {
        let (decision, log, _) = rig.request(&extra);
        assert_eq!(decision, "block;model=bot@1", "{reason}");
        assert!(log.contains(r#""verified_bot":0"#), "{reason}: {log}");
    }
    let (_, log, _) = rig.request(&[]);
    assert!(log.contains(r#""verified_bot":null"#) && log.contains(r#""verified_bot_agent":null"#), "unsigned: missing, {log}");
    rig.worker.tick().unwrap();
    assert_eq!(rig.metric("verified"), 1);
    for reason in ["bad_signature", "expired", "too_large", "malformed"] {
        assert_eq!(rig.metric(&format!("refused.{reason}")), 1, "{reason}");
    }
    assert_eq!(rig.metric("refused.unknown_key"), 2, "one before the keys came");
    assert_eq!(rig.worker.metric("edgescore.errors"), Some(0));
}

#[test]
fn allow_lets_a_verified_crawler_past_the_models() {
    let mut rig = Rig::new("allow");
    let crawler = signed::key(7);
    rig.fetch("200", signed::jwks(&crawler).as_bytes());
    rig.worker.tick().unwrap();
    let (decision, _, blocked) = rig.request(&signed_by(&crawler, &signed::keyid(&crawler), NOW - 5, NOW + 55));
    assert_eq!((decision.as_str(), blocked), ("allow;verified_bot=crawler", false));
    let (decision, _, blocked) = rig.request(&signed_by(&signed::key(9), &signed::keyid(&crawler), NOW - 5, NOW + 55));
    assert_eq!((decision.as_str(), blocked), ("block;model=bot@1", true), "a forged signature gets the models' decision");
}

#[test]
fn a_refused_directory_keeps_the_last_good_keys() {
    let mut rig = Rig::new("tag");
    let crawler = signed::key(7);
    rig.fetch("200", signed::jwks(&crawler).as_bytes());
    // Each refresh is refused: unreachable, too large, not a JWK set, no Ed25519 key.
    for (status, body, reason) in [
        ("503", "down".to_string(), "unreachable"),
        ("200", "x".repeat(5000), "too_large"),
        ("200", "[]".to_string(), "not_jwks"),
        ("200", r#"{"keys":[{"kty":"RSA"}]}"#.to_string(), "no_key"),
    ] {
        rig.host.advance(Duration::from_secs(60));
        rig.fetch(status, body.as_bytes());
        assert_eq!(rig.poller.metric(&format!("edgescore.verified_bots.directory_refused.{reason}")), Some(1), "{reason}");
    }
    assert_eq!(rig.poller.metric("edgescore.verified_bots.directories_accepted"), Some(1));
    rig.worker.tick().unwrap();
    let now = NOW + 4 * 61;
    let (decision, _, _) = rig.request(&signed_by(&crawler, &signed::keyid(&crawler), now - 5, now + 55));
    assert_eq!(decision, "block;model=bot@1;verified_bot=crawler");
}
