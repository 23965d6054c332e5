//! A worker's side of a model update: on its (jittered) tick the filter's root context reads
//! the poller's small record from shared data; when it names model versions this worker does
//! not serve, a [`Standby`] copies their bytes a bounded slice per tick, checking version tags
//! and SHA-256 as it goes; once complete, the new scorer is built and swapped in between two
//! requests. Requests are handled one at a time on this thread, so a request never sees a
//! half-copied model, and one that started before the swap (a text-path request waiting for
//! its NLP verdict) keeps the tree decision it already made.

use crate::host::now_ns;
use edgescore_core::ensemble::Model;
use edgescore_core::handoff::{Progress, Record, RecordModel, Standby, RECORD_KEY};
use edgescore_core::registry::ModelMode;
use edgescore_core::scorer::Served;
use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

/// Worker-side metrics (every worker adds to the same process-wide counters).
pub struct UpdateMetrics {
    pub swaps: u32,
    pub copy_faults: u32,
    pub refused: u32,
    /// Microseconds of update work per tick (copying, checking, building, swapping).
    pub tick_us: u32,
}

impl UpdateMetrics {
    pub fn define() -> UpdateMetrics {
        let counter = |n: &str| hostcalls::define_metric(MetricType::Counter, n).unwrap_or(u32::MAX);
        UpdateMetrics {
            swaps: counter("edgescore.registry.swaps"),
            copy_faults: counter("edgescore.registry.copy_faults"),
            refused: counter("edgescore.registry.swaps_refused"),
            tick_us: hostcalls::define_metric(MetricType::Histogram, "edgescore.registry.tick_us").unwrap_or(u32::MAX),
        }
    }
}

/// What a tick produced.
pub enum Tick {
    Nothing,
    /// A complete, checked set of models to build a scorer from (the record they came from);
    /// their policies are the caller's to find.
    Ready(Record, Vec<(RecordModel, Served)>),
}

#[derive(Default)]
pub struct Updates {
    /// The record bytes last read (a tick that reads the same bytes does nothing more).
    seen: Vec<u8>,
    /// The models this worker serves from the registry, with their validated bytes.
    loaded: Vec<(RecordModel, Model)>,
    standby: Standby,
    /// A generation whose models failed to build: not retried until a newer record.
    failed_generation: Option<u64>,
}

impl Updates {
    pub fn loaded(&self) -> &[(RecordModel, Model)] {
        &self.loaded
    }

    /// One tick's update work, at most `slice_bytes` of copying.
    pub fn tick(&mut self, slice_bytes: usize, metrics: &UpdateMetrics) -> Tick {
        if let Ok((Some(bytes), _)) = hostcalls::get_shared_data(RECORD_KEY) {
            if bytes != self.seen {
                self.seen = bytes;
                match Record::parse(&self.seen) {
                    Some(record) if Some(record.generation) != self.failed_generation && self.differs(&record) => {
                        let loaded: Vec<RecordModel> = self.loaded.iter().map(|(e, _)| e.clone()).collect();
                        self.standby.start(record, &loaded);
                    }
                    _ => {}
                }
            }
        }
        match self.standby.step(slice_bytes, |key| hostcalls::get_shared_data(key).ok().and_then(|(v, _)| v)) {
            Progress::Idle | Progress::Copying { .. } => Tick::Nothing,
            Progress::Failed(_) => {
                let _ = hostcalls::increment_metric(metrics.copy_faults, 1);
                // Read the record again next tick (it has most likely moved on).
                self.seen.clear();
                Tick::Nothing
            }
            Progress::Ready => {
                let Some((record, copied)) = self.standby.take() else { return Tick::Nothing };
                let mut served = Vec::with_capacity(record.models.len());
                for entry in &record.models {
                    let model = match copied.iter().find(|(e, _)| e.same_as(entry)) {
                        Some((_, bytes)) => Model::load(bytes),
                        None => match self.loaded.iter().find(|(e, _)| e.same_as(entry)) {
                            Some((_, m)) => Ok(m.clone()),
                            None => continue,
                        },
                    };
                    match model {
                        Ok(model) => served.push((entry.clone(), Served { model, policy: 0, version: Some(entry.version), shadow: entry.mode == ModelMode::Shadow })),
                        // The poller validated these exact bytes (the SHA-256 matched): only a
                        // different filter build could refuse them.
                        Err(_) => {
                            self.failed_generation = Some(record.generation);
                            let _ = hostcalls::increment_metric(metrics.refused, 1);
                            return Tick::Nothing;
                        }
                    }
                }
                for (_, bytes) in copied {
                    self.standby.recycle(bytes);
                }
                Tick::Ready(record, served)
            }
        }
    }

    /// The scorer built from these models is serving: remember them.
    pub fn swapped(&mut self, loaded: Vec<(RecordModel, Model)>) {
        self.loaded = loaded;
    }

    /// `record`'s models could not be served (the configuration refuses them).
    pub fn refused(&mut self, record: &Record) {
        self.failed_generation = Some(record.generation);
    }

    fn differs(&self, record: &Record) -> bool {
        record.models.len() != self.loaded.len() || record.models.iter().any(|e| !self.loaded.iter().any(|(l, _)| l.same_as(e)))
    }
}

/// Microseconds since `start_ns`.
pub fn elapsed_us(start_ns: u64) -> u64 {
    now_ns().saturating_sub(start_ns) / 1_000
}
