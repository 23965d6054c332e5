//! Filter configurations of one plugin JSON share one registry poller: the two listeners of one
//! `envoy.yaml`, or a listener and its replacement during an LDS update. One poll per period and
//! each refusal counted once (the configurations define the same metrics, which Envoy keeps once
//! by name), and a configuration that joins serves the registry's current models at once instead
//! of starting over from its bootstrap models.
//!
//! The first live configuration of a group polls (with its own HTTP callouts and ticks); when
//! Envoy destroys it, the next one takes the poller over, its high-water marks included. An
//! answer to the old one's callout never comes, so the poller forgets it. Everything here runs
//! on Envoy's main thread.
//!
//! Envoy may answer a callout inside the call that makes it (a cluster without a healthy host):
//! the answer then finds the groups locked by the poll that is asking, and waits in `DEFERRED`
//! until that poll is done.

use crate::filter::Filter;
use crate::poller::Poller;
use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::Instant;

struct Group {
    /// The plugin JSON, as Envoy handed it over.
    json: Vec<u8>,
    poller: Poller,
    /// In the order they joined; the first live one polls.
    members: Vec<Weak<Filter>>,
    /// The member whose callouts the poller waits for.
    leader: *const Filter,
}

// SAFETY: `leader` is only compared, never dereferenced; the groups are used on the main thread.
unsafe impl Send for Group {}

static GROUPS: Mutex<Vec<Group>> = Mutex::new(Vec::new());

type Answer = (*const Filter, u64, Result<Vec<u8>, String>);

thread_local! {
    /// Answers that came while this thread held the groups.
    static DEFERRED: RefCell<Vec<Answer>> = const { RefCell::new(Vec::new()) };
}

fn groups() -> MutexGuard<'static, Vec<Group>> {
    GROUPS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The groups, unless this thread holds them already (only the main thread uses them).
fn try_groups() -> Option<MutexGuard<'static, Vec<Group>>> {
    match GROUPS.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Hands the deferred answers to their pollers, once the groups are free again.
fn answer_deferred() {
    while let Some((f, id, answer)) = DEFERRED.with(|d| d.borrow_mut().pop()) {
        // SAFETY: a configuration answered inside its own tick or answer, which is still running
        // further up this thread's stack: Envoy has not destroyed it.
        self::answer(unsafe { &*f }, id, answer);
    }
}

/// Adds `f` (a configuration with a `registry`, parsed from `json`) to its group, creating the
/// group if it is the first, and hands it the models the group's registry serves.
pub fn join(f: &Arc<Filter>, json: &[u8]) {
    join_locked(f, json);
    answer_deferred();
}

fn join_locked(f: &Arc<Filter>, json: &[u8]) {
    let mut groups = groups();
    prune(&mut groups);
    match groups.iter_mut().find(|g| g.json == json) {
        Some(g) => {
            g.members.push(Arc::downgrade(f));
            g.poller.hand_over(f);
        }
        None => {
            let Some(reg) = f.cfg.registry.as_ref() else { return };
            groups.push(Group { json: json.to_vec(), poller: Poller::new(&f.cfg, reg), members: vec![Arc::downgrade(f)], leader: Arc::as_ptr(f) });
        }
    }
}

/// `f`'s tick: the group polls when `f` is its first live member.
pub fn tick(f: &Filter) {
    let start = Instant::now();
    {
        let mut groups = groups();
        prune(&mut groups);
        let Some((g, members)) = lead(&mut groups, f) else { return };
        g.poller.tick(&members);
    }
    answer_deferred();
    f.envoy.record(f.metrics.tick_us, start.elapsed().as_micros() as u64);
}

/// An answer to a callout of `f`'s, for the poller if `f` still leads its group.
pub fn answer(f: &Filter, id: u64, answer: Result<Vec<u8>, String>) {
    let start = Instant::now();
    {
        let Some(mut groups) = try_groups() else {
            DEFERRED.with(|d| d.borrow_mut().push((f as *const Filter, id, answer)));
            return;
        };
        let Some((g, members)) = lead(&mut groups, f) else { return };
        g.poller.answer(&members, id, answer);
    }
    answer_deferred();
    f.envoy.record(f.metrics.tick_us, start.elapsed().as_micros() as u64);
}

/// Drops the groups whose configurations are all gone (their models with them).
pub fn leave() {
    prune(&mut groups());
}

/// `f`'s group and its live members, the leader (`f`) first; `None` when `f` does not lead.
fn lead<'g>(groups: &'g mut [Group], f: &Filter) -> Option<(&'g mut Group, Vec<Arc<Filter>>)> {
    let g = groups.iter_mut().find(|g| g.members.iter().any(|m| std::ptr::eq(m.as_ptr(), f)))?;
    let members: Vec<Arc<Filter>> = g.members.iter().filter_map(Weak::upgrade).collect();
    if !std::ptr::eq(Arc::as_ptr(members.first()?), f) {
        return None;
    }
    if g.leader != Arc::as_ptr(&members[0]) {
        g.leader = Arc::as_ptr(&members[0]);
        g.poller.forget_callout();
    }
    Some((g, members))
}

fn prune(groups: &mut Vec<Group>) {
    for g in groups.iter_mut() {
        g.members.retain(|m| m.strong_count() > 0);
    }
    groups.retain(|g| !g.members.is_empty());
}
