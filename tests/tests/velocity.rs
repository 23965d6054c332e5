//! The per-client velocity features through the scorer: a replayed trace of several clients,
//! each request counted in the worker's `Clients` and scored, gives the features the exact
//! counts (requests per whole second, answers per 10-second bucket) and the table's path
//! estimate; the `velocity` section is required by a model that reads them.

use edgescore_core::features::hash::HashKey;
use edgescore_core::request::{HeaderMap, Request};
use edgescore_core::velocity::{Clients, Table};
use edgescore_core::{PluginConfig, Scorer};
use edgescore_tests::filter_models::{artifact, base64, velocity_model, VELOCITY_FEATURES};
use edgescore_tests::random_ir::test_seed;

const HASH_KEY: &str = "test-key-0123456789";

fn config(velocity: &str) -> PluginConfig {
    let burst = base64(&artifact(&velocity_model("burst", 50.0)));
    let json = format!(r#"{{"hash_key":"{HASH_KEY}","models":[{{"artifact":"{burst}","threshold":0.5,"action":"tag"}}]{velocity}}}"#);
    PluginConfig::parse(json.as_bytes()).unwrap()
}

/// (second, client, path, status), in time order.
fn trace(seed: u64) -> Vec<(u32, usize, usize, u16)> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::new();
    for s in 0..200u32 {
        for _ in 0..next() % 12 {
            let c = (next() % 5) as usize;
            let status = match next() % 10 {
                0..=1 => 403,
                2 => 404,
                _ => 200,
            };
            out.push((1_700_000_000 + s, c, (next() % (2 + c as u64 * 3)) as usize, status));
        }
    }
    out
}

#[test]
fn features_are_the_clients_counts_on_a_replayed_trace() {
    let seed = test_seed(46);
    println!("EDGESCORE_TEST_SEED={seed}");
    let cfg = config(r#","velocity":{"key":"address","capacity":64}"#);
    let mut scorer = Scorer::new(&cfg, 1).unwrap();
    assert!(scorer.properties().source_address, "the client key's address is fetched");
    assert_eq!((scorer.velocity().requests, scorer.velocity().answers), (true, true));
    let slots: Vec<usize> = VELOCITY_FEATURES.iter().map(|f| scorer.slots().iter().position(|s| s.name == *f).unwrap()).collect();
    let mut clients = Clients::carry(None, &cfg).unwrap();
    // The reference: the same table, keyed by client number, and exact counts kept by hand.
    let mut table = Table::new(64);
    let hash = HashKey::new(HASH_KEY.as_bytes());
    let mut history: Vec<(u32, usize, u16)> = Vec::new();
    let trace = trace(seed);
    for (i, &(now, c, p, status)) in trace.iter().enumerate() {
        let (path, address) = (format!("/p/{p}?q={i}"), format!("10.0.0.{c}:{}", 1000 + i));
        let buf = HeaderMap::encode(&[(":method", "GET"), (":path", path.as_str())]);
        let mut req = Request::new(HeaderMap::parse(&buf).unwrap());
        req.source_address = Some(address.as_bytes());
        let (client, v) = clients.request(&req, now).unwrap();
        req.velocity = Some(v);
        scorer.score(&req).unwrap();
        let got: Vec<f32> = slots.iter().map(|&s| scorer.features()[s]).collect();

        let want = table.request((c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15), hash.hash(format!("/p/{p}").as_bytes()), now);
        let requests = |span: u32| (history.iter().filter(|(t, h, _)| *h == c && now - t < span).count() + 1) as f32;
        let bucket = now / 10 * 10;
        let recent: Vec<u16> = history.iter().filter(|(t, h, _)| *h == c && *t >= bucket - 50).map(|e| e.2).collect();
        let share = |f: fn(u16) -> bool| recent.iter().filter(|&&s| f(s)).count() as f32 / (recent.len() + 1) as f32;
        let exact = [requests(10), requests(60), want.paths_60s, share(|s| (400..500).contains(&s)), share(|s| s == 403)];
        assert_eq!(got, exact, "request {i} of client {c} at {now} (seed {seed})");
        assert_eq!(want.requests_60s, exact[1], "the reference table agrees (seed {seed})");

        clients.answer(client, status, now);
        table.answer((c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15), status, now);
        history.push((now, c, status));
    }
    assert!(trace.len() > 500);
}

#[test]
fn a_request_without_a_client_key_has_missing_counts() {
    let cfg = config(r#","velocity":{"key":"header:x-api-key"}"#);
    let mut scorer = Scorer::new(&cfg, 1).unwrap();
    assert!(!scorer.properties().source_address, "a header key needs no address");
    let mut clients = Clients::carry(None, &cfg).unwrap();
    let buf = HeaderMap::encode(&[(":path", "/")]);
    let req = Request::new(HeaderMap::parse(&buf).unwrap());
    assert!(clients.request(&req, 5).is_none());
    scorer.score(&req).unwrap();
    assert!(scorer.features().iter().all(|x| x.is_nan()), "{:?}", scorer.features());
}

#[test]
fn a_model_reading_them_needs_the_velocity_section() {
    let err = Scorer::new(&config(""), 1).err().expect("refused").to_string();
    assert_eq!(err, "velocity: required: a model or the feature log reads `client_requests_10s`, a client's count");
}
