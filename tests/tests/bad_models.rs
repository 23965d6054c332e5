//! The bad-model corpus: every way an artifact can be broken is refused with its own message,
//! and nothing panics. Mutations that keep the checksum valid (re-sealed) reach the deeper
//! checks, which is what a malicious or buggy compiler would produce.

use edgescore_core::artifact::layout::*;
use edgescore_compile::write::write;
use edgescore_core::artifact::checksum;
use edgescore_compile::ir::{self, Aggregate, FeatureDef, FeatureKind, Link, ModelIr, SourceFormat, Task, Test, Tree};
use edgescore_core::{ArtifactError, Model};

/// A small model that uses every section: numeric, categorical and EQ splits.
fn sample_model() -> Vec<u8> {
    let split = |feature, test, yes, no| ir::Node::Split { feature, test, missing_yes: true, yes, no };
    let leaf = |value| ir::Node::Leaf { value };
    let tree = Tree {
        output: 0,
        nodes: vec![
            split(0, Test::Lt(0.5), 1, 2),
            split(1, Test::InSet { categories: vec![1, 3, 40], invalid_at_or_below: -1.0 }, 3, 4),
            split(2, Test::Eq(2.0), 5, 6),
            leaf(1.0),
            leaf(2.0),
            leaf(3.0),
            leaf(4.0),
        ],
    };
    let features = vec![
        FeatureDef { name: "a".into(), kind: FeatureKind::Numeric },
        FeatureDef { name: "b".into(), kind: FeatureKind::Categorical { buckets: 64 } },
        FeatureDef { name: "c".into(), kind: FeatureKind::Numeric },
    ];
    let ir = ModelIr::binary_logistic("sample", features, vec![tree.clone(), tree]);
    write(&ir).expect("sample model writes")
}

fn section(bytes: &[u8], kind: SectionKind) -> (usize, usize) {
    let at = HEADER_LEN + (kind as usize - 1) * std::mem::size_of::<SectionEntry>();
    let e: SectionEntry = bytemuck::pod_read_unaligned(&bytes[at..at + std::mem::size_of::<SectionEntry>()]);
    (e.offset as usize, e.len as usize)
}

fn reseal(bytes: &mut [u8]) {
    let sum = checksum(bytes);
    bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 8].copy_from_slice(&sum.to_le_bytes());
}

/// Applies `f` to node `i` and re-seals the checksum.
fn with_node(i: usize, f: impl Fn(&mut Node)) -> Vec<u8> {
    let mut b = sample_model();
    let (off, _) = section(&b, SectionKind::Nodes);
    let at = off + i * std::mem::size_of::<Node>();
    let mut n: Node = bytemuck::pod_read_unaligned(&b[at..at + 12]);
    f(&mut n);
    b[at..at + 12].copy_from_slice(bytemuck::bytes_of(&n));
    reseal(&mut b);
    b
}

fn refuse(bytes: &[u8]) -> ArtifactError {
    match Model::load(bytes) {
        Ok(_) => panic!("a broken artifact was accepted"),
        Err(e) => e,
    }
}

#[test]
fn sample_is_valid_and_scores() {
    let m = Model::load(&sample_model()).unwrap();
    let mut out = [0f32; 1];
    m.ensemble().score(&[0.0, 3.0, 9.0], &mut out).unwrap();
    // Both trees: a < 0.5 → node 1 → category 3 in set → leaf 1.0 each; sigmoid(2).
    assert!((out[0] - 1.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-6);
}

#[test]
fn every_truncation_is_refused() {
    let b = sample_model();
    for len in 0..b.len() {
        let e = refuse(&b[..len]);
        let text = e.to_string();
        assert!(text.contains("shorter than") || text.contains("truncated"), "len {len}: {text}");
    }
}

#[test]
fn every_single_bit_flip_is_refused() {
    let b = sample_model();
    for bit in 0..b.len() * 8 {
        let mut m = b.clone();
        m[bit / 8] ^= 1 << (bit % 8);
        let e = refuse(&m);
        let text = e.to_string();
        assert!(
            text.contains("checksum") || text.contains("magic") || text.contains("version") || text.contains("truncated"),
            "bit {bit}: {text}"
        );
    }
}

#[test]
fn wrong_magic() {
    let mut b = sample_model();
    b[0] = b'X';
    assert_eq!(refuse(&b), ArtifactError::BadMagic);
}

#[test]
fn wrong_version() {
    let mut b = sample_model();
    b[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    reseal(&mut b);
    assert_eq!(refuse(&b), ArtifactError::UnsupportedVersion { found: FORMAT_VERSION + 1, supported: FORMAT_VERSION });
    // A format-1 file relabelled as format 2 lacks the two newer sections.
    let mut b = sample_model();
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    reseal(&mut b);
    assert_eq!(refuse(&b), ArtifactError::SectionTable("wrong number of sections"));
}

#[test]
fn padded_file() {
    let mut b = sample_model();
    b.extend_from_slice(&[0; 16]);
    assert!(matches!(refuse(&b), ArtifactError::LengthMismatch { .. }));
}

#[test]
fn feature_index_out_of_range() {
    let b = with_node(0, |n| n.feature = 3);
    assert_eq!(refuse(&b), ArtifactError::Node { tree: 0, node: 0, reason: "feature index out of range" });
}

#[test]
fn child_out_of_range() {
    let b = with_node(0, |n| n.left = 100);
    assert_eq!(refuse(&b), ArtifactError::Node { tree: 0, node: 0, reason: "child index out of range" });
}

#[test]
fn cyclic_children() {
    for left in [0u32, 1] {
        let b = with_node(1, |n| n.left = left);
        assert_eq!(refuse(&b), ArtifactError::Node { tree: 0, node: 1, reason: "child index not greater than the node's (cycle)" });
    }
}

#[test]
fn nan_threshold() {
    let b = with_node(0, |n| n.payload = f32::NAN.to_bits());
    assert_eq!(refuse(&b), ArtifactError::Node { tree: 0, node: 0, reason: "NaN threshold" });
}

#[test]
fn leaf_count_mismatch() {
    // Tree 0's first leaf is node 3; point it at the second leaf's value.
    let b = with_node(3, |n| n.payload = node::LEAF_NAN | 1);
    assert_eq!(refuse(&b), ArtifactError::Node { tree: 0, node: 3, reason: "leaf index out of sequence (leaf count mismatch)" });
}

#[test]
fn leaf_that_moves() {
    let b = with_node(3, |n| n.left = 3);
    assert_eq!(refuse(&b), ArtifactError::Node { tree: 0, node: 3, reason: "leaf does not point to itself" });
}

#[test]
fn categorical_bitset_out_of_bounds() {
    let mut b = sample_model();
    let (off, _) = section(&b, SectionKind::CatSplits);
    // word_offset of the first split far past CAT_WORDS.
    b[off..off + 4].copy_from_slice(&1000u32.to_le_bytes());
    reseal(&mut b);
    assert_eq!(refuse(&b), ArtifactError::CatSplit { split: 0, reason: "bitset extends past CAT_WORDS" });
}

#[test]
fn categorical_split_index_out_of_range() {
    let b = with_node(1, |n| n.payload = 99);
    assert_eq!(refuse(&b), ArtifactError::Node { tree: 0, node: 1, reason: "categorical split index out of range" });
}

#[test]
fn flags_that_hide_a_test() {
    let mut b = sample_model();
    b[12..16].copy_from_slice(&flags::HAS_CATEGORICAL.to_le_bytes());
    reseal(&mut b);
    assert!(matches!(refuse(&b), ArtifactError::FlagsMismatch { .. }));
}

#[test]
fn wrong_depth() {
    let mut b = sample_model();
    let (off, _) = section(&b, SectionKind::Trees);
    b[off + 12..off + 16].copy_from_slice(&1u32.to_le_bytes());
    reseal(&mut b);
    assert_eq!(refuse(&b), ArtifactError::Tree { tree: 0, reason: "declared depth does not match the tree" });
}

#[test]
fn non_finite_leaf() {
    let mut b = sample_model();
    let (off, _) = section(&b, SectionKind::Leaves);
    b[off..off + 8].copy_from_slice(&f64::INFINITY.to_le_bytes());
    reseal(&mut b);
    assert_eq!(refuse(&b), ArtifactError::NotFinite { what: "leaf value", index: 0 });
}

#[test]
fn random_garbage_never_panics() {
    // Deterministic xorshift; garbage with a valid header and checksum reaches every check.
    let mut s = 0x9e3779b97f4a7c15u64;
    let base = sample_model();
    for _ in 0..20_000 {
        let mut b = base.clone();
        for _ in 0..4 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let at = 64 + (s as usize % (b.len() - 64));
            b[at] = (s >> 32) as u8;
        }
        reseal(&mut b);
        if let Ok(m) = Model::load(&b) {
            let mut out = [0f32; 1];
            let _ = m.ensemble().score(&[f32::NAN, 1e30, -3.0], &mut out);
        }
    }
}

#[test]
fn writer_refuses_a_split_on_an_undeclared_feature() {
    // Found by the `ir_roundtrip` fuzz target: a reader bug must not produce an artifact that
    // every loader then refuses.
    let tree = Tree {
        output: 0,
        nodes: vec![
            ir::Node::Split { feature: 1, test: Test::Gt(-7.0), missing_yes: false, yes: 1, no: 2 },
            ir::Node::Leaf { value: 1.0 },
            ir::Node::Leaf { value: 2.0 },
        ],
    };
    let model = ModelIr {
        name: "m".into(),
        version: "0".into(),
        source: SourceFormat::Onnx,
        objective: "x".into(),
        task: Task::Regression,
        link: Link::Identity,
        aggregate: Aggregate::Sum,
        base_score: vec![0.0],
        features: vec![FeatureDef { name: "only".into(), kind: FeatureKind::Numeric }],
        ctrs: Vec::new(),
        trees: vec![tree],
    };
    let err = write(&model).expect_err("refused").to_string();
    assert!(err.contains("splits on feature 1 of 1"), "{err}");
}
