//! IR models generated from fuzzer bytes (via `arbitrary::Unstructured`). When the bytes run
//! out every choice falls to its first option (a leaf, the smallest count), so generation always
//! terminates and small inputs give small models.

use arbitrary::{Result, Unstructured};
use edgescore_compile::ir::*;

/// Knobs: `allow_bad` lets the generator produce IR the writer should refuse (child out of
/// range, shared children, feature or output index out of range, NaN thresholds...).
#[derive(Clone, Copy)]
pub struct Cfg {
    pub allow_bad: bool,
}

/// The test kinds a model's splits draw from. Most models mix every kind; the narrower
/// palettes reach what the writer and the loader decide from the kinds a model uses: plain
/// comparisons only (QuickScorer's bitvectors, NaN-low columns, the unrolled oblivious walks),
/// comparisons and zero-as-missing tests (zero-as-missing columns), comparisons and
/// categorical sets.
#[derive(Clone, Copy)]
enum Tests {
    All,
    Comparisons,
    ZeroMissing,
    Categorical,
}

/// What every tree of one model is generated with.
#[derive(Clone, Copy)]
struct G {
    allow_bad: bool,
    tests: Tests,
    /// Oblivious trees may be drawn (not in models of vector or linear leaves, which the
    /// writer refuses to mix with them, unless bad IR is allowed).
    oblivious: bool,
}

/// True with probability 1/n; false when the bytes have run out (so rare, expensive or
/// invalid choices are never the default).
pub fn rare(u: &mut Unstructured, n: u32) -> Result<bool> {
    Ok(u.int_in_range(0..=n - 1)? == n - 1)
}

/// Awkward f64 values: f32 neighbours, midpoints between f32s, zeros, infinities, the f32
/// overflow boundary, subnormals, category-like integers, raw bit patterns.
pub fn awkward_f64(u: &mut Unstructured) -> Result<f64> {
    let base = u.int_in_range(-64i32..=64)? as f64 / 8.0;
    let v = match u.int_in_range(0u8..=17)? {
        0 => base,
        1 => 0.0,
        2 => -0.0,
        3 => f64::INFINITY,
        4 => f64::NEG_INFINITY,
        5 => f32::MAX as f64,
        // Between f32::MAX and the rounding tie (rounds to f32::MAX) / exactly the tie (to inf).
        6 => f32::MAX as f64 * (1.0 + 1e-9),
        7 => f32::MAX as f64 + 2f64.powi(103),
        8 => 1e-35,
        9 => u.int_in_range(-4i32..=70)? as f64,
        10 => f32::from_bits(u.arbitrary()?) as f64,
        11 => (base as f32).next_up() as f64,
        12 => {
            let a = base as f32;
            (a as f64 + a.next_up() as f64) / 2.0
        }
        13 => f64::from_bits(u.arbitrary()?),
        14 => 1e300,
        15 => f32::from_bits(u.int_in_range(1u32..=3)?) as f64,
        16 => base + 1e-12,
        _ => (base as f32).next_down() as f64,
    };
    Ok(if u.ratio(1, 4)? { -v } else { v })
}

/// A threshold; NaN only when bad IR is allowed.
fn threshold(u: &mut Unstructured, allow_bad: bool) -> Result<f64> {
    let t = awkward_f64(u)?;
    Ok(if t.is_nan() && !allow_bad { 0.5 } else { t })
}

fn leaf_value(u: &mut Unstructured, allow_bad: bool) -> Result<f64> {
    if allow_bad && rare(u, 200)? {
        return Ok(if u.arbitrary()? { f64::NAN } else { f64::INFINITY });
    }
    let v = awkward_f64(u)?;
    Ok(if v.is_finite() { v } else { 0.25 })
}

fn categories(u: &mut Unstructured) -> Result<Vec<u32>> {
    let n = u.int_in_range(0usize..=8)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        // Mostly small codes; sometimes a word boundary or a wider bitset (bounded: the writer
        // allocates max/32+1 words).
        out.push(match u.int_in_range(0u8..=7)? {
            0 => 31,
            1 => 32,
            2 => u.int_in_range(0u32..=4095)?,
            _ => u.int_in_range(0u32..=70)?,
        });
    }
    Ok(out)
}

fn test(u: &mut Unstructured, g: G) -> Result<Test> {
    // Kinds 0..=3 are the plain comparisons, 6 zero-as-missing, 7 and 9 categorical sets.
    let kind = match g.tests {
        Tests::All => u.int_in_range(0u8..=9)?,
        Tests::Comparisons => u.int_in_range(0u8..=3)?,
        Tests::ZeroMissing => *u.choose(&[0u8, 1, 2, 3, 6, 6]).unwrap_or(&0),
        Tests::Categorical => *u.choose(&[0u8, 1, 2, 3, 7, 9]).unwrap_or(&0),
    };
    Ok(match kind {
        9 => Test::Member { categories: categories(u)? },
        0 => Test::Lt(threshold(u, g.allow_bad)?),
        1 => Test::Le(threshold(u, g.allow_bad)?),
        2 => Test::Gt(threshold(u, g.allow_bad)?),
        3 => Test::Ge(threshold(u, g.allow_bad)?),
        4 => Test::Eq(threshold(u, g.allow_bad)?),
        5 => Test::Ne(threshold(u, g.allow_bad)?),
        6 => {
            let t = threshold(u, g.allow_bad)?;
            // +inf is refused by the writer ("zero-as-missing split at +inf").
            Test::LeZeroAsMissing(if t == f64::INFINITY && !g.allow_bad { 1.0 } else { t })
        }
        _ => {
            let invalid = match u.int_in_range(0u8..=7)? {
                0 => -f32::from_bits(1),
                1 => -0.0,
                2 => 0.0,
                3 => f32::NEG_INFINITY,
                4 => 2.5,
                5 => f32::from_bits(u.arbitrary()?),
                _ => -1.0,
            };
            let invalid = if invalid.is_nan() && !g.allow_bad { -1.0 } else { invalid };
            Test::InSet { categories: categories(u)?, invalid_at_or_below: invalid }
        }
    })
}

fn grow(u: &mut Unstructured, nodes: &mut Vec<Node>, n_features: u32, g: G, depth_left: u32, budget: &mut usize) -> Result<u32> {
    let me = nodes.len() as u32;
    nodes.push(Node::Leaf { value: 0.0 });
    if depth_left == 0 || *budget == 0 || u.ratio(1, 3)? {
        nodes[me as usize] = Node::Leaf { value: leaf_value(u, g.allow_bad)? };
        return Ok(me);
    }
    *budget -= 1;
    let test = test(u, g)?;
    let feature = if g.allow_bad && rare(u, 64)? { n_features } else { u.int_in_range(0..=n_features - 1)? };
    let missing_yes = u.arbitrary()?;
    let yes = grow(u, nodes, n_features, g, depth_left - 1, budget)?;
    let no = grow(u, nodes, n_features, g, depth_left - 1, budget)?;
    nodes[me as usize] = Node::Split { feature, test, missing_yes, yes, no };
    Ok(me)
}

/// A chain: every split has a leaf on one side and the next split on the other. Used to hit
/// the MAX_DEPTH (256) boundary without thousands of nodes.
fn chain(u: &mut Unstructured, n_features: u32, g: G, depth: u32) -> Result<Vec<Node>> {
    let mut nodes = Vec::with_capacity(2 * depth as usize + 1);
    for d in 0..depth {
        let me = nodes.len() as u32;
        let leaf_first = d % 2 == 0;
        let (yes, no) = if leaf_first { (me + 1, me + 2) } else { (me + 2, me + 1) };
        let feature = u.int_in_range(0..=n_features - 1)?;
        nodes.push(Node::Split { feature, test: test(u, g)?, missing_yes: u.arbitrary()?, yes, no });
        nodes.push(Node::Leaf { value: leaf_value(u, g.allow_bad)? });
    }
    nodes.push(Node::Leaf { value: leaf_value(u, g.allow_bad)? });
    Ok(nodes)
}

/// Renumbers nodes 1.. with a permutation drawn from the bytes (the root stays 0), so the
/// writer's breadth-first relayout sees IR in arbitrary order.
fn permute(u: &mut Unstructured, nodes: Vec<Node>) -> Result<Vec<Node>> {
    let n = nodes.len();
    let mut order: Vec<usize> = (0..n).collect(); // order[new] = old
    for i in (2..n).rev() {
        let j = 1 + u.choose_index(i)?.min(i - 1);
        order.swap(i, j);
    }
    let mut new_of = vec![0u32; n];
    for (new, &old) in order.iter().enumerate() {
        new_of[old] = new as u32;
    }
    Ok(order
        .iter()
        .map(|&old| match &nodes[old] {
            Node::Split { feature, test, missing_yes, yes, no } => Node::Split {
                feature: *feature,
                test: test.clone(),
                missing_yes: *missing_yes,
                yes: new_of[*yes as usize],
                no: new_of[*no as usize],
            },
            leaf => leaf.clone(),
        })
        .collect())
}

/// An oblivious tree (CatBoost's shape): `depth` levels and 2^depth leaves; now and then, with
/// `allow_bad`, too deep or with the wrong number of leaves.
fn oblivious(u: &mut Unstructured, n_features: u32, g: G) -> Result<Node> {
    let depth = if g.allow_bad && rare(u, 32)? { u.int_in_range(0u32..=24)? } else { u.int_in_range(0u32..=8)? };
    let mut levels = Vec::with_capacity(depth as usize);
    for _ in 0..depth {
        let feature = if g.allow_bad && rare(u, 64)? { n_features } else { u.int_in_range(0..=n_features - 1)? };
        levels.push(Level { feature, test: test(u, g)?, missing_yes: u.arbitrary()? });
    }
    let mut n_leaves = 1usize << depth.min(12);
    if g.allow_bad && rare(u, 32)? {
        n_leaves = n_leaves.saturating_sub(1);
    }
    let mut leaves = Vec::with_capacity(n_leaves);
    for _ in 0..n_leaves {
        leaves.push(leaf_value(u, g.allow_bad)?);
    }
    Ok(Node::Oblivious { levels: levels.into(), leaves: leaves.into() })
}

fn tree(u: &mut Unstructured, n_features: u32, n_outputs: u32, g: G) -> Result<Tree> {
    if rare(u, 5)? && (g.oblivious || (g.allow_bad && rare(u, 8)?)) {
        let output = if g.allow_bad && rare(u, 64)? { n_outputs } else { u.int_in_range(0..=n_outputs - 1)? };
        return Ok(Tree { output, nodes: vec![oblivious(u, n_features, g)?] });
    }
    let mut nodes = if rare(u, 40)? {
        let depth = u.int_in_range(250u32..=258)?;
        chain(u, n_features, g, depth)?
    } else {
        let max_depth = u.int_in_range(0u32..=9)?;
        let mut budget = 48usize;
        let mut nodes = Vec::new();
        grow(u, &mut nodes, n_features, g, max_depth, &mut budget)?;
        nodes
    };
    if u.ratio(1, 2)? {
        nodes = permute(u, nodes)?;
    }
    if g.allow_bad && rare(u, 32)? {
        // Point some split at an arbitrary node: a cycle, a shared child, or out of range.
        let n = nodes.len() as u32;
        let target = u.int_in_range(0..=n)?;
        if let Some(Node::Split { yes, no, .. }) = nodes.iter_mut().rev().find(|n| matches!(n, Node::Split { .. })) {
            if u.arbitrary()? {
                *yes = target;
            } else {
                *no = target;
            }
        }
    }
    if g.allow_bad && rare(u, 200)? {
        nodes.clear();
    }
    let output = if g.allow_bad && rare(u, 64)? { n_outputs } else { u.int_in_range(0..=n_outputs - 1)? };
    Ok(Tree { output, nodes })
}

fn short_string(u: &mut Unstructured) -> Result<String> {
    const PIECES: [&str; 8] = ["f", "x", "é", "名", "🦀", "_", "0", ""];
    let n = u.int_in_range(0usize..=4)?;
    let mut s = String::new();
    for _ in 0..n {
        s.push_str(u.choose(&PIECES).copied().unwrap_or("a"));
    }
    Ok(s)
}

/// CatBoost-style CTR features over the inputs: random projections, and tables whose keys
/// include those of rows of small codes (so lookups hit as well as miss).
fn ctrs(u: &mut Unstructured, n_features: u32, cfg: Cfg) -> Result<Vec<CtrDef>> {
    let n = u.int_in_range(1usize..=4)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let mut parts = Vec::new();
        for _ in 0..u.int_in_range(1usize..=3)? {
            let kind = u.int_in_range(0u32..=3)?;
            let feature = if cfg.allow_bad && rare(u, 64)? { n_features } else { u.int_in_range(0..=n_features - 1)? };
            let value = match kind {
                ctr_part::ABOVE | ctr_part::ABOVE_NAN_TRUE => (threshold(u, cfg.allow_bad)? as f32).to_bits(),
                ctr_part::ONE_HOT => edgescore_core::ensemble::ctr::code_hash(u.int_in_range(0u32..=5)?),
                _ => 0,
            };
            parts.push(CtrPart { kind, feature, value, reserved: 0 });
        }
        parts.sort_by_key(|p| match p.kind {
            ctr_part::CATEGORY => 0,
            ctr_part::ONE_HOT => 2,
            _ => 1,
        });
        let mut table: Vec<(u64, f32)> = Vec::new();
        for _ in 0..u.int_in_range(0usize..=12)? {
            let row: Vec<f32> = (0..n_features).map(|_| u.int_in_range(0u32..=5).map(|c| c as f32)).collect::<Result<_>>()?;
            // Parts on a missing feature (allow_bad) have no key: the writer refuses them.
            let in_range = parts.iter().all(|p| p.feature < n_features);
            let key = if u.ratio(1, 6)? || !in_range { u.arbitrary()? } else { edgescore_core::ensemble::ctr::projection_key(&parts, &row) };
            table.push((key, leaf_value(u, cfg.allow_bad)? as f32));
        }
        table.sort_by_key(|e| e.0);
        table.dedup_by_key(|e| e.0);
        out.push(CtrDef { parts, table, empty_value: leaf_value(u, cfg.allow_bad)? as f32 });
    }
    Ok(out)
}

/// Turns every leaf into a vector leaf (one value per output) or a linear leaf (constant plus
/// terms on the inputs, with a fallback), as XGBoost's multi_output_tree and LightGBM's linear
/// trees have them.
fn rich_leaves(u: &mut Unstructured, trees: &mut [Tree], n_features: u32, n_outputs: u32, vector: bool, cfg: Cfg) -> Result<()> {
    for t in trees {
        if vector {
            t.output = 0;
        }
        for node in &mut t.nodes {
            let Node::Leaf { value } = *node else { continue };
            *node = if vector {
                let width = if cfg.allow_bad && rare(u, 64)? { n_outputs + 1 } else { n_outputs };
                let mut values = vec![value];
                for _ in 1..width {
                    values.push(leaf_value(u, cfg.allow_bad)?);
                }
                Node::VectorLeaf { values }
            } else {
                let mut terms = Vec::new();
                for _ in 0..u.int_in_range(0usize..=3)? {
                    let f = if cfg.allow_bad && rare(u, 64)? { n_features } else { u.int_in_range(0..=n_features - 1)? };
                    let c = awkward_f64(u)?;
                    terms.push((f, if c.is_finite() { c } else { 0.5 }));
                }
                Node::LinearLeaf { constant: leaf_value(u, cfg.allow_bad)?, terms, fallback: value }
            };
        }
    }
    Ok(())
}

pub fn model(u: &mut Unstructured, cfg: Cfg) -> Result<ModelIr> {
    let n_features: u32 = if rare(u, 16)? { u.int_in_range(1..=40)? } else { u.int_in_range(1..=6)? };
    let n_outputs: u32 = match u.int_in_range(0u8..=40)? {
        40 => 256,
        39 if cfg.allow_bad => 257,
        _ => u.int_in_range(1..=5)?,
    };
    // Format-2 constructs, each now and then: CTR features (splits may test them), vector or
    // linear leaves (chosen first: trees of such leaves are not mixed with oblivious trees).
    let ctr_defs = if rare(u, 6)? { ctrs(u, n_features, cfg)? } else { Vec::new() };
    let split_features = n_features + ctr_defs.len() as u32;
    let leaves = u.int_in_range(0u8..=11)?;
    let tests = match u.int_in_range(0u8..=7)? {
        0 | 1 => Tests::Comparisons,
        2 => Tests::ZeroMissing,
        3 => Tests::Categorical,
        _ => Tests::All,
    };
    let g = G { allow_bad: cfg.allow_bad, tests, oblivious: leaves < 10 };
    // Up to 20 trees, now and then up to 40: 15, 23, 31 or 39 node trees make the lockstep
    // walk's widest group (a whole group of 8 joined by the 7 left over).
    let n_trees = if rare(u, 6)? { u.int_in_range(0usize..=40)? } else { u.int_in_range(0usize..=20)? };
    let mut trees = Vec::with_capacity(n_trees);
    for _ in 0..n_trees {
        trees.push(tree(u, split_features, n_outputs, g)?);
    }
    match leaves {
        10 => rich_leaves(u, &mut trees, n_features, n_outputs, true, cfg)?,
        11 => rich_leaves(u, &mut trees, n_features, n_outputs, false, cfg)?,
        _ => {}
    }
    let link = match u.int_in_range(0u8..=4)? {
        0 => Link::Identity,
        1 => Link::Sigmoid { scale: if u.arbitrary()? { 1.0 } else { awkward_f64(u)? } },
        2 => Link::Softmax,
        3 => Link::Step,
        _ => Link::Exp,
    };
    let aggregate = match u.int_in_range(0u8..=3)? {
        0 => Aggregate::Average {
            divisor: match u.int_in_range(0u8..=3)? {
                0 => n_trees.max(1) as f64,
                1 => 0.5,
                2 => awkward_f64(u)?,
                _ => 3.0,
            },
        },
        _ => Aggregate::Sum,
    };
    let mut base_score = Vec::with_capacity(n_outputs as usize);
    for o in 0..n_outputs {
        base_score.push(if o < 8 { leaf_value(u, cfg.allow_bad)? } else { o as f64 * 0.125 });
    }
    let mut features = Vec::with_capacity(n_features as usize);
    for _ in 0..n_features {
        let kind = if u.ratio(1, 3)? { FeatureKind::Categorical { buckets: u.int_in_range(0u32..=100)? } } else { FeatureKind::Numeric };
        features.push(FeatureDef { name: short_string(u)?, kind });
    }
    if cfg.allow_bad && rare(u, 100)? {
        features.clear();
    }
    let source = *u.choose(&[SourceFormat::XGBoost, SourceFormat::LightGBM, SourceFormat::CatBoost, SourceFormat::Onnx]).unwrap_or(&SourceFormat::Onnx);
    let task = *u.choose(&[Task::Regression, Task::BinaryClassification, Task::MulticlassClassification]).unwrap_or(&Task::Regression);
    let covers = if u.ratio(1, 3)? { Some(covers(u, &trees, cfg.allow_bad)?) } else { None };
    // Not `ratio(1, 4)`: that holds on an exhausted input, and most models would take format 7.
    let ua_fingerprints = if !u.ratio(3, 4)? { ua_fingerprints(u, cfg.allow_bad)? } else { Vec::new() };
    Ok(ModelIr {
        ua_fingerprints,
        name: short_string(u)?,
        version: short_string(u)?,
        source,
        objective: short_string(u)?,
        task,
        link,
        aggregate,
        base_score,
        features,
        ctrs: ctr_defs,
        trees,
        covers,
    })
}

/// A UA fingerprint table (UA_FINGERPRINTS, format 7): families `ua_family` names, patterns
/// whole or cut anywhere and ended with `*`; with `allow_bad`, sometimes unsorted, repeated or
/// naming a family or pattern the format refuses (which the writer must refuse).
fn ua_fingerprints(u: &mut Unstructured, allow_bad: bool) -> Result<Vec<UaFingerprint>> {
    const FAMILIES: &[&[u8]] = &[b"chrome", b"firefox", b"safari", b"edge", b"curl", b"go", b"other-bot", b"headless-chrome"];
    const JA4S: &[&[u8]] = &[b"t13d1516h2_8daaf6152771_d8a2da3f94cd", b"t13i3111h2_e8f1e7e78f70_b26ce05bbdd6", b"q00d0000h3_000000000000_000000000000"];
    let mut entries = Vec::new();
    for _ in 0..u.int_in_range(1u8..=8)? {
        let family: &[u8] = if allow_bad && rare(u, 20)? { b"MyClient" } else { *u.choose(FAMILIES)? };
        let ja4 = *u.choose(JA4S)?;
        let pattern = match u.int_in_range(0u8..=2)? {
            0 => ja4.to_vec(),
            _ => [&ja4[..u.int_in_range(1..=ja4.len())?], b"*"].concat(),
        };
        let pattern = if allow_bad && rare(u, 20)? { pattern.to_ascii_uppercase() } else { pattern };
        entries.push(UaFingerprint::new(family, &pattern).ok_or(arbitrary::Error::IncorrectFormat)?);
    }
    if !(allow_bad && rare(u, 10)?) {
        entries.sort();
        entries.dedup();
    }
    Ok(entries)
}

/// Node covers (NODE_VALUES): equal, or per node from 0 (no training row reached it) to large,
/// and with `allow_bad` sometimes negative, NaN or infinite (which the writer must refuse).
fn covers(u: &mut Unstructured, trees: &[Tree], allow_bad: bool) -> Result<Covers> {
    if u.ratio(1, 4)? {
        return Ok(Covers::equal(trees));
    }
    let kind = *u.choose(&[CoverKind::Hessian, CoverKind::Rows]).unwrap_or(&CoverKind::Rows);
    let mut per_tree = Vec::with_capacity(trees.len());
    for t in trees {
        let n = match &t.nodes[..] {
            [Node::Oblivious { leaves, .. }] => leaves.len(),
            nodes => nodes.len(),
        };
        let mut c = Vec::with_capacity(n);
        for _ in 0..n {
            c.push(match u.int_in_range(0u8..=9)? {
                0 => 0.0,
                1 if allow_bad => *u.choose(&[f64::NAN, -1.0, f64::INFINITY]).unwrap_or(&-1.0),
                2 => 1e30,
                3 => 1e-30,
                k => f64::from(u.int_in_range(1u32..=10_000)?) * f64::from(k),
            });
        }
        per_tree.push(c);
    }
    Ok(Covers { kind, per_tree })
}

/// The constructs the writer and the loader choose from a model, counted over generated
/// models (`cargo test --lib -- --nocapture` prints the table): each must come up, or the
/// fuzz targets never reach it.
#[cfg(test)]
mod census {
    use super::*;
    use crate::oracle::Rng;
    use edgescore_compile::write::write;
    use edgescore_core::artifact::layout::{flags, node, tree_layout};
    use edgescore_core::Model;

    const N: usize = 20_000;

    #[test]
    fn every_construct_is_generated() {
        let mut rng = Rng(0x5eed_c0de);
        let mut count = std::collections::BTreeMap::<&str, usize>::new();
        let mut bump = |what: &'static str, yes: bool| *count.entry(what).or_default() += usize::from(yes);
        for _ in 0..N {
            // Lengths up to 4 KiB, as `ir_roundtrip` runs with them (-max_len=4096 -len_control=0).
            let bytes: Vec<u8> = (0..64 + rng.below(4032)).map(|_| rng.next() as u8).collect();
            let Ok(ir) = model(&mut Unstructured::new(&bytes), Cfg { allow_bad: false }) else { continue };
            let Ok(written) = write(&ir) else { continue };
            let m = Model::load(&written).expect("a written model loads");
            let e = m.ensemble();
            let version = u32::from_le_bytes(written[8..12].try_into().unwrap());
            let f = e.header_flags();
            let nodes = e.nodes();
            let op = |o: u16| nodes.iter().any(|n| n.flags & node::LEAF == 0 && n.flags & node::OP_MASK == o);
            let walked = e.trees().iter().filter(|t| t.layout == tree_layout::NODES).count();
            bump("written", true);
            for v in 1..=5 {
                bump(["format 1", "format 2", "format 3", "format 4", "format 5"][v as usize - 1], version == v);
            }
            bump("NaN-low columns", f & flags::NAN_LOW_COLUMNS != 0);
            bump("UA fingerprint tables", f & flags::HAS_UA_FINGERPRINTS != 0);
            bump("UA fingerprint prefixes", e.ua_fingerprints().iter().any(|p| p.pattern().ends_with(b"*")));
            bump("zero-as-missing columns", f & flags::ZERO_MISSING_COLUMNS != 0);
            bump("zero-as-missing tests", op(node::OP_LT_ZERO_MISSING));
            bump("categorical sets (IN_SET)", op(node::OP_IN_SET));
            bump("membership sets (MEMBER)", op(node::OP_MEMBER));
            bump("CTR tables", f & flags::HAS_CTRS != 0 && e.ctr_features().iter().any(|c| c.n_keys > 0));
            bump("vector leaves", f & flags::HAS_VECTOR_LEAVES != 0);
            bump("linear leaves", f & flags::HAS_LINEAR_LEAVES != 0);
            bump("oblivious trees", f & flags::HAS_OBLIVIOUS != 0);
            // `TreeEnsemble::add_oblivious`: depths 4 to 8 without rare tests.
            bump("unrolled oblivious levels", f & flags::HAS_RARE_TESTS == 0 && e.trees().iter().any(|t| t.layout == tree_layout::OBLIVIOUS && (4..=8).contains(&t.depth)));
            bump("bitvectors (at load)", e.uses_bitvectors());
            bump("bitvectors (on every row)", m.clone().with_bitvectors_on_every_row().ensemble().uses_bitvectors());
            // `TreeEnsemble::walk_lockstep` (natively): a whole group joined by the rest.
            let joined = if walked >= 8 && walked % 8 > 0 { 8 + walked % 8 } else { 0 };
            bump("lockstep group of 10-14 lanes", (9..=14).contains(&joined));
            bump("lockstep group of 16 lanes", joined == 15);
        }
        let written = count["written"];
        eprintln!("{N} inputs, {written} models written:");
        for (what, n) in &count {
            eprintln!("{n:>7}  {what}");
        }
        let missing: Vec<_> = count.iter().filter(|(_, &n)| n < written / 1000).map(|(w, _)| *w).collect();
        assert!(missing.is_empty(), "generated in fewer than 1 in 1000 written models: {missing:?}");
    }
}
