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
//! slot by slot (accepting exactly the names and bucket counts the catalogue allows), and
//! every slot of the computed vector must equal the reference bit for bit (NaN = missing), on
//! the request and then on an empty one with the same scratch.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use edgescore_core::conn_cache::ConnCache;
use edgescore_core::features::hash::HashKey;
use edgescore_core::features::{FeatureSchema, Properties};
use edgescore_core::request::{HeaderMap, Property, Request};
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
                "tls_version" | "tls_ja4" | "tls_ja4_a" | "tls_ja4_ciphers" | "tls_ja4_extensions" | "tls_ja4_alpn" | "tls_ja3" => wanted.tls_version = true,
                "sni_present" => wanted.sni = true,
                "source_prefix" => wanted.source_address = true,
                _ => {}
            }
            slots.push((index, name, buckets));
        }
    }
    assert_eq!(schema.properties(), wanted);
    assert_eq!(schema.slots().len(), slots.iter().map(|s| s.0 + 1).max().unwrap_or(0));

    let key = HashKey::new(&spec.hash_key);
    let mut out = vec![0f32; schema.slots().len()];
    schema.compute(&request, &mut out);
    compare(&out, &slots, &reference, &key);
    // The same scratch on an empty request: nothing of the first may linger.
    let empty = ReferenceRequest { headers: Vec::new(), protocol: None, tls_version: None, sni: None, source_address: None };
    schema.compute(&Request::new(HeaderMap::EMPTY), &mut out);
    compare(&out, &slots, &empty, &key);
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
