//! The request as the host hands it over: header pairs in proxy-wasm's map wire format or in a
//! host's C array, read in place (bytes, never strings: header values may be any bytes), plus
//! the few connection properties features need.

use crate::signatures::{Refusal, Verified};
use crate::velocity::Velocity;

/// Why a header-map buffer from the host could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed header map from the host: {0}")]
pub struct MalformedMap(pub &'static str);

/// One header of a host's own header array, in C layout: two pointer-and-length pairs, as
/// Envoy's dynamic-modules ABI hands its request headers over. [`HeaderMap::from_c_headers`]
/// reads such an array in place.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CHeader {
    pub name: *const u8,
    pub name_len: usize,
    pub value: *const u8,
    pub value_len: usize,
}

impl CHeader {
    /// # Safety
    /// As [`HeaderMap::from_c_headers`], for `'a`.
    pub unsafe fn name_bytes<'a>(&self) -> &'a [u8] {
        c_bytes(self.name, self.name_len)
    }
    /// # Safety
    /// As [`HeaderMap::from_c_headers`], for `'a`.
    pub unsafe fn value_bytes<'a>(&self) -> &'a [u8] {
        c_bytes(self.value, self.value_len)
    }
}

/// Headers as the host hands them over, read in place: proxy-wasm's serialised map, validated
/// once (`u32 count`, `count × (u32 name_len, u32 value_len)`, then each name and value
/// followed by a NUL byte), or a host's C array of [`CHeader`]s. Envoy hands `:method`,
/// `:path`, `:authority` and `:scheme` over as pseudo-headers in the same map.
#[derive(Clone, Copy)]
pub struct HeaderMap<'a> {
    repr: Repr<'a>,
}

#[derive(Clone, Copy)]
enum Repr<'a> {
    Wire { buf: &'a [u8], count: usize },
    C(&'a [CHeader]),
}

impl<'a> HeaderMap<'a> {
    pub const EMPTY: HeaderMap<'static> = HeaderMap { repr: Repr::Wire { buf: &[0, 0, 0, 0], count: 0 } };

    /// Checks every length against the buffer so that iteration cannot go out of bounds.
    pub fn parse(buf: &'a [u8]) -> Result<HeaderMap<'a>, MalformedMap> {
        if buf.is_empty() {
            // Envoy returns an empty buffer (not a zero count) for an empty map.
            return Ok(HeaderMap { repr: Repr::Wire { buf: &[], count: 0 } });
        }
        let count = read_u32(buf, 0).ok_or(MalformedMap("shorter than its count"))? as usize;
        let sizes_end = count.checked_mul(8).and_then(|n| n.checked_add(4)).ok_or(MalformedMap("count overflows"))?;
        if sizes_end > buf.len() {
            return Err(MalformedMap("count larger than the buffer"));
        }
        let mut at = sizes_end;
        for i in 0..count {
            for len in [read_u32(buf, 4 + 8 * i), read_u32(buf, 8 + 8 * i)] {
                let len = len.ok_or(MalformedMap("truncated size table"))? as usize;
                at = at.checked_add(len).and_then(|n| n.checked_add(1)).ok_or(MalformedMap("sizes overflow"))?;
                if at > buf.len() {
                    return Err(MalformedMap("entry runs past the buffer"));
                }
            }
        }
        Ok(HeaderMap { repr: Repr::Wire { buf, count } })
    }

    /// A host's header array, read in place (no copy).
    ///
    /// # Safety
    /// Every `CHeader` points at `name_len` and `value_len` readable bytes (or is null with
    /// length 0) that stay valid and unchanged for `'a`.
    pub unsafe fn from_c_headers(headers: &'a [CHeader]) -> HeaderMap<'a> {
        HeaderMap { repr: Repr::C(headers) }
    }

    pub fn len(&self) -> usize {
        match self.repr {
            Repr::Wire { count, .. } => count,
            Repr::C(h) => h.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(name, value)` pairs in the order the client sent them.
    pub fn iter(&self) -> HeaderIter<'a> {
        HeaderIter { repr: self.repr, index: 0, at: 4 + 8 * self.len() }
    }

    /// The first value of `name` (names are compared as given; Envoy lower-cases them).
    pub fn get(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Serialises pairs into the wire format (the host side; used natively by tests and the CLI).
    pub fn encode<N: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: &[(N, V)]) -> Vec<u8> {
        let mut out = Vec::new();
        HeaderMap::encode_into(&mut out, pairs);
        out
    }

    /// [`HeaderMap::encode`] into a reused buffer (cleared first).
    pub fn encode_into<N: AsRef<[u8]>, V: AsRef<[u8]>>(out: &mut Vec<u8>, pairs: &[(N, V)]) {
        HeaderMap::encode_iter_into(out, pairs.iter().map(|(n, v)| (n.as_ref(), v.as_ref())));
    }

    /// [`HeaderMap::encode_into`] from any re-iterable pairs (a host's own header array). No
    /// allocation once `out` has grown to the largest map it has held.
    pub fn encode_iter_into<'p>(out: &mut Vec<u8>, pairs: impl Iterator<Item = (&'p [u8], &'p [u8])> + Clone) {
        out.clear();
        out.extend_from_slice(&(pairs.clone().count() as u32).to_le_bytes());
        for (n, v) in pairs.clone() {
            out.extend_from_slice(&(n.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        }
        for (n, v) in pairs {
            out.extend_from_slice(n);
            out.push(0);
            out.extend_from_slice(v);
            out.push(0);
        }
    }
}

fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub struct HeaderIter<'a> {
    repr: Repr<'a>,
    index: usize,
    /// Where the next name starts (the wire format).
    at: usize,
}

/// # Safety
/// As [`HeaderMap::from_c_headers`]: `ptr` is null with `len` 0, or `len` readable bytes.
unsafe fn c_bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        core::slice::from_raw_parts(ptr, len)
    }
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        match self.repr {
            Repr::C(headers) => {
                let h = headers.get(self.index)?;
                self.index += 1;
                // SAFETY: `from_c_headers`' contract.
                Some(unsafe { (c_bytes(h.name, h.name_len), c_bytes(h.value, h.value_len)) })
            }
            Repr::Wire { buf, count } => {
                if self.index >= count {
                    return None;
                }
                // `parse` checked every size and offset, so these reads stay in bounds; `get`
                // keeps a bug here from becoming a panic in the host.
                let name_len = read_u32(buf, 4 + 8 * self.index)? as usize;
                let value_len = read_u32(buf, 8 + 8 * self.index)? as usize;
                let name = buf.get(self.at..self.at + name_len)?;
                self.at += name_len + 1;
                let value = buf.get(self.at..self.at + value_len)?;
                self.at += value_len + 1;
                self.index += 1;
                Some((name, value))
            }
        }
    }
}

/// A connection property features may read, as Envoy exposes it. This is the one list: the
/// glue reads them by [`Property::path`], recorded requests name them by [`Property::name`],
/// and [`Request`] and the connection cache keep them in [`Property::ALL`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Property {
    /// `request.protocol`: `HTTP/1.0`, `HTTP/1.1`, `HTTP/2`, `HTTP/3`.
    Protocol,
    /// `connection.tls_version`: `TLSv1.2`, `TLSv1.3`, …; empty or absent for plaintext.
    TlsVersion,
    /// `connection.requested_server_name` (SNI).
    Sni,
    /// `source.address`: `ip:port` or `[ipv6]:port`.
    SourceAddress,
}

impl Property {
    pub const ALL: [Property; 4] = [Property::Protocol, Property::TlsVersion, Property::Sni, Property::SourceAddress];

    /// Envoy's attribute name (`request.protocol`).
    pub fn name(self) -> &'static str {
        match self {
            Property::Protocol => "request.protocol",
            Property::TlsVersion => "connection.tls_version",
            Property::Sni => "connection.requested_server_name",
            Property::SourceAddress => "source.address",
        }
    }

    /// The path `proxy_get_property` takes: the name's segments separated by NUL bytes.
    pub fn path(self) -> &'static [u8] {
        match self {
            Property::Protocol => b"request\0protocol",
            Property::TlsVersion => b"connection\0tls_version",
            Property::Sni => b"connection\0requested_server_name",
            Property::SourceAddress => b"source\0address",
        }
    }

    pub fn from_name(name: &[u8]) -> Option<Property> {
        Property::ALL.into_iter().find(|p| p.name().as_bytes() == name)
    }
}

/// What the features read: the request headers and the connection properties Envoy exposes
/// (`None` when the host has no value, e.g. no TLS).
#[derive(Clone, Copy)]
pub struct Request<'a> {
    pub headers: HeaderMap<'a>,
    /// [`Property::Protocol`].
    pub protocol: Option<&'a [u8]>,
    /// [`Property::TlsVersion`].
    pub tls_version: Option<&'a [u8]>,
    /// [`Property::Sni`].
    pub sni: Option<&'a [u8]>,
    /// [`Property::SourceAddress`].
    pub source_address: Option<&'a [u8]>,
    /// The client's counts, this request included (`crate::velocity::Clients`), when a model
    /// reads them and the request has a client key.
    pub velocity: Option<Velocity>,
    /// The request's HTTP message signature, when `verified_bots` is configured and the request
    /// carries one (`crate::signatures::Bots::check`): the verified agent or why not.
    pub signature: Option<Result<Verified<'a>, Refusal>>,
}

impl<'a> Request<'a> {
    pub fn new(headers: HeaderMap<'a>) -> Request<'a> {
        Request { headers, protocol: None, tls_version: None, sni: None, source_address: None, velocity: None, signature: None }
    }

    /// With the properties in [`Property::ALL`] order.
    pub fn with_properties(headers: HeaderMap<'a>, properties: [Option<&'a [u8]>; 4]) -> Request<'a> {
        let [protocol, tls_version, sni, source_address] = properties;
        Request { headers, protocol, tls_version, sni, source_address, velocity: None, signature: None }
    }
}

/// A request held in the form the filter receives it: the header map in proxy-wasm's wire
/// format and the connection properties as bytes (benches and tests replay these).
#[derive(Clone, Debug, Default)]
pub struct OwnedRequest {
    pub headers: Vec<u8>,
    /// In [`Property::ALL`] order.
    pub properties: [Option<Vec<u8>>; 4],
}

impl OwnedRequest {
    /// From a header map and a map of properties (both in the proxy-wasm map format; property
    /// names as [`Property::name`] spells them, others ignored). Both maps are validated here.
    pub fn decode(headers: &[u8], properties: &[u8]) -> Result<OwnedRequest, MalformedMap> {
        HeaderMap::parse(headers)?;
        let mut out = OwnedRequest { headers: headers.to_vec(), properties: Default::default() };
        for (name, value) in HeaderMap::parse(properties)?.iter() {
            if let Some(p) = Property::from_name(name) {
                out.properties[p as usize] = Some(value.to_vec());
            }
        }
        Ok(out)
    }

    /// The borrowed view the scorer reads; parses the header map (part of the filter's work).
    pub fn request(&self) -> Result<Request<'_>, MalformedMap> {
        Ok(Request::with_properties(HeaderMap::parse(&self.headers)?, self.properties.each_ref().map(|p| p.as_deref())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_binary_values() {
        let pairs: Vec<(&[u8], &[u8])> = vec![(b":path", b"/a?b=1"), (b"x-bin", b"\xff\x00\xfe"), (b"empty", b"")];
        let buf = HeaderMap::encode(&pairs);
        let map = HeaderMap::parse(&buf).unwrap();
        assert_eq!(map.iter().collect::<Vec<_>>(), pairs);
        assert_eq!(map.get(b"x-bin"), Some(&b"\xff\x00\xfe"[..]));
    }

    #[test]
    fn a_c_header_array_reads_as_the_wire_format_does() {
        let pairs: Vec<(&[u8], &[u8])> = vec![(b":path", b"/a?b=1"), (b"x-bin", b"\xff\x00\xfe"), (b"empty", b"")];
        let c: Vec<CHeader> = pairs
            .iter()
            .map(|(n, v)| CHeader { name: n.as_ptr(), name_len: n.len(), value: if v.is_empty() { core::ptr::null() } else { v.as_ptr() }, value_len: v.len() })
            .collect();
        // SAFETY: every pointer is into `pairs`, alive for the test.
        let map = unsafe { HeaderMap::from_c_headers(&c) };
        let buf = HeaderMap::encode(&pairs);
        let wire = HeaderMap::parse(&buf).unwrap();
        assert_eq!(map.iter().collect::<Vec<_>>(), wire.iter().collect::<Vec<_>>());
        assert_eq!((map.len(), map.get(b"x-bin")), (3, Some(&b"\xff\x00\xfe"[..])));
        let mut a = [0f32; 8];
        let mut b = [0f32; 8];
        let mut schema = crate::features::FeatureSchema::new(b"0123456789abcdef");
        for name in ["header_count", "header_bytes", "path_length", "query_param_count"] {
            schema.slot(name, 0).unwrap();
        }
        schema.compute(&Request::new(map), &mut a);
        schema.compute(&Request::new(wire), &mut b);
        assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
    }

    #[test]
    fn owned_request_keeps_known_properties_and_refuses_malformed_maps() {
        let headers = HeaderMap::encode(&[(":path", "/a"), ("user-agent", "curl/8")]);
        let props = HeaderMap::encode(&[("request.protocol", "HTTP/2"), ("source.address", "10.0.0.1:5"), ("other", "x")]);
        let r = OwnedRequest::decode(&headers, &props).unwrap();
        let req = r.request().unwrap();
        assert_eq!(req.headers.get(b"user-agent"), Some(&b"curl/8"[..]));
        assert_eq!(req.protocol, Some(&b"HTTP/2"[..]));
        assert_eq!((req.tls_version, req.sni), (None, None));
        assert_eq!(req.source_address, Some(&b"10.0.0.1:5"[..]));
        assert!(OwnedRequest::decode(&headers[..headers.len() - 1], &props).is_err());
        assert!(OwnedRequest::decode(&headers, &[1, 0, 0, 0]).is_err());
    }

    #[test]
    fn property_paths_are_names_with_nul_separators() {
        for p in Property::ALL {
            assert_eq!(p.path(), p.name().replace('.', "\0").as_bytes());
            assert_eq!(Property::from_name(p.name().as_bytes()), Some(p));
        }
    }

    #[test]
    fn refuses_truncated_and_oversized() {
        let buf = HeaderMap::encode(&[(b"a".as_slice(), b"bc".as_slice())]);
        for cut in 1..buf.len() {
            assert!(HeaderMap::parse(&buf[..cut]).is_err(), "cut {cut}");
        }
        assert!(HeaderMap::parse(&[0xff, 0xff, 0xff, 0xff]).is_err());
        assert_eq!(HeaderMap::parse(&[]).unwrap().len(), 0);
    }
}
