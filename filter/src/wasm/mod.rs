//! The proxy-wasm glue: the only code that knows Envoy. `plugin` is the root context
//! (configuration, metrics), `stream` runs one request through the [`crate::Scorer`],
//! `host` and `heap` keep that path free of allocations and panics.

mod heap;
mod host;
mod metrics;
mod plugin;
mod stream;

#[global_allocator]
static HEAP: heap::FilterHeap = heap::FilterHeap;

proxy_wasm::main! {{
    proxy_wasm::set_log_level(proxy_wasm::types::LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn proxy_wasm::traits::RootContext> { Box::new(plugin::Plugin::default()) });
}}
