//! A worker's side of a model update: on its (jittered) tick the filter's root context reads
//! the poller's small record from shared data; when it names model versions this worker does
//! not serve, a [`Standby`] copies their bytes a bounded slice per tick, checking version tags
//! and SHA-256 as it goes; once complete, the new scorer is built and swapped in between two
//! requests. Requests are handled one at a time on this thread, so a request never sees a
//! half-copied model, and one that started before the swap (a text-path request waiting for
//! its NLP verdict) keeps the tree decision it already made.

use crate::host::now_ns;
use crate::metrics::UpdateMetrics;
use edgescore_core::ensemble::Model;
use edgescore_core::handoff::{Progress, Record, RecordModel, Standby, RECORD_KEY};
use edgescore_core::registry::ModelMode;
use edgescore_core::scorer::RegistryModel;
use proxy_wasm::hostcalls;

/// What a tick produced.
pub enum Tick {
    Nothing,
    /// A complete, checked set of models to build a scorer from (the record they came from).
    Ready(Record, Vec<(RecordModel, Model)>),
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
    /// The models this worker serves from the registry, as the scorer takes them.
    pub fn loaded(&self) -> impl Iterator<Item = RegistryModel<'_>> {
        registry_models(&self.loaded)
    }

    pub fn loaded_entries(&self) -> impl Iterator<Item = &RecordModel> {
        self.loaded.iter().map(|(e, _)| e)
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
                        Ok(model) => served.push((entry.clone(), model)),
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

/// `models` as the scorer takes them.
pub fn registry_models(models: &[(RecordModel, Model)]) -> impl Iterator<Item = RegistryModel<'_>> {
    models.iter().map(|(e, model)| RegistryModel { name: &e.name, version: e.version, shadow: e.mode == ModelMode::Shadow, model })
}

/// Microseconds since `start_ns`.
pub fn elapsed_us(start_ns: u64) -> u64 {
    now_ns().saturating_sub(start_ns) / 1_000
}
