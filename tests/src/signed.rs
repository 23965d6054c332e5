//! Requests signed as a Web Bot Auth crawler signs them (RFC 9421: `@authority` covered,
//! `created`, `expires`, `keyid` the key's JWK thumbprint, `tag="web-bot-auth"`), and the
//! JWK set its directory publishes, for the verified-bots tests.

use base64::Engine as _;
use ed25519_dalek::{Signer, SigningKey};
use edgescore_core::signatures::directory::thumbprint;

/// A crawler's key (`seed` tells crawlers apart).
pub fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

/// The JWK set that publishes `key`.
pub fn jwks(key: &SigningKey) -> String {
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
    format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}","use":"sig"}}]}}"#)
}

/// `key`'s keyid: its JWK thumbprint.
pub fn keyid(key: &SigningKey) -> String {
    thumbprint(key.verifying_key().as_bytes())
}

/// The `signature-input` and `signature` headers of a request to `authority`, signed by `key`
/// under `keyid`, valid from `created` to `expires`.
pub fn headers(key: &SigningKey, keyid: &str, authority: &str, created: u64, expires: u64) -> [(String, String); 2] {
    let params = format!(r#"("@authority");created={created};expires={expires};keyid="{keyid}";alg="ed25519";tag="web-bot-auth""#);
    let base = format!("\"@authority\": {}\n\"@signature-params\": {params}", authority.to_ascii_lowercase());
    let sig = base64::engine::general_purpose::STANDARD.encode(key.sign(base.as_bytes()).to_bytes());
    [("signature-input".into(), format!("sig1={params}")), ("signature".into(), format!("sig1=:{sig}:"))]
}
