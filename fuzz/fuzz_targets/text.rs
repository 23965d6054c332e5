//! The text path's request-body handling and verdicts (`edgescore_core::text`), as the filter
//! uses them: a body cut at `max_body_bytes` → `text::extract` under a generated `TextConfig`
//! (JSON and form fields, duplicated or not, dotted paths), and the NLP service's answer →
//! `TextVerdict::parse` → `decide` / `crossed` / `header_value`. The first byte picks the
//! body: arbitrary bytes of any kind, a JSON document or a form body described by the input.
//!
//! Never a panic, and:
//! - the text has at most one character per body byte (each field's copy, for a field listed
//!   more than once): a U+FFFD per invalid byte, a newline per joined value;
//! - a plain body is its own text when it is UTF-8, and a body cut at any length reads as a
//!   prefix of the whole body's text: a character cut in two is dropped (the cut the filter
//!   makes at `max_body_bytes`);
//! - a JSON document that parses, with each key once per object and each field listed once,
//!   gives the same text read whole (serde) as read leniently (`json_prefix_strings`), and a
//!   cut document gives each field's strings of the whole, in order, the last one perhaps cut
//!   short;
//! - a parsed verdict has finite numbers; `decide` applies the strongest action of the labels
//!   `crossed` counts (the first in name order among equals, `Allow` and no label when none
//!   counts); the verdict header holds visible ASCII only.
#![no_main]

use arbitrary::{Result, Unstructured};
use edgescore_core::action::ActionKind;
use edgescore_core::config::text::LabelRule;
use edgescore_core::config::text::{BodyKind, Combine, TextConfig};
use edgescore_core::text::{self, TextVerdict};
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

/// Field names and JSON keys drawn from one small set, so that they meet.
const NAMES: [&str; 10] = ["text", "message", "comment", "content", "meta", "meta.text", "a", "a.b", "", "\u{e9}"];

fn name(u: &mut Unstructured) -> Result<String> {
    Ok(if u.ratio(1, 8)? { u.arbitrary::<String>()? } else { u.choose(&NAMES)?.to_string() })
}

fn fields(u: &mut Unstructured) -> Result<Vec<String>> {
    (0..u.int_in_range(0usize..=4)?).map(|_| name(u)).collect()
}

fn config(u: &mut Unstructured) -> Result<TextConfig> {
    let mut labels = BTreeMap::new();
    for _ in 0..u.int_in_range(1usize..=4)? {
        let label = if u.ratio(1, 8)? { u.arbitrary::<String>()? } else { u.choose(&["toxic", "spam", "threat", "ok"])?.to_string() };
        let threshold = *u.choose(&[0.5, 0.8, 0.0, 1.0, -1.0, 1.5, f64::MIN_POSITIVE])?;
        let action = *u.choose(&[ActionKind::Allow, ActionKind::Tag, ActionKind::Block])?;
        labels.insert(label, LabelRule { threshold, action });
    }
    Ok(TextConfig {
        cluster: "nlp".into(),
        path: "/score".into(),
        authority: "nlp".into(),
        timeout_ms: 500,
        fail_open: true,
        methods: vec!["POST".into()],
        plain_text: true,
        json_fields: fields(u)?,
        form_fields: fields(u)?,
        max_body_bytes: if u.ratio(1, 2)? { u.int_in_range(1u32..=96)? } else { *u.choose(&[16 << 10, 1 << 20, 1, 2, 3, 4])? },
        labels,
        combine: Combine::Strongest,
        header: "x-edgescore-text".into(),
        status: None,
        body: None,
    })
}

/// A JSON string's body: plain characters, escapes (`\uXXXX` with surrogate pairs), multibyte
/// UTF-8, now and then a raw byte JSON forbids.
fn json_string(u: &mut Unstructured, out: &mut Vec<u8>, s: &str) -> Result<()> {
    out.push(b'"');
    if !s.is_empty() {
        for c in s.chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                c if (c as u32) < 0x20 => out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes()),
                c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
    } else {
        for _ in 0..u.int_in_range(0usize..=6)? {
            match u.int_in_range(0u8..=9)? {
                0 => out.extend_from_slice(b"\\ud83d\\ude00"),
                1 => out.extend_from_slice(b"\\u00e9"),
                2 => out.extend_from_slice(u.choose(&[&b"\\n"[..], b"\\\"", b"\\\\", b"\\/", b"\\t", b"\\u0000"])?),
                3 => out.extend_from_slice("\u{e9}\u{1f600}".as_bytes()),
                4 if u.ratio(1, 8)? => out.push(u.arbitrary()?),
                _ => out.extend_from_slice(u.choose(&[&b"hi"[..], b"you are dumb", b" ", b"x"])?),
            }
        }
    }
    out.push(b'"');
    Ok(())
}

/// A JSON value; `dup` is set when some object repeats a key.
fn json_value(u: &mut Unstructured, out: &mut Vec<u8>, depth: u32, dup: &mut bool) -> Result<()> {
    let kind = if depth == 0 { 0 } else { u.int_in_range(0u8..=6)? };
    match kind {
        0 | 1 => json_string(u, out, "")?,
        2 => out.extend_from_slice(u.choose(&[&b"1"[..], b"-2.5e3", b"true", b"null", b"0"])?),
        3 | 4 => {
            out.push(b'[');
            for i in 0..u.int_in_range(0usize..=3)? {
                if i > 0 {
                    out.push(b',');
                }
                json_value(u, out, depth - 1, dup)?;
            }
            out.push(b']');
        }
        _ => json_object(u, out, depth - 1, dup)?,
    }
    Ok(())
}

fn json_object(u: &mut Unstructured, out: &mut Vec<u8>, depth: u32, dup: &mut bool) -> Result<()> {
    out.push(b'{');
    let mut keys = Vec::new();
    for i in 0..u.int_in_range(0usize..=5)? {
        if i > 0 {
            out.extend_from_slice(if u.ratio(1, 4)? { b", " } else { b"," });
        }
        let (key, at) = (name(u)?, out.len());
        json_string(u, out, &key)?;
        // The key as JSON reads it: an empty name is written as generated content, escapes
        // (`\u00e9` is `é`) included.
        let key = serde_json::from_slice::<String>(&out[at..]).unwrap_or(key);
        *dup |= keys.contains(&key);
        keys.push(key);
        out.extend_from_slice(if u.ratio(1, 4)? { b": " } else { b":" });
        json_value(u, out, depth, dup)?;
    }
    out.push(b'}');
    Ok(())
}

/// A form body: `&`-separated pairs, names and values percent-encoded or not, `+` for space.
fn form(u: &mut Unstructured) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..u.int_in_range(0usize..=6)? {
        if i > 0 {
            out.push(b'&');
        }
        out.extend_from_slice(name(u)?.as_bytes());
        out.push(b'=');
        for _ in 0..u.int_in_range(0usize..=5)? {
            out.extend_from_slice(u.choose(&[&b"you"[..], b"+", b"%20", b"%C3%A9", b"%F0%9F%98%80", b"\xc3\xa9", b"%zz", b"%", b"=", b"\xff"])?);
        }
    }
    Ok(out)
}

/// The most times one field is listed (at least 1).
fn most_listed(fields: &[String]) -> usize {
    fields.iter().map(|f| fields.iter().filter(|g| *g == f).count()).max().unwrap_or(0).max(1)
}

/// `text::extract` on the body the filter would read (the first `max_body_bytes`).
fn check_body(cfg: &TextConfig, kind: BodyKind, whole: &[u8], json_ok: bool) {
    let body = &whole[..whole.len().min(cfg.max_body_bytes as usize)];
    let got = text::extract(cfg, kind, body);
    let listed = match kind {
        BodyKind::Plain => 1,
        BodyKind::Json => most_listed(&cfg.json_fields),
        BodyKind::Form => most_listed(&cfg.form_fields),
    };
    assert!(got.chars().count() <= listed * body.len(), "{} characters from a body of {} bytes", got.chars().count(), body.len());
    match kind {
        BodyKind::Plain => {
            if let Ok(s) = std::str::from_utf8(body) {
                assert_eq!(got, s, "a UTF-8 body is its own text");
            }
            let all = text::extract(cfg, kind, whole);
            assert!(all.starts_with(&got), "the text of a cut body {got:?} is not a prefix of the whole body's {all:?}");
        }
        BodyKind::Json if json_ok => {
            // Read whole: serde and the lenient walk agree.
            if most_listed(&cfg.json_fields) == 1 && serde_json::from_slice::<serde_json::Value>(whole).is_ok() {
                let all = text::extract(cfg, kind, whole);
                assert_eq!(text::json_prefix_strings(&cfg.json_fields, whole).join("\n"), all, "serde and the lenient walk disagree");
            }
            // Cut: each field's strings are the whole document's, the last perhaps cut short.
            for field in &cfg.json_fields {
                let f = std::slice::from_ref(field);
                let (cut, all) = (text::json_prefix_strings(f, body), text::json_prefix_strings(f, whole));
                assert!(cut.len() <= all.len(), "field {field:?}: more strings cut ({cut:?}) than whole ({all:?})");
                for (i, (c, a)) in cut.iter().zip(&all).enumerate() {
                    let last = i + 1 == cut.len();
                    assert!(c == a || (last && a.starts_with(c.as_str())), "field {field:?}: string {i} cut {c:?}, whole {a:?}");
                }
            }
        }
        _ => {}
    }
}

fn check_verdict(cfg: &TextConfig, answer: &[u8]) {
    let Some(v) = TextVerdict::parse(answer) else { return };
    assert!(v.score.is_finite() && v.labels.values().all(|p| p.is_finite()));
    let crossed: Vec<usize> = v.crossed(cfg).collect();
    let rules: Vec<(&String, &LabelRule)> = cfg.labels.iter().collect();
    let strongest = crossed.iter().map(|&i| rules[i].1.action).max();
    let want = match strongest {
        None => (ActionKind::Allow, None),
        Some(a) => (a, crossed.iter().map(|&i| rules[i]).find(|r| r.1.action == a).map(|r| r.0.clone())),
    };
    assert_eq!(v.decide(cfg), want, "decide vs the labels crossed ({crossed:?})");
    let h = v.header_value();
    assert!(h.bytes().all(|b| b.is_ascii_graphic()), "header value {h:?}");
}

/// A verdict as the service writes it, with labels that may or may not be configured.
fn verdict(u: &mut Unstructured) -> Result<Vec<u8>> {
    let mut out = format!("{{\"score\":{},\"label\":", u.choose(&["0.9", "0", "-1", "1e308", "1e999", "\"x\""])?).into_bytes();
    let label = name(u)?;
    json_string(u, &mut out, &label)?;
    out.extend_from_slice(b",\"labels\":{");
    for i in 0..u.int_in_range(0usize..=4)? {
        if i > 0 {
            out.push(b',');
        }
        let label = *u.choose(&["toxic", "spam", "threat", "ok", "x"])?;
        out.extend_from_slice(format!("\"{label}\":{}", u.choose(&["0.85", "0.5", "0", "1", "-0.5", "2", "1e-320"])?).as_bytes());
    }
    out.extend_from_slice(b"},\"model\":");
    json_string(u, &mut out, "m@1;\"x\"\\,\u{e9} \t")?;
    out.push(b'}');
    Ok(out)
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let form_of = u.int_in_range(0u8..=3)?;
    let cfg = config(&mut u)?;
    match form_of {
        0 => {
            let kind = *u.choose(&[BodyKind::Plain, BodyKind::Json, BodyKind::Form])?;
            let body = u.take_rest();
            check_body(&cfg, kind, body, true);
            check_verdict(&cfg, body);
        }
        1 => {
            let (mut doc, mut dup) = (Vec::new(), false);
            json_object(&mut u, &mut doc, 3, &mut dup)?;
            check_body(&cfg, BodyKind::Json, &doc, !dup);
            check_body(&cfg, BodyKind::Plain, &doc, false);
        }
        2 => {
            let body = form(&mut u)?;
            check_body(&cfg, BodyKind::Form, &body, false);
            check_body(&cfg, BodyKind::Plain, &body, false);
        }
        _ => check_verdict(&cfg, &verdict(&mut u)?),
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
