//! The root context Envoy creates in every VM of this `.wasm`: the filter's ([`Plugin`], one
//! per worker) or, in the singleton service VM whose `root_id` is [`REGISTRY_ROOT_ID`], the
//! registry poller ([`Poller`]). The role is read from the `plugin_root_id` property when the
//! VM starts, so one `.wasm` and one configuration JSON serve both.

use crate::plugin::Plugin;
use crate::poller::Poller;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::ContextType;

/// The `root_id` that makes a VM the registry poller (`bootstrap_extensions` in envoy.yaml).
pub const REGISTRY_ROOT_ID: &str = "edgescore_registry";

#[derive(Default)]
pub struct Root(Option<Role>);

enum Role {
    Filter(Plugin),
    Poller(Poller),
}

fn decide() -> Role {
    let root_id = hostcalls::get_property(vec!["plugin_root_id"]).ok().flatten().unwrap_or_default();
    if root_id == REGISTRY_ROOT_ID.as_bytes() {
        Role::Poller(Poller::default())
    } else {
        Role::Filter(Plugin::default())
    }
}

impl Root {
    fn inner(&mut self) -> &mut dyn RootContext {
        match self.0.get_or_insert_with(decide) {
            Role::Filter(p) => p,
            Role::Poller(p) => p,
        }
    }
}

impl Context for Root {
    fn on_http_call_response(&mut self, token: u32, num_headers: usize, body_size: usize, num_trailers: usize) {
        self.inner().on_http_call_response(token, num_headers, body_size, num_trailers)
    }
}

impl RootContext for Root {
    fn on_vm_start(&mut self, size: usize) -> bool {
        self.inner().on_vm_start(size)
    }
    fn on_configure(&mut self, size: usize) -> bool {
        self.inner().on_configure(size)
    }
    fn on_tick(&mut self) {
        self.inner().on_tick()
    }
    fn create_http_context(&self, context_id: u32) -> Option<Box<dyn HttpContext>> {
        match &self.0 {
            Some(Role::Filter(p)) => p.create_http_context(context_id),
            _ => None,
        }
    }
    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
