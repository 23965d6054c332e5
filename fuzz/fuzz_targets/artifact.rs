//! Arbitrary bytes → `Model::load`. Whatever loads is scored (NaN, ±inf, zeros, values taken
//! from the input and from the model's own split points), its strings read, and everything
//! cross-checked against an independent bounds-checked walk (`oracle::exercise`).
//!
//! Raw bytes almost never carry a valid checksum, so each input is also tried a second time
//! with `file_len` and the checksum re-sealed: libFuzzer's generic mutations of the seed
//! artifacts then reach the structural checks too.
#![no_main]

use edgescore_core::artifact::layout::HEADER_LEN;
use edgescore_core::Model;
use edgescore_fuzz::{mutate, oracle};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = Model::load(data) {
        oracle::exercise(&model, data);
    }
    if data.len() >= HEADER_LEN {
        let mut b = data.to_vec();
        let len = b.len() as u64;
        b[16..24].copy_from_slice(&len.to_le_bytes());
        mutate::reseal(&mut b);
        if let Ok(model) = Model::load(&b) {
            oracle::exercise(&model, &b);
        }
    }
});
