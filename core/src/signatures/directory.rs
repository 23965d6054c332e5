//! Trusted signing keys: the Ed25519 keys of the key directories (JWKS, RFC 7517) the operator
//! lists, each named by its JWK SHA-256 thumbprint (RFC 7638), which is the `keyid` Web Bot Auth
//! signers put in `Signature-Input`. Built off the request path (when a directory is fetched);
//! a lookup is a binary search.

use super::{Keys, Verified};
use base64::Engine as _;
use ed25519_dalek::VerifyingKey;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Most keys one directory may hold.
pub const MAX_KEYS: usize = 64;

#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum DirectoryError {
    #[error("not a JWK set: {0}")]
    NotJwks(String),
    #[error("more than {MAX_KEYS} keys")]
    TooManyKeys,
    #[error("key {index}: {why}")]
    BadKey { index: usize, why: String },
    #[error("no Ed25519 key")]
    NoKey,
}

/// One trusted key.
#[derive(Clone, Debug)]
pub struct DirectoryKey {
    /// Base64url (unpadded) SHA-256 JWK thumbprint.
    pub keyid: String,
    /// Whose key: the name the operator gave the directory.
    pub agent: String,
    pub key: VerifyingKey,
}

/// The keys of every trusted directory, sorted by keyid.
#[derive(Clone, Debug, Default)]
pub struct Directory {
    keys: Vec<DirectoryKey>,
}

#[derive(Deserialize)]
struct Jwks {
    keys: Vec<Jwk>,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    crv: Option<String>,
    x: Option<String>,
}

/// The RFC 7638 thumbprint of an Ed25519 public key: SHA-256 over the JWK's required members
/// in lexicographic order without whitespace, base64url without padding.
pub fn thumbprint(public: &[u8; 32]) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#, b64.encode(public));
    b64.encode(Sha256::digest(canonical.as_bytes()))
}

impl Directory {
    /// The Ed25519 keys of a JWK set; members of other key types are skipped.
    pub fn from_jwks(agent: &str, json: &[u8]) -> Result<Directory, DirectoryError> {
        let set: Jwks = serde_json::from_slice(json).map_err(|e| DirectoryError::NotJwks(e.to_string()))?;
        if set.keys.len() > MAX_KEYS {
            return Err(DirectoryError::TooManyKeys);
        }
        let mut keys = Vec::new();
        for (index, jwk) in set.keys.iter().enumerate() {
            if jwk.kty != "OKP" || jwk.crv.as_deref() != Some("Ed25519") {
                continue;
            }
            let bad = |why: &str| DirectoryError::BadKey { index, why: why.to_string() };
            let x = jwk.x.as_deref().ok_or_else(|| bad("no `x`"))?;
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(x).map_err(|_| bad("`x` is not base64url"))?;
            let public: [u8; 32] = raw.try_into().map_err(|_| bad("`x` is not 32 bytes"))?;
            let key = VerifyingKey::from_bytes(&public).map_err(|_| bad("`x` is not an Ed25519 point"))?;
            if key.is_weak() {
                return Err(bad("a weak (small-order) Ed25519 key"));
            }
            keys.push(DirectoryKey { keyid: thumbprint(&public), agent: agent.to_string(), key });
        }
        if keys.is_empty() {
            return Err(DirectoryError::NoKey);
        }
        Ok(Directory::from_keys(keys))
    }

    pub fn from_keys(mut keys: Vec<DirectoryKey>) -> Directory {
        keys.sort_by(|a, b| a.keyid.cmp(&b.keyid));
        keys.dedup_by(|a, b| a.keyid == b.keyid);
        Directory { keys }
    }

    /// This directory and `other` together (a keyid in both keeps this one's agent).
    pub fn merged(&self, other: &Directory) -> Directory {
        Directory::from_keys(self.keys.iter().chain(&other.keys).cloned().collect())
    }

    pub fn keys(&self) -> &[DirectoryKey] {
        &self.keys
    }

    /// Whether both hold the same keys for the same agents.
    pub fn same_keys(&self, other: &Directory) -> bool {
        self.keys.len() == other.keys.len() && self.keys.iter().zip(&other.keys).all(|(a, b)| a.keyid == b.keyid && a.agent == b.agent)
    }

    /// The keys as the poller hands them to the workers (the Wasm filter's shared data): per
    /// key, the agent's length (one byte), the agent, the 32-byte public key.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.keys.len() * 64);
        for k in &self.keys {
            let agent = &k.agent.as_bytes()[..k.agent.len().min(255)];
            out.push(agent.len() as u8);
            out.extend_from_slice(agent);
            out.extend_from_slice(k.key.as_bytes());
        }
        out
    }

    /// What [`Directory::encode`] wrote (`None` if these bytes are not that).
    pub fn decode(mut bytes: &[u8]) -> Option<Directory> {
        let mut keys = Vec::new();
        while let Some((&n, rest)) = bytes.split_first() {
            let agent = std::str::from_utf8(rest.get(..n as usize)?).ok()?;
            let public: [u8; 32] = rest.get(n as usize..n as usize + 32)?.try_into().ok()?;
            let key = VerifyingKey::from_bytes(&public).ok()?;
            keys.push(DirectoryKey { keyid: thumbprint(&public), agent: agent.to_string(), key });
            bytes = &rest[n as usize + 32..];
        }
        Some(Directory::from_keys(keys))
    }
}

impl Keys for Directory {
    fn lookup(&self, keyid: &[u8]) -> Option<(&VerifyingKey, Verified<'_>)> {
        let i = self.keys.binary_search_by(|k| k.keyid.as_bytes().cmp(keyid)).ok()?;
        let k = &self.keys[i];
        Some((&k.key, Verified { agent: &k.agent, keyid: &k.keyid }))
    }
}
