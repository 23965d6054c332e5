//! Guest exports for a wasm host that benchmarks the scoring loop without the proxy-wasm ABI
//! (only with the cargo feature `bench-exports`; the shipped `.wasm` is built without it).
//! Protocol: the host asks for a buffer of `len` bytes (`edgescore_bench_buffer`), writes into
//! it, then calls `edgescore_bench_configure(len)` with the plugin JSON,
//! `edgescore_bench_add_request(h, p)` with a header map followed by a property map, and
//! `edgescore_bench_score(passes)`. The scorer is built here, not by `on_configure`.

use edgescore_core::config::PluginConfig;
use edgescore_core::replay::score_all;
use edgescore_core::request::OwnedRequest;
use edgescore_core::scorer::Scorer;
use std::cell::RefCell;

#[derive(Default)]
struct State {
    buffer: Vec<u8>,
    scorer: Option<Scorer>,
    requests: Vec<OwnedRequest>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

#[no_mangle]
pub extern "C" fn edgescore_bench_buffer(len: u32) -> *mut u8 {
    STATE.with_borrow_mut(|s| {
        s.buffer.clear();
        s.buffer.resize(len as usize, 0);
        s.buffer.as_mut_ptr()
    })
}

/// 1 if the configuration gave a scorer (the seed is fixed, as in the native bench).
#[no_mangle]
pub extern "C" fn edgescore_bench_configure(len: u32) -> i32 {
    STATE.with_borrow_mut(|s| {
        let built = s.buffer.get(..len as usize).ok_or(()).and_then(|json| {
            PluginConfig::parse(json).and_then(|cfg| Scorer::new(&cfg, 1)).map_err(|_| ())
        });
        s.requests.clear();
        s.scorer = built.ok();
        s.scorer.is_some() as i32
    })
}

/// The number of requests loaded, or -1 if the maps are malformed.
#[no_mangle]
pub extern "C" fn edgescore_bench_add_request(headers_len: u32, properties_len: u32) -> i32 {
    STATE.with_borrow_mut(|s| {
        let (h, p) = (headers_len as usize, properties_len as usize);
        let Some(buf) = s.buffer.get(..h.saturating_add(p)) else { return -1 };
        match OwnedRequest::decode(&buf[..h], &buf[h..]) {
            Ok(r) => {
                s.requests.push(r);
                s.requests.len() as i32
            }
            Err(_) => -1,
        }
    })
}

/// [`score_all`]'s checksum, or 0 without a scorer / on a scoring error.
#[no_mangle]
pub extern "C" fn edgescore_bench_score(passes: u32) -> i64 {
    STATE.with_borrow_mut(|s| {
        let State { scorer, requests, .. } = s;
        match scorer {
            Some(scorer) => score_all(scorer, requests, passes).unwrap_or(0) as i64,
            None => 0,
        }
    })
}
