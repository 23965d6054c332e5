//! `shape-wasm MODEL.esm GUEST.wasm ROWS.csv [SECONDS]`: the same single-row loop as
//! `peer-native` (cycle through the rows, one `TreeEnsemble::score` call per row), natively and
//! inside wasmtime, for the shape matrix's wasm/native ratio (benches/shapes).
//!
//! GUEST.wasm is benches/score_guest built for wasm32-wasip1: the evaluator alone, no proxy-wasm
//! ABI. It runs on a bare wasmtime 48 instance with the engine settings of
//! benches/benches/filter_wasm.rs (`Config::new()` + Cranelift `OptLevel::Speed`), every import
//! a trap. The wasm loop is one export call per pass over the rows, so the call boundary costs
//! nothing per row.
//!
//! First every row's outputs are compared between wasm and native (they must be equal), then
//! native and wasm are each timed for SECONDS (warm-up pass first). Output: one JSON line.
//! `EDGESCORE_PASSES=N` runs exactly N passes of each instead (no warm-up), in the functions
//! `native_passes` and `wasm_passes`, for per-row counts under callgrind (benches/shapes/floor.py).

use anyhow::{ensure, Context, Result};
use edgescore_core::Model;
use std::hint::black_box;
use std::time::{Duration, Instant};
use edgescore_proxy_host::score_guest::{ScoreGuest, ScoreGuestModule};

/// Warm-up pass, then whole passes until the budget is spent: (ns per row, rows scored).
fn time_passes(rows: usize, budget: Duration, mut pass: impl FnMut() -> Result<f64>) -> Result<(f64, u64)> {
    let mut sink = pass()?;
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < budget {
        sink += pass()?;
        calls += rows as u64;
    }
    black_box(sink);
    ensure!(sink.is_finite(), "scoring failed");
    Ok((start.elapsed().as_nanos() as f64 / calls as f64, calls))
}

/// `passes` passes over the rows natively: the sum of the first outputs.
#[inline(never)]
fn native_passes(e: &edgescore_core::TreeEnsemble, rows: &[Vec<f32>], out: &mut [f32], passes: u64) -> Result<f64> {
    let mut sink = 0f64;
    for _ in 0..passes {
        for row in rows {
            e.score(black_box(row), out)?;
            sink += out[0] as f64;
        }
    }
    Ok(sink)
}

/// `passes` passes over the rows in the guest, one export call per pass.
#[inline(never)]
fn wasm_passes(guest: &mut ScoreGuest, passes: u64) -> Result<f64> {
    let mut sink = 0f64;
    for _ in 0..passes {
        sink += guest.score(1)?;
    }
    Ok(sink)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    ensure!(args.len() >= 4, "usage: shape-wasm MODEL.esm GUEST.wasm ROWS.csv [SECONDS]");
    let seconds: f64 = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(1.0);
    let esm = std::fs::read(&args[1]).with_context(|| format!("cannot read {}", args[1]))?;
    let model = Model::load(&esm)?;
    let e = model.ensemble();
    let rows = edgescore_benches::rows(args[3].as_ref(), &model)?;
    ensure!(!rows.is_empty(), "no rows");
    let n_out = e.n_outputs();
    let mut guest = ScoreGuestModule::compile(args[2].as_ref())?.instantiate(&esm, &rows)?;

    let mut out = vec![0f32; n_out];
    let mut max_diff = 0f64;
    for (i, row) in rows.iter().enumerate() {
        e.score(row, &mut out)?;
        let w = guest.outputs(i as u32)?;
        for (a, b) in out.iter().zip(&w) {
            max_diff = max_diff.max((*a as f64 - *b as f64).abs());
        }
    }

    if let Some(passes) = std::env::var("EDGESCORE_PASSES").ok().and_then(|p| p.parse::<u64>().ok()) {
        let sink = native_passes(&e, &rows, &mut out, passes)? + wasm_passes(&mut guest, passes)?;
        ensure!(black_box(sink).is_finite(), "scoring failed");
        println!("{{\"peer\": \"shape-wasm\", \"passes\": {passes}, \"rows\": {}}}", rows.len());
        return Ok(());
    }
    let budget = Duration::from_secs_f64(seconds);
    let (native_ns, native_calls) = time_passes(rows.len(), budget, || native_passes(&e, &rows, &mut out, 1))?;
    let (wasm_ns, wasm_calls) = time_passes(rows.len(), budget, || wasm_passes(&mut guest, 1))?;
    println!(
        "{{\"peer\": \"shape-wasm\", \"native_ns_per_row\": {native_ns:.1}, \"wasm_ns_per_row\": {wasm_ns:.1}, \
         \"native_calls\": {native_calls}, \"wasm_calls\": {wasm_calls}, \"max_abs_diff\": {max_diff:e}}}"
    );
    Ok(())
}
