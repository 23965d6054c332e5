//! `tls_ua_consistent` and its table by their definitions (`docs/artifact-format.md`, "Format
//! 7"; `docs/configuration.md`): an entry is a family `ua_family` names for a token it knows and
//! a whole JA4 or a non-empty start of one followed by `*`; a request's value is 1 when its JA4
//! matches one of its user-agent family's entries, 0 when the family has entries and none
//! matches, missing otherwise (plain HTTP, no or a malformed JA4, no user-agent, an unlisted
//! family). Read the plain way: a prefix is valid when some JA4 starts with it, tried by
//! completing it from JA4s of each version spelling.

use super::{fingerprint, first_value, tls, ua_family, ReferenceRequest};

/// JA4s whose version field starts with each first character a version may have (`1`, `d`,
/// `s`, `0`): every valid prefix completes into one of them.
const COMPLETIONS: [&[u8]; 4] = [
    b"t13d1516h2_8daaf6152771_d8a2da3f94cd",
    b"td3d1516h2_8daaf6152771_d8a2da3f94cd",
    b"ts3d1516h2_8daaf6152771_d8a2da3f94cd",
    b"t00d1516h2_8daaf6152771_d8a2da3f94cd",
];

/// Whether (family, pattern) may be a table's entry.
pub fn valid_entry(family: &[u8], pattern: &[u8]) -> bool {
    let known = ua_family::family_names().any(|f| f == family);
    let valid = match pattern.strip_suffix(b"*") {
        Some(prefix) if !prefix.is_empty() && prefix.len() <= 36 => {
            COMPLETIONS.iter().any(|c| tls::ja4(Some(&[prefix, &c[prefix.len()..]].concat())).is_some())
        }
        Some(_) => false,
        None => tls::ja4(Some(pattern)).is_some(),
    };
    known && valid
}

/// The feature for a request, by a table of (family, pattern) entries.
pub fn consistent(req: &ReferenceRequest, table: &[(Vec<u8>, Vec<u8>)]) -> Option<f32> {
    let ja4 = tls::ja4(fingerprint(req, b"x-edgescore-ja4"))?.whole;
    let family = ua_family::family(first_value(req, b"user-agent")?);
    let own: Vec<&[u8]> = table.iter().filter(|(f, _)| f == family).map(|(_, p)| p.as_slice()).collect();
    if own.is_empty() {
        return None;
    }
    let hit = own.iter().any(|p| match p.strip_suffix(b"*") {
        Some(prefix) => ja4.len() >= prefix.len() && &ja4[..prefix.len()] == prefix,
        None => ja4 == *p,
    });
    Some(if hit { 1.0 } else { 0.0 })
}
