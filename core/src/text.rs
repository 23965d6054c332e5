//! The text path's work apart from Envoy: what text a body holds, what the NLP service
//! answered and what that verdict triggers under the configuration (`config::text`). The glue
//! does the buffering and the call; `decision` combines the verdict with the tree decision.

use crate::action::ActionKind;
use crate::config::text::{BodyKind, LabelRule, TextConfig};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The text to score from a (possibly truncated) body; empty when there is none.
///
/// A body longer than `max_body_bytes` arrives here cut at that length: plain text and
/// form bodies are read as far as they go; a JSON body that no longer parses is read by a
/// lenient walk of the prefix ([`json_prefix_strings`]), so the fields inside the first
/// `max_body_bytes` are still scored.
pub fn extract(cfg: &TextConfig, kind: BodyKind, body: &[u8]) -> String {
    match kind {
        BodyKind::Plain => String::from_utf8_lossy(without_cut_char(body)).into_owned(),
        BodyKind::Json => {
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
                return json_prefix_strings(&cfg.json_fields, body).join("\n");
            };
            let mut parts = Vec::new();
            for field in &cfg.json_fields {
                let mut at = Some(&v);
                for key in field.split('.') {
                    at = at.and_then(|x| x.get(key));
                }
                match at {
                    Some(serde_json::Value::String(s)) => parts.push(s.clone()),
                    Some(serde_json::Value::Array(items)) => parts.extend(items.iter().filter_map(|i| i.as_str().map(str::to_string))),
                    _ => {}
                }
            }
            parts.join("\n")
        }
        BodyKind::Form => {
            let parts: Vec<String> = form_urlencoded::parse(body)
                .filter(|(k, _)| cfg.form_fields.iter().any(|f| f == k))
                .map(|(_, v)| v.into_owned())
                .collect();
            parts.join("\n")
        }
    }
}

/// `body` without a UTF-8 sequence cut off at its end (a body truncated at `max_body_bytes`),
/// whatever invalid bytes come before it (those are read as U+FFFD).
fn without_cut_char(body: &[u8]) -> &[u8] {
    // A cut sequence starts in the last 3 bytes: the start from which the rest is an
    // unfinished character.
    for start in body.len().saturating_sub(3)..body.len() {
        if let Err(e) = std::str::from_utf8(&body[start..]) {
            if e.valid_up_to() == 0 && e.error_len().is_none() {
                return &body[..start];
            }
        }
    }
    body
}

/// The string values at the `fields` paths of a JSON document that may be cut short (or is
/// not quite JSON), in `fields` order, as `extract` finds them in a whole document: a string
/// at the path, or the strings of an array at the path. The walk stops at the end of the
/// prefix or at the first byte that cannot be JSON; a string cut by the end is taken as far
/// as it goes.
pub fn json_prefix_strings(fields: &[String], body: &[u8]) -> Vec<String> {
    enum Frame {
        Object { key: Option<String> },
        Array,
    }
    let paths: Vec<Vec<&str>> = fields.iter().map(|f| f.split('.').collect()).collect();
    // Which field a value at the current position belongs to, if any.
    let field_at = |stack: &[Frame]| -> Option<usize> {
        // A direct array below the last key holds the value's strings (`"content": ["a", "b"]`).
        let stack = match stack.last() {
            Some(Frame::Array) => &stack[..stack.len() - 1],
            _ => stack,
        };
        let mut keys = Vec::with_capacity(stack.len());
        for f in stack {
            match f {
                Frame::Object { key: Some(k) } => keys.push(k.as_str()),
                _ => return None,
            }
        }
        paths.iter().position(|p| *p == keys)
    };
    let mut found: Vec<(usize, String)> = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut want_key = false;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b' ' | b'\t' | b'\n' | b'\r' | b':' => i += 1,
            b',' => {
                want_key = matches!(stack.last(), Some(Frame::Object { .. }));
                i += 1;
            }
            b'{' => {
                stack.push(Frame::Object { key: None });
                want_key = true;
                i += 1;
            }
            b'[' => {
                stack.push(Frame::Array);
                want_key = false;
                i += 1;
            }
            b'}' | b']' => {
                stack.pop();
                want_key = false;
                i += 1;
            }
            b'"' => {
                let (s, next, closed) = json_string(body, i + 1);
                if want_key {
                    if let Some(Frame::Object { key }) = stack.last_mut() {
                        *key = Some(s);
                    }
                    want_key = false;
                } else if let Some(f) = field_at(&stack) {
                    found.push((f, s));
                }
                if !closed {
                    break;
                }
                i = next;
            }
            b if b.is_ascii_alphanumeric() || b == b'-' || b == b'+' || b == b'.' => i += 1,
            _ => break,
        }
    }
    found.sort_by_key(|(f, _)| *f); // stable: document order within a field
    found.into_iter().map(|(_, s)| s).collect()
}

/// A JSON string starting after its opening quote: the text, the index after the closing
/// quote, and whether the string was closed (false: cut by the end of the body).
fn json_string(body: &[u8], mut i: usize) -> (String, usize, bool) {
    let mut out = Vec::new();
    let hex4 = |at: usize| -> Option<u32> {
        let h = body.get(at..at + 4)?;
        u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    while i < body.len() {
        match body[i] {
            b'"' => return (String::from_utf8_lossy(&out).into_owned(), i + 1, true),
            b'\\' => {
                let Some(&e) = body.get(i + 1) else { break };
                i += 2;
                let c = match e {
                    b'n' => '\n',
                    b't' => '\t',
                    b'r' => '\r',
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'u' => {
                        let Some(hi) = hex4(i) else { break };
                        i += 4;
                        // A pair cut by the end of the body (`\ud83d`, `\ud83d\ude`): the high half
                        // is dropped like a character cut in two, not read as a lone U+FFFD.
                        let rest = &body[i..];
                        if (0xd800..0xdc00).contains(&hi) && rest.len() < 6 && rest.iter().zip(b"\\uXXXX").all(|(&b, &p)| if p == b'X' { b.is_ascii_hexdigit() } else { b == p }) {
                            break;
                        }
                        if (0xd800..0xdc00).contains(&hi) && body.get(i..i + 2) == Some(b"\\u") {
                            match hex4(i + 2) {
                                Some(lo) if (0xdc00..0xe000).contains(&lo) => {
                                    i += 6;
                                    char::from_u32(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)).unwrap_or('\u{fffd}')
                                }
                                _ => '\u{fffd}',
                            }
                        } else {
                            char::from_u32(hi).unwrap_or('\u{fffd}')
                        }
                    }
                    other => other as char, // `\"`, `\\`, `\/` (and anything else, leniently)
                };
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    (String::from_utf8_lossy(without_cut_char(&out)).into_owned(), body.len(), false)
}

/// The NLP service's answer: `{"score": f, "label": s, "labels": {..}, "model": s}`.
#[derive(Debug, Clone, Deserialize)]
pub struct TextVerdict {
    pub score: f64,
    pub label: String,
    #[serde(default)]
    pub labels: BTreeMap<String, f64>,
    #[serde(default)]
    pub model: String,
}

impl TextVerdict {
    /// The strongest action among the labels [`Self::crossed`] counts, and the label (the
    /// first in name order among equals; `Allow` and none when no label crossed).
    pub fn decide(&self, cfg: &TextConfig) -> (ActionKind, Option<String>) {
        let mut best = (ActionKind::Allow, None);
        for (_, label, rule) in self.crossed_rules(cfg) {
            if rule.action > best.0 || best.1.is_none() {
                best = (rule.action, Some(label.clone()));
            }
        }
        best
    }

    /// Indices (in `labels` order) of the labels whose probability reached their threshold.
    pub fn crossed<'a>(&'a self, cfg: &'a TextConfig) -> impl Iterator<Item = usize> + 'a {
        self.crossed_rules(cfg).map(|(i, _, _)| i)
    }

    /// The configured labels whose probability in the verdict reached their threshold, with
    /// their index. A label the service did not report crosses none, whatever its threshold.
    fn crossed_rules<'a>(&'a self, cfg: &'a TextConfig) -> impl Iterator<Item = (usize, &'a String, &'a LabelRule)> + 'a {
        cfg.labels
            .iter()
            .enumerate()
            .filter(|(_, (label, rule))| self.labels.get(*label).is_some_and(|p| *p >= rule.threshold))
            .map(|(i, (label, rule))| (i, label, rule))
    }

    pub fn parse(body: &[u8]) -> Option<TextVerdict> {
        let v: TextVerdict = serde_json::from_slice(body).ok()?;
        (v.score.is_finite() && v.labels.values().all(|p| p.is_finite())).then_some(v)
    }

    /// `score=0.9312;label=toxic;model=…` for the text header and filter state; the label and
    /// model are reduced to header-safe characters.
    pub fn header_value(&self) -> String {
        let safe = |s: &str| s.chars().filter(|c| c.is_ascii_graphic() && !";,\"\\".contains(*c)).collect::<String>();
        format!("score={:.4};label={};model={}", self.score, safe(&self.label), safe(&self.model))
    }
}

/// `{"text": "..."}`, escaped by serde_json.
pub fn request_body(text: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "text": text })).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TextConfig {
        serde_json::from_str(r#"{"cluster":"nlp","labels":{"toxic":{"threshold":0.7,"action":"block"},"spam":{"threshold":0.8,"action":"tag"}}}"#).unwrap()
    }

    #[test]
    fn qualification() {
        let c = cfg();
        assert_eq!(c.qualifies(b"POST", Some(b"application/json; charset=utf-8"), None), Some(BodyKind::Json));
        assert_eq!(c.qualifies(b"POST", Some(b"application/problem+json"), None), Some(BodyKind::Json));
        assert_eq!(c.qualifies(b"post", Some(b"text/plain"), None), Some(BodyKind::Plain));
        assert_eq!(c.qualifies(b"PUT", Some(b"application/x-www-form-urlencoded"), None), Some(BodyKind::Form));
        assert_eq!(c.qualifies(b"POST", Some(b"text/plain"), Some(b"identity")), Some(BodyKind::Plain));
        assert_eq!(c.qualifies(b"POST", Some(b"text/plain"), Some(b"gzip")), None);
        assert_eq!(c.qualifies(b"GET", Some(b"text/plain"), None), None);
        assert_eq!(c.qualifies(b"POST", Some(b"text/"), None), None);
        assert_eq!(c.qualifies(b"POST", Some(b"application/octet-stream"), None), None);
        assert_eq!(c.qualifies(b"POST", Some(b"image/png"), None), None);
        assert_eq!(c.qualifies(b"POST", Some(b"multipart/form-data; boundary=x"), None), None);
        assert_eq!(c.qualifies(b"POST", None, None), None);
    }

    #[test]
    fn extraction() {
        let c = cfg();
        assert_eq!(extract(&c, BodyKind::Json, br#"{"message":"hi there","n":1,"content":["a","b"]}"#), "hi there\na\nb");
        assert_eq!(extract(&c, BodyKind::Json, b"{not json"), "");
        assert_eq!(extract(&c, BodyKind::Form, b"comment=you+are%20dumb&x=1"), "you are dumb");
        assert_eq!(extract(&c, BodyKind::Plain, b"caf\xc3\xa9 \xff"), "caf\u{e9} \u{fffd}");
        // Cut inside a character (max_body_bytes): the partial character is dropped.
        assert_eq!(extract(&c, BodyKind::Plain, b"caf\xc3"), "caf");
        // Also after an invalid byte (fuzz/crashes/text-cut-char-after-invalid: it was read as
        // a second U+FFFD), and in a JSON string.
        assert_eq!(extract(&c, BodyKind::Plain, b"\xff\xcc"), "\u{fffd}");
        assert_eq!(extract(&c, BodyKind::Plain, b"\xffcaf\xf0\x9f\x98"), "\u{fffd}caf");
        assert_eq!(extract(&c, BodyKind::Json, b"{\"text\": \"\xff\xcc"), "\u{fffd}");
        assert_eq!(extract(&c, BodyKind::Plain, b"\xff\xcc\xa8"), "\u{fffd}\u{328}");
    }

    #[test]
    fn truncated_json_is_read_as_far_as_it_goes() {
        let c = cfg();
        let whole = br#"{"id": 7, "meta": {"text": "not this"}, "message": "first \"quoted\" \u00e9\ud83d\ude00 line", "content": ["a", "b"], "comment": "cut here and more"}"#;
        let full = extract(&c, BodyKind::Json, whole);
        assert_eq!(full, "first \"quoted\" \u{e9}\u{1f600} line\ncut here and more\na\nb");
        // Every prefix gives a prefix of the fields' texts, never a panic, and the whole
        // document gives exactly what serde gives.
        assert_eq!(json_prefix_strings(&c.json_fields, whole).join("\n"), full);
        for cut in 0..whole.len() {
            let _ = extract(&c, BodyKind::Json, &whole[..cut]);
        }
        let cut = whole.len() - 10; // inside the comment: `... "cut here |and more"}`
        assert_eq!(extract(&c, BodyKind::Json, &whole[..cut]), "first \"quoted\" \u{e9}\u{1f600} line\ncut here \na\nb");
        assert_eq!(extract(&c, BodyKind::Json, br#"{"text": "hello wor"#), "hello wor");
        assert_eq!(extract(&c, BodyKind::Json, br#"{"nested": {"text": "no"}, "tex"#), "");
        assert_eq!(extract(&c, BodyKind::Json, br#"[{"text": "not top level"}"#), "");
    }

    #[test]
    fn a_surrogate_pair_cut_in_two_is_dropped() {
        // fuzz/crashes/text-cut-surrogate-pair: a body cut between (or inside) the two
        // escapes of a pair gave a U+FFFD that the whole body does not have.
        let c = cfg();
        let whole = br#"{"text": "a\ud83d\ude00", "n": 1}"#;
        assert_eq!(extract(&c, BodyKind::Json, whole), "a\u{1f600}");
        for cut in 0..whole.len() {
            let text = extract(&c, BodyKind::Json, &whole[..cut]);
            assert!("a\u{1f600}".starts_with(&text), "cut at {cut}: {text:?}");
        }
        // A lone high half inside the body is still a U+FFFD.
        assert_eq!(extract(&c, BodyKind::Json, br#"{"text": "a\ud83d"}"#), "a\u{fffd}");
    }

    #[test]
    fn verdicts() {
        let c = cfg();
        let v = TextVerdict::parse(br#"{"score":0.95,"label":"toxic","labels":{"toxic":0.9,"spam":0.85,"ok":0.05},"model":"m@1"}"#).unwrap();
        assert_eq!(v.decide(&c), (ActionKind::Block, Some("toxic".into())));
        assert_eq!(v.crossed(&c).collect::<Vec<_>>(), vec![0, 1]); // labels in order: spam, toxic
        assert_eq!(v.header_value(), "score=0.9500;label=toxic;model=m@1");
        let v = TextVerdict::parse(br#"{"score":0.1,"label":"ok","labels":{"ok":0.9}}"#).unwrap();
        assert_eq!(v.decide(&c), (ActionKind::Allow, None));
        assert!(TextVerdict::parse(b"<html>").is_none());
    }

    #[test]
    fn a_label_the_service_did_not_report_crosses_no_threshold() {
        // fuzz/crashes/text-absent-label-decides: a label missing from the answer reads as 0,
        // which a threshold of 0 or below would cross; it counts neither in `crossed` nor in
        // the decision.
        let c: TextConfig = serde_json::from_str(r#"{"cluster":"nlp","labels":{"toxic":{"threshold":0,"action":"block"},"ok":{"threshold":-1}}}"#).unwrap();
        let v = TextVerdict::parse(br#"{"score":0.2,"label":"spam","labels":{"spam":0.2}}"#).unwrap();
        assert_eq!(v.crossed(&c).count(), 0);
        assert_eq!(v.decide(&c), (ActionKind::Allow, None));
        let v = TextVerdict::parse(br#"{"score":0.0,"label":"toxic","labels":{"toxic":0.0}}"#).unwrap();
        assert_eq!(v.crossed(&c).collect::<Vec<_>>(), vec![1]);
        assert_eq!(v.decide(&c), (ActionKind::Block, Some("toxic".into())));
    }
}
