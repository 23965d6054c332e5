//! What a per-request reason costs, on a row of the reference "bot" models (XGBoost 300×depth
//! 6, LightGBM 300×63 leaves, compiled with node values): `score` (what every request runs);
//! `explain` (what an explained request adds: a walk that adds up each reached leaf's
//! credits, the ≤ 1 µs target). Override the models with
//! EDGESCORE_BENCH_MODELS="path/a.json,path/b.esm" and the rows with EDGESCORE_BENCH_ROWS.
//!
//! cargo bench -p edgescore-benches --bench explain

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use edgescore_benches::{compile, repo_root, rows};
use std::hint::black_box;
use std::path::PathBuf;

fn explain(c: &mut Criterion) {
    let root = repo_root();
    let models: Vec<PathBuf> = match std::env::var("EDGESCORE_BENCH_MODELS") {
        Ok(list) => list.split(',').map(PathBuf::from).collect(),
        Err(_) => vec![root.join("models/reference/bot_xgb.json"), root.join("models/reference/bot_lgb.txt")],
    };
    let rows_path = std::env::var("EDGESCORE_BENCH_ROWS").map(PathBuf::from).unwrap_or(root.join("models/reference/rows.csv"));
    let mut group = c.benchmark_group("explain");
    group.throughput(Throughput::Elements(1));
    for path in models {
        let model = if path.extension().is_some_and(|x| x == "esm") {
            edgescore_core::Model::load(&std::fs::read(&path).unwrap()).unwrap()
        } else {
            compile(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()))
        };
        let rows = rows(&rows_path, &model).unwrap();
        let model = model.with_explainer();
        let e = model.ensemble();
        assert!(e.explainer().is_some(), "{}: compiled without node values", path.display());
        let mut out = vec![0f32; e.n_outputs()];
        let mut credits = vec![0f64; e.explain_len()];
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut i = 0;
        group.bench_function(format!("{name}/score"), |b| {
            b.iter(|| {
                i = (i + 1) % rows.len();
                e.score(black_box(&rows[i]), &mut out).unwrap();
                black_box(out[0])
            })
        });
        // What an explained request adds to its scoring.
        group.bench_function(format!("{name}/explain"), |b| {
            b.iter(|| {
                i = (i + 1) % rows.len();
                e.explain(black_box(&rows[i]), &mut credits).unwrap();
                black_box(credits[0])
            })
        });
    }
    group.finish();
}

criterion_group!(benches, explain);
criterion_main!(benches);
