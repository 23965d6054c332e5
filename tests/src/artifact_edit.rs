//! Editing a valid artifact's bytes in place, for the tests that check what validation refuses:
//! find a section, change one node, and reseal the checksum so that only the edit is wrong.

use edgescore_core::artifact::checksum;
use edgescore_core::artifact::layout::{Node, SectionEntry, SectionKind, CHECKSUM_OFFSET, HEADER_LEN};

/// Offset and length of `kind`'s section.
pub fn section(bytes: &[u8], kind: SectionKind) -> (usize, usize) {
    let at = HEADER_LEN + (kind as usize - 1) * std::mem::size_of::<SectionEntry>();
    let e: SectionEntry = bytemuck::pod_read_unaligned(&bytes[at..at + std::mem::size_of::<SectionEntry>()]);
    (e.offset as usize, e.len as usize)
}

/// The bytes with their checksum recomputed.
pub fn resealed(mut bytes: Vec<u8>) -> Vec<u8> {
    let sum = checksum(&bytes);
    bytes[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 8].copy_from_slice(&sum.to_le_bytes());
    bytes
}

/// The bytes with node `i` changed by `f`, resealed.
pub fn with_node(bytes: &[u8], i: usize, f: impl Fn(&mut Node)) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let (off, _) = section(&b, SectionKind::Nodes);
    let at = off + i * std::mem::size_of::<Node>();
    let mut n: Node = bytemuck::pod_read_unaligned(&b[at..at + 12]);
    f(&mut n);
    b[at..at + 12].copy_from_slice(bytemuck::bytes_of(&n));
    resealed(b)
}
