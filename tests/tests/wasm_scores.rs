//! The evaluator compiled to wasm scores every row as it does natively, bit for bit: the score
//! guest (benches/score_guest: `TreeEnsemble::score` alone) in wasmtime, against the native
//! `TreeEnsemble::score`. The two targets' compilers differ everywhere, and the source differs
//! where a wasm engine needs other code (`ensemble::category_code`'s clamp) or groups lockstep
//! lanes otherwise (`TreeEnsemble::walk_lockstep`).

use anyhow::{ensure, Context, Result};
use edgescore_compile::write::write;
use edgescore_core::Model;
use edgescore_proxy_host::cargo::score_guest_wasm;
use edgescore_proxy_host::score_guest::ScoreGuestModule;
use edgescore_tests::category_sets::{edge_rows, model, tree_counts};
use edgescore_tests::fixtures;
use std::sync::OnceLock;

fn guest() -> &'static ScoreGuestModule {
    static GUEST: OnceLock<ScoreGuestModule> = OnceLock::new();
    GUEST.get_or_init(|| ScoreGuestModule::compile(&score_guest_wasm().unwrap()).unwrap())
}

/// Every row's outputs and margins, wasm against native, as bits.
fn assert_wasm_scores_as_native(what: &str, model: &Model, rows: &[Vec<f32>]) -> Result<()> {
    let e = model.ensemble();
    let mut wasm = guest().instantiate(model.as_bytes(), rows).with_context(|| what.to_string())?;
    let (mut native, mut native_margins) = (vec![0f32; e.n_outputs()], vec![0f64; e.n_outputs()]);
    for (i, row) in rows.iter().enumerate() {
        e.score(row, &mut native)?;
        e.margins(row, &mut native_margins)?;
        let (got, got_margins) = (wasm.outputs(i as u32)?, wasm.margins(i as u32)?);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let bits64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        ensure!(bits(&got) == bits(&native), "{what}: row {i} {row:?}: wasm {got:?}, native {native:?}");
        ensure!(bits64(&got_margins) == bits64(&native_margins), "{what}: row {i} {row:?}: wasm margins {got_margins:?}, native {native_margins:?}");
    }
    Ok(())
}

#[test]
fn every_fixture_scores_in_wasm_as_natively() {
    let mut checked = 0;
    for f in fixtures("") {
        let model = match f.compile() {
            Ok(model) => model,
            // Fixtures the compiler refuses have no artifact to score.
            Err(_) if f.name.ends_with("_refuse") => continue,
            Err(e) => panic!("{}: {e:#}", f.name),
        };
        let rows = f.rows(&model).unwrap();
        assert_wasm_scores_as_native(&f.name, &model, &rows).unwrap();
        checked += 1;
    }
    // 53 fixtures today: a guard against a loader that finds none.
    assert!(checked >= 50, "only {checked} fixtures scored");
}

#[test]
fn category_sets_score_every_edge_value_in_wasm_as_natively() {
    let rows = edge_rows();
    for member in [false, true] {
        for n_trees in tree_counts() {
            let compiled = Model::load(&write(&model(n_trees, member)).unwrap()).unwrap();
            assert_wasm_scores_as_native(&format!("{n_trees} trees, member {member}"), &compiled, &rows).unwrap();
        }
    }
}
