//! The module's global allocator: the system allocator plus what keeps the per-request path off
//! it, and counters that prove it (exported for the test host).
//!
//! Two allocations per request are forced on us by the ABI and the SDK:
//! - every buffer the host returns (headers, properties, bodies) is allocated by calling the
//!   module's exported `proxy_on_memory_allocate`, which the SDK implements with a `Vec`;
//! - the SDK boxes each HTTP context (`Box<dyn HttpContext>`).
//!
//! So host buffers requested inside a [`host_buffers`] window come from a bump arena that
//! resets itself when its last buffer is freed, and small blocks (≤ 64 bytes: the context box)
//! are recycled through per-size free lists instead of being returned to the system allocator.
//! Wasm is single-threaded, so the state is a plain cell.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// Small-block classes, recycled up to `RECYCLE_DEPTH` blocks each.
const CLASSES: [usize; 3] = [16, 32, 64];
const RECYCLE_DEPTH: usize = 256;
const ARENA_INITIAL: usize = 64 << 10;
/// Requests whose host buffers exceed this are served by the system allocator (and counted).
const ARENA_MAX: usize = 32 << 20;

struct State {
    /// Calls that reached the system allocator (allocations and reallocations).
    heap_allocations: u64,
    /// Host buffers served by the arena.
    arena_allocations: u64,
    /// Small blocks served from a free list.
    recycled_allocations: u64,
    arena: *mut u8,
    arena_cap: usize,
    arena_used: usize,
    arena_live: usize,
    /// Set while the host may call `proxy_on_memory_allocate`.
    window: bool,
    /// Largest arena a window wanted and did not get; the arena grows to it when empty.
    wanted: usize,
    free: [[*mut u8; RECYCLE_DEPTH]; CLASSES.len()],
    free_len: [usize; CLASSES.len()],
}

struct Cell(UnsafeCell<State>);
// SAFETY: a proxy-wasm module runs on one thread; there is no concurrent access.
unsafe impl Sync for Cell {}

static STATE: Cell = Cell(UnsafeCell::new(State {
    heap_allocations: 0,
    arena_allocations: 0,
    recycled_allocations: 0,
    arena: core::ptr::null_mut(),
    arena_cap: 0,
    arena_used: 0,
    arena_live: 0,
    window: false,
    wanted: ARENA_INITIAL,
    free: [[core::ptr::null_mut(); RECYCLE_DEPTH]; CLASSES.len()],
    free_len: [0; CLASSES.len()],
}));

fn state() -> &'static mut State {
    // SAFETY: single-threaded (see `Cell`), and no caller holds the reference across a call
    // that could re-enter the allocator.
    unsafe { &mut *STATE.0.get() }
}

fn class_of(layout: Layout) -> Option<usize> {
    if layout.align() > 16 {
        return None;
    }
    CLASSES.iter().position(|&c| layout.size() <= c)
}

pub struct FilterHeap;

unsafe impl GlobalAlloc for FilterHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let s = state();
        if s.window && layout.align() <= 8 {
            if let Some(p) = s.arena_take(layout.size()) {
                return p;
            }
        }
        if let Some(c) = class_of(layout) {
            if s.free_len[c] > 0 {
                s.free_len[c] -= 1;
                s.recycled_allocations += 1;
                return s.free[c][s.free_len[c]];
            }
            s.heap_allocations += 1;
            return System.alloc(Layout::from_size_align_unchecked(CLASSES[c], 16));
        }
        s.heap_allocations += 1;
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let s = state();
        if s.in_arena(ptr) {
            s.arena_live -= 1;
            if s.arena_live == 0 {
                s.arena_used = 0;
            }
            return;
        }
        if let Some(c) = class_of(layout) {
            if s.free_len[c] < RECYCLE_DEPTH {
                s.free[c][s.free_len[c]] = ptr;
                s.free_len[c] += 1;
            } else {
                System.dealloc(ptr, Layout::from_size_align_unchecked(CLASSES[c], 16));
            }
            return;
        }
        System.dealloc(ptr, layout)
    }
}

impl State {
    fn in_arena(&self, p: *mut u8) -> bool {
        let a = self.arena as usize;
        !self.arena.is_null() && (p as usize) >= a && (p as usize) < a + self.arena_cap
    }

    fn arena_take(&mut self, size: usize) -> Option<*mut u8> {
        let start = self.arena_used.next_multiple_of(8);
        let end = start.checked_add(size.max(1))?;
        if self.arena.is_null() || end > self.arena_cap {
            self.wanted = self.wanted.max(end).min(ARENA_MAX);
            return None;
        }
        self.arena_used = end;
        self.arena_live += 1;
        self.arena_allocations += 1;
        // SAFETY: `start < end <= arena_cap`.
        Some(unsafe { self.arena.add(start) })
    }

    /// Grows the arena to what an earlier window wanted, when no buffer lives in it.
    fn prepare_arena(&mut self) {
        if self.arena_live != 0 || (self.wanted <= self.arena_cap && !self.arena.is_null()) {
            return;
        }
        let cap = self.wanted.next_power_of_two().min(ARENA_MAX);
        // SAFETY: layouts are non-zero and 8-aligned; the old arena is empty.
        unsafe {
            if !self.arena.is_null() {
                System.dealloc(self.arena, Layout::from_size_align_unchecked(self.arena_cap, 8));
            }
            self.heap_allocations += 1;
            self.arena = System.alloc(Layout::from_size_align_unchecked(cap, 8));
        }
        self.arena_cap = if self.arena.is_null() { 0 } else { cap };
        self.arena_used = 0;
    }
}

/// Runs `f` (host calls that return buffers) with the host's buffer allocations served by the
/// arena. Buffers must be freed (dropped) before the callback returns so the arena can reset.
pub fn host_buffers<R>(f: impl FnOnce() -> R) -> R {
    state().prepare_arena();
    state().window = true;
    let r = f();
    state().window = false;
    r
}

/// Counters for the test host's allocation check: calls that reached the system allocator.
#[no_mangle]
pub extern "C" fn edgescore_heap_allocations() -> u64 {
    state().heap_allocations
}

#[no_mangle]
pub extern "C" fn edgescore_arena_allocations() -> u64 {
    state().arena_allocations
}

#[no_mangle]
pub extern "C" fn edgescore_recycled_allocations() -> u64 {
    state().recycled_allocations
}
