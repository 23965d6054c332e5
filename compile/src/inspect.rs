//! `edgescore inspect`: what an artifact holds, for humans (text) and tools (JSON).

use edgescore_core::artifact::layout::{ctr_part, flags, node, tree_layout, FEATURE_CATEGORICAL};
use edgescore_core::{BitvectorsSize, TreeEnsemble};
use serde::Serialize;

#[derive(Serialize)]
pub struct Report {
    pub name: String,
    pub version: String,
    pub source: String,
    pub objective: String,
    pub task: String,
    pub n_features: usize,
    pub n_outputs: usize,
    pub trees: usize,
    pub nodes: usize,
    pub leaves: usize,
    /// "constant", "vector" (one value per output) or "linear" (LightGBM linear trees).
    pub leaf_kind: String,
    /// CatBoost CTR features, computed from the inputs (split features `n_features + k`).
    pub ctr_features: usize,
    /// `depth_histogram[d]` = number of trees of depth d.
    pub depth_histogram: Vec<usize>,
    pub features_used: Vec<FeatureUse>,
    pub categorical_features: Vec<CategoricalFeature>,
    pub size_bytes: usize,
    /// The walk's copy of the nodes (addressed by byte offset) and its group starts, made at
    /// load: memory in each loaded copy, on top of `size_bytes`.
    pub walk_bytes: usize,
    /// QuickScorer's bitvectors, built at load where rows far out on every feature gain from
    /// them (`null`: every row takes the lockstep walk). Memory in each loaded copy, on top
    /// of `size_bytes`.
    pub bitvectors: Option<BitvectorsSize>,
    /// The node values (NODE_VALUES) per-request reasons and `explain` read (`null`: compiled
    /// without them).
    pub node_values: Option<NodeValues>,
    pub checksum: String,
    pub base_score: Vec<f64>,
    /// The drift reference `compile --reference` stored (`null` without one).
    pub drift_reference: Option<DriftReport>,
    /// The UA fingerprint table `compile --ua-fingerprints` stored, family → JA4 patterns
    /// (`null` without one).
    pub ua_fingerprints: Option<std::collections::BTreeMap<String, Vec<String>>>,
}

/// Per input and per output: the bin edges and each bin's reference share (the last bin is
/// the missing one).
#[derive(Serialize)]
pub struct DriftReport {
    pub features: Vec<DriftSeriesReport>,
    pub outputs: Vec<DriftSeriesReport>,
}

#[derive(Serialize)]
pub struct DriftSeriesReport {
    /// The input's name, or `output <k>`.
    pub name: String,
    pub edges: Vec<f32>,
    pub shares: Vec<f32>,
}

pub fn drift_report(e: &TreeEnsemble) -> Option<DriftReport> {
    let r = e.drift_reference()?;
    let series = |name: String, b: edgescore_core::drift::Bins| DriftSeriesReport { name, edges: b.edges.to_vec(), shares: b.shares.to_vec() };
    Some(DriftReport {
        features: (0..e.n_features()).map(|i| series(e.feature_name(i).to_string(), r.feature(i))).collect(),
        outputs: (0..e.n_outputs()).map(|o| series(format!("output {o}"), r.output(o))).collect(),
    })
}

#[derive(Serialize)]
pub struct NodeValues {
    /// What the leaves' covers count: "hessian sums", "training rows", or "equal leaf weights
    /// (the source records no covers)".
    pub covers: String,
    /// The section's bytes in the artifact (part of `size_bytes`).
    pub section_bytes: usize,
    /// Path attribution's tables, built at load where reasons are on: memory in each loaded
    /// copy that gives reasons.
    pub explain_bytes: usize,
}

#[derive(Serialize)]
pub struct FeatureUse {
    pub index: usize,
    pub name: String,
    pub splits: usize,
}

#[derive(Serialize)]
pub struct CategoricalFeature {
    pub index: usize,
    pub name: String,
    pub buckets: u32,
}

pub fn report(e: &TreeEnsemble) -> Report {
    let nodes = e.nodes();
    let n_inputs = e.n_features();
    let ctrs = e.ctr_features();
    let mut splits = vec![0usize; n_inputs + ctrs.len()];
    let mut leaves = 0;
    for t in e.trees() {
        for n in &nodes[t.root as usize..t.end as usize] {
            if n.flags & node::LEAF == 0 {
                splits[e.tested_feature(n.feature)] += 1;
            } else if t.layout == tree_layout::OBLIVIOUS {
                // One leaf node stands for the tree's table of 2^depth leaves.
                leaves += 1usize << t.depth;
            } else {
                leaves += 1;
            }
        }
    }
    let mut depth_histogram = vec![0usize; e.meta().max_depth as usize + 1];
    for t in e.trees() {
        depth_histogram[t.depth as usize] += 1;
    }
    let features_used = splits
        .iter()
        .enumerate()
        .filter(|(_, &s)| s > 0)
        .map(|(i, &s)| FeatureUse { index: i, name: feature_name(e, i), splits: s })
        .collect();
    let categorical_features = e
        .features()
        .iter()
        .enumerate()
        .filter(|(_, f)| f.kind == FEATURE_CATEGORICAL)
        .map(|(i, f)| CategoricalFeature { index: i, name: e.feature_name(i).to_string(), buckets: f.buckets })
        .collect();
    Report {
        name: e.name().to_string(),
        version: e.version().to_string(),
        source: format!("{:?}", e.source()),
        objective: e.objective().to_string(),
        task: format!("{:?}", e.task()),
        n_features: e.n_features(),
        n_outputs: e.n_outputs(),
        trees: e.trees().len(),
        nodes: nodes.len(),
        leaves,
        leaf_kind: match e.header_flags() & flags::RICH_LEAVES {
            flags::HAS_VECTOR_LEAVES => "vector",
            flags::HAS_LINEAR_LEAVES => "linear",
            _ => "constant",
        }
        .into(),
        ctr_features: ctrs.len(),
        depth_histogram,
        features_used,
        categorical_features,
        size_bytes: e.size_bytes(),
        walk_bytes: e.walk_bytes(),
        bitvectors: e.bitvectors_size(),
        node_values: e.leaf_covers().map(|(kind, covers)| NodeValues {
            covers: kind.describe().to_string(),
            section_bytes: core::mem::size_of::<edgescore_core::artifact::layout::NodeValuesHeader>() + 4 * covers.len(),
            explain_bytes: e.explainer().map_or(0, |x| x.bytes()),
        }),
        checksum: format!("{:016x}", e.checksum()),
        base_score: e.base_score().to_vec(),
        drift_reference: drift_report(e),
        ua_fingerprints: ua_fingerprints_report(e),
    }
}

pub fn ua_fingerprints_report(e: &TreeEnsemble) -> Option<std::collections::BTreeMap<String, Vec<String>>> {
    let mut table = std::collections::BTreeMap::<String, Vec<String>>::new();
    for entry in e.ua_fingerprints() {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        table.entry(text(entry.family())).or_default().push(text(entry.pattern()));
    }
    (!table.is_empty()).then_some(table)
}

/// An input's name, or for CTR feature `k` (index `n_features + k`) `ctr{k}(` its
/// projection's inputs `)`.
pub fn feature_name(e: &TreeEnsemble, i: usize) -> String {
    let n = e.n_features();
    if i < n {
        return e.feature_name(i).to_string();
    }
    let k = i - n;
    let parts = e.ctr_parts(k);
    let names: Vec<String> = parts
        .iter()
        .map(|p| {
            let name = e.feature_name(p.feature as usize);
            match p.kind {
                ctr_part::CATEGORY => name.to_string(),
                ctr_part::ONE_HOT => format!("{name}=#{:08x}", p.value),
                _ => format!("{name}>{}", f32::from_bits(p.value)),
            }
        })
        .collect();
    format!("ctr{k}({})", names.join("+"))
}

pub fn render_text(r: &Report) -> String {
    let mut s = String::new();
    let mut line = |k: &str, v: String| s.push_str(&format!("{k:<22}{v}\n"));
    line("name", r.name.clone());
    line("version", r.version.clone());
    line("source", r.source.clone());
    line("objective", r.objective.clone());
    line("task", r.task.clone());
    line("features", r.n_features.to_string());
    line("outputs", r.n_outputs.to_string());
    line("trees", r.trees.to_string());
    line("nodes", format!("{} ({} leaves, {})", r.nodes, r.leaves, r.leaf_kind));
    if r.ctr_features > 0 {
        line("CTR features", r.ctr_features.to_string());
    }
    let hist: Vec<String> = r.depth_histogram.iter().enumerate().filter(|(_, &c)| c > 0).map(|(d, c)| format!("{d}:{c}")).collect();
    line("depth histogram", hist.join(" "));
    line("size", format!("{} bytes", r.size_bytes));
    line("walk copy", format!("{} bytes per loaded copy (the nodes by byte offset, group starts, category bitsets)", r.walk_bytes));
    line(
        "far-out rows",
        match &r.bitvectors {
            Some(b) => format!("QuickScorer bitvectors: {} tests, {} bytes per loaded copy", b.tests, b.bytes),
            None => "lockstep walk for every row (no bitvectors)".into(),
        },
    );
    line(
        "node values",
        match &r.node_values {
            Some(v) => format!("covers: {}; {} bytes, {} bytes per loaded copy for reasons", v.covers, v.section_bytes, v.explain_bytes),
            None => "none (no per-request reasons; compiled without covers)".into(),
        },
    );
    line("checksum (xxh3-64)", r.checksum.clone());
    line("base score", format!("{:?}", r.base_score));
    let cats: Vec<String> = r.categorical_features.iter().map(|c| format!("{} ({} buckets)", c.name, c.buckets)).collect();
    line("categorical", if cats.is_empty() { "none".into() } else { cats.join(", ") });
    if let Some(d) = &r.drift_reference {
        let bins: usize = d.features.iter().chain(&d.outputs).map(|f| f.shares.len()).sum();
        line("drift reference", format!("{} inputs and {} outputs, {bins} bins (inspect --json or --html shows them)", d.features.len(), d.outputs.len()));
    }
    if let Some(t) = &r.ua_fingerprints {
        let n: usize = t.values().map(Vec::len).sum();
        line("UA fingerprints", format!("{n} entries for {} families (tls_ua_consistent)", t.len()));
        for (family, patterns) in t {
            s.push_str(&format!("  {family:<20}{}\n", patterns.join(" ")));
        }
    }
    s.push_str("features used (splits):\n");
    let mut used: Vec<&FeatureUse> = r.features_used.iter().collect();
    used.sort_by(|a, b| b.splits.cmp(&a.splits).then(a.index.cmp(&b.index)));
    for f in used {
        s.push_str(&format!("  {:>6}  {} [{}]\n", f.splits, f.name, f.index));
    }
    s
}
