//! Vector leaves (XGBoost `multi_output_tree`) and linear leaves (LightGBM `linear_tree`): the
//! artifact scores them as the IR's reference reading does, is written in the lowest format
//! version that holds the model, and every way to break their sections is refused.

use edgescore_compile::ir::{self, FeatureDef, FeatureKind, ModelIr, Test, Tree};
use edgescore_compile::write::write;
use edgescore_core::artifact::checksum;
use edgescore_core::artifact::layout::*;
use edgescore_core::{ArtifactError, Model};
use edgescore_tests::ir_build::format_version;

fn features(n: usize) -> Vec<FeatureDef> {
    (0..n).map(|i| FeatureDef { name: format!("f{i}"), kind: FeatureKind::Numeric }).collect()
}

fn split(feature: u32, t: f64, yes: u32, no: u32) -> ir::Node {
    ir::Node::Split { feature, test: Test::Lt(t), missing_yes: true, yes, no }
}

fn vector_model() -> ModelIr {
    let v = |a: f64| ir::Node::VectorLeaf { values: vec![a, -a, 2.0 * a] };
    let tree = |s: f64| Tree { output: 0, nodes: vec![split(0, 0.5, 1, 2), v(s), split(1, -1.0, 3, 4), v(2.0 * s), v(-s)] };
    let mut m = ModelIr::binary_logistic("vec", features(2), vec![tree(1.0), tree(0.25), tree(-0.5)]);
    m.task = edgescore_compile::ir::Task::Regression;
    m.link = edgescore_compile::ir::Link::Identity;
    m.base_score = vec![0.5, -0.5, 0.0];
    m
}

fn linear_model() -> ModelIr {
    let lin = |c: f64, terms: Vec<(u32, f64)>, fallback: f64| ir::Node::LinearLeaf { constant: c, terms, fallback };
    let tree = Tree {
        output: 0,
        nodes: vec![split(0, 0.0, 1, 2), lin(0.5, vec![(1, 2.0), (2, -0.25)], 7.0), lin(-1.0, vec![], 3.0)],
    };
    let tree2 = Tree { output: 0, nodes: vec![split(2, 1.0, 1, 2), ir::Node::Leaf { value: 0.125 }, lin(0.0, vec![(0, 1.5)], -2.0)] };
    let mut m = ModelIr::binary_logistic("lin", features(3), vec![tree, tree2]);
    m.task = edgescore_compile::ir::Task::Regression;
    m.link = edgescore_compile::ir::Link::Identity;
    m
}

fn rows(n_features: usize) -> Vec<Vec<f32>> {
    let vals = [-2.0f32, -0.5, 0.0, 0.25, 0.5, 1.0, 3.0, f32::NAN];
    let mut out = Vec::new();
    for a in vals {
        for b in vals {
            for c in vals {
                out.push([a, b, c][..n_features].to_vec());
            }
        }
    }
    out
}

fn assert_matches_reference(m: &ModelIr) {
    let bytes = write(m).unwrap();
    let model = Model::load(&bytes).unwrap();
    let e = model.ensemble();
    let mut out = vec![0f64; e.n_outputs()];
    for row in rows(m.features.len()) {
        e.margins(&row, &mut out).unwrap();
        let want = m.margins(&row);
        for (g, w) in out.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "row {row:?}: got {out:?}, want {want:?}");
        }
    }
}

#[test]
fn vector_leaves_add_one_value_per_output() {
    assert_matches_reference(&vector_model());
    let bytes = write(&vector_model()).unwrap();
    let e = Model::load(&bytes).unwrap();
    let mut out = [0f64; 3];
    // f0 < 0.5 in every tree → leaves 1, 0.25, -0.5 → sums 0.75, -0.75, 1.5 plus the bases.
    e.ensemble().margins(&[0.0, 0.0], &mut out).unwrap();
    assert_eq!(out, [1.25, -1.25, 1.5]);
}

#[test]
fn linear_leaves_fall_back_to_the_plain_value_on_nan() {
    assert_matches_reference(&linear_model());
    let model = Model::load(&write(&linear_model()).unwrap()).unwrap();
    let mut out = [0f64; 1];
    // Tree 1: f0 < 0 → 0.5 + 2·1 − 0.25·2 = 2; tree 2: f2 = 2 ≥ 1 → 0 + 1.5·(−1) = −1.5.
    model.ensemble().margins(&[-1.0, 1.0, 2.0], &mut out).unwrap();
    assert_eq!(out, [0.5]);
    // f1 NaN: the first leaf is worth its fallback 7; tree 2 does not use f1.
    model.ensemble().margins(&[-1.0, f32::NAN, 2.0], &mut out).unwrap();
    assert_eq!(out, [5.5]);
}

#[test]
fn lowest_format_version_that_holds_the_model() {
    let plain = ModelIr::binary_logistic("p", features(1), vec![Tree { output: 0, nodes: vec![ir::Node::Leaf { value: 1.0 }] }]);
    assert_eq!(format_version(&write(&plain).unwrap()), 1);
    assert_eq!(format_version(&write(&vector_model()).unwrap()), 2);
    assert_eq!(format_version(&write(&linear_model()).unwrap()), 2);
}

#[test]
fn writer_refuses_inconsistent_leaves() {
    let mut m = vector_model();
    m.trees[0].nodes[1] = ir::Node::VectorLeaf { values: vec![1.0, 2.0] };
    assert!(write(&m).unwrap_err().to_string().contains("vector leaf of 2 values for 3 outputs"));
    let mut m = vector_model();
    m.trees[0].nodes[1] = ir::Node::Leaf { value: 1.0 };
    assert!(write(&m).unwrap_err().to_string().contains("scalar leaf in a tree of vector leaves"));
    let mut m = linear_model();
    m.trees[0].nodes[1] = ir::Node::LinearLeaf { constant: 0.0, terms: vec![(9, 1.0)], fallback: 0.0 };
    assert!(write(&m).unwrap_err().to_string().contains("linear term on feature 9"));
}

fn section(bytes: &[u8], kind: SectionKind) -> (usize, usize) {
    let at = HEADER_LEN + (kind as usize - 1) * std::mem::size_of::<SectionEntry>();
    let e: SectionEntry = bytemuck::pod_read_unaligned(&bytes[at..at + std::mem::size_of::<SectionEntry>()]);
    (e.offset as usize, e.len as usize)
}

fn resealed(mut b: Vec<u8>) -> Vec<u8> {
    let sum = checksum(&b);
    b[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 8].copy_from_slice(&sum.to_le_bytes());
    b
}

fn refuse(bytes: &[u8]) -> ArtifactError {
    Model::load(bytes).err().expect("a broken artifact was accepted")
}

#[test]
fn broken_linear_sections_are_refused() {
    let good = write(&linear_model()).unwrap();
    let (terms, _) = section(&good, SectionKind::LinearTerms);
    let (leaves, _) = section(&good, SectionKind::LinearLeaves);
    let mut b = good.clone();
    b[terms..terms + 4].copy_from_slice(&3u32.to_le_bytes());
    assert_eq!(refuse(&resealed(b)), ArtifactError::Linear { index: 0, reason: "term on a feature out of range" });
    let mut b = good.clone();
    b[terms + 8..terms + 16].copy_from_slice(&f64::INFINITY.to_le_bytes());
    assert_eq!(refuse(&resealed(b)), ArtifactError::NotFinite { what: "linear coefficient", index: 0 });
    let mut b = good.clone();
    // Leaf 0's term range pushed past the end of LINEAR_TERMS.
    b[leaves + 8..leaves + 12].copy_from_slice(&100u32.to_le_bytes());
    assert_eq!(refuse(&resealed(b)), ArtifactError::Linear { index: 0, reason: "terms extend past LINEAR_TERMS" });
    // Without the flag, the linear sections must be empty.
    let mut b = good.clone();
    let flags = u32::from_le_bytes(b[12..16].try_into().unwrap()) & !flags::HAS_LINEAR_LEAVES;
    b[12..16].copy_from_slice(&flags.to_le_bytes());
    assert!(matches!(refuse(&resealed(b)), ArtifactError::SectionLength { section: "LINEAR_LEAVES", .. }));
}

#[test]
fn broken_vector_trees_are_refused() {
    let good = write(&vector_model()).unwrap();
    let (trees, _) = section(&good, SectionKind::Trees);
    // A vector tree relabelled as a scalar tree: its leaves no longer add up.
    let mut b = good.clone();
    b[trees + 8..trees + 12].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(refuse(&resealed(b)), ArtifactError::Node { reason: "leaf index out of sequence (leaf count mismatch)", .. }));
    // The new flags in a format-1 file are unknown there.
    let mut b = good.clone();
    b[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(refuse(&resealed(b)), ArtifactError::UnknownFlags(flags::HAS_VECTOR_LEAVES));
    // Flag cleared: the trees use vector leaves without declaring them.
    let mut b = good;
    b[12..16].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(refuse(&resealed(b)), ArtifactError::FlagsMismatch { .. }));
}

fn ctr_model() -> ModelIr {
    use edgescore_compile::ir::{ctr_part, CtrDef, CtrPart};
    let parts = vec![
        CtrPart { kind: ctr_part::CATEGORY, feature: 0, value: 0, reserved: 0 },
        CtrPart { kind: ctr_part::ABOVE, feature: 1, value: 0.5f32.to_bits(), reserved: 0 },
    ];
    let key = |code: f32, x: f32| edgescore_core::ensemble::ctr::projection_key(&parts, &[code, x]);
    let mut table = vec![(key(1.0, 0.0), 0.9f32), (key(2.0, 1.0), 0.1), (key(3.0, 0.0), 0.6)];
    table.sort_by_key(|e| e.0);
    let ctr = CtrDef { parts, table, empty_value: 0.25 };
    // Split on the CTR (feature 2): value > 0.5 → leaf 1, else leaf 2.
    let tree = Tree { output: 0, nodes: vec![ir::Node::Split { feature: 2, test: Test::Gt(0.5), missing_yes: false, yes: 1, no: 2 }, ir::Node::Leaf { value: 1.0 }, ir::Node::Leaf { value: -1.0 }] };
    let mut m = ModelIr::binary_logistic("ctr", features(2), vec![tree]);
    m.features[0].kind = FeatureKind::Categorical { buckets: 8 };
    m.ctrs = vec![ctr];
    m.link = edgescore_compile::ir::Link::Identity;
    m
}

#[test]
fn ctr_features_are_computed_per_row() {
    let m = ctr_model();
    assert_matches_reference(&m);
    let model = Model::load(&write(&m).unwrap()).unwrap();
    let mut out = [0f64; 1];
    for (row, want) in [([1.0f32, 0.0], 1.0), ([1.0, 1.0], -1.0), ([3.0, 0.2], 1.0), ([2.0, 1.0], -1.0), ([9.0, 0.0], -1.0), ([f32::NAN, 0.0], -1.0)] {
        model.ensemble().margins(&row, &mut out).unwrap();
        assert_eq!(out[0], want, "{row:?}");
    }
}

#[test]
fn broken_ctr_sections_are_refused() {
    let good = write(&ctr_model()).unwrap();
    Model::load(&good).unwrap();
    let (features, _) = section(&good, SectionKind::CtrFeatures);
    let (parts, _) = section(&good, SectionKind::CtrParts);
    let (keys, _) = section(&good, SectionKind::CtrKeys);
    let (values, _) = section(&good, SectionKind::CtrValues);
    let broken = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        refuse(&resealed(b))
    };
    assert_eq!(broken(keys, &u64::MAX.to_le_bytes()), ArtifactError::Ctr { index: 0, reason: "keys not strictly ascending" });
    assert_eq!(broken(parts + 4, &2u32.to_le_bytes()), ArtifactError::CtrPart { index: 0, reason: "feature out of range" });
    assert_eq!(broken(parts, &9u32.to_le_bytes()), ArtifactError::CtrPart { index: 0, reason: "unknown kind" });
    assert_eq!(broken(parts + 16 + 8, &f32::NAN.to_bits().to_le_bytes()), ArtifactError::CtrPart { index: 1, reason: "NaN border" });
    assert_eq!(broken(values, &f32::INFINITY.to_le_bytes()), ArtifactError::NotFinite { what: "CTR value", index: 0 });
    assert_eq!(broken(features + 4, &0u32.to_le_bytes()), ArtifactError::Ctr { index: 0, reason: "parts empty or past CTR_PARTS" });
    assert_eq!(broken(features + 12, &9u32.to_le_bytes()), ArtifactError::Ctr { index: 0, reason: "keys extend past CTR_KEYS" });
    // The split on the CTR feature is out of range once the flag (and so the CTR) is gone.
    let flags = u32::from_le_bytes(good[12..16].try_into().unwrap()) & !flags::HAS_CTRS;
    assert!(matches!(broken(12, &flags.to_le_bytes()), ArtifactError::SectionLength { section: "CTR_FEATURES", .. }));
}

#[test]
fn linear_terms_name_inputs_not_ctr_features() {
    // Feature 2 is CTR 0 there: a split may test it, a linear term may not.
    let mut m = ctr_model();
    m.trees[0].nodes[1] = ir::Node::LinearLeaf { constant: 0.0, terms: vec![(2, 1.0)], fallback: 0.0 };
    assert!(write(&m).unwrap_err().to_string().contains("linear term on feature 2"));
}

#[test]
fn membership_splits_need_format_2() {
    let member = Tree { output: 0, nodes: vec![ir::Node::Split { feature: 0, test: Test::Member { categories: vec![1, 3] }, missing_yes: false, yes: 1, no: 2 }, ir::Node::Leaf { value: 1.0 }, ir::Node::Leaf { value: 2.0 }] };
    let m = ModelIr::binary_logistic("member", features(1), vec![member]);
    assert_matches_reference(&m);
    let good = write(&m).unwrap();
    let model = Model::load(&good).unwrap();
    let mut out = [0f64; 1];
    for (x, want) in [(1.0f32, 1.0), (3.0, 1.0), (1.5, 2.0), (2.0, 2.0), (-1.0, 2.0), (f32::NAN, 2.0)] {
        model.ensemble().margins(&[x], &mut out).unwrap();
        assert_eq!(out[0], want, "{x}");
    }
    assert_eq!(format_version(&good), 2);
}
