use super::*;
use xxhash_rust::xxh3::xxh3_64;

/// A replayed trace: (millisecond, client, path, status).
fn trace(seed: u64, clients: u64, seconds: u64) -> Vec<(u64, u64, u64, u16)> {
    let mut state = seed;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::new();
    for c in 0..clients {
        // Client c asks about every 50·(c+1) ms on average, over 3 + c % 40 paths; a third of
        // the clients get many 403s and 404s.
        let mut t = next() % 1000;
        let paths = 3 + c % 40;
        while t < seconds * 1000 {
            let r = next();
            let status = match (c % 3, r % 10) {
                (0, 0..=3) => 403,
                (0, 4..=5) => 404,
                (_, 0) => 404,
                _ => 200,
            };
            out.push((t, c, r % paths, status));
            t += 1 + next() % (100 * (c + 1));
        }
    }
    out.sort();
    out
}

fn key(c: u64) -> u64 {
    xxh3_64(format!("10.0.0.{c}").as_bytes())
}

fn path_hash(p: u64) -> u64 {
    xxh3_64(format!("/p/{p}").as_bytes())
}

/// Every request's velocity against the documented definitions, computed exactly from the trace.
#[test]
fn counts_match_their_definitions_on_a_replayed_trace() {
    let events = trace(0x5eed, 24, 300);
    let mut table = Table::new(1024);
    for (n, &(ms, c, p, status)) in events.iter().enumerate() {
        let now_s = (ms / 1000) as u32;
        let v = table.request(key(c), path_hash(p), now_s);
        // Each answer comes back within the second of its request in this replay.
        let mine = events[..=n].iter().filter(|e| e.1 == c);
        let in_seconds = |k: u64| mine.clone().filter(|e| e.0 / 1000 + k > ms / 1000).count() as f32;
        assert_eq!(v.requests_10s, in_seconds(10), "request {n}");
        assert_eq!(v.requests_60s, in_seconds(60), "request {n}");
        let sliding_10s = mine.clone().filter(|e| e.0 + 10_000 > ms).count() as f32;
        assert!(v.requests_10s <= sliding_10s, "never above the exact sliding window");
        let oldest_second = mine.clone().filter(|e| e.0 + 10_000 > ms && e.0 / 1000 + 10 <= ms / 1000).count() as f32;
        assert_eq!(sliding_10s - v.requests_10s, oldest_second, "short by the oldest second's requests only");

        let bucket = |e: &&(u64, u64, u64, u16)| e.0 / 10_000 + 6 > ms / 10_000;
        let in_buckets: Vec<_> = mine.clone().filter(bucket).collect();
        let requests = in_buckets.len() as f32;
        // Every earlier request of the client has been answered; this one not yet.
        let answered = &in_buckets[..in_buckets.len() - 1];
        let share = |pred: &dyn Fn(u16) -> bool| answered.iter().filter(|e| pred(e.3)).count() as f32 / requests;
        assert!((v.share_4xx_60s - share(&|s| (400..500).contains(&s))).abs() < 1e-6, "request {n}: {v:?}");
        assert!((v.share_403_60s - share(&|s| s == 403)).abs() < 1e-6, "request {n}: {v:?}");

        let mut distinct: Vec<u64> = in_buckets.iter().map(|e| e.2).collect();
        distinct.sort();
        distinct.dedup();
        let exact = distinct.len() as f32;
        let bits = distinct.iter().map(|&p| 1u64 << (path_hash(p) >> 58)).fold(0, |a, b| a | b);
        assert_eq!(v.paths_60s, linear_count(bits), "the estimate over this bucket set's paths");
        assert!((v.paths_60s - exact).abs() <= 2.0f32.max(0.35 * exact), "request {n}: {} paths estimated {}", exact, v.paths_60s);

        table.answer(key(c), status, now_s);
    }
    assert_eq!(table.evictions(), 0);
}

/// Linear counting's error on a 64-bit bitmap, over many random path sets: the bounds the
/// module's documentation states.
#[test]
fn distinct_paths_error_bound() {
    for n in [1usize, 5, 10, 20, 40, 64] {
        let mut sq = 0.0f64;
        let runs = 2000;
        for run in 0..runs {
            let bits = (0..n).map(|i| 1u64 << (xxh3_64(format!("{run}/{i}").as_bytes()) >> 58)).fold(0, |a, b| a | b);
            let e = f64::from(linear_count(bits)) / n as f64 - 1.0;
            sq += e * e;
        }
        let rse = (sq / runs as f64).sqrt();
        let bound = if n <= 20 { 0.10 } else { 0.15 };
        assert!(rse < bound, "{n} paths: relative standard error {rse:.3}");
    }
}

/// More clients than the table holds: evictions are counted and no client is ever credited
/// with another's requests.
#[test]
fn eviction_undercounts_never_overcounts() {
    let events = trace(7, 200, 60);
    let mut table = Table::new(16);
    for (n, &(ms, c, p, _)) in events.iter().enumerate() {
        let v = table.request(key(c), path_hash(p), (ms / 1000) as u32);
        let exact = events[..=n].iter().filter(|e| e.1 == c && e.0 / 1000 + 60 > ms / 1000).count() as f32;
        assert!(v.requests_60s >= 1.0 && v.requests_60s <= exact, "request {n}");
    }
    assert!(table.evictions() > 0);
    assert_eq!(table.capacity(), 16);
}

/// A client that comes back after a silence longer than the windows starts from zero.
#[test]
fn silence_ages_everything_out() {
    let mut table = Table::new(64);
    for s in 0..30 {
        table.request(1, 2, s);
        table.answer(1, 403, s);
    }
    let v = table.request(1, 3, 30 + 70);
    assert_eq!(v, Velocity { requests_10s: 1.0, requests_60s: 1.0, paths_60s: linear_count(1 << (3u64 >> 58)), share_4xx_60s: 0.0, share_403_60s: 0.0 });
}
