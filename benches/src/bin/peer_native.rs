//! `peer-native MODEL ROWS.csv [SECONDS]`: edgescore's single-row latency, measured the way
//! `benches/peers/run.py` measures every peer (cycle through the rows, one row per call, report
//! the mean ns per call), printed as one JSON line for the peer table.

use std::hint::black_box;
use std::time::{Duration, Instant};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(args.len() >= 3, "usage: peer-native MODEL ROWS.csv [SECONDS]");
    let seconds: f64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(2.0);
    let model = edgescore_benches::compile(args[1].as_ref())?;
    let rows = edgescore_benches::rows(args[2].as_ref(), &model)?;
    let e = model.ensemble();
    let mut out = vec![0f32; e.n_outputs()];
    // Warm up, then time whole passes over the rows until the budget is spent.
    for row in &rows {
        e.score(row, &mut out)?;
    }
    let budget = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut calls = 0u64;
    let mut sink = 0f32;
    // EDGESCORE_PASSES=N runs exactly N passes instead, for instruction counts under callgrind.
    let passes: Option<u64> = std::env::var("EDGESCORE_PASSES").ok().and_then(|p| p.parse().ok());
    while passes.map_or(start.elapsed() < budget, |p| calls < p * rows.len() as u64) {
        for row in &rows {
            e.score(black_box(row), &mut out)?;
            sink += out[0];
        }
        calls += rows.len() as u64;
    }
    let ns = start.elapsed().as_nanos() as f64 / calls as f64;
    black_box(sink);
    println!("{{\"peer\": \"edgescore\", \"ns_per_row\": {ns:.1}, \"calls\": {calls}}}");
    Ok(())
}
