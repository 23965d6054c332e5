//! HTTP message signatures (RFC 9421) on requests, as verified bots sign them (Web Bot Auth):
//! Ed25519 over the covered components, `created`/`expires` checked against the clock with a
//! skew allowance, the key looked up by its `keyid` in the directories the operator trusts.
//!
//! A request pays for this only when it carries `Signature-Input`; then one parse of the two
//! headers, a signature base written into a buffer of fixed capacity and one Ed25519
//! verification, with nothing allocated. Anything malformed, too large or unsupported is a
//! [`Refusal`] with a stable metric label, never a panic and never a slow path.

mod base;
mod bots;
pub mod directory;
mod fetch;
mod fields;
#[cfg(test)]
mod tests;

pub use base::Bounded;
pub use bots::{BotCounts, Bots};
pub use directory::{Directory, DirectoryError, DirectoryKey};
pub use fetch::{DirectoryFetch, DirectoryRefusal, DIRECTORY_REASONS};
pub use fields::{Bare, SignatureInput, MAX_COMPONENTS, MAX_PARAMS};

use crate::request::HeaderMap;
use base64::Engine as _;
use ed25519_dalek::{Signature, VerifyingKey};

/// Longest `Signature-Input` or `Signature` value read; a longer one is refused unread.
pub const MAX_HEADER_BYTES: usize = 4096;
/// Capacity of the signature base.
pub const MAX_BASE_BYTES: usize = 8192;
/// The Wasm filter's shared-data key under which the poller hands the keys to the workers
/// ([`Directory::encode`]).
pub const DIRECTORY_KEY: &str = "edgescore.verified_bots.directory";

/// Why a signed request's signature was not accepted. The request is then scored as unsigned.
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    #[error("malformed signature headers: {0}")]
    Malformed(&'static str),
    #[error("signature headers too large: {0}")]
    TooLarge(&'static str),
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// No member of `Signature-Input` is one this verifier looks for (e.g. no `tag` it requires).
    #[error("no signature this verifier looks for (required tag absent)")]
    NotApplicable,
    #[error("`Signature` has no member for the label of `Signature-Input`")]
    NoSignature,
    #[error("a covered component is not in the request")]
    MissingComponent,
    #[error("the signature has no `created`, no `keyid`, or no `expires` where the policy requires one")]
    MissingParameter,
    #[error("the signature was created in the future (beyond the allowed clock skew)")]
    NotYetValid,
    #[error("the signature has expired")]
    Expired,
    #[error("the signature's validity (`expires` − `created`) is longer than the verifier accepts")]
    ValidityTooLong,
    #[error("the signature's keyid is in no trusted directory")]
    UnknownKey,
    #[error("the signature does not verify")]
    BadSignature,
}

/// Every [`Refusal::reason`], in declaration order: define the per-reason metrics up front.
pub const REASONS: [&str; 12] = [
    "malformed",
    "too_large",
    "unsupported",
    "not_applicable",
    "no_signature",
    "missing_component",
    "missing_parameter",
    "not_yet_valid",
    "expired",
    "validity_too_long",
    "unknown_key",
    "bad_signature",
];

impl Refusal {
    /// The metric label (one of [`REASONS`]).
    pub fn reason(&self) -> &'static str {
        REASONS[match self {
            Refusal::Malformed(_) => 0,
            Refusal::TooLarge(_) => 1,
            Refusal::Unsupported(_) => 2,
            Refusal::NotApplicable => 3,
            Refusal::NoSignature => 4,
            Refusal::MissingComponent => 5,
            Refusal::MissingParameter => 6,
            Refusal::NotYetValid => 7,
            Refusal::Expired => 8,
            Refusal::ValidityTooLong => 9,
            Refusal::UnknownKey => 10,
            Refusal::BadSignature => 11,
        }]
    }
}

/// What a signature must satisfy besides verifying.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Only members whose `tag` parameter is this (Web Bot Auth: `web-bot-auth`); `None` takes
    /// the first member.
    pub tag: Option<String>,
    /// Clock skew allowed on `created` and `expires`, seconds.
    pub skew_s: u64,
    /// Longest `expires` − `created` accepted, seconds.
    pub max_validity_s: u64,
    /// Components every accepted signature must cover (e.g. `@authority`).
    pub required_components: Vec<String>,
    /// Refuse a signature without `expires` (Web Bot Auth requires one); without it, one
    /// without `expires` is valid for `max_validity_s` after `created`.
    pub require_expires: bool,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy { tag: Some("web-bot-auth".into()), skew_s: 60, max_validity_s: 24 * 3600, required_components: vec!["@authority".into()], require_expires: true }
    }
}

/// A verified signature: the agent its key belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verified<'k> {
    pub agent: &'k str,
    pub keyid: &'k str,
}

/// Where a keyid's public key comes from.
pub trait Keys {
    fn lookup(&self, keyid: &[u8]) -> Option<(&VerifyingKey, Verified<'_>)>;
}

/// Verifies requests' signatures with a reused, fixed-capacity signature base.
pub struct Verifier {
    policy: Policy,
    base: Bounded,
}

impl Verifier {
    pub fn new(policy: Policy) -> Verifier {
        Verifier { policy, base: Bounded::with_capacity(MAX_BASE_BYTES) }
    }

    /// `Ok(None)` for an unsigned request (no `Signature-Input`); the signer's agent for one
    /// whose signature verifies at `now_s` (seconds since the Unix epoch); why not otherwise.
    pub fn verify<'k>(&mut self, headers: &HeaderMap<'_>, now_s: u64, keys: &'k impl Keys) -> Result<Option<Verified<'k>>, Refusal> {
        let Some(input) = headers.get(b"signature-input") else { return Ok(None) };
        let signature = headers.get(b"signature").ok_or(Refusal::NoSignature)?;
        if input.len() > MAX_HEADER_BYTES || signature.len() > MAX_HEADER_BYTES {
            return Err(Refusal::TooLarge("a Signature-Input or Signature value over the limit"));
        }
        let tag = self.policy.tag.as_deref().map(str::as_bytes);
        let mut tag_error = None;
        let found = fields::find_input(input, |i| match (tag, i.string(b"tag")) {
            (None, _) => true,
            (Some(want), Ok(got)) => got == Some(want),
            (Some(_), Err(e)) => {
                tag_error = Some(e);
                false
            }
        })?;
        let input = found.ok_or(tag_error.unwrap_or(Refusal::NotApplicable))?;
        for required in &self.policy.required_components {
            if !input.components().contains(&required.as_bytes()) {
                return Err(Refusal::MissingComponent);
            }
        }
        self.check_times(&input, now_s)?;
        match input.string(b"alg")? {
            None | Some(b"ed25519") => {}
            Some(_) => return Err(Refusal::Unsupported("an algorithm other than ed25519")),
        }
        let keyid = input.string(b"keyid")?.ok_or(Refusal::MissingParameter)?;
        let (key, verified) = keys.lookup(keyid).ok_or(Refusal::UnknownKey)?;
        let b64 = fields::find_signature(signature, input.label)?.ok_or(Refusal::NoSignature)?;
        let mut raw = [0u8; 96];
        if b64.len() > 128 {
            return Err(Refusal::Malformed("a signature longer than an Ed25519 signature"));
        }
        let n = base64::engine::general_purpose::STANDARD.decode_slice(b64, &mut raw).map_err(|_| Refusal::Malformed("the signature is not base64"))?;
        let sig: [u8; 64] = raw[..n].try_into().map_err(|_| Refusal::Malformed("the signature is not 64 bytes"))?;
        base::write(&mut self.base, &input, headers)?;
        key.verify_strict(self.base.as_bytes(), &Signature::from_bytes(&sig)).map_err(|_| Refusal::BadSignature)?;
        Ok(Some(verified))
    }

    /// The signature base of the last verification that got as far as writing it (tests).
    pub fn last_base(&self) -> &[u8] {
        self.base.as_bytes()
    }

    fn check_times(&self, input: &SignatureInput<'_>, now_s: u64) -> Result<(), Refusal> {
        let created = input.integer(b"created")?.ok_or(Refusal::MissingParameter)?;
        let max_validity = i64::try_from(self.policy.max_validity_s).unwrap_or(i64::MAX);
        let expires = match input.integer(b"expires")? {
            Some(e) if e < created || e.saturating_sub(created) > max_validity => return Err(Refusal::ValidityTooLong),
            Some(e) => e,
            None if self.policy.require_expires => return Err(Refusal::MissingParameter),
            None => created.saturating_add(max_validity),
        };
        let now = i64::try_from(now_s).unwrap_or(i64::MAX);
        let skew = i64::try_from(self.policy.skew_s).unwrap_or(i64::MAX);
        if created.saturating_sub(skew) > now {
            return Err(Refusal::NotYetValid);
        }
        if expires.saturating_add(skew) < now {
            return Err(Refusal::Expired);
        }
        Ok(())
    }
}
