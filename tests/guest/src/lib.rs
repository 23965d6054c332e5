//! A tiny proxy-wasm guest (SDK 0.2.5) that exercises the host in `edgescore_proxy_host` (tests/host).
//! Behaviour is keyed on the request's `:path`; see tests/host/tests/proxy_host.rs for what each path
//! is expected to do.

use proxy_wasm::traits::*;
use proxy_wasm::types::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, UNIX_EPOCH};

/// Counts every call into the global allocator (alloc, alloc_zeroed, realloc).
struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[no_mangle]
pub extern "C" fn guest_heap_allocations() -> u64 {
    ALLOCS.load(Relaxed)
}

#[no_mangle]
pub extern "C" fn guest_answer() -> i32 {
    42
}

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Trace);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

#[derive(Default, Clone, Copy)]
struct Metrics {
    requests: u32,
    inflight: u32,
    header_count: u32,
    ticks: u32,
}

#[derive(Default)]
struct Root {
    metrics: Option<Metrics>,
    queue: Option<u32>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_vm_start(&mut self, size: usize) -> bool {
        let cfg = self.get_vm_configuration().unwrap_or_default();
        log::info!(
            "vm_start size={} config={}",
            size,
            String::from_utf8_lossy(&cfg)
        );
        cfg != b"fail-start"
    }

    fn on_configure(&mut self, size: usize) -> bool {
        let cfg = self.get_plugin_configuration().unwrap_or_default();
        let cfg = String::from_utf8_lossy(&cfg).into_owned();
        log::info!("configure size={} config={}", size, cfg);
        if cfg == "reject" {
            return false;
        }
        if self.metrics.is_none() {
            self.metrics = Some(Metrics {
                requests: define(MetricType::Counter, "guest_requests"),
                inflight: define(MetricType::Gauge, "guest_inflight"),
                header_count: define(MetricType::Histogram, "guest_header_count"),
                ticks: define(MetricType::Counter, "guest_ticks"),
            });
        }
        if cfg.contains("tick") {
            self.set_tick_period(Duration::from_millis(250));
        }
        if cfg.contains("queue") {
            self.queue = Some(self.register_shared_queue("guest_queue"));
        }
        true
    }

    fn on_tick(&mut self) {
        let m = self.metrics.unwrap();
        proxy_wasm::hostcalls::increment_metric(m.ticks, 1).unwrap();
        log::info!("tick");
    }

    fn on_queue_ready(&mut self, queue_id: u32) {
        while let Ok(Some(item)) = self.dequeue_shared_queue(queue_id) {
            log::info!("queue {} item {}", queue_id, String::from_utf8_lossy(&item));
        }
    }

    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http {
            id: context_id,
            metrics: self.metrics.unwrap(),
            path: String::new(),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

fn define(t: MetricType, name: &str) -> u32 {
    proxy_wasm::hostcalls::define_metric(t, name).unwrap()
}

struct Http {
    id: u32,
    metrics: Metrics,
    path: String,
}

impl Context for Http {
    fn on_http_call_response(
        &mut self,
        token: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let headers = self.get_http_call_response_headers_bytes();
        let body = self
            .get_http_call_response_body(0, body_size)
            .unwrap_or_default();
        log::info!(
            "#{} call {} response: {} headers, {} body bytes",
            self.id,
            token,
            num_headers,
            body.len()
        );
        let status = headers
            .iter()
            .find(|(k, _)| k == ":status")
            .map(|(_, v)| v.clone());
        match status.as_deref() {
            Some(b"200") => {
                self.add_http_request_header_bytes("x-auth", &body);
                self.resume_http_request();
            }
            Some(_) => {
                self.send_http_response(403, vec![("x-upstream-status", "not-200")], Some(&body))
            }
            None => {
                let (code, msg) = self.get_grpc_status();
                let code = code.to_string();
                let msg = msg.unwrap_or_default();
                self.send_http_response(
                    503,
                    vec![("x-call-status", &code), ("x-call-message", &msg)],
                    None,
                )
            }
        }
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, num_headers: usize, _eos: bool) -> Action {
        let headers = self.get_http_request_headers_bytes();
        log::debug!(
            "#{} request headers: {} (num {})",
            self.id,
            headers.len(),
            num_headers
        );
        proxy_wasm::hostcalls::increment_metric(self.metrics.requests, 1).unwrap();
        proxy_wasm::hostcalls::increment_metric(self.metrics.inflight, 1).unwrap();
        proxy_wasm::hostcalls::record_metric(self.metrics.header_count, headers.len() as u64)
            .unwrap();
        if let Some(addr) = self.get_property(vec!["source", "address"]) {
            self.add_http_request_header_bytes("x-guest-source", &addr);
        }
        self.path = self.get_http_request_header(":path").unwrap_or_default();
        match self.path.as_str() {
            "/deny" => {
                self.send_http_response(403, vec![("x-deny", "yes")], Some(b"denied\n"));
                return Action::Pause;
            }
            "/call" => {
                let r = self.dispatch_http_call(
                    "auth",
                    vec![
                        (":method", "POST"),
                        (":path", "/check"),
                        (":authority", "auth.local"),
                    ],
                    Some(b"ping"),
                    vec![],
                    Duration::from_secs(5),
                );
                return match r {
                    Ok(token) => {
                        log::info!("#{} dispatched {}", self.id, token);
                        Action::Pause
                    }
                    Err(e) => {
                        self.send_http_response(500, vec![], Some(format!("{e:?}").as_bytes()));
                        Action::Pause
                    }
                };
            }
            "/call-unknown" => {
                let r = self.dispatch_http_call(
                    "nope",
                    vec![(":method", "GET"), (":path", "/"), (":authority", "x")],
                    None,
                    vec![],
                    Duration::from_secs(1),
                );
                self.add_http_request_header("x-dispatch", &format!("{r:?}"));
            }
            "/panic" => panic!("guest panic on purpose"),
            "/shared" => {
                let n = loop {
                    let (v, cas) = self.get_shared_data("hits");
                    let n = v
                        .map(|v| String::from_utf8(v).unwrap().parse::<u64>().unwrap())
                        .unwrap_or(0)
                        + 1;
                    match self.set_shared_data("hits", Some(n.to_string().as_bytes()), cas) {
                        Ok(()) => break n,
                        Err(Status::CasMismatch) => continue,
                        Err(e) => panic!("set_shared_data: {e:?}"),
                    }
                };
                self.add_http_request_header("x-hits", &n.to_string());
            }
            "/time" => {
                let t = self
                    .get_current_time()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos();
                self.add_http_request_header("x-time", &t.to_string());
                let wall = std::time::SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos();
                self.add_http_request_header("x-wasi-time", &wall.to_string());
            }
            "/stop" => return Action::Pause,
            "/rewrite" => {
                self.set_http_request_header("user-agent", Some("guest"));
                self.remove_http_request_header("x-remove");
                let bin = self
                    .get_http_request_header_bytes("x-bin")
                    .unwrap_or_default();
                self.add_http_request_header_bytes("x-bin-len", bin.len().to_string().as_bytes());
            }
            "/set-all" => self.set_http_request_headers(vec![
                (":path", "/set-all"),
                (":method", "GET"),
                ("x-only", "1"),
            ]),
            "/enqueue" => {
                let q = self
                    .resolve_shared_queue("", "guest_queue")
                    .expect("queue registered");
                self.enqueue_shared_queue(q, Some(b"hello")).unwrap();
            }
            "/alloc" => {
                let v: Vec<u8> = Vec::with_capacity(1000);
                std::hint::black_box(v);
            }
            _ => {}
        }
        Action::Continue
    }

    fn on_http_request_body(&mut self, size: usize, eos: bool) -> Action {
        log::debug!("#{} request body {} eos={}", self.id, size, eos);
        if self.path == "/late-header" {
            // Envoy has dropped the request headers after Continue: BadArgument, SDK panics.
            let _ = self.get_http_request_header(":path");
        }
        if !eos {
            return Action::Pause;
        }
        let body = self.get_http_request_body(0, size).unwrap_or_default();
        self.set_property(
            vec!["guest.body_len"],
            Some(body.len().to_string().as_bytes()),
        );
        self.set_http_request_body(0, size, &body.to_ascii_uppercase());
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num: usize, _eos: bool) -> Action {
        let status = self.get_http_response_header(":status").unwrap_or_default();
        log::debug!("#{} response status {}", self.id, status);
        self.add_http_response_header("x-guest", "1");
        Action::Continue
    }

    fn on_http_response_body(&mut self, _size: usize, eos: bool) -> Action {
        if eos {
            Action::Continue
        } else {
            Action::Pause
        }
    }

    fn on_log(&mut self) {
        let path = self.get_http_request_header(":path").unwrap_or_default();
        let status = self.get_http_response_header(":status").unwrap_or_default();
        log::info!("#{} log path={} status={}", self.id, path, status);
        proxy_wasm::hostcalls::increment_metric(self.metrics.inflight, -1).unwrap();
    }
}
