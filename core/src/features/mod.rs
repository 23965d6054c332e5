//! The feature catalogue: every request feature the filter can compute, by the stable name a
//! model's feature schema refers to. A model trained on the filter's feature log uses these
//! names; the filter computes exactly the features its configured models declare, once per
//! request, and shares them between models.

mod extract;
pub mod hash;
pub mod ja4;
mod schema;
pub mod ua;
pub mod ua_fingerprints;

pub use extract::{FeaturePlan, FeatureValues, Properties, VelocityNeeds};
pub use schema::{FeatureSchema, SchemaError, Slot, MAX_BUCKETS};

/// Whether the filter produces a number or a hashed category for a feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Numeric,
    /// A keyed hash of a byte string, reduced to the bucket count the model declares.
    Categorical,
}

/// One catalogue entry. Names with a `:<header>` suffix take a header name (lower case), e.g.
/// `header_present:x-requested-with`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Feature {
    HeaderCount,
    HeaderBytes,
    PathLength,
    PathDepth,
    QueryLength,
    QueryParamCount,
    CookieCount,
    CookieLength,
    AcceptLanguageCount,
    ContentLength,
    UaLength,
    HttpProtocol,
    TlsVersion,
    SniPresent,
    HostIsIp,
    HeaderPresent(Vec<u8>),
    HeaderLength(Vec<u8>),
    HeaderOccurrences(Vec<u8>),
    Method,
    UserAgent,
    UaFamily,
    PathPrefix,
    HeaderOrder,
    SourcePrefix,
    HeaderValue(Vec<u8>),
    ClientRequests10s,
    ClientRequests60s,
    ClientPaths60s,
    Client4xxShare60s,
    Client403Share60s,
    TlsJa4,
    TlsJa4A,
    TlsJa4Ciphers,
    TlsJa4Extensions,
    TlsJa4Alpn,
    TlsJa3,
    TlsUaConsistent,
    VerifiedBot,
    VerifiedBotAgent,
}

/// `(name, kind, meaning)` for every entry, in documentation order. `docs/configuration.md`
/// and `edgescore features --list` print this table.
pub const CATALOGUE: &[(&str, Kind, &str)] = &[
    ("header_count", Kind::Numeric, "number of request headers, pseudo-headers (:method, :path, …) and the fingerprint headers Envoy writes (x-edgescore-ja4, -ja3) excluded"),
    ("header_bytes", Kind::Numeric, "total bytes of header names and values, pseudo-headers and fingerprint headers excluded"),
    ("path_length", Kind::Numeric, "bytes of the path before `?` (missing if there is no :path)"),
    ("path_depth", Kind::Numeric, "non-empty `/`-separated path segments"),
    ("query_length", Kind::Numeric, "bytes after the first `?` (0 without a query)"),
    ("query_param_count", Kind::Numeric, "non-empty `&`-separated query parameters"),
    ("cookie_count", Kind::Numeric, "non-empty `;`-separated cookies over all cookie headers"),
    ("cookie_length", Kind::Numeric, "bytes of all cookie header values"),
    ("accept_language_count", Kind::Numeric, "non-empty `,`-separated accept-language entries"),
    ("content_length", Kind::Numeric, "the content-length header as a number (missing if absent or not a number)"),
    ("ua_length", Kind::Numeric, "bytes of the user-agent value (0 if absent)"),
    ("http_protocol", Kind::Numeric, "request.protocol: 1.0, 1.1, 2, 3 (missing if unknown)"),
    ("tls_version", Kind::Numeric, "connection.tls_version: 1.0–1.3, 0 for plaintext (missing if unknown)"),
    ("sni_present", Kind::Numeric, "1 if the TLS client sent SNI, else 0"),
    ("host_is_ip", Kind::Numeric, "1 if :authority is an IP literal, else 0 (missing without :authority)"),
    ("header_present:<name>", Kind::Numeric, "1 if the named header is present, else 0"),
    ("header_length:<name>", Kind::Numeric, "bytes of all values of the named header (0 if absent)"),
    ("header_occurrences:<name>", Kind::Numeric, "how many times the named header occurs"),
    ("method", Kind::Categorical, "the :method value"),
    ("user_agent", Kind::Categorical, "the raw user-agent value (missing if absent)"),
    ("ua_family", Kind::Categorical, "the user-agent's product family (chrome, firefox, curl, python-requests, …)"),
    ("path_prefix", Kind::Categorical, "the first path segment with its slash, e.g. `/api`"),
    ("header_order", Kind::Categorical, "the sequence of header names as sent, pseudo-headers and fingerprint headers excluded"),
    ("source_prefix", Kind::Categorical, "source.address truncated to /24 (IPv4) or /48 (IPv6)"),
    ("header_value:<name>", Kind::Categorical, "the first value of the named header, e.g. a country or ASN set by an earlier hop"),
    ("client_requests_10s", Kind::Numeric, "the client's requests in the last 9 to 10 s, this one included (`velocity` section; missing without a client key)"),
    ("client_requests_60s", Kind::Numeric, "the client's requests in the last 59 to 60 s, this one included"),
    ("client_paths_60s", Kind::Numeric, "distinct paths the client asked for in the last 50 to 60 s (estimated, at most 266)"),
    ("client_4xx_share_60s", Kind::Numeric, "the share of the client's requests of the last 50 to 60 s answered 4xx, 0 to 1"),
    ("client_403_share_60s", Kind::Numeric, "the share of the client's requests of the last 50 to 60 s answered 403, 0 to 1"),
    ("tls_ja4", Kind::Categorical, "the connection's JA4 TLS client fingerprint, whole (missing on plain HTTP)"),
    ("tls_ja4_a", Kind::Categorical, "the JA4's `a` part: transport, TLS version, SNI, cipher and extension counts, ALPN (e.g. `t13d1516h2`)"),
    ("tls_ja4_ciphers", Kind::Numeric, "the JA4's cipher suite count, GREASE excluded, capped at 99 (missing on plain HTTP)"),
    ("tls_ja4_extensions", Kind::Numeric, "the JA4's extension count, GREASE excluded, capped at 99 (missing on plain HTTP)"),
    ("tls_ja4_alpn", Kind::Categorical, "the JA4's ALPN: first and last characters of the first value (`h2`, `h1`; `00` for none)"),
    ("tls_ja3", Kind::Categorical, "the connection's JA3 TLS client fingerprint (an MD5; missing on plain HTTP)"),
    ("tls_ua_consistent", Kind::Numeric, "1 if the JA4 is one the user-agent's family presents by the model's table (`compile --ua-fingerprints`), 0 if that family's entries do not match; missing on plain HTTP, without a user-agent, or for a family the table does not list"),
    ("verified_bot", Kind::Numeric, "1 if the request's HTTP message signature verified against a trusted directory, 0 if it was refused (`verified_bots` section; missing when unsigned)"),
    ("verified_bot_agent", Kind::Categorical, "the verified agent: the name of the directory whose key signed the request (missing unless verified)"),
];

impl Feature {
    /// Parses a catalogue name; `None` if the filter cannot compute it.
    pub fn parse(name: &str) -> Option<Feature> {
        if let Some((prefix, header)) = name.split_once(':') {
            // HTTP token characters, lower case (Envoy lower-cases header names).
            let token = |b: u8| b.is_ascii_digit() || b.is_ascii_lowercase() || b"!#$%&'*+-.^_`|~".contains(&b);
            let valid = !header.is_empty() && header.bytes().all(token);
            if !valid {
                return None;
            }
            let h = header.as_bytes().to_vec();
            return match prefix {
                "header_present" => Some(Feature::HeaderPresent(h)),
                "header_length" => Some(Feature::HeaderLength(h)),
                "header_occurrences" => Some(Feature::HeaderOccurrences(h)),
                "header_value" => Some(Feature::HeaderValue(h)),
                _ => None,
            };
        }
        Some(match name {
            "header_count" => Feature::HeaderCount,
            "header_bytes" => Feature::HeaderBytes,
            "path_length" => Feature::PathLength,
            "path_depth" => Feature::PathDepth,
            "query_length" => Feature::QueryLength,
            "query_param_count" => Feature::QueryParamCount,
            "cookie_count" => Feature::CookieCount,
            "cookie_length" => Feature::CookieLength,
            "accept_language_count" => Feature::AcceptLanguageCount,
            "content_length" => Feature::ContentLength,
            "ua_length" => Feature::UaLength,
            "http_protocol" => Feature::HttpProtocol,
            "tls_version" => Feature::TlsVersion,
            "sni_present" => Feature::SniPresent,
            "host_is_ip" => Feature::HostIsIp,
            "method" => Feature::Method,
            "user_agent" => Feature::UserAgent,
            "ua_family" => Feature::UaFamily,
            "path_prefix" => Feature::PathPrefix,
            "header_order" => Feature::HeaderOrder,
            "source_prefix" => Feature::SourcePrefix,
            "client_requests_10s" => Feature::ClientRequests10s,
            "client_requests_60s" => Feature::ClientRequests60s,
            "client_paths_60s" => Feature::ClientPaths60s,
            "client_4xx_share_60s" => Feature::Client4xxShare60s,
            "client_403_share_60s" => Feature::Client403Share60s,
            "tls_ja4" => Feature::TlsJa4,
            "tls_ja4_a" => Feature::TlsJa4A,
            "tls_ja4_ciphers" => Feature::TlsJa4Ciphers,
            "tls_ja4_extensions" => Feature::TlsJa4Extensions,
            "tls_ja4_alpn" => Feature::TlsJa4Alpn,
            "tls_ja3" => Feature::TlsJa3,
            "tls_ua_consistent" => Feature::TlsUaConsistent,
            "verified_bot" => Feature::VerifiedBot,
            "verified_bot_agent" => Feature::VerifiedBotAgent,
            _ => return None,
        })
    }

    pub fn kind(&self) -> Kind {
        match self {
            Feature::Method
            | Feature::UserAgent
            | Feature::UaFamily
            | Feature::PathPrefix
            | Feature::HeaderOrder
            | Feature::SourcePrefix
            | Feature::HeaderValue(_)
            | Feature::TlsJa4
            | Feature::TlsJa4A
            | Feature::TlsJa4Alpn
            | Feature::TlsJa3
            | Feature::VerifiedBotAgent => Kind::Categorical,
            _ => Kind::Numeric,
        }
    }

    /// Whether the feature is one of the client's counts (`crate::velocity`).
    pub fn is_velocity(&self) -> bool {
        matches!(self, Feature::ClientRequests10s | Feature::ClientRequests60s | Feature::ClientPaths60s | Feature::Client4xxShare60s | Feature::Client403Share60s)
    }

    /// Whether the feature reads the connection's TLS fingerprints (`ja4`).
    pub fn is_fingerprint(&self) -> bool {
        matches!(self, Feature::TlsJa4 | Feature::TlsJa4A | Feature::TlsJa4Ciphers | Feature::TlsJa4Extensions | Feature::TlsJa4Alpn | Feature::TlsJa3 | Feature::TlsUaConsistent)
    }

    /// Whether the feature reads the request's signature (`crate::signatures`).
    pub fn is_signature(&self) -> bool {
        matches!(self, Feature::VerifiedBot | Feature::VerifiedBotAgent)
    }

    /// The header a parameterised feature reads.
    fn header(&self) -> Option<&[u8]> {
        match self {
            Feature::HeaderPresent(h) | Feature::HeaderLength(h) | Feature::HeaderOccurrences(h) | Feature::HeaderValue(h) => Some(h),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalogue_name_parses_with_its_kind() {
        for (name, kind, _) in CATALOGUE {
            let name = name.replace("<name>", "x-test");
            let f = Feature::parse(&name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(f.kind(), *kind, "{name}");
        }
        assert_eq!(Feature::parse("header_present:X-Upper"), None);
        assert_eq!(Feature::parse("header_present:"), None);
        assert_eq!(Feature::parse("nope"), None);
    }

    #[test]
    fn every_catalogue_entry_is_in_the_configuration_docs() {
        let docs = include_str!("../../../docs/configuration.md");
        let table = &docs[docs.find("## Features").expect("a Features section")..];
        for (name, kind, _) in CATALOGUE {
            let kind = if *kind == Kind::Numeric { "numeric" } else { "categorical" };
            assert!(table.contains(&format!("| `{name}` | {kind} |")), "docs/configuration.md#features lacks `{name}`");
        }
    }
}
