//! IR model from the input → `write` → `Model::load` → margins must equal a straightforward
//! reference evaluation of the IR (f64 comparisons, `ModelIr::try_reference`) within 1e-12
//! relative (the writer reorders trees by depth, so sums are reordered). Some generated IR is
//! deliberately malformed: the writer may refuse it, but whatever it writes must load.
#![no_main]

use arbitrary::Unstructured;
use edgescore_compile::drift::DriftReference;
use edgescore_compile::write::{write, write_for, write_with_reference};
use edgescore_compile::ir::{ModelIr, Node, Test};
use edgescore_core::artifact::layout::FORMAT_VERSION;
use edgescore_core::Model;
use edgescore_fuzz::gen::{self, Cfg};
use edgescore_fuzz::oracle::{self, Rng};
use edgescore_fuzz::reference::close;
use libfuzzer_sys::fuzz_target;

/// Per feature, values on and next to the IR's split points (as f32, the way rows arrive).
fn interesting(ir: &ModelIr) -> Vec<Vec<f32>> {
    let mut per = vec![Vec::new(); ir.features.len()];
    let splits = ir.trees.iter().flat_map(|t| &t.nodes).flat_map(|n| match n {
        Node::Split { feature, test, .. } => vec![(feature, test)],
        Node::Oblivious { levels, .. } => levels.iter().map(|l| (&l.feature, &l.test)).collect(),
        _ => Vec::new(),
    });
    {
        for (feature, test) in splits {
            let Some(list) = per.get_mut(*feature as usize) else { continue };
            if list.len() > 96 {
                continue;
            }
            match test {
                Test::Lt(t) | Test::Le(t) | Test::Gt(t) | Test::Ge(t) | Test::Eq(t) | Test::Ne(t) | Test::LeZeroAsMissing(t) => {
                    let f = *t as f32;
                    list.extend([f, f.next_up(), f.next_down()]);
                }
                Test::Member { categories } => {
                    for &c in categories.iter().take(4) {
                        list.extend([c as f32, c as f32 + 0.5, -(c as f32)]);
                    }
                }
                Test::InSet { categories, invalid_at_or_below } => {
                    list.extend([*invalid_at_or_below, invalid_at_or_below.next_up(), invalid_at_or_below.next_down()]);
                    for &c in categories.iter().take(4) {
                        list.extend([c as f32, c as f32 + 0.5, c as f32 - 0.5, c as f32 + 1.0]);
                    }
                }
            }
        }
    }
    per
}

fuzz_target!(init: edgescore_fuzz::writer_pool::run_writer_inline(), |data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(allow_bad) = gen::rare(&mut u, 8) else { return };
    let Ok(ir) = gen::model(&mut u, Cfg { allow_bad }) else { return };
    let Ok(bytes) = write(&ir) else { return };
    let model = match Model::load(&bytes) {
        Ok(m) => m,
        Err(e) => panic!("writer produced an artifact the validator refuses: {e} (allow_bad={allow_bad})\nIR: {ir:#?}"),
    };
    let e = model.ensemble();
    assert_eq!(e.n_features(), ir.features.len());
    assert_eq!(e.n_outputs(), ir.n_outputs());
    assert_eq!(e.name(), ir.name);
    assert_eq!(e.version(), ir.version);
    assert_eq!(e.objective(), ir.objective);
    for (i, f) in ir.features.iter().enumerate() {
        assert_eq!(e.feature_name(i), f.name);
    }
    assert_eq!(e.ua_fingerprints(), &ir.ua_fingerprints[..], "the UA fingerprint table read back");
    let mut rng = Rng::from_bytes(data);
    let per = interesting(&ir);
    let mut got = vec![0f64; e.n_outputs()];
    // The same model for filters without format 4 (`--max-format 3`): NaN tests instead of
    // NaN-low columns, the same trees in the same order, so the same margins bit for bit.
    let older = write_for(&ir, 3).ok().map(|b| Model::load(&b).expect("a format-3 write must load"));
    let mut got_older = vec![0f64; e.n_outputs()];
    let rows = oracle::rows(ir.features.len(), &per, u.take_rest(), &mut rng);
    for x in &rows {
        let x = x.as_slice();
        e.margins(x, &mut got).unwrap();
        if let Some(m) = &older {
            m.ensemble().margins(x, &mut got_older).unwrap();
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), got_older.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "NaN-low columns changed a margin (row {x:?})");
        }
        // The writer accepted the IR, so every tree walk must end on a leaf.
        let r = ir.try_reference(x).expect("reference walk failed on IR the writer accepted");
        let (want, mag) = (r.margins, r.magnitudes);
        for o in 0..got.len() {
            assert!(
                close(got[o], want[o], mag[o]),
                "output {o}: artifact margin {:e} != IR reference {:e} (row {x:?})\nIR: {ir:#?}",
                got[o],
                want[o]
            );
        }
    }
    oracle::exercise(&model, data);
    // The same model with a drift reference over these rows (format 6, or 7 with a UA
    // fingerprint table; `compile --reference`):
    // it must load and score the same, and the oracle counts rows with it.
    if data.first().is_some_and(|b| b & 1 == 1) && !rows.is_empty() {
        let bins = 1 + data.len() % 16;
        if let Ok(reference) = DriftReference::build(e, &rows, bins) {
            if let Ok(bytes) = write_with_reference(&ir, FORMAT_VERSION, Some(&reference)) {
                let with = Model::load(&bytes).unwrap_or_else(|err| panic!("a drift reference the validator refuses: {err}"));
                let mut margins = vec![0f64; e.n_outputs()];
                for x in &rows {
                    e.margins(x, &mut got).unwrap();
                    with.ensemble().margins(x, &mut margins).unwrap();
                    assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), margins.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "a drift reference changed a margin");
                }
                oracle::exercise(&with, data);
            }
        }
    }
});
