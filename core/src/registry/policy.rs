//! What a reader requires of a manifest beyond its format (TUF's threat model): signatures by
//! k of its n keys, a signed expiry that has not passed and a bounded validity (no freeze
//! attack), and floors on the sequence and the versions that hold across restarts (no replay
//! of an older signed manifest to a reader that forgot what it accepted).

use super::{format_utc, open_envelope, verify_signatures, Manifest, ManifestModel, PublicKey, Refusal, Signed};
use std::collections::BTreeMap;

/// The longest validity (`expires` − `published_at`) a reader accepts unless configured
/// otherwise: 31 days.
pub const DEFAULT_MAX_VALIDITY_S: u64 = 31 * 86_400;

/// The validities a reader may be configured to accept and a publisher may sign: a minute to
/// 366 days.
pub const VALIDITY_RANGE_S: core::ops::RangeInclusive<u64> = 60..=366 * 86_400;

/// Why a [`Policy`] cannot be met or makes no sense.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    #[error("must be at least 1")]
    ThresholdZero,
    #[error("{threshold} is more than the {keys} distinct key(s) configured")]
    ThresholdAboveKeys { threshold: usize, keys: usize },
    #[error("{0} s is not {min}..={max} s (a minute to 366 days)", min = VALIDITY_RANGE_S.start(), max = VALIDITY_RANGE_S.end())]
    Validity(u64),
}

/// A reader's requirements. [`Policy::new`] is the default: one signature by any of `keys`,
/// `expires` required, at most [`DEFAULT_MAX_VALIDITY_S`] of validity, no floors.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub keys: Vec<PublicKey>,
    /// Distinct keys of `keys` that must sign (k of n).
    pub threshold: usize,
    pub max_validity_s: u64,
    /// Refuse a manifest without `expires` (as [`Refusal::ValidityTooLong`]).
    pub require_expiry: bool,
    pub min_sequence: u64,
    /// Per model name, the lowest version accepted.
    pub min_versions: BTreeMap<String, u64>,
}

impl Policy {
    pub fn new(keys: Vec<PublicKey>) -> Policy {
        Policy { keys, threshold: 1, max_validity_s: DEFAULT_MAX_VALIDITY_S, require_expiry: true, min_sequence: 0, min_versions: BTreeMap::new() }
    }

    /// Whether the policy can be met: a threshold of 1 to the number of distinct keys, a
    /// maximum validity in [`VALIDITY_RANGE_S`].
    pub fn validate(&self) -> Result<(), PolicyError> {
        let mut distinct: Vec<&str> = self.keys.iter().map(|k| k.key_id.as_str()).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if self.threshold == 0 {
            return Err(PolicyError::ThresholdZero);
        }
        if self.threshold > distinct.len() {
            return Err(PolicyError::ThresholdAboveKeys { threshold: self.threshold, keys: distinct.len() });
        }
        if !VALIDITY_RANGE_S.contains(&self.max_validity_s) {
            return Err(PolicyError::Validity(self.max_validity_s));
        }
        Ok(())
    }

    /// The whole manifest check at `now_s` (seconds since the Unix epoch): the envelope, the
    /// signatures ([`Policy::signatures`]), the payload ([`Manifest::parse`], only once the
    /// signatures verified), then [`Policy::check_manifest`].
    pub fn verify(&self, envelope: &[u8], now_s: u64) -> Result<Manifest, Refusal> {
        let signed = open_envelope(envelope)?;
        self.signatures(&signed)?;
        let manifest = Manifest::parse(&signed.payload)?;
        self.check_manifest(&manifest, now_s)?;
        Ok(manifest)
    }

    /// [`verify_signatures`] with this policy's keys and threshold: the ids of the keys that
    /// signed.
    pub fn signatures(&self, signed: &Signed) -> Result<Vec<String>, Refusal> {
        verify_signatures(signed, &self.keys, self.threshold)
    }

    /// A parsed manifest at `now_s`: its validity ([`Refusal::ValidityTooLong`]), its expiry
    /// ([`Refusal::Expired`] from the second `expires` names on) and the minimum sequence
    /// ([`Refusal::BelowMinimum`]).
    pub fn check_manifest(&self, m: &Manifest, now_s: u64) -> Result<(), Refusal> {
        match (m.expires.is_some(), m.expires_s(), m.published_s()) {
            (false, ..) if self.require_expiry => return Err(Refusal::ValidityTooLong { valid_s: None, max_s: self.max_validity_s }),
            (false, ..) => {}
            (true, Some(expires), Some(published)) => {
                let valid_s = expires.saturating_sub(published);
                if valid_s > self.max_validity_s {
                    return Err(Refusal::ValidityTooLong { valid_s: Some(valid_s), max_s: self.max_validity_s });
                }
                if now_s >= expires {
                    return Err(Refusal::Expired { expires: format_utc(expires), now: format_utc(now_s) });
                }
            }
            // `Manifest::parse` refuses such times already; a manifest built in memory can have them.
            (true, ..) => return Err(Refusal::Malformed("published_at or expires is not a UTC time YYYY-MM-DDTHH:MM:SSZ".into())),
        }
        if m.sequence < self.min_sequence {
            return Err(Refusal::BelowMinimum { what: "manifest sequence (registry.min_sequence)".into(), min: self.min_sequence, got: m.sequence });
        }
        Ok(())
    }

    /// One entry against the minimum version of its name.
    pub fn check_entry(&self, e: &ManifestModel) -> Result<(), Refusal> {
        match self.min_versions.get(&e.name) {
            Some(&min) if e.version < min => {
                Err(Refusal::BelowMinimum { what: format!("{} version (registry.min_versions.{})", e.name, e.name), min, got: e.version })
            }
            _ => Ok(()),
        }
    }
}
