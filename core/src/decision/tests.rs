//! The decision natively: tree and text combinations, shadow, tag, block, errors — the bytes
//! the glue writes, edit by edit.

use super::*;
use crate::request::HeaderMap;
use crate::text::TextVerdict;

const TEXT: &str = r#""text":{"cluster":"nlp","labels":{"toxic":{"threshold":0.7,"action":"block"},"spam":{"threshold":0.8,"action":"tag"}}}"#;

/// Every write turned on: the decision in its own header, filter state for access logs.
const ALL_WRITES: &str = r#","headers":{"decision":"x-edgescore-decision"},"filter_state":true"#;

fn decision(extra: &str) -> Decision {
    lean(&format!("{ALL_WRITES}{extra}"))
}

/// The defaults: one header, no filter state.
fn lean(extra: &str) -> Decision {
    let json = format!(r#"{{"hash_key":"0123456789abcdef","models":[{{"artifact":"","threshold":0.5}}]{extra}}}"#);
    let cfg = PluginConfig::parse(json.as_bytes()).unwrap();
    let policy = |name: &str, threshold: f64, action: ActionKind| ModelPolicy {
        name: name.into(),
        id: format!("{name}@v1"),
        shadow: false,
        registry: false,
        threshold,
        output: 0,
        action,
        status: 403,
        body: b"blocked\n".to_vec(),
    };
    Decision::new(&cfg, vec![policy("bot", 0.9, ActionKind::Block), policy("abuse", 0.5, ActionKind::Tag)])
}

fn map(pairs: &[(&str, &str)]) -> Vec<u8> {
    HeaderMap::encode(pairs)
}

fn s(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap()
}

fn edits(e: &Edits<'_>) -> Vec<String> {
    e.iter()
        .map(|e| match e {
            Edit::AddHeader(n, v) => format!("add {}: {}", s(n), s(v)),
            Edit::ReplaceHeader(n, v) => format!("replace {}: {}", s(n), s(v)),
            Edit::RemoveHeader(n) => format!("remove {}", s(n)),
            Edit::SetState(k, v) => format!("state {}: {}", s(k), s(v)),
            Edit::Reply { status, details, body, headers } => {
                let h: Vec<String> = HeaderMap::parse(headers).unwrap().iter().map(|(n, v)| format!("{}={}", s(n), s(v))).collect();
                format!("reply {status} {} {:?} [{}]", s(details), s(body), h.join(","))
            }
        })
        .collect()
}

/// A tree outcome, owned: verdict, edits as text, count, bands, per-mille scores, text hold.
type TreeOutcome = (Verdict, Vec<String>, DecisionCount, Vec<ActionKind>, Vec<Option<u64>>, Option<TextHold>);

fn tree(d: &mut Decision, headers: &[(&str, &str)], scores: &[f32], end_of_stream: bool) -> TreeOutcome {
    let buf = map(headers);
    let h = HeaderMap::parse(&buf).unwrap();
    let v = d.verdict(scores, false);
    let o = d.decide(&h, scores, v, b"", b"", end_of_stream);
    (o.verdict, edits(&o.edits), o.count, o.bands.to_vec(), o.permille.to_vec(), o.text)
}

#[test]
fn allow_writes_scores_decision_and_state() {
    let mut d = decision("");
    let (v, e, count, bands, permille, hold) = tree(&mut d, &[(":method", "GET")], &[0.25, 0.0004], true);
    assert_eq!(v, Verdict { action: ActionKind::Allow, by: None, sampled: false });
    assert_eq!(e, ["add x-edgescore: bot=0.2500;abuse=0.0004", "add x-edgescore-decision: allow", "state edgescore: allow bot=0.2500;abuse=0.0004"]);
    assert_eq!(count, DecisionCount::Allow);
    assert_eq!(bands, [ActionKind::Allow, ActionKind::Allow]);
    assert_eq!(permille, [Some(250), Some(0)]);
    assert_eq!(hold, None);
}

#[test]
fn by_default_one_header_carries_decision_and_scores() {
    let mut d = lean("");
    let (_, e, ..) = tree(&mut d, &[(":method", "GET")], &[0.25, 0.0004], true);
    assert_eq!(e, ["add x-edgescore: allow bot=0.2500;abuse=0.0004"]);
    let (_, e, ..) = tree(&mut d, &[("x-edgescore", "allow")], &[0.95, 0.6], true);
    // A block reply names the decision, never the scores (they would help a client tune its
    // way under the threshold).
    assert_eq!(
        e,
        ["replace x-edgescore: block;model=bot@v1 bot=0.9500;abuse=0.6000", "reply 403 edgescore_block \"blocked\\n\" [x-edgescore=block;model=bot@v1]"]
    );
    assert_eq!(edits(&d.error()), ["replace x-edgescore: error"]);
    let mut d = lean(r#","on_error":"block""#);
    assert_eq!(edits(&d.error()), ["reply 503 edgescore_error \"edgescore: the request could not be scored\\n\" [x-edgescore=error]"]);
    // Filter state alone, and the decision header alone.
    let mut d = lean(r#","filter_state":true"#);
    let (_, e, ..) = tree(&mut d, &[], &[0.1, 0.1], true);
    assert_eq!(e, ["add x-edgescore: allow bot=0.1000;abuse=0.1000", "state edgescore: allow bot=0.1000;abuse=0.1000"]);
    let mut d = lean(r#","headers":{"decision":"x-verdict"}"#);
    let (_, e, ..) = tree(&mut d, &[], &[0.1, 0.1], true);
    assert_eq!(e, ["add x-edgescore: bot=0.1000;abuse=0.1000", "add x-verdict: allow"]);
}

#[test]
fn by_default_a_text_verdict_rewrites_the_one_header() {
    let mut d = lean(&format!(",{TEXT}"));
    let spam = verdict(r#"{"score":0.85,"label":"spam","labels":{"toxic":0.1,"spam":0.85},"model":"m@1"}"#);
    let o = d.decide_text(ActionKind::Allow, b"bot=0.1000;abuse=0.1000", &spam);
    assert_eq!(edits(&o.edits), ["replace x-edgescore-text: score=0.8500;label=spam;model=m@1", "replace x-edgescore: tag;text=spam bot=0.1000;abuse=0.1000"]);
    let toxic = verdict(r#"{"score":0.9,"label":"toxic","labels":{"toxic":0.9}}"#);
    let o = d.decide_text(ActionKind::Allow, b"bot=0.1000;abuse=0.1000", &toxic);
    assert_eq!(edits(&o.edits)[2], "reply 403 edgescore_text_block \"request blocked by edgescore\\n\" [x-edgescore=block;text=toxic]");
    assert_eq!(edits(&d.text_failed(b"error=status")), ["replace x-edgescore-text: error=status"]);
}

#[test]
fn client_copies_are_replaced_not_added() {
    let mut d = decision("");
    let (_, e, ..) = tree(&mut d, &[("x-edgescore", "bot=0"), ("x-edgescore-decision", "allow")], &[0.1, 0.1], true);
    assert_eq!(e[..2], ["replace x-edgescore: bot=0.1000;abuse=0.1000".to_string(), "replace x-edgescore-decision: allow".to_string()]);
}

#[test]
fn tag_and_block_name_the_first_strongest_model() {
    let mut d = decision("");
    let (v, e, count, bands, ..) = tree(&mut d, &[], &[0.2, 0.5], true);
    assert_eq!((v.action, v.by, count), (ActionKind::Tag, Some(1), DecisionCount::Tag));
    assert_eq!(e[1], "add x-edgescore-decision: tag;model=abuse@v1");
    assert_eq!(bands, [ActionKind::Allow, ActionKind::Tag]);
    // Both above threshold: block beats tag, and the reply carries the decision header.
    let (v, e, count, bands, ..) = tree(&mut d, &[], &[0.95, 0.99], true);
    assert_eq!((v.action, v.by, count), (ActionKind::Block, Some(0), DecisionCount::Block));
    assert_eq!(bands, [ActionKind::Block, ActionKind::Tag]);
    assert_eq!(
        e,
        [
            "add x-edgescore: bot=0.9500;abuse=0.9900",
            "add x-edgescore-decision: block;model=bot@v1",
            "state edgescore: block;model=bot@v1 bot=0.9500;abuse=0.9900",
            "reply 403 edgescore_block \"blocked\\n\" [x-edgescore-decision=block;model=bot@v1]",
        ]
    );
}

#[test]
fn shadow_mode_never_replies() {
    let mut d = decision(r#","mode":"shadow""#);
    let (v, e, count, ..) = tree(&mut d, &[], &[0.95, 0.0], true);
    assert_eq!((v.action, count), (ActionKind::Block, DecisionCount::ShadowBlock));
    assert_eq!(e[1], "add x-edgescore-decision: block;model=bot@v1;shadow");
    assert!(e.iter().all(|e| !e.starts_with("reply")));
}

#[test]
fn metric_opt_outs_empty_the_bands_and_histograms() {
    let mut d = decision(r#","metrics":{"model_counters":false,"score_histograms":false}"#);
    let (_, _, _, bands, permille, _) = tree(&mut d, &[], &[0.95, f32::NAN], true);
    assert!(bands.is_empty());
    assert_eq!(permille, [None, None]);
    let mut d = decision("");
    let (_, _, _, _, permille, _) = tree(&mut d, &[], &[1.7, f32::NAN], true);
    assert_eq!(permille, [Some(1000), None]);
}

#[test]
fn sampled_requests_log_their_features() {
    let mut d = decision("");
    let buf = map(&[]);
    let h = HeaderMap::parse(&buf).unwrap();
    let v = d.verdict(&[0.1, 0.1], true);
    let o = d.decide(&h, &[0.1, 0.1], v, br#"{"v":1}"#, b"", true);
    assert_eq!(edits(&o.edits)[3], r#"state edgescore.features: {"v":1}"#);
}

#[test]
fn errors_follow_on_error() {
    let mut d = decision("");
    assert_eq!(edits(&d.error()), ["state edgescore: error", "replace x-edgescore-decision: error"]);
    let mut d = decision(r#","on_error":"block""#);
    assert_eq!(
        edits(&d.error()),
        ["state edgescore: error", "reply 503 edgescore_error \"edgescore: the request could not be scored\\n\" [x-edgescore-decision=error]"]
    );
}

#[test]
fn text_path_holds_qualifying_bodies_only() {
    let mut d = decision(&format!(",{TEXT}"));
    let post = [(":method", "POST"), ("content-type", "application/json"), ("x-edgescore-text", "score=0;label=ok")];
    let (_, e, _, _, _, hold) = tree(&mut d, &post, &[0.1, 0.1], false);
    assert_eq!(hold, Some(TextHold { kind: BodyKind::Json, tree: ActionKind::Allow }));
    // The client's own text verdict never goes upstream.
    assert_eq!(e[3], "remove x-edgescore-text");
    // No body, a GET, or an image: no hold.
    assert_eq!(tree(&mut d, &post, &[0.1, 0.1], true).5, None);
    assert_eq!(tree(&mut d, &[(":method", "GET"), ("content-type", "text/plain")], &[0.1, 0.1], false).5, None);
    assert_eq!(tree(&mut d, &[(":method", "POST"), ("content-type", "image/png")], &[0.1, 0.1], false).5, None);
    // A block in enforce mode answers at once: no text call.
    assert_eq!(tree(&mut d, &post, &[0.95, 0.1], false).5, None);
    // Tree-gated: only what the trees tagged is sent.
    let mut d = decision(&format!(",{}", TEXT.replace(r#""labels""#, r#""combine":"tree_gated","labels""#)));
    assert_eq!(tree(&mut d, &post, &[0.1, 0.1], false).5, None);
    assert_eq!(tree(&mut d, &post, &[0.1, 0.6], false).5, Some(TextHold { kind: BodyKind::Json, tree: ActionKind::Tag }));
}

fn verdict(json: &str) -> TextVerdict {
    TextVerdict::parse(json.as_bytes()).unwrap()
}

#[test]
fn text_verdict_blocks_tags_or_leaves_the_tree_decision() {
    let mut d = decision(&format!(",{TEXT}"));
    let toxic = verdict(r#"{"score":0.9,"label":"toxic","labels":{"toxic":0.9,"spam":0.1},"model":"m@1"}"#);
    let o = d.decide_text(ActionKind::Allow, b"bot=0.1000;abuse=0.1000", &toxic);
    assert_eq!(o.raised, Some(Raised::Block));
    assert_eq!(o.crossed, [1]); // labels in order: spam, toxic
    assert_eq!(
        edits(&o.edits),
        [
            "replace x-edgescore-text: score=0.9000;label=toxic;model=m@1",
            "state edgescore.text: score=0.9000;label=toxic;model=m@1",
            "replace x-edgescore-decision: block;text=toxic",
            "state edgescore: block;text=toxic bot=0.1000;abuse=0.1000",
            "reply 403 edgescore_text_block \"request blocked by edgescore\\n\" [x-edgescore-decision=block;text=toxic]",
        ]
    );
    let spam = verdict(r#"{"score":0.85,"label":"spam","labels":{"toxic":0.1,"spam":0.85}}"#);
    let o = d.decide_text(ActionKind::Allow, b"s", &spam);
    assert_eq!(o.raised, Some(Raised::Tag));
    assert_eq!(edits(&o.edits)[2..], ["replace x-edgescore-decision: tag;text=spam".to_string(), "state edgescore: tag;text=spam s".to_string()]);
    // A verdict never weakens the tree decision: a tagged request stays tagged.
    let o = d.decide_text(ActionKind::Tag, b"s", &spam);
    assert_eq!((o.raised, o.edits.len()), (None, 2));
    let ok = verdict(r#"{"score":0.01,"label":"ok","labels":{"ok":0.99}}"#);
    let o = d.decide_text(ActionKind::Allow, b"s", &ok);
    assert_eq!((o.raised, o.crossed.len(), o.edits.len()), (None, 0, 2));
}

#[test]
fn text_block_in_shadow_mode_is_marked_not_enforced() {
    let mut d = decision(&format!(r#","mode":"shadow",{TEXT}"#));
    let toxic = verdict(r#"{"score":0.9,"label":"toxic","labels":{"toxic":0.9}}"#);
    let o = d.decide_text(ActionKind::Allow, b"s", &toxic);
    assert_eq!(o.raised, Some(Raised::ShadowBlock));
    assert_eq!(edits(&o.edits)[2], "replace x-edgescore-decision: block;text=toxic;shadow");
    assert!(o.edits.reply().is_none());
}

#[test]
fn text_failures_follow_fail_open() {
    let mut d = decision(&format!(",{TEXT}"));
    assert_eq!(edits(&d.text_failed(b"error=status")), ["replace x-edgescore-text: error=status", "state edgescore.text: error=status"]);
    let mut d = decision(&format!(",{}", TEXT.replace(r#""cluster""#, r#""fail_open":false,"cluster""#)));
    let e = edits(&d.text_failed(b"error=unavailable"));
    assert_eq!(e[2], "reply 503 edgescore_text_unavailable \"edgescore: the text of the request could not be scored\\n\" [x-edgescore-decision=error]");
}

#[test]
fn fixed4_is_fmt() {
    fn fixed4(x: f32) -> String {
        let mut v = Vec::new();
        push_fixed4(&mut v, x);
        String::from_utf8(v).unwrap()
    }
    let mut xs: Vec<f32> = vec![0.0, -0.0, 1.0, 0.5, 0.99995, 0.00005, 0.00015, 0.00025, 1e-8, 0.9999999, 12345.678, 1e10, 9.9999e10, 1e11, 3e12, 1e20, -0.3, -1e-9, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN_POSITIVE, 1e-45];
    // Exact ties at the fourth decimal (k/32, k odd) and their neighbours.
    for k in 0..4096u32 {
        let t = k as f32 / 32.0;
        xs.extend([t, f32::from_bits(t.to_bits() + 1), f32::from_bits(t.to_bits().saturating_sub(1))]);
    }
    // Every 9973rd f32 bit pattern: all magnitudes, both signs, NaNs.
    xs.extend((0..u32::MAX / 9973).map(|i| f32::from_bits(i * 9973)));
    for x in xs {
        assert_eq!(fixed4(x), format!("{x:.4}"), "{x:e} ({:#x})", x.to_bits());
    }
}

/// A verified agent is named in the decision; `allow` lets it through whatever the models
/// say, `tag` leaves the models' decision as it is.
#[test]
fn verified_agent_allow_or_tag() {
    let section = |action: &str| format!(r#","verified_bots":{{"directories":[{{"name":"crawler","cluster":"bots"}}],"action":"{action}"}}"#);
    let headers = map(&[(":path", "/")]);
    let headers = HeaderMap::parse(&headers).unwrap();
    let scores = [0.95f32, 0.1];
    for (action, agent, want) in [
        ("tag", Some("crawler"), "block;model=bot@v1;verified_bot=crawler"),
        ("allow", Some("crawler"), "allow;verified_bot=crawler"),
        ("allow", None, "block;model=bot@v1"),
    ] {
        let mut d = decision(&section(action));
        let v = d.verdict_for(&scores, false, agent);
        let o = d.decide(&headers, &scores, v, b"", b"", true);
        let got = edits(&o.edits);
        assert_eq!(got[..2], ["add x-edgescore: bot=0.9500;abuse=0.1000".to_string(), format!("add x-edgescore-decision: {want}")], "{action} {agent:?}");
        assert_eq!(o.edits.reply().is_some(), action == "tag" || agent.is_none(), "{action} {agent:?}");
    }
    // Without the section, an agent is not named.
    let mut d = decision("");
    let v = d.verdict_for(&scores, false, Some("crawler"));
    assert!(!s(d.decide(&headers, &scores, v, b"", b"", true).edits.iter().find_map(|e| match e {
        Edit::AddHeader(n, v) if n == b"x-edgescore-decision" => Some(v),
        _ => None,
    }).unwrap()).contains("verified_bot"));
}
