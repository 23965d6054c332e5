use thiserror::Error;

/// Why an artifact was refused. Each variant names the check that failed, so an operator can
/// tell a truncated upload from a corrupted one from a model built by a newer compiler.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ArtifactError {
    #[error("artifact is {len} bytes, shorter than the {need}-byte header")]
    TooShort { len: usize, need: usize },
    #[error("not an edgescore artifact (bad magic bytes)")]
    BadMagic,
    #[error("artifact format version {found} is not supported (this build reads versions 1 to {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("artifact is truncated or padded: header says {declared} bytes, got {actual}")]
    LengthMismatch { declared: u64, actual: usize },
    #[error("checksum mismatch: stored {stored:#018x}, computed {computed:#018x} (corrupted artifact)")]
    ChecksumMismatch { stored: u64, computed: u64 },
    #[error("artifact bytes are not 8-byte aligned in memory; load them through ModelBytes")]
    Misaligned,
    #[error("artifact evaluation needs a little-endian host")]
    BigEndianHost,
    #[error("unknown header flags {0:#x}")]
    UnknownFlags(u32),
    #[error("reserved field {0} is not zero")]
    ReservedNotZero(&'static str),
    #[error("section table: {0}")]
    SectionTable(&'static str),
    #[error("section {section}: length {len} bytes, expected {expected}")]
    SectionLength { section: &'static str, len: u64, expected: u64 },
    #[error("metadata: {0}")]
    Meta(&'static str),
    #[error("strings: {0}")]
    Strings(&'static str),
    #[error("feature {feature}: {reason}")]
    Feature { feature: usize, reason: &'static str },
    #[error("tree {tree}: {reason}")]
    Tree { tree: usize, reason: &'static str },
    #[error("tree {tree}, node {node}: {reason}")]
    Node { tree: usize, node: usize, reason: &'static str },
    #[error("categorical split {split}: {reason}")]
    CatSplit { split: usize, reason: &'static str },
    #[error("linear leaf or term {index}: {reason}")]
    Linear { index: usize, reason: &'static str },
    #[error("CTR feature {index}: {reason}")]
    Ctr { index: usize, reason: &'static str },
    #[error("CTR part {index}: {reason}")]
    CtrPart { index: usize, reason: &'static str },
    #[error("drift reference, series {series}: {reason}")]
    Drift { series: usize, reason: &'static str },
    #[error("leaf count mismatch: metadata says {declared}, trees hold {found}")]
    LeafCount { declared: u32, found: u64 },
    #[error("{what} {index} is not finite")]
    NotFinite { what: &'static str, index: usize },
    #[error("UA fingerprint table, entry {index}: {reason}")]
    UaFingerprints { index: usize, reason: &'static str },
    #[error("node values: {0}")]
    NodeValues(&'static str),
    #[error("header flags {declared:#x} do not match the node tests used ({used:#x})")]
    FlagsMismatch { declared: u32, used: u32 },
}

