//! The signed envelope around the manifest: one JSON file, so a reader never sees a manifest
//! without its signatures.

use super::{one_line, Manifest, PublicKey, Refusal, PAYLOAD_TYPE, SIGNING_CONTEXT};
use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey};
use serde::{Deserialize, Serialize};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// `manifest.json` as stored (unknown fields are refused).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// [`PAYLOAD_TYPE`].
    pub payload_type: String,
    /// Standard base64 of the manifest JSON bytes.
    pub payload: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    /// [`super::key_id`] of the signing key.
    pub key_id: String,
    /// Standard base64 of the 64-byte Ed25519 signature over [`signed_message`].
    pub sig: String,
}

/// An envelope whose structure was checked but whose signatures were not (yet).
#[derive(Debug, Clone, PartialEq)]
pub struct Signed {
    /// The decoded payload: the manifest JSON bytes.
    pub payload: Vec<u8>,
    pub signatures: Vec<EnvelopeSignature>,
}

/// The exact bytes signed: [`SIGNING_CONTEXT`] followed by the payload bytes.
pub fn signed_message(payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(SIGNING_CONTEXT.len() + payload.len());
    m.extend_from_slice(SIGNING_CONTEXT);
    m.extend_from_slice(payload);
    m
}

/// Parses the envelope JSON, checks its payload type and decodes the payload. Verifies no
/// signature.
pub fn open_envelope(envelope: &[u8]) -> Result<Signed, Refusal> {
    let e: Envelope = serde_json::from_slice(envelope).map_err(|e| Refusal::Malformed(format!("envelope: {}", one_line(&e.to_string(), 300))))?;
    if e.payload_type != PAYLOAD_TYPE {
        return Err(Refusal::Malformed(format!("envelope payload_type is {:?}, expected {PAYLOAD_TYPE:?}", one_line(&e.payload_type, 80))));
    }
    let payload = B64.decode(&e.payload).map_err(|err| Refusal::Malformed(format!("envelope payload is not standard base64 ({err})")))?;
    Ok(Signed { payload, signatures: e.signatures })
}

/// Accepts `signed` when signatures by at least `threshold` distinct keys of `keys` verify
/// (`verify_strict`), and returns their ids. Only the first signature naming each key id is
/// tried, so a key that signed twice counts once. When none verifies: [`Refusal::Unsigned`]
/// with no signatures, [`Refusal::BadSignature`] when a configured key's signature fails, else
/// [`Refusal::UnknownKey`]; when some but fewer than `threshold` verify,
/// [`Refusal::TooFewSignatures`].
pub fn verify_signatures(signed: &Signed, keys: &[PublicKey], threshold: usize) -> Result<Vec<String>, Refusal> {
    if signed.signatures.is_empty() {
        return Err(Refusal::Unsigned);
    }
    let threshold = threshold.max(1);
    let message = signed_message(&signed.payload);
    let mut failed: Option<&str> = None;
    let mut valid: Vec<String> = Vec::new();
    // Each configured key is tried at most once (its first signature): a registry stuffed with
    // thousands of signatures under a known key id costs one verification, not thousands. A key
    // configured twice is found at its first position, so it is one key here too.
    let mut tried = vec![false; keys.len()];
    for s in &signed.signatures {
        let Some(k) = keys.iter().position(|k| k.key_id == s.key_id) else { continue };
        if core::mem::replace(&mut tried[k], true) {
            continue;
        }
        let key = &keys[k];
        let sig = B64.decode(&s.sig).ok().and_then(|b| <[u8; 64]>::try_from(b.as_slice()).ok()).map(|b| Signature::from_bytes(&b));
        match sig {
            Some(sig) if key.key.verify_strict(&message, &sig).is_ok() => {
                valid.push(key.key_id.clone());
                if valid.len() >= threshold {
                    return Ok(valid);
                }
            }
            _ => failed = failed.or(Some(&s.key_id)),
        }
    }
    if !valid.is_empty() {
        return Err(Refusal::TooFewSignatures { signed_by: valid, threshold });
    }
    match failed {
        Some(key_id) => Err(Refusal::BadSignature { key_id: key_id.to_string() }),
        None => {
            // Named in the message: the distinct ids, a few at most.
            let mut key_ids: Vec<String> = Vec::new();
            for s in &signed.signatures {
                if key_ids.len() < 4 && !key_ids.contains(&s.key_id) {
                    key_ids.push(one_line(&s.key_id, 40));
                }
            }
            Err(Refusal::UnknownKey { key_ids })
        }
    }
}

/// The envelope, a signature under one of `keys`, then the payload ([`Manifest::parse`]); the
/// payload is parsed only after a signature verified. A reader's whole check, with its
/// threshold, expiry and minimums, is [`super::Policy::verify`].
pub fn verify_envelope(envelope: &[u8], keys: &[PublicKey]) -> Result<Manifest, Refusal> {
    let signed = open_envelope(envelope)?;
    verify_signatures(&signed, keys, 1)?;
    Manifest::parse(&signed.payload)
}

/// The manifest without checking any signature: for the publisher, which keeps the sequence
/// and versions of a manifest signed by another (rotated-out) key. Never for serving.
pub fn read_unverified(envelope: &[u8]) -> Result<Manifest, Refusal> {
    Manifest::parse(&open_envelope(envelope)?.payload)
}

/// The signature entry of `key` over `payload`.
fn signature(payload: &[u8], key: &SigningKey) -> EnvelopeSignature {
    let sig = key.sign(&signed_message(payload));
    EnvelopeSignature { key_id: super::key_id(key.verifying_key().as_bytes()), sig: B64.encode(sig.to_bytes()) }
}

fn to_json(e: &Envelope) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(e).expect("an envelope always serializes");
    v.push(b'\n');
    v
}

/// The envelope JSON (pretty, newline-terminated) for `payload`, signed by `key`.
pub fn sign_envelope(payload: &[u8], key: &SigningKey) -> Vec<u8> {
    to_json(&Envelope { payload_type: PAYLOAD_TYPE.into(), payload: B64.encode(payload), signatures: vec![signature(payload, key)] })
}

/// `envelope` with a signature by `key` over its payload added (one by the same key replaced),
/// the payload and the other signatures as they were: a co-signature for k-of-n readers.
/// Checks the envelope's structure, not the payload or the other signatures.
pub fn cosign_envelope(envelope: &[u8], key: &SigningKey) -> Result<Vec<u8>, Refusal> {
    let payload = open_envelope(envelope)?.payload;
    let mut e: Envelope = serde_json::from_slice(envelope).map_err(|e| Refusal::Malformed(format!("envelope: {}", one_line(&e.to_string(), 300))))?;
    let ours = signature(&payload, key);
    e.signatures.retain(|s| s.key_id != ours.key_id);
    e.signatures.push(ours);
    Ok(to_json(&e))
}
