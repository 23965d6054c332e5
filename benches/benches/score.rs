//! Single-row scoring of the reference "bot" models (XGBoost 300×depth 6, LightGBM 300×63
//! leaves, 30 request-like features). Rows cycle so branch predictors cannot learn one path.
//! Override the models with EDGESCORE_BENCH_MODELS="path/a.json,path/b.txt" and the rows with
//! EDGESCORE_BENCH_ROWS.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use edgescore_benches::{compile, repo_root, rows};
use std::hint::black_box;
use std::path::PathBuf;

fn single_row(c: &mut Criterion) {
    let root = repo_root();
    let models: Vec<PathBuf> = match std::env::var("EDGESCORE_BENCH_MODELS") {
        Ok(list) => list.split(',').map(PathBuf::from).collect(),
        Err(_) => vec![root.join("models/reference/bot_xgb.json"), root.join("models/reference/bot_lgb.txt")],
    };
    let rows_path = std::env::var("EDGESCORE_BENCH_ROWS").map(PathBuf::from).unwrap_or(root.join("models/reference/rows.csv"));
    let mut group = c.benchmark_group("single_row");
    group.throughput(Throughput::Elements(1));
    for path in models {
        let model = compile(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
        let rows = rows(&rows_path, &model).unwrap();
        let e = model.ensemble();
        let mut out = vec![0f32; e.n_outputs()];
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut i = 0;
        group.bench_function(&name, |b| {
            b.iter(|| {
                i = (i + 1) % rows.len();
                e.score(black_box(&rows[i]), &mut out).unwrap();
                black_box(out[0])
            })
        });
    }
    group.finish();
}

criterion_group!(benches, single_row);
criterion_main!(benches);
