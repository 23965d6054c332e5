//! The registry natively: signing round trip, every refusal from a concrete tampering, the
//! stable reason labels, key files and golden-row encoding.

use super::*;
use base64::Engine;
use ed25519_dalek::SigningKey;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
/// Real artifacts (checked in as fuzz seeds): a binary XGBoost model and a LightGBM model with
/// categorical splits.
const XGB: &[u8] = include_bytes!("../../../fuzz/seeds/xgb_binary.esm");
const LGB_CAT: &[u8] = include_bytes!("../../../fuzz/seeds/lgb_categorical.esm");
const HASH_KEY: &[u8] = b"0123456789abcdef";

fn signing(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

fn public(key: &SigningKey) -> PublicKey {
    PublicKey::from_bytes(key.verifying_key().as_bytes()).unwrap()
}

fn entry(bytes: &[u8], mode: ModelMode, version: u64) -> ManifestModel {
    let model = crate::Model::load(bytes).unwrap();
    let e = model.ensemble();
    let sha = sha256_hex(bytes);
    ManifestModel {
        name: e.name().to_string(),
        version,
        mode,
        artifact: artifact_path(&sha),
        size: bytes.len() as u64,
        sha256: sha,
        schema_hash: schema_hash(&e),
        hash_key_id: Some(hash_key_id(HASH_KEY)),
        golden: golden_rows(&e, &default_golden_inputs(&e)),
    }
}

fn manifest(models: Vec<ManifestModel>) -> Manifest {
    Manifest { format: MANIFEST_FORMAT, sequence: 3, published_at: "2026-11-25T03:00:00Z".into(), models }
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

fn signed_manifest(m: &Manifest, key: &SigningKey) -> Vec<u8> {
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
            "malformed",
            "rollback",
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
        Refusal::Malformed("x".into()),
        Refusal::Rollback { name: "bot".into(), have: 7, got: 6 },
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
    assert_eq!(all[7].to_string(), "bot v7: artifact sha256 is 3f, manifest says 9a");
    assert_eq!(all[4].to_string(), "bot: version 6 is lower than the 7 already accepted (a version never goes backwards)");
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
