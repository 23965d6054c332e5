//! Which client a request belongs to (the configured [`ClientKey`], keyed-hashed so that no
//! client can aim at another's entry) and the worker's [`Table`] it is counted in. A worker
//! keeps its `Clients` outside the scorer: registry swaps and configuration changes that keep
//! the `velocity` section hand it over ([`Clients::carry`]) with every count in it.

use super::{Table, Velocity};
use crate::features::ja4::JA4_HEADER;
use crate::config::{ClientKey, PluginConfig, VelocityConfig};
use crate::features::hash::HashKey;
use crate::request::Request;

pub struct Clients {
    config: VelocityConfig,
    hash: HashKey,
    /// `hash` of a fixed string: tells a changed hash key without keeping the key.
    key_check: u64,
    table: Table,
    /// Evictions already handed to the metric.
    evictions_counted: u64,
}

// Each key kind's tag, mixed into its clients' fingerprints: an address stays apart from a
// header or cookie value that spells the same bytes.
const ADDRESS: u64 = 0x6164_6472_6573_7300;
const ADDRESS_JA4: u64 = 0x6164_6472_6a61_3400;
const HEADER: u64 = 0x6865_6164_6572_0000;
const COOKIE: u64 = 0x636f_6f6b_6965_0000;

impl Clients {
    pub fn new(config: &VelocityConfig, hash_key: &[u8]) -> Clients {
        let hash = HashKey::new(hash_key);
        let key_check = hash.hash(b"edgescore velocity");
        Clients { config: config.clone(), hash, key_check, table: Table::new(config.capacity as usize), evictions_counted: 0 }
    }

    /// The clients `cfg` counts: `old` itself, counts and all, when its `velocity` section and
    /// hash key are unchanged; a new table when they changed; none without the section.
    pub fn carry(old: Option<Clients>, cfg: &PluginConfig) -> Option<Clients> {
        let v = cfg.velocity.as_ref()?;
        match old {
            Some(old) if old.config == *v && old.key_check == HashKey::new(cfg.hash_key.as_bytes()).hash(b"edgescore velocity") => Some(old),
            _ => Some(Clients::new(v, cfg.hash_key.as_bytes())),
        }
    }

    /// Counts `req` at second `now_s`: its client's fingerprint (for [`Clients::answer`]) and
    /// velocity, this request included; `None` when the request carries no key (no address,
    /// header or cookie), which leaves the features missing. No allocation.
    pub fn request(&mut self, req: &Request<'_>, now_s: u32) -> Option<(u64, Velocity)> {
        let client = self.client(req)?;
        let path = req.headers.iter().find(|(n, _)| *n == b":path").map_or(&b""[..], |(_, p)| p.split(|&b| b == b'?').next().unwrap_or(p));
        Some((client, self.table.request(client, self.hash.hash(path), now_s)))
    }

    /// Counts the status of the answer to a request of `client` (from [`Clients::request`]).
    pub fn answer(&mut self, client: u64, status: u16, now_s: u32) {
        self.table.answer(client, status, now_s);
    }

    /// Clients evicted to make room since the last call (the evictions metric's increment).
    pub fn take_evictions(&mut self) -> u64 {
        let new = self.table.evictions() - self.evictions_counted;
        self.evictions_counted = self.table.evictions();
        new
    }

    pub fn key(&self) -> &ClientKey {
        &self.config.key
    }

    /// The fingerprint of `req`'s client: what [`Clients::answer`] takes. A value alone is
    /// hashed whole, its kind's tag mixed in after (one call, no parts buffer: this runs on every
    /// request); an address and a JA4 as parts.
    pub fn client(&self, req: &Request<'_>) -> Option<u64> {
        match &self.config.key {
            ClientKey::Address => Some(self.hash.hash(without_port(req.source_address?)) ^ ADDRESS),
            ClientKey::AddressJa4 => {
                let address = without_port(req.source_address?);
                // Without TLS the header can only be a client's (features::ja4): not even looked up.
                let tls = req.tls_version.is_some_and(|v| !v.is_empty());
                match if tls { req.headers.get(JA4_HEADER.as_bytes()) } else { None } {
                    Some(ja4) => {
                        let mut h = self.hash.hasher();
                        h.update(address);
                        h.update(b"\n");
                        h.update(ja4);
                        Some(h.digest() ^ ADDRESS_JA4)
                    }
                    _ => Some(self.hash.hash(address) ^ ADDRESS),
                }
            }
            ClientKey::Header(name) => Some(self.hash.hash(req.headers.get(name)?) ^ HEADER),
            ClientKey::Cookie(name) => Some(self.hash.hash(cookie(req, name)?) ^ COOKIE),
        }
    }
}

/// `ip:port` → `ip`, `[v6]:port` → `v6`; anything else (a bare IPv6 address, a path) whole.
fn without_port(address: &[u8]) -> &[u8] {
    if let Some(rest) = address.strip_prefix(b"[") {
        return rest.iter().position(|&b| b == b']').map_or(address, |i| &rest[..i]);
    }
    match address.iter().position(|&b| b == b':') {
        Some(i) if !address[i + 1..].contains(&b':') => &address[..i],
        _ => address,
    }
}

/// The value of the first cookie `name` over the request's cookie headers.
fn cookie<'a>(req: &Request<'a>, name: &[u8]) -> Option<&'a [u8]> {
    req.headers.iter().filter(|(n, _)| *n == b"cookie").flat_map(|(_, v)| v.split(|&b| b == b';')).find_map(|pair| {
        let pair = pair.trim_ascii();
        let (n, v) = pair.split_at(pair.iter().position(|&b| b == b'=')?);
        (n.trim_ascii() == name).then(|| v[1..].trim_ascii())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::HeaderMap;

    fn config(key: &str) -> PluginConfig {
        let json = format!(r#"{{"hash_key":"0123456789abcdef","models":[{{"artifact":"","threshold":0.5}}],"velocity":{{"key":"{key}","capacity":64}}}}"#);
        PluginConfig::parse(json.as_bytes()).unwrap()
    }

    fn client(key: &str, headers: &[(&str, &str)], address: Option<&'static [u8]>) -> Option<u64> {
        client_over(key, headers, address, Some(b"TLSv1.3"))
    }

    fn client_over(key: &str, headers: &[(&str, &str)], address: Option<&'static [u8]>, tls: Option<&'static [u8]>) -> Option<u64> {
        let buf = HeaderMap::encode(headers);
        let mut req = Request::new(HeaderMap::parse(&buf).unwrap());
        req.source_address = address;
        req.tls_version = tls;
        Clients::carry(None, &config(key)).unwrap().client(&req)
    }

    #[test]
    fn keys_read_what_the_configuration_names() {
        let a = client("address", &[], Some(b"192.0.2.1:5000"));
        assert!(a.is_some());
        assert_eq!(a, client("address", &[("x", "y")], Some(b"192.0.2.1:6000")), "the port is not the client");
        assert_ne!(a, client("address", &[], Some(b"192.0.2.2:5000")));
        assert_eq!(client("address", &[], None), None);
        assert_eq!(client("address", &[], Some(b"[2001:db8::1]:443")), client("address", &[], Some(b"[2001:db8::1]:80")));
        let ja4 = |v: &str| client("address+ja4", &[("x-edgescore-ja4", v)], Some(b"192.0.2.1:1"));
        assert_ne!(ja4("t13d1516h2_8daaf6152771_e5627efa2ab1"), ja4("t13d0912h2_f91f431d341e_dc02f61e4b3f"));
        assert_eq!(client("address+ja4", &[], Some(b"192.0.2.1:1")), a, "no fingerprint: the address alone");
        let plain = client_over("address+ja4", &[("x-edgescore-ja4", "t13d1516h2_8daaf6152771_e5627efa2ab1")], Some(b"192.0.2.1:1"), None);
        assert_eq!(plain, a, "without TLS a client's JA4 header is not part of its key");
        let h = client("header:x-api-key", &[("x-api-key", "k1"), ("x-api-key", "k2")], None);
        assert_eq!(h, client("header:x-api-key", &[("x-api-key", "k1")], Some(b"1.2.3.4:1")));
        assert_eq!(client("header:x-api-key", &[("x-other", "k1")], None), None);
        let c = client("cookie:sid", &[("cookie", "a=1; sid=abc"), ("cookie", "sid=zzz")], None);
        assert_eq!(c, client("cookie:sid", &[("cookie", " sid = abc ;b=2")], None));
        assert_ne!(c, client("cookie:sid", &[("cookie", "sid=abd")], None));
        assert_eq!(client("cookie:sid", &[("cookie", "sidx=1; nosid")], None), None);
        assert_ne!(client("header:sid", &[("sid", "abc")], None), c, "a header and a cookie of the same bytes are apart");
    }

    #[test]
    fn carry_keeps_the_counts_while_the_section_is_unchanged() {
        let buf = HeaderMap::encode(&[(":path", "/a?x")]);
        let mut req = Request::new(HeaderMap::parse(&buf).unwrap());
        req.source_address = Some(b"10.0.0.1:1");
        let mut c = Clients::carry(None, &config("address")).unwrap();
        c.request(&req, 100);
        let mut c = Clients::carry(Some(c), &config("address")).unwrap();
        assert_eq!(c.request(&req, 100).unwrap().1.requests_10s, 2.0);
        let mut c = Clients::carry(Some(c), &config("address+ja4")).unwrap();
        assert_eq!(c.request(&req, 100).unwrap().1.requests_10s, 1.0, "another key: a new table");
        let mut none = config("address");
        none.velocity = None;
        assert!(Clients::carry(Some(c), &none).is_none());
        assert_eq!(without_port(b"::1"), b"::1");
        assert_eq!(crate::velocity::ENTRY_BYTES, 256, "docs/configuration.md: 256 bytes per client");
        assert_eq!(without_port(b"10.0.0.1"), b"10.0.0.1");
    }
}
