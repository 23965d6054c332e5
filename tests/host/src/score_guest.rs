//! The evaluator alone as a wasm module (benches/score_guest: `TreeEnsemble::score` over rows,
//! no proxy-wasm ABI) on a bare wasmtime instance, every import a trap. The shape matrix times
//! it against the same loop natively (`shape-wasm`); the tests check that it scores as the
//! native evaluator does, bit for bit, where the two targets compile different code.

use anyhow::{ensure, Context, Result};
use std::path::Path;
use wasmtime::{Engine, Instance, Linker, Memory, Module, OptLevel, Store, TypedFunc};

/// The score guest compiled once (Cranelift at `OptLevel::Speed`, as
/// benches/benches/filter_wasm.rs runs the filter), for any number of instances.
pub struct ScoreGuestModule {
    engine: Engine,
    module: Module,
}

impl ScoreGuestModule {
    pub fn compile(wasm: &Path) -> Result<ScoreGuestModule> {
        let mut cfg = wasmtime::Config::new();
        cfg.cranelift_opt_level(OptLevel::Speed);
        let engine = Engine::new(&cfg)?;
        let module = Module::from_file(&engine, wasm)?;
        Ok(ScoreGuestModule { engine, module })
    }

    /// A new instance with the `esm` artifact and `rows` loaded.
    pub fn instantiate(&self, esm: &[u8], rows: &[Vec<f32>]) -> Result<ScoreGuest> {
        let mut linker = Linker::new(&self.engine);
        linker.define_unknown_imports_as_traps(&self.module)?;
        let mut store = Store::new(&self.engine, ());
        let instance = linker.instantiate(&mut store, &self.module)?;
        let memory = instance.get_memory(&mut store, "memory").context("no memory export")?;
        let score = instance.get_typed_func::<u32, f64>(&mut store, "guest_score")?;
        let mut g = ScoreGuest { store, memory, instance, score, n_outputs: 0 };
        g.put(esm)?;
        let load_model = g.instance.get_typed_func::<u32, i32>(&mut g.store, "guest_load_model")?;
        let n_outputs = load_model.call(&mut g.store, esm.len() as u32)?;
        ensure!(n_outputs > 0, "the guest refused the artifact");
        g.n_outputs = n_outputs as usize;
        let bytes: Vec<u8> = rows.iter().flatten().flat_map(|v| v.to_le_bytes()).collect();
        g.put(&bytes)?;
        let load_rows = g.instance.get_typed_func::<u32, i32>(&mut g.store, "guest_load_rows")?;
        ensure!(load_rows.call(&mut g.store, bytes.len() as u32)? == rows.len() as i32, "the guest refused the rows");
        Ok(g)
    }
}

/// One instance of the score guest with a model and rows loaded.
pub struct ScoreGuest {
    store: Store<()>,
    memory: Memory,
    instance: Instance,
    score: TypedFunc<u32, f64>,
    n_outputs: usize,
}

impl ScoreGuest {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        let buffer = self.instance.get_typed_func::<u32, u32>(&mut self.store, "guest_buffer")?;
        let ptr = buffer.call(&mut self.store, bytes.len() as u32)?;
        self.memory.write(&mut self.store, ptr as usize, bytes)?;
        Ok(())
    }

    /// Row `row`'s outputs, as `TreeEnsemble::score` writes them in the guest.
    pub fn outputs(&mut self, row: u32) -> Result<Vec<f32>> {
        let bytes = self.row_bytes("guest_outputs", row, 4)?;
        Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect())
    }

    /// Row `row`'s margins before the link function, as `TreeEnsemble::margins` writes them in
    /// the guest.
    pub fn margins(&mut self, row: u32) -> Result<Vec<f64>> {
        let bytes = self.row_bytes("guest_margins", row, 8)?;
        Ok(bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect())
    }

    /// The model's outputs' worth of `width`-byte values at the pointer `export(row)` returns.
    fn row_bytes(&mut self, export: &str, row: u32, width: usize) -> Result<Vec<u8>> {
        let f = self.instance.get_typed_func::<u32, u32>(&mut self.store, export)?;
        let ptr = f.call(&mut self.store, row)? as usize;
        ensure!(ptr != 0, "the guest could not score row {row} ({export})");
        let mut buf = vec![0u8; width * self.n_outputs];
        self.memory.read(&self.store, ptr, &mut buf)?;
        Ok(buf)
    }

    /// `passes` passes over the rows in one export call, one `score` call per row: the sum of
    /// the first outputs (NaN if a row could not be scored).
    #[inline]
    pub fn score(&mut self, passes: u32) -> Result<f64> {
        Ok(self.score.call(&mut self.store, passes)?)
    }
}
