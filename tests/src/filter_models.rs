//! Small, hand-built models over catalogue features for the filter's tests: their decisions
//! are known in advance (unlike hashed-bucket models), so tests can aim for each action.

use base64::Engine as _;
use edgescore_compile::ir::{FeatureDef, FeatureKind, ModelIr, Node, Test, Tree};

/// A binary model `sigmoid(+margin)` when `feature < threshold` (or NaN), else `-margin`,
/// plus a second tree on a hashed categorical so the filter must hash and bucket it.
pub fn step_model(name: &str, feature: &str, threshold: f64, margin: f64) -> ModelIr {
    let step = Tree {
        output: 0,
        nodes: vec![
            Node::Split { feature: 0, test: Test::Lt(threshold), missing_yes: true, yes: 1, no: 2 },
            Node::Leaf { value: margin },
            Node::Leaf { value: -margin },
        ],
    };
    // Adds 0 either way: exercises the categorical path without changing the score.
    let categorical = Tree {
        output: 0,
        nodes: vec![
            Node::Split { feature: 1, test: Test::Lt(8.0), missing_yes: true, yes: 1, no: 2 },
            Node::Leaf { value: 0.0 },
            Node::Leaf { value: 0.0 },
        ],
    };
    let features = vec![
        FeatureDef { name: feature.into(), kind: FeatureKind::Numeric },
        FeatureDef { name: "ua_family".into(), kind: FeatureKind::Categorical { buckets: 64 } },
    ];
    ModelIr::binary_logistic(name, features, vec![step, categorical])
}

/// `step_model` on `tls_ja4_ciphers` (blocks below 10 ciphers or without a fingerprint), with
/// every other TLS fingerprint feature declared and split on, so the filter computes them all
/// (`tls_ua_consistent` over [`TEST_UA_FINGERPRINTS`]).
pub fn tls_model(name: &str) -> ModelIr {
    let mut ir = step_model(name, "tls_ja4_ciphers", 10.0, 2.0);
    let more = [("tls_ja4", 4096), ("tls_ja4_a", 1024), ("tls_ja4_extensions", 0), ("tls_ja4_alpn", 64), ("tls_ja3", 4096), ("tls_ua_consistent", 0)];
    for (name, buckets) in more {
        let kind = if buckets == 0 { FeatureKind::Numeric } else { FeatureKind::Categorical { buckets } };
        declare_and_split(&mut ir, name, kind, 8.0);
    }
    ir.ua_fingerprints = ua_fingerprints(TEST_UA_FINGERPRINTS);
    ir
}

/// A UA fingerprint table for tests: Chrome's cipher and extension set and curl's JA4 (both
/// real, docs/security-teams.md), and a Firefox entry made up to match any TLS 1.3 client
/// with SNI.
pub const TEST_UA_FINGERPRINTS: &str = r#"{"families": {"chrome": ["t13d1516h2_8daaf6152771_*"], "curl": ["t13i3111h2_e8f1e7e78f70_b26ce05bbdd6"], "firefox": ["t13d*"]}}"#;

/// The entries of a table file's text (`compile --ua-fingerprints`).
pub fn ua_fingerprints(json: &str) -> Vec<edgescore_compile::ir::UaFingerprint> {
    edgescore_compile::ua_fingerprints::parse(json).expect("a valid test table")
}

/// Declares feature `name` on `ir` and adds a tree splitting on it at `at` with zero leaves:
/// the filter computes the feature, the scores stay the same.
fn declare_and_split(ir: &mut ModelIr, name: &str, kind: FeatureKind, at: f64) {
    ir.features.push(FeatureDef { name: name.into(), kind });
    let feature = ir.features.len() as u32 - 1;
    ir.trees.push(Tree {
        output: 0,
        nodes: vec![
            Node::Split { feature, test: Test::Lt(at), missing_yes: true, yes: 1, no: 2 },
            Node::Leaf { value: 0.0 },
            Node::Leaf { value: 0.0 },
        ],
    });
}

/// One `tls_model` in shadow mode, every request's features logged.
pub fn tls_config() -> String {
    let tls = base64(&artifact(&tls_model("tls")));
    format!(r#"{{"mode":"shadow","hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1}},"models":[{{"artifact":"{tls}","threshold":0.5,"action":"block"}}]}}"#)
}

/// `step_model` on `header_count` (blocks below 4 headers), with `verified_bot` and
/// `verified_bot_agent` declared and split on (zero leaves), so the filter computes them.
pub fn bots_model(name: &str) -> ModelIr {
    let mut ir = step_model(name, "header_count", 4.0, 4.0);
    for (feature, kind) in [("verified_bot", FeatureKind::Numeric), ("verified_bot_agent", FeatureKind::Categorical { buckets: 64 })] {
        declare_and_split(&mut ir, feature, kind, 0.5);
    }
    ir
}

/// One `bots_model` blocking in enforce mode, every request's features logged, its decision in
/// its own header and filter state; `verified_bots` trusting the directory `crawler` on the
/// cluster `bots`, with `action`.
pub fn bots_config(action: &str) -> String {
    let bot = base64(&artifact(&bots_model("bot")));
    format!(
        r#"{{"mode":"enforce","hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1}}{ALL_WRITES},"models":[{{"artifact":"{bot}","threshold":0.5,"action":"block"}}],
            "verified_bots":{{"directories":[{{"name":"crawler","cluster":"bots","path":"/keys.json"}}],"action":"{action}","refresh_seconds":60,"max_bytes":4096}}}}"#
    )
}

pub fn artifact(ir: &ModelIr) -> Vec<u8> {
    edgescore_compile::write::write(ir).expect("test model compiles")
}

pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Every write the filter can make: the decision in its own header and filter state for
/// access logs (the defaults write one header and no filter state).
pub const ALL_WRITES: &str = r#","headers":{"decision":"x-edgescore-decision"},"filter_state":true"#;

/// `bot` blocks (403) requests with fewer than 4 headers; `scanner` tags paths of 30 bytes or
/// more (its step is inverted: long paths score high). With [`ALL_WRITES`] on.
pub fn two_model_config(mode: &str, extra: &str) -> String {
    default_writes_config(mode, &format!("{ALL_WRITES}{extra}"))
}

/// [`two_model_config`] with both models' node values (equal covers), so that blocked and
/// `explain.sample`d requests get reasons.
pub fn explained_two_model_config(mode: &str, extra: &str) -> String {
    let explained = |mut ir: ModelIr| {
        ir.covers = Some(edgescore_compile::ir::Covers::equal(&ir.trees));
        base64(&artifact(&ir))
    };
    let bot = explained(step_model("bot", "header_count", 4.0, 4.0));
    let scanner = explained(step_model("scanner", "path_length", 30.0, -3.0));
    format!(
        r#"{{"mode":"{mode}","hash_key":"test-key-0123456789","models":[
            {{"artifact":"{bot}","threshold":0.9,"action":"block","status":403,"body":"go away\n"}},
            {{"artifact":"{scanner}","threshold":0.5,"action":"tag"}}]{ALL_WRITES}{extra}}}"#
    )
}

/// [`two_model_config`] with the default writes: one header, no filter state.
pub fn default_writes_config(mode: &str, extra: &str) -> String {
    let bot = base64(&artifact(&step_model("bot", "header_count", 4.0, 4.0)));
    let scanner = base64(&artifact(&step_model("scanner", "path_length", 30.0, -3.0)));
    format!(
        r#"{{"mode":"{mode}","hash_key":"test-key-0123456789","models":[
            {{"artifact":"{bot}","threshold":0.9,"action":"block","status":403,"body":"go away\n"}},
            {{"artifact":"{scanner}","threshold":0.5,"action":"tag"}}]{extra}}}"#
    )
}

/// Two models that only tag: `proto` on `http_protocol` and `name` on `feature`, both
/// connection properties, with every request's features logged.
pub fn connection_config(name: &str, feature: &str, threshold: f64) -> String {
    let proto = base64(&artifact(&step_model("proto", "http_protocol", 1.5, 1.0)));
    let other = base64(&artifact(&step_model(name, feature, threshold, 1.0)));
    format!(
        r#"{{"hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1}},"models":[
            {{"artifact":"{proto}","threshold":2,"action":"tag"}},{{"artifact":"{other}","threshold":2,"action":"tag"}}]}}"#
    )
}

/// The catalogue's per-client counts (`velocity`), in catalogue order.
pub const VELOCITY_FEATURES: [&str; 5] = ["client_requests_10s", "client_requests_60s", "client_paths_60s", "client_4xx_share_60s", "client_403_share_60s"];

/// `burst`: blocks a client's requests once it has sent `threshold` or more in the last 10 s;
/// it reads every other count too (trees adding 0), so the filter computes and logs them all.
pub fn velocity_model(name: &str, threshold: f64) -> ModelIr {
    let tree = |feature: u32, test: f64, yes: f64, no: f64| Tree {
        output: 0,
        nodes: vec![
            Node::Split { feature, test: Test::Lt(test), missing_yes: true, yes: 1, no: 2 },
            Node::Leaf { value: yes },
            Node::Leaf { value: no },
        ],
    };
    let mut trees = vec![tree(0, threshold, -4.0, 4.0)];
    trees.extend((1..VELOCITY_FEATURES.len() as u32).map(|f| tree(f, 0.5, 0.0, 0.0)));
    let features = VELOCITY_FEATURES.iter().map(|n| FeatureDef { name: (*n).into(), kind: FeatureKind::Numeric }).collect();
    ModelIr::binary_logistic(name, features, trees)
}
