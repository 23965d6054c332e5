//! Filter configurations of one plugin JSON share one registry poller and one fetch of the
//! verified bots' key directories: the two listeners of one `envoy.yaml`, or a listener and its
//! replacement during an LDS update. One poll per period and each refusal counted once (the
//! configurations define the same metrics, which Envoy keeps once by name), and a configuration
//! that joins serves the registry's current models and keys at once instead of starting over.
//!
//! The first live configuration of a group polls (with its own HTTP callouts and ticks); when
//! Envoy destroys it, the next one takes over, the poller's high-water marks included. Answers
//! to the old one's callouts never come, so they are forgotten. Everything here runs
//! on Envoy's main thread.
//!
//! Envoy may answer a callout inside the call that makes it (a cluster without a healthy host):
//! the answer then finds the groups locked by the poll that is asking, and waits in `DEFERRED`
//! until that poll is done.

use crate::directories::Directories;
use crate::filter::Filter;
use crate::poller::Poller;
use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::Instant;

struct Group {
    /// The plugin JSON, as Envoy handed it over.
    json: Vec<u8>,
    /// With a `registry`.
    poller: Option<Poller>,
    /// With `verified_bots`.
    directories: Option<Directories>,
    /// In the order they joined; the first live one polls.
    members: Vec<Weak<Filter>>,
    /// The member whose callouts the poller waits for.
    leader: *const Filter,
    /// The live members during a tick or an answer, the leader first; empty otherwise. Kept to
    /// reuse its room: a tick allocates nothing (the module's allocation count stays flat).
    live: Vec<Arc<Filter>>,
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

/// Hands the deferred answers to their pollers, once the groups are free again (timed with the
/// tick or answer that deferred them).
fn answer_deferred() {
    while let Some((f, id, answer)) = DEFERRED.with(|d| d.borrow_mut().pop()) {
        // SAFETY: a configuration answered inside its own tick or answer, which is still running
        // further up this thread's stack: Envoy has not destroyed it.
        dispatch(unsafe { &*f }, id, answer);
    }
}

/// Adds `f` (a configuration with a `registry` or `verified_bots`, parsed from `json`) to its
/// group, creating the group if it is the first, and hands it the models and keys the group
/// serves.
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
            if let Some(p) = &g.poller {
                p.hand_over(f);
            }
            if let Some(d) = &g.directories {
                d.hand_over(f);
            }
        }
        None => groups.push(Group {
            json: json.to_vec(),
            poller: f.cfg.registry.as_ref().map(|reg| Poller::new(&f.cfg, reg)),
            directories: f.cfg.verified_bots.as_ref().map(Directories::new),
            members: vec![Arc::downgrade(f)],
            leader: Arc::as_ptr(f),
            live: Vec::new(),
        }),
    }
}

/// `f`'s tick: the group fetches the directories due and polls when `f` is its first live
/// member.
pub fn tick(f: &Filter) {
    let start = Instant::now();
    {
        let mut groups = groups();
        prune(&mut groups);
        let Some(g) = lead(&mut groups, f) else { return };
        if let Some(d) = g.directories.as_mut() {
            d.tick(&g.live);
        }
        if let Some(p) = g.poller.as_mut() {
            p.tick(&g.live);
        }
        g.live.clear();
    }
    answer_deferred();
    f.envoy.record(f.metrics.tick_us, start.elapsed().as_micros() as u64);
}

/// An answer to a callout of `f`'s, for the poller if `f` still leads its group.
pub fn answer(f: &Filter, id: u64, answer: Result<Vec<u8>, String>) {
    let start = Instant::now();
    if dispatch(f, id, answer) {
        answer_deferred();
        f.envoy.record(f.metrics.tick_us, start.elapsed().as_micros() as u64);
    }
}

/// Hands the answer to the directories or the poller of `f`'s group; `false` when it was
/// deferred or `f` no longer leads.
fn dispatch(f: &Filter, id: u64, answer: Result<Vec<u8>, String>) -> bool {
    let Some(mut groups) = try_groups() else {
        DEFERRED.with(|d| d.borrow_mut().push((f as *const Filter, id, answer)));
        return false;
    };
    let Some(g) = lead(&mut groups, f) else { return false };
    if !g.directories.as_mut().is_some_and(|d| d.answer(&g.live, id, &answer)) {
        if let Some(p) = g.poller.as_mut() {
            p.answer(&g.live, id, answer);
        }
    }
    g.live.clear();
    true
}

/// Drops the groups whose configurations are all gone (their models with them).
pub fn leave() {
    prune(&mut groups());
}

/// `f`'s group, its live members in `live` (the leader, `f`, first); `None` when `f` does not
/// lead.
fn lead<'g>(groups: &'g mut [Group], f: &Filter) -> Option<&'g mut Group> {
    let g = groups.iter_mut().find(|g| g.members.iter().any(|m| std::ptr::eq(m.as_ptr(), f)))?;
    let first = g.members.iter().find(|m| m.strong_count() > 0)?;
    if !std::ptr::eq(first.as_ptr(), f) {
        return None;
    }
    g.live.clear();
    g.live.extend(g.members.iter().filter_map(Weak::upgrade));
    let leader = Arc::as_ptr(g.live.first()?);
    if g.leader != leader {
        g.leader = leader;
        if let Some(p) = g.poller.as_mut() {
            p.forget_callout();
        }
        if let Some(d) = g.directories.as_mut() {
            d.forget_callouts();
        }
    }
    Some(g)
}

fn prune(groups: &mut Vec<Group>) {
    for g in groups.iter_mut() {
        g.members.retain(|m| m.strong_count() > 0);
    }
    groups.retain(|g| !g.members.is_empty());
}
