//! The allocation counter: after warm-up, a request through the `.wasm` makes no call that
//! reaches the guest's system allocator. Counted, per request:
//! - `edgescore_heap_allocations` (guest export): global-allocator calls served by the system
//!   allocator (dlmalloc) — must not grow;
//! - `edgescore_arena_allocations` (guest export): host buffers served by the per-request arena;
//! - `edgescore_recycled_allocations` (guest export): small blocks (the SDK's boxed HTTP
//!   context) served from the free lists;
//! - the host's calls into `proxy_on_memory_allocate` (one per buffer the host returns), which
//!   the arena serves — counted by the host, so the two views must agree.

use edgescore_tests::filter_models::{artifact, base64, connection_config, explained_two_model_config, tls_config, two_model_config, velocity_model};
use edgescore_proxy_host::{cargo::filter_wasm, Host, Stream, Vm};

fn counters(vm: &mut Vm) -> (u64, u64, u64, u64) {
    let heap = vm.call_u64_export("edgescore_heap_allocations").unwrap().expect("exported");
    let arena = vm.call_u64_export("edgescore_arena_allocations").unwrap().expect("exported");
    let recycled = vm.call_u64_export("edgescore_recycled_allocations").unwrap().expect("exported");
    (heap, arena, recycled, vm.allocator_calls().0)
}

/// Runs requests 0..40 as warm-up, then `n` more, through `run`; asserts that none of the `n`
/// reached the system allocator and that the arena served every host buffer. Returns the
/// arena's allocations over the `n`.
fn assert_arena_only(vm: &mut Vm, n: usize, mut run: impl FnMut(&mut Vm, usize)) -> u64 {
    for i in 0..40 {
        run(vm, i);
    }
    let before = counters(vm);
    for i in 0..n {
        run(vm, 40 + i);
    }
    let after = counters(vm);
    let (heap, arena, host_allocs) = (after.0 - before.0, after.1 - before.1, after.3 - before.3);
    println!("per {n} requests: heap {heap}, arena {arena}, host allocator calls {host_allocs}");
    assert_eq!(heap, 0, "requests reached the system allocator");
    assert_eq!(arena, host_allocs, "every host buffer should come from the arena");
    arena
}

fn request(i: usize, big: &str) -> Vec<(String, String)> {
    let mut h = vec![
        (":method".to_string(), if i % 3 == 0 { "POST" } else { "GET" }.to_string()),
        (":path".to_string(), format!("/products/{i}?page={}&sort=price", i % 7)),
        (":authority".to_string(), "shop.example.com".to_string()),
        ("user-agent".to_string(), if i % 2 == 0 { "curl/8.5.0".to_string() } else { format!("Mozilla/5.0 Firefox/{i}") }),
    ];
    for j in 0..(i % 25) {
        h.push((format!("x-extra-{j}"), format!("value-{i}-{j}")));
    }
    if i % 5 == 0 {
        h.push(("cookie".to_string(), big.to_string()));
    }
    h
}

/// The TLS fingerprint headers Envoy writes: a JA4 and JA3, malformed ones, none (plain HTTP;
/// `over_tls` gives the first two TLS).
fn fingerprints(i: usize) -> Vec<(String, String)> {
    let pair = |ja4: &str, ja3: &str| vec![("x-edgescore-ja4".to_string(), ja4.to_string()), ("x-edgescore-ja3".to_string(), ja3.to_string())];
    match i % 3 {
        0 => pair("t13d1516h2_8daaf6152771_d8a2da3f94cd", "e7d705a3286e19ea42f587b344ee6865"),
        1 => pair("t13d1516h2_8daaf6152771_d8a2da3f94c", "-"),
        _ => Vec::new(),
    }
}

#[test]
fn no_heap_allocation_per_request_after_warm_up() {
    // Sample every request so the feature-log path is covered too.
    let config = two_model_config("shadow", r#","feature_log":{"sample_rate":1}"#);
    assert_no_heap_allocation(&config, false, false);
}

/// A model on every TLS fingerprint feature, requests with and without the headers.
#[test]
fn no_heap_allocation_with_tls_fingerprints() {
    assert_no_heap_allocation(&tls_config(), false, true);
}

/// Every fingerprint and velocity feature computed for the feature log alone
/// (`feature_log.features`), every request logged, with and without TLS.
#[test]
fn no_heap_allocation_with_signals_logged() {
    let features = r#"[{"name":"tls_ja4","buckets":4096},{"name":"tls_ja4_a","buckets":1024},{"name":"tls_ja4_ciphers"},{"name":"tls_ja4_extensions"},{"name":"tls_ja4_alpn","buckets":64},{"name":"tls_ja3","buckets":4096},{"name":"client_requests_10s"},{"name":"client_requests_60s"},{"name":"client_paths_60s"},{"name":"client_4xx_share_60s"},{"name":"client_403_share_60s"}]"#;
    let config = two_model_config("shadow", &format!(r#","feature_log":{{"sample_rate":1,"features":{features}}},"velocity":{{"key":"address+ja4"}}"#));
    assert_no_heap_allocation(&config, false, true);
}

/// With reasons: every blocked request (few headers) and half the others get them, in filter
/// state and in the feature-log line.
#[test]
fn no_heap_allocation_with_reasons() {
    let config = explained_two_model_config("enforce", r#","feature_log":{"sample_rate":1},"explain":{"sample":0.5,"top_k":3}"#);
    assert_no_heap_allocation(&config, true, false);
}

/// The fingerprint headers count on TLS connections only: give the stream's connection TLS.
fn over_tls(s: &Stream, tls: bool) {
    if tls {
        s.set_property(&["connection", "tls_version"], "TLSv1.3");
    }
}

fn assert_no_heap_allocation(config: &str, reasons: bool, tls: bool) {
    let request = |i: usize, big: &str| {
        let mut h = request(i, big);
        if tls {
            h.extend(fingerprints(i));
        }
        h
    };
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config.as_bytes()).unwrap());
    let big = "c=".to_string() + &"x".repeat(20_000);
    // Warm-up: the largest request first (the arena grows to fit it once), then a few streams
    // so the free lists and the SDK's context map reach their working size.
    for i in 0..40 {
        let s = vm.stream();
        over_tls(&s, tls && i % 3 != 2);
        vm.request_headers(&s, request(i, &big), true).unwrap();
        vm.set_property(&["source", "address"], "192.0.2.1:1234");
        vm.done(&s).unwrap();
    }
    let before = counters(&mut vm);
    let n = 200;
    let mut explained = 0;
    for i in 0..n {
        let s = vm.stream();
        over_tls(&s, tls && (i * 7 + 3) % 3 != 2);
        vm.request_headers(&s, request(i * 7 + 3, &big), true).unwrap();
        explained += s.filter_state("edgescore.reasons").is_some() as usize;
        if !reasons {
            assert!(s.request_headers().get("x-edgescore").is_some());
        }
        vm.done(&s).unwrap();
    }
    let after = counters(&mut vm);
    if reasons {
        // About 3 in 25 are blocked, and half the rest sampled.
        assert!(explained > n / 4 && explained < n, "{explained} of {n} requests had reasons");
    } else {
        assert_eq!(explained, 0);
    }
    let heap = after.0 - before.0;
    let arena = after.1 - before.1;
    let recycled = after.2 - before.2;
    let host_allocs = after.3 - before.3;
    println!("per {n} requests: heap {heap}, arena {arena}, recycled {recycled}, host allocator calls {host_allocs}");
    assert_eq!(heap, 0, "requests reached the system allocator");
    assert!(arena >= n as u64, "host buffers were not served by the arena");
    assert_eq!(arena, host_allocs, "every host buffer should come from the arena");
    assert!(recycled >= n as u64, "the SDK's context boxes should be recycled");
}

/// The same with a schema that reads connection properties: `connection_id` per request, the
/// properties once per connection into the filter's preallocated table (new connections,
/// known ones, and connections whose slot another one took over).
#[test]
fn no_heap_allocation_with_connection_properties() {
    let config = connection_config("sni", "sni_present", 0.5);
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config.as_bytes()).unwrap());
    let big = "c=".to_string() + &"x".repeat(20_000);
    let long_sni = "s".repeat(300); // too long for the table: read on every request
    let run = |vm: &mut Vm, i: usize| {
        let s = vm.stream();
        // 3 requests per connection on average, ids spread so slots get taken over.
        s.set_property(&["connection_id"], ((i / 3) as u64 * 97).to_le_bytes());
        s.set_property(&["request", "protocol"], if i.is_multiple_of(2) { "HTTP/1.1" } else { "HTTP/2" });
        s.set_property(&["connection", "requested_server_name"], if i.is_multiple_of(11) { long_sni.as_str() } else { "shop.example.com" });
        vm.request_headers(&s, request(i, &big), true).unwrap();
        assert!(s.request_headers().get("x-edgescore").is_some());
        vm.done(&s).unwrap();
    };
    assert_arena_only(&mut vm, 200, run);
}

/// With a client's counts: the source address per request, the worker's table (known clients,
/// new ones, evictions from a full table), the filter's own block replies and the upstream's
/// 404s read back as `response.code` when each stream is deleted.
#[test]
fn no_heap_allocation_with_velocity() {
    let burst = base64(&artifact(&velocity_model("burst", 4.0)));
    let config = format!(
        r#"{{"hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1}},"models":[{{"artifact":"{burst}","threshold":0.5,"action":"block"}}],"velocity":{{"key":"address","capacity":16}}}}"#
    );
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config.as_bytes()).unwrap());
    let big = "c=".to_string() + &"x".repeat(20_000);
    let mut blocked = 0;
    let run = |vm: &mut Vm, i: usize| {
        let s = vm.stream();
        s.set_property(&["source", "address"], format!("10.0.{}.1:{}", i % if i < 100 { 6 } else { 40 }, 1000 + i));
        vm.request_headers(&s, request(i, &big), true).unwrap();
        if s.local_reply().is_some() {
            blocked += 1;
        } else {
            vm.response_headers(&s, vec![(":status", if i.is_multiple_of(3) { "404" } else { "200" })], true).unwrap();
        }
        vm.done(&s).unwrap();
    };
    let n = 200;
    let arena = assert_arena_only(&mut vm, n, run);
    assert!(arena >= 2 * n as u64, "the address and the response code come through the arena");
    assert!(blocked > 0, "no burst was blocked");
    vm.tick().unwrap();
    assert!(vm.metric("edgescore.velocity.evictions").unwrap() > 0);
}

/// Signed requests (`verified_bots`): verified ones, forged, expired, unknown keys, hostile
/// headers (a huge `signature-input`, a malformed one), among unsigned ones.
#[test]
fn no_heap_allocation_with_signed_requests() {
    use edgescore_core::signatures::{Directory, DIRECTORY_KEY};
    use edgescore_tests::{filter_models::bots_config, signed};
    let now = 1_767_225_600u64;
    let opts = edgescore_proxy_host::HostOptions { start_time_ns: now * 1_000_000_000, ..Default::default() };
    let host = Host::with_options(filter_wasm().unwrap(), opts).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(bots_config("allow").as_bytes()).unwrap());
    let crawler = signed::key(7);
    let keyid = signed::keyid(&crawler);
    let directory = Directory::from_jwks("crawler", signed::jwks(&crawler).as_bytes()).unwrap();
    host.set_shared_data(DIRECTORY_KEY, directory.encode());
    vm.tick().unwrap();
    let big = "c=".to_string() + &"x".repeat(20_000);
    let huge = format!("sig1=(\"@authority\");tag=\"{}\"", "a".repeat(10_000));
    let forger = signed::key(9);
    let variants: Vec<Vec<(String, String)>> = vec![
        signed::headers(&crawler, &keyid, "shop.example.com", now - 5, now + 55).to_vec(),
        signed::headers(&forger, &keyid, "shop.example.com", now - 5, now + 55).to_vec(),
        signed::headers(&crawler, &keyid, "shop.example.com", now - 600, now - 300).to_vec(),
        signed::headers(&forger, &signed::keyid(&forger), "shop.example.com", now - 5, now + 55).to_vec(),
        vec![("signature-input".into(), huge), ("signature".into(), "sig1=:AAAA:".into())],
        vec![("signature-input".into(), "sig1=(\"@authority".into()), ("signature".into(), "sig1=:AAAA:".into())],
        Vec::new(),
    ];
    let mut verified = 0;
    let mut run = |vm: &mut Vm, i: usize| {
        let s = vm.stream();
        let mut h = request(i, &big);
        h.extend(variants[i % variants.len()].iter().cloned());
        vm.request_headers(&s, h, true).unwrap();
        verified += s.request_headers().get_str("x-edgescore-decision").is_some_and(|d| d.ends_with("verified_bot=crawler")) as usize;
        vm.done(&s).unwrap();
    };
    assert_arena_only(&mut vm, 210, &mut run);
    assert_eq!(verified, 250 / variants.len() + 1, "every request signed by the crawler, warm-up included");
    vm.tick().unwrap();
    assert!(vm.metric("edgescore.verified_bots.refused.bad_signature").unwrap() > 0);
}
