//! How verified model bytes travel from the registry poller (the singleton service VM) to
//! every worker's filter, through proxy-wasm shared data, without a configuration push.
//!
//! The poller writes each accepted artifact as chunks under keys of one of two slots per
//! (model, mode) — the slot the current [`Record`] does not use — and then the small record
//! last. A worker polls the record on its tick; when it names versions the worker has not
//! loaded, a [`Standby`] copies their chunks a bounded number of bytes per tick, checking each
//! chunk's version tag and a running SHA-256, and hands the complete bytes over for the swap.
//! Because writes alternate slots, a worker still copying version N is never overwritten by
//! N+1; only N+2 reuses the slot, and then the chunks' version tags (and the digest) tell the
//! worker to drop the copy and start on the newer record.
//!
//! Shared data lives as long as the Envoy process and has no delete: two slots per model and
//! mode bound what it holds to twice the largest artifacts, however many updates arrive.

use crate::registry::ModelMode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The key of the record (shared data is namespaced by the VM id).
pub const RECORD_KEY: &str = "edgescore.registry.record";
/// Bytes per chunk value (plus an 8-byte version tag). Envoy copies a value on every get, so
/// a chunk is also the smallest unit of a worker's per-tick copy.
pub const CHUNK_BYTES: usize = 64 << 10;
const TAG: usize = 8;

/// What the poller has accepted: every model the filter should serve, and where its bytes are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// +1 on every record the poller writes (workers compare it to skip parsing).
    pub generation: u64,
    /// The registry manifest's sequence number.
    pub sequence: u64,
    pub models: Vec<RecordModel>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordModel {
    pub name: String,
    pub version: u64,
    pub mode: ModelMode,
    pub size: u64,
    /// Hex SHA-256 of the artifact.
    pub sha256: String,
    /// Which of the two chunk slots holds it (0 or 1).
    pub slot: u8,
}

impl RecordModel {
    /// Same model, mode and version: the bytes are the same.
    pub fn same_as(&self, other: &RecordModel) -> bool {
        self.name == other.name && self.mode == other.mode && self.version == other.version && self.sha256 == other.sha256
    }

    pub fn chunks(&self) -> usize {
        (self.size as usize).div_ceil(CHUNK_BYTES)
    }

    pub fn chunk_key(&self, i: usize) -> String {
        chunk_key(&self.name, self.mode, self.slot, i)
    }
}

pub fn chunk_key(name: &str, mode: ModelMode, slot: u8, i: usize) -> String {
    let mode = match mode {
        ModelMode::Active => "active",
        ModelMode::Shadow => "shadow",
    };
    format!("edgescore.registry.chunk.{name}.{mode}.{slot}.{i}")
}

impl Record {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub fn parse(bytes: &[u8]) -> Option<Record> {
        serde_json::from_slice(bytes).ok()
    }
}

/// The poller's side: lays accepted artifacts out as shared-data writes, chunks first and the
/// record last (the order matters: a worker that sees the record finds every chunk).
#[derive(Default)]
pub struct Publisher {
    current: Option<Record>,
}

/// One artifact the poller accepted.
pub struct Accepted<'a> {
    pub name: &'a str,
    pub version: u64,
    pub mode: ModelMode,
    pub sha256: &'a str,
    pub bytes: &'a [u8],
}

impl Publisher {
    pub fn current(&self) -> Option<&Record> {
        self.current.as_ref()
    }

    /// The writes that make `models` the served set (`sequence`: the manifest's). Models the
    /// current record already serves at the same version are not written again.
    pub fn publish(&mut self, sequence: u64, models: &[Accepted<'_>]) -> (Vec<(String, Vec<u8>)>, Record) {
        let mut writes = Vec::new();
        let mut entries = Vec::with_capacity(models.len());
        for m in models {
            let prior = self.current.as_ref().and_then(|r| r.models.iter().find(|e| e.name == m.name && e.mode == m.mode));
            let mut entry = RecordModel { name: m.name.to_string(), version: m.version, mode: m.mode, size: m.bytes.len() as u64, sha256: m.sha256.to_string(), slot: 0 };
            match prior {
                Some(p) if p.same_as(&entry) => entry.slot = p.slot,
                prior => {
                    entry.slot = prior.map_or(0, |p| 1 - p.slot);
                    for (i, chunk) in m.bytes.chunks(CHUNK_BYTES).enumerate() {
                        let mut value = Vec::with_capacity(TAG + chunk.len());
                        value.extend_from_slice(&m.version.to_le_bytes());
                        value.extend_from_slice(chunk);
                        writes.push((entry.chunk_key(i), value));
                    }
                }
            }
            entries.push(entry);
        }
        let record = Record { generation: self.current.as_ref().map_or(1, |r| r.generation + 1), sequence, models: entries };
        writes.push((RECORD_KEY.to_string(), record.to_bytes()));
        self.current = Some(record.clone());
        (writes, record)
    }
}

/// A model copied and checked: its record entry and its bytes.
pub type Copied = (RecordModel, Vec<u8>);

/// Why a worker dropped a copy (it starts again from the newest record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFault {
    /// A chunk is missing or of the wrong length.
    MissingChunk,
    /// A chunk belongs to another version: the poller reused the slot.
    Overwritten,
    /// The bytes do not hash to the record's SHA-256.
    Digest,
}

/// Where a worker's copy of a record stands after one tick's work.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Nothing to copy (no target, or everything already loaded).
    Idle,
    /// More ticks needed.
    Copying { copied: usize, total: usize },
    /// Every new model of the target is copied and checked: take them with [`Standby::take`].
    Ready,
    Failed(CopyFault),
}

struct Copy {
    entry: RecordModel,
    bytes: Vec<u8>,
    next: usize,
    hasher: Sha256,
}

/// The worker's side: the models of a target record that it has not loaded yet, copied a
/// bounded number of bytes per tick into buffers whose capacity is kept from swap to swap.
#[derive(Default)]
pub struct Standby {
    target: Option<Record>,
    copies: Vec<Copy>,
    /// Buffers of earlier copies, reused so that steady updates allocate nothing new.
    spare: Vec<Vec<u8>>,
}

impl Standby {
    /// The record being copied, if any.
    pub fn target(&self) -> Option<&Record> {
        self.target.as_ref()
    }

    /// Starts copying `record`'s models that `loaded` does not already hold (same name, mode
    /// and version), dropping any copy in progress.
    pub fn start(&mut self, record: Record, loaded: &[RecordModel]) {
        self.reset();
        for e in &record.models {
            if !loaded.iter().any(|l| l.same_as(e)) {
                let mut bytes = self.spare.pop().unwrap_or_default();
                bytes.clear();
                bytes.reserve(e.size as usize);
                self.copies.push(Copy { entry: e.clone(), bytes, next: 0, hasher: Sha256::new() });
            }
        }
        self.target = Some(record);
    }

    fn reset(&mut self) {
        self.target = None;
        for c in self.copies.drain(..) {
            self.spare.push(c.bytes);
        }
    }

    /// Copies at most `budget` bytes (at least one chunk) with `get`, which reads one shared
    /// data value.
    pub fn step(&mut self, budget: usize, mut get: impl FnMut(&str) -> Option<Vec<u8>>) -> Progress {
        if self.target.is_none() {
            return Progress::Idle;
        }
        let mut spent = 0;
        for c in &mut self.copies {
            while c.next < c.entry.chunks() {
                if spent > 0 && spent + CHUNK_BYTES > budget {
                    return self.progress();
                }
                let want = (c.entry.size as usize - c.next * CHUNK_BYTES).min(CHUNK_BYTES);
                let Some(value) = get(&c.entry.chunk_key(c.next)) else { return self.fail(CopyFault::MissingChunk) };
                if value.len() != TAG + want {
                    return self.fail(CopyFault::MissingChunk);
                }
                if value[..TAG] != c.entry.version.to_le_bytes() {
                    return self.fail(CopyFault::Overwritten);
                }
                c.hasher.update(&value[TAG..]);
                c.bytes.extend_from_slice(&value[TAG..]);
                c.next += 1;
                spent += want;
            }
            if c.bytes.len() == c.entry.size as usize && c.next == c.entry.chunks() {
                let digest = std::mem::take(&mut c.hasher).finalize();
                if !hex_eq(&digest, &c.entry.sha256) {
                    return self.fail(CopyFault::Digest);
                }
                // Mark as checked: `next` past the end.
                c.next = usize::MAX;
            }
        }
        self.progress()
    }

    fn progress(&self) -> Progress {
        let total: usize = self.copies.iter().map(|c| c.entry.size as usize).sum();
        let copied: usize = self.copies.iter().map(|c| c.bytes.len()).sum();
        if self.copies.iter().all(|c| c.next == usize::MAX) {
            Progress::Ready
        } else {
            Progress::Copying { copied, total }
        }
    }

    fn fail(&mut self, fault: CopyFault) -> Progress {
        self.reset();
        Progress::Failed(fault)
    }

    /// The target record and the checked bytes of each model that was copied, once
    /// [`Progress::Ready`]. Give the buffers back with [`Standby::recycle`] when done with them.
    pub fn take(&mut self) -> Option<(Record, Vec<Copied>)> {
        if !self.copies.iter().all(|c| c.next == usize::MAX) {
            return None;
        }
        let record = self.target.take()?;
        Some((record, self.copies.drain(..).map(|c| (c.entry, c.bytes)).collect()))
    }

    /// Keeps a buffer's capacity for the next copy.
    pub fn recycle(&mut self, bytes: Vec<u8>) {
        if self.spare.len() < 8 {
            self.spare.push(bytes);
        }
    }
}

/// `digest` equals the lowercase hex string `hex`.
fn hex_eq(digest: &[u8], hex: &str) -> bool {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    hex.len() == 2 * digest.len() && digest.iter().zip(hex.as_bytes().chunks(2)).all(|(b, h)| h[0] == HEX[(b >> 4) as usize] && h[1] == HEX[(b & 15) as usize])
}

#[cfg(test)]
mod tests;
