//! The registry's manifest and signature checks (`edgescore_core::registry`), as the filter's
//! poller runs them on whatever a registry server returns:
//! - the input as `manifest.json` (the signed envelope) → `verify_envelope` under a fixed key
//!   never panics, and accepts only what `read_unverified` reads the same way; a 2-of-2
//!   `Policy` at the manifest's own time boundaries accepts only that manifest, signed by both
//!   keys, unexpired, within its validity;
//! - the input as the *payload*, signed with that key → accepted exactly when the payload
//!   parses as a manifest, to the same manifest; the same envelope with one signature
//!   character changed, or checked against another key, is refused. Co-signed by the second
//!   key: the payload and the first signature unchanged; one signature is always too few for
//!   2 of 2, both are accepted exactly when the manifest passes `check_manifest` (expiry from
//!   the second it names on, validity, minimums), at the times around `published_at` and
//!   `expires`;
//! - every entry of a parsed manifest checked against artifact bytes taken from the input
//!   (`check_artifact`: size, SHA-256, validation, schema, hash-key id, golden rows) → no panic.
#![no_main]

use ed25519_dalek::SigningKey;
use edgescore_core::registry::{
    check_artifact, cosign_envelope, hash_key_id, open_envelope, parse_public_key, public_key_file, read_unverified, sign_envelope, verify_envelope,
    Manifest, Policy, PublicKey,
};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

// Built once: deriving a key is a scalar multiplication, as costly as a signature check, and
// the keys are the same for every input. The seeds in seeds-registry/ are signed by KEY and
// COSIGNER (`cargo run --bin seed`).
static KEY: LazyLock<SigningKey> = LazyLock::new(|| SigningKey::from_bytes(&[7; 32]));
static COSIGNER: LazyLock<SigningKey> = LazyLock::new(|| SigningKey::from_bytes(&[9; 32]));
static KEYS: LazyLock<[PublicKey; 2]> = LazyLock::new(|| [public(&KEY), public(&COSIGNER)]);
static OTHER_KEYS: LazyLock<[PublicKey; 1]> = LazyLock::new(|| [public(&SigningKey::from_bytes(&[8; 32]))]);
static BOTH: LazyLock<Policy> = LazyLock::new(|| Policy { threshold: 2, ..Policy::new(KEYS.to_vec()) });

fn public(key: &SigningKey) -> PublicKey {
    parse_public_key(&public_key_file(&key.verifying_key())).expect("own key parses")
}

/// The instants where `m`'s verdict changes: its publication, the second before it expires and
/// the second it does, and the ends of time.
fn boundaries(m: &Manifest) -> Vec<u64> {
    let mut t = vec![0, u64::MAX];
    t.extend(m.published_s());
    if let Some(e) = m.expires_s() {
        t.extend([e.saturating_sub(1), e]);
    }
    t
}

/// What an accepted manifest must be under `policy` at `now`.
fn assert_fresh(policy: &Policy, m: &Manifest, now: u64) {
    let (Some(e), Some(p)) = (m.expires_s(), m.published_s()) else { panic!("accepted without expires: {m:?}") };
    assert!(now < e, "accepted at {now}, expires {e}");
    assert!(e - p <= policy.max_validity_s, "accepted a validity of {} s", e - p);
    assert!(m.sequence >= policy.min_sequence);
}

fuzz_target!(|data: &[u8]| {
    let (key, keys, other_keys, both) = (&*KEY, &*KEYS, &*OTHER_KEYS, &*BOTH);
    let first = &keys[..1];

    if let Ok(m) = verify_envelope(data, first) {
        assert_eq!(read_unverified(data).as_ref(), Ok(&m));
    }
    if let Ok(m) = read_unverified(data) {
        for now in boundaries(&m) {
            if let Ok(accepted) = both.verify(data, now) {
                assert_eq!(accepted.to_json(), m.to_json());
                assert_fresh(both, &m, now);
                assert!(verify_envelope(data, first).is_ok() && verify_envelope(data, &keys[1..]).is_ok(), "2 of 2 without both");
            }
        }
    }

    let envelope = sign_envelope(data, key);
    let parsed = Manifest::parse(data);
    let verified = verify_envelope(&envelope, first);
    match (&parsed, &verified) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a, b, "a signed payload refused for another reason than its content"),
        _ => panic!("signed payload: parse {parsed:?} but verify {verified:?}"),
    }
    assert!(verify_envelope(&envelope, other_keys).is_err(), "accepted under a key that did not sign");
    let text = String::from_utf8(envelope.clone()).expect("envelopes are JSON");
    let at = text.find("\"sig\": \"").expect("one signature") + 8;
    let mut tampered = text.into_bytes();
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    assert!(verify_envelope(&tampered, first).is_err(), "accepted a changed signature");

    // Co-signed: the same payload and first signature, and 2 of 2 decided by the manifest alone.
    let cosigned = cosign_envelope(&envelope, &COSIGNER).expect("an envelope it signed opens");
    let (one, two) = (open_envelope(&envelope).expect("opens"), open_envelope(&cosigned).expect("opens"));
    assert_eq!(two.payload, data);
    assert_eq!(two.signatures.len(), 2);
    assert_eq!(two.signatures[0], one.signatures[0]);
    assert_eq!(both.verify(&envelope, 0).map_err(|r| r.reason()), Err("too_few_signatures"));
    let times = parsed.as_ref().map(boundaries).unwrap_or_else(|_| vec![0]);
    for &now in &times {
        let got = both.verify(&cosigned, now);
        let want = parsed.clone().and_then(|m| both.check_manifest(&m, now).map(|()| m));
        // As JSON: a golden output may be NaN, which is not equal to itself.
        assert_eq!(got.as_ref().map(Manifest::to_json), want.as_ref().map(Manifest::to_json), "at {now}");
        if let Ok(m) = &got {
            assert_fresh(both, m, now);
        }
    }
    if let Ok(m) = &parsed {
        match (m.expires_s(), m.published_s()) {
            (Some(e), Some(p)) => {
                assert_eq!(both.verify(&cosigned, e - 1).is_ok(), e - p <= both.max_validity_s, "the second before expiry");
                assert!(both.verify(&cosigned, e).is_err(), "accepted at its expiry");
            }
            _ => {
                assert_eq!(both.verify(&cosigned, 0).map_err(|r| r.reason()), Err("validity_too_long"), "no expires");
                let migrating = Policy { require_expiry: false, ..both.clone() };
                assert_eq!(migrating.verify(&cosigned, u64::MAX).map(|a| a.to_json()), Ok(m.to_json()));
            }
        }
        // A floor one above the manifest's sequence refuses what was accepted.
        let now = m.published_s().unwrap_or(0);
        if let (Some(floor), Ok(_)) = (m.sequence.checked_add(1), both.verify(&cosigned, now)) {
            let raised = Policy { min_sequence: floor, ..both.clone() };
            assert_eq!(raised.verify(&cosigned, now).map_err(|r| r.reason()), Err("below_minimum"));
        }
        let id = hash_key_id(b"0123456789abcdef");
        for (i, entry) in m.models.iter().enumerate().take(4) {
            let artifact = data.get(i * 64..).unwrap_or(&[]);
            let _ = check_artifact(entry, artifact, 1 << 20, Some(&id));
            assert!(both.check_entry(entry).is_ok(), "no floors configured");
        }
    }
});
