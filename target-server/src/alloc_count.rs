//! Counting of heap allocations made by event threads: the proof that the per-I/O path
//! (PDU receive, cache hit or write-back, Data-In, response) allocates nothing once a
//! connection is in its steady state. numatgtd installs [`CountingAlloc`] as its global
//! allocator; event threads mark themselves with [`mark_event_thread`]; `kill -USR1` logs
//! the totals (`alloc report:`), which tests compare before and after a workload.
//! The cost is one thread-local read per allocation, plus a relaxed atomic add on event
//! threads (whose steady state makes none).
//!
//! With `NUMATGT_ALLOC_TRACE=1` in numatgtd's environment every event-thread allocation also
//! writes its backtrace to standard error (`event-thread allocation of N bytes:`), so that
//! a test that finds one can say where it came from.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static EVENT_ALLOCS: AtomicU64 = AtomicU64::new(0);
static EVENT_ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);
/// `NUMATGT_ALLOC_TRACE` was set when the first event thread started.
static TRACE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set on event threads. A `const` thread local without destructor: safe to read from
    /// inside the allocator (it never allocates).
    static EVENT_THREAD: Cell<bool> = const { Cell::new(false) };
    /// Set while this thread writes an allocation's backtrace (whose own allocations are
    /// neither counted nor traced).
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

/// The system allocator, counting what event threads allocate.
pub struct CountingAlloc;

#[inline]
fn count(size: usize) {
    if EVENT_THREAD.try_with(Cell::get).unwrap_or(false) {
        if TRACING.try_with(Cell::get).unwrap_or(true) {
            return;
        }
        EVENT_ALLOCS.fetch_add(1, Ordering::Relaxed);
        EVENT_ALLOC_BYTES.fetch_add(size as u64, Ordering::Relaxed);
        if TRACE.load(Ordering::Relaxed) {
            trace(size);
        }
    }
}

/// Writes where this event-thread allocation comes from to standard error.
#[cold]
fn trace(size: usize) {
    let _ = TRACING.try_with(|t| t.set(true));
    let bt = std::backtrace::Backtrace::force_capture();
    eprintln!("event-thread allocation of {size} bytes:\n{bt}");
    let _ = TRACING.try_with(|t| t.set(false));
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds GlobalAlloc's
// contract; the counting touches only atomics and a destructor-free thread local.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: same layout as given to us, per GlobalAlloc's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: `ptr`/`layout` came from `System`; the caller upholds the size rules.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Count this thread's allocations as event-thread allocations from now on. First makes
/// the lazy per-thread state of the libraries on the I/O path exist (parking_lot creates its
/// thread data, and may grow its global table, the first time a thread waits on a contended
/// lock — a partition lock, say — which would otherwise happen at a random moment of
/// steady-state I/O).
pub(crate) fn mark_event_thread() {
    let m = parking_lot::Mutex::new(());
    let cv = parking_lot::Condvar::new();
    let mut g = m.lock();
    // parks (with a zero timeout) once: the thread's parking_lot data is set up now
    let _ = cv.wait_for(&mut g, std::time::Duration::ZERO);
    drop(g);
    if std::env::var_os("NUMATGT_ALLOC_TRACE").is_some_and(|v| v == "1") {
        TRACE.store(true, Ordering::Relaxed);
    }
    let _ = EVENT_THREAD.try_with(|c| c.set(true));
}

/// Allocations (including reallocations) made by event threads so far, and their bytes.
/// Zero unless [`CountingAlloc`] is the global allocator.
pub fn event_thread_allocations() -> (u64, u64) {
    (
        EVENT_ALLOCS.load(Ordering::Relaxed),
        EVENT_ALLOC_BYTES.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static A: CountingAlloc = CountingAlloc;

    #[test]
    fn counts_only_marked_threads() {
        let before = event_thread_allocations().0;
        let v: Vec<u8> = Vec::with_capacity(100);
        drop(v);
        // unmarked (test) thread: other tests may run in parallel, but none is marked here
        std::thread::spawn(|| {
            mark_event_thread();
            let (a0, b0) = event_thread_allocations();
            let v: Vec<u64> = Vec::with_capacity(10);
            std::hint::black_box(&v);
            let (a1, b1) = event_thread_allocations();
            assert_eq!(a1 - a0, 1);
            assert_eq!(b1 - b0, 80);
        })
        .join()
        .expect("thread");
        assert!(event_thread_allocations().0 > before);
    }
}
