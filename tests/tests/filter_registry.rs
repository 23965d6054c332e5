//! Hot model updates in the `.wasm`, on the proxy-wasm host: the registry poller (a VM whose
//! `root_id` is `edgescore_registry`, Envoy's singleton service VM) and two worker VMs share one
//! host's shared data and stats, as they share them in Envoy through the `vm_id`. The registry
//! is a directory written by the CLI's own `publish`; the test answers the poller's HTTP calls
//! from it. Covered: a swap spans several ticks and no request sees a half-copied model, the
//! request path allocates nothing while a swap is under way, shadow models score but never act,
//! and every refusal reason leaves the served model in place with its counter and log line (a
//! poller that requires two signatures and has floors on the sequence and the version, on the
//! host's wall clock set to now).

use edgescore_compile::ir::{Node, Test, Tree};
use edgescore_compile::registry::{keygen, publish, Publish};
use edgescore_core::registry::{cosign_envelope, format_utc, parse_secret_key, sign_envelope, Manifest, REASONS};
use edgescore_proxy_host::{cargo::filter_wasm, Host, HostOptions, Vm};
use edgescore_tests::filter_models::{artifact, step_model, velocity_model};
use std::path::{Path, PathBuf};
use std::time::Duration;

const POLLER: &str = "edgescore_registry";
const SLICE: usize = 64 << 10;

/// A scratch directory under the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("edgescore-registry-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `bot` with a step on `header_count` (margin decides its score) and `padding` zero-valued
/// trees, which make the artifact as large as a test needs without changing the score.
fn bot(margin: f64, padding: usize) -> Vec<u8> {
    let mut ir = step_model("bot", "header_count", 4.0, margin);
    for _ in 0..padding {
        ir.trees.push(Tree {
            output: 0,
            nodes: vec![
                Node::Split { feature: 0, test: Test::Lt(1.0), missing_yes: true, yes: 1, no: 2 },
                Node::Leaf { value: 0.0 },
                Node::Leaf { value: 0.0 },
            ],
        });
    }
    artifact(&ir)
}

/// How long the manifests `publish` signs stay valid.
const VALID_FOR_S: u64 = 7 * 86_400;

struct Rig {
    dir: Scratch,
    /// The publishing keys, every one trusted by the filter.
    keys: Vec<PathBuf>,
    host: Host,
    poller: Vm,
    workers: Vec<Vm>,
}

impl Rig {
    fn new(name: &str) -> Rig {
        Rig::with(name, 1, "")
    }

    /// A rig whose filter trusts `signers` keys (each publish signs with all), with `extra`
    /// registry settings; the host's wall clock starts at the real time, as the manifests'.
    fn with(name: &str, signers: usize, extra: &str) -> Rig {
        Rig::with_sections(name, signers, extra, "")
    }

    /// [`Rig::with`], with `sections` (`,"velocity":{…}`) added to the plugin configuration.
    fn with_sections(name: &str, signers: usize, extra: &str, sections: &str) -> Rig {
        let dir = Scratch::new(name);
        let bases: Vec<PathBuf> = (0..signers).map(|i| dir.0.join(format!("team{i}"))).collect();
        let mut public = Vec::new();
        for base in &bases {
            keygen(base).unwrap();
            public.push(std::fs::read_to_string(base.with_extension("pub")).unwrap());
        }
        std::fs::create_dir_all(dir.0.join("registry")).unwrap();
        let config = format!(
            r#"{{"mode":"enforce","hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1}},"models":[
                {{"name":"bot","threshold":0.9,"action":"block","status":403}}],
              "registry":{{"cluster":"registry","public_keys":[{}],"poll_seconds":1,
                "check_ms":10,"slice_bytes":{SLICE},"max_artifact_bytes":4194304{extra}}}{sections}}}"#,
            public.join(",")
        );
        let now_ns = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        let opts = HostOptions { vm_id: "edgescore".into(), clusters: vec!["registry".into()], start_time_ns: now_ns, ..Default::default() };
        let host = Host::with_options(filter_wasm().unwrap(), opts).unwrap();
        let poller = host.with_root_id(POLLER).start(b"", config.as_bytes()).unwrap();
        let workers = (0..2).map(|_| host.with_root_id("edgescore").start(b"", config.as_bytes()).unwrap()).collect();
        Rig { keys: bases.iter().map(|b| b.with_extension("key")).collect(), dir, host, poller, workers }
    }

    /// The host's wall clock, seconds since the Unix epoch.
    fn now_s(&self) -> u64 {
        self.host.clock().wall_ns() / 1_000_000_000
    }

    fn registry(&self) -> PathBuf {
        self.dir.0.join("registry")
    }

    fn publish(&self, bytes: &[u8], shadow: bool) {
        let path = self.dir.0.join("upload.esm");
        std::fs::write(&path, bytes).unwrap();
        publish(Publish { artifact: path, registry: self.registry(), keys: self.keys.clone(), valid_for_s: VALID_FOR_S, shadow, hash_key_file: None, golden_csv: None }).unwrap();
    }

    fn manifest(&self) -> Manifest {
        let env: serde_json::Value = serde_json::from_slice(&std::fs::read(self.registry().join("manifest.json")).unwrap()).unwrap();
        use base64::Engine as _;
        let payload = base64::engine::general_purpose::STANDARD.decode(env["payload"].as_str().unwrap()).unwrap();
        Manifest::parse(&payload).unwrap()
    }

    /// Writes `m` as the manifest, signed with every key.
    fn sign(&self, m: &Manifest) {
        self.sign_with(m, self.keys.len())
    }

    /// Writes `m` as the manifest, signed with the first `n` keys.
    fn sign_with(&self, m: &Manifest, n: usize) {
        let secret = |i: usize| parse_secret_key(&std::fs::read_to_string(&self.keys[i]).unwrap()).unwrap();
        let mut env = sign_envelope(&m.to_json(), &secret(0));
        for i in 1..n {
            env = cosign_envelope(&env, &secret(i)).unwrap();
        }
        std::fs::write(self.registry().join("manifest.json"), env).unwrap();
    }

    /// One poll: a second passes, the poller ticks, and every call it makes is answered from
    /// the registry directory (404 for a missing file) until it waits for nothing.
    fn poll(&mut self) {
        self.host.advance(Duration::from_secs(1));
        self.poller.tick().unwrap();
        self.answer(|dir, path| match std::fs::read(dir.join(path.trim_start_matches('/'))) {
            Ok(body) => (200, body),
            Err(_) => (404, b"not found".to_vec()),
        });
    }

    fn answer(&mut self, mut respond: impl FnMut(&Path, &str) -> (u16, Vec<u8>)) {
        let dir = self.registry();
        loop {
            let calls = self.poller.pending_http_calls();
            if calls.is_empty() {
                return;
            }
            for call in calls {
                let path = call.headers.get_str(":path").unwrap();
                let (status, body) = respond(&dir, &path);
                let status = status.to_string();
                self.poller.respond_http_call(call.token, vec![(":status", status.as_str())], &body).unwrap();
            }
        }
    }

    /// Ticks every worker until each has swapped once more (at most `max` ticks each); returns
    /// the ticks each took.
    fn swap_all(&mut self, max: usize) -> Vec<usize> {
        (0..self.workers.len()).map(|i| self.swap(i, max)).collect()
    }

    /// Ticks worker `i` until it swaps (at most `max` ticks); the ticks it took.
    fn swap(&mut self, i: usize, max: usize) -> usize {
        let before = self.swaps();
        let mut n = 0;
        while self.swaps() == before {
            n += 1;
            assert!(n <= max, "worker {i} did not swap within {max} ticks; logs: {:?}", self.workers[i].log_messages());
            self.workers[i].tick().unwrap();
        }
        n
    }

    fn swaps(&self) -> u64 {
        self.poller.metric("edgescore.registry.swaps").unwrap_or(0)
    }

    fn refused(&self, reason: &str) -> u64 {
        self.poller.metric(&format!("edgescore.registry.refused.{reason}")).unwrap_or(0)
    }
}

/// The scores and the decision of one request with `headers` headers.
fn request(vm: &mut Vm, headers: usize) -> (String, String, Option<u16>) {
    let (scores, decision, reply, _) = request_logged(vm, headers);
    (scores, decision, reply)
}

/// `request`, with the feature-log line (filter state; every request is sampled).
fn request_logged(vm: &mut Vm, headers: usize) -> (String, String, Option<u16>, String) {
    let s = vm.stream();
    let mut h = vec![(":method".to_string(), "GET".to_string()), (":path".to_string(), "/".to_string()), (":authority".to_string(), "shop.example.com".to_string())];
    for j in 0..headers.saturating_sub(3) {
        h.push((format!("x-h{j}"), "v".to_string()));
    }
    vm.request_headers(&s, h, true).unwrap();
    let reply = s.local_reply().map(|r| r.status as u16);
    // The default configuration writes one header: the decision, a space, the scores.
    let header = s.request_headers().get_str("x-edgescore").unwrap_or_default();
    let (decision, scores) = header.split_once(' ').map(|(d, s)| (d.to_string(), s.to_string())).unwrap_or_default();
    let log = String::from_utf8(s.filter_state("edgescore.features").unwrap_or_default()).unwrap();
    vm.done(&s).unwrap();
    (scores, decision, reply, log)
}

fn heap(vm: &mut Vm) -> u64 {
    vm.call_u64_export("edgescore_heap_allocations").unwrap().expect("exported")
}

#[test]
fn a_swap_spans_several_ticks_and_no_request_sees_a_half_copied_model() {
    let mut rig = Rig::new("slicing");
    rig.publish(&bot(4.0, 0), false);
    rig.poll();
    assert_eq!(rig.poller.metric("edgescore.registry.models_accepted"), Some(1));
    rig.swap_all(10);
    let (v1, _, _) = request(&mut rig.workers[0], 8);
    assert!(v1.starts_with("bot@1="), "{v1}");

    // v2: a different score and an artifact of several slices.
    let v2_bytes = bot(2.0, 6000);
    let slices = v2_bytes.len().div_ceil(SLICE);
    assert!(slices >= 4, "{} bytes", v2_bytes.len());
    rig.publish(&v2_bytes, false);
    rig.poll();
    // Warm-up (the first requests of a VM size its arena and free lists once).
    for w in &mut rig.workers {
        for _ in 0..20 {
            request(w, 8);
        }
    }
    let w = &mut rig.workers[0];
    let before = rig.poller.metric("edgescore.registry.swaps").unwrap();
    let mut seen = Vec::new();
    let mut ticks = 0;
    while rig.poller.metric("edgescore.registry.swaps").unwrap() == before {
        ticks += 1;
        assert!(ticks <= 2 * slices + 4, "no swap after {ticks} ticks");
        w.tick().unwrap();
        // Between two ticks: the request path, which must not allocate and must be answered
        // by exactly one whole model.
        let h0 = heap(w);
        let (scores, _, _) = request(w, 8);
        assert_eq!(heap(w), h0, "a request allocated during the swap");
        seen.push(scores);
    }
    let (last, earlier) = seen.split_last().unwrap();
    assert!(earlier.iter().all(|s| *s == v1), "{earlier:?}");
    assert!(last.starts_with("bot@2=") && *last != v1, "{last}");
    // One tick finds the record, then the copy takes a slice per tick.
    assert!(ticks >= slices, "{ticks} ticks for {slices} slices");
    let per_tick = rig.poller.histogram("edgescore.registry.tick_us");
    assert!(per_tick.len() >= ticks, "tick_us has {} samples", per_tick.len());
    // The other worker takes it too, and both serve v2 from then on without allocating.
    rig.swap(1, 2 * slices + 4);
    for w in &mut rig.workers {
        let h0 = heap(w);
        for _ in 0..50 {
            assert_eq!(request(w, 8).0, *last);
        }
        assert_eq!(heap(w), h0, "steady-state requests allocated after the swap");
    }
    assert_eq!(rig.poller.metric("edgescore.registry.copy_faults"), Some(0));
    assert_eq!(rig.poller.metric("edgescore.registry.version.bot"), Some(2));
}

/// A worker's velocity table lives outside its scorers: a swap to a new model keeps every
/// client's counts.
#[test]
fn a_swap_keeps_the_clients_counts() {
    let mut rig = Rig::with_sections("velocity", 1, "", r#","velocity":{"key":"header:x-h0"}"#);
    rig.publish(&artifact(&velocity_model("bot", 50.0)), false);
    rig.poll();
    rig.swap_all(10);
    let count = |log: &str| serde_json::from_str::<serde_json::Value>(log).unwrap()["features"]["client_requests_10s"].as_f64().unwrap();
    for k in 1..=3 {
        let (scores, _, _, log) = request_logged(&mut rig.workers[0], 8);
        assert!(scores.starts_with("bot@1="), "{scores}");
        assert_eq!(count(&log), k as f64, "{log}");
    }
    rig.publish(&artifact(&velocity_model("bot", 40.0)), false);
    rig.poll();
    rig.swap(0, 10);
    let (scores, _, _, log) = request_logged(&mut rig.workers[0], 8);
    assert!(scores.starts_with("bot@2="), "{scores}");
    assert_eq!(count(&log), 4.0, "the swap kept the counts: {log}");
    // The other worker has a table of its own.
    rig.swap(1, 10);
    assert_eq!(count(&request_logged(&mut rig.workers[1], 8).3), 1.0);
}

#[test]
fn a_shadow_model_scores_beside_the_active_one_and_never_acts() {
    let mut rig = Rig::new("shadow");
    rig.publish(&bot(-4.0, 0), false); // never blocks
    rig.publish(&bot(4.0, 0), true); // would block requests with fewer than 4 headers
    rig.poll();
    rig.swap_all(10);
    let (scores, decision, reply, log) = request_logged(&mut rig.workers[1], 3);
    assert_eq!(reply, None, "the shadow model acted");
    // Feature-logged beside the active model, marked, so a training table tells them apart.
    assert!(log.contains(r#""bot@1":"#) && log.contains(r#""bot@2~shadow":"#), "{log}");
    assert!(scores.contains("bot@1=") && scores.contains("bot@2~shadow="), "{scores}");
    assert!(!decision.contains("block"), "{decision}");
    assert_eq!(rig.poller.metric("edgescore.registry.shadow_version.bot"), Some(2));
    // Promotion is one more publish: the same artifact, active, version 3. The manifest drops
    // the shadow entry, and the workers stop scoring it.
    rig.publish(&bot(4.0, 0), false);
    assert!(rig.manifest().models.iter().all(|e| e.mode != edgescore_core::registry::ModelMode::Shadow));
    rig.poll();
    rig.swap_all(10);
    for w in &mut rig.workers {
        let (scores, decision, reply) = request(w, 3);
        assert_eq!(reply, Some(403));
        assert!(decision.contains("model=bot@3"), "{decision}");
        assert!(!scores.contains("~shadow"), "the dropped shadow still scores: {scores}");
    }
    assert_eq!(rig.poller.metric("edgescore.registry.version.bot"), Some(3));
    assert_eq!(rig.poller.metric("edgescore.registry.shadow_version.bot"), Some(0));
}

#[test]
fn every_refusal_reason_leaves_the_served_model() {
    // Two keys must sign; the floors are below what the first poll accepts, so that a replay
    // can be under the floor (below_minimum) or at it and under what was accepted (rollback).
    let mut rig = Rig::with("refusals", 2, r#","threshold":2,"min_sequence":1,"min_versions":{"bot":1}"#);
    // Twice: manifest sequence 2 and bot v2, so that a lower sequence and version exist.
    rig.publish(&bot(4.0, 0), false);
    rig.publish(&bot(4.0, 0), false);
    rig.poll();
    rig.swap_all(10);
    let served = request(&mut rig.workers[0], 8).0;
    let good = rig.manifest();
    let v2 = bot(2.0, 0);
    let key = parse_secret_key(&std::fs::read_to_string(&rig.keys[0]).unwrap()).unwrap();
    let other = {
        let base = rig.dir.0.join("other");
        keygen(&base).unwrap();
        parse_secret_key(&std::fs::read_to_string(base.with_extension("key")).unwrap()).unwrap()
    };
    // A good v2 entry to tamper with, from a scratch copy of the registry.
    let scratch = rig.dir.0.join("scratch");
    copy_dir(&rig.registry(), &scratch);
    std::fs::write(rig.dir.0.join("v2.esm"), &v2).unwrap();
    publish(Publish {
        artifact: rig.dir.0.join("v2.esm"),
        registry: scratch.clone(),
        keys: rig.keys.clone(),
        valid_for_s: VALID_FOR_S,
        shadow: false,
        hash_key_file: None,
        golden_csv: None,
    })
    .unwrap();
    let v2_entry = {
        let env: serde_json::Value = serde_json::from_slice(&std::fs::read(scratch.join("manifest.json")).unwrap()).unwrap();
        use base64::Engine as _;
        let m = Manifest::parse(&base64::engine::general_purpose::STANDARD.decode(env["payload"].as_str().unwrap()).unwrap()).unwrap();
        m.models.into_iter().max_by_key(|e| e.version).unwrap()
    };
    let mut sequence = good.sequence;
    let mut next = |edit: &dyn Fn(&mut Manifest)| {
        sequence += 1;
        let mut m = good.clone();
        m.sequence = sequence;
        m.models = vec![v2_entry.clone()];
        edit(&mut m);
        m
    };
    let art = |rig: &Rig, bytes: &[u8]| std::fs::write(rig.registry().join(&v2_entry.artifact), bytes).unwrap();
    type Case<'a> = (&'a str, Box<dyn Fn(&Rig) + 'a>);
    let flipped = {
        let mut b = v2.clone();
        let mid = b.len() / 2;
        b[mid] ^= 1;
        b
    };
    let m_unsigned = next(&|_| {});
    let m_unknown = next(&|_| {});
    let m_bad_sig = next(&|_| {});
    let m_model_rollback = next(&|m| m.models[0].version = 1);
    let m_oversized = next(&|m| m.models[0].size = 5 << 20);
    let m_truncated = next(&|_| {});
    let m_sha = next(&|_| {});
    let m_invalid = {
        let mut m = next(&|_| {});
        let sha = edgescore_core::registry::sha256_hex(&flipped);
        m.models[0].artifact = format!("artifacts/{sha}.esm");
        m.models[0].sha256 = sha;
        m
    };
    let m_schema = next(&|m| m.models[0].schema_hash = "0".repeat(64));
    let m_golden = next(&|m| m.models[0].golden[0].y[0] += 1.0);
    let now = rig.now_s();
    let m_too_few = next(&|_| {});
    let m_expired = next(&|m| {
        m.published_at = format_utc(now - 2 * 86_400);
        m.expires = Some(format_utc(now - 86_400));
    });
    let m_too_long = next(&|m| {
        m.published_at = format_utc(now);
        m.expires = Some(format_utc(now + 32 * 86_400));
    });
    let m_no_expiry = next(&|m| m.expires = None);
    let m_version_below = next(&|m| m.models[0].version = 0);
    let m_unreachable = next(&|_| {});
    let cases: Vec<Case> = vec![
        ("malformed", Box::new(|rig| std::fs::write(rig.registry().join("manifest.json"), b"<html>502</html>").unwrap())),
        ("unsigned", Box::new(|rig| {
            let mut env: serde_json::Value = serde_json::from_slice(&sign_envelope(&m_unsigned.to_json(), &key)).unwrap();
            env["signatures"] = serde_json::json!([]);
            std::fs::write(rig.registry().join("manifest.json"), env.to_string()).unwrap();
        })),
        ("unknown_key", Box::new(|rig| std::fs::write(rig.registry().join("manifest.json"), sign_envelope(&m_unknown.to_json(), &other)).unwrap())),
        ("bad_signature", Box::new(|rig| {
            let mut env: serde_json::Value = serde_json::from_slice(&sign_envelope(&m_bad_sig.to_json(), &key)).unwrap();
            let mut other_payload = m_bad_sig.clone();
            other_payload.sequence += 1000;
            use base64::Engine as _;
            env["payload"] = base64::engine::general_purpose::STANDARD.encode(other_payload.to_json()).into();
            std::fs::write(rig.registry().join("manifest.json"), env.to_string()).unwrap();
        })),
        ("rollback", Box::new(|rig| rig.sign(&Manifest { sequence: 1, ..good.clone() }))),
        ("rollback", Box::new(|rig| {
            art(rig, &v2);
            rig.sign(&m_model_rollback)
        })),
        ("oversized", Box::new(|rig| rig.sign(&m_oversized))),
        ("truncated", Box::new(|rig| {
            art(rig, &v2[..v2.len() - 10]);
            rig.sign(&m_truncated)
        })),
        ("sha_mismatch", Box::new(|rig| {
            art(rig, &flipped);
            rig.sign(&m_sha)
        })),
        ("invalid_artifact", Box::new(|rig| {
            std::fs::write(rig.registry().join(&m_invalid.models[0].artifact), &flipped).unwrap();
            rig.sign(&m_invalid)
        })),
        ("schema_mismatch", Box::new(|rig| {
            art(rig, &v2);
            rig.sign(&m_schema)
        })),
        ("golden_mismatch", Box::new(|rig| rig.sign(&m_golden))),
        ("too_few_signatures", Box::new(|rig| {
            art(rig, &v2);
            rig.sign_with(&m_too_few, 1)
        })),
        ("expired", Box::new(|rig| rig.sign(&m_expired))),
        ("validity_too_long", Box::new(|rig| rig.sign(&m_too_long))),
        ("validity_too_long", Box::new(|rig| rig.sign(&m_no_expiry))),
        ("below_minimum", Box::new(|rig| rig.sign(&Manifest { sequence: 0, ..good.clone() }))),
        ("below_minimum", Box::new(|rig| rig.sign(&m_version_below))),
    ];
    for (reason, case) in &cases {
        let before = rig.refused(reason);
        case(&rig);
        rig.poll();
        assert_eq!(rig.refused(reason), before + 1, "{reason}: {:?}", rig.poller.log_messages());
        let lines: Vec<String> = rig.poller.log_messages().into_iter().filter(|l| l.contains(&format!(": {reason}: "))).collect();
        assert!(!lines.is_empty(), "{reason}: no log line");
        for w in 0..2 {
            for _ in 0..3 {
                rig.workers[w].tick().unwrap();
            }
            assert_eq!(request(&mut rig.workers[w], 8).0, served, "{reason}");
        }
    }
    // Unreachable: a failed call and an HTTP error.
    rig.sign(&m_unreachable);
    for fail in [true, false] {
        let before = rig.refused("unreachable");
        rig.host.advance(Duration::from_secs(1));
        rig.poller.tick().unwrap();
        let call = rig.poller.pending_http_calls().pop().unwrap();
        if fail {
            rig.poller.fail_http_call(call.token).unwrap();
        } else {
            rig.poller.respond_http_call(call.token, vec![(":status", "503")], b"").unwrap();
        }
        assert_eq!(rig.refused("unreachable"), before + 1);
    }
    let total: u64 = REASONS.iter().map(|r| rig.refused(r)).sum();
    assert_eq!(total, cases.len() as u64 + 2);
    assert!(REASONS.iter().all(|r| rig.refused(r) > 0), "a reason without a case");
    assert_eq!(rig.swaps(), 2);
    // The registry answering again: the good v2 is taken.
    art(&rig, &v2);
    rig.poll();
    rig.swap_all(10);
    assert!(request(&mut rig.workers[0], 8).0.starts_with(&format!("bot@{}=", v2_entry.version)));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}
