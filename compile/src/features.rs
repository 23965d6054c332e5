//! `edgescore features`: the filter's feature vectors for recorded requests, computed by the
//! same code the filter runs, so a training table built here matches what Envoy sees.
//!
//! Requests are JSON lines: `{"headers": [[":method", "GET"], [":path", "/"], ...],
//! "properties": {"source.address": "192.0.2.1:5555", "request.protocol": "HTTP/1.1",
//! "connection.tls_version": "TLSv1.3", "connection.requested_server_name": "example.com"}}`.
//! Other keys (labels, ids) are ignored.

use crate::schema::SchemaFile;
use anyhow::{bail, Context, Result};
use edgescore_core::artifact::layout::UaFingerprint;
use edgescore_core::features::ua_fingerprints::UaTable;
use edgescore_core::features::FeatureSchema;
use edgescore_core::{HeaderMap, Property, Request};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};

#[derive(Deserialize)]
struct RecordedRequest {
    headers: Vec<(String, String)>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

/// Writes a CSV (header = slot names; empty cell = missing) of the schema's features;
/// `tls_ua_consistent` reads `ua_fingerprints` (a model's table, `--ua-fingerprints`).
pub fn write_table(schema: &SchemaFile, ua_fingerprints: &[UaFingerprint], hash_key: &str, input: impl BufRead, mut out: impl Write) -> Result<usize> {
    if hash_key.len() < edgescore_core::features::hash::MIN_KEY_LEN {
        bail!("the hash key must be at least {} bytes (use the filter's `hash_key`)", edgescore_core::features::hash::MIN_KEY_LEN);
    }
    crate::ua_fingerprints::require_table(schema.features.iter().map(|f| &f.name), ua_fingerprints)?;
    let table = (!ua_fingerprints.is_empty()).then(|| UaTable::new(ua_fingerprints));
    let mut fs = FeatureSchema::new(hash_key.as_bytes());
    for f in &schema.features {
        fs.slot_reading(&f.name, f.buckets, table.as_ref())?;
    }
    let names: Vec<&str> = fs.slots().iter().map(|s| s.name.as_str()).collect();
    writeln!(out, "{}", names.join(","))?;
    let mut row = vec![0f32; names.len()];
    let mut n = 0;
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: RecordedRequest = serde_json::from_str(&line).with_context(|| format!("request line {}", i + 1))?;
        if let Some(k) = rec.properties.keys().find(|k| Property::from_name(k.as_bytes()).is_none()) {
            let known: Vec<&str> = Property::ALL.iter().map(|p| p.name()).collect();
            bail!("request line {}: unknown property `{k}` (known: {})", i + 1, known.join(", "));
        }
        let buf = HeaderMap::encode(&rec.headers);
        let req = Request::with_properties(HeaderMap::parse(&buf)?, Property::ALL.map(|p| rec.properties.get(p.name()).map(|v| v.as_bytes())));
        fs.compute(&req, &mut row);
        let cells: Vec<String> = row.iter().map(|&v| if v.is_nan() { String::new() } else { format!("{v}") }).collect();
        writeln!(out, "{}", cells.join(","))?;
        n += 1;
    }
    Ok(n)
}
