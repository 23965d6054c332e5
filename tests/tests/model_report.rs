//! The HTML report's numbers against a recount from the IR the artifact was compiled from, and
//! its escaping of what a model file may name.

use edgescore_tests::ir_build::regression;
use edgescore_tests::random_ir::{random_tree, test_seed, Rng};
use edgescore_compile::ir::{FeatureDef, FeatureKind, Level, ModelIr, Node, Test, Tree};
use edgescore_compile::readers::gain::{FeatureGain, GainRecord};
use edgescore_compile::report::{self, Gain, Origin, ReportError, Rows};
use edgescore_compile::write::write;
use edgescore_core::Model;

/// Per feature: (splits, set splits), counted on the IR: every split node, every oblivious level.
fn ir_splits(ir: &ModelIr) -> Vec<(usize, usize)> {
    let mut counts = vec![(0, 0); ir.features.len()];
    let mut count = |feature: u32, test: &Test| {
        let c = &mut counts[feature as usize];
        c.0 += 1;
        c.1 += usize::from(matches!(test, Test::InSet { .. } | Test::Member { .. }));
    };
    for tree in &ir.trees {
        for node in &tree.nodes {
            match node {
                Node::Split { feature, test, .. } => count(*feature, test),
                Node::Oblivious { levels, .. } => levels.iter().for_each(|l| count(l.feature, &l.test)),
                _ => {}
            }
        }
    }
    counts
}

/// (depth, leaves) of an IR tree.
fn ir_shape(tree: &Tree) -> (u32, usize) {
    fn walk(nodes: &[Node], i: usize) -> (u32, usize) {
        match &nodes[i] {
            Node::Split { yes, no, .. } => {
                let (a, b) = (walk(nodes, *yes as usize), walk(nodes, *no as usize));
                (1 + a.0.max(b.0), a.1 + b.1)
            }
            Node::Oblivious { levels, leaves } => (levels.len() as u32, leaves.len()),
            _ => (0, 1),
        }
    }
    walk(&tree.nodes, 0)
}

fn oblivious(features: [u32; 3], rng: &mut Rng) -> Tree {
    let levels: Box<[Level]> = features.iter().map(|&feature| Level { feature, test: Test::Gt(rng.unit()), missing_yes: false }).collect();
    Tree { output: 0, nodes: vec![Node::Oblivious { levels, leaves: (0..8).map(|i| i as f64).collect() }] }
}

fn random_model(seed: u64) -> ModelIr {
    let mut rng = Rng::new(seed);
    let mut trees: Vec<Tree> = (0..60).map(|_| random_tree(&mut rng, 7, 6, 0)).collect();
    trees.push(oblivious([1, 4, 6], &mut rng));
    trees.push(Tree { output: 0, nodes: vec![Node::Leaf { value: 0.5 }] });
    regression(trees, 7, 1)
}

#[test]
fn split_counts_shape_and_thresholds_match_a_recount_from_the_ir() {
    for seed in [test_seed(3), 41, 977] {
        let ir = random_model(seed);
        let model = Model::load(&write(&ir).unwrap()).unwrap();
        let r = report::build(&model.ensemble(), Origin::Artifact, None).unwrap();
        let expected = ir_splits(&ir);

        let mut from_importance = vec![0; ir.features.len()];
        for f in &r.importance {
            from_importance[f.index] = f.splits;
            assert_eq!(f.name, ir.features[f.index].name);
            assert_eq!(f.gain, None);
        }
        assert_eq!(from_importance, expected.iter().map(|c| c.0).collect::<Vec<_>>(), "seed {seed}");
        assert!(r.importance.windows(2).all(|w| w[0].splits >= w[1].splits), "most splits first");

        for t in &r.thresholds {
            assert_eq!((t.comparisons + t.sets, t.sets), expected[t.index], "seed {seed} feature {}", t.index);
            assert!(t.values.len() + t.infinite <= t.comparisons);
            assert!(t.values.windows(2).all(|w| w[0] < w[1]) && t.values.iter().all(|v| v.is_finite()));
        }
        assert_eq!(r.thresholds.len(), expected.iter().filter(|c| c.0 > 0).count());

        let mut ir_trees: Vec<(u32, usize)> = ir.trees.iter().map(ir_shape).collect();
        let mut report_trees: Vec<(u32, usize)> = r.shape.depths.iter().copied().zip(r.shape.leaves.iter().copied()).collect();
        ir_trees.sort();
        report_trees.sort();
        assert_eq!(report_trees, ir_trees, "seed {seed}");
        assert_eq!(r.shape.leaves.iter().sum::<usize>(), r.summary.leaves);
        assert_eq!(r.shape.leaves_histogram().iter().map(|b| b.count).sum::<usize>(), ir.trees.len());

        assert!(matches!(&r.gain, Gain::Unavailable(why) if why.contains("artifact does not keep split gain")));
        let html = report::render_html(&r);
        assert!(html.contains("id=\"gain-unavailable\""));
        assert!(!html.contains("data-chart=\"gain\""));
    }
}

#[test]
fn gain_is_attributed_per_feature_and_checked_against_the_artifact() {
    let ir = random_model(5);
    let model = Model::load(&write(&ir).unwrap()).unwrap();
    let counts = ir_splits(&ir);
    let gains: Vec<FeatureGain> = counts.iter().enumerate().map(|(i, c)| FeatureGain { splits: c.0, total: 10.0 * i as f64 }).collect();
    let r = report::build(&model.ensemble(), Origin::Source(GainRecord::Recorded(gains.clone())), None).unwrap();
    assert_eq!(r.gain, Gain::Recorded);
    for f in &r.importance {
        assert_eq!(f.gain, Some(10.0 * f.index as f64));
    }
    assert!(report::render_html(&r).contains("data-chart=\"gain\""));

    // One split too many on feature 2: the gain would belong to other splits.
    let mut wrong = gains;
    wrong[2].splits += 1;
    match report::build(&model.ensemble(), Origin::Source(GainRecord::Recorded(wrong)), None) {
        Err(ReportError::GainMismatch { feature: 2, gain_splits, artifact_splits, .. }) => assert_eq!(gain_splits, artifact_splits + 1),
        other => panic!("{:?}", other.map(|r| r.gain)),
    }

    let r = report::build(&model.ensemble(), Origin::Source(GainRecord::NotRecorded("CatBoost")), None).unwrap();
    assert_eq!(r.gain, Gain::Unavailable("CatBoost model files do not record split gain".into()));
}

/// Feature names come from model files anyone can write: they are text on the page, never
/// markup, and the page fetches nothing.
#[test]
fn hostile_feature_names_are_escaped() {
    let names = ["<script>alert(1)</script>", "\"><img src=x onerror=alert(2)>", "a&b", "</svg><iframe src=//evil>"];
    let features = names.iter().map(|n| FeatureDef { name: n.to_string(), kind: FeatureKind::Numeric }).collect();
    let split = |feature: u32, t: f64| Node::Split { feature, test: Test::Lt(t), missing_yes: false, yes: 1, no: 2 };
    let trees = (0..4u32).map(|f| Tree { output: 0, nodes: vec![split(f, 0.5), Node::Leaf { value: 1.0 }, Node::Leaf { value: -1.0 }] }).collect();
    let mut ir = ModelIr::binary_logistic("<b>name</b>", features, trees);
    ir.version = "1 & <2>".into();
    let model = Model::load(&write(&ir).unwrap()).unwrap();
    let rows = vec![vec![0.0, 1.0, 0.0, 1.0]];
    let html = report::render_html(&report::build(&model.ensemble(), Origin::Artifact, Some(Rows { source: "<rows>.csv", rows: &rows })).unwrap());

    let allowed = [
        "!DOCTYPE", "html", "head", "meta", "title", "style", "body", "main", "header", "h1", "h2", "small", "p", "section", "dl", "div",
        "dt", "dd", "figure", "figcaption", "svg", "line", "text", "rect", "table", "thead", "tbody", "tr", "th", "td", "code", "span",
    ];
    for tag in tags(&html) {
        assert!(allowed.contains(&tag.trim_start_matches('/')), "<{tag}> in the page");
    }
    for fetch in ["url(", "@import", "http"] {
        assert!(!html.contains(fetch), "{fetch} in the page");
    }
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"));
    assert!(html.contains("a&amp;b"));
    assert!(html.contains("&lt;b&gt;name&lt;/b&gt;") && html.contains("1 &amp; &lt;2&gt;") && html.contains("&lt;rows&gt;.csv"));
    // Each feature is in the schema, the split chart and the threshold table.
    for name in names {
        let escaped = name.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;");
        assert!(html.matches(&format!("data-feature=\"{escaped}\"")).count() == 2, "{name}");
        assert!(html.contains(&format!("data-label=\"{escaped}\"")), "{name}");
    }
}

/// The name of every tag that opens or closes in `html`.
fn tags(html: &str) -> Vec<&str> {
    html.match_indices('<')
        .map(|(i, _)| {
            let rest = &html[i + 1..];
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || "/!-".contains(c))).unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn score_distribution_of_known_rows() {
    // One split: x < 0.5 → 1.0, else 3.0; margins add the base 0.25; identity link.
    let tree = Tree { output: 0, nodes: vec![Node::Split { feature: 0, test: Test::Lt(0.5), missing_yes: true, yes: 1, no: 2 }, Node::Leaf { value: 1.0 }, Node::Leaf { value: 3.0 }] };
    let ir = regression(vec![tree], 1, 1);
    let model = Model::load(&write(&ir).unwrap()).unwrap();
    let rows: Vec<Vec<f32>> = [0.0, 0.1, 1.0, 2.0, 7.0, f32::NAN].iter().map(|&x| vec![x]).collect();
    let r = report::build(&model.ensemble(), Origin::Artifact, Some(Rows { source: "rows.csv", rows: &rows })).unwrap();
    let d = r.scores.unwrap();
    assert_eq!((d.rows, d.outputs.len()), (6, 1));
    let o = &d.outputs[0];
    // Sorted: 1.25 ×3 (NaN goes yes), 3.25 ×3.
    assert_eq!(o.quantiles.len(), report::QUANTILES.len());
    assert_eq!((o.quantiles[0], *o.quantiles.last().unwrap()), (1.25, 3.25));
    let median = report::QUANTILES.iter().position(|&q| q == 0.5).unwrap();
    assert_eq!(o.quantiles[median], 2.25);
    assert_eq!(o.mean, 2.25);
    assert_eq!(o.non_finite, 0);
    assert_eq!(o.histogram.first().unwrap().count, 3);
    assert_eq!(o.histogram.last().unwrap().count, 3);
    assert_eq!(o.histogram.iter().map(|b| b.count).sum::<usize>(), 6);
}
