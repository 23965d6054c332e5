//! The bad-model corpus: every way an artifact can be broken is refused with its own message,
//! and nothing panics. Mutations that keep the checksum valid (re-sealed) reach the deeper
//! checks, which is what a malicious or buggy compiler would produce.

use edgescore_core::artifact::layout::*;
use edgescore_compile::write::write;
use edgescore_core::artifact::checksum;
use edgescore_compile::ir::{self, Aggregate, FeatureDef, FeatureKind, Link, ModelIr, SourceFormat, Task, Test, Tree};
use edgescore_core::{ArtifactError, Model};
use edgescore_tests::random_ir::{test_seed, Rng};

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
fn categorical_bitset_longer_than_any_code() {
    let mut b = sample_model();
    let (off, _) = section(&b, SectionKind::CatSplits);
    // n_words of the first split: one word past codes below 2^31.
    b[off + 4..off + 8].copy_from_slice(&(MAX_SET_WORDS + 1).to_le_bytes());
    reseal(&mut b);
    assert_eq!(refuse(&b), ArtifactError::CatSplit { split: 0, reason: "bitset longer than MAX_SET_WORDS (codes of 2^31 and above)" });
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
    // Garbage with a valid header and checksum reaches every check; a panic names the seed
    // (EDGESCORE_TEST_SEED) and the round that reproduce it.
    let seed = test_seed(0x9e3779b97f4a7c15);
    let mut rng = Rng::new(seed);
    let base = sample_model();
    for round in 0..20_000 {
        let mut b = base.clone();
        for _ in 0..4 {
            let s = rng.next();
            let at = 64 + (s as usize % (b.len() - 64));
            b[at] = (s >> 32) as u8;
        }
        reseal(&mut b);
        let loaded = std::panic::catch_unwind(|| Model::load(&b).map(|m| {
            let mut out = [0f32; 1];
            let _ = m.ensemble().score(&[f32::NAN, 1e30, -3.0], &mut out);
        }));
        assert!(loaded.is_ok(), "seed {seed} round {round} panicked");
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
        ua_fingerprints: Vec::new(),
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
        covers: None,
    };
    let err = write(&model).expect_err("refused").to_string();
    assert!(err.contains("splits on feature 1 of 1"), "{err}");
}

/// A format-3 model: one node tree, then two oblivious trees (one with a categorical level).
fn oblivious_model() -> Vec<u8> {
    let leaf = |value| ir::Node::Leaf { value };
    let node_tree = Tree { output: 0, nodes: vec![ir::Node::Split { feature: 0, test: Test::Lt(0.5), missing_yes: true, yes: 1, no: 2 }, leaf(1.0), leaf(2.0)] };
    let level = |feature, test| ir::Level { feature, test, missing_yes: false };
    let oblivious = |levels: Vec<ir::Level>| {
        let leaves = (0..1 << levels.len()).map(|i| i as f64).collect();
        Tree { output: 0, nodes: vec![ir::Node::Oblivious { levels: levels.into(), leaves }] }
    };
    let features = vec![
        FeatureDef { name: "a".into(), kind: FeatureKind::Numeric },
        FeatureDef { name: "b".into(), kind: FeatureKind::Categorical { buckets: 64 } },
    ];
    let trees = vec![
        oblivious(vec![level(0, Test::Gt(1.5)), level(1, Test::InSet { categories: vec![2, 5], invalid_at_or_below: -1.0 })]),
        node_tree,
        oblivious(vec![level(1, Test::Gt(3.0))]),
    ];
    write(&ModelIr::binary_logistic("obl", features, trees)).expect("oblivious model writes")
}

/// Applies `f` to TREES entry `t` of the oblivious model and re-seals the checksum.
fn with_tree(t: usize, f: impl Fn(&mut TreeSpec)) -> Vec<u8> {
    let mut b = oblivious_model();
    let (off, _) = section(&b, SectionKind::Trees);
    let at = off + t * std::mem::size_of::<TreeSpec>();
    let mut spec: TreeSpec = bytemuck::pod_read_unaligned(&b[at..at + 16]);
    f(&mut spec);
    b[at..at + 16].copy_from_slice(bytemuck::bytes_of(&spec));
    reseal(&mut b);
    b
}

#[test]
fn oblivious_trees_score_and_come_last() {
    let b = oblivious_model();
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 3, "oblivious trees need format 3");
    let m = Model::load(&b).unwrap();
    let e = m.ensemble();
    let layouts: Vec<u16> = e.trees().iter().map(|t| t.layout).collect();
    assert_eq!(layouts, [tree_layout::NODES, tree_layout::OBLIVIOUS, tree_layout::OBLIVIOUS]);
    let mut out = [0f64];
    // a = 2 > 1.5 (bit 0), b = 5 in {2, 5} (bit 1) → leaf 3; node tree: 2 ≥ 0.5 → 2.0; b = 5 > 3 → 1.
    e.margins(&[2.0, 5.0], &mut out).unwrap();
    assert_eq!(out[0], 3.0 + 2.0 + 1.0);
    // NaN: every level's bit 0 (missing_yes false), the node tree's missing goes yes.
    e.margins(&[f32::NAN, f32::NAN], &mut out).unwrap();
    assert_eq!(out[0], 0.0 + 1.0 + 0.0);
}

#[test]
fn oblivious_layout_damage() {
    let tree_err = |reason| ArtifactError::Tree { tree: 2, reason };
    assert_eq!(refuse(&with_tree(2, |t| t.layout = 7)), tree_err("unknown tree layout"));
    assert_eq!(refuse(&with_tree(2, |t| t.layout = tree_layout::NODES)), tree_err("a node tree after an oblivious tree"));
    assert_eq!(refuse(&with_tree(0, |t| t.layout = tree_layout::OBLIVIOUS)), ArtifactError::Tree { tree: 0, reason: "oblivious tree's node range is not its levels and one leaf node" });
    assert_eq!(refuse(&with_tree(1, |t| t.depth = 1)), ArtifactError::Tree { tree: 1, reason: "oblivious tree's node range is not its levels and one leaf node" });
    assert_eq!(refuse(&with_tree(1, |t| t.depth = 21)), ArtifactError::Tree { tree: 1, reason: "oblivious tree too deep" });
    assert_eq!(refuse(&with_tree(1, |t| t.output = VECTOR_OUTPUT)), ArtifactError::Tree { tree: 1, reason: "an oblivious tree with vector leaves" });
    // A format-3 file relabelled as format 2: its layout flag is unknown there.
    let mut b = oblivious_model();
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    reseal(&mut b);
    assert_eq!(refuse(&b), ArtifactError::UnknownFlags(flags::HAS_OBLIVIOUS));
    // A level that points somewhere, and a leaf table that starts out of sequence.
    let mut b = oblivious_model();
    let (off, _) = section(&b, SectionKind::Nodes);
    let level = off + 3 * std::mem::size_of::<Node>();
    b[level + 8..level + 12].copy_from_slice(&4u32.to_le_bytes());
    reseal(&mut b);
    assert!(matches!(refuse(&b), ArtifactError::Node { tree: 1, node: 3, reason: "an oblivious level is not a split node with left = 0" }));
    let mut b = oblivious_model();
    let leaf = off + 5 * std::mem::size_of::<Node>();
    b[leaf..leaf + 4].copy_from_slice(&(node::LEAF_NAN | 3).to_le_bytes());
    reseal(&mut b);
    assert!(matches!(refuse(&b), ArtifactError::Node { tree: 1, node: 5, reason: "leaf index out of sequence (leaf count mismatch)" }));
}

/// An order the writer never produces (it puts the deepest tree first) but the validator
/// accepts: a lone leaf at node 0, walked in lockstep beside a deeper tree. Its `left` is −1
/// (wrapping), the one place where the walk's byte offsets (`validate::walk_nodes`) could wrap
/// too; the leaf must stay where it is while the stump takes its step.
#[test]
fn a_lone_leaf_at_node_zero_stays_put_beside_a_deeper_tree() {
    let leaf = |value| ir::Node::Leaf { value };
    let stump = Tree { output: 0, nodes: vec![ir::Node::Split { feature: 0, test: Test::Lt(0.5), missing_yes: false, yes: 1, no: 2 }, leaf(1.0), leaf(2.0)] };
    let lone = Tree { output: 0, nodes: vec![leaf(40.0)] };
    let features = vec![FeatureDef { name: "a".into(), kind: FeatureKind::Numeric }];
    let mut b = write(&ModelIr::binary_logistic("lone", features, vec![stump, lone])).unwrap();
    // As written: the stump at nodes 0..3 (leaves 0 and 1), the lone leaf at node 3 (leaf 2).
    // Rearranged: the lone leaf at node 0 (leaf 0), the stump at nodes 1..4 (leaves 1 and 2).
    let (nodes_at, _) = section(&b, SectionKind::Nodes);
    let node = |b: &[u8], i: usize| -> Node { bytemuck::pod_read_unaligned(&b[nodes_at + 12 * i..nodes_at + 12 * i + 12]) };
    let leaf_node = |index: u32, left: u32| Node { payload: node::LEAF_NAN | index, feature: 0, flags: node::LEAF, left };
    let split = Node { left: 2, ..node(&b, 0) };
    assert_eq!(node(&b, 3).flags, node::LEAF, "the lone leaf is written last");
    let nodes = [leaf_node(0, u32::MAX), split, leaf_node(1, 1), leaf_node(2, 2)];
    b[nodes_at..nodes_at + 48].copy_from_slice(bytemuck::cast_slice(&nodes));
    let (leaves_at, _) = section(&b, SectionKind::Leaves);
    let leaves: [f64; 3] = bytemuck::pod_read_unaligned(&b[leaves_at..leaves_at + 24]);
    b[leaves_at..leaves_at + 24].copy_from_slice(bytemuck::cast_slice(&[leaves[2], leaves[0], leaves[1]]));
    let (trees_at, _) = section(&b, SectionKind::Trees);
    let trees = [TreeSpec { root: 0, end: 1, output: 0, depth: 0, layout: tree_layout::NODES }, TreeSpec { root: 1, end: 4, output: 0, depth: 1, layout: tree_layout::NODES }];
    b[trees_at..trees_at + 32].copy_from_slice(bytemuck::cast_slice(&trees));
    reseal(&mut b);
    let m = Model::load(&b).expect("the rearranged model is valid");
    assert_eq!(m.ensemble().trees()[0].depth, 0, "the lone leaf comes first");
    let mut out = [0f64];
    for (a, want) in [(0.0, 41.0), (1.0, 42.0), (f32::NAN, 42.0)] {
        m.ensemble().margins(&[a], &mut out).unwrap();
        assert_eq!(out[0], want, "a = {a}");
    }
}
