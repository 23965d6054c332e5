//! The handoff natively: slots alternate, unchanged models are not rewritten, a worker's copy
//! spans ticks, and an overwritten or corrupted copy is dropped, never handed over.

use super::*;
use std::collections::HashMap;

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

struct Shared(HashMap<String, Vec<u8>>);

impl Shared {
    fn apply(&mut self, writes: Vec<(String, Vec<u8>)>) {
        self.0.extend(writes);
    }
    fn record(&self) -> Record {
        Record::parse(&self.0[RECORD_KEY]).unwrap()
    }
}

fn artifact(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

fn publish(p: &mut Publisher, seq: u64, models: &[(&str, u64, ModelMode, &[u8])]) -> Vec<(String, Vec<u8>)> {
    let shas: Vec<String> = models.iter().map(|m| sha(m.3)).collect();
    let acc: Vec<Accepted<'_>> = models.iter().zip(&shas).map(|(m, s)| Accepted { name: m.0, version: m.1, mode: m.2, sha256: s, bytes: m.3 }).collect();
    p.publish(seq, &acc).0
}

#[test]
fn record_is_written_last_and_slots_alternate() {
    let mut p = Publisher::default();
    let v1 = artifact(3 * CHUNK_BYTES + 10, 1);
    let w = publish(&mut p, 1, &[("bot", 1, ModelMode::Active, &v1)]);
    assert_eq!(w.len(), 5);
    assert_eq!(w.last().unwrap().0, RECORD_KEY);
    assert!(w[0].0.ends_with("bot.active.0.0"));
    let v2 = artifact(100, 2);
    let w = publish(&mut p, 2, &[("bot", 2, ModelMode::Active, &v2), ("bot", 3, ModelMode::Shadow, &v1)]);
    assert!(w[0].0.ends_with("bot.active.1.0"), "{}", w[0].0);
    assert!(w[1].0.ends_with("bot.shadow.0.0"));
    // Republishing the same set writes the record alone.
    let w = publish(&mut p, 3, &[("bot", 2, ModelMode::Active, &v2), ("bot", 3, ModelMode::Shadow, &v1)]);
    assert_eq!(w.len(), 1);
    let r = p.current().unwrap();
    assert_eq!((r.generation, r.sequence), (3, 3));
}

#[test]
fn a_copy_spans_ticks_and_hands_over_checked_bytes() {
    let mut p = Publisher::default();
    let mut shared = Shared(HashMap::new());
    let v1 = artifact(5 * CHUNK_BYTES + 7, 1);
    shared.apply(publish(&mut p, 1, &[("bot", 1, ModelMode::Active, &v1)]));
    let mut s = Standby::default();
    s.start(shared.record(), &[]);
    let mut ticks = 0;
    loop {
        ticks += 1;
        match s.step(2 * CHUNK_BYTES, |k| shared.0.get(k).cloned()) {
            Progress::Copying { copied, total } => assert!(copied < total),
            Progress::Ready => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ticks, 3);
    let (record, models) = s.take().unwrap();
    assert_eq!(record.generation, 1);
    assert_eq!(models.len(), 1);
    assert_eq!(models[0].1, v1);
}

#[test]
fn loaded_models_are_not_copied_again() {
    let mut p = Publisher::default();
    let mut shared = Shared(HashMap::new());
    let (a, b) = (artifact(1000, 1), artifact(2000, 2));
    shared.apply(publish(&mut p, 1, &[("bot", 1, ModelMode::Active, &a), ("scanner", 1, ModelMode::Active, &a)]));
    let loaded = shared.record().models;
    shared.apply(publish(&mut p, 2, &[("bot", 2, ModelMode::Active, &b), ("scanner", 1, ModelMode::Active, &a)]));
    let mut s = Standby::default();
    s.start(shared.record(), &loaded);
    assert_eq!(s.step(usize::MAX, |k| shared.0.get(k).cloned()), Progress::Ready);
    let (_, models) = s.take().unwrap();
    assert_eq!(models.len(), 1);
    assert_eq!((models[0].0.name.as_str(), &models[0].1), ("bot", &b));
}

#[test]
fn an_overwritten_slot_drops_the_copy() {
    let mut p = Publisher::default();
    let mut shared = Shared(HashMap::new());
    let v = |n: u8| artifact(3 * CHUNK_BYTES, n);
    shared.apply(publish(&mut p, 1, &[("bot", 1, ModelMode::Active, &v(1))]));
    let mut s = Standby::default();
    s.start(shared.record(), &[]);
    assert!(matches!(s.step(CHUNK_BYTES, |k| shared.0.get(k).cloned()), Progress::Copying { .. }));
    // v2 goes to the other slot: the copy of v1 is unharmed; v3 reuses v1's slot.
    shared.apply(publish(&mut p, 2, &[("bot", 2, ModelMode::Active, &v(2))]));
    assert!(matches!(s.step(CHUNK_BYTES, |k| shared.0.get(k).cloned()), Progress::Copying { .. }));
    shared.apply(publish(&mut p, 3, &[("bot", 3, ModelMode::Active, &v(3))]));
    assert_eq!(s.step(CHUNK_BYTES, |k| shared.0.get(k).cloned()), Progress::Failed(CopyFault::Overwritten));
    assert!(s.take().is_none());
    assert_eq!(s.step(CHUNK_BYTES, |k| shared.0.get(k).cloned()), Progress::Idle);
}

#[test]
fn corrupted_or_missing_chunks_are_refused() {
    let mut p = Publisher::default();
    let mut shared = Shared(HashMap::new());
    let v1 = artifact(2 * CHUNK_BYTES, 1);
    shared.apply(publish(&mut p, 1, &[("bot", 1, ModelMode::Active, &v1)]));
    let key = shared.record().models[0].chunk_key(1);
    let mut bad = shared.0[&key].clone();
    bad[100] ^= 1;
    shared.0.insert(key.clone(), bad);
    let mut s = Standby::default();
    s.start(shared.record(), &[]);
    assert_eq!(s.step(usize::MAX, |k| shared.0.get(k).cloned()), Progress::Failed(CopyFault::Digest));
    shared.0.remove(&key);
    s.start(shared.record(), &[]);
    assert_eq!(s.step(usize::MAX, |k| shared.0.get(k).cloned()), Progress::Failed(CopyFault::MissingChunk));
}

#[test]
fn buffers_are_reused_across_swaps() {
    let mut p = Publisher::default();
    let mut shared = Shared(HashMap::new());
    let mut s = Standby::default();
    let mut loaded = Vec::new();
    let mut capacity = 0;
    for version in 1..=4u64 {
        let bytes = artifact(CHUNK_BYTES + 1, version as u8);
        shared.apply(publish(&mut p, version, &[("bot", version, ModelMode::Active, &bytes)]));
        s.start(shared.record(), &loaded);
        assert_eq!(s.step(usize::MAX, |k| shared.0.get(k).cloned()), Progress::Ready);
        let (record, mut models) = s.take().unwrap();
        let (_, buf) = models.pop().unwrap();
        assert_eq!(buf, bytes);
        if version > 1 {
            assert_eq!(buf.capacity(), capacity, "version {version} reused the buffer");
        }
        capacity = buf.capacity();
        s.recycle(buf);
        loaded = record.models;
    }
}
