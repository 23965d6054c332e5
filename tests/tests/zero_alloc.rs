//! The hot path never touches the global allocator: scoring every row of every fixture model
//! (and the reference bot model) allocates 0 blocks and 0 bytes, as dhat counts them.

use edgescore_tests::fixtures;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[test]
fn scoring_allocates_nothing() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let mut prepared = Vec::new();
    for f in fixtures("") {
        let model = f.compile().unwrap();
        let rows = f.rows(&model).unwrap();
        // The same model with QuickScorer's bitvectors on every row they can score.
        let scan = model.clone().with_bitvectors_on_every_row();
        prepared.push((format!("{} (bitvectors)", f.name), scan, rows.clone()));
        prepared.push((f.name, model, rows));
    }
    assert!(prepared.len() >= 10, "fixtures missing: found {}", prepared.len());
    let scanned = prepared.iter().filter(|p| p.1.ensemble().uses_bitvectors()).count();
    assert!(scanned >= 10, "only {scanned} fixtures scored through bitvectors");
    let mut out32 = vec![0f32; edgescore_core::MAX_OUTPUTS];
    let mut out64 = vec![0f64; edgescore_core::MAX_OUTPUTS];

    let before = dhat::HeapStats::get();
    let mut checksum = 0f64;
    for (_, model, rows) in &prepared {
        let e = model.ensemble();
        for row in rows {
            e.score(row, &mut out32).unwrap();
            e.score_f64(row, &mut out64).unwrap();
            e.margins(row, &mut out64).unwrap();
            // Linear leaves on infinite features give infinite or NaN scores: count only the
            // finite ones (the sum only keeps the calls from being optimised away).
            checksum += [out32[0] as f64, out64[0]].iter().filter(|v| v.is_finite()).sum::<f64>();
        }
    }
    let after_models = dhat::HeapStats::get();
    dhat::assert_eq!(after_models.total_blocks - before.total_blocks, 0);
    dhat::assert_eq!(after_models.total_bytes - before.total_bytes, 0);

    // The multi-model path: one shared vector, every model gathers its own features.
    let first = &prepared[0];
    let names: Vec<String> = {
        let e = first.1.ensemble();
        (0..e.n_features()).rev().map(|i| e.feature_name(i).to_string()).collect()
    };
    let mut set = edgescore_core::ModelSet::new(names);
    set.push(first.1.as_bytes()).unwrap();
    let shared: Vec<f32> = first.2[0].iter().rev().copied().collect();
    let before_set = dhat::HeapStats::get();
    for _ in 0..100 {
        set.score(0, &shared, &mut out32).unwrap();
        checksum += out32[0] as f64;
    }
    let after = dhat::HeapStats::get();
    dhat::assert_eq!(after.total_blocks - before_set.total_blocks, 0);
    dhat::assert_eq!(after.total_bytes - before_set.total_bytes, 0);
    assert!(checksum.is_finite());
}
