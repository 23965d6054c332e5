//! Feature schemas for the `features` target: every entry of the catalogue, the parameterised
//! ones once per header name chosen (names mostly taken from the request itself, so they hit),
//! categorical ones at one or two bucket counts, and now and then a bucket count or a name
//! the schema must refuse.

use arbitrary::Arbitrary;
use edgescore_core::features::{Kind, CATALOGUE};

/// Header names per parameterised feature; each adds four slots.
const MAX_PARAMETERS: usize = 6;

#[derive(Arbitrary, Debug)]
pub struct SchemaSpec {
    pub hash_key: Vec<u8>,
    pub buckets: Vec<BucketSpec>,
    pub parameters: Vec<ParameterSpec>,
    /// Where in the catalogue the schema starts (slot order is the models', not the catalogue's).
    pub start: u8,
}

#[derive(Arbitrary, Debug)]
pub enum BucketSpec {
    Small(u8),
    PowerOfTwo(u8),
    /// Any count, numeric features included: mostly refused.
    Any(u32),
}

#[derive(Arbitrary, Debug)]
pub enum ParameterSpec {
    /// The name of the request's header at this index (modulo the count).
    FromRequest(u16),
    Known(u8),
    Raw(String),
}

const KNOWN_PARAMETERS: &[&str] = &["x-country", "user-agent", "cookie", "x-a", "host", "X-Upper", "a b", ""];

impl SchemaSpec {
    /// `(name, buckets)` in the order the schema is built. A categorical entry is declared at a
    /// second bucket count when the spec gives one (the schema names both slots `name/b`).
    pub fn slots(&self, header_names: &[&[u8]]) -> Vec<(String, u32)> {
        let parameters: Vec<String> = self.parameters.iter().take(MAX_PARAMETERS).map(|p| p.name(header_names)).collect();
        let mut names = Vec::new();
        let start = self.start as usize % CATALOGUE.len();
        for (entry, kind, _) in CATALOGUE[start..].iter().chain(&CATALOGUE[..start]) {
            let instances: Vec<String> = match entry.strip_suffix("<name>") {
                Some(prefix) => parameters.iter().map(|p| format!("{prefix}{p}")).collect(),
                None => vec![entry.to_string()],
            };
            names.extend(instances.into_iter().map(|n| (n, *kind)));
        }
        let mut counts = self.buckets.iter().map(BucketSpec::count).cycle();
        let mut slots = Vec::new();
        for (name, kind) in names {
            let first = counts.next();
            match kind {
                Kind::Numeric => slots.push((name, first.filter(|c| c.refusable).map_or(0, |c| c.buckets))),
                Kind::Categorical => {
                    slots.push((name.clone(), first.map_or(16, |c| c.buckets)));
                    if let Some(second) = counts.next().filter(|c| !c.refusable) {
                        slots.push((name, second.buckets));
                    }
                }
            }
        }
        slots
    }
}

struct Count {
    buckets: u32,
    /// Whether the count comes from `Any` (possibly invalid; numeric features take it too).
    refusable: bool,
}

impl BucketSpec {
    fn count(&self) -> Count {
        match self {
            BucketSpec::Small(n) => Count { buckets: 1 + u32::from(*n), refusable: false },
            BucketSpec::PowerOfTwo(n) => Count { buckets: 1 << (n % 25), refusable: false },
            BucketSpec::Any(n) => Count { buckets: *n, refusable: true },
        }
    }
}

impl ParameterSpec {
    fn name(&self, header_names: &[&[u8]]) -> String {
        match self {
            ParameterSpec::FromRequest(i) if !header_names.is_empty() => {
                String::from_utf8_lossy(header_names[*i as usize % header_names.len()]).into_owned()
            }
            ParameterSpec::FromRequest(_) => "x-a".to_string(),
            ParameterSpec::Known(i) => KNOWN_PARAMETERS[*i as usize % KNOWN_PARAMETERS.len()].to_string(),
            ParameterSpec::Raw(s) => s.clone(),
        }
    }
}
