//! `tls_ua_consistent`: whether a TLS client's JA4 is one that the family its user agent claims
//! presents. The table (family → JA4s, or JA4 prefixes ending in `*`) is the model's own, in its
//! artifact's UA_FINGERPRINTS section (`artifact::layout::UaFingerprint`): a security team
//! updates it by compiling and publishing a model, not by changing the filter, and each model
//! reads its own table (see `FeaturePlan::add_reading`).

use super::{ja4, ua};
use crate::artifact::layout::{UaFingerprint, MAX_UA_FINGERPRINTS};

/// Whether `pattern` is a table entry's pattern: a whole JA4, or a non-empty start of one
/// followed by `*` (e.g. `t13d1516h2_8daaf6152771_*`: a browser's ciphers and extensions,
/// whatever its signature algorithms).
pub fn is_pattern(pattern: &[u8]) -> bool {
    match pattern.strip_suffix(b"*") {
        Some(prefix) => !prefix.is_empty() && ja4::is_prefix(prefix),
        None => ja4::parse(pattern).is_some(),
    }
}

/// Whether the JA4 `ja4` is one `pattern` (valid by [`is_pattern`]) stands for.
pub fn matches(pattern: &[u8], ja4: &[u8]) -> bool {
    match pattern.strip_suffix(b"*") {
        Some(prefix) => ja4.starts_with(prefix),
        None => ja4 == pattern,
    }
}

/// Checks a table as the artifact holds it; on failure, the first bad entry and why. The one
/// definition of a valid table: the artifact's validator and the compiler both ask it.
pub fn check(entries: &[UaFingerprint]) -> Result<(), (usize, &'static str)> {
    if entries.is_empty() {
        return Err((0, "HAS_UA_FINGERPRINTS without entries"));
    }
    if entries.len() > MAX_UA_FINGERPRINTS {
        return Err((MAX_UA_FINGERPRINTS, "more entries than MAX_UA_FINGERPRINTS"));
    }
    for (i, e) in entries.iter().enumerate() {
        if !e.padded_with_zeros() {
            return Err((i, "bytes after the family name or the pattern are not zero"));
        }
        if !ua::is_family(e.family()) {
            return Err((i, "not a user-agent family the filter names"));
        }
        if !is_pattern(e.pattern()) {
            return Err((i, "the pattern is neither a JA4 nor a prefix of one ending in `*`"));
        }
        if i > 0 && entries[i - 1] >= *e {
            return Err((i, "entries not sorted by family and pattern, or repeated"));
        }
    }
    Ok(())
}

/// A model's table, as the feature plan keeps it (copied from the artifact when the model is
/// admitted, so the plan does not borrow the model).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UaTable {
    entries: Vec<UaFingerprint>,
}

impl UaTable {
    /// A table of entries [`check`] accepted.
    pub fn new(entries: &[UaFingerprint]) -> UaTable {
        UaTable { entries: entries.to_vec() }
    }

    pub fn entries(&self) -> &[UaFingerprint] {
        &self.entries
    }

    /// `Some(true)` if `family` is listed and `ja4` matches one of its entries, `Some(false)`
    /// if it is listed and none matches, `None` if the table does not list it. No allocation.
    pub fn consistent(&self, family: &[u8], ja4: &[u8]) -> Option<bool> {
        let first = self.entries.partition_point(|e| e.family() < family);
        let mut own = self.entries[first..].iter().take_while(|e| e.family() == family).peekable();
        own.peek()?;
        Some(own.any(|e| matches(e.pattern(), ja4)))
    }

    /// A short digest of the table, naming its slot when models with different tables share a
    /// schema (`tls_ua_consistent#1a2b3c4d`).
    pub fn digest(&self) -> u32 {
        xxhash_rust::xxh3::xxh3_64(bytemuck::cast_slice(&self.entries)) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHROME: &[u8] = b"t13d1516h2_8daaf6152771_d8a2da3f94cd";
    const CURL: &[u8] = b"t13i3111h2_e8f1e7e78f70_b26ce05bbdd6";

    pub(crate) fn table(entries: &[(&str, &str)]) -> UaTable {
        let mut e: Vec<UaFingerprint> = entries.iter().map(|(f, p)| UaFingerprint::new(f.as_bytes(), p.as_bytes()).unwrap()).collect();
        e.sort();
        check(&e).unwrap();
        UaTable::new(&e)
    }

    #[test]
    fn patterns() {
        for ok in [&CHROME[..], b"t13d1516h2_8daaf6152771_*", b"t13d*", b"t*", b"t13d1516h2_8daaf6152771_d8a2da3f94cd*"] {
            assert!(is_pattern(ok), "{}", String::from_utf8_lossy(ok));
        }
        for bad in [&b""[..], b"*", b"t13d1516h2", b"x13d*", b"t13d1516h2_8DAAF6152771_*", b"t13d**", b"t13d1516h2_8daaf6152771_d8a2da3f94cd0*", b"t13d1516h2_8daaf6152771_d8a2da3f94c"] {
            assert!(!is_pattern(bad), "{}", String::from_utf8_lossy(bad));
        }
        assert!(matches(b"t13d1516h2_8daaf6152771_*", CHROME));
        assert!(!matches(b"t13d1516h2_8daaf6152771_*", CURL));
        assert!(matches(CHROME, CHROME) && !matches(CHROME, &CHROME[..35]));
    }

    #[test]
    fn consistency_by_family() {
        let t = table(&[("chrome", "t13d1516h2_8daaf6152771_*"), ("chrome", "t13d1517h2_*"), ("curl", std::str::from_utf8(CURL).unwrap())]);
        assert_eq!(t.consistent(b"chrome", CHROME), Some(true));
        assert_eq!(t.consistent(b"chrome", b"t13d1517h2_000000000000_000000000000"), Some(true), "the second prefix");
        assert_eq!(t.consistent(b"chrome", CURL), Some(false));
        assert_eq!(t.consistent(b"curl", CURL), Some(true));
        assert_eq!(t.consistent(b"curl", CHROME), Some(false));
        assert_eq!(t.consistent(b"firefox", CHROME), None, "a family the table does not list");
        assert_eq!(t.consistent(b"chrom", CHROME), None);
        assert_eq!(t.consistent(b"", CHROME), None);
    }

    #[test]
    fn check_refuses_what_the_artifact_must_not_hold() {
        let e = |f: &str, p: &str| UaFingerprint::new(f.as_bytes(), p.as_bytes()).unwrap();
        let chrome = e("chrome", "t13d*");
        assert_eq!(check(&[]), Err((0, "HAS_UA_FINGERPRINTS without entries")));
        assert!(check(&[chrome]).is_ok());
        assert_eq!(check(&[e("chromium", "t13d*")]).unwrap_err().0, 0);
        assert_eq!(check(&[e("MyClient", "t13d*")]).unwrap_err().1, "not a user-agent family the filter names");
        assert_eq!(check(&[chrome, e("chrome", "t13d")]).unwrap_err(), (1, "the pattern is neither a JA4 nor a prefix of one ending in `*`"));
        assert_eq!(check(&[chrome, chrome]).unwrap_err().0, 1);
        assert_eq!(check(&[e("curl", "t13d*"), chrome]).unwrap_err().1, "entries not sorted by family and pattern, or repeated");
        let mut junk = chrome;
        junk.pattern[30] = b'x';
        assert_eq!(check(&[junk]).unwrap_err().1, "bytes after the family name or the pattern are not zero");
        assert_eq!(check(&vec![chrome; MAX_UA_FINGERPRINTS + 1]).unwrap_err().1, "more entries than MAX_UA_FINGERPRINTS");
    }
}
