//! Golden feature vectors: for recorded requests, the feature-log line the `.wasm` writes in
//! the wasmtime host equals the native core's, byte for byte (features, buckets and scores).

use edgescore_core::{HeaderMap, PluginConfig, Request, Scorer};
use edgescore_tests::filter_models::{artifact, base64};
use edgescore_proxy_host::{cargo::filter_wasm, Host};
use edgescore_compile::ir::{Aggregate, FeatureDef, FeatureKind, Link, ModelIr, Node, SourceFormat, Task, Test, Tree};
use serde::Deserialize;

#[derive(Deserialize)]
struct Recorded {
    headers: Vec<(String, String)>,
    #[serde(default)]
    properties: std::collections::BTreeMap<String, String>,
}

/// A model reading every feature of the example schema (one split each, so every value
/// matters to the score), plus `source_prefix` and a header value.
fn every_feature_model() -> ModelIr {
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(edgescore_proxy_host::cargo::repo_root().join("models/example/schema.json")).unwrap()).unwrap();
    let mut features: Vec<FeatureDef> = schema["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap().to_string();
            match f.get("buckets").and_then(|b| b.as_u64()) {
                Some(b) => FeatureDef { name, kind: FeatureKind::Categorical { buckets: b as u32 } },
                None => FeatureDef { name, kind: FeatureKind::Numeric },
            }
        })
        .collect();
    features.push(FeatureDef { name: "source_prefix".into(), kind: FeatureKind::Categorical { buckets: 4096 } });
    features.push(FeatureDef { name: "header_value:x-forwarded-for".into(), kind: FeatureKind::Categorical { buckets: 97 } });
    features.push(FeatureDef { name: "user_agent".into(), kind: FeatureKind::Categorical { buckets: 1 << 20 } });
    let trees = (0..features.len() as u32)
        .map(|f| Tree {
            output: 0,
            nodes: vec![
                Node::Split { feature: f, test: Test::Lt(3.5 + f as f64), missing_yes: f % 2 == 0, yes: 1, no: 2 },
                Node::Leaf { value: 0.1 * f as f64 - 0.7 },
                Node::Leaf { value: 0.05 * f as f64 },
            ],
        })
        .collect();
    ModelIr {
        ua_fingerprints: Vec::new(),
        name: "every".into(),
        version: "golden".into(),
        source: SourceFormat::XGBoost,
        objective: "binary:logistic".into(),
        task: Task::BinaryClassification,
        link: Link::Sigmoid { scale: 1.0 },
        aggregate: Aggregate::Sum,
        base_score: vec![-0.3],
        features,
        ctrs: Vec::new(),
        trees,
        covers: None,
    }
}

#[test]
fn wasm_features_equal_native_features() {
    let config = format!(
        r#"{{"hash_key":"golden-key-0123456789","feature_log":{{"sample_rate":1}},"models":[{{"artifact":"{}","threshold":2}}]}}"#,
        base64(&artifact(&every_feature_model()))
    );
    let mut native = Scorer::new(&PluginConfig::parse(config.as_bytes()).unwrap(), 1).unwrap();
    let host = Host::new(filter_wasm().unwrap()).unwrap();
    let mut vm = host.vm(b"").unwrap();
    assert!(vm.configure(config.as_bytes()).unwrap());
    let text = std::fs::read_to_string(edgescore_proxy_host::cargo::repo_root().join("tests/golden/requests.jsonl")).unwrap();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let rec: Recorded = serde_json::from_str(line).unwrap();
        let s = vm.stream();
        for (k, v) in &rec.properties {
            let path: Vec<&str> = k.split('.').collect();
            s.set_property(&path, v);
        }
        vm.request_headers(&s, rec.headers.clone(), true).unwrap();
        let from_wasm = s.filter_state("edgescore.features").expect("sampled at rate 1");

        let buf = HeaderMap::encode(&rec.headers);
        let prop = |k: &str| rec.properties.get(k).map(|v| v.as_bytes());
        let req = Request {
            headers: HeaderMap::parse(&buf).unwrap(),
            protocol: prop("request.protocol"),
            tls_version: prop("connection.tls_version"),
            sni: prop("connection.requested_server_name"),
            source_address: prop("source.address"),
            velocity: None,
            signature: None,
        };
        native.score(&req).unwrap();
        assert_eq!(String::from_utf8_lossy(&from_wasm), String::from_utf8_lossy(native.feature_log()), "request {i}");
        vm.done(&s).unwrap();
        n += 1;
    }
    assert!(n >= 60);
}
