//! The UA fingerprint table (format 7, `compile --ua-fingerprints`): written and read back as
//! built, refused when damaged, required by a model that reads `tls_ua_consistent`, and read
//! per model by the scorer: two models with different tables each see their own table's answer.

use edgescore_compile::ir::ModelIr;
use edgescore_compile::write::{write, write_for};
use edgescore_core::artifact::layout::{flags, SectionKind, UaFingerprint, FORMAT_VERSION};
use edgescore_core::{ArtifactError, HeaderMap, Model, PluginConfig, Request, Scorer};
use edgescore_tests::artifact_edit::{resealed, section};
use edgescore_tests::filter_models::{base64, step_model, ua_fingerprints};
use edgescore_tests::ir_build::format_version;

const CHROME_UA: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/143.0.0.0 Safari/537.36";
/// Chrome's cipher and extension set with signature algorithms other than Chrome 143's.
const CHROME_NEXT: &str = "t13d1516h2_8daaf6152771_e5627efa2ab1";

/// `step_model` on `tls_ua_consistent`: scores high when the JA4 is not consistent (below 0.5)
/// or missing, low when it is.
fn consistency_model(name: &str, table: &str) -> ModelIr {
    let mut ir = step_model(name, "tls_ua_consistent", 0.5, 3.0);
    ir.ua_fingerprints = ua_fingerprints(table);
    ir
}

const OLD_TABLE: &str = r#"{"families": {"chrome": ["t13d1516h2_8daaf6152771_d8a2da3f94cd"]}}"#;
const NEW_TABLE: &str = r#"{"families": {"chrome": ["t13d1516h2_8daaf6152771_*"], "curl": ["t13i3111h2_e8f1e7e78f70_b26ce05bbdd6"]}}"#;

#[test]
fn written_as_format_7_and_read_back() {
    let ir = consistency_model("bot", NEW_TABLE);
    let bytes = write(&ir).unwrap();
    assert_eq!(format_version(&bytes), FORMAT_VERSION);
    let model = Model::load(&bytes).unwrap();
    let e = model.ensemble();
    assert_ne!(e.header_flags() & flags::HAS_UA_FINGERPRINTS, 0);
    assert_eq!(e.ua_fingerprints(), &ir.ua_fingerprints[..]);
    let entries: Vec<(&[u8], &[u8])> = e.ua_fingerprints().iter().map(|f| (f.family(), f.pattern())).collect();
    assert_eq!(entries, [(&b"chrome"[..], &b"t13d1516h2_8daaf6152771_*"[..]), (b"curl", b"t13i3111h2_e8f1e7e78f70_b26ce05bbdd6")]);
    // Without a table: the bytes of before, in the lowest format that holds the model.
    let plain = ModelIr { ua_fingerprints: Vec::new(), ..ir.clone() };
    let plain_bytes = write(&plain).unwrap();
    assert!(format_version(&plain_bytes) < 7);
    assert!(Model::load(&plain_bytes).unwrap().ensemble().ua_fingerprints().is_empty());
    assert_eq!(write_for(&plain, 6).unwrap(), plain_bytes);
    // A fleet on format 6 cannot take a table.
    let err = write_for(&ir, 6).unwrap_err().to_string();
    assert!(err.contains("UA fingerprint tables (--ua-fingerprints) need format 7"), "{err}");
    // The writer checks the table it is given.
    let mut bad = ir.clone();
    bad.ua_fingerprints.reverse();
    assert!(write(&bad).unwrap_err().to_string().contains("not sorted"));
}

fn refused(bytes: Vec<u8>) -> ArtifactError {
    match Model::load(&resealed(bytes)) {
        Ok(_) => panic!("a damaged table was accepted"),
        Err(e) => e,
    }
}

#[test]
fn a_damaged_table_is_refused() {
    let good = write(&consistency_model("bot", NEW_TABLE)).unwrap();
    let (at, len) = section(&good, SectionKind::UaFingerprints);
    assert_eq!(len, 2 * std::mem::size_of::<UaFingerprint>());
    let edit = |offset: usize, byte: u8| {
        let mut b = good.clone();
        b[at + offset] = byte;
        b
    };
    // An unknown family (`chromf`), a pattern that is no JA4 (`T13d…`), junk in the padding.
    assert_eq!(refused(edit(5, b'f')), ArtifactError::UaFingerprints { index: 0, reason: "not a user-agent family the filter names" });
    assert!(matches!(refused(edit(24, b'T')), ArtifactError::UaFingerprints { index: 0, reason } if reason.contains("neither a JA4")));
    assert!(matches!(refused(edit(63, b'x')), ArtifactError::UaFingerprints { index: 0, reason } if reason.contains("not zero")));
    // The second entry's family (`curl`) made `bingbot`, which sorts before the first's.
    let mut b = good.clone();
    b[at + 64..at + 64 + 8].copy_from_slice(b"bingbot\0");
    assert!(matches!(refused(b), ArtifactError::UaFingerprints { index: 1, .. }));
    // Without the flag, the section must be empty; with it but relabelled format 6, unknown.
    let mut b = good.clone();
    let declared = u32::from_le_bytes(b[12..16].try_into().unwrap());
    b[12..16].copy_from_slice(&(declared & !flags::HAS_UA_FINGERPRINTS).to_le_bytes());
    assert!(matches!(refused(b), ArtifactError::SectionLength { section: "UA_FINGERPRINTS", .. }));
    let mut b = good.clone();
    b[8..12].copy_from_slice(&6u32.to_le_bytes());
    assert!(matches!(refused(b), ArtifactError::SectionTable(_) | ArtifactError::UnknownFlags(_)));
    // A section that is not whole entries.
    let mut b = good.clone();
    let table_at = edgescore_core::artifact::layout::HEADER_LEN + (SectionKind::UaFingerprints as usize - 1) * 24 + 16;
    b[table_at..table_at + 8].copy_from_slice(&((len - 1) as u64).to_le_bytes());
    assert!(matches!(refused(b), ArtifactError::SectionLength { section: "UA_FINGERPRINTS", .. }));
}

fn config(models: &[&ModelIr]) -> String {
    let models: Vec<String> = models.iter().map(|m| format!(r#"{{"artifact":"{}","threshold":0.5,"action":"tag"}}"#, base64(&write(m).unwrap()))).collect();
    format!(r#"{{"mode":"shadow","hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1}},"models":[{}]}}"#, models.join(","))
}

/// The scores of `bot` and `scanner` for a request over TLS with this user-agent and JA4.
fn scores(scorer: &mut Scorer, ua: &str, ja4: &str, tls: bool) -> Vec<f32> {
    let buf = HeaderMap::encode(&[(":method", "GET"), (":path", "/"), ("user-agent", ua), ("x-edgescore-ja4", ja4)]);
    let mut req = Request::new(HeaderMap::parse(&buf).unwrap());
    req.tls_version = tls.then_some(&b"TLSv1.3"[..]);
    scorer.score(&req).unwrap();
    scorer.scores().to_vec()
}

#[test]
fn each_model_reads_its_own_table() {
    // A new version of `bot` with an updated table beside `scanner` with the old one.
    let (bot, scanner) = (consistency_model("bot", NEW_TABLE), consistency_model("scanner", OLD_TABLE));
    let mut scorer = Scorer::new(&PluginConfig::parse(config(&[&bot, &scanner]).as_bytes()).unwrap(), 1).unwrap();
    let names: Vec<&str> = scorer.slots().iter().map(|s| s.name.as_str()).collect();
    assert!(names.iter().filter(|n| n.starts_with("tls_ua_consistent#")).count() == 2, "{names:?}");
    let (low, high) = (1.0 / (1.0 + 3f32.exp()), 1.0 / (1.0 + (-3f32).exp()));
    // Chrome's new signature algorithms: consistent by bot's prefix, not by scanner's JA4.
    assert_eq!(scores(&mut scorer, CHROME_UA, CHROME_NEXT, true), [low, high]);
    assert_eq!(scores(&mut scorer, CHROME_UA, "t13d1516h2_8daaf6152771_d8a2da3f94cd", true), [low, low]);
    // curl's handshake claiming Chrome: inconsistent for both.
    assert_eq!(scores(&mut scorer, CHROME_UA, "t13i3111h2_e8f1e7e78f70_b26ce05bbdd6", true), [high, high]);
    // The feature log shows both answers.
    let log = String::from_utf8(scorer.feature_log().to_vec()).unwrap();
    assert_eq!(log.matches(r#""tls_ua_consistent#"#).count(), 2, "{log}");
    // Equal tables share a slot, named as the catalogue names it.
    let twin = consistency_model("scanner", NEW_TABLE);
    let scorer = Scorer::new(&PluginConfig::parse(config(&[&bot, &twin]).as_bytes()).unwrap(), 1).unwrap();
    assert_eq!(scorer.slots().iter().filter(|s| s.name == "tls_ua_consistent").count(), 1);
}

#[test]
fn a_model_reading_the_feature_without_a_table_is_refused() {
    let mut ir = consistency_model("bot", NEW_TABLE);
    ir.ua_fingerprints.clear();
    let err = Scorer::new(&PluginConfig::parse(config(&[&ir]).as_bytes()).unwrap(), 1).err().expect("refused").to_string();
    assert!(err.contains("`tls_ua_consistent` reads the model's UA fingerprint table, and the model carries none"), "{err}");
    assert!(err.contains("--ua-fingerprints"), "{err}");
}
