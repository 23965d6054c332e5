//! One slot per Envoy worker: the scorer that worker's requests use (a [`Scorer`] keeps the
//! request's buffers, so each worker has its own; the models in them are shared), the counts it has not handed to Envoy yet, and
//! the scorer waiting to replace it. A model update builds every worker's new scorer on the main
//! thread and leaves it in the slot; each worker takes it before its next request, so a request
//! never waits for a build, and the scorer it replaces is freed on the main thread's next tick,
//! not on the request path.
//!
//! A worker locks only its own slot (uncontended: the main thread takes it for a swap or a flush,
//! a few microseconds every tick). Envoy may call a hook of a stream from inside a call the
//! module makes while it holds the slot (a local reply ends the stream at once and runs its
//! `stream_complete`): such a re-entrant hook sees that its own thread holds the slot
//! ([`Workers::lock_unless_reentrant`]) instead of waiting for itself forever.

use crate::metrics::{Defined, ModelCounts, Pending};
use edgescore_core::scorer::Scorer;
use edgescore_core::signatures::{Bots, Directory};
use std::sync::Arc;
use edgescore_core::velocity::Clients;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// This thread's number (never 0), for the slots' owner marks.
fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

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
    /// Requests of this worker held on the text path.
    pub text: Vec<crate::text::TextStream>,
    /// This worker's clients (`velocity`): outside the scorers, so a swap keeps their counts.
    pub clients: Option<Clients>,
    /// The client of each of this worker's streams, for its completion (`velocity` shares).
    pub stream_clients: crate::stream_clients::StreamClients,
    /// This worker's signature checks (`verified_bots`): outside the scorers, so a swap keeps
    /// the keys.
    pub bots: Option<Bots>,
    /// A verdict Envoy delivered inside the callout call itself (see `text::call`): whether it
    /// answered the request locally.
    pub inline_verdict: Option<bool>,
}

// SAFETY: the one non-`Send` part of a slot is `headers`' raw pointers into Envoy's header
// map: written by `Stream::request_headers` and read only inside that request's hook, by the
// thread holding the slot's lock; between hooks they are never dereferenced (the next request
// overwrites them first).
unsafe impl Send for Slot {}

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

struct Locked {
    slot: Mutex<Slot>,
    /// The thread holding `slot` (0: none).
    owner: AtomicU64,
}

/// A locked slot; clears its owner mark before it unlocks.
pub struct SlotGuard<'a> {
    owner: &'a AtomicU64,
    guard: MutexGuard<'a, Slot>,
}

impl Deref for SlotGuard<'_> {
    type Target = Slot;
    fn deref(&self) -> &Slot {
        &self.guard
    }
}

impl DerefMut for SlotGuard<'_> {
    fn deref_mut(&mut self) -> &mut Slot {
        &mut self.guard
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.owner.store(0, Ordering::Release);
    }
}

pub struct Workers {
    slots: Vec<Locked>,
}

impl Workers {
    /// `n` slots, each starting with a scorer from `build` (`None`: nothing to serve yet) and
    /// the clients `cfg` counts.
    pub fn new(n: usize, cfg: &edgescore_core::PluginConfig, metrics: &Defined, mut build: impl FnMut() -> Option<Scorer>) -> Workers {
        let slots = (0..n.max(1))
            .map(|_| Locked {
                owner: AtomicU64::new(0),
                slot: Mutex::new(Slot {
                    current: build().map(|s| Worker::new(s, metrics)),
                    next: None,
                    retired: Vec::new(),
                    pending: metrics.pending(),
                    headers: Vec::with_capacity(64),
                    text: Vec::new(),
                    clients: Clients::carry(None, cfg),
                    stream_clients: crate::stream_clients::StreamClients::new(),
                    bots: Bots::new(cfg),
                    inline_verdict: None,
                }),
            })
            .collect();
        Workers { slots }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Worker `index`'s slot. A poisoned lock (a panic while a request held it, caught at the
    /// FFI boundary) is taken as it is: the slot holds buffers a request rewrites from scratch.
    pub fn lock(&self, index: usize) -> SlotGuard<'_> {
        let l = &self.slots[index % self.slots.len()];
        let guard = l.slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        l.owner.store(thread_number(), Ordering::Release);
        SlotGuard { owner: &l.owner, guard }
    }

    /// [`Workers::lock`], or `None` when this thread already holds the slot: a hook Envoy runs
    /// from inside a call the module made with the slot locked.
    pub fn lock_unless_reentrant(&self, index: usize) -> Option<SlotGuard<'_>> {
        let l = &self.slots[index % self.slots.len()];
        if l.owner.load(Ordering::Acquire) == thread_number() {
            return None;
        }
        Some(self.lock(index))
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

    /// The verified bots' keys for every worker, from its next request on (main thread).
    pub fn set_directory(&self, directory: &Arc<Directory>) {
        for i in 0..self.slots.len() {
            if let Some(b) = self.lock(i).bots.as_mut() {
                b.set_directory(directory.clone());
            }
        }
    }

    /// Hands every worker's counts (its scorers' drift counts included) to Envoy and frees
    /// replaced scorers (main thread).
    pub fn tick(&self, metrics: &Defined, envoy: &crate::envoy::EnvoyConfig) {
        for i in 0..self.slots.len() {
            let retired = {
                let mut guard = self.lock(i);
                let slot = &mut *guard;
                if let Some(c) = slot.clients.as_mut() {
                    slot.pending.add(metrics.velocity_evictions, c.take_evictions());
                }
                if let Some(b) = slot.bots.as_mut() {
                    slot.pending.bots(metrics, b.take_counts());
                }
                metrics.flush(envoy, &mut slot.pending);
                // A replaced scorer's last counts too, before it is freed.
                for w in slot.current.iter_mut().chain(slot.retired.iter_mut()) {
                    metrics.flush_drift(envoy, w.scorer.drift_mut());
                }
                std::mem::take(&mut slot.retired)
            };
            drop(retired);
        }
    }
}
