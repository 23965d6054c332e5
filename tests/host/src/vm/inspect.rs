//! What tests read back: metrics, shared data and queues (per Host), logs, allocator calls and
//! other records (per Vm).

use super::{Host, Vm};
use crate::state::*;
use std::collections::BTreeMap;

impl Host {
    /// Counter or gauge value by the name the guest defined (Envoy shows it as
    /// `wasmcustom.<name>`; the prefix is not part of this name).
    pub fn metric(&self, name: &str) -> Option<u64> {
        let sh = self.shared.lock().unwrap();
        [MetricKind::Counter, MetricKind::Gauge]
            .iter()
            .find_map(|k| sh.metrics.get(&(name.to_string(), *k)).map(|m| m.value))
    }

    /// Every value recorded into histogram `name` (empty if none / undefined).
    pub fn histogram(&self, name: &str) -> Vec<u64> {
        self.shared
            .lock()
            .unwrap()
            .metrics
            .get(&(name.to_string(), MetricKind::Histogram))
            .map(|m| m.recorded.clone())
            .unwrap_or_default()
    }

    /// All defined metrics: name → (kind, counter/gauge value, histogram values).
    pub fn metrics(&self) -> BTreeMap<String, (MetricKind, u64, Vec<u64>)> {
        let sh = self.shared.lock().unwrap();
        sh.metrics
            .iter()
            .map(|((n, k), m)| (n.clone(), (*k, m.value, m.recorded.clone())))
            .collect()
    }

    /// Shared data value and CAS, as `proxy_get_shared_data` would return them.
    pub fn shared_data(&self, key: impl AsRef<[u8]>) -> Option<(Vec<u8>, u32)> {
        self.shared
            .lock()
            .unwrap()
            .shared_data
            .get(key.as_ref())
            .cloned()
    }

    /// Sets shared data unconditionally (new CAS), as another worker would.
    pub fn set_shared_data(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let mut sh = self.shared.lock().unwrap();
        let cas = sh.next_cas();
        sh.shared_data
            .insert(key.as_ref().to_vec(), (value.as_ref().to_vec(), cas));
    }

    /// Items currently in shared queue `name` (of this Host's vm_id).
    pub fn queue_items(&self, name: &str) -> Vec<Vec<u8>> {
        let sh = self.shared.lock().unwrap();
        sh.queues
            .values()
            .filter(|q| q.vm_id == self.opts.vm_id && q.name == name)
            .flat_map(|q| q.items.iter().cloned())
            .collect()
    }

    /// Every import of the module as `module.name`.
    pub fn imports(&self) -> &[String] {
        &self.compiled.imports
    }

    pub fn exports(&self) -> &[String] {
        &self.compiled.exports
    }

    /// Imports Envoy does not provide: Envoy would refuse to load the module if non-empty.
    pub fn non_envoy_imports(&self) -> &[String] {
        &self.compiled.non_envoy_imports
    }
}

impl Vm {
    pub fn logs(&self) -> &[LogLine] {
        &self.store.data().logs
    }

    pub fn log_messages(&self) -> Vec<String> {
        self.store
            .data()
            .logs
            .iter()
            .map(|l| l.message.clone())
            .collect()
    }

    pub fn take_logs(&mut self) -> Vec<LogLine> {
        std::mem::take(&mut self.store.data_mut().logs)
    }

    /// (calls, bytes) the host made to the guest's exported allocator
    /// (`proxy_on_memory_allocate` or `malloc`) to hand data to the guest.
    pub fn allocator_calls(&self) -> (u64, u64) {
        (self.store.data().alloc_calls, self.store.data().alloc_bytes)
    }

    pub fn metric(&self, name: &str) -> Option<u64> {
        self.host.metric(name)
    }

    pub fn histogram(&self, name: &str) -> Vec<u64> {
        self.host.histogram(name)
    }

    /// A Vm-level property (visible to the root context and every stream; stream properties
    /// win). `path` segments are joined with NUL as the SDK sends them.
    pub fn set_property(&mut self, path: &[&str], value: impl AsRef<[u8]>) {
        self.store
            .data_mut()
            .properties
            .insert(path.join("\0").into_bytes(), value.as_ref().to_vec());
    }

    /// Imports the guest called that the host does not implement (gRPC, unknown ones).
    pub fn unimplemented_calls(&self) -> Vec<String> {
        self.store.data().unimplemented_calls.clone()
    }

    /// Times the root context called `proxy_done`.
    pub fn done_calls(&self) -> u32 {
        self.store.data().done_calls
    }

    /// Bytes of guest linear memory.
    pub fn memory_size(&self) -> usize {
        self.store
            .data()
            .memory
            .map(|m| m.data_size(&self.store))
            .unwrap_or(0)
    }
}
