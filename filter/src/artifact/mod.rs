//! The `.esm` artifact: its layout, the validator that turns bytes into a [`TreeEnsemble`]
//! view, and (natively) the writer that produces it from the IR.

mod error;
pub mod layout;
mod validate;
#[cfg(not(target_arch = "wasm32"))]
pub mod write;

pub use error::{ArtifactError, ScoreError, WriteError};
pub use validate::Model;

/// xxh3-64 over the file with the checksum field taken as zero.
pub fn checksum(bytes: &[u8]) -> u64 {
    use xxhash_rust::xxh3::Xxh3;
    let at = layout::CHECKSUM_OFFSET;
    let mut h = Xxh3::new();
    h.update(&bytes[..at]);
    h.update(&[0u8; 8]);
    h.update(&bytes[at + 8..]);
    h.digest()
}
