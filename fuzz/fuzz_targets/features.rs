//! Request → features, against the reference definitions in `src/feature_reference/`.
//!
//! The first byte picks the input's form. Even: a request described by the rest
//! (`src/request_spec.rs`) and a schema over the whole catalogue (`src/schema_spec.rs`),
//! encoded in proxy-wasm's header-map format and read by `HeaderMap::parse`, as the filter
//! reads what Envoy hands it. Odd: the rest is `u32 length, header map, property map`, raw
//! bytes for `HeaderMap::parse`, which must refuse or read them exactly as the reference
//! reading (`src/wire_map.rs`) does.
//!
//! Either way the properties go through a `ConnCache` as in the filter, the schema is built
//! slot by slot (accepting exactly the names and bucket counts the catalogue allows), then
//! `tls_ua_consistent` is added for two models' UA fingerprint tables (one made from the
//! request, which the core must accept exactly when the reference does), and every slot of the
//! computed vector must equal the reference bit for bit (NaN = missing), on the request and
//! then on an empty one with the same scratch.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use edgescore_core::conn_cache::ConnCache;
use edgescore_core::features::hash::HashKey;
use edgescore_core::artifact::layout::UaFingerprint;
use edgescore_core::features::ua_fingerprints::{self, UaTable};
use edgescore_core::features::{FeatureSchema, Properties};
use edgescore_core::request::{HeaderMap, Property, Request};
use edgescore_fuzz::feature_reference::ua_consistency;
use edgescore_fuzz::feature_reference::{self, bucket, Expected, ReferenceRequest};
use edgescore_fuzz::request_spec::RequestSpec;
use edgescore_fuzz::schema_spec::{BucketSpec, ParameterSpec, SchemaSpec};
use edgescore_fuzz::wire_map;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&form, rest)) = data.split_first() else { return };
    if form % 2 == 0 {
        structured(rest);
    } else {
        raw(rest);
    }
});

fn structured(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let (Ok(request), Ok(schema), Ok(connection)) = (RequestSpec::arbitrary(&mut u), SchemaSpec::arbitrary(&mut u), u8::arbitrary(&mut u)) else {
        return;
    };
    let pairs = request.header_pairs();
    let wire = wire_map::encode(&pairs);
    let map = HeaderMap::parse(&wire).expect("a well-formed header map refused");
    assert!(map.iter().eq(pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice()))), "the map reads other pairs than were encoded");
    let headers: Vec<(&[u8], &[u8])> = pairs.iter().map(|(n, v)| (n.as_slice(), v.as_slice())).collect();
    let properties = request.property_values();
    check(map, headers, properties.each_ref().map(|p| p.as_deref()), &schema, connection);
}

fn raw(data: &[u8]) {
    let Some((length, rest)) = data.split_first_chunk::<4>() else { return };
    let (header_bytes, property_bytes) = rest.split_at((u32::from_le_bytes(*length) as usize).min(rest.len()));
    let parsed = HeaderMap::parse(header_bytes);
    let reference = wire_map::decode(header_bytes);
    let (map, headers) = match (parsed, reference) {
        (Ok(map), Some(pairs)) => {
            assert_eq!(map.len(), pairs.len());
            assert!(map.iter().eq(pairs.iter().copied()), "HeaderMap reads other pairs than the reference");
            (map, pairs)
        }
        (Err(_), None) => return,
        (parsed, reference) => panic!("HeaderMap::parse {:?}, the reference {}", parsed.err(), if reference.is_some() { "reads it" } else { "refuses it" }),
    };
    // The properties as a recorded request holds them: a map of `Property::name` → value.
    let mut properties = [None; 4];
    if let Ok(map) = HeaderMap::parse(property_bytes) {
        for (name, value) in map.iter() {
            if let Some(p) = Property::from_name(name) {
                properties[p as usize] = Some(value);
            }
        }
    }
    // Every parameterised feature on the request's first names (and one no request sends).
    let parameters = (0..4).map(ParameterSpec::FromRequest).chain([ParameterSpec::Known(0)]).collect();
    let buckets = vec![BucketSpec::Small(6), BucketSpec::PowerOfTwo(8), BucketSpec::PowerOfTwo(24), BucketSpec::Small(0)];
    let schema = SchemaSpec { hash_key: b"fuzz-hash-key-0123456789".to_vec(), buckets, parameters, start: 0 };
    check(map, headers, properties, &schema, 0);
}

fn check(map: HeaderMap, headers: Vec<(&[u8], &[u8])>, properties: [Option<&[u8]>; 4], spec: &SchemaSpec, connection: u8) {
    // As the filter: remembered per connection when every value fits, read as remembered.
    let mut conns = ConnCache::new(2);
    let id = u64::from(connection);
    let properties = if conns.put(id, properties) {
        let remembered = conns.get(id).expect("a connection just remembered is forgotten");
        assert_eq!(remembered, properties, "the connection cache changed the properties");
        remembered
    } else {
        assert!(properties.iter().flatten().any(|v| v.len() > 16), "refused short properties: {properties:?}");
        properties
    };
    let request = Request::with_properties(map, properties);
    let [protocol, tls_version, sni, source_address] = properties;
    let reference = ReferenceRequest { headers, protocol, tls_version, sni, source_address };

    let names: Vec<&[u8]> = reference.headers.iter().map(|(n, _)| *n).collect();
    let mut schema = FeatureSchema::new(&spec.hash_key);
    let mut slots = Vec::new();
    let mut wanted = Properties::default();
    for (name, buckets) in spec.slots(&names) {
        let accepted = schema.slot(&name, buckets);
        assert_eq!(accepted.is_ok(), feature_reference::accepts(&name, buckets), "slot({name:?}, {buckets}): {accepted:?}");
        if let Ok(index) = accepted {
            match name.as_str() {
                "http_protocol" => wanted.protocol = true,
                // The fingerprints are read on TLS connections only.
                "tls_version" | "tls_ja4" | "tls_ja4_a" | "tls_ja4_ciphers" | "tls_ja4_extensions" | "tls_ja4_alpn" | "tls_ja3" | "tls_ua_consistent" => wanted.tls_version = true,
                "sni_present" => wanted.sni = true,
                "source_prefix" => wanted.source_address = true,
                _ => {}
            }
            slots.push((index, name, buckets));
        }
    }
    assert_eq!(schema.properties(), wanted);
    assert_eq!(schema.slots().len(), slots.iter().map(|s| s.0 + 1).max().unwrap_or(0));
    // Two models' tables: each reads its own answer, in its own slot unless the tables agree.
    let tables = ua_tables(&reference, spec.start ^ reference.headers.len() as u8);
    let mut consistency = Vec::new();
    for table in &tables {
        let index = schema.slot_reading("tls_ua_consistent", 0, Some(&core_table(table))).expect("tls_ua_consistent with a table");
        consistency.push((index, table));
    }
    assert!(schema.properties().tls_version);

    let key = HashKey::new(&spec.hash_key);
    let mut out = vec![0f32; schema.slots().len()];
    schema.compute(&request, &mut out);
    compare(&out, &slots, &reference, &key);
    compare_consistency(&out, &consistency, &reference);
    // The same scratch on an empty request: nothing of the first may linger.
    let empty = ReferenceRequest { headers: Vec::new(), protocol: None, tls_version: None, sni: None, source_address: None };
    schema.compute(&Request::new(HeaderMap::EMPTY), &mut out);
    compare(&out, &slots, &empty, &key);
    compare_consistency(&out, &consistency, &empty);
}

type Table = Vec<(Vec<u8>, Vec<u8>)>;

/// Two tables: a fixed one, and one adding an entry made from the request itself (its
/// user-agent's family, and its JA4 header cut at `cut` and ended with `*`, so it can match)
/// when the reference calls that entry valid. The core must call it valid exactly then.
fn ua_tables(reference: &ReferenceRequest, cut: u8) -> [Table; 2] {
    let entry = |f: &str, p: &str| (f.as_bytes().to_vec(), p.as_bytes().to_vec());
    let fixed = vec![entry("chrome", "t13d1516h2_8daaf6152771_*"), entry("curl", "t13i3111h2_e8f1e7e78f70_b26ce05bbdd6"), entry("firefox", "t13d*")];
    let mut own = vec![entry("chrome", "t13d1516h2_8daaf6152771_d8a2da3f94cd")];
    let first = |name: &[u8]| reference.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
    if let (Some(ua), Some(ja4)) = (first(b"user-agent"), first(b"x-edgescore-ja4")) {
        let family = edgescore_core::features::ua::family(ua).to_vec();
        let cut = cut as usize % 38;
        let pattern = if cut == 37 { ja4.to_vec() } else { [&ja4[..cut.min(ja4.len())], b"*"].concat() };
        let valid = ua_consistency::valid_entry(&family, &pattern);
        let accepted = UaFingerprint::new(&family, &pattern).is_some_and(|e| ua_fingerprints::check(&[e]).is_ok());
        assert_eq!(accepted, valid, "the core {} the entry ({:?}, {:?})", if accepted { "accepts" } else { "refuses" }, String::from_utf8_lossy(&family), String::from_utf8_lossy(&pattern));
        if valid {
            own.push((family, pattern));
        }
    }
    [own, fixed]
}

fn core_table(table: &Table) -> UaTable {
    let mut entries: Vec<UaFingerprint> = table.iter().map(|(f, p)| UaFingerprint::new(f, p).expect("an entry that fits")).collect();
    entries.sort();
    entries.dedup();
    ua_fingerprints::check(&entries).expect("a table of valid entries");
    UaTable::new(&entries)
}

fn compare_consistency(out: &[f32], slots: &[(usize, &Table)], reference: &ReferenceRequest) {
    for (index, table) in slots {
        let got = out[*index];
        match ua_consistency::consistent(reference, table) {
            None => assert!(got.is_nan(), "tls_ua_consistent (slot {index}): {got} where the reference has it missing"),
            Some(want) => assert_eq!(got.to_bits(), want.to_bits(), "tls_ua_consistent (slot {index}): {got} where the reference has {want}"),
        }
    }
}

fn compare(out: &[f32], slots: &[(usize, String, u32)], reference: &ReferenceRequest, key: &HashKey) {
    let mut last: Option<(&str, Expected)> = None;
    for (index, name, buckets) in slots {
        // A categorical feature at two bucket counts takes two slots in a row: one reference.
        let expected = match last {
            Some((n, e)) if n == name => e,
            _ => feature_reference::expected(name, reference, key),
        };
        last = Some((name, expected));
        let want = match expected {
            Expected::Number(v) => {
                assert_eq!(*buckets, 0, "{name}: a number in a bucketed slot");
                v
            }
            Expected::Hash(h) => h.map(|h| bucket(h, *buckets) as f32),
        };
        let got = out[*index];
        match want {
            None => assert!(got.is_nan(), "{name} (slot {index}, {buckets} buckets): {got} where the reference has it missing"),
            Some(want) => {
                assert!(!want.is_nan(), "{name}: the reference computed NaN");
                assert_eq!(got.to_bits(), want.to_bits(), "{name} (slot {index}, {buckets} buckets): {got} where the reference has {want}");
            }
        }
    }
}
