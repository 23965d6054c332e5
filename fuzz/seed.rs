//! Writes a few small valid artifacts to `fuzz/seeds/` (run from `fuzz/`: `cargo run --bin seed`;
//! `cargo run --bin seed -- --check` only checks that every seed still loads):
//! one per node test kind, a multiclass softmax model, an averaged forest, a lone-leaf tree.
//! The larger seeds there come from the CLI (`edgescore compile tests/models/... -o ...`).
//! Then the `registry` target's signed seeds in `fuzz/seeds-registry/` ([`registry_seeds`]).

use edgescore_compile::write::write;
use edgescore_compile::ir::*;
use edgescore_core::registry::{
    cosign_envelope, default_golden_inputs, format_utc, golden_rows, hash_key_id, parse_utc, sign_envelope, Manifest, ManifestModel, ModelMode,
    MANIFEST_FORMAT,
};
use std::path::Path;

fn split(feature: u32, test: Test, missing_yes: bool, yes: u32, no: u32) -> Node {
    Node::Split { feature, test, missing_yes, yes, no }
}
fn leaf(value: f64) -> Node {
    Node::Leaf { value }
}

fn model(name: &str, n_features: usize, n_outputs: usize, link: Link, aggregate: Aggregate, trees: Vec<Tree>) -> ModelIr {
    ModelIr {
        ua_fingerprints: Vec::new(),
        name: name.into(),
        version: "1".into(),
        source: SourceFormat::Onnx,
        objective: "seed".into(),
        task: if n_outputs > 1 { Task::MulticlassClassification } else { Task::Regression },
        link,
        aggregate,
        base_score: (0..n_outputs).map(|o| 0.125 * o as f64).collect(),
        features: (0..n_features)
            .map(|i| FeatureDef {
                name: format!("f{i}"),
                kind: if i == 1 { FeatureKind::Categorical { buckets: 64 } } else { FeatureKind::Numeric },
            })
            .collect(),
        ctrs: Vec::new(),
        trees,
        covers: None,
    }
}

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    if std::env::args().any(|a| a == "--check") {
        // Every seed must still load (run after a layout change).
        let mut bad = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            match edgescore_core::Model::load(&bytes) {
                Ok(m) => println!("ok   {} ({} trees)", path.display(), m.ensemble().trees().len()),
                Err(e) => {
                    println!("FAIL {}: {e}", path.display());
                    bad += 1;
                }
            }
        }
        std::process::exit(if bad == 0 { 0 } else { 1 });
    }
    std::fs::create_dir_all(&dir).unwrap();
    let lt = Tree { output: 0, nodes: vec![split(0, Test::Lt(0.5), true, 1, 2), leaf(-1.0), split(2, Test::Le(2.0), false, 3, 4), leaf(0.25), leaf(3.0)] };
    let cat = Tree {
        output: 0,
        nodes: vec![split(1, Test::InSet { categories: vec![1, 3, 33], invalid_at_or_below: -1.0 }, false, 1, 2), leaf(1.5), leaf(-0.5)],
    };
    let rare = Tree {
        output: 0,
        nodes: vec![
            split(0, Test::Eq(1.0), false, 1, 2),
            leaf(1.0),
            split(2, Test::LeZeroAsMissing(0.0), true, 3, 4),
            split(0, Test::Ne(-2.0), true, 5, 6),
            leaf(2.0),
            leaf(3.0),
            leaf(4.0),
        ],
    };
    let gt = Tree { output: 0, nodes: vec![split(0, Test::Gt(1.0), true, 1, 2), leaf(0.75), split(2, Test::Ge(-3.5), false, 3, 4), leaf(-2.0), leaf(5.0)] };
    let lone = Tree { output: 0, nodes: vec![leaf(0.5)] };
    let out = |t: &Tree, o: u32| Tree { output: o, ..t.clone() };
    let seeds = [
        ("small_lt", model("lt", 3, 1, Link::Sigmoid { scale: 1.0 }, Aggregate::Sum, vec![lt.clone(), gt.clone()])),
        ("small_cat", model("cat", 3, 1, Link::Identity, Aggregate::Sum, vec![cat.clone(), lt.clone()])),
        ("small_rare", model("rare", 3, 1, Link::Exp, Aggregate::Sum, vec![rare.clone(), lone.clone()])),
        ("small_all", model("all", 3, 1, Link::Sigmoid { scale: 2.0 }, Aggregate::Sum, vec![lt.clone(), cat.clone(), rare.clone(), gt.clone(), lone.clone()])),
        (
            "small_softmax",
            model("softmax", 3, 3, Link::Softmax, Aggregate::Sum, (0..10).map(|i| out([&lt, &cat, &rare, &gt, &lone][i % 5], (i % 3) as u32)).collect()),
        ),
        ("small_forest", model("forest", 3, 2, Link::Identity, Aggregate::Average { divisor: 2.0 }, vec![out(&lt, 0), out(&gt, 0), out(&cat, 1), out(&rare, 1)])),
        ("small_empty", model("empty", 1, 1, Link::Identity, Aggregate::Sum, vec![])),
    ];
    let mut written = Vec::new();
    for (name, ir) in seeds {
        let bytes = write(&ir).unwrap_or_else(|e| panic!("{name}: {e}"));
        edgescore_core::Model::load(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        std::fs::write(dir.join(format!("{name}.esm")), &bytes).unwrap();
        println!("{name}.esm: {} bytes", bytes.len());
        written.push(bytes);
    }
    registry_seeds(&dir.with_file_name("seeds-registry"), &written[0], &written[1]);
}

/// A manifest entry for `bytes` as `publish` writes it (hash key `0123456789abcdef`).
fn entry(bytes: &[u8], mode: ModelMode, version: u64) -> ManifestModel {
    let model = edgescore_core::Model::load(bytes).unwrap();
    let e = model.ensemble();
    ManifestModel::of_artifact(bytes, &e, version, mode, Some(hash_key_id(b"0123456789abcdef")), golden_rows(&e, &default_golden_inputs(&e)))
}

/// The `registry` target's seeds besides the demo registry's: a manifest of two artifacts with
/// a week's validity, as a payload, without `expires`, and as an envelope signed by the target's
/// key and co-signed by its second key (the seeds [7; 32] and [9; 32] of
/// `fuzz_targets/registry.rs`), so that mutations start past the signature checks.
fn registry_seeds(dir: &Path, active: &[u8], shadow: &[u8]) {
    let published = parse_utc("2026-11-25T03:00:00Z").unwrap();
    let m = Manifest {
        format: MANIFEST_FORMAT,
        sequence: 12,
        published_at: format_utc(published),
        expires: Some(format_utc(published + 7 * 86_400)),
        models: vec![entry(active, ModelMode::Active, 7), entry(shadow, ModelMode::Shadow, 8)],
    };
    let signed = sign_envelope(&m.to_json(), &ed25519_dalek::SigningKey::from_bytes(&[7; 32]));
    let cosigned = cosign_envelope(&signed, &ed25519_dalek::SigningKey::from_bytes(&[9; 32])).unwrap();
    let unexpiring = Manifest { expires: None, ..m.clone() };
    std::fs::create_dir_all(dir).unwrap();
    for (name, bytes) in [("cosigned_envelope.json", cosigned), ("expiring_payload.json", m.to_json()), ("unexpiring_payload.json", unexpiring.to_json())] {
        std::fs::write(dir.join(name), &bytes).unwrap();
        println!("{}: {} bytes", dir.join(name).display(), bytes.len());
    }
}
