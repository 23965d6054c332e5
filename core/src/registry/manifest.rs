//! The manifest payload: the registry's table of models, parsed strictly.

use super::{artifact_path, is_hex, one_line, parse_utc, Refusal, MANIFEST_FORMAT, MAX_GOLDEN_ROWS};
use crate::TreeEnsemble;
use serde::{Deserialize, Serialize};

/// The signed manifest (`docs/registry.md`). Unknown fields are refused.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// Manifest-wide, +1 on every publish; a poller refuses a lower one than it accepted.
    pub sequence: u64,
    /// The time of the publish (or renewal), `YYYY-MM-DDTHH:MM:SSZ` ([`super::parse_utc`]).
    pub published_at: String,
    /// The first second at which a reader refuses the manifest, in the same form; after
    /// `published_at`. Signed like the rest, so a server cannot show a stale manifest forever.
    /// A reader's policy decides about a manifest without one ([`super::Policy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    pub models: Vec<ManifestModel>,
}

/// One model entry.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ManifestModel {
    /// Must equal the artifact's embedded model name.
    pub name: String,
    /// Monotonic per name: every publish of the name gets max(existing) + 1.
    pub version: u64,
    pub mode: ModelMode,
    /// `artifacts/<sha256>.esm`, relative to the registry directory.
    pub artifact: String,
    /// Artifact length in bytes.
    pub size: u64,
    /// SHA-256 of the artifact, lowercase hex.
    pub sha256: String,
    /// [`super::schema_hash`] of the artifact.
    pub schema_hash: String,
    /// [`super::hash_key_id`] of the hash key the model was trained with, when the publisher
    /// stated it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_key_id: Option<String>,
    /// Rows scored at publish time; a reader re-scores them and requires bitwise-equal outputs.
    #[serde(default)]
    pub golden: Vec<GoldenRow>,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum ModelMode {
    /// Scores and acts.
    Active,
    /// Scored, counted and logged beside the active model; never acts.
    Shadow,
}

impl ModelMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelMode::Active => "active",
            ModelMode::Shadow => "shadow",
        }
    }
}

/// One golden row: inputs in the model's feature order (`None` = missing) and the f32 outputs
/// [`crate::TreeEnsemble::score`] gave for them. Non-finite numbers are written as the strings
/// `"NaN"`, `"Infinity"`, `"-Infinity"` (JSON has no such numbers); a missing input is `null`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GoldenRow {
    #[serde(with = "xs")]
    pub x: Vec<Option<f32>>,
    #[serde(with = "ys")]
    pub y: Vec<f32>,
}

impl ManifestModel {
    /// The entry for the artifact `bytes`, which loaded as `e`: its name, path, size, SHA-256
    /// and schema hash come from the artifact, the rest from the publisher.
    pub fn of_artifact(bytes: &[u8], e: &TreeEnsemble<'_>, version: u64, mode: ModelMode, hash_key_id: Option<String>, golden: Vec<GoldenRow>) -> ManifestModel {
        let sha256 = super::sha256_hex(bytes);
        ManifestModel {
            name: e.name().to_string(),
            version,
            mode,
            artifact: artifact_path(&sha256),
            size: bytes.len() as u64,
            sha256,
            schema_hash: super::schema_hash(e),
            hash_key_id,
            golden,
        }
    }

    /// `"bot v7"`: how messages name the entry.
    pub fn label(&self) -> String {
        format!("{} v{}", self.name, self.version)
    }
}

impl Manifest {
    /// Parses and checks a payload: strict JSON, a known format, well-formed fields, at most
    /// one active and one shadow entry per name.
    pub fn parse(payload: &[u8]) -> Result<Manifest, Refusal> {
        let de = &mut serde_json::Deserializer::from_slice(payload);
        let m: Manifest = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let text = if path.is_empty() || path == "." { inner.to_string() } else { format!("{path}: {inner}") };
            Refusal::Malformed(one_line(&text, 300))
        })?;
        m.check()?;
        Ok(m)
    }

    /// The checks [`Manifest::parse`] makes after decoding.
    pub fn check(&self) -> Result<(), Refusal> {
        let bad = |i: usize, m: &ManifestModel, what: String| Refusal::Malformed(one_line(&format!("models[{i}] ({}): {what}", m.label()), 300));
        if self.format != MANIFEST_FORMAT {
            return Err(Refusal::Malformed(format!(
                "manifest format {} is not supported (this build reads format {MANIFEST_FORMAT})",
                self.format
            )));
        }
        let published = parse_utc(&self.published_at)
            .ok_or_else(|| Refusal::Malformed(format!("published_at {:?} is not a UTC time YYYY-MM-DDTHH:MM:SSZ", one_line(&self.published_at, 40))))?;
        if let Some(expires) = &self.expires {
            let at = parse_utc(expires).ok_or_else(|| Refusal::Malformed(format!("expires {:?} is not a UTC time YYYY-MM-DDTHH:MM:SSZ", one_line(expires, 40))))?;
            if at <= published {
                return Err(Refusal::Malformed(format!("expires {expires} is not after published_at {}", self.published_at)));
            }
        }
        for (i, m) in self.models.iter().enumerate() {
            if m.name.is_empty() || m.name.chars().any(char::is_control) {
                return Err(bad(i, m, format!("model name {:?} is empty or has control characters", m.name)));
            }
            if !is_hex(&m.sha256, 64) {
                return Err(bad(i, m, format!("sha256 {:?} is not 64 lowercase hex digits", m.sha256)));
            }
            if m.artifact != artifact_path(&m.sha256) {
                return Err(bad(i, m, format!("artifact path {:?} is not {:?}", m.artifact, artifact_path(&m.sha256))));
            }
            if !is_hex(&m.schema_hash, 64) {
                return Err(bad(i, m, format!("schema_hash {:?} is not 64 lowercase hex digits", m.schema_hash)));
            }
            if let Some(k) = &m.hash_key_id {
                if !is_hex(k, 16) {
                    return Err(bad(i, m, format!("hash_key_id {k:?} is not 16 lowercase hex digits")));
                }
            }
            if m.golden.len() > MAX_GOLDEN_ROWS {
                return Err(bad(i, m, format!("{} golden rows, at most {MAX_GOLDEN_ROWS}", m.golden.len())));
            }
            if let Some(j) = self.models[..i].iter().position(|o| o.name == m.name && o.mode == m.mode) {
                return Err(bad(i, m, format!("a second {} entry for {:?} (models[{j}] is one)", m.mode.as_str(), m.name)));
            }
        }
        Ok(())
    }

    /// `published_at` in seconds since the Unix epoch (`None` only before [`Manifest::check`]).
    pub fn published_s(&self) -> Option<u64> {
        parse_utc(&self.published_at)
    }

    /// `expires` in seconds since the Unix epoch, when the manifest has one that parses.
    pub fn expires_s(&self) -> Option<u64> {
        self.expires.as_deref().and_then(parse_utc)
    }

    /// The entry for `name` in `mode`, if any.
    pub fn entry(&self, name: &str, mode: ModelMode) -> Option<&ManifestModel> {
        self.models.iter().find(|m| m.name == name && m.mode == mode)
    }

    /// The highest version of any entry named `name` (0 when none).
    pub fn max_version(&self, name: &str) -> u64 {
        self.models.iter().filter(|m| m.name == name).map(|m| m.version).max().unwrap_or(0)
    }

    /// The payload bytes a publisher signs (compact JSON, newline-terminated).
    pub fn to_json(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).expect("a manifest always serializes");
        v.push(b'\n');
        v
    }
}

/// One number of a golden row; non-finite values as strings.
struct Num(f32);

impl Serialize for Num {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_nan() {
            s.serialize_str("NaN")
        } else if v == f32::INFINITY {
            s.serialize_str("Infinity")
        } else if v == f32::NEG_INFINITY {
            s.serialize_str("-Infinity")
        } else {
            s.serialize_f32(v)
        }
    }
}

/// A golden-row number, or (inputs only) null for a missing value.
struct NumVisitor {
    allow_null: bool,
}

impl<'de> serde::de::Visitor<'de> for NumVisitor {
    type Value = Option<f32>;
    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str(if self.allow_null { "a number, null, \"NaN\", \"Infinity\" or \"-Infinity\"" } else { "a number, \"NaN\", \"Infinity\" or \"-Infinity\"" })
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(v as f32))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v as f32))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v as f32))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        match v {
            "NaN" => Ok(Some(f32::NAN)),
            "Infinity" => Ok(Some(f32::INFINITY)),
            "-Infinity" => Ok(Some(f32::NEG_INFINITY)),
            _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
        }
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        if self.allow_null {
            Ok(None)
        } else {
            Err(E::invalid_type(serde::de::Unexpected::Unit, &self))
        }
    }
}

struct X(Option<f32>);
struct Y(f32);

impl<'de> Deserialize<'de> for X {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A NaN input is a missing value either way.
        d.deserialize_any(NumVisitor { allow_null: true }).map(|v| X(v.filter(|v| !v.is_nan())))
    }
}

impl<'de> Deserialize<'de> for Y {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumVisitor { allow_null: false }).map(|v| Y(v.unwrap_or(f32::NAN)))
    }
}

mod xs {
    use super::*;
    pub fn serialize<S: serde::Serializer>(v: &[Option<f32>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|x| x.filter(|x| !x.is_nan()).map(Num)))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Option<f32>>, D::Error> {
        Ok(Vec::<X>::deserialize(d)?.into_iter().map(|x| x.0).collect())
    }
}

mod ys {
    use super::*;
    pub fn serialize<S: serde::Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|&y| Num(y)))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        Ok(Vec::<Y>::deserialize(d)?.into_iter().map(|y| y.0).collect())
    }
}
