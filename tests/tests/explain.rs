//! Path attribution (`TreeEnsemble::explain`) and the NODE_VALUES section it reads: on every
//! model kind the compiler reads (every fixture in `tests/models/`), each row's credits add up
//! to its margins; models without covers keep the format they had; the validator refuses a
//! damaged section.

use edgescore_compile::readers::Format;
use edgescore_core::artifact::layout::{flags, SectionKind};
use edgescore_core::Model;
use edgescore_tests::artifact_edit::{resealed, section};
use edgescore_tests::ir_build::{format_version, leaf, regression, split};
use edgescore_compile::ir::{Test, Tree};

/// Every fixture model file the compiler accepts, with its rows.
fn every_fixture() -> Vec<(String, Model, Vec<Vec<f32>>)> {
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(edgescore_tests::models_dir()).unwrap().flatten().map(|e| e.path()).collect();
    dirs.sort();
    for dir in dirs {
        let rows = dir.join("rows.csv");
        for file in ["model.json", "model.txt", "model.onnx", "model.ubj", "same_model.cbm", "model.json.gz", "model.txt.gz"] {
            let path = dir.join(file);
            if !path.exists() || !rows.exists() {
                continue;
            }
            // Fixtures of models the compiler refuses on purpose.
            let Ok(ir) = edgescore_compile::load_model(&path, Format::Auto) else { continue };
            let name = format!("{}/{file}", dir.file_name().unwrap().to_string_lossy());
            let model = Model::load(&edgescore_compile::compile(&ir).unwrap()).unwrap_or_else(|e| panic!("{name}: {e}")).with_explainer();
            let rows = edgescore_compile::rows::read_rows(&rows, model.ensemble()).unwrap_or_else(|e| panic!("{name}: {e}"));
            out.push((name, model, rows));
        }
    }
    out
}

#[test]
fn credits_add_up_to_the_margin_on_every_fixture() {
    let fixtures = every_fixture();
    assert!(fixtures.len() >= 60, "found only {} fixture models", fixtures.len());
    let mut kinds = std::collections::BTreeSet::new();
    for (name, model, rows) in &fixtures {
        let e = model.ensemble();
        assert!(e.explainer().is_some(), "{name}: compiled without node values");
        kinds.insert(format!("{:?}", e.source()));
        let (nf, n_out) = (e.n_features(), e.n_outputs());
        let mut credits = vec![0f64; e.explain_len()];
        let mut margins = vec![0f64; n_out];
        for (r, row) in rows.iter().enumerate() {
            e.explain(row, &mut credits).unwrap();
            e.margins(row, &mut margins).unwrap();
            for o in 0..n_out {
                let own = &credits[o * (nf + 1)..(o + 1) * (nf + 1)];
                let sum: f64 = own.iter().sum();
                if !margins[o].is_finite() {
                    // An infinite input times a linear leaf's coefficient: so are its credits.
                    assert!(!sum.is_finite(), "{name} row {r} output {o}: credits {sum}, margin {}", margins[o]);
                    continue;
                }
                let scale: f64 = own.iter().map(|c| c.abs()).sum::<f64>().max(1.0);
                assert!(
                    (sum - margins[o]).abs() <= 1e-9 * scale,
                    "{name} row {r} output {o}: credits add up to {sum}, the margin is {}",
                    margins[o]
                );
            }
        }
    }
    assert_eq!(kinds.len(), 4, "model kinds covered: {kinds:?}");
}

/// Credits go to the features on the row's path only: a feature no tree splits on gets none.
#[test]
fn a_feature_no_tree_splits_on_gets_no_credit() {
    let tree = |t: f64| Tree { output: 0, nodes: vec![split(0, Test::Lt(t), true, 1, 2), split(2, Test::Lt(1.0), false, 3, 4), leaf(1.0), leaf(-1.0), leaf(3.0)] };
    let mut ir = regression(vec![tree(0.5), tree(-0.5)], 3, 1);
    ir.covers = Some(edgescore_compile::ir::Covers { kind: edgescore_compile::ir::CoverKind::Rows, per_tree: vec![vec![10.0, 4.0, 6.0, 1.0, 3.0]; 2] });
    let model = Model::load(&edgescore_compile::compile(&ir).unwrap()).unwrap().with_explainer();
    let e = model.ensemble();
    // Root: (6 * 1 + 1 * -1 + 3 * 3) / 10 = 1.4 per tree; node 1: (1 * -1 + 3 * 3) / 4 = 2.
    assert_eq!(e.explainer().unwrap().expected(), &[0.25 + 2.0 * 1.4]);
    let mut credits = vec![0f64; 4];
    // In both trees x0 = -1 goes yes (node 1), x2 = 2 no (leaf 4, 3.0).
    e.explain(&[-1.0, 7.0, 2.0], &mut credits).unwrap();
    let want = [2.0 * (2.0 - 1.4), 0.0, 2.0 * (3.0 - 2.0), 0.25 + 2.8];
    for (got, want) in credits.iter().zip(want) {
        assert!((got - want).abs() < 1e-12, "{credits:?}, want {want:?}");
    }
}

#[test]
fn a_tree_no_training_weight_reached_weighs_its_leaves_equally() {
    // A tree whose covers are all 0 (a constant LightGBM tree's leaf_count) still compiles to a
    // model that loads: its expected value is the plain mean of its leaves.
    let tree = |v: f64| Tree { output: 0, nodes: vec![split(0, Test::Lt(0.5), true, 1, 2), leaf(v), leaf(-v)] };
    let mut ir = regression(vec![tree(1.0), tree(4.0)], 1, 1);
    ir.covers = Some(edgescore_compile::ir::Covers { kind: edgescore_compile::ir::CoverKind::Rows, per_tree: vec![vec![4.0, 3.0, 1.0], vec![0.0; 3]] });
    let model = Model::load(&edgescore_compile::compile(&ir).unwrap()).unwrap().with_explainer();
    let e = model.ensemble();
    // The first tree: (3 * 1 + 1 * -1) / 4 = 0.5; the second: (4 - 4) / 2 = 0.
    assert_eq!(e.explainer().unwrap().expected(), &[0.25 + 0.5]);
}

#[test]
fn a_model_without_covers_keeps_its_format_and_size() {
    let tree = Tree { output: 0, nodes: vec![split(0, Test::Lt(0.5), true, 1, 2), leaf(1.0), leaf(-1.0)] };
    let mut ir = regression(vec![tree], 2, 1);
    let plain = edgescore_compile::compile(&ir).unwrap();
    assert_eq!(format_version(&plain), 1);
    let loaded = Model::load(&plain).unwrap().with_explainer();
    assert!(loaded.ensemble().explainer().is_none() && loaded.ensemble().leaf_covers().is_none());
    let mut credits = vec![0f64; 3];
    assert!(loaded.ensemble().explain(&[0.0, 0.0], &mut credits).is_err());
    ir.covers = Some(edgescore_compile::ir::Covers::equal(&ir.trees));
    let with = edgescore_compile::compile(&ir).unwrap();
    assert_eq!(format_version(&with), 6);
    // Loaded, a model has its node values; the tables explaining needs only on request.
    let loaded = Model::load(&with).unwrap();
    assert!(loaded.ensemble().leaf_covers().is_some() && loaded.ensemble().explainer().is_none());
    assert!(loaded.with_explainer().ensemble().explainer().is_some());
    // For filters that read format 5 at most, the section is left out: the same bytes.
    assert_eq!(edgescore_compile::compile_for(&ir, 5).unwrap(), plain);
}

#[test]
fn the_validator_refuses_a_damaged_node_values_section() {
    let path = edgescore_tests::models_dir().join("xgb_binary/model.json");
    let good = edgescore_compile::compile(&edgescore_compile::load_model(&path, Format::Auto).unwrap()).unwrap();
    let (at, len) = section(&good, SectionKind::NodeValues);
    assert!(len > 8, "xgb_binary has node values");
    let refuse = |bytes: Vec<u8>, want: &str| {
        let err = Model::load(&resealed(bytes)).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(want), "want {want:?}, got {err:?}");
    };
    let mut negative = good.clone();
    negative[at + 8..at + 12].copy_from_slice(&(-1.0f32).to_le_bytes());
    refuse(negative, "leaf cover (or negative) 0");
    let mut kind = good.clone();
    kind[at..at + 4].copy_from_slice(&9u32.to_le_bytes());
    refuse(kind, "unknown cover kind");
    let mut zero = good.clone();
    zero[at + 8..at + len].fill(0);
    refuse(zero, "covers sum to 0");
    // The flag cleared: the section must be empty.
    let mut unflagged = good.clone();
    let header_flags = u32::from_le_bytes(unflagged[12..16].try_into().unwrap());
    unflagged[12..16].copy_from_slice(&(header_flags & !flags::HAS_NODE_VALUES).to_le_bytes());
    refuse(unflagged, "section not empty without HAS_NODE_VALUES");
}

/// The scorer's reasons: a blocked request gets them (filter state and the feature log line),
/// an allowed one not sampled (`explain.sample` 0) gets none; a sampled allowed one does.
mod scorer {
    use edgescore_compile::ir::{CoverKind, Covers};
    use edgescore_core::decision::{Edit, STATE_REASONS};
    use edgescore_core::{HeaderMap, PluginConfig, Request, Scorer};
    use edgescore_tests::filter_models::{artifact, base64, step_model};

    /// `bot` blocks requests with fewer than 4 headers (see `step_model`), with node values.
    fn config(extra: &str) -> String {
        let mut ir = step_model("bot", "header_count", 4.0, 4.0);
        // Step tree: 30 rows with few headers, 70 with more; the categorical tree adds 0.
        ir.covers = Some(Covers { kind: CoverKind::Rows, per_tree: vec![vec![100.0, 30.0, 70.0], vec![100.0, 50.0, 50.0]] });
        let bot = base64(&artifact(&ir));
        format!(r#"{{"hash_key":"test-key-0123456789","filter_state":true,"models":[{{"artifact":"{bot}","threshold":0.9,"action":"block"}}]{extra}}}"#)
    }

    fn reasons_of(scorer: &mut Scorer, headers: &[(&str, &str)]) -> (Option<String>, String) {
        let buf = HeaderMap::encode(headers);
        let req = Request::new(HeaderMap::parse(&buf).unwrap());
        let outcome = scorer.decide(&req, true).unwrap();
        let state = outcome.edits.iter().find_map(|e| match e {
            Edit::SetState(k, v) if k == STATE_REASONS => Some(String::from_utf8_lossy(v).into_owned()),
            _ => None,
        });
        (state, String::from_utf8_lossy(scorer.feature_log()).into_owned())
    }

    const FEW: &[(&str, &str)] = &[(":method", "GET"), (":path", "/"), (":authority", "a")];
    const MANY: &[(&str, &str)] = &[(":method", "GET"), (":path", "/"), (":authority", "a"), ("user-agent", "x"), ("accept", "*/*"), ("accept-language", "en"), ("accept-encoding", "gzip"), ("cookie", "a=b")];

    #[test]
    fn a_blocked_request_carries_its_reasons_and_an_allowed_one_none() {
        let mut scorer = Scorer::new(&PluginConfig::parse(config(r#","feature_log":{"sample_rate":1}"#).as_bytes()).unwrap(), 1).unwrap();
        let (state, line) = reasons_of(&mut scorer, FEW);
        // Expected margin 0.3 * 4 + 0.7 * -4 = -1.6; this request's leaf is +4: +5.6.
        assert_eq!(state.as_deref(), Some("bot:header_count=+5.600"));
        let log: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(log["reasons"], serde_json::json!({"bot": {"header_count": 5.6}}), "{line}");
        assert!(line.contains(r#""reasons":{"bot":{"header_count":5.600000}}"#), "{line}");
        let (state, line) = reasons_of(&mut scorer, MANY);
        assert_eq!(state, None);
        assert!(!line.contains("reasons"), "{line}");
        assert_eq!(scorer.reasons(), b"");
    }

    #[test]
    fn sampled_requests_get_reasons_and_top_k_0_turns_them_off() {
        let mut sampled = Scorer::new(&PluginConfig::parse(config(r#","explain":{"sample":1,"top_k":2}"#).as_bytes()).unwrap(), 1).unwrap();
        assert_eq!(reasons_of(&mut sampled, MANY).0.as_deref(), Some("bot:header_count=-2.400"));
        let mut off = Scorer::new(&PluginConfig::parse(config(r#","explain":{"top_k":0}"#).as_bytes()).unwrap(), 1).unwrap();
        assert_eq!(reasons_of(&mut off, FEW).0, None);
    }
}
