//! The root context: turns the plugin configuration into a [`Scorer`] and hands it to every
//! stream. A refused configuration leaves the previous scorer serving (Envoy also keeps the
//! previous configuration when `on_configure` returns false).

use crate::active::Active;
use crate::metrics;
use crate::stream::Stream;
use edgescore_core::config::PluginConfig;
use edgescore_core::scorer::Scorer;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{ContextType, LogLevel};
use std::cell::RefCell;
use std::rc::Rc;

#[derive(Default)]
pub struct Plugin {
    active: Rc<RefCell<Option<Active>>>,
    config_errors: Option<u32>,
}

impl Context for Plugin {}

impl RootContext for Plugin {
    fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        self.config_errors = metrics::config_errors();
        true
    }

    fn on_configure(&mut self, _plugin_configuration_size: usize) -> bool {
        let json = self.get_plugin_configuration().unwrap_or_default();
        let seed = self
            .get_current_time()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64);
        let built = PluginConfig::parse(&json).and_then(|cfg| Scorer::new(&cfg, seed));
        match built {
            Ok(scorer) => {
                let models: Vec<&str> = scorer.models().iter().map(|m| m.id.as_str()).collect();
                let _ = hostcalls::log(
                    LogLevel::Info,
                    &format!(
                        "edgescore: configured {} model(s) [{}], {} feature slot(s), mode {:?}",
                        models.len(),
                        models.join(", "),
                        scorer.slots().len(),
                        scorer.mode()
                    ),
                );
                *self.active.borrow_mut() = Some(Active::new(scorer));
                true
            }
            Err(e) => {
                let _ = hostcalls::log(LogLevel::Error, &format!("edgescore: configuration refused: {e}"));
                if let Some(id) = self.config_errors {
                    let _ = hostcalls::increment_metric(id, 1);
                }
                false
            }
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Stream::new(self.active.clone())))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}
