//! The real `.wasm` in the wasmtime proxy-wasm host: configuration errors, decisions, shadow
//! mode, hostile requests, metrics and filter state. Fast and deterministic; the same
//! behaviours are checked in real Envoy by tests/test_envoy.py.

use edgescore_tests::filter_models::{artifact, base64, connection_config, default_writes_config, step_model, two_model_config};
use edgescore_proxy_host::{cargo::filter_wasm, Action, Host, Vm};

fn vm(config: &str) -> Vm {
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config.as_bytes()).unwrap(), "configuration refused: {:?}", vm.log_messages());
    vm
}

fn browser() -> Vec<(&'static str, &'static str)> {
    vec![
        (":method", "GET"),
        (":path", "/products/42"),
        (":authority", "shop.example.com"),
        (":scheme", "https"),
        ("user-agent", "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"),
        ("accept", "text/html"),
        ("accept-language", "en-US,en;q=0.9"),
        ("accept-encoding", "gzip, br"),
        ("cookie", "a=1; b=2"),
    ]
}

fn bot() -> Vec<(&'static str, &'static str)> {
    vec![(":method", "GET"), (":path", "/products/42"), (":authority", "shop.example.com"), ("user-agent", "curl/8.5.0")]
}

#[test]
fn browser_passes_with_scores() {
    let mut vm = vm(&two_model_config("enforce", ""));
    let s = vm.stream();
    assert_eq!(vm.request_headers(&s, browser(), true).unwrap(), Action::Continue);
    let h = s.request_headers();
    assert_eq!(h.get_str("x-edgescore").unwrap(), "bot=0.0180;scanner=0.0474");
    assert_eq!(h.get_str("x-edgescore-decision").unwrap(), "allow");
    assert_eq!(s.filter_state("edgescore").unwrap(), b"allow bot=0.0180;scanner=0.0474");
    assert!(s.local_reply().is_none());
    vm.tick().unwrap();
    assert_eq!(vm.metric("edgescore.requests_scored"), Some(1));
    assert_eq!(vm.metric("edgescore.decision.allow"), Some(1));
    assert_eq!(vm.metric("edgescore.model.bot.requests.allow"), Some(1));
    assert_score_histogram(&vm, "bot", &[18]);
}

/// `edgescore.model.<model>.score_permille_*` hold exactly `scores` (per mille): cumulative
/// buckets, count and sum, as Prometheus reads a histogram.
fn assert_score_histogram(vm: &Vm, model: &str, scores: &[u64]) {
    let bounds = ["10", "50", "100", "200", "300", "400", "500", "600", "700", "800", "850", "900", "950", "980", "990", "1000", "+Inf"];
    for le in bounds {
        let want = scores.iter().filter(|&&s| le == "+Inf" || s <= le.parse().unwrap()).count() as u64;
        assert_eq!(vm.metric(&format!("edgescore.model.{model}.score_permille_bucket.{le}")), Some(want), "{model} le={le}");
    }
    assert_eq!(vm.metric(&format!("edgescore.model.{model}.score_permille_count")), Some(scores.len() as u64));
    assert_eq!(vm.metric(&format!("edgescore.model.{model}.score_permille_sum")), Some(scores.iter().sum()));
}

#[test]
fn by_default_one_header_carries_the_decision_and_the_scores() {
    let mut vm = vm(&default_writes_config("enforce", ""));
    let s = vm.stream();
    assert_eq!(vm.request_headers(&s, browser(), true).unwrap(), Action::Continue);
    let h = s.request_headers();
    assert_eq!(h.get_str("x-edgescore").unwrap(), "allow bot=0.0180;scanner=0.0474");
    assert_eq!(h.get_str("x-edgescore-decision"), None);
    assert_eq!(s.filter_state("edgescore"), None, "filter state only when configured");
    let s = vm.stream();
    vm.request_headers(&s, bot(), true).unwrap();
    let reply = s.local_reply().expect("blocked");
    // The decision, never the scores, goes back to the client.
    assert_eq!(reply.headers.get_str("x-edgescore").unwrap(), "block;model=bot@1");
}

/// Requests make no metric host call: the counts stay in the module until the root context's
/// tick (or until the scorer is replaced), and then arrive exactly.
#[test]
fn metrics_are_counted_in_the_module_and_flushed_exactly() {
    let mut vm = vm(&default_writes_config("enforce", ""));
    let send = |vm: &mut Vm, n: usize| {
        for i in 0..n {
            let s = vm.stream();
            vm.request_headers(&s, if i % 3 == 0 { bot() } else { browser() }, true).unwrap();
            vm.done(&s).unwrap();
        }
    };
    send(&mut vm, 30);
    assert_eq!(vm.metric("edgescore.requests_scored"), Some(0), "counted before the tick");
    assert_eq!(vm.tick_period(), Some(std::time::Duration::from_millis(1000)), "metrics.flush_ms's default");
    vm.tick().unwrap();
    assert_eq!(vm.metric("edgescore.requests_scored"), Some(30));
    assert_eq!(vm.metric("edgescore.decision.block"), Some(10));
    assert_eq!(vm.metric("edgescore.decision.allow"), Some(20));
    assert_score_histogram(&vm, "bot", &[[18; 20].as_slice(), &[982; 10]].concat());
    vm.tick().unwrap();
    assert_eq!(vm.metric("edgescore.requests_scored"), Some(30), "a flush hands each count over once");
    // A reconfiguration replaces the scorer: what it counted is flushed as it goes.
    send(&mut vm, 7);
    assert!(vm.configure(default_writes_config("enforce", r#","metrics":{"flush_ms":50}"#).as_bytes()).unwrap());
    assert_eq!(vm.metric("edgescore.requests_scored"), Some(37));
    assert_eq!(vm.tick_period(), Some(std::time::Duration::from_millis(50)));
}

#[test]
fn bot_is_blocked_in_enforce_mode() {
    let mut vm = vm(&two_model_config("enforce", ""));
    let s = vm.stream();
    vm.request_headers(&s, bot(), true).unwrap();
    let reply = s.local_reply().expect("blocked");
    assert_eq!(reply.status, 403);
    assert_eq!(reply.body, b"go away\n");
    assert_eq!(reply.headers.get_str("x-edgescore-decision").unwrap(), "block;model=bot@1");
    vm.tick().unwrap();
    assert_eq!(vm.metric("edgescore.decision.block"), Some(1));
    assert_eq!(vm.metric("edgescore.model.bot.requests.block"), Some(1));
}

#[test]
fn shadow_mode_never_blocks() {
    let mut vm = vm(&two_model_config("shadow", ""));
    let s = vm.stream();
    assert_eq!(vm.request_headers(&s, bot(), true).unwrap(), Action::Continue);
    assert!(s.local_reply().is_none());
    assert_eq!(s.request_headers().get_str("x-edgescore-decision").unwrap(), "block;model=bot@1;shadow");
    vm.tick().unwrap();
    assert_eq!(vm.metric("edgescore.decision.shadow_block"), Some(1));
    assert_eq!(vm.metric("edgescore.decision.block").unwrap_or(0), 0);
}

#[test]
fn tag_names_the_model_and_client_headers_are_replaced() {
    let mut vm = vm(&two_model_config("enforce", ""));
    let s = vm.stream();
    let mut h = browser();
    h[1] = (":path", "/a/very/long/path/that/looks/like/a/scan/of/something");
    h.push(("x-edgescore", "bot=0.0000"));
    h.push(("x-edgescore-decision", "allow"));
    vm.request_headers(&s, h, true).unwrap();
    let got = s.request_headers();
    assert_eq!(got.get_all("x-edgescore"), vec![&b"bot=0.0180;scanner=0.9526"[..]]);
    assert_eq!(got.get_all("x-edgescore-decision"), vec![&b"tag;model=scanner@1"[..]]);
}

#[test]
fn configuration_errors_name_the_field() {
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let good = base64(&artifact(&step_model("bot", "header_count", 4.0, 4.0)));
    let mut corrupt = artifact(&step_model("bot", "header_count", 4.0, 4.0));
    corrupt[200] ^= 1;
    let unknown = base64(&artifact(&step_model("bot", "tls_cipher_count", 4.0, 4.0)));
    let mut numeric_method = step_model("bot", "header_count", 4.0, 4.0);
    numeric_method.features[1] = edgescore_compile::ir::FeatureDef { name: "method".into(), kind: edgescore_compile::ir::FeatureKind::Numeric };
    let numeric_method = base64(&artifact(&numeric_method));
    let cases = [
        (r#"{"hash_key":"test-key-0123456789","modles":[]}"#.to_string(), "modles: unknown field"),
        (format!(r#"{{"hash_key":"test-key-0123456789","models":[{{"artifact":"!!{good}","threshold":0.5}}]}}"#), "models[0].artifact: not valid base64"),
        (format!(r#"{{"hash_key":"test-key-0123456789","models":[{{"artifact":"{}","threshold":0.5}}]}}"#, base64(&corrupt)), "models[0].artifact: not a valid edgescore artifact"),
        (format!(r#"{{"hash_key":"test-key-0123456789","models":[{{"artifact":"{unknown}","threshold":0.5}}]}}"#), "feature `tls_cipher_count` is not in the filter's feature catalogue"),
        (format!(r#"{{"hash_key":"test-key-0123456789","models":[{{"artifact":"{numeric_method}","threshold":0.5}}]}}"#), "feature `method` is a hashed categorical but no bucket count"),
        (format!(r#"{{"hash_key":"short","models":[{{"artifact":"{good}","threshold":0.5}}]}}"#), "hash_key: must be at least 16 bytes"),
        (format!(r#"{{"hash_key":"test-key-0123456789","models":[{{"artifact":"{good}","threshold":0.5,"action":"tag","status":403}}]}}"#), "models[0].status"),
        ("{not json".to_string(), "configuration: key must be a string at line 1 column 2"),
        (format!(r#"{{"hash_key":"test-key-0123456789","metrics":{{"histograms":false}},"models":[{{"artifact":"{good}","threshold":0.5}}]}}"#), "metrics.histograms: unknown field"),
    ];
    for (i, (config, want)) in cases.iter().enumerate() {
        let mut vm = host.vm(b"").unwrap();
        assert!(!vm.configure(config.as_bytes()).unwrap(), "case {i} accepted");
        let logs = vm.log_messages().join("\n");
        assert!(logs.contains("edgescore: configuration refused: ") && logs.contains(want), "case {i}: {logs}");
        assert!(!vm.is_poisoned());
    }
    assert_eq!(host.metric("edgescore.config_errors"), Some(cases.len() as u64));
}

#[test]
fn per_model_metrics_can_be_turned_off() {
    let mut vm = vm(&two_model_config("enforce", r#","metrics":{"score_histograms":false,"model_counters":false}"#));
    let s = vm.stream();
    vm.request_headers(&s, browser(), true).unwrap();
    assert_eq!(s.request_headers().get_str("x-edgescore").unwrap(), "bot=0.0180;scanner=0.0474");
    vm.tick().unwrap();
    assert_eq!(vm.metric("edgescore.requests_scored"), Some(1));
    assert_eq!(vm.metric("edgescore.decision.allow"), Some(1));
    for model in ["bot", "scanner"] {
        for band in ["allow", "tag", "block"] {
            assert_eq!(vm.metric(&format!("edgescore.model.{model}.requests.{band}")), None, "{model}.{band} defined");
        }
        assert_eq!(vm.metric(&format!("edgescore.model.{model}.score_permille_count")), None);
    }
    // One of the two back on.
    let mut vm = self::vm(&two_model_config("enforce", r#","metrics":{"model_counters":false}"#));
    let s = vm.stream();
    vm.request_headers(&s, browser(), true).unwrap();
    vm.tick().unwrap();
    assert_score_histogram(&vm, "bot", &[18]);
    assert_eq!(vm.metric("edgescore.model.bot.requests.allow"), None);
}

#[test]
fn a_refused_reconfiguration_keeps_the_previous_scorer() {
    let mut vm = vm(&two_model_config("enforce", ""));
    assert!(!vm.configure(br#"{"hash_key":"test-key-0123456789","models":[{"artifact":"AAAA","threshold":1}]}"#).unwrap());
    let s = vm.stream();
    vm.request_headers(&s, bot(), true).unwrap();
    assert_eq!(s.local_reply().map(|r| r.status), Some(403));
}

#[test]
fn hostile_requests_never_trap() {
    let mut vm = vm(&two_model_config("enforce", r#","feature_log":{"sample_rate":1}"#));
    let big = "v".repeat(64 << 10);
    let many: Vec<(String, String)> = (0..2000).map(|i| (format!("x-h{i}"), format!("{i}"))).collect();
    let mut with_many: Vec<(Vec<u8>, Vec<u8>)> = browser().iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
    with_many.extend(many.iter().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())));
    let requests: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![
        vec![(b":method".to_vec(), b"G\xffT".to_vec()), (b":path".to_vec(), b"/\xc3\x28?\xfe=\xff".to_vec()), (b"user-agent".to_vec(), b"\xff\xfe\xfd".to_vec())],
        vec![(b":method".to_vec(), b"GET".to_vec()), (b":path".to_vec(), big.as_bytes().to_vec()), (b"user-agent".to_vec(), big.as_bytes().to_vec()), (b"cookie".to_vec(), big.as_bytes().to_vec())],
        with_many,
        vec![(b":method".to_vec(), b"GET".to_vec()), (b":path".to_vec(), b"".to_vec())],
        vec![],
        vec![(b"content-length".to_vec(), b"99999999999999999999999999".to_vec()), (b":authority".to_vec(), b"[::1".to_vec())],
    ];
    for (i, h) in requests.into_iter().enumerate() {
        let s = vm.stream();
        let action = vm.request_headers(&s, h, true).unwrap_or_else(|e| panic!("request {i} trapped: {e}"));
        assert!(!vm.is_poisoned(), "request {i}");
        assert!(s.request_headers().get("x-edgescore").is_some() || s.local_reply().is_some(), "request {i} not scored ({action:?})");
        let line = s.filter_state("edgescore.features").expect("sampled");
        let _: serde_json::Value = serde_json::from_slice(&line).unwrap_or_else(|e| panic!("request {i}: bad log line {e}"));
        vm.done(&s).unwrap();
    }
    vm.tick().unwrap();
    assert_eq!(vm.metric("edgescore.requests_scored"), Some(6));
    assert_eq!(vm.metric("edgescore.errors").unwrap_or(0), 0);
}

/// With two or more connection properties in the schema, the filter reads `connection_id` per
/// request and the properties once per connection; without an id it reads them every time.
#[test]
fn connection_properties_are_read_once_per_connection() {
    let config = connection_config("tls", "tls_version", 1.25);
    let mut vm = vm(&config);
    let mut features = |connection: Option<u64>, protocol: &str, tls: Option<&str>| -> (f64, f64) {
        let s = vm.stream();
        if let Some(id) = connection {
            s.set_property(&["connection_id"], id.to_le_bytes());
        }
        s.set_property(&["request", "protocol"], protocol);
        if let Some(t) = tls {
            s.set_property(&["connection", "tls_version"], t);
        }
        vm.request_headers(&s, browser(), true).unwrap();
        let line: serde_json::Value = serde_json::from_slice(&s.filter_state("edgescore.features").expect("sampled")).unwrap();
        vm.done(&s).unwrap();
        (line["features"]["http_protocol"].as_f64().unwrap(), line["features"]["tls_version"].as_f64().unwrap())
    };
    assert_eq!(features(Some(1), "HTTP/2", Some("TLSv1.3")), (2.0, 1.3));
    // Same connection: what the first request read, whatever the host would say now.
    assert_eq!(features(Some(1), "HTTP/1.1", None), (2.0, 1.3));
    // A new connection (same slot of the table included) is read afresh.
    assert_eq!(features(Some(257), "HTTP/1.1", None), (1.1, 0.0));
    assert_eq!(features(Some(1), "HTTP/3", Some("TLSv1.2")), (3.0, 1.2));
    // No connection id: read on every request.
    assert_eq!(features(None, "HTTP/1.0", None), (1.0, 0.0));
    assert_eq!(features(None, "HTTP/2", Some("TLSv1.3")), (2.0, 1.3));
}
