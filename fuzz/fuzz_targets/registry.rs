//! The registry's manifest and signature checks (`edgescore_core::registry`), as the filter's
//! poller runs them on whatever a registry server returns:
//! - the input as `manifest.json` (the signed envelope) → `verify_envelope` under a fixed key
//!   never panics, and accepts only what `read_unverified` reads the same way;
//! - the input as the *payload*, signed with that key → accepted exactly when the payload
//!   parses as a manifest, to the same manifest; the same envelope with one signature
//!   character changed, or checked against another key, is refused;
//! - every entry of a parsed manifest checked against artifact bytes taken from the input
//!   (`check_artifact`: size, SHA-256, validation, schema, hash-key id, golden rows) → no panic.
#![no_main]

use ed25519_dalek::SigningKey;
use edgescore_core::registry::{check_artifact, hash_key_id, parse_public_key, public_key_file, read_unverified, sign_envelope, verify_envelope, Manifest, PublicKey};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

// Built once: deriving a key is a scalar multiplication, as costly as a signature check, and
// the keys are the same for every input.
static KEY: LazyLock<SigningKey> = LazyLock::new(|| SigningKey::from_bytes(&[7; 32]));
static KEYS: LazyLock<[PublicKey; 1]> =
    LazyLock::new(|| [parse_public_key(&public_key_file(&KEY.verifying_key())).expect("own key parses")]);
static OTHER_KEYS: LazyLock<[PublicKey; 1]> = LazyLock::new(|| {
    let other = SigningKey::from_bytes(&[8; 32]);
    [parse_public_key(&public_key_file(&other.verifying_key())).expect("own key parses")]
});

fuzz_target!(|data: &[u8]| {
    let (key, keys, other_keys) = (&*KEY, &*KEYS, &*OTHER_KEYS);

    if let Ok(m) = verify_envelope(data, keys) {
        assert_eq!(read_unverified(data).as_ref(), Ok(&m));
    }

    let envelope = sign_envelope(data, key);
    let parsed = Manifest::parse(data);
    let verified = verify_envelope(&envelope, keys);
    match (&parsed, &verified) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a, b, "a signed payload refused for another reason than its content"),
        _ => panic!("signed payload: parse {parsed:?} but verify {verified:?}"),
    }
    assert!(verify_envelope(&envelope, other_keys).is_err(), "accepted under a key that did not sign");
    let text = String::from_utf8(envelope).expect("envelopes are JSON");
    let at = text.find("\"sig\": \"").expect("one signature") + 8;
    let mut tampered = text.into_bytes();
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    assert!(verify_envelope(&tampered, keys).is_err(), "accepted a changed signature");

    if let Ok(m) = parsed {
        let id = hash_key_id(b"0123456789abcdef");
        for (i, entry) in m.models.iter().enumerate().take(4) {
            let artifact = data.get(i * 64..).unwrap_or(&[]);
            let _ = check_artifact(entry, artifact, 1 << 20, Some(&id));
        }
    }
});
