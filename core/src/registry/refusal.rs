//! Why a manifest or an artifact was refused: one variant per reason, each with a stable
//! snake_case metric label and a one-line message naming what and why.

use crate::ArtifactError;

/// Why an update was refused. The previous model keeps serving; the poller counts the refusal
/// under [`Refusal::reason`] and logs its `Display` (one line). Per-model variants carry the
/// model's label, `"name vVERSION"` as the manifest states it.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The envelope has no signatures at all.
    #[error("manifest is not signed (the envelope has no signatures)")]
    Unsigned,
    /// Every signature names a key id that is not configured.
    #[error("manifest is signed only by unknown key(s) {}: none of the configured public keys", .key_ids.join(", "))]
    UnknownKey { key_ids: Vec<String> },
    /// A signature by a configured key does not verify (and none other does).
    #[error("manifest signature by {key_id} does not verify: the payload or the signature was altered")]
    BadSignature { key_id: String },
    /// Fewer distinct configured keys signed than the reader's threshold requires (k of n).
    #[error("manifest is signed by {} of the configured keys ({}), {threshold} required", .signed_by.len(), .signed_by.join(", "))]
    TooFewSignatures { signed_by: Vec<String>, threshold: usize },
    /// Bad JSON, base64 or fields, an unknown format, two active (or shadow) entries for one
    /// name, an artifact path that is not `artifacts/<sha256>.esm`.
    #[error("malformed manifest: {0}")]
    Malformed(String),
    /// The manifest's `expires` is not after the reader's clock: the registry was not renewed,
    /// or its server shows a frozen copy.
    #[error("manifest expired at {expires} (now {now}): the registry was not renewed (`edgescore renew`), or its server shows an old copy")]
    Expired { expires: String, now: String },
    /// `expires` − `published_at` is longer than the reader accepts, or (`valid_s` `None`) the
    /// manifest has no `expires` and the reader requires one.
    #[error("{}", validity_message(.valid_s, .max_s))]
    ValidityTooLong { valid_s: Option<u64>, max_s: u64 },
    /// A model version (or, with `name` "manifest", the manifest sequence) lower than one
    /// already accepted: a replayed old manifest. Raised by the poller.
    #[error("{name}: version {got} is lower than the {have} already accepted (a version never goes backwards)")]
    Rollback { name: String, have: u64, got: u64 },
    /// A manifest sequence or a model version below the floor the reader is configured with
    /// (`registry.min_sequence`, `registry.min_versions`): what a restarted reader must not
    /// go below. `what` names the number and the setting.
    #[error("{what} is {got}, below the configured minimum {min}")]
    BelowMinimum { what: String, min: u64, got: u64 },
    /// The artifact (or the size the manifest declares) is over the configured limit.
    #[error("{model}: artifact is {size} bytes, over the {max}-byte limit")]
    Oversized { model: String, size: u64, max: u64 },
    /// The artifact's length differs from the manifest's `size`.
    #[error("{model}: artifact is {got} bytes, manifest says {expected} (truncated or altered download)")]
    Truncated { model: String, expected: u64, got: u64 },
    /// The artifact's SHA-256 differs from the manifest's.
    #[error("{model}: artifact sha256 is {got}, manifest says {expected}")]
    ShaMismatch { model: String, expected: String, got: String },
    /// The artifact failed validation.
    #[error("{model}: invalid artifact: {error}")]
    InvalidArtifact { model: String, error: ArtifactError },
    /// The artifact's model name, feature schema or hash-key id is not the manifest's (or not
    /// this filter's). The text names the model and both values.
    #[error("schema mismatch: {0}")]
    SchemaMismatch(String),
    /// A golden row scores differently here than at publish time.
    #[error("{model}: golden row {row}: {detail}")]
    GoldenMismatch { model: String, row: usize, detail: String },
    /// The registry could not be reached or answered something that is not an envelope.
    /// Raised by the poller.
    #[error("registry unreachable: {0}")]
    Unreachable(String),
}

/// Every [`Refusal::reason`], in declaration order: define the per-reason metrics up front.
pub const REASONS: [&str; 16] = [
    "unsigned",
    "unknown_key",
    "bad_signature",
    "too_few_signatures",
    "malformed",
    "expired",
    "validity_too_long",
    "rollback",
    "below_minimum",
    "oversized",
    "truncated",
    "sha_mismatch",
    "invalid_artifact",
    "schema_mismatch",
    "golden_mismatch",
    "unreachable",
];

impl Refusal {
    /// The stable snake_case metric label (one of [`REASONS`]).
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Unsigned => REASONS[0],
            Refusal::UnknownKey { .. } => REASONS[1],
            Refusal::BadSignature { .. } => REASONS[2],
            Refusal::TooFewSignatures { .. } => REASONS[3],
            Refusal::Malformed(_) => REASONS[4],
            Refusal::Expired { .. } => REASONS[5],
            Refusal::ValidityTooLong { .. } => REASONS[6],
            Refusal::Rollback { .. } => REASONS[7],
            Refusal::BelowMinimum { .. } => REASONS[8],
            Refusal::Oversized { .. } => REASONS[9],
            Refusal::Truncated { .. } => REASONS[10],
            Refusal::ShaMismatch { .. } => REASONS[11],
            Refusal::InvalidArtifact { .. } => REASONS[12],
            Refusal::SchemaMismatch(_) => REASONS[13],
            Refusal::GoldenMismatch { .. } => REASONS[14],
            Refusal::Unreachable(_) => REASONS[15],
        }
    }

    /// A manifest whose `sequence` is lower than the last one accepted.
    pub fn sequence_rollback(have: u64, got: u64) -> Refusal {
        Refusal::Rollback { name: "manifest".into(), have, got }
    }
}

fn validity_message(valid_s: &Option<u64>, max_s: &u64) -> String {
    match valid_s {
        None => "manifest has no `expires` (it would be valid forever) and this reader requires one: renew the registry with `edgescore renew`".into(),
        Some(v) => format!("manifest is valid for {v} s (published_at to expires), longer than the {max_s} s this reader accepts (registry.max_validity_s)"),
    }
}
