//! The registry natively: signing round trip, every refusal from a concrete tampering, the
//! reader's policy (k-of-n signatures, expiry, validity, minimums) at its boundaries, the
//! stable reason labels, key files and golden-row encoding.

use super::*;
use base64::Engine;
use ed25519_dalek::SigningKey;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
/// Real artifacts (checked in as fuzz seeds): a binary XGBoost model and a LightGBM model with
/// categorical splits.
pub(crate) const XGB: &[u8] = include_bytes!("../../../fuzz/seeds/xgb_binary.esm");
const LGB_CAT: &[u8] = include_bytes!("../../../fuzz/seeds/lgb_categorical.esm");
const HASH_KEY: &[u8] = b"0123456789abcdef";

pub(crate) fn signing(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

pub(crate) fn public(key: &SigningKey) -> PublicKey {
    PublicKey::from_bytes(key.verifying_key().as_bytes()).unwrap()
}

pub(crate) fn entry(bytes: &[u8], mode: ModelMode, version: u64) -> ManifestModel {
    let model = crate::Model::load(bytes).unwrap();
    let e = model.ensemble();
    ManifestModel::of_artifact(bytes, &e, version, mode, Some(hash_key_id(HASH_KEY)), golden_rows(&e, &default_golden_inputs(&e)))
}

/// `published_at` of [`manifest`]: 2026-11-25T03:00:00Z.
pub(crate) const PUBLISHED: u64 = 1_795_575_600;
/// `expires` of [`manifest`]: a week later.
pub(crate) const EXPIRES: u64 = PUBLISHED + 7 * 86_400;

pub(crate) fn manifest(models: Vec<ManifestModel>) -> Manifest {
    Manifest { format: MANIFEST_FORMAT, sequence: 3, published_at: format_utc(PUBLISHED), expires: Some(format_utc(EXPIRES)), models }
}

fn envelope_json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

/// Re-encodes an envelope after `edit` changed it.
fn edited(envelope: &[u8], edit: impl FnOnce(&mut Envelope)) -> Vec<u8> {
    let mut e: Envelope = serde_json::from_slice(envelope).unwrap();
    edit(&mut e);
    serde_json::to_vec(&e).unwrap()
}

pub(crate) fn signed_manifest(m: &Manifest, key: &SigningKey) -> Vec<u8> {
    sign_envelope(&m.to_json(), key)
}

fn reason<T>(r: Result<T, Refusal>) -> (&'static str, String) {
    let err = r.err().expect("refused");
    (err.reason(), err.to_string())
}

#[test]
fn sign_and_verify_round_trip() {
    let key = signing(1);
    let m = manifest(vec![entry(XGB, ModelMode::Active, 7), entry(LGB_CAT, ModelMode::Shadow, 2)]);
    let env = signed_manifest(&m, &key);
    let got = verify_envelope(&env, &[public(&key)]).unwrap();
    assert_eq!(got.sequence, 3);
    assert_eq!(got.models.len(), 2);
    // Golden rows survive JSON bitwise (PartialEq on f32 is fine: the rows hold no NaN output).
    assert_eq!(got, m);
    for model in &got.models {
        let bytes = if model.mode == ModelMode::Active { XGB } else { LGB_CAT };
        let loaded = check_artifact(model, bytes, 1 << 20, Some(&hash_key_id(HASH_KEY))).unwrap();
        assert_eq!(loaded.as_bytes(), bytes);
    }
    // The envelope is what docs/registry.md says.
    let v = envelope_json(&env);
    assert_eq!(v["payload_type"], PAYLOAD_TYPE);
    assert_eq!(B64.decode(v["payload"].as_str().unwrap()).unwrap(), m.to_json());
    let sig = B64.decode(v["signatures"][0]["sig"].as_str().unwrap()).unwrap();
    assert_eq!(sig.len(), 64);
    let kid = v["signatures"][0]["key_id"].as_str().unwrap();
    assert!(kid.starts_with("ed25519:") && is_hex(&kid[8..], 16), "{kid}");
    // The signature is over the context string followed by the payload, and nothing else.
    let sig = ed25519_dalek::Signature::from_bytes(&sig.try_into().unwrap());
    let mut msg = b"edgescore-manifest-v1\0".to_vec();
    msg.extend_from_slice(&m.to_json());
    assert!(key.verifying_key().verify_strict(&msg, &sig).is_ok());
    assert!(key.verifying_key().verify_strict(&m.to_json(), &sig).is_err());
}

#[test]
fn any_configured_key_may_sign() {
    let (old, new) = (signing(1), signing(2));
    let m = manifest(vec![entry(XGB, ModelMode::Active, 1)]);
    // Two signatures: one by a key the reader no longer has, one by the current key.
    let by_new = signed_manifest(&m, &new);
    let by_old: Envelope = serde_json::from_slice(&signed_manifest(&m, &old)).unwrap();
    let both = edited(&by_new, |e| e.signatures.insert(0, by_old.signatures[0].clone()));
    assert!(verify_envelope(&both, &[public(&new)]).is_ok());
    assert!(verify_envelope(&both, &[public(&old)]).is_ok());
    assert!(verify_envelope(&by_new, &[public(&old), public(&new)]).is_ok());
}

#[test]
fn one_verification_per_configured_key() {
    let key = signing(1);
    let env = signed_manifest(&manifest(vec![]), &key);
    let good: Envelope = serde_json::from_slice(&env).unwrap();
    let mut bad = good.signatures[0].clone();
    bad.sig = B64.encode([0u8; 64]);
    // Many bad signatures under the configured id before the good one: only the first is tried.
    let stuffed = edited(&env, |e| e.signatures = [vec![bad.clone(); 1000], good.signatures.clone()].concat());
    assert_eq!(reason(verify_envelope(&stuffed, &[public(&key)])).0, "bad_signature");
    // Signatures by unknown keys cost nothing and do not hide a good one.
    let other = EnvelopeSignature { key_id: "ed25519:0000000000000000".into(), sig: bad.sig.clone() };
    let padded = edited(&env, |e| e.signatures = [vec![other; 1000], good.signatures.clone()].concat());
    assert!(verify_envelope(&padded, &[public(&key)]).is_ok());
    let (r, msg) = reason(verify_envelope(&padded, &[public(&signing(2))]));
    assert_eq!(r, "unknown_key");
    assert_eq!(msg.matches("ed25519:").count(), 2, "{msg}");
}

#[test]
fn flipped_payload_byte_is_a_bad_signature() {
    let key = signing(1);
    let m = manifest(vec![entry(XGB, ModelMode::Active, 1)]);
    let env = signed_manifest(&m, &key);
    let tampered = edited(&env, |e| {
        let mut p = B64.decode(&e.payload).unwrap();
        // "sequence": 3 → 4: still a valid manifest, only the signature catches it.
        let at = p.windows(12).position(|w| w == b"\"sequence\":3").unwrap() + 11;
        p[at] = b'4';
        e.payload = B64.encode(p);
    });
    let (r, msg) = reason(verify_envelope(&tampered, &[public(&key)]));
    assert_eq!(r, "bad_signature");
    assert!(msg.contains(&public(&key).key_id), "{msg}");
    // Any single bit of the payload.
    let payload = m.to_json();
    for i in (0..payload.len()).step_by(97) {
        let t = edited(&env, |e| {
            let mut p = payload.clone();
            p[i] ^= 0x20;
            e.payload = B64.encode(p);
        });
        assert_eq!(verify_envelope(&t, &[public(&key)]).unwrap_err().reason(), "bad_signature", "byte {i}");
    }
}

#[test]
fn flipped_signature_byte_is_a_bad_signature() {
    let key = signing(1);
    let env = signed_manifest(&manifest(vec![entry(XGB, ModelMode::Active, 1)]), &key);
    for i in [0, 31, 32, 63] {
        let t = edited(&env, |e| {
            let mut s = B64.decode(&e.signatures[0].sig).unwrap();
            s[i] ^= 1;
            e.signatures[0].sig = B64.encode(s);
        });
        assert_eq!(reason(verify_envelope(&t, &[public(&key)])).0, "bad_signature");
    }
    // A signature that is not 64 bytes of base64.
    let t = edited(&env, |e| e.signatures[0].sig = "AAAA".into());
    assert_eq!(reason(verify_envelope(&t, &[public(&key)])).0, "bad_signature");
}

#[test]
fn dropped_signatures_are_unsigned() {
    let key = signing(1);
    let env = signed_manifest(&manifest(vec![]), &key);
    let t = edited(&env, |e| e.signatures.clear());
    let (r, msg) = reason(verify_envelope(&t, &[public(&key)]));
    assert_eq!(r, "unsigned");
    assert!(msg.contains("not signed"), "{msg}");
}

#[test]
fn unknown_key_is_named() {
    let (signer, configured) = (signing(1), signing(2));
    let env = signed_manifest(&manifest(vec![]), &signer);
    let (r, msg) = reason(verify_envelope(&env, &[public(&configured)]));
    assert_eq!(r, "unknown_key");
    assert!(msg.contains(&public(&signer).key_id), "{msg}");
    assert_eq!(reason(verify_envelope(&env, &[])).0, "unknown_key");
    // A key id that claims a configured key but was made by another is a bad signature.
    let t = edited(&env, |e| e.signatures[0].key_id = public(&configured).key_id);
    assert_eq!(reason(verify_envelope(&t, &[public(&configured)])).0, "bad_signature");
}

#[test]
fn malformed_envelopes_and_manifests() {
    let key = signing(1);
    let keys = [public(&key)];
    let good = manifest(vec![entry(XGB, ModelMode::Active, 1)]);
    let env = signed_manifest(&good, &key);
    // Not JSON, not an envelope, a wrong payload type, bad base64, an unknown envelope field.
    for bad in [
        b"not json".to_vec(),
        b"{}".to_vec(),
        br#"<html>404</html>"#.to_vec(),
        edited(&env, |e| e.payload_type = "application/json".into()),
        edited(&env, |e| e.payload.insert(3, '*')),
        {
            let mut v = envelope_json(&env);
            v["extra"] = 1.into();
            serde_json::to_vec(&v).unwrap()
        },
    ] {
        let (r, msg) = reason(verify_envelope(&bad, &keys));
        assert_eq!(r, "malformed", "{msg}");
        assert!(msg.starts_with("malformed manifest: "), "{msg}");
    }
    // Text from the envelope cannot break the one-line message.
    let evil = br#"{"payload_type":"x","payload":"","signatures":[],"line\nbreak":1}"#;
    let (r, msg) = reason(verify_envelope(evil, &keys));
    assert_eq!(r, "malformed");
    assert!(!msg.contains('\n') && msg.contains("line\\nbreak"), "{msg}");
    let evil_id = edited(&env, |e| e.signatures[0].key_id = "ed25519:x\ninjected".into());
    let (r, msg) = reason(verify_envelope(&evil_id, &keys));
    assert_eq!(r, "unknown_key");
    assert!(!msg.contains('\n'), "{msg}");
    // Signed payloads that are not acceptable manifests: the signature verifies, the payload
    // does not parse or check.
    let resign = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value = serde_json::from_slice(&good.to_json()).unwrap();
        edit(&mut v);
        sign_envelope(&serde_json::to_vec(&v).unwrap(), &key)
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (sign_envelope(b"{\"format\": 1,", &key), "EOF"),
        (resign(&|v| v["format"] = 2.into()), "format 2 is not supported"),
        (resign(&|v| v["surprise"] = true.into()), "unknown field `surprise`"),
        (resign(&|v| v["models"][0]["weight"] = 1.into()), "models[0].weight: unknown field `weight`"),
        (resign(&|v| v["models"][0]["mode"] = "canary".into()), "models[0].mode"),
        (resign(&|v| v["sequence"] = (-1).into()), "sequence"),
        (resign(&|v| v["models"][0]["artifact"] = "../../etc/passwd".into()), "artifact path"),
        (resign(&|v| v["models"][0]["artifact"] = format!("artifacts/{}.esm", "0".repeat(64)).into()), "artifact path"),
        (resign(&|v| v["models"][0]["sha256"] = "ABC".into()), "sha256"),
        (resign(&|v| v["models"][0]["schema_hash"] = "x".into()), "schema_hash"),
        (resign(&|v| v["models"][0]["hash_key_id"] = "xyz".into()), "hash_key_id"),
        (resign(&|v| v["models"][0]["golden"][0]["y"][0] = "lots".into()), "golden[0].y"),
        (resign(&|v| v["models"][0]["golden"][0]["y"][0] = serde_json::Value::Null), "golden[0].y"),
        (
            resign(&|v| {
                let m = v["models"][0].clone();
                v["models"].as_array_mut().unwrap().push(m);
            }),
            "a second active entry",
        ),
        (
            resign(&|v| {
                let row = v["models"][0]["golden"][0].clone();
                v["models"][0]["golden"] = serde_json::Value::Array(vec![row; 9]);
            }),
            "9 golden rows",
        ),
    ];
    for (bytes, needle) in cases {
        let (r, msg) = reason(verify_envelope(&bytes, &keys));
        assert_eq!(r, "malformed", "{msg}");
        assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
        assert!(!msg.contains('\n'), "{msg}");
    }
    // One active and one shadow entry for a name is fine.
    let two = manifest(vec![entry(XGB, ModelMode::Active, 1), entry(XGB, ModelMode::Shadow, 2)]);
    assert!(verify_envelope(&signed_manifest(&two, &key), &keys).is_ok());
}

#[test]
fn artifact_refusals() {
    let good = entry(XGB, ModelMode::Active, 7);
    let kid = hash_key_id(HASH_KEY);
    let check = |e: &ManifestModel, bytes: &[u8]| check_artifact(e, bytes, 1 << 20, Some(&kid));
    assert!(check(&good, XGB).is_ok());

    // One wrong byte (same length): the SHA-256 catches it before anything else.
    let mut flipped = XGB.to_vec();
    flipped[XGB.len() / 2] ^= 1;
    let (r, msg) = reason(check(&good, &flipped));
    assert_eq!(r, "sha_mismatch");
    assert!(msg.starts_with(&format!("{} v7: artifact sha256 is ", good.name)) && msg.contains(&good.sha256), "{msg}");

    // Cut short, or padded.
    let (r, msg) = reason(check(&good, &XGB[..XGB.len() - 100]));
    assert_eq!(r, "truncated");
    assert!(msg.contains(&format!("manifest says {}", XGB.len())), "{msg}");
    assert_eq!(reason(check(&good, &[XGB, b"x"].concat())).0, "truncated");

    // Over the limit: the bytes, or only the declared size.
    let (r, msg) = reason(check_artifact(&good, XGB, 1000, None));
    assert_eq!(r, "oversized");
    assert!(msg.contains("1000-byte limit"), "{msg}");
    let huge = ManifestModel { size: 1 << 40, ..good.clone() };
    assert_eq!(reason(check(&huge, XGB)).0, "oversized");

    // Bytes the manifest vouches for (size and sha match) that fail validation.
    let bad = ManifestModel { size: flipped.len() as u64, sha256: sha256_hex(&flipped), artifact: artifact_path(&sha256_hex(&flipped)), ..good.clone() };
    let (r, msg) = reason(check(&bad, &flipped));
    assert_eq!(r, "invalid_artifact");
    assert!(msg.contains("checksum mismatch"), "{msg}");

    // The schema the manifest states is not the artifact's.
    let other_schema = ManifestModel { schema_hash: entry(LGB_CAT, ModelMode::Active, 1).schema_hash, ..good.clone() };
    let (r, msg) = reason(check(&other_schema, XGB));
    assert_eq!(r, "schema_mismatch");
    assert!(msg.contains("feature schema hash"), "{msg}");
    let renamed = ManifestModel { name: "abuse".into(), ..good.clone() };
    let (r, msg) = reason(check(&renamed, XGB));
    assert_eq!(r, "schema_mismatch");
    assert!(msg.contains("model name"), "{msg}");

    // Published for another hash key; not checked when either side does not say.
    let (r, msg) = reason(check_artifact(&good, XGB, 1 << 20, Some(&hash_key_id(b"another key of 16b"))));
    assert_eq!(r, "schema_mismatch");
    assert!(msg.contains("hash key"), "{msg}");
    assert!(check_artifact(&good, XGB, 1 << 20, None).is_ok());
    assert!(check(&ManifestModel { hash_key_id: None, ..good.clone() }, XGB).is_ok());

    // A golden output off by one ulp.
    let mut golden = good.clone();
    let row = golden.golden.len() - 1;
    let y = &mut golden.golden[row].y[0];
    *y = f32::from_bits(y.to_bits() + 1);
    let (r, msg) = reason(check(&golden, XGB));
    assert_eq!(r, "golden_mismatch");
    assert!(msg.contains(&format!("golden row {row}: output 0 scores")), "{msg}");
    assert_eq!(golden_rows_of(reason_err(check(&golden, XGB))), Some(row));
    // A golden row with the wrong number of inputs.
    let mut short = good.clone();
    short.golden[0].x.pop();
    assert_eq!(reason(check(&short, XGB)).0, "golden_mismatch");
}

fn reason_err<T>(r: Result<T, Refusal>) -> Refusal {
    r.err().unwrap()
}

fn golden_rows_of(r: Refusal) -> Option<usize> {
    match r {
        Refusal::GoldenMismatch { row, .. } => Some(row),
        _ => None,
    }
}

#[test]
fn golden_rows_take_real_branches() {
    for bytes in [XGB, LGB_CAT] {
        let m = crate::Model::load(bytes).unwrap();
        let e = m.ensemble();
        let inputs = default_golden_inputs(&e);
        assert!(inputs.len() > 2 && inputs.len() <= MAX_GOLDEN_ROWS);
        assert!(inputs[0].iter().all(Option::is_none));
        assert_eq!(inputs, default_golden_inputs(&e), "deterministic");
        let rows = golden_rows(&e, &inputs);
        let mut ys: Vec<u32> = rows.iter().map(|r| r.y[0].to_bits()).collect();
        ys.sort();
        ys.dedup();
        assert!(ys.len() >= 3, "golden rows should score differently: {rows:?}");
        for r in &rows {
            assert_eq!(row_matches(&e, r), Ok(()));
        }
    }
}

#[test]
fn golden_numbers_round_trip_bitwise() {
    let row = GoldenRow { x: vec![Some(0.5), None, Some(f32::INFINITY), Some(-0.0), Some(f32::MIN_POSITIVE / 4.0)], y: vec![f32::NAN, f32::NEG_INFINITY, 0.0123, 1e-45] };
    let text = serde_json::to_string(&row).unwrap();
    assert_eq!(text, r#"{"x":[0.5,null,"Infinity",-0.0,2.938736e-39],"y":["NaN","-Infinity",0.0123,1e-45]}"#);
    let back: GoldenRow = serde_json::from_str(&text).unwrap();
    assert_eq!(back.x.iter().map(|v| v.map(f32::to_bits)).collect::<Vec<_>>(), row.x.iter().map(|v| v.map(f32::to_bits)).collect::<Vec<_>>());
    assert!(back.y[0].is_nan());
    assert_eq!(back.y[1..].iter().map(|v| v.to_bits()).collect::<Vec<_>>(), row.y[1..].iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    // Shortest f32 text → f64 → f32 is exact for every finite f32: spot-check many.
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut y = Vec::new();
    while y.len() < 20_000 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let v = f32::from_bits(s as u32);
        if v.is_finite() {
            y.push(v);
        }
    }
    let back: GoldenRow = serde_json::from_str(&serde_json::to_string(&GoldenRow { x: vec![], y: y.clone() }).unwrap()).unwrap();
    assert!(back.y.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits()));
}

#[test]
fn reasons_are_stable() {
    assert_eq!(
        REASONS,
        [
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
            "unreachable"
        ]
    );
    let m = || "bot v7".to_string();
    let all = [
        Refusal::Unsigned,
        Refusal::UnknownKey { key_ids: vec!["ed25519:0011223344556677".into()] },
        Refusal::BadSignature { key_id: "ed25519:0011223344556677".into() },
        Refusal::TooFewSignatures { signed_by: vec!["ed25519:0011223344556677".into()], threshold: 2 },
        Refusal::Malformed("x".into()),
        Refusal::Expired { expires: "2026-12-02T03:00:00Z".into(), now: "2026-12-02T03:00:00Z".into() },
        Refusal::ValidityTooLong { valid_s: None, max_s: 60 },
        Refusal::Rollback { name: "bot".into(), have: 7, got: 6 },
        Refusal::BelowMinimum { what: "bot version (registry.min_versions.bot)".into(), min: 7, got: 6 },
        Refusal::Oversized { model: m(), size: 10, max: 5 },
        Refusal::Truncated { model: m(), expected: 10, got: 5 },
        Refusal::ShaMismatch { model: m(), expected: "9a".into(), got: "3f".into() },
        Refusal::InvalidArtifact { model: m(), error: crate::ArtifactError::BadMagic },
        Refusal::SchemaMismatch("bot v7: x".into()),
        Refusal::GoldenMismatch { model: m(), row: 2, detail: "x".into() },
        Refusal::Unreachable("connect refused".into()),
    ];
    let got: Vec<&str> = all.iter().map(Refusal::reason).collect();
    assert_eq!(got, REASONS);
    for r in &all {
        let text = r.to_string();
        assert!(!text.is_empty() && !text.contains('\n'), "{text}");
    }
    assert_eq!(all[11].to_string(), "bot v7: artifact sha256 is 3f, manifest says 9a");
    assert_eq!(all[7].to_string(), "bot: version 6 is lower than the 7 already accepted (a version never goes backwards)");
    assert_eq!(all[8].to_string(), "bot version (registry.min_versions.bot) is 6, below the configured minimum 7");
    assert_eq!(all[3].to_string(), "manifest is signed by 1 of the configured keys (ed25519:0011223344556677), 2 required");
    assert_eq!(Refusal::sequence_rollback(12, 11).reason(), "rollback");
}

#[test]
fn key_files() {
    let key = signing(9);
    let pub_text = public_key_file(&key.verifying_key());
    let parsed = parse_public_key(&pub_text).unwrap();
    assert_eq!(parsed, public(&key));
    assert_eq!(parsed.key_id, key_id(key.verifying_key().as_bytes()));
    let v: serde_json::Value = serde_json::from_str(&pub_text).unwrap();
    assert_eq!(v["kind"], PUBLIC_KEY_KIND);
    assert_eq!(v["key_id"], parsed.key_id.as_str());
    // The bare base64 key works too (e.g. inline in a configuration).
    assert_eq!(parse_public_key(&format!(" {}\n", v["public"].as_str().unwrap())).unwrap(), parsed);
    // A stated key id that is not the key's.
    let wrong = pub_text.replace(&parsed.key_id, "ed25519:0000000000000000");
    assert!(matches!(parse_public_key(&wrong), Err(RegistryError::KeyIdMismatch { .. })));
    assert!(parse_public_key("{\"kind\":\"edgescore-ed25519-secret\"}").is_err());
    assert!(parse_public_key("AAAA").is_err());
    // A small-order point is refused.
    let mut weak = [0u8; 32];
    weak[0] = 1;
    assert!(PublicKey::from_bytes(&weak).is_err());

    let secret_text = secret_key_file(&key);
    let back = parse_secret_key(&secret_text).unwrap();
    assert_eq!(back.to_bytes(), key.to_bytes());
    let v: serde_json::Value = serde_json::from_str(&secret_text).unwrap();
    assert_eq!(v["kind"], SECRET_KEY_KIND);
    assert_eq!(v["key_id"], parsed.key_id.as_str());
    assert!(parse_secret_key(&pub_text).is_err());
}

#[test]
fn hashes_are_as_documented() {
    use sha2::{Digest, Sha256};
    let m = crate::Model::load(LGB_CAT).unwrap();
    let e = m.ensemble();
    let mut text = String::from("edgescore-schema-v1\n");
    for (i, f) in e.features().iter().enumerate() {
        let kind = if f.kind == 1 { "categorical" } else { "numeric" };
        text += &format!("{}\t{kind}\t{}\n", e.feature_name(i), f.buckets);
    }
    assert!(text.contains("\tcategorical\t"), "{text}");
    assert_eq!(schema_hash(&e), hex(&Sha256::digest(text.as_bytes())));
    assert_eq!(hash_key_id(b"k"), hex(&Sha256::digest(b"edgescore-hash-key-v1\0k")[..8]));
    assert_eq!(key_id(&[7; 32]), format!("ed25519:{}", hex(&Sha256::digest([7u8; 32])[..8])));
}

/// A policy trusting `keys` with `threshold`, the other settings at their defaults.
fn policy(keys: &[&SigningKey], threshold: usize) -> Policy {
    Policy { threshold, ..Policy::new(keys.iter().map(|k| public(k)).collect()) }
}

/// `m` signed by every key of `keys`, in order (the first signs, the others co-sign).
fn signed_by(m: &Manifest, keys: &[&SigningKey]) -> Vec<u8> {
    let mut env = sign_envelope(&m.to_json(), keys[0]);
    for k in &keys[1..] {
        env = cosign_envelope(&env, k).unwrap();
    }
    env
}

#[test]
fn expiry_is_refused_from_the_second_it_names() {
    let key = signing(1);
    let p = policy(&[&key], 1);
    let env = signed_manifest(&manifest(vec![]), &key);
    assert!(p.verify(&env, PUBLISHED).is_ok());
    assert!(p.verify(&env, EXPIRES - 1).is_ok(), "one second before expires");
    let (r, msg) = reason(p.verify(&env, EXPIRES));
    assert_eq!(r, "expired", "exactly at expires");
    assert_eq!(
        msg,
        "manifest expired at 2026-12-02T03:00:00Z (now 2026-12-02T03:00:00Z): the registry was not renewed (`edgescore renew`), or its server shows an old copy"
    );
    assert_eq!(reason(p.verify(&env, u64::MAX)).0, "expired");
    // The expiry is signed: moving it changes the payload, and the signature no longer verifies.
    let moved = edited(&env, |e| {
        let text = String::from_utf8(B64.decode(&e.payload).unwrap()).unwrap();
        e.payload = B64.encode(text.replace(&format_utc(EXPIRES), &format_utc(EXPIRES + 86_400)));
    });
    assert_eq!(reason(p.verify(&moved, EXPIRES)).0, "bad_signature");
}

#[test]
fn validity_is_bounded_and_expiry_required() {
    let key = signing(1);
    let at = |published: u64, expires: Option<u64>| {
        let m = Manifest { published_at: format_utc(published), expires: expires.map(format_utc), ..manifest(vec![]) };
        signed_manifest(&m, &key)
    };
    let hour = Policy { max_validity_s: 3600, ..policy(&[&key], 1) };
    assert!(hour.verify(&at(PUBLISHED, Some(PUBLISHED + 3600)), PUBLISHED).is_ok(), "exactly the maximum");
    let (r, msg) = reason(hour.verify(&at(PUBLISHED, Some(PUBLISHED + 3601)), PUBLISHED));
    assert_eq!(r, "validity_too_long", "one second over");
    assert!(msg.contains("valid for 3601 s") && msg.contains("3600 s") && msg.contains("registry.max_validity_s"), "{msg}");
    // The default bound: 31 days.
    let p = policy(&[&key], 1);
    assert!(p.verify(&at(PUBLISHED, Some(PUBLISHED + DEFAULT_MAX_VALIDITY_S)), PUBLISHED).is_ok());
    assert_eq!(reason(p.verify(&at(PUBLISHED, Some(PUBLISHED + DEFAULT_MAX_VALIDITY_S + 1)), PUBLISHED)).0, "validity_too_long");
    // Too long and expired: the validity is what the manifest says about itself, checked first.
    assert_eq!(reason(hour.verify(&at(PUBLISHED, Some(PUBLISHED + 7200)), PUBLISHED + 9000)).0, "validity_too_long");
    // Without expires: refused unless the reader says otherwise (a registry being migrated).
    let forever = at(PUBLISHED, None);
    let (r, msg) = reason(p.verify(&forever, PUBLISHED));
    assert_eq!(r, "validity_too_long");
    assert!(msg.contains("no `expires`") && msg.contains("edgescore renew"), "{msg}");
    let migrating = Policy { require_expiry: false, ..p.clone() };
    assert!(migrating.verify(&forever, u64::MAX).is_ok());
    // require_expiry false does not relax a manifest that has one.
    assert_eq!(reason(migrating.verify(&at(PUBLISHED, Some(PUBLISHED + 60)), PUBLISHED + 60)).0, "expired");
}

#[test]
fn manifest_times_must_be_utc_and_ordered() {
    let key = signing(1);
    let keys = [public(&key)];
    for (published, expires, needle) in [
        ("2026-11-25T03:00:00Z", Some("2026-11-25T03:00:00Z"), "is not after published_at"),
        ("2026-11-25T03:00:00Z", Some("2026-11-25T02:59:59Z"), "is not after published_at"),
        ("2026-11-25T03:00:00Z", Some("2026-12-02T03:00:00+00:00"), "expires \"2026-12-02T03:00:00+00:00\" is not a UTC time"),
        ("2026-11-25T03:00:00Z", Some(""), "expires \"\" is not a UTC time"),
        ("2026-11-25 03:00:00", Some("2026-12-02T03:00:00Z"), "published_at \"2026-11-25 03:00:00\" is not a UTC time"),
        ("", None, "published_at \"\" is not a UTC time"),
    ] {
        let m = Manifest { published_at: published.into(), expires: expires.map(String::from), ..manifest(vec![]) };
        let (r, msg) = reason(verify_envelope(&signed_manifest(&m, &key), &keys));
        assert_eq!(r, "malformed", "{msg}");
        assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
    }
    // A manifest without expires parses (the reader's policy decides); its JSON has no field.
    let m = Manifest { expires: None, ..manifest(vec![]) };
    assert!(!String::from_utf8(m.to_json()).unwrap().contains("expires"));
    assert_eq!(verify_envelope(&signed_manifest(&m, &key), &keys).unwrap(), m);
    // A policy given a manifest built in memory, not parsed, refuses times it cannot read.
    let unparsed = Manifest { expires: Some("soon".into()), ..manifest(vec![]) };
    assert_eq!(reason(policy(&[&key], 1).check_manifest(&unparsed, PUBLISHED)).0, "malformed");
}

#[test]
fn minimums_hold_whatever_was_accepted_before() {
    let key = signing(1);
    let m = manifest(vec![entry(XGB, ModelMode::Active, 7)]);
    let env = signed_manifest(&m, &key);
    let name = m.models[0].name.clone();
    let at_floor = Policy { min_sequence: 3, min_versions: [(name.clone(), 7)].into(), ..policy(&[&key], 1) };
    assert!(at_floor.verify(&env, PUBLISHED).is_ok(), "sequence 3 at min_sequence 3");
    assert!(at_floor.check_entry(&m.models[0]).is_ok(), "version 7 at minimum 7");
    let above = Policy { min_sequence: 4, min_versions: [(name.clone(), 8)].into(), ..at_floor.clone() };
    let (r, msg) = reason(above.verify(&env, PUBLISHED));
    assert_eq!(r, "below_minimum");
    assert_eq!(msg, "manifest sequence (registry.min_sequence) is 3, below the configured minimum 4");
    let (r, msg) = reason(above.check_entry(&m.models[0]));
    assert_eq!(r, "below_minimum");
    assert_eq!(msg, format!("{name} version (registry.min_versions.{name}) is 7, below the configured minimum 8"));
    // A floor for one name says nothing about another.
    let other = ManifestModel { name: "other".into(), version: 1, ..m.models[0].clone() };
    assert!(above.check_entry(&other).is_ok());
    // Expired and below the minimum: the expiry is the reason (the signed times come first).
    assert_eq!(reason(above.verify(&env, EXPIRES)).0, "expired");
}

#[test]
fn k_of_n_signatures() {
    let (a, b, c, outsider) = (signing(1), signing(2), signing(3), signing(4));
    let m = manifest(vec![entry(XGB, ModelMode::Active, 1)]);
    let two_of_three = policy(&[&a, &b, &c], 2);
    // k − 1 signatures: refused, naming who signed.
    let (r, msg) = reason(two_of_three.verify(&signed_by(&m, &[&a]), PUBLISHED));
    assert_eq!(r, "too_few_signatures");
    assert_eq!(msg, format!("manifest is signed by 1 of the configured keys ({}), 2 required", public(&a).key_id));
    // k, in any order, and more than k.
    for signers in [vec![&a, &b], vec![&c, &a], vec![&b, &c], vec![&a, &b, &c]] {
        let signed = open_envelope(&signed_by(&m, &signers)).unwrap();
        let by = two_of_three.signatures(&signed).unwrap();
        assert_eq!(by.len(), 2, "stops at the threshold");
        assert!(by.iter().all(|id| signers.iter().any(|s| public(s).key_id == *id)), "{by:?}");
        assert_eq!(two_of_three.verify(&signed_by(&m, &signers), PUBLISHED).unwrap(), m);
    }
    // The same key twice counts once: a duplicated signature entry, a second co-signature by
    // the same key, or the key configured twice.
    let a_twice = edited(&signed_by(&m, &[&a]), |e| e.signatures.push(e.signatures[0].clone()));
    assert_eq!(reason(two_of_three.verify(&a_twice, PUBLISHED)).0, "too_few_signatures");
    let recosigned = cosign_envelope(&signed_by(&m, &[&a]), &a).unwrap();
    assert_eq!(open_envelope(&recosigned).unwrap().signatures.len(), 1, "co-signing again replaces");
    assert_eq!(reason(two_of_three.verify(&recosigned, PUBLISHED)).0, "too_few_signatures");
    let a_configured_twice = Policy { keys: vec![public(&a), public(&a), public(&b)], ..two_of_three.clone() };
    assert_eq!(reason(a_configured_twice.verify(&a_twice, PUBLISHED)).0, "too_few_signatures");
    assert!(a_configured_twice.verify(&signed_by(&m, &[&a, &b]), PUBLISHED).is_ok());
    // A key the reader does not have adds nothing.
    assert_eq!(reason(two_of_three.verify(&signed_by(&m, &[&a, &outsider]), PUBLISHED)).0, "too_few_signatures");
    // A configured key's bad signature beside a good one: too few good ones.
    let bad_b = edited(&signed_by(&m, &[&a, &b]), |e| e.signatures[1].sig = B64.encode([0u8; 64]));
    assert_eq!(reason(two_of_three.verify(&bad_b, PUBLISHED)).0, "too_few_signatures");
    // None good: the reasons of a single signature stay.
    assert_eq!(reason(two_of_three.verify(&signed_by(&m, &[&outsider]), PUBLISHED)).0, "unknown_key");
    let bad_a = edited(&signed_by(&m, &[&a]), |e| e.signatures[0].sig = B64.encode([0u8; 64]));
    assert_eq!(reason(two_of_three.verify(&bad_a, PUBLISHED)).0, "bad_signature");
    assert_eq!(reason(two_of_three.verify(&edited(&bad_a, |e| e.signatures.clear()), PUBLISHED)).0, "unsigned");
    // k = 1 is any one key.
    assert!(policy(&[&a, &b, &c], 1).verify(&signed_by(&m, &[&c]), PUBLISHED).is_ok());
}

#[test]
fn cosigning_keeps_the_payload_and_the_other_signatures() {
    let (a, b) = (signing(1), signing(2));
    let m = manifest(vec![entry(XGB, ModelMode::Active, 1)]);
    let by_a = signed_manifest(&m, &a);
    let both = cosign_envelope(&by_a, &b).unwrap();
    let (before, after): (Envelope, Envelope) = (serde_json::from_slice(&by_a).unwrap(), serde_json::from_slice(&both).unwrap());
    assert_eq!(after.payload, before.payload, "the payload text is untouched");
    assert_eq!(after.signatures[0], before.signatures[0]);
    assert_eq!(after.signatures[1].key_id, public(&b).key_id);
    assert!(policy(&[&a, &b], 2).verify(&both, PUBLISHED).is_ok());
    // What cannot be opened cannot be co-signed.
    assert_eq!(reason(cosign_envelope(b"{}", &b)).0, "malformed");
    assert_eq!(reason(cosign_envelope(&edited(&by_a, |e| e.payload_type = "x".into()), &b)).0, "malformed");
}

#[test]
fn policies_that_cannot_be_met_are_refused() {
    let (a, b) = (signing(1), signing(2));
    assert_eq!(policy(&[&a, &b], 2).validate(), Ok(()));
    assert_eq!(policy(&[&a], 0).validate(), Err(PolicyError::ThresholdZero));
    assert_eq!(policy(&[&a, &b], 3).validate(), Err(PolicyError::ThresholdAboveKeys { threshold: 3, keys: 2 }));
    assert_eq!(policy(&[&a, &a], 2).validate(), Err(PolicyError::ThresholdAboveKeys { threshold: 2, keys: 1 }));
    for bad in [0, 59, 366 * 86_400 + 1] {
        assert_eq!(Policy { max_validity_s: bad, ..policy(&[&a], 1) }.validate(), Err(PolicyError::Validity(bad)));
    }
    for good in [60, DEFAULT_MAX_VALIDITY_S, 366 * 86_400] {
        assert_eq!(Policy { max_validity_s: good, ..policy(&[&a], 1) }.validate(), Ok(()));
    }
}
