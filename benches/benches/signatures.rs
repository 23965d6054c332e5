//! What a request's HTTP message signature costs the filter (`verified_bots`): `unsigned` (no
//! `Signature-Input`: what every other request pays), `verified` (a Web Bot Auth crawler's
//! request: parse, signature base, one Ed25519 verification), `forged` (the same signed by
//! another key under the crawler's keyid: the verification fails), `malformed` (a 4 KiB
//! `Signature-Input` of garbage: one failed parse).
//!
//! cargo bench -p edgescore-benches --bench signatures

use base64::Engine;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ed25519_dalek::{Signer, SigningKey};
use edgescore_core::signatures::{Directory, Policy, Verifier};
use edgescore_core::HeaderMap;
use std::hint::black_box;

const NOW: u64 = 1_767_225_600;

fn request(key: &SigningKey, keyid: &str) -> Vec<u8> {
    let params = format!(r#"created={};expires={};keyid="{keyid}";alg="ed25519";tag="web-bot-auth""#, NOW - 5, NOW + 55);
    let base = format!("\"@authority\": shop.example.com\n\"signature-agent\": \"https://crawler.example\"\n\"@signature-params\": (\"@authority\" \"signature-agent\");{params}");
    let sig = base64::engine::general_purpose::STANDARD.encode(key.sign(base.as_bytes()).to_bytes());
    let headers = [
        (":method", "GET".to_string()),
        (":scheme", "https".into()),
        (":authority", "shop.example.com".into()),
        (":path", "/products/42".into()),
        ("user-agent", "ExampleBot/1.0 (+https://crawler.example/)".into()),
        ("accept", "*/*".into()),
        ("signature-agent", "\"https://crawler.example\"".into()),
        ("signature-input", format!(r#"sig1=("@authority" "signature-agent");{params}"#)),
        ("signature", format!("sig1=:{sig}:")),
    ];
    HeaderMap::encode(&headers.map(|(k, v)| (k.to_string(), v)))
}

fn signatures(c: &mut Criterion) {
    let key = SigningKey::from_bytes(&[7; 32]);
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
    let jwks = format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}","use":"sig"}}]}}"#);
    let directory = Directory::from_jwks("examplebot", jwks.as_bytes()).unwrap();
    let keyid = directory.keys()[0].keyid.clone();
    let verified = request(&key, &keyid);
    let forged = request(&SigningKey::from_bytes(&[8; 32]), &keyid);
    let unsigned = HeaderMap::encode(&[(":method", "GET"), (":authority", "shop.example.com"), (":path", "/products/42"), ("accept", "*/*")]);
    let garbage = format!("sig1=({});{}", "\"@x\" ".repeat(400), "a=".repeat(500));
    let malformed = HeaderMap::encode(&[(":authority", "shop.example.com"), ("signature-input", garbage.as_str()), ("signature", "sig1=:AA==:")]);

    let mut verifier = Verifier::new(Policy::default());
    let mut group = c.benchmark_group("signatures");
    group.throughput(Throughput::Elements(1));
    for (name, buf, want_ok) in [("unsigned", &unsigned, true), ("verified", &verified, true), ("forged", &forged, false), ("malformed", &malformed, false)] {
        let headers = HeaderMap::parse(buf).unwrap();
        assert_eq!(verifier.verify(&headers, NOW, &directory).is_ok(), want_ok, "{name}");
        group.bench_function(name, |b| b.iter(|| black_box(verifier.verify(black_box(&headers), NOW, &directory).is_ok())));
    }
    group.finish();
}

criterion_group!(benches, signatures);
criterion_main!(benches);
