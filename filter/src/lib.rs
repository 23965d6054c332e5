//! edgescore's Envoy filter: the proxy-wasm glue around `edgescore-core`, and the only code
//! that knows Envoy. It reads from the host, calls the core, and applies the edits the core
//! returns (`apply`). `root` picks each VM's role: `plugin` is the filter's root context
//! (configuration, metric ids, model swaps from `updates`), `poller` the registry poller in
//! the singleton service VM (and `directories`, the verified bots' key directories it
//! fetches); `serving` is what a configuration's streams share and how they run, `stream` the
//! per-request context; `host` and `heap` keep the request path free of
//! allocations and panics.
//!
//! The crate is a `cdylib` for `wasm32-wasip1`; natively it compiles to nothing, so that
//! `cargo test --workspace` can build every member on the host.
#![cfg(target_arch = "wasm32")]

mod apply;
#[cfg(feature = "bench-exports")]
mod bench_exports;
mod directories;
mod heap;
mod host;
mod metrics;
mod plugin;
mod poller;
mod root;
mod serving;
mod stream;
#[cfg(feature = "test-trap")]
mod test_trap;
mod updates;

#[global_allocator]
static HEAP: heap::FilterHeap = heap::FilterHeap;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn proxy_wasm::traits::RootContext> { Box::new(root::Root::default()) });
}}
