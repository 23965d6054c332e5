//! The signed model registry (`docs/registry.md`): what a publisher writes and what a poller
//! accepts. A registry is a directory any static HTTP server can serve:
//!
//! ```text
//! DIR/manifest.json              the signed envelope (replaced atomically)
//! DIR/artifacts/<sha256hex>.esm  content-addressed artifacts (never rewritten)
//! ```
//!
//! The envelope carries the manifest JSON (base64) and Ed25519 signatures over
//! [`SIGNING_CONTEXT`] followed by the payload bytes. A reader accepts a manifest only when its
//! [`Policy`] does: signatures by k of its configured [`PublicKey`]s, a signed expiry not yet
//! passed and a bounded validity, a sequence not below its floor ([`Policy::verify`]); then
//! each artifact only when its size, SHA-256, validation, schema hash, hash-key id and golden
//! rows all match the manifest ([`check_artifact`]). Every refusal is a [`Refusal`] with a
//! stable metric label ([`Refusal::reason`], [`REASONS`]).
//!
//! Verification only: nothing here reads files, clocks or the network (the caller passes the
//! current time), so the same code runs in the CLI (`edgescore verify`) and in the filter's
//! service VM.

mod check;
mod envelope;
mod golden;
mod keys;
mod manifest;
mod policy;
mod refusal;
#[cfg(test)]
pub(crate) mod tests;
mod time;

pub use check::{check_artifact, hash_key_id, schema_hash, sha256_hex};
pub use envelope::{
    cosign_envelope, open_envelope, read_unverified, sign_envelope, signed_message, verify_envelope, verify_signatures, Envelope, EnvelopeSignature, Signed,
};
pub use golden::{default_golden_inputs, golden_rows, row_matches};
pub use keys::{key_id, parse_public_key, parse_secret_key, public_key_file, secret_key_file, PublicKey, PublicKeyFile, RegistryError, SecretKeyFile};
pub use manifest::{GoldenRow, Manifest, ManifestModel, ModelMode};
pub use policy::{Policy, PolicyError, DEFAULT_MAX_VALIDITY_S, VALIDITY_RANGE_S};
pub use refusal::{Refusal, REASONS};
pub use time::{format_utc, parse_utc};

/// The envelope's `payload_type`.
pub const PAYLOAD_TYPE: &str = "application/vnd.edgescore.manifest.v1+json";
/// Prepended to the payload bytes before signing (domain separation: a signature over a
/// manifest can never be replayed as a signature over anything else).
pub const SIGNING_CONTEXT: &[u8] = b"edgescore-manifest-v1\0";
/// The manifest `format` this build reads and writes.
pub const MANIFEST_FORMAT: u32 = 1;
/// Most golden rows one model entry may carry.
pub const MAX_GOLDEN_ROWS: usize = 8;
/// The envelope's file name inside a registry directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The artifacts' folder inside a registry directory.
pub const ARTIFACTS_DIR: &str = "artifacts";
/// `kind` of a public key file (`NAME.pub`).
pub const PUBLIC_KEY_KIND: &str = "edgescore-ed25519-public";
/// `kind` of a secret key file (`NAME.key`).
pub const SECRET_KEY_KIND: &str = "edgescore-ed25519-secret";

/// The manifest's artifact path for an artifact whose SHA-256 is `sha256` (lowercase hex).
pub fn artifact_path(sha256: &str) -> String {
    format!("{ARTIFACTS_DIR}/{sha256}.esm")
}

/// `s` made safe for a one-line log message: control characters escaped, at most `max` chars
/// (text from an unverified envelope reaches messages).
pub(crate) fn one_line(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// `s` is exactly `len` lowercase hex digits.
pub(crate) fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
