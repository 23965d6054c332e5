//! The request features as the catalogue (`edgescore_core::features::CATALOGUE`) and
//! `docs/configuration.md` define them, computed the plain way: one function per feature, a
//! loop over the header list each, std parsing. Nothing here comes from the core's extraction
//! (`core/src/features/extract.rs`); only the keyed hash of a byte string is the core's
//! (`HashKey::hash`), because a model's buckets are defined by it.
//!
//! Where the documentation leaves a case open, the reading chosen here is the one stated on
//! the function; `fuzz/README.md` lists them.

mod address;
mod tls;
pub mod ua_consistency;
mod ua_family;

use edgescore_core::features::hash::HashKey;
use edgescore_core::features::{Kind, CATALOGUE};

/// A request as the reference reads it: header pairs in the order sent (pseudo-headers
/// included) and the connection properties (`None`: the host had no value).
pub struct ReferenceRequest<'a> {
    pub headers: Vec<(&'a [u8], &'a [u8])>,
    pub protocol: Option<&'a [u8]>,
    pub tls_version: Option<&'a [u8]>,
    pub sni: Option<&'a [u8]>,
    pub source_address: Option<&'a [u8]>,
}

/// What the feature vector must hold: a number, or the keyed hash of a categorical value
/// (bucketed per slot); `None` is missing (NaN in the vector).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Expected {
    Number(Option<f32>),
    Hash(Option<u64>),
}

/// The expected value of catalogue feature `name` (an accepted name: see [`accepts`]).
pub fn expected(name: &str, req: &ReferenceRequest, key: &HashKey) -> Expected {
    use Expected::{Hash, Number};
    let hash = |v: Option<&[u8]>| Hash(v.map(|v| key.hash(v)));
    if let Some((prefix, header)) = name.split_once(':') {
        let header = header.as_bytes();
        return match prefix {
            "header_present" => Number(Some(header_present(req, header))),
            "header_length" => Number(Some(header_length(req, header))),
            "header_occurrences" => Number(Some(header_occurrences(req, header))),
            "header_value" => hash(first_value(req, header)),
            _ => panic!("no reference for `{name}`"),
        };
    }
    match name {
        "header_count" => Number(Some(header_count(req))),
        "header_bytes" => Number(Some(header_bytes(req))),
        "path_length" => Number(path_length(req)),
        "path_depth" => Number(path_depth(req)),
        "query_length" => Number(query_length(req)),
        "query_param_count" => Number(query_param_count(req)),
        "cookie_count" => Number(Some(cookie_count(req))),
        "cookie_length" => Number(Some(cookie_length(req))),
        "accept_language_count" => Number(Some(accept_language_count(req))),
        "content_length" => Number(content_length(req)),
        "ua_length" => Number(Some(ua_length(req))),
        "http_protocol" => Number(http_protocol(req)),
        "tls_version" => Number(tls_version(req)),
        "sni_present" => Number(Some(sni_present(req))),
        "host_is_ip" => Number(host_is_ip(req)),
        "method" => hash(first_value(req, b":method")),
        "user_agent" => hash(first_value(req, b"user-agent")),
        "ua_family" => hash(first_value(req, b"user-agent").map(ua_family::family)),
        "path_prefix" => hash(path_prefix(req).as_deref()),
        "header_order" => hash(Some(&header_order(req))),
        "source_prefix" => hash(address::source_network(req.source_address).as_deref()),
        // A client's counts come from the worker's table, not the request: a request the glue
        // did not count has them missing (tests/tests/velocity.rs checks the counted ones).
        "client_requests_10s" | "client_requests_60s" | "client_paths_60s" | "client_4xx_share_60s" | "client_403_share_60s" => Number(None),
        "tls_ja4" => hash(tls::ja4(fingerprint(req, b"x-edgescore-ja4")).map(|j| j.whole)),
        "tls_ja4_a" => hash(tls::ja4(fingerprint(req, b"x-edgescore-ja4")).map(|j| j.a)),
        "tls_ja4_ciphers" => Number(tls::ja4(fingerprint(req, b"x-edgescore-ja4")).map(|j| j.ciphers)),
        "tls_ja4_extensions" => Number(tls::ja4(fingerprint(req, b"x-edgescore-ja4")).map(|j| j.extensions)),
        "tls_ja4_alpn" => hash(tls::ja4(fingerprint(req, b"x-edgescore-ja4")).map(|j| j.alpn)),
        "tls_ja3" => hash(fingerprint(req, b"x-edgescore-ja3").filter(|v| tls::is_ja3(v))),
        // A slot without a model's table (`FeatureSchema::slot`): nothing is listed, so missing;
        // `ua_consistency::consistent` gives its value by a table.
        "tls_ua_consistent" => Number(None),
        // The signature's check is the glue's (`signatures::Bots`), not the request's: a request
        // it did not check has both missing (core/src/signatures tests check the checked ones).
        "verified_bot" => Number(None),
        "verified_bot_agent" => hash(None),
        _ => panic!("no reference for `{name}`: the catalogue has a feature this target does not know"),
    }
}

/// Whether a schema must accept `name` with `buckets`: a catalogue name (a parameterised one
/// with a lower-case HTTP token as its header), 0 buckets for a numeric feature, 1 to 2^24
/// for a categorical one (bucket indices must stay exact in an f32).
pub fn accepts(name: &str, buckets: u32) -> bool {
    match catalogue_kind(name) {
        Some(Kind::Numeric) => buckets == 0,
        Some(Kind::Categorical) => (1..=1 << 24).contains(&buckets),
        None => false,
    }
}

/// The kind of the catalogue entry `name` instantiates (`header_value:x-a` is
/// `header_value:<name>`); `None` for a name outside the catalogue.
pub fn catalogue_kind(name: &str) -> Option<Kind> {
    let tchar = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b);
    let entry = match name.split_once(':') {
        Some((prefix, header)) if !header.is_empty() && header.bytes().all(tchar) => format!("{prefix}:<name>"),
        Some(_) => return None,
        None => name.to_string(),
    };
    CATALOGUE.iter().find(|(n, _, _)| *n == entry).map(|(_, kind, _)| *kind)
}

fn is_pseudo(name: &[u8]) -> bool {
    name.first() == Some(&b':')
}

/// The fingerprint headers Envoy writes: not part of the request's shape (header count, bytes,
/// order).
fn is_fingerprint(name: &[u8]) -> bool {
    name == b"x-edgescore-ja4" || name == b"x-edgescore-ja3"
}

/// A fingerprint header's first value, on a connection with TLS only (on plain HTTP Envoy writes
/// none, so any copy is a client's).
fn fingerprint<'a>(req: &ReferenceRequest<'a>, name: &[u8]) -> Option<&'a [u8]> {
    req.tls_version.filter(|v| !v.is_empty()).and(first_value(req, name))
}

/// The first value of `name`: Envoy hands single-valued headers once, and where a client sent
/// one twice the first is the one HTTP intermediaries act on (also for pseudo-headers).
fn first_value<'a>(req: &ReferenceRequest<'a>, name: &[u8]) -> Option<&'a [u8]> {
    req.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

fn values<'r, 'a>(req: &'r ReferenceRequest<'a>, name: &'r [u8]) -> impl Iterator<Item = &'a [u8]> + 'r {
    req.headers.iter().filter(move |(n, _)| *n == name).map(|(_, v)| *v)
}

/// Items of a list value that hold something besides optional whitespace (SP, HTAB).
fn count_items(value: &[u8], separator: u8) -> usize {
    let mut count = 0;
    for item in value.split(|&b| b == separator) {
        if item.iter().any(|&b| b != b' ' && b != b'\t') {
            count += 1;
        }
    }
    count
}

fn header_count(req: &ReferenceRequest) -> f32 {
    req.headers.iter().filter(|(n, _)| !is_pseudo(n) && !is_fingerprint(n)).count() as f32
}

fn header_bytes(req: &ReferenceRequest) -> f32 {
    let mut total = 0u64;
    for (name, value) in &req.headers {
        if !is_pseudo(name) && !is_fingerprint(name) {
            total += (name.len() + value.len()) as u64;
        }
    }
    total as f32
}

/// The path without its query; a request without `:path` has neither (all path features
/// missing, the query's too: "0 without a query" is for a path that has none).
fn path_and_query<'a>(req: &ReferenceRequest<'a>) -> Option<(&'a [u8], Option<&'a [u8]>)> {
    let target = first_value(req, b":path")?;
    Some(match target.iter().position(|&b| b == b'?') {
        Some(q) => (&target[..q], Some(&target[q + 1..])),
        None => (target, None),
    })
}

fn path_length(req: &ReferenceRequest) -> Option<f32> {
    path_and_query(req).map(|(path, _)| path.len() as f32)
}

fn path_depth(req: &ReferenceRequest) -> Option<f32> {
    path_and_query(req).map(|(path, _)| path.split(|&b| b == b'/').filter(|s| !s.is_empty()).count() as f32)
}

fn query_length(req: &ReferenceRequest) -> Option<f32> {
    path_and_query(req).map(|(_, query)| query.map_or(0, |q| q.len()) as f32)
}

fn query_param_count(req: &ReferenceRequest) -> Option<f32> {
    path_and_query(req).map(|(_, query)| query.map_or(0, |q| count_items(q, b'&')) as f32)
}

fn cookie_count(req: &ReferenceRequest) -> f32 {
    values(req, b"cookie").map(|v| count_items(v, b';')).sum::<usize>() as f32
}

fn cookie_length(req: &ReferenceRequest) -> f32 {
    values(req, b"cookie").map(|v| v.len() as u64).sum::<u64>() as f32
}

fn accept_language_count(req: &ReferenceRequest) -> f32 {
    values(req, b"accept-language").map(|v| count_items(v, b',')).sum::<usize>() as f32
}

/// RFC 9110's `1*DIGIT` (any number of digits, leading zeros too) as the f32 nearest to it,
/// around optional whitespace (SP, HTAB; also CR, LF, FF, which Envoy never leaves in a value).
fn content_length(req: &ReferenceRequest) -> Option<f32> {
    let value = first_value(req, b"content-length")?;
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0c);
    let start = value.iter().position(|b| !is_space(b))?;
    let end = value.iter().rposition(|b| !is_space(b))? + 1;
    let digits = &value[start..end];
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse::<f32>().ok()
}

fn ua_length(req: &ReferenceRequest) -> f32 {
    first_value(req, b"user-agent").map_or(0, |v| v.len()) as f32
}

/// Envoy's spellings of `request.protocol` (and the `.0` forms of 2 and 3).
fn http_protocol(req: &ReferenceRequest) -> Option<f32> {
    match req.protocol? {
        b"HTTP/1.0" => Some(1.0),
        b"HTTP/1.1" => Some(1.1),
        b"HTTP/2" | b"HTTP/2.0" => Some(2.0),
        b"HTTP/3" | b"HTTP/3.0" => Some(3.0),
        _ => None,
    }
}

/// BoringSSL's version names; no value (or an empty one) is a plaintext connection.
fn tls_version(req: &ReferenceRequest) -> Option<f32> {
    match req.tls_version {
        None => Some(0.0),
        Some(b"") => Some(0.0),
        Some(b"TLSv1" | b"TLSv1.0") => Some(1.0),
        Some(b"TLSv1.1") => Some(1.1),
        Some(b"TLSv1.2") => Some(1.2),
        Some(b"TLSv1.3") => Some(1.3),
        Some(_) => None,
    }
}

fn sni_present(req: &ReferenceRequest) -> f32 {
    match req.sni {
        Some(name) if !name.is_empty() => 1.0,
        _ => 0.0,
    }
}

/// `:authority`, or the `host` header that carries the same in HTTP/1 (RFC 9110 §7.2) when a
/// map has no `:authority`.
fn host_is_ip(req: &ReferenceRequest) -> Option<f32> {
    let authority = first_value(req, b":authority").or_else(|| first_value(req, b"host"))?;
    Some(if address::ip_literal(authority).is_some() { 1.0 } else { 0.0 })
}

fn header_present(req: &ReferenceRequest, name: &[u8]) -> f32 {
    if values(req, name).next().is_some() {
        1.0
    } else {
        0.0
    }
}

fn header_length(req: &ReferenceRequest, name: &[u8]) -> f32 {
    values(req, name).map(|v| v.len() as u64).sum::<u64>() as f32
}

fn header_occurrences(req: &ReferenceRequest, name: &[u8]) -> f32 {
    values(req, name).count() as f32
}

/// `/api/v1?x` → `/api`; a path not starting with `/` (`*`, or garbage) keeps its first
/// segment without a slash.
fn path_prefix(req: &ReferenceRequest) -> Option<Vec<u8>> {
    let (path, _) = path_and_query(req)?;
    let mut prefix = Vec::new();
    for (i, &b) in path.iter().enumerate() {
        if b == b'/' && i > 0 {
            break;
        }
        prefix.push(b);
    }
    Some(prefix)
}

/// The names as sent, each followed by a newline (no name Envoy passes holds one); an empty
/// sequence is a value too.
fn header_order(req: &ReferenceRequest) -> Vec<u8> {
    let mut sequence = Vec::new();
    for (name, _) in &req.headers {
        if !is_pseudo(name) && !is_fingerprint(name) {
            sequence.extend_from_slice(name);
            sequence.push(b'\n');
        }
    }
    sequence
}

/// `floor(hash × buckets / 2^64)`: the multiply-shift reduction `features::hash` documents.
pub fn bucket(hash: u64, buckets: u32) -> u32 {
    ((u128::from(hash) * u128::from(buckets)) >> 64) as u32
}
