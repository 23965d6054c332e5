use super::*;
use ed25519_dalek::{Signer, SigningKey};

fn headers(pairs: &[(&str, &str)]) -> Vec<u8> {
    HeaderMap::encode(pairs)
}

/// RFC 9421 Appendix B.2's test request, as Envoy hands it over.
const TEST_REQUEST: [(&str, &str); 8] = [
    (":method", "POST"),
    (":scheme", "https"),
    (":authority", "example.com"),
    (":path", "/foo?param=Value&Pet=dog"),
    ("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
    ("content-type", "application/json"),
    ("content-digest", "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:"),
    ("content-length", "18"),
];

/// RFC 9421 Appendix B.1.4, `test-key-ed25519` (the JWK's `x`).
const RFC_KEY_X: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";

struct Named(&'static str, VerifyingKey);

impl Keys for Named {
    fn lookup(&self, keyid: &[u8]) -> Option<(&VerifyingKey, Verified<'_>)> {
        (keyid == self.0.as_bytes()).then_some((&self.1, Verified { agent: "rfc", keyid: self.0 }))
    }
}

fn rfc_key() -> Named {
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(RFC_KEY_X).unwrap();
    Named("test-key-ed25519", VerifyingKey::from_bytes(&x.try_into().unwrap()).unwrap())
}

fn rfc_policy() -> Policy {
    Policy { tag: None, skew_s: 60, max_validity_s: 300, required_components: vec![], require_expires: false }
}

/// RFC 9421 Appendix B.2.6, "Signing a Request Using ed25519": the same signature base, and
/// the RFC's signature verifies over it.
#[test]
fn rfc9421_b26_ed25519() {
    let mut request: Vec<(&str, &str)> = TEST_REQUEST.to_vec();
    request.push(("signature-input", r#"sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#));
    request.push(("signature", "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:"));
    let buf = headers(&request);
    let map = HeaderMap::parse(&buf).unwrap();
    let mut v = Verifier::new(rfc_policy());
    let key = rfc_key();
    let got = v.verify(&map, 1618884473 + 10, &key);
    let expected_base = concat!(
        "\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n",
        "\"@method\": POST\n",
        "\"@path\": /foo\n",
        "\"@authority\": example.com\n",
        "\"content-type\": application/json\n",
        "\"content-length\": 18\n",
        "\"@signature-params\": (\"date\" \"@method\" \"@path\" \"@authority\" \"content-type\" \"content-length\");created=1618884473;keyid=\"test-key-ed25519\"",
    );
    assert_eq!(std::str::from_utf8(v.last_base()).unwrap(), expected_base);
    assert_eq!(got, Ok(Some(Verified { agent: "rfc", keyid: "test-key-ed25519" })));

    // One covered byte changed: the same signature no longer verifies.
    let tampered: Vec<(&str, &str)> = request.iter().map(|&(k, v)| if k == "date" { (k, "Tue, 20 Apr 2021 02:07:56 GMT") } else { (k, v) }).collect();
    let buf = headers(&tampered);
    assert_eq!(v.verify(&HeaderMap::parse(&buf).unwrap(), 1618884473 + 10, &rfc_key()), Err(Refusal::BadSignature));
}

/// RFC 8037 Appendix A.3: the JWK thumbprint of its Ed25519 example key.
#[test]
fn rfc8037_thumbprint() {
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo").unwrap();
    assert_eq!(directory::thumbprint(&x.try_into().unwrap()), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
}

const NOW: u64 = 1_767_225_600; // 2026-01-01

/// A crawler's key and the directory that publishes it.
fn crawler() -> (SigningKey, Directory) {
    let key = SigningKey::from_bytes(&[7; 32]);
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
    let jwks = format!(r#"{{"keys":[{{"kty":"RSA","n":"AQAB","e":"AQAB"}},{{"kty":"OKP","crv":"Ed25519","x":"{x}","use":"sig"}}]}}"#);
    (key, Directory::from_jwks("example-crawler", jwks.as_bytes()).unwrap())
}

/// A request signed as a Web Bot Auth crawler signs it: `@authority` and `signature-agent`
/// covered, `tag="web-bot-auth"`, `created` and `expires`, `keyid` the JWK thumbprint.
fn signed(key: &SigningKey, params: &str, extra: &[(&'static str, &'static str)]) -> Vec<u8> {
    let mut request = vec![(":method", "GET"), (":scheme", "https"), (":authority", "Shop.Example"), (":path", "/products?page=2"), ("signature-agent", "\"https://crawler.example\"")];
    request.extend_from_slice(extra);
    let input = format!(r#"sig1=("@authority" "signature-agent");{params}"#);
    // The signer's own base, written by hand from RFC 9421 §2.5.
    let base = format!("\"@authority\": shop.example\n\"signature-agent\": \"https://crawler.example\"\n\"@signature-params\": (\"@authority\" \"signature-agent\");{params}");
    let sig = base64::engine::general_purpose::STANDARD.encode(key.sign(base.as_bytes()).to_bytes());
    let pairs: Vec<(String, String)> = request
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([("signature-input".into(), input), ("signature".into(), format!("sig1=:{sig}:"))])
        .collect();
    HeaderMap::encode(&pairs)
}

fn crawler_params(keyid: &str, created: u64, expires: u64) -> String {
    format!(r#"created={created};expires={expires};keyid="{keyid}";alg="ed25519";tag="web-bot-auth""#)
}

fn verify(buf: &[u8], dir: &Directory, now: u64) -> Result<Option<String>, Refusal> {
    let mut v = Verifier::new(Policy::default());
    v.verify(&HeaderMap::parse(buf).unwrap(), now, dir).map(|o| o.map(|s| s.agent.to_string()))
}

#[test]
fn web_bot_auth_crawler_verifies() {
    let (key, dir) = crawler();
    let keyid = dir.keys()[0].keyid.clone();
    let buf = signed(&key, &crawler_params(&keyid, NOW - 5, NOW + 55), &[]);
    assert_eq!(verify(&buf, &dir, NOW), Ok(Some("example-crawler".into())));
}

#[test]
fn clock_checks() {
    let (key, dir) = crawler();
    let keyid = dir.keys()[0].keyid.clone();
    let at = |created: u64, expires: u64, now: u64| verify(&signed(&key, &crawler_params(&keyid, created, expires), &[]), &dir, now);
    assert_eq!(at(NOW - 120, NOW - 61, NOW), Err(Refusal::Expired));
    assert_eq!(at(NOW - 120, NOW - 59, NOW), Ok(Some("example-crawler".into())), "within the skew");
    assert_eq!(at(NOW + 61, NOW + 120, NOW), Err(Refusal::NotYetValid));
    assert_eq!(at(NOW + 59, NOW + 120, NOW), Ok(Some("example-crawler".into())), "within the skew");
    assert_eq!(at(NOW, NOW + 24 * 3600 + 1, NOW), Err(Refusal::ValidityTooLong));
    assert_eq!(at(NOW, NOW - 1, NOW), Err(Refusal::ValidityTooLong));
    let no_expires = format!(r#"created={};keyid="{keyid}";tag="web-bot-auth""#, NOW);
    assert_eq!(verify(&signed(&key, &no_expires, &[]), &dir, NOW), Err(Refusal::MissingParameter));
}

#[test]
fn refusals() {
    let (key, dir) = crawler();
    let keyid = dir.keys()[0].keyid.clone();
    let other = SigningKey::from_bytes(&[9; 32]);
    // Signed by a key no directory holds, under that key's own thumbprint.
    let stranger = directory::thumbprint(other.verifying_key().as_bytes());
    assert_eq!(verify(&signed(&other, &crawler_params(&stranger, NOW, NOW + 60), &[]), &dir, NOW), Err(Refusal::UnknownKey));
    // Signed by another key under the crawler's keyid.
    assert_eq!(verify(&signed(&other, &crawler_params(&keyid, NOW, NOW + 60), &[]), &dir, NOW), Err(Refusal::BadSignature));
    // No web-bot-auth tag.
    let untagged = format!(r#"created={NOW};expires={};keyid="{keyid}""#, NOW + 60);
    assert_eq!(verify(&signed(&key, &untagged, &[]), &dir, NOW), Err(Refusal::NotApplicable));
    let rsa = format!(r#"created={NOW};expires={};keyid="{keyid}";alg="rsa-pss-sha512";tag="web-bot-auth""#, NOW + 60);
    assert!(matches!(verify(&signed(&key, &rsa, &[]), &dir, NOW), Err(Refusal::Unsupported(_))));
    // Unsigned: no opinion.
    let plain = HeaderMap::encode(&[(":method", "GET"), (":authority", "a"), (":path", "/")]);
    assert_eq!(verify(&plain, &dir, NOW), Ok(None));
}

/// Hostile headers: each one is refused by reason after one scan, never a panic.
#[test]
fn malformed_headers() {
    let (_, dir) = crawler();
    let with = |input: &str, signature: &str| {
        let buf = HeaderMap::encode(&[(":method", "GET"), (":authority", "a"), (":path", "/"), ("signature-input", input), ("signature", signature)]);
        verify(&buf, &dir, NOW)
    };
    let ok_sig = "sig1=:AAAA:";
    for input in [
        "",
        "sig1",
        "sig1=",
        "sig1=(",
        "sig1=(\"@authority\"",
        "sig1=(\"@authority\"\"x\")",
        "Sig1=(\"@authority\")",
        "sig1=(\"@authority\");created=",
        "sig1=(\"@authority\");created=1.5",
        "sig1=(\"@authority\");created=1234567890123456",
        "sig1=(\"@authority\");tag=\"unterminated",
        "sig1=(\"@authority\");tag=\"bad\\escape\"",
        "sig1=(\"@authority\"),",
        "sig1=(\"@authority\") junk",
        "sig1=(@authority)",
        "sig1=(\"\u{e9}\")",
    ] {
        assert!(matches!(with(input, ok_sig), Err(Refusal::Malformed(_) | Refusal::Unsupported(_))), "{input:?}: {:?}", with(input, ok_sig));
    }
    assert!(matches!(with("sig1=(\"@authority\";key=\"x\")", ok_sig), Err(Refusal::Unsupported(_))));
    let many = format!("sig1=({});tag=\"web-bot-auth\"", (0..17).map(|i| format!("\"h{i}\"")).collect::<Vec<_>>().join(" "));
    assert!(matches!(with(&many, ok_sig), Err(Refusal::TooLarge(_))));
    let huge = format!("sig1=(\"@authority\");tag=\"{}\"", "a".repeat(MAX_HEADER_BYTES));
    assert!(matches!(with(&huge, ok_sig), Err(Refusal::TooLarge(_))));
    let valid_input = format!(r#"sig1=("@authority");created={NOW};expires={};keyid="{}";tag="web-bot-auth""#, NOW + 60, dir.keys()[0].keyid);
    assert_eq!(with(&valid_input, "sig2=:AAAA:"), Err(Refusal::NoSignature));
    assert!(matches!(with(&valid_input, "sig1=\"text\""), Err(Refusal::Malformed(_))));
    assert!(matches!(with(&valid_input, "sig1=:AAAA:"), Err(Refusal::Malformed(_))), "not 64 bytes");
    assert!(matches!(with(&valid_input, "sig1=:!!:"), Err(Refusal::Malformed(_))));
}

/// The signature base of every supported derived component, against RFC 9421 §2.2's examples
/// for the request `POST /path?param=value HTTP/1.1`, `Host: www.example.com`.
#[test]
fn derived_components() {
    let zero_sig = format!("s=:{}:", base64::engine::general_purpose::STANDARD.encode([0u8; 64]));
    let buf = HeaderMap::encode(&[
        (":method", "POST"),
        (":scheme", "HTTPS"),
        (":authority", "www.Example.com"),
        (":path", "/path?param=value"),
        ("x-dup", " a "),
        ("x-dup", "b"),
        (
            "signature-input",
            r#"s=("@method" "@scheme" "@authority" "@target-uri" "@request-target" "@path" "@query" "x-dup");created=01;keyid="test-key-ed25519";nonce="n\"q";flag;off=?0;tok=a/b;bytes=:AQ==:"#,
        ),
        ("signature", &zero_sig),
    ]);
    let mut v = Verifier::new(Policy { tag: None, skew_s: 0, max_validity_s: 1 << 40, required_components: vec![], require_expires: false });
    assert_eq!(v.verify(&HeaderMap::parse(&buf).unwrap(), 2, &rfc_key()), Err(Refusal::BadSignature));
    let expected = concat!(
        "\"@method\": POST\n",
        "\"@scheme\": https\n",
        "\"@authority\": www.example.com\n",
        "\"@target-uri\": https://www.example.com/path?param=value\n",
        "\"@request-target\": /path?param=value\n",
        "\"@path\": /path\n",
        "\"@query\": ?param=value\n",
        "\"x-dup\": a, b\n",
        "\"@signature-params\": (\"@method\" \"@scheme\" \"@authority\" \"@target-uri\" \"@request-target\" \"@path\" \"@query\" \"x-dup\");created=1;keyid=\"test-key-ed25519\";nonce=\"n\\\"q\";flag;off=?0;tok=a/b;bytes=:AQ==:",
    );
    assert_eq!(std::str::from_utf8(v.last_base()).unwrap(), expected);
}

fn bots(action: &str) -> Bots {
    let json = format!(
        r#"{{"hash_key":"0123456789abcdef","models":[{{"artifact":"","threshold":0.5}}],
            "verified_bots":{{"directories":[{{"name":"example-crawler","cluster":"bots"}}],"action":"{action}"}}}}"#
    );
    Bots::new(&crate::config::PluginConfig::parse(json.as_bytes()).unwrap()).unwrap()
}

/// A worker's checks: unsigned requests are not counted, verified ones and each refusal are,
/// by reason, and the counts are handed over once.
#[test]
fn bots_count_verified_and_refused_by_reason() {
    let (key, dir) = crawler();
    let keyid = dir.keys()[0].keyid.clone();
    let mut b = bots("tag");
    let valid = signed(&key, &crawler_params(&keyid, NOW, NOW + 60), &[]);
    // No keys delivered yet: an unknown key.
    assert_eq!(b.check(&HeaderMap::parse(&valid).unwrap(), NOW), Some(Err(Refusal::UnknownKey)));
    b.set_directory(std::sync::Arc::new(dir.clone()));
    let verified = b.check(&HeaderMap::parse(&valid).unwrap(), NOW).map(|r| r.map(|v| v.agent.to_string()));
    assert_eq!(verified, Some(Ok("example-crawler".to_string())));
    let plain = HeaderMap::encode(&[(":method", "GET"), (":authority", "a"), (":path", "/")]);
    assert_eq!(b.check(&HeaderMap::parse(&plain).unwrap(), NOW), None);
    let other = SigningKey::from_bytes(&[9; 32]);
    let huge = format!("sig1=(\"@authority\");tag=\"{}\"", "a".repeat(MAX_HEADER_BYTES));
    let huge = HeaderMap::encode(&[(":authority", "a"), ("signature-input", huge.as_str()), ("signature", "sig1=:AAAA:")]);
    let malformed = HeaderMap::encode(&[(":authority", "a"), ("signature-input", "sig1=("), ("signature", "sig1=:AAAA:")]);
    for (buf, reason) in [
        (signed(&key, &crawler_params(&keyid, NOW - 600, NOW - 300), &[]), "expired"),
        (signed(&other, &crawler_params(&keyid, NOW, NOW + 60), &[]), "bad_signature"),
        (signed(&other, &crawler_params(&directory::thumbprint(other.verifying_key().as_bytes()), NOW, NOW + 60), &[]), "unknown_key"),
        (huge, "too_large"),
        (malformed, "malformed"),
    ] {
        let got = b.check(&HeaderMap::parse(&buf).unwrap(), NOW);
        assert_eq!(got.and_then(|r| r.err()).map(|r| r.reason()), Some(reason));
    }
    let counts = b.take_counts();
    assert_eq!(counts.verified, 1);
    let by_reason: Vec<(&str, u64)> = REASONS.iter().zip(counts.refused).filter(|(_, n)| *n > 0).map(|(r, n)| (*r, n)).collect();
    assert_eq!(by_reason, [("malformed", 1), ("too_large", 1), ("expired", 1), ("unknown_key", 2), ("bad_signature", 1)]);
    assert_eq!(b.take_counts(), BotCounts::default());
    assert_eq!(bots("allow").action(), crate::config::BotAction::Allow);
}
