//! edgescore's evaluator as a bare wasm module: no proxy-wasm ABI, no request features, just
//! `TreeEnsemble::score` over rows, so a host can time the same loop in wasm and natively
//! (benches/src/bin/shape_wasm.rs, driven by benches/shapes).
//!
//! Protocol: the host asks for a buffer of `len` bytes (`guest_buffer`), writes into it, then
//! calls `guest_load_model(len)` with an `.esm` artifact, `guest_load_rows(len)` with raw
//! little-endian f32 rows (n_features per row, NaN = missing), and `guest_score(passes)`, which
//! scores every row one call at a time, `passes` times over. `guest_outputs(row)` scores one row
//! and returns a pointer to its outputs, `guest_margins(row)` to its margins before the link (f64),
//! for checking them against the native evaluator.

use edgescore_core::{Model, MAX_OUTPUTS};
use std::cell::RefCell;

#[derive(Default)]
struct State {
    buffer: Vec<u8>,
    model: Option<Model>,
    rows: Vec<Vec<f32>>,
    out: Vec<f32>,
    margins: Vec<f64>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

#[no_mangle]
pub extern "C" fn guest_buffer(len: u32) -> *mut u8 {
    STATE.with_borrow_mut(|s| {
        s.buffer.clear();
        s.buffer.resize(len as usize, 0);
        s.buffer.as_mut_ptr()
    })
}

/// The model's number of outputs, or -1 if the artifact does not load.
#[no_mangle]
pub extern "C" fn guest_load_model(len: u32) -> i32 {
    STATE.with_borrow_mut(|s| {
        s.model = s.buffer.get(..len as usize).and_then(|b| Model::load(b).ok());
        s.rows.clear();
        match &s.model {
            Some(m) => {
                s.out = vec![0.0; m.ensemble().n_outputs().min(MAX_OUTPUTS)];
                s.margins = vec![0.0; s.out.len()];
                s.out.len() as i32
            }
            None => -1,
        }
    })
}

/// The number of rows loaded, or -1 without a model or with a ragged buffer.
#[no_mangle]
pub extern "C" fn guest_load_rows(len: u32) -> i32 {
    STATE.with_borrow_mut(|s| {
        let Some(n) = s.model.as_ref().map(|m| m.ensemble().n_features()) else { return -1 };
        let Some(bytes) = s.buffer.get(..len as usize) else { return -1 };
        if n == 0 || bytes.len() % (4 * n) != 0 {
            return -1;
        }
        let values: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        s.rows = values.chunks_exact(n).map(<[f32]>::to_vec).collect();
        s.rows.len() as i32
    })
}

/// Scores every row `passes` times, one call per row; the sum of the first outputs (so the
/// work cannot be dropped), or NaN on a scoring error.
#[no_mangle]
pub extern "C" fn guest_score(passes: u32) -> f64 {
    STATE.with_borrow_mut(|s| {
        let State { model, rows, out, .. } = s;
        let Some(model) = model else { return f64::NAN };
        let e = model.ensemble();
        let mut sink = 0f64;
        for _ in 0..passes {
            for row in rows.iter() {
                if e.score(row, out).is_err() {
                    return f64::NAN;
                }
                sink += out[0] as f64;
            }
        }
        sink
    })
}

/// Scores row `i` and returns a pointer to its outputs (`guest_load_model`'s count of f32),
/// or null.
#[no_mangle]
pub extern "C" fn guest_outputs(i: u32) -> *const f32 {
    STATE.with_borrow_mut(|s| {
        let State { model, rows, out, .. } = s;
        match (model, rows.get(i as usize)) {
            (Some(m), Some(row)) if m.ensemble().score(row, out).is_ok() => out.as_ptr(),
            _ => std::ptr::null(),
        }
    })
}

/// Row `i`'s margins before the link function (`TreeEnsemble::margins`, f64): a pointer to
/// `guest_load_model`'s count of them, or null. Probabilities hide large margins' differences
/// (a sigmoid is 1.0 in f32 from 17 on); margins do not.
#[no_mangle]
pub extern "C" fn guest_margins(i: u32) -> *const f64 {
    STATE.with_borrow_mut(|s| {
        let State { model, rows, margins, .. } = s;
        match (model, rows.get(i as usize)) {
            (Some(m), Some(row)) if m.ensemble().margins(row, margins).is_ok() => margins.as_ptr(),
            _ => std::ptr::null(),
        }
    })
}
