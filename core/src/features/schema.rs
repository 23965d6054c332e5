//! A feature schema: the ordered feature vector a set of models reads, as slots over the
//! catalogue. Categorical slots carry their bucket count, so one hashed feature can feed two
//! models with different bucket counts (e.g. during a migration) while being hashed once.

use super::extract::{FeaturePlan, FeatureValues, Properties, VelocityNeeds};
use super::hash::{bucket, HashKey};
use super::ua_fingerprints::UaTable;
use super::{Feature, Kind};
use crate::ensemble::TreeEnsemble;
use crate::request::Request;

/// Buckets are written into f32 features; beyond 2^24 they would stop being exact integers.
pub const MAX_BUCKETS: u32 = 1 << 24;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("feature `{0}` is not in the filter's feature catalogue")]
    Unknown(String),
    #[error("feature `{0}` is numeric in the catalogue but declared categorical")]
    NotCategorical(String),
    #[error("feature `{0}` is a hashed categorical but no bucket count is declared (compile with `edgescore compile --schema`)")]
    NoBuckets(String),
    #[error("feature `{name}` declares {buckets} buckets; at most {MAX_BUCKETS}")]
    TooManyBuckets { name: String, buckets: u32 },
    #[error("feature `{0}` reads the model's UA fingerprint table, and the model carries none (compile it with `edgescore compile --ua-fingerprints`)")]
    NoUaFingerprints(String),
}

/// One position of the feature vector.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The catalogue name; `name/buckets` when the same categorical feature has several
    /// bucket counts in one schema, `tls_ua_consistent#<table digest>` when models with
    /// different UA fingerprint tables read it.
    pub name: String,
    pub buckets: u32,
    feature: usize,
}

pub struct FeatureSchema {
    key: HashKey,
    plan: FeaturePlan,
    slots: Vec<Slot>,
    values: FeatureValues,
}

impl FeatureSchema {
    pub fn new(hash_key: &[u8]) -> FeatureSchema {
        FeatureSchema { key: HashKey::new(hash_key), plan: FeaturePlan::default(), slots: Vec::new(), values: FeatureValues::default() }
    }

    /// The slot of catalogue feature `name` (`buckets` 0 for numeric), added if new.
    pub fn slot(&mut self, name: &str, buckets: u32) -> Result<usize, SchemaError> {
        self.slot_reading(name, buckets, None)
    }

    /// As [`FeatureSchema::slot`], `tls_ua_consistent` reading `ua_table` (always missing
    /// without one): one slot per distinct table.
    pub fn slot_reading(&mut self, name: &str, buckets: u32, ua_table: Option<&UaTable>) -> Result<usize, SchemaError> {
        let feature = Feature::parse(name).ok_or_else(|| SchemaError::Unknown(name.to_string()))?;
        match (feature.kind(), buckets) {
            (Kind::Numeric, 0) | (Kind::Categorical, 1..=MAX_BUCKETS) => {}
            (Kind::Numeric, _) => return Err(SchemaError::NotCategorical(name.to_string())),
            (Kind::Categorical, 0) => return Err(SchemaError::NoBuckets(name.to_string())),
            (Kind::Categorical, b) => return Err(SchemaError::TooManyBuckets { name: name.to_string(), buckets: b }),
        }
        let f = self.plan.add_reading(feature, ua_table);
        if let Some(i) = self.slots.iter().position(|s| s.feature == f && s.buckets == buckets) {
            return Ok(i);
        }
        let features = self.plan.features();
        let clash = self.slots.iter().any(|s| features[s.feature] == features[f]);
        self.slots.push(Slot { name: name.to_string(), buckets, feature: f });
        if clash {
            let plan = &self.plan;
            // `#`, not `/`: a `/N` suffix is a bucket count to readers of the feature log.
            let qualified = |s: &Slot| match plan.ua_table(s.feature) {
                Some(t) if s.buckets == 0 => format!("{name}#{:08x}", t.digest()),
                _ => format!("{name}/{}", s.buckets),
            };
            for s in self.slots.iter_mut().filter(|s| plan.features()[s.feature] == plan.features()[f] && s.name == name) {
                s.name = qualified(s);
            }
        }
        self.values = self.plan.values();
        Ok(self.slots.len() - 1)
    }

    /// Admits a model to the schema: the slot of each of its features, in the model's order
    /// (its gather list), adding slots the schema lacks. The one check that the catalogue
    /// computes every feature a model reads, for the served set and the registry alike.
    pub fn admit(&mut self, e: &TreeEnsemble<'_>) -> Result<Vec<u32>, SchemaError> {
        let table = (!e.ua_fingerprints().is_empty()).then(|| UaTable::new(e.ua_fingerprints()));
        let mut gather = Vec::with_capacity(e.n_features());
        for (j, spec) in e.features().iter().enumerate() {
            let name = e.feature_name(j);
            if table.is_none() && Feature::parse(name) == Some(Feature::TlsUaConsistent) {
                return Err(SchemaError::NoUaFingerprints(name.to_string()));
            }
            gather.push(self.slot_reading(name, spec.buckets, table.as_ref())? as u32);
        }
        Ok(gather)
    }

    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The connection properties the schema reads.
    pub fn properties(&self) -> Properties {
        self.plan.properties()
    }

    /// Which of a client's counts the schema reads.
    pub fn velocity(&self) -> VelocityNeeds {
        self.plan.velocity()
    }

    /// Computes the feature vector of `req` into `out` (one value per slot; NaN = missing,
    /// categoricals as bucket indices). No allocation.
    pub fn compute(&mut self, req: &Request<'_>, out: &mut [f32]) {
        self.plan.extract(req, &self.key, &mut self.values);
        for (x, slot) in out.iter_mut().zip(&self.slots) {
            *x = if slot.buckets == 0 {
                self.values.numeric[slot.feature]
            } else {
                self.values.hash[slot.feature].map_or(f32::NAN, |h| bucket(h, slot.buckets) as f32)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::HeaderMap;

    #[test]
    fn slots_share_features_and_name_bucket_clashes() {
        let mut s = FeatureSchema::new(b"0123456789abcdef");
        assert_eq!(s.slot("method", 16), Ok(0));
        assert_eq!(s.slot("header_count", 0), Ok(1));
        assert_eq!(s.slot("method", 16), Ok(0));
        assert_eq!(s.slot("method", 64), Ok(2));
        let names: Vec<&str> = s.slots().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["method/16", "header_count", "method/64"]);
        assert_eq!(s.slot("nope", 0), Err(SchemaError::Unknown("nope".into())));
        assert_eq!(s.slot("header_count", 4), Err(SchemaError::NotCategorical("header_count".into())));
        assert_eq!(s.slot("method", 0), Err(SchemaError::NoBuckets("method".into())));

        let buf = HeaderMap::encode(&[(":method", "GET"), ("a", "b")]);
        let mut out = [0f32; 3];
        s.compute(&Request::new(HeaderMap::parse(&buf).unwrap()), &mut out);
        let h = HashKey::new(b"0123456789abcdef").hash(b"GET");
        assert_eq!(out, [bucket(h, 16) as f32, 1.0, bucket(h, 64) as f32]);
    }
    /// Models with different tables read `tls_ua_consistent` in slots named by their tables.
    #[test]
    fn ua_consistency_slots_per_table() {
        use crate::artifact::layout::UaFingerprint;
        let table = |p: &str| UaTable::new(&[UaFingerprint::new(b"chrome", p.as_bytes()).unwrap()]);
        let (old, new) = (table("t13d1516h2_8daaf6152771_d8a2da3f94cd"), table("t13d1516h2_8daaf6152771_*"));
        let mut s = FeatureSchema::new(b"0123456789abcdef");
        assert_eq!(s.slot_reading("tls_ua_consistent", 0, Some(&old)), Ok(0));
        assert_eq!(s.slots()[0].name, "tls_ua_consistent");
        assert_eq!(s.slot_reading("tls_ua_consistent", 0, Some(&old)), Ok(0));
        assert_eq!(s.slot_reading("tls_ua_consistent", 0, Some(&new)), Ok(1));
        let names: Vec<&str> = s.slots().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [format!("tls_ua_consistent#{:08x}", old.digest()), format!("tls_ua_consistent#{:08x}", new.digest())]);
        assert_ne!(names[0], names[1]);
        assert_eq!(s.properties(), Properties { tls_version: true, ..Properties::default() });
    }
}

