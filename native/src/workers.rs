//! One slot per Envoy worker: the scorer that worker's requests use (a [`Scorer`] keeps the
//! request's buffers, so each worker has its own), the counts it has not handed to Envoy yet, and
//! the scorer waiting to replace it. A model update builds every worker's new scorer on the main
//! thread and leaves it in the slot; each worker takes it before its next request, so a request
//! never waits for a build, and the scorer it replaces is freed on the main thread's next tick,
//! not on the request path.
//!
//! A worker locks only its own slot (uncontended: the main thread takes it for a swap or a flush,
//! a few microseconds every tick).

use crate::metrics::{Defined, ModelCounts, Pending};
use edgescore_core::scorer::Scorer;
use std::sync::{Mutex, MutexGuard};

/// What a worker scores with.
pub struct Worker {
    pub scorer: Scorer,
    /// Per scorer model, its counters.
    pub models: Vec<ModelCounts>,
}

impl Worker {
    pub fn new(scorer: Scorer, metrics: &Defined) -> Worker {
        let models = metrics.for_models(scorer.models());
        Worker { scorer, models }
    }
}

pub struct Slot {
    pub current: Option<Worker>,
    next: Option<Worker>,
    retired: Vec<Worker>,
    pub pending: Pending,
    /// The header array Envoy fills, reused by every request on this worker.
    pub headers: Vec<crate::abi::EnvoyHeader>,
    /// The headers in the core's wire format, reused likewise.
    pub wire: Vec<u8>,
    /// Requests of this worker held on the text path.
    pub text: Vec<crate::text::TextStream>,
}

impl Slot {
    /// Takes a waiting scorer, if any.
    pub fn take_next(&mut self) {
        if let Some(next) = self.next.take() {
            if let Some(old) = self.current.replace(next) {
                self.retired.push(old);
            }
        }
    }
}

pub struct Workers {
    slots: Vec<Mutex<Slot>>,
}

impl Workers {
    /// `n` slots, each starting with a scorer from `build` (`None`: nothing to serve yet).
    pub fn new(n: usize, metrics: &Defined, mut build: impl FnMut() -> Option<Scorer>) -> Workers {
        let slots = (0..n.max(1))
            .map(|_| {
                Mutex::new(Slot {
                    current: build().map(|s| Worker::new(s, metrics)),
                    next: None,
                    retired: Vec::new(),
                    pending: metrics.pending(),
                    headers: Vec::with_capacity(64),
                    wire: Vec::with_capacity(4096),
                    text: Vec::new(),
                })
            })
            .collect();
        Workers { slots }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Worker `index`'s slot. A poisoned lock (a panic while a request held it, caught at the
    /// FFI boundary) is taken as it is: the slot holds buffers a request rewrites from scratch.
    pub fn lock(&self, index: usize) -> MutexGuard<'_, Slot> {
        let slot = &self.slots[index % self.slots.len()];
        slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Leaves a new scorer for every worker (main thread).
    pub fn offer(&self, mut build: impl FnMut() -> Worker) {
        for i in 0..self.slots.len() {
            let worker = build();
            let mut slot = self.lock(i);
            if let Some(stale) = slot.next.replace(worker) {
                slot.retired.push(stale);
            }
        }
    }

    /// Hands every worker's counts to Envoy and frees replaced scorers (main thread).
    pub fn tick(&self, metrics: &Defined, envoy: &crate::envoy::EnvoyConfig) {
        for i in 0..self.slots.len() {
            let retired = {
                let mut slot = self.lock(i);
                metrics.flush(envoy, &mut slot.pending);
                std::mem::take(&mut slot.retired)
            };
            drop(retired);
        }
    }
}
