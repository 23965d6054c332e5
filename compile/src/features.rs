//! `edgescore features`: the filter's feature vectors for recorded requests, computed by the
//! same code the filter runs, so a training table built here matches what Envoy sees.
//!
//! Requests are JSON lines: `{"headers": [[":method", "GET"], [":path", "/"], ...],
//! "properties": {"source.address": "192.0.2.1:5555", "request.protocol": "HTTP/1.1",
//! "connection.tls_version": "TLSv1.3", "connection.requested_server_name": "example.com"}}`.
//! Other keys (labels, ids) are ignored.

use crate::schema::SchemaFile;
use anyhow::{bail, Context, Result};
use edgescore_filter::features::FeatureSchema;
use edgescore_filter::{HeaderMap, Request};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};

#[derive(Deserialize)]
struct RecordedRequest {
    headers: Vec<(String, String)>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
}

const PROPERTIES: [&str; 4] = ["request.protocol", "connection.tls_version", "connection.requested_server_name", "source.address"];

/// Writes a CSV (header = slot names; empty cell = missing) of the schema's features.
pub fn write_table(schema: &SchemaFile, hash_key: &str, input: impl BufRead, mut out: impl Write) -> Result<usize> {
    if hash_key.len() < edgescore_filter::features::hash::MIN_KEY_LEN {
        bail!("the hash key must be at least {} bytes (use the filter's `hash_key`)", edgescore_filter::features::hash::MIN_KEY_LEN);
    }
    let mut fs = FeatureSchema::new(hash_key.as_bytes());
    for f in &schema.features {
        fs.slot(&f.name, f.buckets)?;
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
        if let Some(k) = rec.properties.keys().find(|k| !PROPERTIES.contains(&k.as_str())) {
            bail!("request line {}: unknown property `{k}` (known: {})", i + 1, PROPERTIES.join(", "));
        }
        let buf = HeaderMap::encode(&rec.headers);
        let prop = |k: &str| rec.properties.get(k).map(|v| v.as_bytes());
        let req = Request {
            headers: HeaderMap::parse(&buf)?,
            protocol: prop(PROPERTIES[0]),
            tls_version: prop(PROPERTIES[1]),
            sni: prop(PROPERTIES[2]),
            source_address: prop(PROPERTIES[3]),
        };
        fs.compute(&req, &mut row);
        let cells: Vec<String> = row.iter().map(|&v| if v.is_nan() { String::new() } else { format!("{v}") }).collect();
        writeln!(out, "{}", cells.join(","))?;
        n += 1;
    }
    Ok(n)
}
