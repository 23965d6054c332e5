//! CatBoost's oblivious trees in their own layout (format 3, `tree_layout::OBLIVIOUS`: d tests
//! giving a leaf index) against the same trees expanded into full binary node trees (the
//! layout every CatBoost model had before), single row, same rows, one run. The expanded IR is
//! built here from the oblivious one, so both artifacts hold exactly the same model; their
//! margins are checked equal before timing.
//!
//! Models: the CatBoost fixtures (`tests/models/catboost_*`), or EDGESCORE_BENCH_MODELS
//! ("path/a.cbm,path/b.json", rows from EDGESCORE_BENCH_ROWS or random).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use edgescore_benches::repo_root;
use edgescore_compile::ir::{ModelIr, Node, Tree};
use edgescore_compile::readers::Format;
use edgescore_core::Model;
use std::hint::black_box;
use std::path::PathBuf;

/// The full binary tree an oblivious tree stands for: level k's split repeated 2^k times,
/// breadth first, `yes` = bit k set; leaf Σ bit_k << k.
fn expanded(tree: &Tree) -> Tree {
    let [Node::Oblivious { levels, leaves }] = &tree.nodes[..] else { return tree.clone() };
    let depth = levels.len();
    let mut nodes = Vec::with_capacity((2 << depth) - 1);
    for (k, l) in levels.iter().enumerate() {
        let next = (2usize << k) - 1;
        for p in 0..1usize << k {
            nodes.push(Node::Split { feature: l.feature, test: l.test.clone(), missing_yes: l.missing_yes, yes: (next + 2 * p + 1) as u32, no: (next + 2 * p) as u32 });
        }
    }
    for p in 0..1usize << depth {
        // p's most significant bit is level 0's bit.
        let leaf = (0..depth).fold(0usize, |acc, j| acc | ((p >> (depth - 1 - j)) & 1) << j);
        nodes.push(Node::Leaf { value: leaves[leaf] });
    }
    Tree { output: tree.output, nodes }
}

fn random_rows(e: &edgescore_core::TreeEnsemble, n: usize) -> Vec<Vec<f32>> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            (0..e.n_features())
                .map(|j| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    let u = (s >> 11) as f64 / (1u64 << 53) as f64;
                    if e.features()[j].kind == edgescore_core::artifact::layout::FEATURE_CATEGORICAL { (u * 12.0).floor() as f32 } else { (u * 6.0 - 3.0) as f32 }
                })
                .collect()
        })
        .collect()
}

fn layouts(c: &mut Criterion) {
    let root = repo_root();
    let models: Vec<(PathBuf, Option<PathBuf>)> = match std::env::var("EDGESCORE_BENCH_MODELS") {
        Ok(list) => list.split(',').map(|p| (PathBuf::from(p), std::env::var("EDGESCORE_BENCH_ROWS").ok().map(PathBuf::from))).collect(),
        Err(_) => ["catboost_binary", "catboost_multiclass", "catboost_regression", "catboost_ctr_binary", "catboost_ctr_multiclass"]
            .iter()
            .map(|m| (root.join("tests/models").join(m).join("model.json"), Some(root.join("tests/models").join(m).join("rows.csv"))))
            .collect(),
    };
    let mut group = c.benchmark_group("catboost_layout");
    group.throughput(Throughput::Elements(1));
    for (path, rows_path) in models {
        let ir = edgescore_compile::load_model(&path, Format::Auto).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        let flat = ModelIr { trees: ir.trees.iter().map(expanded).collect(), ..ir.clone() };
        let oblivious = Model::load(&edgescore_compile::compile(&ir).unwrap()).unwrap();
        let expanded = Model::load(&edgescore_compile::compile(&flat).unwrap()).unwrap();
        let (eo, ee) = (oblivious.ensemble(), expanded.ensemble());
        let rows = match &rows_path {
            Some(p) => edgescore_compile::rows::read_rows(p, &eo).unwrap(),
            None => random_rows(&eo, 1000),
        };
        let (mut a, mut b) = (vec![0f64; eo.n_outputs()], vec![0f64; ee.n_outputs()]);
        for r in &rows {
            eo.margins(r, &mut a).unwrap();
            ee.margins(r, &mut b).unwrap();
            for (x, y) in a.iter().zip(&b) {
                assert!((x - y).abs() <= 1e-12 * (1.0 + x.abs()), "{}: layouts disagree: {x} vs {y}", path.display());
            }
        }
        let name = path.parent().and_then(|p| p.file_name()).unwrap_or_default().to_string_lossy().into_owned();
        println!("{name}: {} trees; oblivious {} nodes / {} bytes, expanded {} nodes / {} bytes", eo.trees().len(), eo.nodes().len(), eo.size_bytes(), ee.nodes().len(), ee.size_bytes());
        for (layout, e) in [("oblivious", &eo), ("expanded", &ee)] {
            let mut i = 0;
            let mut out = vec![0f32; e.n_outputs()];
            group.bench_function(format!("{name}/{layout}"), |bch| {
                bch.iter(|| {
                    i = (i + 1) % rows.len();
                    e.score(black_box(&rows[i]), &mut out).unwrap();
                    black_box(out[0])
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, layouts);
criterion_main!(benches);
