//! The hot path never touches the global allocator: scoring and explaining every row of every
//! fixture model (and the reference bot model), and a scorer's decisions with reasons, allocate
//! 0 blocks and 0 bytes, as dhat counts them.

use edgescore_tests::fixtures;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[test]
fn scoring_allocates_nothing() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let mut prepared = Vec::new();
    for f in fixtures("") {
        let model = f.compile().unwrap().with_explainer();
        let rows = f.rows(&model).unwrap();
        // The same model with QuickScorer's bitvectors on every row they can score.
        let scan = model.clone().with_bitvectors_on_every_row();
        prepared.push((format!("{} (bitvectors)", f.name), scan, rows.clone()));
        prepared.push((f.name, model, rows));
    }
    assert!(prepared.len() >= 10, "fixtures missing: found {}", prepared.len());
    let scanned = prepared.iter().filter(|p| p.1.ensemble().uses_bitvectors()).count();
    assert!(scanned >= 10, "only {scanned} fixtures scored through bitvectors");
    let mut out32 = vec![0f32; edgescore_core::MAX_OUTPUTS];
    let mut out64 = vec![0f64; edgescore_core::MAX_OUTPUTS];

    let before = dhat::HeapStats::get();
    let mut checksum = 0f64;
    for (_, model, rows) in &prepared {
        let e = model.ensemble();
        for row in rows {
            e.score(row, &mut out32).unwrap();
            e.score_f64(row, &mut out64).unwrap();
            e.margins(row, &mut out64).unwrap();
            // Linear leaves on infinite features give infinite or NaN scores: count only the
            // finite ones (the sum only keeps the calls from being optimised away).
            checksum += [out32[0] as f64, out64[0]].iter().filter(|v| v.is_finite()).sum::<f64>();
        }
    }
    let after_models = dhat::HeapStats::get();
    dhat::assert_eq!(after_models.total_blocks - before.total_blocks, 0);
    dhat::assert_eq!(after_models.total_bytes - before.total_bytes, 0);

    // Path attribution (per-request reasons) on every row: the credits buffer is the caller's.
    let mut credits = vec![0f64; prepared.iter().map(|p| p.1.ensemble().explain_len()).max().unwrap_or(0)];
    let before_explain = dhat::HeapStats::get();
    for (_, model, rows) in &prepared {
        let e = model.ensemble();
        for row in rows {
            e.explain(row, &mut credits).unwrap();
            checksum += credits.iter().filter(|v| v.is_finite()).sum::<f64>();
        }
    }
    let after_explain = dhat::HeapStats::get();
    dhat::assert_eq!(after_explain.total_blocks - before_explain.total_blocks, 0);
    dhat::assert_eq!(after_explain.total_bytes - before_explain.total_bytes, 0);

    // The multi-model path: one shared vector, every model gathers its own features.
    let first = &prepared[0];
    let names: Vec<String> = {
        let e = first.1.ensemble();
        (0..e.n_features()).rev().map(|i| e.feature_name(i).to_string()).collect()
    };
    let mut set = edgescore_core::ModelSet::new(names);
    set.push(first.1.as_bytes()).unwrap();
    let shared: Vec<f32> = first.2[0].iter().rev().copied().collect();
    let before_set = dhat::HeapStats::get();
    for _ in 0..100 {
        set.score(0, &shared, &mut out32).unwrap();
        checksum += out32[0] as f64;
    }
    let after = dhat::HeapStats::get();
    dhat::assert_eq!(after.total_blocks - before_set.total_blocks, 0);
    dhat::assert_eq!(after.total_bytes - before_set.total_bytes, 0);

    // A whole decision with reasons: blocked requests (fewer than 4 headers) and sampled ones,
    // reasons in filter state and in the feature log line.
    let mut ir = edgescore_tests::filter_models::step_model("bot", "header_count", 4.0, 4.0);
    ir.covers = Some(edgescore_compile::ir::Covers::equal(&ir.trees));
    let bot = edgescore_tests::filter_models::base64(&edgescore_tests::filter_models::artifact(&ir));
    let config = format!(
        r#"{{"hash_key":"test-key-0123456789","filter_state":true,"feature_log":{{"sample_rate":1}},"explain":{{"sample":0.5,"top_k":3}},"models":[{{"artifact":"{bot}","threshold":0.9,"action":"block"}}]}}"#
    );
    let mut scorer = edgescore_core::Scorer::new(&edgescore_core::PluginConfig::parse(config.as_bytes()).unwrap(), 1).unwrap();
    let few = edgescore_core::HeaderMap::encode(&[(":method", "GET"), (":path", "/"), (":authority", "a")]);
    let many = edgescore_core::HeaderMap::encode(&[(":method", "GET"), (":path", "/x"), (":authority", "a"), ("user-agent", "curl/8"), ("accept", "*/*"), ("accept-language", "en"), ("accept-encoding", "gzip"), ("cookie", "a=b")]);
    let (few, many) = (edgescore_core::HeaderMap::parse(&few).unwrap(), edgescore_core::HeaderMap::parse(&many).unwrap());
    let mut explained = 0;
    let before_scorer = dhat::HeapStats::get();
    for i in 0..200 {
        let req = edgescore_core::Request::new(if i % 2 == 0 { few } else { many });
        let outcome = scorer.decide(&req, true).unwrap();
        explained += outcome.edits.iter().any(|e| matches!(e, edgescore_core::decision::Edit::SetState(k, _) if k == edgescore_core::decision::STATE_REASONS)) as usize;
    }
    let after_scorer = dhat::HeapStats::get();
    dhat::assert_eq!(after_scorer.total_blocks - before_scorer.total_blocks, 0);
    dhat::assert_eq!(after_scorer.total_bytes - before_scorer.total_bytes, 0);
    assert!(explained > 100 && explained < 200, "{explained} of 200 requests explained");

    // A client's counts: the request counted in the worker's table (new clients, known ones,
    // evictions from a full table), the answers, and the decision that reads them.
    let burst = edgescore_tests::filter_models::base64(&edgescore_tests::filter_models::artifact(&edgescore_tests::filter_models::velocity_model("burst", 5.0)));
    let config = format!(
        r#"{{"hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1}},"models":[{{"artifact":"{burst}","threshold":0.5,"action":"block"}}],"velocity":{{"key":"cookie:sid","capacity":16}}}}"#
    );
    let cfg = edgescore_core::PluginConfig::parse(config.as_bytes()).unwrap();
    let mut scorer = edgescore_core::Scorer::new(&cfg, 1).unwrap();
    let mut clients = edgescore_core::velocity::Clients::carry(None, &cfg).unwrap();
    let maps: Vec<Vec<u8>> = (0..64).map(|c| edgescore_core::HeaderMap::encode(&[(":path", format!("/p/{}", c % 7)), ("cookie", format!("a=1; sid=client-{c}"))])).collect();
    let maps: Vec<edgescore_core::HeaderMap> = maps.iter().map(|m| edgescore_core::HeaderMap::parse(m).unwrap()).collect();
    let before_velocity = dhat::HeapStats::get();
    let mut blocked = 0;
    for i in 0..2000u32 {
        let mut req = edgescore_core::Request::new(maps[(i as usize * 7) % if i < 1000 { 8 } else { 64 }]);
        let (client, v) = clients.request(&req, 1_000 + i / 50).unwrap();
        req.velocity = Some(v);
        let outcome = scorer.decide(&req, true).unwrap();
        blocked += outcome.edits.iter().any(|e| matches!(e, edgescore_core::decision::Edit::Reply { .. })) as usize;
        clients.answer(client, if i % 3 == 0 { 404 } else { 200 }, 1_000 + i / 50);
    }
    let after_velocity = dhat::HeapStats::get();
    dhat::assert_eq!(after_velocity.total_blocks - before_velocity.total_blocks, 0);
    dhat::assert_eq!(after_velocity.total_bytes - before_velocity.total_bytes, 0);
    assert!(blocked > 0 && clients.take_evictions() > 0, "bursts blocked ({blocked}) and clients evicted");
    // The TLS fingerprint features, from the headers Envoy writes: well-formed, malformed,
    // absent; `tls_ua_consistent` for a user-agent its table lists and one it does not.
    let tls = edgescore_tests::filter_models::base64(&edgescore_tests::filter_models::artifact(&edgescore_tests::filter_models::tls_model("tls")));
    let config = format!(r#"{{"hash_key":"test-key-0123456789","feature_log":{{"sample_rate":1}},"models":[{{"artifact":"{tls}","threshold":0.5,"action":"block"}}]}}"#);
    let mut scorer = edgescore_core::Scorer::new(&edgescore_core::PluginConfig::parse(config.as_bytes()).unwrap(), 1).unwrap();
    let chrome = edgescore_core::HeaderMap::encode(&[(":method", "GET"), (":path", "/"), ("user-agent", "Mozilla/5.0 Chrome/143.0.0.0 Safari/537.36"), ("x-edgescore-ja4", "t13d1516h2_8daaf6152771_d8a2da3f94cd"), ("x-edgescore-ja3", "e7d705a3286e19ea42f587b344ee6865")]);
    let bad = edgescore_core::HeaderMap::encode(&[(":method", "GET"), (":path", "/"), ("user-agent", "curl/8.5.0"), ("x-edgescore-ja4", "t13d1516h2_8daaf6152771"), ("x-edgescore-ja3", "-")]);
    let maps = [edgescore_core::HeaderMap::parse(&chrome).unwrap(), edgescore_core::HeaderMap::parse(&bad).unwrap(), few];
    let mut blocked = 0;
    let before_tls = dhat::HeapStats::get();
    for i in 0..300 {
        let mut req = edgescore_core::Request::new(maps[i % 3]);
        req.tls_version = Some(b"TLSv1.3");
        let outcome = scorer.decide(&req, true).unwrap();
        blocked += (outcome.verdict.action == edgescore_core::ActionKind::Block) as usize;
        if i == 0 {
            let consistent = scorer.slots().iter().position(|s| s.name == "tls_ua_consistent").unwrap();
            assert_eq!(scorer.features()[consistent], 1.0, "Chrome's JA4 and user-agent");
        }
    }
    let after_tls = dhat::HeapStats::get();
    dhat::assert_eq!(after_tls.total_blocks - before_tls.total_blocks, 0);
    dhat::assert_eq!(after_tls.total_bytes - before_tls.total_bytes, 0);
    assert_eq!(blocked, 200, "the requests without a well-formed fingerprint are blocked, Chrome's 15 ciphers pass");
    // Signed requests (`verified_bots`, action allow): the worker's check, then the decision
    // that names the agent; verified, expired, hostile and unsigned requests. Not a forged one
    // here: ed25519-dalek boxes its verification error when its `std` feature is on, which the
    // CLI turns on in this workspace build; the .wasm and the native module build it without
    // (tests/tests/filter_alloc.rs and tests/test_native.py count forged signatures there).
    use edgescore_tests::signed;
    let cfg = edgescore_core::PluginConfig::parse(edgescore_tests::filter_models::bots_config("allow").as_bytes()).unwrap();
    let mut scorer = edgescore_core::Scorer::new(&cfg, 1).unwrap();
    let mut bots = edgescore_core::signatures::Bots::new(&cfg).unwrap();
    let crawler = signed::key(7);
    let keyid = signed::keyid(&crawler);
    bots.set_directory(std::sync::Arc::new(edgescore_core::signatures::Directory::from_jwks("crawler", signed::jwks(&crawler).as_bytes()).unwrap()));
    let now = 1_767_225_600;
    let huge = format!("sig1=(\"@authority\");tag=\"{}\"", "a".repeat(10_000));
    let signed_maps: Vec<Vec<u8>> = [
        signed::headers(&crawler, &keyid, "a", now - 5, now + 55).to_vec(),
        signed::headers(&crawler, &keyid, "a", now - 600, now - 300).to_vec(),
        vec![("signature-input".to_string(), huge), ("signature".to_string(), "sig1=:AAAA:".to_string())],
        Vec::new(),
    ]
    .into_iter()
    .map(|extra| edgescore_core::HeaderMap::encode(&[vec![(":authority".to_string(), "a".to_string()), (":path".to_string(), "/".to_string())], extra].concat()))
    .collect();
    let maps: Vec<edgescore_core::HeaderMap> = signed_maps.iter().map(|m| edgescore_core::HeaderMap::parse(m).unwrap()).collect();
    let mut allowed = 0;
    let before_bots = dhat::HeapStats::get();
    for i in 0..500 {
        let mut req = edgescore_core::Request::new(maps[i % maps.len()]);
        req.signature = bots.check(&req.headers, now);
        let outcome = scorer.decide(&req, true).unwrap();
        allowed += (outcome.verdict.action == edgescore_core::ActionKind::Allow) as usize;
    }
    let after_bots = dhat::HeapStats::get();
    dhat::assert_eq!(after_bots.total_blocks - before_bots.total_blocks, 0);
    dhat::assert_eq!(after_bots.total_bytes - before_bots.total_bytes, 0);
    assert_eq!((allowed, bots.take_counts().verified), (125, 125), "the crawler's requests are allowed, the rest blocked");
    assert!(checksum.is_finite());
}
