//! Per-client velocity: how often a client asks, how many distinct paths, how many of its
//! answers were 4xx or 403, over the last 10 and 60 seconds. One [`Table`] per worker, of a
//! capacity fixed when it is built; a request touches one entry and allocates nothing.
//!
//! What the counts are, exactly (the bounds `tests.rs` checks against exact counts):
//! - `requests_10s`, `requests_60s`: the client's requests in the current whole second and the
//!   9 (59) before it, this one included — between 9 and 10 (59 and 60) seconds of history, so
//!   never more than an exact sliding window and short of it by at most the requests of the
//!   one second it starts in;
//! - `paths_60s`: distinct paths (without the query) in the current 10-second bucket and the 5
//!   before it (50 to 60 seconds), estimated by linear counting on a 64-bit bitmap per bucket
//!   (`−m ln(1 − k/m)` for `k` of `m` bits set: 1.008 for one path, 2.03 for two, never the
//!   count exactly), a relative standard error under 10 % up to 20 paths and under 15 % up to
//!   64, saturating at [`PATHS_SATURATED`];
//! - `share_4xx_60s`, `share_403_60s`: answers 4xx (403) over requests, same buckets.
//!
//! A client is found by a 64-bit fingerprint of its key; a full probe window evicts the entry
//! seen longest ago, whose client starts again from zero if it returns (counted in
//! [`Table::evictions`]). Counts never include another client's requests, short of a 64-bit
//! fingerprint collision.

mod client;
#[cfg(test)]
mod tests;

pub use client::Clients;

/// Entries a fingerprint may occupy (linear probing over this window).
const PROBE: usize = 8;
/// One-second slots for the request counts.
const SECONDS: usize = 64;
/// Ten-second buckets for paths and answer classes (the 60-second window uses 6).
const BUCKETS: usize = 8;
const BUCKET_S: u32 = 10;
/// Linear counting's estimate when every bit of the 6 bitmaps' union is set.
pub const PATHS_SATURATED: f32 = 266.0;

/// Bytes of one table entry: a table of `capacity` entries takes `capacity × ENTRY_BYTES`.
pub const ENTRY_BYTES: usize = core::mem::size_of::<Entry>();

/// The velocity features of one request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Velocity {
    pub requests_10s: f32,
    pub requests_60s: f32,
    pub paths_60s: f32,
    pub share_4xx_60s: f32,
    pub share_403_60s: f32,
}

#[derive(Clone, Copy)]
struct Entry {
    /// 0: empty.
    fingerprint: u64,
    /// The second of the last request or answer counted.
    last_s: u32,
    per_second: [u16; SECONDS],
    /// Per 10-second bucket: requests, 4xx answers, 403 answers, and the paths' bitmap.
    requests: [u16; BUCKETS],
    answers_4xx: [u16; BUCKETS],
    answers_403: [u16; BUCKETS],
    paths: [u64; BUCKETS],
}

const EMPTY: Entry = Entry { fingerprint: 0, last_s: 0, per_second: [0; SECONDS], requests: [0; BUCKETS], answers_4xx: [0; BUCKETS], answers_403: [0; BUCKETS], paths: [0; BUCKETS] };

impl Entry {
    /// Clears the slots and buckets that `now_s` leaves behind since `last_s`.
    fn age(&mut self, now_s: u32) {
        let last = self.last_s;
        if now_s <= last {
            return;
        }
        let gone_s = (now_s - last).min(SECONDS as u32);
        for s in 1..=gone_s {
            self.per_second[(last.wrapping_add(s)) as usize % SECONDS] = 0;
        }
        let (b0, b1) = (last / BUCKET_S, now_s / BUCKET_S);
        for b in 1..=(b1 - b0).min(BUCKETS as u32) {
            let i = (b0 + b) as usize % BUCKETS;
            self.requests[i] = 0;
            self.answers_4xx[i] = 0;
            self.answers_403[i] = 0;
            self.paths[i] = 0;
        }
        self.last_s = now_s;
    }

    fn velocity(&self, now_s: u32) -> Velocity {
        let window = |n: u32| (0..n).map(|k| u32::from(self.per_second[now_s.wrapping_sub(k) as usize % SECONDS])).sum::<u32>() as f32;
        let b = now_s / BUCKET_S;
        let (mut requests, mut e4, mut e403, mut paths) = (0u32, 0u32, 0u32, 0u64);
        for k in 0..6 {
            let i = b.wrapping_sub(k) as usize % BUCKETS;
            requests += u32::from(self.requests[i]);
            e4 += u32::from(self.answers_4xx[i]);
            e403 += u32::from(self.answers_403[i]);
            paths |= self.paths[i];
        }
        let share = |n: u32| if requests == 0 { 0.0 } else { (n as f32 / requests as f32).min(1.0) };
        Velocity { requests_10s: window(10), requests_60s: window(60), paths_60s: linear_count(paths), share_4xx_60s: share(e4), share_403_60s: share(e403) }
    }
}

/// Linear counting (Whang et al. 1990) on a 64-bit bitmap: −m ln(zeros / m).
fn linear_count(bits: u64) -> f32 {
    let zeros = bits.count_zeros();
    if zeros == 0 {
        return PATHS_SATURATED;
    }
    -64.0 * (zeros as f32 / 64.0).ln()
}

/// One worker's clients.
pub struct Table {
    entries: Vec<Entry>,
    mask: usize,
    evictions: u64,
}

impl Table {
    /// A table of `capacity` entries (rounded up to a power of two, at least the probe window).
    pub fn new(capacity: usize) -> Table {
        let n = capacity.max(PROBE).next_power_of_two();
        Table { entries: vec![EMPTY; n], mask: n - 1, evictions: 0 }
    }

    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Clients evicted to make room since the table was built.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Counts a request of client `key` (a 64-bit hash of its key) for path `path` (a 64-bit
    /// hash) at second `now_s`, and returns its velocity, this request included.
    pub fn request(&mut self, key: u64, path: u64, now_s: u32) -> Velocity {
        let e = self.entry(key, now_s);
        e.per_second[now_s as usize % SECONDS] = e.per_second[now_s as usize % SECONDS].saturating_add(1);
        let b = (now_s / BUCKET_S) as usize % BUCKETS;
        e.requests[b] = e.requests[b].saturating_add(1);
        e.paths[b] |= 1 << (path >> 58);
        e.velocity(now_s)
    }

    /// Counts the status of an answer to client `key` at second `now_s`.
    pub fn answer(&mut self, key: u64, status: u16, now_s: u32) {
        if !(400..500).contains(&status) {
            return;
        }
        let e = self.entry(key, now_s);
        let b = (now_s / BUCKET_S) as usize % BUCKETS;
        e.answers_4xx[b] = e.answers_4xx[b].saturating_add(1);
        if status == 403 {
            e.answers_403[b] = e.answers_403[b].saturating_add(1);
        }
    }

    /// The client's entry, aged to `now_s`: found, or a free, stale or least recently seen
    /// entry of its probe window, cleared.
    fn entry(&mut self, key: u64, now_s: u32) -> &mut Entry {
        let fingerprint = key | 1; // never 0, the empty mark
        let start = key as usize & self.mask;
        let mut victim = start;
        for p in 0..PROBE {
            let i = (start + p) & self.mask;
            let e = &self.entries[i];
            if e.fingerprint == fingerprint {
                victim = i;
                break;
            }
            if e.fingerprint == 0 {
                victim = i;
                break;
            }
            if e.last_s < self.entries[victim].last_s {
                victim = i;
            }
        }
        let e = &mut self.entries[victim];
        if e.fingerprint != fingerprint {
            if e.fingerprint != 0 && now_s.saturating_sub(e.last_s) < 60 {
                self.evictions += 1;
            }
            *e = Entry { fingerprint, last_s: now_s, ..EMPTY };
        }
        e.age(now_s);
        e
    }
}
