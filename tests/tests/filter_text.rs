//! The filter's text path in the wasmtime proxy-wasm host: which requests go to the NLP
//! service (and with what text), what its verdict does, and what every kind of failure does.
//! The host runs with Envoy's `allow_on_headers_stop_iteration: true`, as envoy.yaml does; the
//! same path against real Envoy and the real Ray Serve service is tests/test_envoy_nlp.py.

use edgescore_tests::filter_models::two_model_config;
use edgescore_proxy_host::{cargo::filter_wasm, Action, Flow, Host, HostOptions, HttpCall, Stream, Vm};
use std::time::Duration;

const MODEL: &str = "minilm@test";

/// Text settings of the tests: `block` for toxic/threat, `tag` for spam, a 250 ms timeout.
fn text_block(extra: &str) -> String {
    format!(
        r#","text":{{"cluster":"nlp","timeout_ms":250,"json_fields":["message","comment","meta.text"],
            "form_fields":["message","comment"],
            "labels":{{"toxic":{{"threshold":0.7,"action":"block"}},"threat":{{"threshold":0.6,"action":"block"}},
                       "spam":{{"threshold":0.8,"action":"tag"}},"ok":{{"threshold":2.0}}}},
            "status":451,"body":"not here\n"{extra}}}"#
    )
}

fn host() -> Host {
    Host::with_options(
        filter_wasm().unwrap(),
        HostOptions { clusters: vec!["nlp".into()], allow_on_headers_stop_iteration: true, ..Default::default() },
    )
    .unwrap()
}

fn configured(host: &Host, mode: &str, text_extra: &str) -> Vm {
    let mut vm = host.vm(b"").unwrap();
    let config = two_model_config(mode, &text_block(text_extra));
    assert!(vm.configure(config.as_bytes()).unwrap(), "configuration refused: {:?}", vm.log_messages());
    vm
}

fn vm(mode: &str) -> Vm {
    configured(&host(), mode, "")
}

/// A browser-like request (the `bot` model lets it through, `scanner` allows its short path).
fn request(method: &str, path: &str, content_type: Option<&str>) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = [
        (":method", method),
        (":path", path),
        (":authority", "chat.example.com"),
        ("user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"),
        ("accept", "application/json"),
        ("accept-language", "en-US,en;q=0.9"),
        ("accept-encoding", "gzip, br"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if let Some(ct) = content_type {
        h.push(("content-type".into(), ct.into()));
    }
    h
}

fn post(content_type: &str) -> Vec<(String, String)> {
    request("POST", "/chat", Some(content_type))
}

/// The service's answer with `p` for `label` and the rest on `ok`.
fn verdict(label: &str, p: f64) -> Vec<u8> {
    let ok = if label == "ok" { p } else { 1.0 - p };
    let score = 1.0 - ok;
    let top = if p >= ok { label } else { "ok" };
    format!(r#"{{"score":{score},"label":"{top}","labels":{{"{label}":{p},"ok":{ok}}},"model":"{MODEL}"}}"#).into_bytes()
}

fn ok_200() -> [(&'static str, &'static str); 2] {
    [(":status", "200"), ("content-type", "application/json")]
}

/// Sends headers and a whole body, checks the request is held and exactly one call went out;
/// returns it.
fn send_and_call(vm: &mut Vm, s: &Stream, headers: Vec<(String, String)>, body: &[u8]) -> HttpCall {
    assert_eq!(vm.request_headers(s, headers, false).unwrap(), Action::Pause, "qualifying headers are held");
    assert_eq!(s.request_flow(), Flow::HeadersStopped);
    assert_eq!(vm.request_body(s, body, true).unwrap(), Action::Pause, "held until the verdict");
    assert_eq!(s.upstream_request().0, None, "nothing upstream before the verdict");
    let calls = vm.pending_http_calls();
    assert_eq!(calls.len(), 1, "exactly one call: {calls:?}");
    calls.into_iter().next().unwrap()
}

fn sent_text(call: &HttpCall) -> String {
    let v: serde_json::Value = serde_json::from_slice(&call.body).expect("the call's body is JSON");
    assert_eq!(v.as_object().unwrap().len(), 1, "only the text is sent: {v}");
    v["text"].as_str().expect("text is a string").to_string()
}

fn upstream_header(s: &Stream, name: &str) -> Option<String> {
    s.upstream_request().0.expect("the request went upstream").get_str(name)
}

/// A counter after the tick that flushes the filter's counts to the host.
fn metric(vm: &mut Vm, name: &str) -> u64 {
    vm.tick().unwrap();
    vm.metric(name).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// what goes out

#[test]
fn json_form_and_plain_bodies_make_one_call_with_their_text() {
    let mut vm = vm("enforce");
    let cases: [(&str, &[u8], &str); 6] = [
        ("application/json", br#"{"message":"see you at 8","n":3,"user":"bob"}"#, "see you at 8"),
        ("application/json; charset=utf-8", br#"{"meta":{"text":"nested"},"comment":"top","message":["a","b"]}"#, "a\nb\ntop\nnested"),
        ("application/x-www-form-urlencoded", b"user=bob&message=caf%C3%A9+at+noon&comment=ok%21&password=hunter2", "caf\u{e9} at noon\nok!"),
        ("text/plain; charset=utf-8", "hello \u{1f44b} world".as_bytes(), "hello \u{1f44b} world"),
        ("text/markdown", b"# title\nbody", "# title\nbody"),
        ("application/vnd.api+json", br#"{"comment":"json suffix"}"#, "json suffix"),
    ];
    for (i, (ct, body, want)) in cases.iter().enumerate() {
        let s = vm.stream();
        let call = send_and_call(&mut vm, &s, post(ct), body);
        assert_eq!(call.upstream, "nlp", "case {i}");
        assert_eq!(call.timeout_ms, 250, "case {i}");
        assert_eq!(call.dispatched_from, s.id());
        let h = &call.headers;
        assert_eq!(
            (h.get_str(":method"), h.get_str(":path"), h.get_str(":authority"), h.get_str("content-type")),
            (Some("POST".into()), Some("/score".into()), Some("nlp".into()), Some("application/json".into())),
            "case {i}"
        );
        assert_eq!(sent_text(&call), *want, "case {i} ({ct})");
        vm.respond_http_call(call.token, ok_200(), &verdict("ok", 0.97)).unwrap();
        // The whole body still reaches the upstream, unchanged.
        let (headers, up_body, ended) = s.upstream_request();
        assert!(headers.is_some() && ended, "case {i}");
        assert_eq!(up_body, *body, "case {i}");
        vm.done(&s).unwrap();
    }
    assert_eq!(metric(&mut vm, "edgescore.text.calls"), cases.len() as u64);
    assert_eq!(metric(&mut vm, "edgescore.text.errors"), 0);
    assert_eq!(vm.histogram("edgescore.text.latency_ms").len(), cases.len());
    assert_eq!(metric(&mut vm, "edgescore.text.verdict.ok"), cases.len() as u64);
}

#[test]
fn below_every_threshold_the_upstream_gets_the_text_header() {
    let mut vm = vm("enforce");
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, post("application/json"), br#"{"message":"thanks, see you tomorrow"}"#);
    vm.host().advance(Duration::from_millis(42));
    vm.respond_http_call(call.token, ok_200(), &verdict("toxic", 0.69)).unwrap();
    assert!(s.local_reply().is_none());
    let want = format!("score=0.6900;label=toxic;model={MODEL}");
    assert_eq!(upstream_header(&s, "x-edgescore-text"), Some(want.clone()));
    assert_eq!(upstream_header(&s, "x-edgescore-decision").as_deref(), Some("allow"), "0.69 < 0.7: no action");
    assert_eq!(s.filter_state("edgescore.text"), Some(want.into_bytes()));
    assert_eq!(vm.histogram("edgescore.text.latency_ms"), vec![42]);
    assert_eq!(metric(&mut vm, "edgescore.text.label.toxic"), 0);
    assert_eq!(metric(&mut vm, "edgescore.text.verdict.toxic"), 1);
}

#[test]
fn above_a_block_threshold_enforce_replies_and_nothing_goes_upstream() {
    let mut vm = vm("enforce");
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, post("application/json"), br#"{"message":"you are worthless trash"}"#);
    vm.respond_http_call(call.token, ok_200(), &verdict("toxic", 0.93)).unwrap();
    let reply = s.local_reply().expect("blocked");
    assert_eq!((reply.status, reply.body.as_slice()), (451, &b"not here\n"[..]));
    assert_eq!(reply.headers.get_str("x-edgescore-decision").as_deref(), Some("block;text=toxic"));
    assert_eq!(reply.details, "edgescore_text_block");
    assert_eq!(s.upstream_request().0, None, "a blocked request never reaches the upstream");
    // Filter state `edgescore`: the decision the text verdict raised, then the tree's scores.
    let state = String::from_utf8(s.filter_state("edgescore").unwrap()).unwrap();
    let scores = s.request_headers().get_str("x-edgescore").unwrap();
    assert_eq!(state, format!("block;text=toxic {scores}"));
    assert_eq!(metric(&mut vm, "edgescore.text.label.toxic"), 1);
    assert_eq!(metric(&mut vm, "edgescore.text.decision.block"), 1);
    // The tree decision (allow) is counted once; the text block apart from it.
    assert_eq!(metric(&mut vm, "edgescore.decision.allow"), 1);
    assert_eq!(metric(&mut vm, "edgescore.decision.block"), 0);
}

#[test]
fn shadow_mode_never_blocks_on_text() {
    let mut vm = vm("shadow");
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, post("text/plain"), b"i will find you and hurt you");
    assert_eq!(sent_text(&call), "i will find you and hurt you");
    vm.respond_http_call(call.token, ok_200(), &verdict("threat", 0.99)).unwrap();
    assert!(s.local_reply().is_none(), "shadow mode must not block");
    assert_eq!(upstream_header(&s, "x-edgescore-decision").as_deref(), Some("block;text=threat;shadow"));
    assert_eq!(upstream_header(&s, "x-edgescore-text").as_deref(), Some("score=0.9900;label=threat;model=minilm@test"));
    assert_eq!(metric(&mut vm, "edgescore.text.decision.shadow_block"), 1);
    assert_eq!(metric(&mut vm, "edgescore.text.decision.block"), 0);
}

#[test]
fn a_tag_label_tags_and_every_crossed_label_is_counted() {
    let mut vm = vm("enforce");
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, post("application/json"), br#"{"message":"BUY CHEAP FOLLOWERS at spam.example"}"#);
    vm.respond_http_call(call.token, ok_200(), &verdict("spam", 0.91)).unwrap();
    assert!(s.local_reply().is_none());
    assert_eq!(upstream_header(&s, "x-edgescore-decision").as_deref(), Some("tag;text=spam"));
    assert_eq!(metric(&mut vm, "edgescore.text.decision.tag"), 1);

    // Two block labels and a tag label over their thresholds: one block, all three counted.
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, post("application/json"), br#"{"message":"x"}"#);
    let body = format!(r#"{{"score":0.99,"label":"threat","labels":{{"toxic":0.75,"threat":0.8,"spam":0.85,"ok":0.01}},"model":"{MODEL}"}}"#);
    vm.respond_http_call(call.token, ok_200(), body.as_bytes()).unwrap();
    let reply = s.local_reply().expect("blocked");
    assert_eq!(reply.headers.get_str("x-edgescore-decision").as_deref(), Some("block;text=threat"));
    for (label, n) in [("toxic", 1), ("threat", 1), ("spam", 2), ("ok", 0)] {
        assert_eq!(metric(&mut vm, &format!("edgescore.text.label.{label}")), n, "{label}");
    }
    assert_eq!(metric(&mut vm, "edgescore.text.verdict.threat"), 1);
}

#[test]
fn the_strongest_of_tree_and_text_applies() {
    let mut vm = vm("enforce");
    // The scanner model tags paths of 30 bytes or more.
    let long = "/a/very/long/path/to/the/chat/endpoint";
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, request("POST", long, Some("application/json")), br#"{"message":"hello"}"#);
    vm.respond_http_call(call.token, ok_200(), &verdict("ok", 0.99)).unwrap();
    assert_eq!(upstream_header(&s, "x-edgescore-decision").as_deref(), Some("tag;model=scanner@1"), "the tree's tag stays");

    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, request("POST", long, Some("application/json")), br#"{"message":"spam spam"}"#);
    vm.respond_http_call(call.token, ok_200(), &verdict("spam", 0.95)).unwrap();
    assert_eq!(upstream_header(&s, "x-edgescore-decision").as_deref(), Some("tag;model=scanner@1"), "tag does not raise tag");

    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, request("POST", long, Some("application/json")), br#"{"message":"die"}"#);
    vm.respond_http_call(call.token, ok_200(), &verdict("threat", 0.95)).unwrap();
    assert_eq!(s.local_reply().map(|r| r.status), Some(451), "text block over tree tag");

    // A tree block in enforce mode is answered at the headers: no body wait, no call.
    let s = vm.stream();
    let few = vec![(":method", "POST"), (":path", "/chat"), (":authority", "h"), ("content-type", "text/plain")];
    assert_eq!(vm.request_headers(&s, few, false).unwrap(), Action::Pause);
    assert_eq!(s.local_reply().map(|r| r.status), Some(403));
    assert_eq!(vm.request_body(&s, b"hello", true).unwrap(), Action::NotCalled);
    assert!(vm.pending_http_calls().is_empty());
}

// ---------------------------------------------------------------------------------------------
// what never goes out

#[test]
fn get_binary_and_textless_requests_make_no_call() {
    let mut vm = vm("enforce");
    let never_held: Vec<(&str, Vec<(String, String)>, &[u8])> = vec![
        ("GET", request("GET", "/chat?message=you+idiot", None), b""),
        ("GET with a text body", request("GET", "/chat", Some("text/plain")), b"you idiot"),
        ("DELETE", request("DELETE", "/chat/1", Some("application/json")), br#"{"message":"you idiot"}"#),
        ("octet-stream", post("application/octet-stream"), b"\x00\x01you idiot\xff"),
        ("png", post("image/png"), b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),
        ("multipart", post("multipart/form-data; boundary=x"), b"--x\r\n\r\nyou idiot\r\n--x--"),
        ("no content-type", request("POST", "/chat", None), b"you idiot"),
        ("gzip text", { let mut h = post("text/plain"); h.push(("content-encoding".into(), "gzip".into())); h }, b"\x1f\x8b\x08\x00"),
    ];
    for (name, headers, body) in never_held {
        let s = vm.stream();
        assert_eq!(vm.request_headers(&s, headers, body.is_empty()).unwrap(), Action::Continue, "{name}: headers");
        assert!(s.upstream_request().0.is_some(), "{name}: headers went on at once");
        if !body.is_empty() {
            assert_eq!(vm.request_body(&s, body, true).unwrap(), Action::Continue, "{name}: body");
            assert_eq!(s.upstream_request().1, body, "{name}");
        }
        assert!(vm.pending_http_calls().is_empty(), "{name}: no call");
        assert_eq!(upstream_header(&s, "x-edgescore-text"), None, "{name}");
        vm.done(&s).unwrap();
    }
    // Qualifying content types without text: held for the body, then passed on without a call.
    let textless: [(&str, &[u8]); 6] = [
        ("application/json", br#"{"user":"bob","password":"x","n":[1,2]}"#),
        ("application/json", br#"{"message":"   \n\t "}"#),
        ("application/json", b"[1,2,3]"),
        ("application/x-www-form-urlencoded", b"user=bob&password=hunter2"),
        ("text/plain", b"  \r\n "),
        ("text/plain", b""),
    ];
    for (i, (ct, body)) in textless.iter().enumerate() {
        let s = vm.stream();
        assert_eq!(vm.request_headers(&s, post(ct), false).unwrap(), Action::Pause, "{i}");
        assert_eq!(vm.request_body(&s, body, true).unwrap(), Action::Continue, "{i}: {ct} {body:?}");
        assert!(vm.pending_http_calls().is_empty(), "{i}: no call");
        assert_eq!(s.upstream_request().1, *body);
        vm.done(&s).unwrap();
    }
    assert_eq!(metric(&mut vm, "edgescore.text.calls"), 0);
    assert_eq!(metric(&mut vm, "edgescore.text.skipped_empty"), textless.len() as u64);
    assert_eq!(metric(&mut vm, "edgescore.requests_scored"), 8 + textless.len() as u64);
}

#[test]
fn a_client_cannot_send_its_own_text_verdict() {
    let mut vm = vm("enforce");
    let forged = "score=0.0000;label=ok;model=trust-me";
    let s = vm.stream();
    let mut h = request("GET", "/chat", None);
    h.push(("x-edgescore-text".into(), forged.into()));
    vm.request_headers(&s, h, true).unwrap();
    assert_eq!(upstream_header(&s, "x-edgescore-text"), None, "removed from a request that is not scored");

    let s = vm.stream();
    let mut h = post("application/json");
    h.push(("x-edgescore-text".into(), forged.into()));
    h.push(("x-edgescore-text".into(), "again".into()));
    let call = send_and_call(&mut vm, &s, h, br#"{"message":"hi"}"#);
    vm.respond_http_call(call.token, ok_200(), &verdict("ok", 0.9)).unwrap();
    let up = s.upstream_request().0.unwrap();
    assert_eq!(up.get_all("x-edgescore-text"), vec![&b"score=0.1000;label=ok;model=minilm@test"[..]]);
}

// ---------------------------------------------------------------------------------------------
// failures: fail open (default) and closed

/// Every way the call can fail, as Envoy reports it; `error` is the text header's value.
fn fail(vm: &mut Vm, how: &str, token: u32) -> &'static str {
    match how {
        "503" => {
            vm.respond_http_call(token, [(":status", "503")], b"no healthy upstream").unwrap();
            "error=status"
        }
        "500 json" => {
            vm.respond_http_call(token, [(":status", "500")], br#"{"error":"model_failed"}"#).unwrap();
            "error=status"
        }
        "reset" => {
            vm.fail_http_call(token).unwrap();
            "error=unavailable"
        }
        "timeout" => {
            vm.host().advance(Duration::from_millis(250));
            vm.timeout_http_call(token).unwrap();
            "error=status"
        }
        "html" => {
            vm.respond_http_call(token, ok_200(), b"<html>oops</html>").unwrap();
            "error=bad_answer"
        }
        "no score" => {
            vm.respond_http_call(token, ok_200(), br#"{"label":"toxic"}"#).unwrap();
            "error=bad_answer"
        }
        "empty 200" => {
            vm.respond_http_call(token, [(":status", "200")], b"").unwrap();
            "error=bad_answer"
        }
        other => unreachable!("{other}"),
    }
}

const FAILURES: [&str; 7] = ["503", "500 json", "reset", "timeout", "html", "no score", "empty 200"];

#[test]
fn failures_fail_open_and_are_counted() {
    let mut vm = vm("enforce");
    for how in FAILURES {
        let s = vm.stream();
        let body = br#"{"message":"you are an idiot"}"#;
        let call = send_and_call(&mut vm, &s, post("application/json"), body);
        let want = fail(&mut vm, how, call.token);
        assert!(s.local_reply().is_none(), "{how}: fail open");
        let (headers, up_body, ended) = s.upstream_request();
        assert!(ended, "{how}: the request went on");
        assert_eq!(up_body, body);
        let headers = headers.unwrap();
        assert_eq!(headers.get_str("x-edgescore-text").as_deref(), Some(want), "{how}");
        assert_eq!(headers.get_str("x-edgescore-decision").as_deref(), Some("allow"), "{how}");
        assert_eq!(s.filter_state("edgescore.text").as_deref(), Some(want.as_bytes()));
        assert!(!vm.is_poisoned() && !s.failed(), "{how}");
        vm.done(&s).unwrap();
    }
    assert_eq!(metric(&mut vm, "edgescore.text.calls"), FAILURES.len() as u64);
    assert_eq!(metric(&mut vm, "edgescore.text.errors"), FAILURES.len() as u64);
    assert_eq!(metric(&mut vm, "edgescore.text.timeouts"), 1);
    assert_eq!(vm.histogram("edgescore.text.latency_ms").len(), FAILURES.len());
    assert!(vm.histogram("edgescore.text.latency_ms").contains(&250));
}

#[test]
fn a_service_504_before_the_timeout_is_not_counted_as_a_timeout() {
    let mut vm = vm("enforce");
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, post("text/plain"), b"hello");
    vm.respond_http_call(call.token, [(":status", "504")], b"gateway timeout").unwrap();
    assert_eq!(upstream_header(&s, "x-edgescore-text").as_deref(), Some("error=status"));
    assert_eq!(metric(&mut vm, "edgescore.text.errors"), 1);
    assert_eq!(metric(&mut vm, "edgescore.text.timeouts"), 0);
}

/// Envoy arms the call's timer from its loop's cached time: on a busy worker the router's
/// timeout reply can arrive before `timeout_ms` by the filter's clock. Its body names it.
#[test]
fn a_router_timeout_a_little_early_by_our_clock_is_still_a_timeout() {
    let mut vm = vm("enforce");
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, post("text/plain"), b"hello");
    vm.host().advance(Duration::from_millis(230));
    vm.timeout_http_call(call.token).unwrap();
    assert_eq!(upstream_header(&s, "x-edgescore-text").as_deref(), Some("error=status"));
    assert_eq!(metric(&mut vm, "edgescore.text.errors"), 1);
    assert_eq!(metric(&mut vm, "edgescore.text.timeouts"), 1);
}

#[test]
fn failures_fail_closed_with_fail_open_false() {
    let mut vm = configured(&host(), "enforce", r#","fail_open":false"#);
    for how in FAILURES {
        let s = vm.stream();
        let call = send_and_call(&mut vm, &s, post("application/json"), br#"{"message":"hello"}"#);
        fail(&mut vm, how, call.token);
        let reply = s.local_reply().unwrap_or_else(|| panic!("{how}: fail closed"));
        assert_eq!(reply.status, 503, "{how}");
        assert_eq!(reply.body, b"edgescore: the text of the request could not be scored\n");
        assert_eq!(reply.headers.get_str("x-edgescore-decision").as_deref(), Some("error"));
        assert_eq!(reply.details, "edgescore_text_unavailable");
        assert_eq!(s.upstream_request().0, None, "{how}: nothing upstream");
        vm.done(&s).unwrap();
    }
    assert_eq!(metric(&mut vm, "edgescore.text.errors"), FAILURES.len() as u64);
    // A verdict still passes or blocks as usual.
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, post("application/json"), br#"{"message":"hello"}"#);
    vm.respond_http_call(call.token, ok_200(), &verdict("ok", 0.99)).unwrap();
    assert!(s.local_reply().is_none() && s.upstream_request().2);
}

#[test]
fn an_unknown_cluster_fails_at_dispatch() {
    let host = Host::with_options(
        filter_wasm().unwrap(),
        HostOptions { clusters: vec!["other".into()], allow_on_headers_stop_iteration: true, ..Default::default() },
    )
    .unwrap();
    for (n, (fail_open, want_reply)) in [("true", None), ("false", Some(503))].into_iter().enumerate() {
        let mut vm = configured(&host, "enforce", &format!(r#","fail_open":{fail_open}"#));
        let s = vm.stream();
        assert_eq!(vm.request_headers(&s, post("text/plain"), false).unwrap(), Action::Pause);
        let action = vm.request_body(&s, b"hello", true).unwrap();
        assert!(vm.pending_http_calls().is_empty());
        assert_eq!(s.local_reply().map(|r| r.status), want_reply, "fail_open {fail_open}");
        if want_reply.is_none() {
            assert_eq!(action, Action::Continue);
            assert_eq!(upstream_header(&s, "x-edgescore-text").as_deref(), Some("error=dispatch"));
        }
        assert_eq!(metric(&mut vm, "edgescore.text.errors"), n as u64 + 1, "stats are per host");
        assert!(!vm.is_poisoned());
    }
}

// ---------------------------------------------------------------------------------------------
// bodies: size, chunks, trailers

#[test]
fn an_oversize_body_is_cut_at_max_body_bytes() {
    let mut vm = configured(&host(), "enforce", r#","max_body_bytes":64"#);
    // Plain text in chunks: no call until 64 bytes are buffered, then exactly one, with the
    // first 64 bytes; the rest is held until the verdict and then all of it goes upstream.
    let s = vm.stream();
    assert_eq!(vm.request_headers(&s, post("text/plain"), false).unwrap(), Action::Pause);
    let text: Vec<u8> = (0..200).map(|i| b'a' + (i % 26) as u8).collect();
    assert_eq!(vm.request_body(&s, &text[..40], false).unwrap(), Action::Pause);
    assert!(vm.pending_http_calls().is_empty(), "40 < 64 bytes: still waiting");
    assert_eq!(vm.request_body(&s, &text[40..100], false).unwrap(), Action::Pause);
    let calls = vm.pending_http_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(sent_text(&calls[0]).as_bytes(), &text[..64]);
    assert_eq!(vm.request_body(&s, &text[100..150], false).unwrap(), Action::Pause, "held while the call runs");
    assert_eq!(vm.pending_http_calls().len(), 1, "no second call");
    vm.respond_http_call(calls[0].token, ok_200(), &verdict("ok", 0.9)).unwrap();
    assert_eq!(s.upstream_request().1, &text[..150]);
    assert_eq!(vm.request_body(&s, &text[150..], true).unwrap(), Action::Continue);
    assert_eq!(s.upstream_request().1, text);

    // JSON cut inside the field: the part within the first 64 bytes is scored.
    let s = vm.stream();
    let body = format!(r#"{{"message":"{}"}}"#, "word ".repeat(30));
    let call = send_and_call(&mut vm, &s, post("application/json"), body.as_bytes());
    assert_eq!(sent_text(&call), &body[12..64]);
    vm.respond_http_call(call.token, ok_200(), &verdict("ok", 0.9)).unwrap();
    assert_eq!(s.upstream_request().1, body.as_bytes());

    // Cut inside a multi-byte character: the partial character is dropped, not mangled.
    let s = vm.stream();
    let body = format!("{}\u{e9}\u{e9}", "x".repeat(63));
    let call = send_and_call(&mut vm, &s, post("text/plain; charset=utf-8"), body.as_bytes());
    assert_eq!(sent_text(&call), "x".repeat(63));
    assert_eq!(metric(&mut vm, "edgescore.text.calls"), 3);
}

#[test]
fn trailers_end_the_body_and_cannot_skip_the_call() {
    let mut vm = vm("enforce");
    let s = vm.stream();
    assert_eq!(vm.request_headers(&s, post("text/plain"), false).unwrap(), Action::Pause);
    assert_eq!(vm.request_body(&s, b"you are ", false).unwrap(), Action::Pause);
    assert_eq!(vm.request_body(&s, b"a clown", false).unwrap(), Action::Pause);
    assert_eq!(vm.request_trailers(&s, [("x-checksum", "1")]).unwrap(), Action::Pause);
    let calls = vm.pending_http_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(sent_text(&calls[0]), "you are a clown");
    vm.respond_http_call(calls[0].token, ok_200(), &verdict("toxic", 0.95)).unwrap();
    assert_eq!(s.local_reply().map(|r| r.status), Some(451));
    assert_eq!(s.upstream_request().0, None);

    let s = vm.stream();
    assert_eq!(vm.request_headers(&s, post("text/plain"), false).unwrap(), Action::Pause);
    assert_eq!(vm.request_body(&s, b"nice day", false).unwrap(), Action::Pause);
    assert_eq!(vm.request_trailers(&s, [("x-checksum", "2")]).unwrap(), Action::Pause);
    let token = vm.pending_http_calls()[0].token;
    vm.respond_http_call(token, ok_200(), &verdict("ok", 0.95)).unwrap();
    let st = s.snapshot();
    assert_eq!(st.request.forwarded_body, b"nice day");
    assert_eq!(st.request.forwarded_trailers.and_then(|t| t.get_str("x-checksum")).as_deref(), Some("2"));
}

// ---------------------------------------------------------------------------------------------
// combine: tree_gated

#[test]
fn tree_gated_sends_only_what_the_trees_flagged() {
    let host = host();
    let mut vm = configured(&host, "enforce", r#","combine":"tree_gated""#);
    // Trees allow: not held, not sent.
    let s = vm.stream();
    assert_eq!(vm.request_headers(&s, post("application/json"), false).unwrap(), Action::Continue);
    assert_eq!(vm.request_body(&s, br#"{"message":"you idiot"}"#, true).unwrap(), Action::Continue);
    assert!(vm.pending_http_calls().is_empty());
    // The scanner model tags it: the transformer is asked, and its block applies.
    let long = "/a/very/long/path/to/the/chat/endpoint";
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, request("POST", long, Some("application/json")), br#"{"message":"you idiot"}"#);
    assert_eq!(sent_text(&call), "you idiot");
    vm.respond_http_call(call.token, ok_200(), &verdict("toxic", 0.9)).unwrap();
    assert_eq!(s.local_reply().map(|r| r.status), Some(451));
    // Tagged but benign text: passes with the tree's tag and the text header.
    let s = vm.stream();
    let call = send_and_call(&mut vm, &s, request("POST", long, Some("application/json")), br#"{"message":"hello"}"#);
    vm.respond_http_call(call.token, ok_200(), &verdict("ok", 0.9)).unwrap();
    assert_eq!(upstream_header(&s, "x-edgescore-decision").as_deref(), Some("tag;model=scanner@1"));
    assert!(upstream_header(&s, "x-edgescore-text").unwrap().starts_with("score=0.1000;label=ok"));
    assert_eq!(metric(&mut vm, "edgescore.text.calls"), 2);

    // Shadow mode: a tree block (too few headers) is not enforced, so the text is scored too.
    let mut vm = configured(&host, "shadow", r#","combine":"tree_gated""#);
    let few = vec![(":method", "POST"), (":path", "/chat"), (":authority", "h"), ("content-type", "text/plain")];
    let s = vm.stream();
    assert_eq!(vm.request_headers(&s, few, false).unwrap(), Action::Pause);
    assert_eq!(vm.request_body(&s, b"hello", true).unwrap(), Action::Pause);
    let token = vm.pending_http_calls()[0].token;
    vm.respond_http_call(token, ok_200(), &verdict("threat", 0.9)).unwrap();
    assert!(s.local_reply().is_none());
    assert_eq!(upstream_header(&s, "x-edgescore-decision").as_deref(), Some("block;model=bot@1;shadow"));
    assert!(upstream_header(&s, "x-edgescore-text").unwrap().contains("label=threat"));
}

// ---------------------------------------------------------------------------------------------
// configuration

#[test]
fn text_configuration_errors_name_the_field() {
    let host = host();
    let cases = [
        (r#","text":{"cluster":"","labels":{"toxic":{"threshold":0.5}}}"#, "text.cluster: must name an Envoy cluster"),
        (r#","text":{"cluster":"nlp","labels":{}}"#, "text.labels: name at least one label"),
        (r#","text":{"cluster":"nlp"}"#, "text: missing field `labels`"),
        (r#","text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.5}},"timeout":5}"#, "text.timeout: unknown field"),
        (r#","text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.5,"action":"ban"}}}"#, "text.labels.toxic.action: unknown variant"),
        (r#","text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.5}},"timeout_ms":0}"#, "text.timeout_ms: must be 1..=60000"),
        (r#","text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.5}},"max_body_bytes":2000000}"#, "text.max_body_bytes"),
        (r#","text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.5}},"path":"score"}"#, "text.path: must start with `/`"),
        (r#","text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.5}},"header":"X-Text"}"#, "text.header"),
        (r#","text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.5}},"header":"x-edgescore"}"#, "text.header: must differ"),
        (r#","text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.5}},"combine":"weighted"}"#, "text.combine: unknown variant"),
        (r#","text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.5}},"status":99}"#, "text.status"),
    ];
    for (i, (extra, want)) in cases.iter().enumerate() {
        let mut vm = host.vm(b"").unwrap();
        assert!(!vm.configure(two_model_config("enforce", extra).as_bytes()).unwrap(), "case {i} accepted");
        let logs = vm.log_messages().join("\n");
        assert!(logs.contains(want), "case {i}: want {want:?} in {logs}");
    }
}
