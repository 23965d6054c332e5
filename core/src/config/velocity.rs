//! The `velocity` section: whose requests the per-client features count, and how many clients
//! each worker's table holds (`crate::velocity`).

use super::ConfigError;
use serde::Deserialize;

/// Entries a worker's table may hold, at most (each [`crate::velocity::ENTRY_BYTES`] bytes).
pub const MAX_CAPACITY: u32 = 1 << 18;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VelocityConfig {
    /// `address`, `address+ja4`, `header:<name>` or `cookie:<name>`.
    pub key: ClientKey,
    /// Clients per worker (rounded up to a power of two): fixed memory, the least recently
    /// seen client of a full probe window is evicted.
    #[serde(default = "default_capacity")]
    pub capacity: u32,
}

fn default_capacity() -> u32 {
    4096
}

/// What identifies a client.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum ClientKey {
    /// The downstream address without its port.
    Address,
    /// The address and, on a TLS connection, the `x-edgescore-ja4` request header (plain HTTP or
    /// no header: the address alone).
    AddressJa4,
    /// The first value of a request header (lower case); a request without it is not counted.
    Header(Vec<u8>),
    /// The value of a cookie; a request without it is not counted.
    Cookie(Vec<u8>),
}

impl ClientKey {
    /// Whether the key reads the downstream address (a connection property).
    pub fn reads_address(&self) -> bool {
        matches!(self, ClientKey::Address | ClientKey::AddressJa4)
    }
}

impl TryFrom<String> for ClientKey {
    type Error = String;

    fn try_from(s: String) -> Result<ClientKey, String> {
        let named = |name: &str, lower: bool| {
            let token = |b: u8| b.is_ascii_digit() || b.is_ascii_alphabetic() && (!lower || b.is_ascii_lowercase()) || b"!#$%&'*+-.^_`|~".contains(&b);
            (!name.is_empty() && name.bytes().all(token)).then(|| name.as_bytes().to_vec())
        };
        match s.split_once(':') {
            None if s == "address" => Ok(ClientKey::Address),
            None if s == "address+ja4" => Ok(ClientKey::AddressJa4),
            Some(("header", h)) => named(h, true).map(ClientKey::Header).ok_or_else(|| format!("{h:?} is not a lower-case HTTP header name")),
            Some(("cookie", c)) => named(c, false).map(ClientKey::Cookie).ok_or_else(|| format!("{c:?} is not a cookie name")),
            _ => Err(format!("{s:?} is not a client key: `address`, `address+ja4`, `header:<name>` or `cookie:<name>`")),
        }
    }
}

impl VelocityConfig {
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_CAPACITY).contains(&self.capacity) {
            return Err(ConfigError::new("velocity.capacity", format!("{} is not 1..={MAX_CAPACITY}", self.capacity)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PluginConfig;

    fn parse(velocity: &str) -> Result<Option<VelocityConfig>, String> {
        let json = format!(r#"{{"hash_key":"0123456789abcdef","models":[{{"artifact":"","threshold":0.5}}],"velocity":{velocity}}}"#);
        PluginConfig::parse(json.as_bytes()).map(|c| c.velocity).map_err(|e| e.to_string())
    }

    #[test]
    fn every_key_kind() {
        let cfg = |key: ClientKey, capacity: u32| Ok(Some(VelocityConfig { key, capacity }));
        assert_eq!(parse(r#"{"key":"address"}"#), cfg(ClientKey::Address, 4096));
        assert_eq!(parse(r#"{"key":"address+ja4","capacity":100}"#), cfg(ClientKey::AddressJa4, 100));
        assert_eq!(parse(r#"{"key":"header:x-api-key"}"#), cfg(ClientKey::Header(b"x-api-key".to_vec()), 4096));
        assert_eq!(parse(r#"{"key":"cookie:SessionId"}"#), cfg(ClientKey::Cookie(b"SessionId".to_vec()), 4096));
        assert!(ClientKey::Address.reads_address() && ClientKey::AddressJa4.reads_address() && !ClientKey::Cookie(b"s".to_vec()).reads_address());
        let none = r#"{"hash_key":"0123456789abcdef","models":[{"artifact":"","threshold":0.5}]}"#;
        assert_eq!(PluginConfig::parse(none.as_bytes()).unwrap().velocity, None);
    }

    #[test]
    fn bad_values_are_refused_with_their_field() {
        let e = parse(r#"{"key":"ip"}"#).unwrap_err();
        assert!(e.starts_with("velocity.key: \"ip\" is not a client key"), "{e}");
        assert!(parse(r#"{"key":"header:X-Api-Key"}"#).unwrap_err().starts_with("velocity.key: \"X-Api-Key\" is not a lower-case HTTP header name"));
        assert!(parse(r#"{"key":"header:"}"#).unwrap_err().starts_with("velocity.key: \"\" is not"));
        assert!(parse(r#"{"key":"cookie:a;b"}"#).unwrap_err().starts_with("velocity.key: \"a;b\" is not a cookie name"));
        assert!(parse(r#"{"key":"query:id"}"#).unwrap_err().starts_with("velocity.key: \"query:id\" is not a client key"));
        assert!(parse(r#"{"key":7}"#).unwrap_err().starts_with("velocity.key: invalid type"));
        assert!(parse(r#"{"capacity":10}"#).unwrap_err().starts_with("velocity: missing field `key`"));
        assert!(parse(r#"{"key":"address","size":10}"#).unwrap_err().starts_with("velocity.size: unknown field `size`"));
        assert_eq!(parse(r#"{"key":"address","capacity":0}"#).unwrap_err(), "velocity.capacity: 0 is not 1..=262144");
        assert_eq!(parse(r#"{"key":"address","capacity":262145}"#).unwrap_err(), "velocity.capacity: 262145 is not 1..=262144");
        assert!(parse(r#"{"key":"address","capacity":-1}"#).unwrap_err().starts_with("velocity.capacity: invalid value"));
    }
}
