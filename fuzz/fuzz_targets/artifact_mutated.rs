//! A VALID artifact (an IR model generated from the input and written by
//! `artifact::write::write`, or one of a few real compiled models), then structure-aware
//! mutations from the input, optional fix-ups (header flags, tree depths, leaf numbering),
//! `file_len` and checksum re-sealed, then `Model::load`. With the checksum re-sealed every
//! structural check of the validator is reachable; whatever it accepts goes through
//! `oracle::exercise` (bounds-checked walk of every path, margins compared with the
//! evaluator's, strings, ModelSet). A panic, an out-of-bounds access (ASan / UB checks under
//! debug assertions), or an oracle mismatch on an accepted artifact is a bug.
#![no_main]

use arbitrary::Unstructured;
use edgescore_compile::write::write;
use edgescore_core::Model;
use edgescore_fuzz::gen::{self, Cfg};
use edgescore_fuzz::mutate::{self, Fixups, Layout, Mutation};
use edgescore_fuzz::oracle;
use libfuzzer_sys::fuzz_target;

const REAL: [&[u8]; 12] = [
    include_bytes!("../seeds/xgb_categorical.esm"),
    include_bytes!("../seeds/lgb_zero_missing.esm"),
    // Format 3: oblivious trees (with CTR features in the second).
    include_bytes!("../seeds/catboost_multiclass.esm"),
    include_bytes!("../seeds/catboost_ctr_binary.esm"),
    // Format 2: vector leaves, linear leaves, membership splits.
    include_bytes!("../seeds/xgb_vector_multiclass.esm"),
    include_bytes!("../seeds/lgb_linear.esm"),
    include_bytes!("../seeds/onnx5_member_logistic.esm"),
    // Format 4: NaN-low columns (node trees; oblivious trees). Format 5: zero-as-missing columns.
    include_bytes!("../seeds/xgb_nan_low.esm"),
    include_bytes!("../seeds/catboost_nan_low.esm"),
    include_bytes!("../seeds/lgb_zero_columns.esm"),
    // Format 6: node values and a drift reference. Format 7: the same with a UA fingerprint table.
    include_bytes!("../seeds/xgb_drift.esm"),
    include_bytes!("../seeds/xgb_ua_fingerprints.esm"),
];

fuzz_target!(init: edgescore_fuzz::writer_pool::run_writer_inline(), |data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(choice) = u.int_in_range(0usize..=REAL.len() + 14) else { return };
    let mut bytes = match REAL.get(choice) {
        Some(real) => real.to_vec(),
        None => {
            let Ok(ir) = gen::model(&mut u, Cfg { allow_bad: false }) else { return };
            match write(&ir) {
                Ok(b) => b,
                Err(_) => return,
            }
        }
    };
    // The unmutated artifact must load (the writer and validator agree on valid IR). The
    // embedded real models are skipped if they predate a layout change (regenerate the seeds).
    match Model::load(&bytes) {
        Ok(_) => {}
        Err(e) if choice < REAL.len() => {
            debug_assert!(false, "embedded seed {choice} no longer loads ({e}): regenerate fuzz/seeds");
            return;
        }
        Err(e) => panic!("freshly written artifact refused: {e}"),
    }
    let layout = Layout::of(&bytes).expect("written artifact without a section table");
    let Ok(fixups) = u.arbitrary::<Fixups>() else { return };
    let mut n = 0;
    // Stop while enough bytes remain: an exhausted `Unstructured` yields variant 0 with zero
    // fields (byte 0 := 0), which would only ever break the magic.
    while u.len() >= 6 && n < 12 {
        let Ok(m) = u.arbitrary::<Mutation>() else { break };
        mutate::apply(&mut bytes, &layout, m);
        n += 1;
    }
    mutate::seal(&mut bytes, &layout, fixups);
    let loaded = Model::load(&bytes);
    stats(n, &loaded);
    if let Ok(model) = loaded {
        oracle::exercise(&model, data);
    }
});

/// With `EDGESCORE_FUZZ_STATS=1`: how many mutated artifacts the validator accepted, and the
/// most frequent rejection reasons (to see which checks the mutations reach).
fn stats(n_mutations: usize, r: &Result<Model, edgescore_core::ArtifactError>) {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static S: Mutex<Option<(u64, u64, HashMap<String, u64>)>> = Mutex::new(None);
    if std::env::var_os("EDGESCORE_FUZZ_STATS").is_none() {
        return;
    }
    let mut g = S.lock().unwrap();
    let (total, ok, reasons) = g.get_or_insert_with(|| (0, 0, HashMap::new()));
    *total += 1;
    match r {
        Ok(_) if n_mutations > 0 => *ok += 1,
        Ok(_) => {}
        Err(e) => {
            let key: String = e.to_string().chars().filter(|c| !c.is_ascii_digit()).collect();
            *reasons.entry(key).or_default() += 1;
        }
    }
    if *total % 50_000 == 0 {
        let mut v: Vec<_> = reasons.iter().collect();
        v.sort_by_key(|(_, c)| std::cmp::Reverse(**c));
        eprintln!("STATS total {total}, accepted after >=1 mutation {ok}");
        for (k, c) in v {
            eprintln!("STATS {c:>8} {k}");
        }
    }
}
