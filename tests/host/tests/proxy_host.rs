//! Tests of the proxy-wasm host (`edgescore_proxy_host`) against a small guest built
//! with the same SDK as the filter (`tests/guest`).

use edgescore_proxy_host::{cargo, Action, Flow, Host, HostOptions, LogLevel, Vm};
use std::time::Duration;

fn host_with(opts: HostOptions) -> Host {
    let wasm = cargo::test_guest_wasm().expect("building tests/guest");
    Host::with_options(
        wasm,
        HostOptions {
            clusters: vec!["auth".into()],
            ..opts
        },
    )
    .expect("loading guest")
}

fn host() -> Host {
    host_with(HostOptions::default())
}

fn vm(host: &Host, plugin_config: &str) -> Vm {
    host.start(b"vm-config", plugin_config.as_bytes())
        .expect("start")
}

fn get(path: &str) -> Vec<(String, String)> {
    [
        (":method", "GET"),
        (":path", path),
        (":authority", "example.com"),
        (":scheme", "https"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn has_log(vm: &Vm, needle: &str) -> bool {
    vm.logs().iter().any(|l| l.message.contains(needle))
}

#[test]
fn lifecycle_configuration_and_imports() {
    let host = host();
    assert!(
        host.non_envoy_imports().is_empty(),
        "{:?}",
        host.non_envoy_imports()
    );
    assert!(host
        .exports()
        .iter()
        .any(|e| e == "proxy_abi_version_0_2_1"));
    let mut vm = host.vm(b"hello-vm").unwrap();
    assert_eq!(vm.root_context_id(), 1);
    assert!(
        has_log(&vm, "vm_start size=8 config=hello-vm"),
        "{:?}",
        vm.log_messages()
    );
    assert!(vm.configure(b"plain").unwrap());
    assert!(has_log(&vm, "configure size=5 config=plain"));
    assert!(!vm.configure(b"reject").unwrap());
    assert!(host.vm(b"fail-start").is_err());
    assert!(host.start(b"", b"reject").is_err());
    let vm = host.start(b"", b"x").unwrap();
    assert!(vm
        .logs()
        .iter()
        .any(|l| l.level == LogLevel::Info && l.context_id == 1));
}

#[test]
fn headers_properties_metrics_and_logs() {
    let host = host();
    let mut vm = vm(&host, "plain");
    let s = vm.stream();
    assert_eq!(s.id(), 2);
    s.set_property(&["source", "address"], "10.1.2.3:5555");
    let mut h = get("/");
    h.push(("X-Mixed-Case".into(), "v".into()));
    assert_eq!(vm.request_headers(&s, &h, true).unwrap(), Action::Continue);
    let req = s.request_headers();
    assert_eq!(
        req.get_str("x-guest-source").as_deref(),
        Some("10.1.2.3:5555")
    );
    assert_eq!(
        req.get_str("x-mixed-case").as_deref(),
        Some("v"),
        "names are lower-cased"
    );
    let (up, _, ended) = s.upstream_request();
    assert!(up.unwrap().contains("x-guest-source") && ended);
    assert_eq!(host.metric("guest_requests"), Some(1));
    assert_eq!(host.metric("guest_inflight"), Some(1));
    assert_eq!(vm.histogram("guest_header_count"), vec![5]);
    assert!(
        has_log(&vm, "#2 request headers: 5 (num 5)"),
        "{:?}",
        vm.log_messages()
    );

    assert_eq!(
        vm.response_headers(&s, [(":status", "200")], true).unwrap(),
        Action::Continue
    );
    assert_eq!(
        s.response_headers().get_str("x-guest").as_deref(),
        Some("1")
    );
    vm.done(&s).unwrap();
    // on_log reads the final request and response headers (access-log phase).
    assert!(
        has_log(&vm, "#2 log path=/ status=200"),
        "{:?}",
        vm.log_messages()
    );
    assert_eq!(host.metric("guest_inflight"), Some(0));
    assert!(
        vm.request_headers(&s, get("/"), true).is_err(),
        "stream is deleted"
    );
    let (calls, bytes) = vm.allocator_calls();
    assert!(calls >= 4 && bytes > 50, "{calls} {bytes}");
}

#[test]
fn raw_huge_and_many_headers() {
    let host = host();
    let mut vm = vm(&host, "plain");
    let s = vm.stream();
    let mut h: Vec<(Vec<u8>, Vec<u8>)> = get("/rewrite")
        .into_iter()
        .map(|(k, v)| (k.into_bytes(), v.into_bytes()))
        .collect();
    h.push((b"user-agent".to_vec(), b"curl".to_vec()));
    h.push((b"x-remove".to_vec(), b"1".to_vec()));
    h.push((b"x-remove".to_vec(), b"2".to_vec()));
    h.push((
        b"x-bin".to_vec(),
        (0..65536u32).map(|i| (i % 251) as u8 | 0x80).collect(),
    ));
    for i in 0..3000 {
        h.push((format!("x-h{i}").into_bytes(), vec![0xff, 0xfe, b'a']));
    }
    assert_eq!(vm.request_headers(&s, h, false).unwrap(), Action::Continue);
    let req = s.request_headers();
    assert_eq!(req.get_str("user-agent").as_deref(), Some("guest"));
    assert!(!req.contains("x-remove"));
    assert_eq!(req.get_str("x-bin-len").as_deref(), Some("65536"));
    assert_eq!(req.get("x-h2999"), Some(&[0xff, 0xfe, b'a'][..]));
    // Envoy's setCopy removes and re-appends, so the replaced header moved to the end.
    let keys: Vec<&[u8]> = req.iter().map(|(k, _)| k).collect();
    assert_eq!(
        &keys[keys.len() - 2..],
        &[&b"user-agent"[..], &b"x-bin-len"[..]]
    );
    assert_eq!(req.len(), 4 + 1 + 1 + 3000 + 1);
}

#[test]
fn set_header_map_pairs_replaces_everything() {
    let host = host();
    let mut vm = vm(&host, "plain");
    let s = vm.stream();
    vm.request_headers(&s, get("/set-all"), true).unwrap();
    let req: Vec<(String, String)> = s
        .request_headers()
        .iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(k).into(),
                String::from_utf8_lossy(v).into(),
            )
        })
        .collect();
    let want = [(":path", "/set-all"), (":method", "GET"), ("x-only", "1")];
    assert_eq!(
        req,
        want.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    );
}

#[test]
fn local_reply_goes_through_the_response_path() {
    let host = host();
    let mut vm = vm(&host, "plain");
    let s = vm.stream();
    assert_eq!(
        vm.request_headers(&s, get("/deny"), false).unwrap(),
        Action::Pause
    );
    let r = s.local_reply().expect("local reply");
    assert_eq!(
        (r.status, r.body.as_slice(), r.grpc_status),
        (403, &b"denied\n"[..], -1)
    );
    assert_eq!(r.headers.get_str("x-deny").as_deref(), Some("yes"));
    let resp = s.response_headers();
    assert_eq!(resp.get_str(":status").as_deref(), Some("403"));
    assert_eq!(resp.get_str("content-length").as_deref(), Some("7"));
    assert_eq!(resp.get_str("content-type").as_deref(), Some("text/plain"));
    assert_eq!(
        resp.get_str("x-guest").as_deref(),
        Some("1"),
        "the filter's on_response_headers ran"
    );
    assert_eq!(s.response_body(), b"denied\n");
    assert_eq!(s.upstream_request().0, None, "nothing went upstream");
    assert_eq!(
        vm.request_body(&s, b"late", true).unwrap(),
        Action::NotCalled
    );
    vm.done(&s).unwrap();
    assert!(has_log(&vm, "log path=/deny status=403"));
}

#[test]
fn http_call_success_resumes_the_request() {
    let host = host();
    let mut vm = vm(&host, "plain");
    let s = vm.stream();
    assert_eq!(
        vm.request_headers(&s, get("/call"), true).unwrap(),
        Action::Pause
    );
    assert!(s.request_paused());
    let calls = vm.pending_http_calls();
    assert_eq!(calls.len(), 1);
    let c = &calls[0];
    assert_eq!(
        (
            c.upstream.as_str(),
            c.body.as_slice(),
            c.timeout_ms,
            c.dispatched_from
        ),
        ("auth", &b"ping"[..], 5000, s.id())
    );
    assert_eq!(c.headers.get_str(":method").as_deref(), Some("POST"));
    assert_eq!(c.headers.get_str("content-length").as_deref(), Some("4"));
    vm.respond_http_call(c.token, [(":status", "200")], b"token-1")
        .unwrap();
    assert_eq!(
        s.request_headers().get_str("x-auth").as_deref(),
        Some("token-1")
    );
    let (up, _, ended) = s.upstream_request();
    assert_eq!(up.unwrap().get_str("x-auth").as_deref(), Some("token-1"));
    assert!(ended && s.request_flow() == Flow::Ended);
    assert!(vm.pending_http_calls().is_empty());
    assert!(
        vm.respond_http_call(c.token, [(":status", "200")], b"")
            .is_err(),
        "already answered"
    );
}

#[test]
fn http_call_failure_timeout_and_unknown_cluster() {
    let host = host();
    let mut vm = vm(&host, "plain");
    let s = vm.stream();
    vm.request_headers(&s, get("/call"), true).unwrap();
    let token = vm.pending_http_calls()[0].token;
    vm.fail_http_call(token).unwrap();
    let r = s.local_reply().unwrap();
    assert_eq!(r.status, 503);
    assert_eq!(r.headers.get_str("x-call-status").as_deref(), Some("11"));
    assert_eq!(
        r.headers.get_str("x-call-message").as_deref(),
        Some("reset")
    );

    let s = vm.stream();
    vm.request_headers(&s, get("/call"), true).unwrap();
    let token = vm.pending_http_calls()[0].token;
    vm.timeout_http_call(token).unwrap();
    let r = s.local_reply().unwrap();
    assert_eq!(
        (r.status, r.body.as_slice()),
        (403, &b"upstream request timeout"[..])
    );

    let s = vm.stream();
    assert_eq!(
        vm.request_headers(&s, get("/call-unknown"), true).unwrap(),
        Action::Continue
    );
    assert_eq!(
        s.request_headers().get_str("x-dispatch").as_deref(),
        Some("Err(BadArgument)")
    );
}

#[test]
fn paused_headers_hold_the_body_until_continue() {
    // Envoy's default: Pause from on_request_headers = StopAllIterationAndWatermark.
    let host = host();
    let mut vm = vm(&host, "plain");
    let s = vm.stream();
    assert_eq!(
        vm.request_headers(&s, get("/call"), false).unwrap(),
        Action::Pause
    );
    assert_eq!(s.request_flow(), Flow::StopAll);
    assert_eq!(
        vm.request_body(&s, b"abc", true).unwrap(),
        Action::NotCalled
    );
    assert!(!has_log(&vm, "request body"));
    let token = vm.pending_http_calls()[0].token;
    vm.respond_http_call(token, [(":status", "200")], b"ok")
        .unwrap();
    // Continue delivered the held body to the filter, which upper-cased it.
    assert!(
        has_log(&vm, "#2 request body 3 eos=true"),
        "{:?}",
        vm.log_messages()
    );
    let (_, body, ended) = s.upstream_request();
    assert_eq!((body.as_slice(), ended), (&b"ABC"[..], true));
    assert_eq!(s.filter_state("guest.body_len").as_deref(), Some(&b"3"[..]));

    // With allow_on_headers_stop_iteration the body callback still runs while headers wait.
    let host = host_with(HostOptions {
        allow_on_headers_stop_iteration: true,
        ..Default::default()
    });
    let mut vm = self::vm(&host, "plain");
    let s = vm.stream();
    assert_eq!(
        vm.request_headers(&s, get("/call"), false).unwrap(),
        Action::Pause
    );
    assert_eq!(s.request_flow(), Flow::HeadersStopped);
    assert_eq!(vm.request_body(&s, b"abc", true).unwrap(), Action::Continue);
    assert_eq!(s.upstream_request().1, b"ABC");
}

#[test]
fn body_buffering_accumulates_chunks() {
    let host = host();
    let mut vm = vm(&host, "plain");
    let s = vm.stream();
    assert_eq!(
        vm.request_headers(&s, get("/body"), false).unwrap(),
        Action::Continue
    );
    assert_eq!(vm.request_body(&s, b"ab", false).unwrap(), Action::Pause);
    assert_eq!(s.request_flow(), Flow::Buffering);
    assert_eq!(vm.request_body(&s, b"cd", true).unwrap(), Action::Continue);
    assert!(has_log(&vm, "request body 4 eos=true"));
    assert_eq!(s.upstream_request().1, b"ABCD");
    assert_eq!(s.filter_state("guest.body_len").as_deref(), Some(&b"4"[..]));
    vm.done(&s).unwrap();
}

#[test]
fn headers_are_gone_after_continue_and_traps_poison_the_vm() {
    let host = host();
    let mut vm = vm(&host, "plain");
    let s = vm.stream();
    assert_eq!(
        vm.request_headers(&s, get("/late-header"), false).unwrap(),
        Action::Continue
    );
    // Reading a request header in on_request_body: BadArgument from Envoy, the SDK panics.
    let err = vm.request_body(&s, b"x", true).unwrap_err().to_string();
    assert!(err.contains("unexpected status: 2"), "{err}");
    assert!(vm.is_poisoned() && s.failed());
    let r = s.local_reply().unwrap();
    assert_eq!((r.status, r.details.as_str()), (503, "wasm_fail_stream"));
    let s2 = vm.stream();
    assert!(vm.request_headers(&s2, get("/"), true).is_err());

    let mut vm = self::vm(&host, "plain");
    let s = vm.stream();
    let err = vm
        .request_headers(&s, get("/panic"), true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("guest panic on purpose"), "{err}");
    assert!(vm.is_poisoned());
}

#[test]
fn shared_data_is_shared_between_vms() {
    let host = host();
    let mut a = vm(&host, "plain");
    let mut b = vm(&host, "plain");
    for (which, want) in [(0, "1"), (1, "2"), (0, "3")] {
        let vm = if which == 0 { &mut a } else { &mut b };
        let s = vm.stream();
        vm.request_headers(&s, get("/shared"), true).unwrap();
        assert_eq!(s.request_headers().get_str("x-hits").as_deref(), Some(want));
    }
    let (v, cas) = host.shared_data("hits").unwrap();
    assert_eq!(v, b"3");
    host.set_shared_data("hits", "10");
    assert!(host.shared_data("hits").unwrap().1 > cas);
    let s = b.stream();
    b.request_headers(&s, get("/shared"), true).unwrap();
    assert_eq!(s.request_headers().get_str("x-hits").as_deref(), Some("11"));
    // Stats are per process too.
    assert_eq!(host.metric("guest_requests"), Some(4));
}

#[test]
fn clock_ticks_and_queues() {
    let host = host();
    let mut vm = vm(&host, "tick queue");
    let start = host.clock().wall_ns();
    host.advance(Duration::from_secs(1));
    let s = vm.stream();
    vm.request_headers(&s, get("/time"), true).unwrap();
    let want = (start + 1_000_000_000).to_string();
    assert_eq!(s.request_headers().get_str("x-time"), Some(want.clone()));
    assert_eq!(s.request_headers().get_str("x-wasi-time"), Some(want));

    assert_eq!(vm.tick_period(), Some(Duration::from_millis(250)));
    assert!(vm.tick().unwrap());
    assert!(vm.tick().unwrap());
    assert_eq!(host.metric("guest_ticks"), Some(2));

    let s = vm.stream();
    vm.request_headers(&s, get("/enqueue"), true).unwrap();
    assert_eq!(host.queue_items("guest_queue"), vec![b"hello".to_vec()]);
    assert_eq!(vm.dispatch_queue_ready().unwrap(), 1);
    assert!(has_log(&vm, "item hello"), "{:?}", vm.log_messages());
    assert!(host.queue_items("guest_queue").is_empty());

    let mut quiet = self::vm(&host, "plain");
    assert!(!quiet.tick().unwrap());
}

#[test]
fn exported_counters_and_allocations() {
    let host = host();
    let mut vm = vm(&host, "plain");
    assert_eq!(vm.call_u64_export("guest_answer").unwrap(), Some(42));
    assert_eq!(vm.call_u64_export("no_such_export").unwrap(), None);
    let before_guest = vm
        .call_u64_export("guest_heap_allocations")
        .unwrap()
        .unwrap();
    let (before_calls, _) = vm.allocator_calls();
    let s = vm.stream();
    vm.request_headers(&s, get("/alloc"), true).unwrap();
    let after_guest = vm
        .call_u64_export("guest_heap_allocations")
        .unwrap()
        .unwrap();
    let (after_calls, _) = vm.allocator_calls();
    // The host's own hand-offs (headers, property, ...) go through the guest allocator, which
    // the guest's counting global allocator also sees.
    assert!(after_calls > before_calls);
    assert!(
        after_guest - before_guest > after_calls - before_calls,
        "{before_guest} {after_guest}"
    );
}
