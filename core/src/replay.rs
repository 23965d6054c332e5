//! Replays recorded requests through a [`Scorer`]: the one scoring loop that
//! `benches/benches/filter_wasm.rs` runs both natively and inside the `.wasm` (through the
//! filter crate's `bench-exports`), so that the two sides do exactly the same work (parse the
//! header map, compute the features, run every model, decide, write the header values).

use crate::ensemble::ScoreError;
use crate::request::OwnedRequest;
use crate::scorer::Scorer;

/// Scores every request `passes` times, in order. Returns a checksum of every score's bits and
/// every decision, in order, so that callers can check two runs did the same work (and so the
/// work cannot be optimised away). Allocates nothing.
pub fn score_all(scorer: &mut Scorer, requests: &[OwnedRequest], passes: u32) -> Result<u64, ScoreError> {
    let mut sum = 0xcbf2_9ce4_8422_2325u64;
    for _ in 0..passes {
        for r in requests {
            // The requests were validated by `decode`; a failure here would be a bug.
            let Ok(req) = r.request() else { return Ok(0) };
            let action = scorer.decide(&req, true)?.verdict.action;
            for s in scorer.scores() {
                sum = (sum ^ s.to_bits() as u64).wrapping_mul(0x0100_0000_01b3);
            }
            sum = (sum ^ action as u64 ^ (scorer.scores_header().len() as u64) << 8).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(sum)
}
