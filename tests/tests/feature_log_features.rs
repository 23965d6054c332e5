//! `feature_log.features`: catalogue features the log carries beside the models' own. They are
//! computed for every request (a velocity count must see every request to be right), logged
//! for the sampled ones, and refused by name, shape and section like a model's features.

use edgescore_core::request::{HeaderMap, Request};
use edgescore_core::velocity::Clients;
use edgescore_core::{PluginConfig, Scorer};
use edgescore_tests::filter_models::{artifact, base64, step_model};

/// A model reading only `path_length`, and `extra` inside the plugin JSON.
fn config(features: &str, extra: &str) -> PluginConfig {
    let model = base64(&artifact(&step_model("len", "path_length", 10.0, 1.0)));
    let json = format!(
        r#"{{"hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1,"features":{features}}},"models":[{{"artifact":"{model}","threshold":0.5,"action":"tag"}}]{extra}}}"#
    );
    PluginConfig::parse(json.as_bytes()).unwrap()
}

fn logged(scorer: &mut Scorer, req: &Request<'_>) -> serde_json::Value {
    scorer.decide(req, true).unwrap();
    let line: serde_json::Value = serde_json::from_slice(scorer.feature_log()).expect("every request is logged");
    line["features"].clone()
}

#[test]
fn listed_features_are_logged_beside_the_models_own() {
    let cfg = config(r#"[{"name":"client_requests_10s"},{"name":"method","buckets":16},{"name":"path_length"}]"#, r#","velocity":{"key":"header:x-client"}"#);
    let mut scorer = Scorer::new(&cfg, 7).unwrap();
    let names: Vec<&str> = scorer.slots().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["path_length", "ua_family", "client_requests_10s", "method"], "the model's slot first; a listed feature it reads is not added twice");
    let mut clients = Clients::carry(None, &cfg).unwrap();
    for i in 1..=3 {
        let buf = HeaderMap::encode(&[(":method", "POST"), (":path", "/login"), ("x-client", "c1")]);
        let mut req = Request::new(HeaderMap::parse(&buf).unwrap());
        req.velocity = clients.request(&req, 100).map(|(_, v)| v);
        let f = logged(&mut scorer, &req);
        assert_eq!(f["client_requests_10s"].as_f64(), Some(i as f64), "request {i}: {f}");
        assert_eq!(f["path_length"].as_f64(), Some(6.0));
        assert!(f["method"].as_f64().is_some_and(|b| (0.0..16.0).contains(&b)), "{f}");
    }
}

#[test]
fn a_listed_feature_is_refused_like_a_models() {
    let refused = |features: &str, extra: &str| Scorer::new(&config(features, extra), 1).err().expect("refused").to_string();
    assert_eq!(refused(r#"[{"name":"tls_ja5"}]"#, ""), "feature_log.features[0]: feature `tls_ja5` is not in the filter's feature catalogue");
    assert!(refused(r#"[{"name":"path_length"},{"name":"tls_ja4"}]"#, "").starts_with("feature_log.features[1]: "), "a categorical feature needs buckets");
    assert!(refused(r#"[{"name":"path_length","buckets":8}]"#, "").starts_with("feature_log.features[0]: "), "a numeric one has none");
    assert!(refused(r#"[{"name":"tls_ua_consistent"}]"#, "").contains("a model's UA fingerprint table"), "its answer is a model's table's");
    assert_eq!(
        refused(r#"[{"name":"client_paths_60s"}]"#, ""),
        "velocity: required: a model or the feature log reads `client_paths_60s`, a client's count"
    );
    assert!(PluginConfig::parse(br#"{"hash_key":"test-key-0123456789","feature_log":{"features":[{"name":"x","bucket":3}]},"models":[]}"#).is_err(), "fields are checked by name");
}
