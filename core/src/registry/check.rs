//! One artifact against its manifest entry, and the hashes that tie them together.

use super::{golden::row_matches, hex, ManifestModel, Refusal};
use crate::artifact::layout::FEATURE_CATEGORICAL;
use crate::{Model, TreeEnsemble};
use sha2::{Digest, Sha256};

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The feature-schema hash: SHA-256 (lowercase hex) over `"edgescore-schema-v1\n"` followed,
/// for each feature in order, by `name \t kind \t buckets \n` (kind `numeric` or
/// `categorical`; buckets 0 for numeric).
pub fn schema_hash(e: &TreeEnsemble<'_>) -> String {
    let mut h = Sha256::new();
    h.update(b"edgescore-schema-v1\n");
    for (i, f) in e.features().iter().enumerate() {
        let kind = if f.kind == FEATURE_CATEGORICAL { "categorical" } else { "numeric" };
        h.update(format!("{}\t{kind}\t{}\n", e.feature_name(i), f.buckets).as_bytes());
    }
    hex(&h.finalize())
}

/// The id of a hash key (the filter's `hash_key` bytes): the first 8 bytes of
/// SHA-256(`"edgescore-hash-key-v1\0"` ++ key), lowercase hex. Names the key without
/// revealing it.
pub fn hash_key_id(key: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"edgescore-hash-key-v1\0");
    h.update(key);
    hex(&h.finalize()[..8])
}

/// Checks downloaded artifact bytes against their manifest entry and returns the validated
/// model. In order: size ([`Refusal::Oversized`] when the bytes or the declared size exceed
/// `max_bytes`, [`Refusal::Truncated`] when the length is not the declared size), SHA-256,
/// full validation, model name, schema hash, hash-key id (only when both the entry and
/// `hash_key_id`, the reader's own [`hash_key_id`], are given), golden rows.
pub fn check_artifact(entry: &ManifestModel, bytes: &[u8], max_bytes: u64, hash_key_id: Option<&str>) -> Result<Model, Refusal> {
    let model = entry.label();
    let len = bytes.len() as u64;
    if len > max_bytes || entry.size > max_bytes {
        return Err(Refusal::Oversized { model, size: len.max(entry.size), max: max_bytes });
    }
    if len != entry.size {
        return Err(Refusal::Truncated { model, expected: entry.size, got: len });
    }
    let sha = sha256_hex(bytes);
    if sha != entry.sha256 {
        return Err(Refusal::ShaMismatch { model, expected: entry.sha256.clone(), got: sha });
    }
    let loaded = Model::load(bytes).map_err(|error| Refusal::InvalidArtifact { model: model.clone(), error })?;
    let e = loaded.ensemble();
    if e.name() != entry.name {
        return Err(Refusal::SchemaMismatch(format!("{model}: the artifact's model name is {:?}, the manifest says {:?}", e.name(), entry.name)));
    }
    let schema = schema_hash(e);
    if schema != entry.schema_hash {
        return Err(Refusal::SchemaMismatch(format!(
            "{model}: the artifact's feature schema hash is {schema}, the manifest says {}",
            entry.schema_hash
        )));
    }
    if let (Some(want), Some(ours)) = (&entry.hash_key_id, hash_key_id) {
        if want != ours {
            return Err(Refusal::SchemaMismatch(format!(
                "{model}: published for hash key {want}, this filter's hash key is {ours} (categorical buckets would differ)"
            )));
        }
    }
    for (row, g) in entry.golden.iter().enumerate() {
        row_matches(e, g).map_err(|detail| Refusal::GoldenMismatch { model: model.clone(), row, detail })?;
    }
    Ok(loaded)
}
