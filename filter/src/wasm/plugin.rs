//! The root context: turns the plugin configuration into a [`Scorer`] and hands it to every
//! stream. A refused configuration leaves the previous scorer serving (Envoy also keeps the
//! previous configuration when `on_configure` returns false).

use super::metrics::{self, Metrics};
use super::stream::Stream;
use crate::config::PluginConfig;
use crate::conn_cache::ConnCache;
use crate::scorer::Scorer;
use crate::text::TextConfig;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{ContextType, LogLevel};
use std::cell::RefCell;
use std::rc::Rc;

/// What the streams of this plugin share: the scorer, its metric ids, reply scratch.
pub struct Active {
    pub scorer: Scorer,
    pub metrics: Metrics,
    /// Serialised headers of a local reply (reused).
    pub reply_headers: Vec<u8>,
    pub text: Option<TextConfig>,
    /// Connection properties by connection id (see [`ConnCache`]).
    pub conns: ConnCache,
}

/// Connections whose properties are remembered per worker (a direct-mapped table of ~370-byte
/// slots: 96 KiB).
const CONN_SLOTS: usize = 256;

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
        let built = PluginConfig::parse(&json).and_then(|cfg| Ok((Scorer::new(&cfg, seed)?, cfg.text)));
        match built {
            Ok((scorer, text)) => {
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
                let labels: Vec<&str> = text.iter().flat_map(|t| t.labels.keys().map(String::as_str)).collect();
                let metrics = Metrics::define(scorer.models(), scorer.metrics_config(), &labels);
                *self.active.borrow_mut() = Some(Active { scorer, metrics, reply_headers: Vec::with_capacity(256), text, conns: ConnCache::new(CONN_SLOTS) });
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
