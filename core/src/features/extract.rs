//! One pass over the request computes every feature the configured models use. The plan is
//! built at configuration time; per request, extraction writes into preallocated
//! [`FeatureValues`] and allocates nothing.

use super::hash::HashKey;
use super::ua_fingerprints::UaTable;
use super::{ja4, ua, Feature, Kind};
use crate::request::Request;
use core::net::IpAddr;

/// Which connection properties the plan reads (each is a host call per request, so the glue
/// fetches only these).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Properties {
    pub protocol: bool,
    pub tls_version: bool,
    pub sni: bool,
    pub source_address: bool,
}

impl Properties {
    /// Per property, in [`crate::request::Property::ALL`] order: is it wanted.
    pub fn wanted(&self) -> [bool; 4] {
        [self.protocol, self.tls_version, self.sni, self.source_address]
    }

    /// How many properties are wanted.
    pub fn count(&self) -> usize {
        self.wanted().iter().filter(|&&w| w).count()
    }
}

/// Which of a client's counts the plan reads: `requests` any of them (the glue counts the
/// request in its `velocity::Clients`), `answers` a share (the glue also counts the answer's status).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VelocityNeeds {
    pub requests: bool,
    pub answers: bool,
}

/// The distinct features to compute, in a fixed order, and what the header pass must watch.
#[derive(Debug, Clone, Default)]
pub struct FeaturePlan {
    features: Vec<Feature>,
    /// Distinct header names read by parameterised features.
    watched: Vec<Vec<u8>>,
    /// Per feature: its index in `watched`.
    watch_index: Vec<usize>,
    /// The distinct UA fingerprint tables of the models (`tls_ua_consistent`). A table is part
    /// of the feature's identity, as a bucket count is of a categorical slot's: each distinct
    /// table is one planned feature with its own slot, so each model reads its own table's
    /// answer through the gather list it has anyway (nothing per model in `Scorer` or
    /// `ModelSet`), equal tables share one, and per request the family and the JA4 are read
    /// once for all of them.
    ua_tables: Vec<UaTable>,
    /// Per feature: its index in `ua_tables` (`usize::MAX` if it reads none).
    table_index: Vec<usize>,
    properties: Properties,
    velocity: VelocityNeeds,
}

/// One request's features, indexed like the plan: a number for numeric features, a keyed hash
/// (or missing) for categorical ones.
#[derive(Debug, Clone, Default)]
pub struct FeatureValues {
    pub numeric: Vec<f32>,
    pub hash: Vec<Option<u64>>,
    watch: Vec<Watched>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Watched {
    occurrences: u32,
    bytes: u64,
    first_hash: Option<u64>,
}

impl FeaturePlan {
    /// Adds `feature` (once) and returns its index.
    pub fn add(&mut self, feature: Feature) -> usize {
        self.add_reading(feature, None)
    }

    /// As [`FeaturePlan::add`], `tls_ua_consistent` reading `ua_table` (without one, it is
    /// always missing): once per distinct table.
    pub fn add_reading(&mut self, feature: Feature, ua_table: Option<&UaTable>) -> usize {
        let table = match ua_table.filter(|_| feature == Feature::TlsUaConsistent) {
            Some(t) => self.ua_tables.iter().position(|u| u == t).unwrap_or(self.ua_tables.len()),
            None => usize::MAX,
        };
        if let Some(i) = self.features.iter().zip(&self.table_index).position(|(f, &t)| *f == feature && t == table) {
            return i;
        }
        if let Some(t) = ua_table.filter(|_| table == self.ua_tables.len()) {
            self.ua_tables.push(t.clone());
        }
        let watch = match feature.header() {
            Some(h) => match self.watched.iter().position(|w| w == h) {
                Some(w) => w,
                None => {
                    self.watched.push(h.to_vec());
                    self.watched.len() - 1
                }
            },
            None => usize::MAX,
        };
        match feature {
            Feature::HttpProtocol => self.properties.protocol = true,
            Feature::TlsVersion => self.properties.tls_version = true,
            Feature::SniPresent => self.properties.sni = true,
            Feature::SourcePrefix => self.properties.source_address = true,
            // Only a TLS connection's fingerprint headers are Envoy's (see `ja4`).
            ref f if f.is_fingerprint() => self.properties.tls_version = true,
            Feature::Client4xxShare60s | Feature::Client403Share60s => self.velocity = VelocityNeeds { requests: true, answers: true },
            ref f if f.is_velocity() => self.velocity.requests = true,
            _ => {}
        }
        self.features.push(feature);
        self.watch_index.push(watch);
        self.table_index.push(table);
        self.features.len() - 1
    }

    pub fn features(&self) -> &[Feature] {
        &self.features
    }

    /// The UA fingerprint table feature `i` reads, if any.
    pub fn ua_table(&self, i: usize) -> Option<&UaTable> {
        self.ua_tables.get(*self.table_index.get(i)?)
    }

    pub fn properties(&self) -> Properties {
        self.properties
    }

    pub fn velocity(&self) -> VelocityNeeds {
        self.velocity
    }

    /// Scratch sized for this plan; reuse it for every request.
    pub fn values(&self) -> FeatureValues {
        FeatureValues {
            numeric: vec![f32::NAN; self.features.len()],
            hash: vec![None; self.features.len()],
            watch: vec![Watched::default(); self.watched.len()],
        }
    }

    /// Computes every planned feature of `req` into `out` (made by [`FeaturePlan::values`]).
    pub fn extract(&self, req: &Request<'_>, key: &HashKey, out: &mut FeatureValues) {
        let mut pass = HeaderPass::default();
        let wants_order = self.features.contains(&Feature::HeaderOrder);
        let mut order = wants_order.then(|| key.hasher());
        for w in out.watch.iter_mut() {
            *w = Watched::default();
        }
        for (name, value) in req.headers.iter() {
            if name.first() == Some(&b':') {
                // The first of each, like every other single-valued header here: a client that
                // sends one twice is answered by the first (Envoy's codecs refuse duplicates).
                match name {
                    b":method" if pass.method.is_none() => pass.method = Some(value),
                    b":path" if pass.path.is_none() => pass.path = Some(value),
                    b":authority" if pass.authority.is_none() => pass.authority = Some(value),
                    _ => {}
                }
                continue;
            }
            // Envoy writes the fingerprint headers on TLS connections, over any client copy:
            // they are the connection's, not the request's shape, and are left out of the header
            // count, bytes and order (a client's copy on plain HTTP too).
            let fingerprint = name == ja4::JA4_HEADER.as_bytes() || name == ja4::JA3_HEADER.as_bytes();
            if !fingerprint {
                pass.header_count += 1;
                pass.header_bytes += (name.len() + value.len()) as u64;
                if let Some(h) = order.as_mut() {
                    h.update(name);
                    h.update(b"\n");
                }
            }
            match name {
                b"user-agent" if pass.user_agent.is_none() => pass.user_agent = Some(value),
                b"cookie" => {
                    pass.cookie_count += count_items(value, b';');
                    pass.cookie_bytes += value.len() as u64;
                }
                b"accept-language" => pass.accept_language += count_items(value, b','),
                b"content-length" if pass.content_length.is_none() => pass.content_length = Some(value),
                b"host" if pass.host.is_none() => pass.host = Some(value),
                n if n == ja4::JA4_HEADER.as_bytes() && pass.ja4.is_none() => pass.ja4 = Some(value),
                n if n == ja4::JA3_HEADER.as_bytes() && pass.ja3.is_none() => pass.ja3 = Some(value),
                _ => {}
            }
            for (w, watched) in out.watch.iter_mut().zip(&self.watched) {
                if name == watched.as_slice() {
                    w.occurrences += 1;
                    w.bytes += value.len() as u64;
                    if w.first_hash.is_none() {
                        w.first_hash = Some(key.hash(value));
                    }
                }
            }
        }
        let (path, query) = match pass.path {
            Some(p) => match p.iter().position(|&b| b == b'?') {
                Some(q) => (Some(&p[..q]), Some(&p[q + 1..])),
                None => (Some(p), None),
            },
            None => (None, None),
        };
        // Without TLS the headers can only be a client's: the fingerprints are missing.
        let tls = req.tls_version.is_some_and(|v| !v.is_empty());
        let fingerprint = pass.ja4.filter(|_| tls).and_then(ja4::parse);
        let ja3 = pass.ja3.filter(|j| tls && ja4::is_ja3(j));
        let family = pass.user_agent.filter(|_| fingerprint.is_some() && !self.ua_tables.is_empty()).map(ua::family);
        for (i, feature) in self.features.iter().enumerate() {
            let watched = out.watch.get(self.watch_index[i]).copied().unwrap_or_default();
            let number = |v: Option<f32>| v.unwrap_or(f32::NAN);
            let value: f32 = match feature {
                Feature::HeaderCount => pass.header_count as f32,
                Feature::HeaderBytes => pass.header_bytes as f32,
                Feature::PathLength => number(path.map(|p| p.len() as f32)),
                Feature::PathDepth => number(path.map(|p| p.split(|&b| b == b'/').filter(|s| !s.is_empty()).count() as f32)),
                Feature::QueryLength => number(pass.path.map(|_| query.map_or(0, |q| q.len()) as f32)),
                Feature::QueryParamCount => number(pass.path.map(|_| query.map_or(0, |q| count_items(q, b'&')) as f32)),
                Feature::CookieCount => pass.cookie_count as f32,
                Feature::CookieLength => pass.cookie_bytes as f32,
                Feature::AcceptLanguageCount => pass.accept_language as f32,
                Feature::ContentLength => number(pass.content_length.and_then(parse_decimal)),
                Feature::UaLength => pass.user_agent.map_or(0.0, |u| u.len() as f32),
                Feature::HttpProtocol => number(req.protocol.and_then(protocol_number)),
                Feature::TlsVersion => number(tls_number(req.tls_version)),
                Feature::SniPresent => req.sni.is_some_and(|s| !s.is_empty()) as u8 as f32,
                // `host` is HTTP/1's `:authority` (RFC 9110 §7.2), for maps without one.
                Feature::HostIsIp => number(pass.authority.or(pass.host).map(|a| host_is_ip(a) as u8 as f32)),
                Feature::HeaderPresent(_) => (watched.occurrences > 0) as u8 as f32,
                Feature::HeaderLength(_) => watched.bytes as f32,
                Feature::HeaderOccurrences(_) => watched.occurrences as f32,
                Feature::ClientRequests10s => number(req.velocity.map(|v| v.requests_10s)),
                Feature::ClientRequests60s => number(req.velocity.map(|v| v.requests_60s)),
                Feature::ClientPaths60s => number(req.velocity.map(|v| v.paths_60s)),
                Feature::Client4xxShare60s => number(req.velocity.map(|v| v.share_4xx_60s)),
                Feature::Client403Share60s => number(req.velocity.map(|v| v.share_403_60s)),
                Feature::TlsJa4Ciphers => number(fingerprint.map(|j| j.ciphers as f32)),
                Feature::TlsJa4Extensions => number(fingerprint.map(|j| j.extensions as f32)),
                Feature::VerifiedBot => number(req.signature.map(|s| s.is_ok() as u8 as f32)),
                Feature::TlsUaConsistent => number(
                    fingerprint
                        .zip(family)
                        .zip(self.ua_tables.get(self.table_index[i]))
                        .and_then(|((j, family), table)| table.consistent(family, j.full))
                        .map(|c| c as u8 as f32),
                ),
                Feature::Method => {
                    out.hash[i] = pass.method.map(|m| key.hash(m));
                    continue;
                }
                Feature::UserAgent => {
                    out.hash[i] = pass.user_agent.map(|u| key.hash(u));
                    continue;
                }
                Feature::UaFamily => {
                    out.hash[i] = pass.user_agent.map(|u| key.hash(ua::family(u)));
                    continue;
                }
                Feature::PathPrefix => {
                    out.hash[i] = path.map(|p| key.hash(path_prefix(p)));
                    continue;
                }
                Feature::HeaderOrder => {
                    out.hash[i] = order.as_ref().map(|h| h.digest());
                    continue;
                }
                Feature::SourcePrefix => {
                    out.hash[i] = req.source_address.and_then(|a| source_prefix(a, key));
                    continue;
                }
                Feature::HeaderValue(_) => {
                    out.hash[i] = watched.first_hash;
                    continue;
                }
                Feature::TlsJa4 => {
                    out.hash[i] = fingerprint.map(|j| key.hash(j.full));
                    continue;
                }
                Feature::TlsJa4A => {
                    out.hash[i] = fingerprint.map(|j| key.hash(j.a));
                    continue;
                }
                Feature::TlsJa4Alpn => {
                    out.hash[i] = fingerprint.map(|j| key.hash(j.alpn));
                    continue;
                }
                Feature::TlsJa3 => {
                    out.hash[i] = ja3.map(|j| key.hash(j));
                    continue;
                }
                Feature::VerifiedBotAgent => {
                    out.hash[i] = req.signature.and_then(|s| s.ok()).map(|v| key.hash(v.agent.as_bytes()));
                    continue;
                }
            };
            debug_assert_eq!(feature.kind(), Kind::Numeric);
            out.numeric[i] = value;
        }
    }
}

#[derive(Default)]
struct HeaderPass<'a> {
    method: Option<&'a [u8]>,
    path: Option<&'a [u8]>,
    authority: Option<&'a [u8]>,
    host: Option<&'a [u8]>,
    user_agent: Option<&'a [u8]>,
    content_length: Option<&'a [u8]>,
    ja4: Option<&'a [u8]>,
    ja3: Option<&'a [u8]>,
    header_count: u32,
    header_bytes: u64,
    cookie_count: u32,
    cookie_bytes: u64,
    accept_language: u32,
}

/// Non-empty (after trimming spaces) items separated by `sep`.
fn count_items(value: &[u8], sep: u8) -> u32 {
    value.split(|&b| b == sep).filter(|s| s.iter().any(|&b| b != b' ' && b != b'\t')).count() as u32
}

/// HTTP's `1*DIGIT`, any length, as the nearest f32: exact up to `u128::MAX`, whose `as f32`
/// rounds correctly; every saturated value is past `f32::MAX` and rounds to infinity, as its
/// true value does.
fn parse_decimal(v: &[u8]) -> Option<f32> {
    let v = v.trim_ascii();
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u128, |n, &d| n.saturating_mul(10).saturating_add((d - b'0') as u128)) as f32)
}

fn protocol_number(p: &[u8]) -> Option<f32> {
    match p {
        b"HTTP/1.0" => Some(1.0),
        b"HTTP/1.1" => Some(1.1),
        b"HTTP/2" | b"HTTP/2.0" => Some(2.0),
        b"HTTP/3" | b"HTTP/3.0" => Some(3.0),
        _ => None,
    }
}

/// Envoy reports no value (or an empty one) for plaintext connections.
fn tls_number(v: Option<&[u8]>) -> Option<f32> {
    match v {
        None | Some(b"") => Some(0.0),
        Some(b"TLSv1") | Some(b"TLSv1.0") => Some(1.0),
        Some(b"TLSv1.1") => Some(1.1),
        Some(b"TLSv1.2") => Some(1.2),
        Some(b"TLSv1.3") => Some(1.3),
        Some(_) => None,
    }
}

/// `/api/v1/x` → `/api`; `/` → `/`; `` → ``.
fn path_prefix(path: &[u8]) -> &[u8] {
    match path.iter().skip(1).position(|&b| b == b'/') {
        Some(i) => &path[..i + 1],
        None => path,
    }
}

fn host_is_ip(authority: &[u8]) -> bool {
    ip_literal(authority).is_some()
}

/// The IP of `v4`, `v4:port`, `[v6]` or `[v6]:port` (RFC 3986: `port = *DIGIT`); `None` for
/// anything else — a name, junk after the address, or a bare IPv6 address, whose last group
/// cannot be told from a port.
fn ip_literal(authority: &[u8]) -> Option<IpAddr> {
    let a = core::str::from_utf8(authority).ok()?;
    let (ip, port) = match a.strip_prefix('[') {
        Some(rest) => {
            let (ip, after) = rest.split_once(']')?;
            (IpAddr::V6(ip.parse().ok()?), after)
        }
        None => {
            let (host, port) = a.split_at(a.find(':').unwrap_or(a.len()));
            (IpAddr::V4(host.parse().ok()?), port)
        }
    };
    let port_ok = port.is_empty() || port.strip_prefix(':').is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    port_ok.then_some(ip)
}

/// Hashes the /24 (IPv4) or /48 (IPv6) network of `ip:port` / `[ip]:port`; an IPv4-mapped
/// IPv6 address (a dual-stack listener's IPv4 client) is IPv4.
fn source_prefix(address: &[u8], key: &HashKey) -> Option<u64> {
    let ip = match ip_literal(address)? {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    Some(match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            key.hash(&[4, o[0], o[1], o[2]])
        }
        IpAddr::V6(v6) => {
            let o = v6.octets();
            key.hash(&[6, o[0], o[1], o[2], o[3], o[4], o[5]])
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::HeaderMap;

    fn extract(names: &[&str], headers: &[(&str, &str)], setup: impl Fn(&mut Request)) -> (FeaturePlan, FeatureValues) {
        let mut plan = FeaturePlan::default();
        for n in names {
            plan.add(Feature::parse(n).unwrap());
        }
        let buf = HeaderMap::encode(headers);
        let mut req = Request::new(HeaderMap::parse(&buf).unwrap());
        setup(&mut req);
        let mut out = plan.values();
        plan.extract(&req, &HashKey::new(b"0123456789abcdef"), &mut out);
        (plan, out)
    }

    #[test]
    fn request_shape() {
        let names = [
            "header_count", "path_length", "path_depth", "query_length", "query_param_count", "cookie_count",
            "cookie_length", "accept_language_count", "content_length", "ua_length", "host_is_ip",
            "header_present:x-a", "header_length:x-a", "header_occurrences:x-a", "header_present:x-b",
        ];
        let headers = [
            (":method", "POST"), (":path", "/a//b/c?x=1&&y=2&"), (":authority", "10.0.0.1:8080"),
            ("user-agent", "curl/8"), ("cookie", "a=1; b=2;"), ("cookie", "c=3"), ("accept-language", "en-US,en;q=0.9, "),
            ("content-length", " 42 "), ("x-a", "12"), ("x-a", "345"),
        ];
        let (_, v) = extract(&names, &headers, |_| {});
        assert_eq!(v.numeric, [7.0, 7.0, 3.0, 9.0, 2.0, 3.0, 12.0, 2.0, 42.0, 6.0, 1.0, 1.0, 5.0, 2.0, 0.0]);
    }

    #[test]
    fn missing_values() {
        let names = ["path_length", "query_length", "content_length", "host_is_ip", "http_protocol", "tls_version", "method", "user_agent"];
        let (_, v) = extract(&names, &[("x", "y")], |_| {});
        assert!(v.numeric[..5].iter().all(|x| x.is_nan()), "{:?}", v.numeric);
        assert_eq!(v.numeric[5], 0.0, "no TLS property means plaintext");
        assert_eq!(v.hash[6..], [None, None]);
    }

    #[test]
    fn properties_and_hashes() {
        let names = ["http_protocol", "tls_version", "sni_present", "source_prefix", "method", "path_prefix", "header_order"];
        let hs = [(":method", "GET"), (":path", "/api/v1?q"), ("a", "1"), ("b", "2")];
        let (plan, v) = extract(&names, &hs, |r| {
            r.protocol = Some(b"HTTP/2");
            r.tls_version = Some(b"TLSv1.3");
            r.sni = Some(b"example.com");
            r.source_address = Some(b"192.0.2.77:5555");
        });
        assert_eq!(plan.properties(), Properties { protocol: true, tls_version: true, sni: true, source_address: true });
        assert_eq!(v.numeric[..3], [2.0, 1.3, 1.0]);
        let key = HashKey::new(b"0123456789abcdef");
        assert_eq!(v.hash[3], Some(key.hash(&[4, 192, 0, 2])));
        assert_eq!(v.hash[4], Some(key.hash(b"GET")));
        assert_eq!(v.hash[5], Some(key.hash(b"/api")));
        assert_eq!(v.hash[6], Some(key.hash(b"a\nb\n")));
        // Same /24, same bucket; the order of headers changes the order hash.
        let (_, w) = extract(&names, &[(":method", "GET"), (":path", "/api"), ("b", "2"), ("a", "1")], |r| r.source_address = Some(b"192.0.2.1:1"));
        assert_eq!(w.hash[3], v.hash[3]);
        assert_ne!(w.hash[6], v.hash[6]);
    }

    #[test]
    fn client_counts_come_from_the_request() {
        let names = ["header_count", "client_requests_10s", "client_requests_60s", "client_paths_60s", "client_4xx_share_60s", "client_403_share_60s"];
        let v = crate::velocity::Velocity { requests_10s: 3.0, requests_60s: 7.0, paths_60s: 2.0, share_4xx_60s: 0.5, share_403_60s: 0.25 };
        let (plan, out) = extract(&names, &[("a", "1")], |r| r.velocity = Some(v));
        assert_eq!(out.numeric, [1.0, 3.0, 7.0, 2.0, 0.5, 0.25]);
        assert_eq!(plan.velocity(), VelocityNeeds { requests: true, answers: true });
        let (_, out) = extract(&names, &[("a", "1")], |_| {});
        assert!(out.numeric[1..].iter().all(|x| x.is_nan()), "no client key: missing");
        let (plan, _) = extract(&["client_paths_60s"], &[], |_| {});
        assert_eq!(plan.velocity(), VelocityNeeds { requests: true, answers: false });
        assert_eq!(extract(&["header_count"], &[], |_| {}).0.velocity(), VelocityNeeds::default());
    }

    #[test]
    fn prefixes_and_addresses() {
        assert_eq!(path_prefix(b"/api/v1"), b"/api");
        assert_eq!(path_prefix(b"/"), b"/");
        assert_eq!(path_prefix(b""), b"");
        assert_eq!(path_prefix(b"/x"), b"/x");
        let k = HashKey::new(b"0123456789abcdef");
        assert_eq!(source_prefix(b"[2001:db8:1:2::5]:443", &k), source_prefix(b"[2001:db8:1:ffff::]:1", &k));
        assert_eq!(source_prefix(b"[::ffff:192.0.2.9]:1", &k), source_prefix(b"192.0.2.1:2", &k));
        assert_eq!(source_prefix(b"\xff\xfe", &k), None);
        assert!(host_is_ip(b"[::1]:80") && host_is_ip(b"1.2.3.4") && !host_is_ip(b"example.com:443"));
    }

    /// Found by the `features` fuzz target (`fuzz/crashes/features-content-length-digits`):
    /// more than 20 digits (leading zeros too) were "not a number", and 20-digit values past
    /// `u64::MAX` saturated to 1.8e19.
    #[test]
    fn content_length_is_the_number_whatever_its_digits() {
        let cases: [(&str, f32); 6] = [
            ("0000000000000000000000042", 42.0),
            ("99999999999999999999", 1e20),
            ("269348530000000000000000000000000000000", 2.6934853e38),
            ("340282356779733661637539395458142568447", f32::MAX),
            ("340282356779733661637539395458142568448", f32::INFINITY),
            (" 18446744073709551615\t", 18446744073709551615.0),
        ];
        for (text, want) in cases {
            assert_eq!(parse_decimal(text.as_bytes()), Some(want), "{text}");
        }
        assert_eq!(parse_decimal(&[b'9'; 500]), Some(f32::INFINITY));
        assert_eq!(parse_decimal(b"+5"), None);
    }

    /// Found by the `features` fuzz target (`fuzz/crashes/features-duplicate-method`): a
    /// duplicated pseudo-header counted by its last value while every other header counts by
    /// its first; and a `host` header before `:authority` now loses to it.
    #[test]
    fn first_pseudo_header_wins_and_authority_beats_host() {
        let names = ["method", "path_length", "host_is_ip"];
        let hs = [(":method", "GET"), (":path", "/abc"), ("host", "example.com"), (":method", "POST"), (":path", "/"), (":authority", "1.2.3.4")];
        let (_, v) = extract(&names, &hs, |_| {});
        assert_eq!(v.hash[0], Some(HashKey::new(b"0123456789abcdef").hash(b"GET")));
        assert_eq!(v.numeric[1..], [4.0, 1.0]);
        let (_, v) = extract(&names, &[(":authority", "example.com"), (":authority", "1.2.3.4")], |_| {});
        assert_eq!(v.numeric[2], 0.0);
        let (_, v) = extract(&names, &[("host", "1.2.3.4"), ("host", "example.com")], |_| {});
        assert_eq!(v.numeric[2], 1.0);
    }

    /// Found by the `features` fuzz target (`fuzz/crashes/features-authority-junk-port`): the
    /// host was cut at the last `:` and what followed never read, so `192.1.2.10:10ath`,
    /// `[::1]junk` and `1.2.3.4:80:90` were IP literals (or not) by accident, and a bare
    /// `::1:80` source address was taken for `::1` port 80.
    #[test]
    fn ip_literals_take_only_a_numeric_port() {
        for ip in ["1.2.3.4", "1.2.3.4:80", "1.2.3.4:", "[::1]", "[::1]:443", "[::ffff:1.2.3.4]:1"] {
            assert!(host_is_ip(ip.as_bytes()), "{ip}");
        }
        for not in ["192.1.2.10:10ath", "[::1]junk", "[::1]:8a", "1.2.3.4:80:90", "1.2.3.4 ", "::1", "::1:80", "[1.2.3.4]", "[::1"] {
            assert!(!host_is_ip(not.as_bytes()), "{not}");
        }
        let k = HashKey::new(b"0123456789abcdef");
        assert_eq!(source_prefix(b"::1:80", &k), None);
        assert_eq!(source_prefix(b"10.0.0.1:x", &k), None);
        assert_eq!(source_prefix(b"[2001:db8:1::]", &k), source_prefix(b"[2001:db8:1::5]:443", &k));
    }

    const TLS: [&str; 6] = ["tls_ja4", "tls_ja4_a", "tls_ja4_ciphers", "tls_ja4_extensions", "tls_ja4_alpn", "tls_ja3"];

    /// Each part means what the JA4 spec says: Chrome's `t13d1516h2` offers 15 ciphers and 16
    /// extensions over TLS 1.3 with SNI and ALPN `h2`.
    #[test]
    fn tls_fingerprint_parts() {
        let hs = [(":path", "/"), ("x-edgescore-ja4", "t13d1516h2_8daaf6152771_d8a2da3f94cd"), ("x-edgescore-ja3", "e7d705a3286e19ea42f587b344ee6865")];
        let (plan, v) = extract(&TLS, &hs, over_tls);
        assert_eq!(plan.properties(), Properties { tls_version: true, ..Properties::default() }, "the fingerprints read whether the connection has TLS");
        let key = HashKey::new(b"0123456789abcdef");
        assert_eq!(v.hash[0], Some(key.hash(b"t13d1516h2_8daaf6152771_d8a2da3f94cd")));
        assert_eq!(v.hash[1], Some(key.hash(b"t13d1516h2")));
        assert_eq!(v.numeric[2..4], [15.0, 16.0]);
        assert_eq!(v.hash[4], Some(key.hash(b"h2")));
        assert_eq!(v.hash[5], Some(key.hash(b"e7d705a3286e19ea42f587b344ee6865")));
        // No ALPN is its own category (`00`), not a missing value; counts are the capped digits.
        let (_, w) = extract(&TLS, &[("x-edgescore-ja4", "t12i990400_000000000000_000000000000")], over_tls);
        assert_eq!((w.hash[1], w.numeric[2], w.numeric[3], w.hash[4]), (Some(key.hash(b"t12i990400")), 99.0, 4.0, Some(key.hash(b"00"))));
        // A second copy (Envoy sets one) does not replace the first.
        let (_, d) = extract(&TLS, &[hs[1], ("x-edgescore-ja4", "t13i3111h2_e8f1e7e78f70_b26ce05bbdd6"), hs[2]], over_tls);
        assert_eq!(d.hash[..2], v.hash[..2]);
        assert_eq!(d.numeric[2..4], [15.0, 16.0]);
    }

    fn over_tls(req: &mut Request) {
        req.tls_version = Some(b"TLSv1.3");
    }

    /// Anything that is not a fingerprint, and any header on a connection without TLS (a
    /// client's copy): every TLS feature missing.
    #[test]
    fn tls_fingerprint_missing_or_malformed() {
        let good: &[(&str, &str)] = &[("x-edgescore-ja4", "t13d1516h2_8daaf6152771_d8a2da3f94cd"), ("x-edgescore-ja3", "e7d705a3286e19ea42f587b344ee6865")];
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'static [u8]>);
        let cases: [Case; 7] = [
            (&[(":path", "/")], Some(b"TLSv1.3")),
            (&[("x-edgescore-ja4", ""), ("x-edgescore-ja3", "")], Some(b"TLSv1.3")),
            (&[("x-edgescore-ja4", "-"), ("x-edgescore-ja3", "-")], Some(b"TLSv1.3")),
            (&[("x-edgescore-ja4", "t13d1516h2_8daaf6152771_d8a2da3f94c"), ("x-edgescore-ja3", "E7D705A3286E19EA42F587B344EE6865")], Some(b"TLSv1.3")),
            (&[(":path", "/")], None),
            (good, None),
            (good, Some(b"")),
        ];
        for (hs, tls) in cases {
            let (_, v) = extract(&TLS, hs, |r| r.tls_version = tls);
            assert_eq!(v.hash, [None, None, None, None, None, None], "{hs:?} {tls:?}");
            assert!(v.numeric[2].is_nan() && v.numeric[3].is_nan(), "{hs:?} {tls:?}");
        }
        // The JA3 stands on its own: a bad JA4 does not hide a good JA3.
        let (_, v) = extract(&TLS, &[("x-edgescore-ja4", "junk"), ("x-edgescore-ja3", "e7d705a3286e19ea42f587b344ee6865")], over_tls);
        assert_eq!((v.hash[0], v.hash[5].is_some()), (None, true));
    }

    fn ua_table(entries: &[(&str, &str)]) -> UaTable {
        let mut e: Vec<_> = entries.iter().map(|(f, p)| crate::artifact::layout::UaFingerprint::new(f.as_bytes(), p.as_bytes()).unwrap()).collect();
        e.sort();
        crate::features::ua_fingerprints::check(&e).unwrap();
        UaTable::new(&e)
    }

    const CHROME_UA: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/143.0.0.0 Safari/537.36";
    const CHROME_JA4: &str = "t13d1516h2_8daaf6152771_d8a2da3f94cd";
    const CURL_JA4: &str = "t13i3111h2_e8f1e7e78f70_b26ce05bbdd6";

    /// `tls_ua_consistent` over `table` for a request with this user-agent and JA4.
    fn consistency(table: Option<&UaTable>, ua: Option<&str>, ja4: &str, tls: Option<&'static [u8]>) -> f32 {
        let mut plan = FeaturePlan::default();
        let i = plan.add_reading(Feature::TlsUaConsistent, table);
        let mut hs = vec![(":path", "/"), ("x-edgescore-ja4", ja4)];
        hs.extend(ua.map(|u| ("user-agent", u)));
        let buf = HeaderMap::encode(&hs);
        let mut req = Request::new(HeaderMap::parse(&buf).unwrap());
        req.tls_version = tls;
        let mut out = plan.values();
        plan.extract(&req, &HashKey::new(b"0123456789abcdef"), &mut out);
        assert_eq!(plan.properties(), Properties { tls_version: true, ..Properties::default() });
        out.numeric[i]
    }

    #[test]
    fn tls_ua_consistent_by_the_table() {
        let t = ua_table(&[("chrome", "t13d1516h2_8daaf6152771_*"), ("curl", CURL_JA4), ("firefox", "t13d1717h2_*")]);
        let tls = Some(&b"TLSv1.3"[..]);
        assert_eq!(consistency(Some(&t), Some(CHROME_UA), CHROME_JA4, tls), 1.0, "a prefix entry");
        assert_eq!(consistency(Some(&t), Some("curl/8.5.0"), CURL_JA4, tls), 1.0, "a whole JA4");
        assert_eq!(consistency(Some(&t), Some(CHROME_UA), CURL_JA4, tls), 0.0, "curl's handshake claiming Chrome");
        assert_eq!(consistency(Some(&t), Some("curl/8.5.0"), CHROME_JA4, tls), 0.0);
        let missing = [
            consistency(Some(&t), Some(CHROME_UA), CHROME_JA4, None),
            consistency(Some(&t), Some(CHROME_UA), CHROME_JA4, Some(b"")),
            consistency(Some(&t), Some(CHROME_UA), "t13d1516h2_8daaf6152771_junk", tls),
            consistency(Some(&t), Some(CHROME_UA), "", tls),
            consistency(Some(&t), None, CHROME_JA4, tls),
            consistency(Some(&t), Some("python-requests/2.32"), CHROME_JA4, tls),
            consistency(None, Some(CHROME_UA), CHROME_JA4, tls),
        ];
        assert!(missing.iter().all(|v| v.is_nan()), "plain HTTP, a bad or no JA4, no user-agent, an unlisted family, no table: {missing:?}");
    }

    /// Each distinct table is a feature of its own; equal tables share one.
    #[test]
    fn each_table_answers_for_itself() {
        let old = ua_table(&[("chrome", "t13d1516h2_8daaf6152771_d8a2da3f94cd")]);
        let new = ua_table(&[("chrome", "t13d1516h2_8daaf6152771_*")]);
        let mut plan = FeaturePlan::default();
        let a = plan.add_reading(Feature::TlsUaConsistent, Some(&old));
        let b = plan.add_reading(Feature::TlsUaConsistent, Some(&new));
        assert_eq!(plan.add_reading(Feature::TlsUaConsistent, Some(&old.clone())), a);
        assert_ne!(a, b);
        assert_eq!((plan.ua_table(a), plan.ua_table(b)), (Some(&old), Some(&new)));
        let buf = HeaderMap::encode(&[("user-agent", CHROME_UA), ("x-edgescore-ja4", "t13d1516h2_8daaf6152771_e5627efa2ab1")]);
        let mut req = Request::new(HeaderMap::parse(&buf).unwrap());
        over_tls(&mut req);
        let mut out = plan.values();
        plan.extract(&req, &HashKey::new(b"0123456789abcdef"), &mut out);
        assert_eq!((out.numeric[a], out.numeric[b]), (0.0, 1.0), "new signature algorithms: only the prefix table knows them");
    }
}

