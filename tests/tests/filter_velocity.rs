//! The velocity features through the real `.wasm` on the proxy-wasm host: a client's counts
//! grow in the feature log as it sends, clients with other keys are counted apart, 4xx answers
//! (the upstream's 404s, the filter's own 403 block replies) reach the shares through
//! `response.code` read as the stream is deleted, the counts survive a reconfiguration that
//! keeps the `velocity` section, and an evicted client is counted in the evictions metric.

use edgescore_proxy_host::{cargo::filter_wasm, Host, Vm};
use edgescore_tests::filter_models::{artifact, base64, velocity_model};
use std::time::Duration;

/// `burst` blocks (403) a client's 6th request within 10 s; every request is feature-logged.
fn config(velocity: &str) -> String {
    let burst = base64(&artifact(&velocity_model("burst", 6.0)));
    format!(
        r#"{{"hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1}},"models":[{{"artifact":"{burst}","threshold":0.5,"action":"block"}}],"velocity":{velocity}}}"#
    )
}

/// One request from `address` for `path`; the upstream answers `status` unless the filter
/// blocks. The logged features and the status the client got.
fn send(vm: &mut Vm, address: &str, path: &str, status: u16) -> (serde_json::Value, u16) {
    let s = vm.stream();
    s.set_property(&["source", "address"], address);
    vm.request_headers(&s, vec![(":method", "GET"), (":path", path), (":authority", "shop.example.com")], true).unwrap();
    let log = s.filter_state("edgescore.features").expect("every request is logged");
    let log: serde_json::Value = serde_json::from_slice(&log).unwrap();
    let blocked = s.local_reply().map(|r| r.status as u16);
    if blocked.is_none() {
        vm.response_headers(&s, vec![(":status", status.to_string())], true).unwrap();
    }
    vm.done(&s).unwrap();
    (log["features"].clone(), blocked.unwrap_or(status))
}

/// A logged feature: an f32, written in its shortest exact form.
fn count(f: &serde_json::Value, name: &str) -> f32 {
    f[name].as_f64().unwrap_or_else(|| panic!("{name} in {f}")) as f32
}

#[test]
fn counts_grow_per_client_and_answers_reach_the_shares() {
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config(r#"{"key":"address"}"#).as_bytes()).unwrap());
    // Start at a whole 10-second bucket so that every request below shares it.
    let now = host.clock().wall_ns();
    host.clock().set_wall_ns((now / 10_000_000_000 + 1) * 10_000_000_000);
    for i in 1..=5 {
        let (f, status) = send(&mut vm, "192.0.2.7:4000", &format!("/p/{}", i % 2), if i <= 2 { 404 } else { 200 });
        assert_eq!(status, if i <= 2 { 404 } else { 200 });
        assert_eq!((count(&f, "client_requests_10s"), count(&f, "client_requests_60s")), (i as f32, i as f32), "request {i}");
        // Linear counting's estimate of 1 or 2 paths (−64 ln(1 − k/64) for k bits set).
        let paths = count(&f, "client_paths_60s");
        let estimate = |k: f32| -64.0 * (1.0 - k / 64.0).ln();
        assert!((paths - estimate(1.0)).abs() < 1e-5 || i > 1 && (paths - estimate(2.0)).abs() < 1e-5, "request {i}: {paths}");
        // The answers to the requests before this one: 2 404s at most.
        let answered_4xx = (i - 1).min(2) as f32;
        assert_eq!(count(&f, "client_4xx_share_60s"), answered_4xx / i as f32, "request {i}");
        assert_eq!(count(&f, "client_403_share_60s"), 0.0);
    }
    // Another address (another port of the first is the same client): counted apart.
    let (f, _) = send(&mut vm, "192.0.2.8:4000", "/", 200);
    assert_eq!(count(&f, "client_requests_10s"), 1.0);
    // The 6th and 7th requests are blocked: 403s, counted as the first client's answers.
    let (f, status) = send(&mut vm, "192.0.2.7:5000", "/", 200);
    assert_eq!((status, count(&f, "client_requests_10s")), (403, 6.0));
    let (f, status) = send(&mut vm, "192.0.2.7:5000", "/", 200);
    assert_eq!((status, count(&f, "client_requests_10s")), (403, 7.0));
    assert_eq!(count(&f, "client_4xx_share_60s"), 3.0 / 7.0);
    assert_eq!(count(&f, "client_403_share_60s"), 1.0 / 7.0);

    // A reconfiguration with the same section keeps the counts; another key starts afresh.
    assert!(vm.configure(config(r#"{"key":"address"}"#).as_bytes()).unwrap());
    let (f, _) = send(&mut vm, "192.0.2.7:1", "/", 200);
    assert_eq!(count(&f, "client_requests_10s"), 8.0);
    // Past 10 s the 10-second count starts over; the 60-second one keeps every request.
    host.advance(Duration::from_secs(10));
    let (f, _) = send(&mut vm, "192.0.2.7:1", "/", 200);
    assert_eq!((count(&f, "client_requests_10s"), count(&f, "client_requests_60s")), (1.0, 9.0));
    assert!(vm.configure(config(r#"{"key":"header:x-api-key"}"#).as_bytes()).unwrap());
    let (f, _) = send(&mut vm, "192.0.2.7:1", "/", 200);
    assert!(f["client_requests_10s"].is_null(), "no x-api-key: missing, {f}");
}

#[test]
fn evictions_are_counted() {
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config(r#"{"key":"address","capacity":8}"#).as_bytes()).unwrap());
    for c in 0..40 {
        send(&mut vm, &format!("10.0.{c}.1:1"), "/", 200);
    }
    vm.tick().unwrap();
    let evictions = vm.metric("edgescore.velocity.evictions").expect("defined");
    assert!((32..40).contains(&evictions), "40 clients in 8 entries: {evictions} evicted");
}
