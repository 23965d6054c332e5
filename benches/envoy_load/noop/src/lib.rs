//! The no-op filter: a root context that creates one HTTP context per request, whose callbacks
//! all return `Continue`. With an empty plugin configuration nothing is read or written: the
//! floor for a Rust proxy-wasm filter in Envoy.
//!
//! For `run.py --hostcalls` the configuration can instead name host calls to make on every
//! request, e.g. `headers=1,properties=3,set_property=2,add=1,replace=2,increment=8,record=3`: the
//! same calls, with similar argument sizes, as the edgescore filter makes, so the bench can
//! tell what the host calls cost apart from what the filter computes. (At most 20 distinct
//! filter-state keys: more `set_property` calls update existing values.)

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel, MetricType};
use std::alloc::Layout;
use std::cell::Cell;
use std::rc::Rc;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_get_header_map_pairs(map_type: u32, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_add_header_map_value(map_type: u32, key: *const u8, key_size: usize, value: *const u8, value_size: usize) -> u32;
    fn proxy_replace_header_map_value(map_type: u32, key: *const u8, key_size: usize, value: *const u8, value_size: usize) -> u32;
    fn proxy_get_property(path: *const u8, path_size: usize, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_set_property(path: *const u8, path_size: usize, value: *const u8, value_size: usize) -> u32;
    fn proxy_increment_metric(id: u32, offset: i64) -> u32;
    fn proxy_record_metric(id: u32, value: u64) -> u32;
}

/// How many of each host call to make per request (all 0: a pure no-op).
#[derive(Default, Clone, Copy)]
struct Plan {
    headers: u32,
    properties: u32,
    set_property: u32,
    add: u32,
    replace: u32,
    increment: u32,
    record: u32,
}

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(Root { plan: Rc::new(Cell::new(Plan::default())), counter: 0, histogram: 0 })
    });
}}

struct Root {
    plan: Rc<Cell<Plan>>,
    counter: u32,
    histogram: u32,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let cfg = self.get_plugin_configuration().unwrap_or_default();
        let mut plan = Plan::default();
        for item in String::from_utf8_lossy(&cfg).split(',') {
            let Some((key, value)) = item.split_once('=') else { continue };
            let Ok(n) = value.trim().parse::<u32>() else { return false };
            match key.trim() {
                "headers" => plan.headers = n,
                "properties" => plan.properties = n,
                "set_property" => plan.set_property = n,
                "add" => plan.add = n,
                "replace" => plan.replace = n,
                "increment" => plan.increment = n,
                "record" => plan.record = n,
                _ => return false,
            }
        }
        self.plan.set(plan);
        if plan.increment > 0 {
            self.counter = proxy_wasm::hostcalls::define_metric(MetricType::Counter, "noop.counter").unwrap_or(0);
        }
        if plan.record > 0 {
            self.histogram = proxy_wasm::hostcalls::define_metric(MetricType::Histogram, "noop.histogram").unwrap_or(0);
        }
        true
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Noop { plan: self.plan.get(), counter: self.counter, histogram: self.histogram }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Noop {
    plan: Plan,
    counter: u32,
    histogram: u32,
}

impl Context for Noop {}

/// Frees a buffer the host allocated through the SDK's `proxy_on_memory_allocate`.
unsafe fn free(ptr: *mut u8, len: usize) {
    if !ptr.is_null() && len > 0 {
        std::alloc::dealloc(ptr, Layout::from_size_align_unchecked(len, 1));
    }
}

impl HttpContext for Noop {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let p = self.plan;
        const PATHS: [&[u8]; 3] = [b"request\0protocol", b"connection\0tls_version", b"connection\0requested_server_name"];
        // Distinct keys: the filter creates each filter-state value once per request.
        const STATE: [&[u8]; 20] = [
            b"noop.s0", b"noop.s1", b"noop.s2", b"noop.s3", b"noop.s4", b"noop.s5", b"noop.s6", b"noop.s7", b"noop.s8", b"noop.s9",
            b"noop.t0", b"noop.t1", b"noop.t2", b"noop.t3", b"noop.t4", b"noop.t5", b"noop.t6", b"noop.t7", b"noop.t8", b"noop.t9",
        ];
        const HEADERS: [&[u8]; 2] = [b"x-noop-scores", b"x-noop-decision"];
        // SAFETY: every pointer passed is valid for the call; out-params are valid for writes.
        unsafe {
            for _ in 0..p.headers {
                let (mut ptr, mut len) = (core::ptr::null_mut(), 0);
                proxy_get_header_map_pairs(0, &mut ptr, &mut len);
                free(ptr, len);
            }
            for i in 0..p.properties as usize {
                let path = PATHS[i % PATHS.len()];
                let (mut ptr, mut len) = (core::ptr::null_mut(), 0);
                proxy_get_property(path.as_ptr(), path.len(), &mut ptr, &mut len);
                free(ptr, len);
            }
            let value = b"bot=0.0023;scanner=0.0000;abuse=0.0000";
            for i in 0..p.add as usize {
                let name = HEADERS[i % HEADERS.len()];
                proxy_add_header_map_value(0, name.as_ptr(), name.len(), value.as_ptr(), value.len());
            }
            for i in 0..p.replace as usize {
                let name = HEADERS[i % HEADERS.len()];
                proxy_replace_header_map_value(0, name.as_ptr(), name.len(), value.as_ptr(), value.len());
            }
            for i in 0..p.set_property as usize {
                let key = STATE[i % STATE.len()];
                proxy_set_property(key.as_ptr(), key.len(), value.as_ptr(), value.len());
            }
            for _ in 0..p.increment {
                proxy_increment_metric(self.counter, 1);
            }
            for i in 0..p.record {
                proxy_record_metric(self.histogram, u64::from(i) * 100);
            }
        }
        Action::Continue
    }
}
