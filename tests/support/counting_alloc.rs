//! A global allocator that counts the calling thread's allocations (other threads, the test
//! harness's included, are not counted), for the "no allocation once warm" tests of the crate
//! (`tests/alloc.rs`) and of the C ABI (`ffi/tests/alloc.rs`), which include this file.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Allocations made by this thread. Const-initialized without a destructor, so reading it
    /// never allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

/// Allocations (and reallocations) made by this thread so far.
fn allocations_so_far() -> usize {
    ALLOCATIONS.with(Cell::get)
}

/// Allocations made by this thread while `f` runs.
pub fn allocations(f: impl FnOnce()) -> usize {
    let before = allocations_so_far();
    f();
    allocations_so_far() - before
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded; `ptr` came from `alloc` above, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
