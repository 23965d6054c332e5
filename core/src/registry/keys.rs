//! Ed25519 keys, their ids and their files (`NAME.pub`, `NAME.key`).

use super::{hex, PUBLIC_KEY_KIND, SECRET_KEY_KIND};
use base64::Engine;
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Why a key could not be read.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum RegistryError {
    #[error("not an edgescore key file: {0}")]
    KeyFile(String),
    #[error("key file says key id {stated} but its key's id is {computed}")]
    KeyIdMismatch { stated: String, computed: String },
    #[error("{0}")]
    BadKey(String),
}

/// A configured verification key and its id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    /// [`key_id`] of the key.
    pub key_id: String,
    pub key: VerifyingKey,
}

impl PublicKey {
    /// From the 32 key bytes; refuses bytes that are not a curve point or are a weak
    /// (small-order) key.
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<PublicKey, RegistryError> {
        let key = VerifyingKey::from_bytes(bytes).map_err(|_| RegistryError::BadKey("the public key is not a valid Ed25519 point".into()))?;
        if key.is_weak() {
            return Err(RegistryError::BadKey("the public key is a weak (small-order) Ed25519 key".into()));
        }
        Ok(PublicKey { key_id: key_id(bytes), key })
    }
}

/// `"ed25519:"` + the first 8 bytes of SHA-256(public key bytes), lowercase hex.
pub fn key_id(public: &[u8; 32]) -> String {
    let digest = Sha256::digest(public);
    format!("ed25519:{}", hex(&digest[..8]))
}

/// `NAME.pub`: `{"kind":"edgescore-ed25519-public","key_id":"ed25519:…","public":"<base64 32 bytes>"}`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PublicKeyFile {
    pub kind: String,
    pub key_id: String,
    pub public: String,
}

/// `NAME.key`: `{"kind":"edgescore-ed25519-secret","key_id":"ed25519:…","secret":"<base64 32-byte seed>"}`.
#[derive(Serialize, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SecretKeyFile {
    pub kind: String,
    pub key_id: String,
    pub secret: String,
}

impl PublicKeyFile {
    /// The key it holds, checking its kind and that the stated id is the key's.
    pub fn to_key(&self) -> Result<PublicKey, RegistryError> {
        if self.kind != PUBLIC_KEY_KIND {
            return Err(RegistryError::KeyFile(format!("kind is {:?}, expected {PUBLIC_KEY_KIND:?}", self.kind)));
        }
        let key = PublicKey::from_bytes(&decode32(&self.public, "public")?)?;
        if key.key_id != self.key_id {
            return Err(RegistryError::KeyIdMismatch { stated: self.key_id.clone(), computed: key.key_id });
        }
        Ok(key)
    }
}

fn decode32(text: &str, field: &str) -> Result<[u8; 32], RegistryError> {
    let bytes = B64.decode(text.trim()).map_err(|e| RegistryError::KeyFile(format!("{field}: not standard base64 ({e})")))?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| RegistryError::KeyFile(format!("{field}: {} bytes, expected 32", bytes.len())))
}

/// Reads a public key: the content of a `NAME.pub` file (JSON), or the bare standard base64
/// of the 32 key bytes.
pub fn parse_public_key(text: &str) -> Result<PublicKey, RegistryError> {
    let text = text.trim();
    if text.starts_with('{') {
        let file: PublicKeyFile = serde_json::from_str(text).map_err(|e| RegistryError::KeyFile(e.to_string()))?;
        file.to_key()
    } else {
        PublicKey::from_bytes(&decode32(text, "public key")?)
    }
}

/// The content of the `NAME.pub` file for `key` (JSON, newline-terminated).
pub fn public_key_file(key: &VerifyingKey) -> String {
    let file = PublicKeyFile { kind: PUBLIC_KEY_KIND.into(), key_id: key_id(key.as_bytes()), public: B64.encode(key.as_bytes()) };
    serde_json::to_string(&file).expect("serializes") + "\n"
}

/// The content of the `NAME.key` file for `key` (JSON, newline-terminated). Secret.
pub fn secret_key_file(key: &SigningKey) -> String {
    let file = SecretKeyFile {
        kind: SECRET_KEY_KIND.into(),
        key_id: key_id(key.verifying_key().as_bytes()),
        secret: B64.encode(key.as_bytes()),
    };
    serde_json::to_string(&file).expect("serializes") + "\n"
}

/// Reads the content of a `NAME.key` file, checking its kind and key id.
pub fn parse_secret_key(text: &str) -> Result<SigningKey, RegistryError> {
    let file: SecretKeyFile = serde_json::from_str(text.trim()).map_err(|e| RegistryError::KeyFile(e.to_string()))?;
    if file.kind != SECRET_KEY_KIND {
        return Err(RegistryError::KeyFile(format!("kind is {:?}, expected {SECRET_KEY_KIND:?}", file.kind)));
    }
    let key = SigningKey::from_bytes(&decode32(&file.secret, "secret")?);
    let computed = key_id(key.verifying_key().as_bytes());
    if computed != file.key_id {
        return Err(RegistryError::KeyIdMismatch { stated: file.key_id, computed });
    }
    Ok(key)
}
