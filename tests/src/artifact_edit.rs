//! Editing a valid artifact's bytes in place, for the tests that check what validation refuses:
//! find a section, change one node, and reseal the checksum so that only the edit is wrong.

use edgescore_core::artifact::checksum;
use edgescore_core::artifact::layout::{node, Node, SectionEntry, SectionKind, CHECKSUM_OFFSET, HEADER_LEN};
use edgescore_core::{ArtifactError, Model};
use std::ops::Range;

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

/// What load checks of a header flag that adds columns to the row after the inputs
/// (`NAN_LOW_COLUMNS`, `ZERO_MISSING_COLUMNS`): `good` has the flag and splits on its columns,
/// `columns`, the last of the row; `first_column` is the first column of any flag; the flag is
/// unknown to format `older_format`.
pub fn assert_column_flag_checked(good: &[u8], flag: u32, columns: Range<u16>, first_column: u16, older_format: u32) {
    let nodes = Model::load(good).unwrap().ensemble().nodes().to_vec();
    let is_split = |n: &Node| n.flags & node::LEAF == 0;
    let column = nodes.iter().position(|n| is_split(n) && n.feature >= columns.start).unwrap();
    let out_of_range = |r: Result<Model, ArtifactError>| matches!(r, Err(ArtifactError::Node { reason: "feature index out of range", .. }));
    // Past the last column.
    assert!(out_of_range(Model::load(&with_node(good, column, |n| n.feature = columns.end))));
    // Without the flag, the row ends before its columns.
    let mut b = good.to_vec();
    let declared = u32::from_le_bytes(b[12..16].try_into().unwrap());
    b[12..16].copy_from_slice(&(declared & !flag).to_le_bytes());
    assert!(out_of_range(Model::load(&resealed(b))));
    // Relabelled as the older format, the flag is unknown there.
    let mut b = good.to_vec();
    b[8..12].copy_from_slice(&older_format.to_le_bytes());
    assert_eq!(Model::load(&resealed(b)).err(), Some(ArtifactError::UnknownFlags(flag)));
    // The flag with no split on a column claims a row the walk never reads.
    let mut b = good.to_vec();
    for (i, n) in nodes.iter().enumerate() {
        if is_split(n) && n.feature >= first_column {
            b = with_node(&b, i, |n| n.feature -= first_column);
        }
    }
    assert!(matches!(Model::load(&b), Err(ArtifactError::FlagsMismatch { .. })));
}
