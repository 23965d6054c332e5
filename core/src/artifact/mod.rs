//! The `.esm` artifact: its layout (the one definition of the format, which the compiler's
//! writer also uses), what it declares about its model, and the validator that turns bytes
//! into a [`crate::TreeEnsemble`] view (`ensemble::validate`).

mod error;
pub mod layout;
pub mod meta;

pub use error::ArtifactError;
pub use meta::{CoverKind, Link, SourceFormat, Task};

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
