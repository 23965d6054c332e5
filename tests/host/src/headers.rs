//! Header maps (ordered multimaps of raw bytes) and the proxy-wasm pair serialisation.

use std::fmt;

/// An ordered multimap of raw header bytes, as Envoy's `HeaderMapImpl` holds it: keys are stored
/// lower-cased (Envoy's codecs lower-case names; every host call goes through
/// `Http::LowerCaseString`), values are raw bytes (may be invalid UTF-8, huge, or empty).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HeaderMap(pub Vec<(Vec<u8>, Vec<u8>)>);

impl fmt::Debug for HeaderMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, v)| {
                let v = if v.len() > 200 {
                    format!("<{} bytes>", v.len())
                } else {
                    String::from_utf8_lossy(v).into_owned()
                };
                (String::from_utf8_lossy(k).into_owned(), v)
            }))
            .finish()
    }
}

impl HeaderMap {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.0.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    /// The values for `name` (compared lower-cased), in order.
    fn values(&self, name: impl AsRef<[u8]>) -> impl Iterator<Item = &[u8]> {
        let name = name.as_ref().to_ascii_lowercase();
        self.0
            .iter()
            .filter(move |(k, _)| *k == name)
            .map(|(_, v)| v.as_slice())
    }

    /// First value for `name`, as Envoy's `getHeaderMapValue` returns it.
    pub fn get(&self, name: impl AsRef<[u8]>) -> Option<&[u8]> {
        self.values(name).next()
    }

    /// First value for `name` as a (lossy) string.
    pub fn get_str(&self, name: impl AsRef<[u8]>) -> Option<String> {
        self.get(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    pub fn get_all(&self, name: impl AsRef<[u8]>) -> Vec<&[u8]> {
        self.values(name).collect()
    }

    pub fn contains(&self, name: impl AsRef<[u8]>) -> bool {
        self.get(name).is_some()
    }

    /// Envoy `addCopy`: appends; pseudo-headers (`:x`) are kept ahead of regular headers, as
    /// `HeaderMapImpl` does.
    pub fn add(&mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let name = name.as_ref().to_ascii_lowercase();
        let value = value.as_ref().to_vec();
        if name.first() == Some(&b':') {
            let at = self
                .0
                .iter()
                .position(|(k, _)| k.first() != Some(&b':'))
                .unwrap_or(self.0.len());
            self.0.insert(at, (name, value));
        } else {
            self.0.push((name, value));
        }
    }

    /// Envoy `remove`: drops every entry with that name.
    pub fn remove(&mut self, name: impl AsRef<[u8]>) {
        let name = name.as_ref().to_ascii_lowercase();
        self.0.retain(|(k, _)| *k != name);
    }

    /// Envoy `setCopy` (with `http_set_copy_replace_all_headers`, on by default): removes every
    /// entry with that name, then `addCopy` — so a replaced header moves to the end of the map.
    pub fn replace(&mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.remove(name.as_ref());
        self.add(name, value);
    }

    /// Envoy `HeaderMap::byteSize()`: the sum of key and value lengths. This (not the count) is
    /// what `proxy_get_header_map_size` returns.
    pub fn byte_size(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// The proxy-wasm wire format (see the SDK's `utils::serialize_map`): u32 count, then
    /// (u32 key_len, u32 value_len) per pair, then each key and each value followed by a NUL.
    pub fn serialize(&self) -> Vec<u8> {
        serialize_pairs(self.0.iter().map(|(k, v)| (k.as_slice(), v.as_slice())))
    }

    /// Builds a map from pairs as given (names lower-cased like Envoy's codecs, order kept).
    pub fn from_pairs<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        HeaderMap(
            pairs
                .into_iter()
                .map(|(k, v)| (k.as_ref().to_ascii_lowercase(), v.as_ref().to_vec()))
                .collect(),
        )
    }
}

pub fn serialize_pairs<'a>(pairs: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone) -> Vec<u8> {
    let n = pairs.clone().count();
    let size = 4 + pairs
        .clone()
        .map(|(k, v)| 8 + k.len() + v.len() + 2)
        .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(n as u32).to_le_bytes());
    for (k, v) in pairs.clone() {
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (k, v) in pairs {
        out.extend_from_slice(k);
        out.push(0);
        out.extend_from_slice(v);
        out.push(0);
    }
    out
}

/// Parses the wire format the way proxy-wasm-cpp-host's `PairsUtil::toPairs` does: a buffer
/// shorter than 4 bytes or whose header overruns it yields no pairs (no error). Returns `None`
/// only if the string data overruns the buffer (cpp-host would read out of bounds).
pub fn deserialize_pairs(buf: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    if buf.len() < 4 {
        return Some(Vec::new());
    }
    let n = u32::from_le_bytes(buf[0..4].try_into().unwrap()) as usize;
    if 4 + n.checked_mul(8)? > buf.len() {
        return Some(Vec::new());
    }
    let mut sizes = Vec::with_capacity(n);
    for i in 0..n {
        let s = 4 + i * 8;
        let k = u32::from_le_bytes(buf[s..s + 4].try_into().unwrap()) as usize;
        let v = u32::from_le_bytes(buf[s + 4..s + 8].try_into().unwrap()) as usize;
        sizes.push((k, v));
    }
    let mut p = 4 + n * 8;
    let mut out = Vec::with_capacity(n);
    for (k, v) in sizes {
        let key = buf.get(p..p.checked_add(k)?)?.to_vec();
        p += k + 1;
        let value = buf.get(p..p.checked_add(v)?)?.to_vec();
        p += v + 1;
        out.push((key, value));
    }
    Some(out)
}

/// Anything a test may pass as headers: `&[(&str, &str)]`, arrays of `(&str, &str)`,
/// `&[(&[u8], &[u8])]`, `Vec<(Vec<u8>, Vec<u8>)>`, `Vec<(String, String)>`, or a [`HeaderMap`].
/// Names are lower-cased (Envoy's codecs do that before any filter sees them).
pub trait IntoHeaders {
    fn into_headers(self) -> HeaderMap;
}

impl IntoHeaders for HeaderMap {
    fn into_headers(self) -> HeaderMap {
        HeaderMap::from_pairs(self.0)
    }
}
impl IntoHeaders for &HeaderMap {
    fn into_headers(self) -> HeaderMap {
        HeaderMap::from_pairs(self.0.iter().map(|(k, v)| (k, v)))
    }
}
impl<K: AsRef<[u8]>, V: AsRef<[u8]>> IntoHeaders for &[(K, V)] {
    fn into_headers(self) -> HeaderMap {
        HeaderMap::from_pairs(self.iter().map(|(k, v)| (k, v)))
    }
}
impl<K: AsRef<[u8]>, V: AsRef<[u8]>, const N: usize> IntoHeaders for [(K, V); N] {
    fn into_headers(self) -> HeaderMap {
        HeaderMap::from_pairs(self)
    }
}
impl<K: AsRef<[u8]>, V: AsRef<[u8]>, const N: usize> IntoHeaders for &[(K, V); N] {
    fn into_headers(self) -> HeaderMap {
        HeaderMap::from_pairs(self.iter().map(|(k, v)| (k, v)))
    }
}
impl<K: AsRef<[u8]>, V: AsRef<[u8]>> IntoHeaders for Vec<(K, V)> {
    fn into_headers(self) -> HeaderMap {
        HeaderMap::from_pairs(self)
    }
}
impl<K: AsRef<[u8]>, V: AsRef<[u8]>> IntoHeaders for &Vec<(K, V)> {
    fn into_headers(self) -> HeaderMap {
        HeaderMap::from_pairs(self.iter().map(|(k, v)| (k, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_matches_sdk_layout() {
        let m = HeaderMap::from_pairs([(":method", "GET"), (":path", "/bytes/1")]);
        let s = m.serialize();
        assert_eq!(&s[..4], &[2, 0, 0, 0]);
        assert_eq!(&s[4..12], &[7, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(&s[20..28], b":method\0");
        assert_eq!(deserialize_pairs(&s).unwrap(), m.0);
        assert_eq!(deserialize_pairs(&[]).unwrap(), vec![]);
    }

    #[test]
    fn pseudo_headers_stay_first_and_replace_moves_to_end() {
        let mut m = HeaderMap::from_pairs([(":path", "/"), ("a", "1"), ("b", "2")]);
        m.add(":method", "GET");
        m.replace("a", "3");
        let keys: Vec<_> = m
            .iter()
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect();
        assert_eq!(keys, [":path", ":method", "b", "a"]);
        assert_eq!(m.byte_size(), 5 + 1 + 7 + 3 + 1 + 1 + 1 + 1);
    }
}
