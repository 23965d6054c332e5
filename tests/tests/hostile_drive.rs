//! The shipped `.wasm` under hostile drive (issue 14): generated requests — header maps of
//! arbitrary bytes, duplicated and missing pseudo-headers, thousands of headers, huge values,
//! arbitrary connection properties, and on the text path bodies in chunks, trailers and NLP
//! answers of every kind (verdicts, garbage, error statuses, resets, timeouts) — through the
//! proxy-wasm host, as Envoy calls the filter. None may trap,
//! every request must be answered (passed on scored or failed open, or replied to locally), and
//! requests on the tree path must not reach the guest's system allocator.
//!
//! `EDGESCORE_HOSTILE_REQUESTS` sets how many (default 20,000, what `make test` runs; `make
//! hostile-drive` runs 1,000,000) and `EDGESCORE_TEST_SEED` the generator's seed: a failure
//! prints both, and the seed and request number reproduce it.

use edgescore_proxy_host::{cargo::filter_wasm, Action, Host, HostOptions, Stream, Vm};
use edgescore_tests::filter_models::{artifact, base64, step_model};
use edgescore_tests::random_ir::test_seed;

/// SplitMix64: a seedable generator whose sequence is fixed forever (a crate's could change
/// between versions, and a reproducer is a seed and a request number).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
    /// Bytes of any value, or (half the time) printable ASCII, `len` long.
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        let printable = self.one_in(2);
        (0..len).map(|_| if printable { b' ' + self.below(95) as u8 } else { self.next() as u8 }).collect()
    }
    /// Bytes of a length below `small`, or 1 time in 200 `huge` bytes.
    fn blob(&mut self, small: u64, huge: usize) -> Vec<u8> {
        let len = if self.one_in(200) { huge } else { self.below(small) as usize };
        self.bytes(len)
    }
    /// Bytes of a length below `n`.
    fn short(&mut self, n: u64) -> Vec<u8> {
        let len = self.below(n) as usize;
        self.bytes(len)
    }
}

/// The largest requests the generator makes — many headers with short values, or a few with
/// huge values — sent once first: the filter's arena grows to the largest request it has seen
/// (one allocation, then reused), so allocations are counted after that.
const MAX_HEADERS: usize = 3000;
const HUGE_VALUE: usize = 64 << 10;
/// At most this many headers when values may be huge.
const FEW_HEADERS: u64 = 30;

const NAMES: &[&str] = &[
    ":method", ":path", ":authority", ":scheme", "host", "user-agent", "accept", "accept-language", "accept-encoding",
    "cookie", "content-length", "content-type", "content-encoding", "referer", "x-forwarded-for", "x-edgescore",
    "x-edgescore-decision", "x-edgescore-text", "transfer-encoding", "",
];
const VALUES: &[&str] = &[
    "GET", "POST", "/", "/chat", "/a/very/long/path/that/looks/like/a/scan/of/something?x=1&y=2", "shop.example.com",
    "1.2.3.4:80", "[::1]:443", "[::1", "curl/8.5.0", "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "python-requests/2.31", "application/json", "text/plain", "application/x-www-form-urlencoded", "gzip", "a=1; b=2;;",
    "en-US,en;q=0.9,,", "99999999999999999999999999", "-1", "",
];
const CONTENT_TYPES: &[&str] = &["application/json", "text/plain", "application/x-www-form-urlencoded", "image/png", "application/json; charset=utf-8"];

fn headers(rng: &mut Rng, text: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut h: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    if !rng.one_in(20) {
        h.push((b":method".to_vec(), if text { b"POST".to_vec() } else { rng.pick(VALUES).as_bytes().to_vec() }));
    }
    if !rng.one_in(20) {
        let p = if rng.one_in(4) { rng.blob(300, HUGE_VALUE) } else { rng.pick(VALUES).as_bytes().to_vec() };
        h.push((b":path".to_vec(), p));
    }
    if !rng.one_in(10) {
        h.push((b":authority".to_vec(), rng.pick(VALUES).as_bytes().to_vec()));
    }
    if text {
        h.push((b"content-type".to_vec(), rng.pick(CONTENT_TYPES).as_bytes().to_vec()));
    }
    let many = rng.one_in(300);
    let n = if many { MAX_HEADERS - 10 } else { rng.below(FEW_HEADERS) as usize };
    for _ in 0..n {
        let name = match rng.below(3) {
            0 => rng.short(24),
            _ => rng.pick(NAMES).as_bytes().to_vec(),
        };
        let value = match rng.below(3) {
            0 if many => rng.short(16),
            0 => rng.blob(200, HUGE_VALUE),
            _ => rng.pick(VALUES).as_bytes().to_vec(),
        };
        h.push((name, value));
    }
    h
}

fn properties(rng: &mut Rng, s: &Stream) {
    // Few connection ids, so the filter's connection table sees reuse and takeovers.
    if !rng.one_in(10) {
        s.set_property(&["connection_id"], rng.below(400).to_le_bytes());
    } else if rng.one_in(2) {
        let junk = rng.short(12);
        s.set_property(&["connection_id"], junk);
    }
    let protocol = ["HTTP/1.0", "HTTP/1.1", "HTTP/2", "HTTP/3", "", "SPDY/9"];
    if !rng.one_in(8) {
        s.set_property(&["request", "protocol"], protocol[rng.below(6) as usize]);
    }
    if rng.one_in(2) {
        s.set_property(&["connection", "tls_version"], ["TLSv1.2", "TLSv1.3", "", "SSLv3"][rng.below(4) as usize]);
    }
    if rng.one_in(2) {
        let sni = if rng.one_in(5) { rng.blob(40, 1000) } else { b"shop.example.com".to_vec() };
        s.set_property(&["connection", "requested_server_name"], sni);
    }
    if !rng.one_in(6) {
        let addr = match rng.below(4) {
            0 => rng.short(50),
            1 => b"[2001:db8::1]:443".to_vec(),
            _ => format!("{}.{}.{}.{}:{}", rng.below(256), rng.below(256), rng.below(256), rng.below(256), rng.below(65536)).into_bytes(),
        };
        s.set_property(&["source", "address"], addr);
    }
}

/// What the NLP service (or Envoy on its behalf) answers a text call with.
fn answer(rng: &mut Rng, vm: &mut Vm, token: u32) -> anyhow::Result<()> {
    match rng.below(8) {
        0 => vm.fail_http_call(token),
        1 => vm.timeout_http_call(token),
        2 => vm.respond_http_call(token, [(":status", "500")], b"oops"),
        3 => {
            let body = rng.blob(100, 100_000);
            vm.respond_http_call(token, [(":status", "200")], &body)
        }
        4 => vm.respond_http_call(token, [("x-no-status", "1")], b"{}"),
        _ => {
            let (label, p) = (["toxic", "spam", "ok", "threat", "unknown-label"][rng.below(5) as usize], rng.below(1001) as f64 / 1000.0);
            let body = format!(r#"{{"score":{p},"label":"{label}","labels":{{"{label}":{p},"ok":{}}},"model":"m@1"}}"#, 1.0 - p);
            vm.respond_http_call(token, [(":status", "200")], body.as_bytes())
        }
    }
}

fn config() -> String {
    let model = |name: &str, feature: &str, threshold: f64, margin: f64| base64(&artifact(&step_model(name, feature, threshold, margin)));
    let (bot, scanner) = (model("bot", "header_count", 4.0, 4.0), model("scanner", "path_length", 30.0, -3.0));
    let (proto, sni) = (model("proto", "http_protocol", 1.5, 1.0), model("sni", "sni_present", 0.5, 1.0));
    format!(
        r#"{{"hash_key":"test-key-0123456789","feature_log":{{"sample_rate":0.1}},"filter_state":true,
            "headers":{{"decision":"x-edgescore-decision"}},"models":[
            {{"artifact":"{bot}","threshold":0.9,"action":"block","status":403}},
            {{"artifact":"{scanner}","threshold":0.5,"action":"tag"}},
            {{"artifact":"{proto}","threshold":0.7,"action":"tag"}},
            {{"artifact":"{sni}","threshold":2}}],
            "text":{{"cluster":"nlp","timeout_ms":250,"max_body_bytes":4096,"json_fields":["message","meta.text"],"form_fields":["message"],
              "labels":{{"toxic":{{"threshold":0.7,"action":"block"}},"spam":{{"threshold":0.8,"action":"tag"}}}}}}}}"#
    )
}

fn heap(vm: &mut Vm) -> u64 {
    vm.call_u64_export("edgescore_heap_allocations").unwrap().expect("exported")
}

/// One request; returns whether it stayed on the tree path (no body: no allocation allowed).
fn drive(rng: &mut Rng, vm: &mut Vm) -> anyhow::Result<bool> {
    let text = rng.one_in(5);
    let s = vm.stream();
    properties(rng, &s);
    let h = headers(rng, text);
    let action = vm.request_headers(&s, h, !text)?;
    if text && action != Action::Continue && s.local_reply().is_none() {
        let chunks = 1 + rng.below(3);
        let mut ended = false;
        for c in 0..chunks {
            if s.local_reply().is_some() {
                break;
            }
            let body = match rng.below(3) {
                0 => format!(r#"{{"message":"{}","meta":{{"text":"x"}}}}"#, String::from_utf8_lossy(&rng.short(200)).replace(['"', '\\'], "")).into_bytes(),
                1 => b"message=hello+there&x=%ZZ".to_vec(),
                _ => rng.blob(300, 20_000),
            };
            ended = c + 1 == chunks && !rng.one_in(6);
            vm.request_body(&s, &body, ended)?;
        }
        if !ended && s.local_reply().is_none() && !rng.one_in(3) {
            // Trailers end the body too (or the client never ends it: Envoy's stream timeout).
            vm.request_trailers(&s, [("x-trailer", "1")])?;
        }
        // Envoy cancels a call when its stream goes, so every call is answered before that.
        for call in vm.pending_http_calls() {
            answer(rng, vm, call.token)?;
        }
    }
    // Answered: passed on (with the decision header, or marked by a failure policy), or replied
    // to locally; or, for a body the client never finished, still held (Envoy's timeouts end it).
    let upstream = s.upstream_request().0;
    let replied = s.local_reply().is_some();
    anyhow::ensure!(replied || upstream.is_some() || s.request_paused(), "request neither passed on nor answered (action {action:?})");
    if let Some(up) = upstream {
        anyhow::ensure!(up.get("x-edgescore-decision").is_some(), "passed on without a decision");
    }
    vm.done(&s)?;
    Ok(!text)
}

#[test]
fn hostile_requests_never_trap_are_always_answered_and_never_allocate_on_the_tree_path() {
    let n: u64 = std::env::var("EDGESCORE_HOSTILE_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let seed = test_seed(0x5eed);
    let host = Host::with_options(
        filter_wasm().unwrap(),
        HostOptions { clusters: vec!["nlp".into()], allow_on_headers_stop_iteration: true, ..Default::default() },
    )
    .unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config().as_bytes()).unwrap(), "{:?}", vm.log_messages());
    // Warm-up: the largest requests the generator makes (see MAX_HEADERS), then ordinary ones.
    let many: Vec<(Vec<u8>, Vec<u8>)> = (0..MAX_HEADERS + 10).map(|i| (vec![b'n'; 24], format!("{i:>16}").into_bytes())).collect();
    let mut huge: Vec<(Vec<u8>, Vec<u8>)> = (0..FEW_HEADERS + 10).map(|_| (b"cookie".to_vec(), vec![b'c'; HUGE_VALUE])).collect();
    huge.extend([(b":path".to_vec(), vec![b'/'; HUGE_VALUE]), (b"user-agent".to_vec(), vec![b'u'; HUGE_VALUE])]);
    for big in [many, huge] {
        let s = vm.stream();
        vm.request_headers(&s, big, true).unwrap();
        vm.done(&s).unwrap();
    }
    let mut rng = Rng(seed);
    for _ in 0..2000 {
        drive(&mut rng, &mut vm).unwrap();
    }
    let (mut tree_requests, mut tree_allocations) = (0u64, 0u64);
    for i in 0..n {
        let before = heap(&mut vm);
        let tree = drive(&mut rng, &mut vm).unwrap_or_else(|e| panic!("request {i} (seed {seed}): {e:#}"));
        assert!(!vm.is_poisoned(), "request {i} (seed {seed}) trapped");
        if tree {
            tree_requests += 1;
            let grew = heap(&mut vm) - before;
            if grew > 0 {
                eprintln!("request {i} (seed {seed}) made {grew} system allocation(s)");
            }
            tree_allocations += grew;
        }
        if i % 1000 == 0 {
            // The metrics flush, as Envoy's tick would.
            vm.tick().unwrap();
        }
    }
    vm.tick().unwrap();
    let scored = vm.metric("edgescore.requests_scored").unwrap_or(0) + vm.metric("edgescore.errors").unwrap_or(0);
    let (calls, text_errors) = (vm.metric("edgescore.text.calls").unwrap_or(0), vm.metric("edgescore.text.errors").unwrap_or(0));
    println!(
        "{n} hostile requests (seed {seed}): 0 traps; {tree_requests} on the tree path, {tree_allocations} system allocations; \
         {scored} scored or failed in all; {calls} NLP calls, {text_errors} of them failed"
    );
    // The generator reaches the text path and its failures, or this test proves less than it says.
    assert!(calls > n / 50 && text_errors > 0, "{calls} NLP calls, {text_errors} failed");
    assert_eq!(tree_allocations, 0, "tree-path requests reached the system allocator");
    assert!(scored >= n, "every request is scored, or fails open and is counted");
}
