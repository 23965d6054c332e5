//! Building small models by hand in the compiler's IR, and checking an artifact written from one
//! against the IR's own reference reading, for the tests of one writer rule at a time.

use edgescore_compile::ir::{Aggregate, FeatureDef, FeatureKind, Link, ModelIr, Node, SourceFormat, Task, Test, Tree};
use edgescore_core::artifact::layout::{Header, HEADER_LEN};
use edgescore_core::Model;

/// `n` numeric features named `f0`, `f1`, ….
pub fn numeric(n: usize) -> Vec<FeatureDef> {
    (0..n).map(|i| FeatureDef { name: format!("f{i}"), kind: FeatureKind::Numeric }).collect()
}

/// A classifier of `trees` (each adding to its `output`): binary logistic for one output,
/// softmax over `n_outputs` classes otherwise.
pub fn classifier(name: &str, features: Vec<FeatureDef>, trees: Vec<Tree>, n_outputs: u32) -> ModelIr {
    let mut m = ModelIr::binary_logistic(name, features, trees);
    if n_outputs > 1 {
        m.base_score = vec![0.0; n_outputs as usize];
        m.link = Link::Softmax;
        m.task = Task::MulticlassClassification;
        m.objective = "multi:softprob".into();
    }
    m
}

/// A regression of `trees` over `n_features` numeric features, summed with a base score of 0.25
/// per output and no link: its margins are the trees' leaf sums + 0.25.
pub fn regression(trees: Vec<Tree>, n_features: usize, n_outputs: usize) -> ModelIr {
    ModelIr {
        ua_fingerprints: Vec::new(),
        name: "random".into(),
        version: "0".into(),
        source: SourceFormat::Onnx,
        objective: "test".into(),
        task: Task::Regression,
        link: Link::Identity,
        aggregate: Aggregate::Sum,
        base_score: vec![0.25; n_outputs],
        features: numeric(n_features),
        ctrs: Vec::new(),
        trees,
        covers: None,
    }
}

pub fn split(feature: u32, test: Test, missing_yes: bool, yes: u32, no: u32) -> Node {
    Node::Split { feature, test, missing_yes, yes, no }
}

pub fn leaf(value: f64) -> Node {
    Node::Leaf { value }
}

/// The artifact's format version, from its header.
pub fn format_version(bytes: &[u8]) -> u32 {
    bytemuck::pod_read_unaligned::<Header>(&bytes[..HEADER_LEN]).format_version
}

/// The artifact scores every row exactly as the IR's reference reading does. Exact equality
/// holds when leaf values are powers of two: every order of summing them is exact.
pub fn assert_matches_reference(m: &ModelIr, bytes: &[u8], rows: &[Vec<f32>]) {
    let model = Model::load(bytes).unwrap();
    let e = model.ensemble();
    let mut out = vec![0f64; e.n_outputs()];
    for row in rows {
        e.margins(row, &mut out).unwrap();
        assert_eq!(out, m.margins(row), "row {row:?}");
    }
}

/// `m`, written at the format it needs, is format `format` and scores `rows` as the reference
/// reading does.
pub fn assert_written_as(m: &ModelIr, format: u32, rows: &[Vec<f32>]) {
    let bytes = edgescore_compile::write::write(m).unwrap();
    assert_eq!(format_version(&bytes), format);
    assert_matches_reference(m, &bytes, rows);
}
