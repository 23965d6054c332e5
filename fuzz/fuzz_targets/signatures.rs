//! Signed requests (`edgescore_core::signatures`): a request signed for real (Ed25519 over
//! covered components drawn from every supported kind, the Web Bot Auth parameters), then
//! mutated — bytes of any header changed, headers dropped, duplicated or added, the two
//! signature headers cut, spliced or replaced by arbitrary bytes — and verified.
//!
//! Never a panic, and a request that verifies has exactly the signature base that was signed:
//! whatever the mutations, only a request whose covered components and parameters still read
//! as signed is accepted. An unmutated request always verifies.
#![no_main]

use arbitrary::{Result, Unstructured};
use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey};
use edgescore_core::request::HeaderMap;
use edgescore_core::signatures::{directory, Directory, Policy, Verifier};
use libfuzzer_sys::fuzz_target;

const NOW: u64 = 1_767_225_600;
const COMPONENTS: [&str; 9] = ["@method", "@authority", "@path", "@query", "@scheme", "@target-uri", "@request-target", "signature-agent", "x-client"];

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

fn directory() -> Directory {
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key().verifying_key().as_bytes());
    Directory::from_jwks("crawler", format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}"}}]}}"#).as_bytes()).unwrap()
}

fn value(u: &mut Unstructured) -> Result<Vec<u8>> {
    Ok(if u.ratio(1, 4)? { u.arbitrary::<Vec<u8>>()? } else { u.choose(&[&b"a"[..], b" Mixed Case ", b"/p?q=1", b"\"https://c.example\"", b""])?.to_vec() })
}

/// The request, its signature base as the signer wrote it.
fn signed(u: &mut Unstructured) -> Result<(Vec<(Vec<u8>, Vec<u8>)>, Vec<u8>)> {
    let mut headers: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b":method".to_vec(), u.choose(&[&b"GET"[..], b"POST"])?.to_vec()),
        (b":scheme".to_vec(), u.choose(&[&b"https"[..], b"HTTP"])?.to_vec()),
        (b":authority".to_vec(), u.choose(&[&b"shop.example"[..], b"Shop.Example:8443"])?.to_vec()),
        (b":path".to_vec(), u.choose(&[&b"/"[..], b"/a/b?x=1&y=2", b"/?", b"/only"])?.to_vec()),
        (b"signature-agent".to_vec(), b"\"https://crawler.example\"".to_vec()),
    ];
    for _ in 0..u.int_in_range(0..=2)? {
        headers.push((b"x-client".to_vec(), u.choose(&[&b" one "[..], b"two", b"three, four"])?.to_vec()));
    }
    let mut covered: Vec<&str> = vec!["@authority"];
    for c in COMPONENTS {
        if c != "@authority" && u.ratio(1, 2)? && (c != "x-client" || headers.iter().any(|(n, _)| n == b"x-client")) {
            covered.push(c);
        }
    }
    let keyid = directory::thumbprint(key().verifying_key().as_bytes());
    let created = NOW - u.int_in_range(0..=30)?;
    let params = format!(r#"created={created};expires={};keyid="{keyid}";tag="web-bot-auth""#, created + 60);
    let list = covered.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(" ");
    // The signer's base, from RFC 9421 §2.5 directly.
    let get = |name: &[u8]| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()).unwrap();
    let path = get(b":path");
    let (p, q) = match path.iter().position(|&c| c == b'?') {
        Some(i) => (path[..i].to_vec(), path[i + 1..].to_vec()),
        None => (path.clone(), Vec::new()),
    };
    let lower = |v: Vec<u8>| v.to_ascii_lowercase();
    let mut base = Vec::new();
    for c in &covered {
        let v: Vec<u8> = match *c {
            "@method" => get(b":method"),
            "@authority" => lower(get(b":authority")),
            "@scheme" => lower(get(b":scheme")),
            "@path" => if p.is_empty() { b"/".to_vec() } else { p.clone() },
            "@query" => [&b"?"[..], &q].concat(),
            "@request-target" => path.clone(),
            "@target-uri" => [lower(get(b":scheme")), b"://".to_vec(), lower(get(b":authority")), path.clone()].concat(),
            field => {
                let lines: Vec<&[u8]> = headers.iter().filter(|(n, _)| n == field.as_bytes()).map(|(_, v)| v.trim_ascii()).collect();
                lines.join(&b", "[..])
            }
        };
        base.extend_from_slice(format!("\"{c}\": ").as_bytes());
        base.extend_from_slice(&v);
        base.push(b'\n');
    }
    base.extend_from_slice(format!("\"@signature-params\": ({list});{params}").as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(key().sign(&base).to_bytes());
    headers.push((b"signature-input".to_vec(), format!("sig1=({list});{params}").into_bytes()));
    headers.push((b"signature".to_vec(), format!("sig1=:{sig}:").into_bytes()));
    Ok((headers, base))
}

fn mutate(u: &mut Unstructured, headers: &mut Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
    for _ in 0..u.int_in_range(0..=3)? {
        if headers.is_empty() {
            return Ok(());
        }
        let i = u.choose_index(headers.len())?;
        match u.int_in_range(0..=6)? {
            0 => {
                let v = &mut headers[i].1;
                if !v.is_empty() {
                    let at = u.choose_index(v.len())?;
                    v[at] = u.arbitrary()?;
                }
            }
            1 => {
                headers.remove(i);
            }
            2 => {
                let h = headers[i].clone();
                headers.push(h);
            }
            3 => {
                let v = &mut headers[i].1;
                let at = u.int_in_range(0..=v.len())?;
                v.truncate(at);
            }
            4 => headers[i].1 = value(u)?,
            5 => {
                let name = u.choose(&[&b"signature"[..], b"signature-input", b"x-client", b"signature-agent"])?.to_vec();
                headers.insert(0, (name, value(u)?));
            }
            _ => {
                let v = &mut headers[i].1;
                let extra = value(u)?;
                let at = u.int_in_range(0..=v.len())?;
                v.splice(at..at, extra);
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok((mut headers, base)) = signed(&mut u) else { return };
    let original = headers.clone();
    if mutate(&mut u, &mut headers).is_err() {
        return;
    }
    let dir = directory();
    let mut verifier = Verifier::new(Policy::default());
    let wire = HeaderMap::encode(&headers);
    let map = HeaderMap::parse(&wire).unwrap();
    let got = verifier.verify(&map, NOW, &dir);
    if let Ok(Some(v)) = got {
        assert_eq!(v.agent, "crawler");
        assert_eq!(verifier.last_base(), &base[..], "a request verified over a base that was not signed");
    }
    if headers == original {
        assert!(matches!(got, Ok(Some(_))), "the unmutated request: {got:?}");
    }
});
