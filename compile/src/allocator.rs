//! The CLI's global allocator: mimalloc, with a bump arena in front of it while `compile` runs.
//!
//! A compile is a burst of allocations, 1.6–16× the model file in total (23 MB for a 6.7 MB
//! CatBoost `.cbm`), then an exit. Most of its memory cost was not the allocator's
//! bookkeeping but the kernel zeroing fresh pages: mimalloc keeps one page per size class and
//! thread, a 4 MiB page for each class between 84 and 512 KiB (every size a growing `Vec`
//! passes through), so that compile touched 52 MB for 10 MB live, and `clear_page` was a third
//! of its profile. The arena hands out consecutive bytes of one reservation instead, so a
//! compile touches what it allocates and little more: 35 MB resident instead of 57, and 0.76×
//! the wall time on that model; 0.87–0.99× on the other formats (benches/compile_time/README.md).
//! Freeing in the arena gives nothing back (the process is about to exit), except the newest
//! block, and growing the newest block (a `Vec` being filled) extends it in place.
//!
//! The arena is at most `ARENA_BYTES`; past it, and in every other command, mimalloc serves.
//! Its pages are transparent huge pages like mimalloc's, and `MIMALLOC_ALLOW_THP=0` turns
//! both off.

use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::{Acquire, Relaxed, Release}};

/// Address space reserved, not memory: pages exist once touched. Bounds what a compile can
/// hold beyond mimalloc's reuse of freed blocks.
const ARENA_BYTES: usize = 512 << 20;
const HUGE_PAGE: usize = 2 << 20;

pub struct CliAllocator;

/// The arena's first byte, 0 without an arena. Set once; blocks in the arena are recognised
/// by their address for the rest of the process.
static BASE: AtomicUsize = AtomicUsize::new(0);
/// Offset of the first free byte past `BASE`.
static NEXT: AtomicUsize = AtomicUsize::new(0);
/// Whether new blocks come from the arena.
static OPEN: AtomicBool = AtomicBool::new(false);

/// New blocks come from the arena from now on, on every thread, until the process exits. If
/// the address space cannot be reserved, mimalloc goes on serving everything.
pub fn open_arena() {
    if BASE.load(Relaxed) != 0 {
        return;
    }
    // SAFETY: an anonymous private mapping of fresh address space; nothing else refers to it.
    let base = unsafe {
        let p = libc::mmap(std::ptr::null_mut(), ARENA_BYTES + HUGE_PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0);
        if p == libc::MAP_FAILED {
            return;
        }
        // A huge page needs a 2 MiB-aligned start; the extra 2 MiB above covers the rounding.
        let aligned = (p as usize).next_multiple_of(HUGE_PAGE);
        if huge_pages_allowed() {
            libc::madvise(aligned as *mut libc::c_void, ARENA_BYTES, libc::MADV_HUGEPAGE);
        }
        aligned
    };
    BASE.store(base, Relaxed);
    // Release: a thread that sees the arena open sees where it is.
    OPEN.store(true, Release);
}

/// mimalloc's own switch, read the way mimalloc reads it (`0`, `false`, `off`, `no`).
fn huge_pages_allowed() -> bool {
    let off = |v: &str| ["0", "false", "off", "no"].iter().any(|o| v.eq_ignore_ascii_case(o));
    !std::env::var("MIMALLOC_ALLOW_THP").is_ok_and(|v| off(v.trim()))
}

fn in_arena(p: *mut u8) -> bool {
    let base = BASE.load(Relaxed);
    base != 0 && (p as usize).wrapping_sub(base) < ARENA_BYTES
}

/// A new block from the arena, if it is open and has room.
fn from_arena(layout: Layout) -> Option<*mut u8> {
    if OPEN.load(Acquire) {
        bump(layout)
    } else {
        None
    }
}

/// Blocks up to `SMALL_MAX` come from a chunk of the arena that the allocating thread owns, so
/// that threads do not contend for one counter: a UBJSON compile, which reads trees on every
/// core, was 1.15× slower with a single counter than with mimalloc's per-thread heaps.
/// Chunks and larger blocks come from the shared counter.
const CHUNK_BYTES: usize = 256 << 10;
const SMALL_MAX: usize = CHUNK_BYTES / 8;
const CHUNK_ALIGN: usize = 4096;

thread_local! {
    /// This thread's chunk: (start, first free byte, end), all 0 before its first.
    static CHUNK: Cell<(usize, usize, usize)> = const { Cell::new((0, 0, 0)) };
}

/// Whether a block of this layout is a chunk's. Fixed by the layout, which `dealloc` and
/// `realloc` are given as `alloc` was, so a block is only ever given back where it came from.
fn small(layout: Layout) -> bool {
    layout.size() <= SMALL_MAX && layout.align() <= CHUNK_ALIGN
}

fn bump(layout: Layout) -> Option<*mut u8> {
    if !small(layout) {
        return shared_bump(layout);
    }
    CHUNK.with(|chunk| {
        let (start, next, end) = chunk.get();
        let at = next.next_multiple_of(layout.align());
        if start != 0 && at + layout.size() <= end {
            chunk.set((start, at + layout.size(), end));
            return Some(at as *mut u8);
        }
        let fresh = shared_bump(Layout::from_size_align(CHUNK_BYTES, CHUNK_ALIGN).ok()?)? as usize;
        chunk.set((fresh, fresh + layout.size(), fresh + CHUNK_BYTES));
        Some(fresh as *mut u8)
    })
}

fn shared_bump(layout: Layout) -> Option<*mut u8> {
    let base = BASE.load(Relaxed);
    let mut next = NEXT.load(Relaxed);
    loop {
        let start = (base + next).next_multiple_of(layout.align()) - base;
        let end = start.checked_add(layout.size()).filter(|&e| e <= ARENA_BYTES)?;
        match NEXT.compare_exchange_weak(next, end, Relaxed, Relaxed) {
            Ok(_) => return Some((base + start) as *mut u8),
            Err(now) => next = now,
        }
    }
}

/// Moves the end of the newest block at `p` (of `old` bytes) to `new` bytes past `p`, if it is
/// the newest block of this thread's chunk (small) or of the shared counter (large) and the
/// new end fits. `new` = 0 gives the block back.
fn resize_newest(p: *mut u8, layout: Layout, new: usize) -> bool {
    let (p, old) = (p as usize, layout.size());
    if small(layout) {
        CHUNK.with(|chunk| {
            let (start, next, end) = chunk.get();
            let newest = start <= p && p + old == next && p + new <= end;
            if newest {
                chunk.set((start, p + new, end));
            }
            newest
        })
    } else {
        let offset = p - BASE.load(Relaxed);
        offset + new <= ARENA_BYTES && NEXT.compare_exchange(offset + old, offset + new, Relaxed, Relaxed).is_ok()
    }
}

// SAFETY: arena blocks are disjoint ranges of one mapping that lives until the process exits,
// aligned as asked; every other block is mimalloc's and goes back to it.
unsafe impl GlobalAlloc for CliAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        from_arena(layout).unwrap_or_else(|| MiMalloc.alloc(layout))
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match from_arena(layout) {
            Some(p) => {
                // The newest block's bytes may have been handed out and freed before.
                std::ptr::write_bytes(p, 0, layout.size());
                p
            }
            None => MiMalloc.alloc_zeroed(layout),
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if in_arena(p) {
            // Only the newest block's bytes are handed out again (a temporary freed at once).
            resize_newest(p, layout, 0);
        } else {
            MiMalloc.dealloc(p, layout)
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !in_arena(p) {
            return MiMalloc.realloc(p, layout, new_size);
        }
        // SAFETY (caller's contract): `new_size` is non-zero and fits `layout.align()`.
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        // The newest block grows or shrinks in place; any other block shrinks in place, its
        // tail unused.
        if small(new_layout) == small(layout) && (resize_newest(p, layout, new_size) || new_size <= layout.size()) {
            return p;
        }
        let moved = self.alloc(new_layout);
        if !moved.is_null() {
            std::ptr::copy_nonoverlapping(p, moved, layout.size().min(new_size));
            self.dealloc(p, layout);
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Other threads of the test harness allocate too, so these check what holds whatever they
    // do: alignment, contents kept across growth, zeroing, and the fallback past the arena.
    #[test]
    fn arena_blocks_are_aligned_keep_their_bytes_and_fall_back_to_mimalloc() {
        open_arena();
        let mut vectors: Vec<Vec<u32>> = Vec::new();
        for n in 0..300u32 {
            // Interleaved growth: sometimes the newest block (grown in place), sometimes not.
            let mut v = Vec::new();
            for k in 0..n * 13 {
                v.push(k ^ n);
                if k % 97 == 0 {
                    vectors.push(vec![n; 3]);
                }
            }
            vectors.push(v);
        }
        for v in vectors.iter().filter(|v| v.len() > 3) {
            let n = v.len() as u32 / 13;
            assert!(v.iter().enumerate().all(|(k, &x)| x == k as u32 ^ n));
        }
        // Threads allocating at once, small blocks and large, never share a byte.
        let filled: Vec<Vec<Vec<u64>>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4u64)
                .map(|t| s.spawn(move || (0..200u64).map(|n| (0..n * n * (t + 1)).map(|k| k * 4 + t).collect()).collect()))
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for (t, vectors) in filled.iter().enumerate() {
            for v in vectors {
                assert!(v.iter().enumerate().all(|(k, &x)| x == k as u64 * 4 + t as u64));
            }
        }
        unsafe {
            for align in [1, 8, 64, 4096, 1 << 21] {
                let layout = Layout::from_size_align(100, align).unwrap();
                let p = CliAllocator.alloc(layout);
                assert_eq!(p as usize % align, 0);
                assert!(in_arena(p));
                // Freed at once: its bytes are handed out again, and must come back zeroed.
                p.write_bytes(0xff, 100);
                CliAllocator.dealloc(p, layout);
                let z = CliAllocator.alloc_zeroed(layout);
                assert!(std::slice::from_raw_parts(z, 100).iter().all(|&b| b == 0));
                CliAllocator.dealloc(z, layout);
            }
            let big = Layout::from_size_align(ARENA_BYTES + 1, 8).unwrap();
            let p = CliAllocator.alloc(big);
            assert!(!p.is_null() && !in_arena(p));
            CliAllocator.dealloc(p, big);
        }
    }
}
