//! `compile --ua-fingerprints TABLE.json`: the table `tls_ua_consistent` reads, which JA4s each
//! user-agent family's real clients present, stored in the artifact (its UA_FINGERPRINTS
//! section) so that a security team updates it with a model, not with the filter.
//!
//! ```json
//! {"comment": "anything: ignored",
//!  "families": {"chrome": ["t13d1516h2_8daaf6152771_*"], "curl": ["t13i3111h2_e8f1e7e78f70_b26ce05bbdd6"]}}
//! ```
//!
//! An entry is a whole JA4 or a prefix of one ending in `*`; a family is a name `ua_family`
//! gives (`edgescore_core::features::ua::family_names`).

use anyhow::{bail, Context, Result};
use edgescore_core::artifact::layout::{UaFingerprint, MAX_UA_FINGERPRINTS};
use edgescore_core::features::{ua, ua_fingerprints, Feature};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// A table file larger than this is refused before it is parsed (a full table of
/// `MAX_UA_FINGERPRINTS` entries takes some 200 KB).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    /// Free text for the people who keep the table (where each entry comes from).
    #[serde(default)]
    #[allow(dead_code)]
    comment: serde_json::Value,
    families: BTreeMap<String, Vec<String>>,
}

/// Reads and checks a table file: the entries as the artifact holds them, sorted.
pub fn read(path: &Path) -> Result<Vec<UaFingerprint>> {
    let cannot = || format!("cannot read {}", path.display());
    let size = std::fs::metadata(path).with_context(cannot)?.len();
    if size > MAX_FILE_BYTES {
        bail!("{} is {size} bytes, more than a UA fingerprint table may be ({MAX_FILE_BYTES})", path.display());
    }
    let text = std::fs::read_to_string(path).with_context(cannot)?;
    parse(&text).with_context(|| format!("{} is not a UA fingerprint table", path.display()))
}

/// The entries of a table file's text, sorted.
pub fn parse(text: &str) -> Result<Vec<UaFingerprint>> {
    let file: TableFile = serde_json::from_str(text)?;
    let mut entries = Vec::new();
    for (family, patterns) in &file.families {
        if !ua::is_family(family.as_bytes()) {
            let known: Vec<String> = ua::family_names().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
            bail!("unknown user-agent family `{family}` (ua_family names: {})", known.join(", "));
        }
        if patterns.is_empty() {
            bail!("family `{family}` lists no fingerprints (leave it out: an unlisted family's requests get the missing value)");
        }
        for p in patterns {
            if !ua_fingerprints::is_pattern(p.as_bytes()) {
                bail!("family `{family}`: `{p}` is neither a JA4 (e.g. `t13d1516h2_8daaf6152771_d8a2da3f94cd`) nor a prefix of one ending in `*` (e.g. `t13d1516h2_8daaf6152771_*`)");
            }
            let entry = UaFingerprint::new(family.as_bytes(), p.as_bytes()).context("an entry longer than the artifact's fields")?;
            entries.push(entry);
        }
    }
    if entries.is_empty() {
        bail!("no families");
    }
    if entries.len() > MAX_UA_FINGERPRINTS {
        bail!("{} entries, more than the {MAX_UA_FINGERPRINTS} a model may carry", entries.len());
    }
    entries.sort();
    if let Some(w) = entries.windows(2).find(|w| w[0] == w[1]) {
        bail!("family `{}` lists `{}` twice", String::from_utf8_lossy(w[0].family()), String::from_utf8_lossy(w[0].pattern()));
    }
    // What the artifact's validator will check: the same definition.
    ua_fingerprints::check(&entries).map_err(|(i, reason)| anyhow::anyhow!("entry {i}: {reason}"))?;
    Ok(entries)
}

/// A model that reads `tls_ua_consistent` needs a table (the filter refuses it without one).
pub fn require_table(feature_names: impl IntoIterator<Item = impl AsRef<str>>, entries: &[UaFingerprint]) -> Result<()> {
    if entries.is_empty() {
        if let Some(name) = feature_names.into_iter().find(|n| Feature::parse(n.as_ref()) == Some(Feature::TlsUaConsistent)) {
            bail!("the model reads `{}`, which needs a UA fingerprint table: compile with --ua-fingerprints TABLE.json (docs/security-teams.md, \"TLS fingerprints\")", name.as_ref());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_table_sorted() {
        let t = parse(r#"{"comment": ["x"], "families": {"curl": ["t13i3111h2_e8f1e7e78f70_b26ce05bbdd6"], "chrome": ["t13d1516h2_8daaf6152771_*", "t13d1516h2_*"]}}"#).unwrap();
        let got: Vec<(&[u8], &[u8])> = t.iter().map(|e| (e.family(), e.pattern())).collect();
        assert_eq!(got, [(&b"chrome"[..], &b"t13d1516h2_*"[..]), (b"chrome", b"t13d1516h2_8daaf6152771_*"), (b"curl", b"t13i3111h2_e8f1e7e78f70_b26ce05bbdd6")]);
    }

    #[test]
    fn refuses_with_a_reason() {
        let err = |text: &str| format!("{:#}", parse(text).unwrap_err());
        assert!(err(r#"{"families": {"chromium": ["t13d*"]}}"#).contains("unknown user-agent family `chromium` (ua_family names: headless-chrome"));
        assert!(err(r#"{"families": {"chrome": ["t13d1516h2"]}}"#).contains("`t13d1516h2` is neither a JA4"));
        assert!(err(r#"{"families": {"chrome": ["T13D*"]}}"#).contains("neither a JA4"));
        assert!(err(r#"{"families": {"chrome": []}}"#).contains("lists no fingerprints"));
        assert!(err(r#"{"families": {}}"#).contains("no families"));
        assert!(err(r#"{"families": {"chrome": ["t13d*", "t13d*"]}}"#).contains("lists `t13d*` twice"));
        assert!(err(r#"{"family": {}}"#).contains("unknown field `family`"));
        let many: Vec<String> = (0..=MAX_UA_FINGERPRINTS).map(|i| format!("\"t13d{:04}h2_*\"", i)).collect();
        assert!(err(&format!(r#"{{"families": {{"chrome": [{}]}}}}"#, many.join(","))).contains("more than the 4096"));
    }

    #[test]
    fn a_reader_of_the_feature_needs_a_table() {
        let e = require_table(["header_count", "tls_ua_consistent"], &[]).unwrap_err();
        assert!(e.to_string().contains("--ua-fingerprints"), "{e}");
        assert!(require_table(["header_count"], &[]).is_ok());
    }
}
