//! Steady-state cache operations allocate nothing: hits, misses with eviction, fills,
//! write-back writes (including copy-on-write), flush collection into a reused vector and
//! routing are run under a counting global allocator, which must count zero. So must the
//! coherence calls of a request (lookup into pooled lists, fill, write-back that may not
//! wait, write_dirty) once their pools are warm.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cache::coherence::{self, CachedRead, Looked, NoWait};
use cache::{BackingStore, Store};
use cache::{
    BlockCache, BlockSpan, CacheConfig, Lookup, ReadAhead, RouteRequest, Router, RouterPolicy,
    Topology,
};

struct Counting;

thread_local! {
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts on the calling thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        COUNT.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        COUNT.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocations() -> usize {
    COUNT.with(|c| c.get())
}

/// Two virtual nodes of 16 blocks of 16 KiB, two partitions each.
fn small_cache() -> BlockCache {
    let topo = Topology::split(&[0, 1], 2, 1);
    let cfg = CacheConfig {
        block_size: 16384,
        group_blocks: 4,
        partitions_per_node: 2,
        bytes_per_node: 16 * 16384,
        huge_pages: false,
        dirty_limit_bytes: 8 * 16384,
        ..CacheConfig::default()
    };
    BlockCache::new(cfg, &topo).unwrap()
}

#[test]
fn steady_state_does_not_allocate() {
    let cache = small_cache();
    let router = Router::new(*cache.geometry(), RouterPolicy::default());
    let mut flushes = Vec::with_capacity(64);
    let data = vec![7u8; 16384];
    let round = |cache: &BlockCache, flushes: &mut Vec<cache::DirtyRange>| {
        for i in 0..200u64 {
            let (offset, len) = ((i * 7919 % 97) * 4096, 4096 * (1 + i % 40));
            let r = router.route(
                &RouteRequest {
                    lun: 0,
                    offset,
                    len,
                    conn_node: (i % 2) as usize,
                    already_routed: false,
                },
                |_| 0,
            );
            std::hint::black_box(r);
            for span in cache.spans(offset, len).unwrap() {
                match cache.lookup(0, &span, ReadAhead::None) {
                    Lookup::Hit(r) => {
                        let keep = r.clone(); // pinned twice: a write now copies on write
                        let w = BlockSpan::new(16384, span.block_no(), 0, 4096).unwrap();
                        let _ = cache.write_back(0, &w, &data[..4096]);
                        std::hint::black_box(keep.bytes()[0]);
                    }
                    Lookup::Miss(mut f) => {
                        for run in f.runs_mut() {
                            run.buf.fill(1);
                        }
                        let _ = f.complete();
                    }
                    Lookup::Busy | Lookup::NoSpace | Lookup::Bypass => {}
                }
            }
            if i % 8 == 0 {
                for node in 0..2 {
                    cache.collect_dirty(node, 32, flushes);
                    for r in flushes.drain(..) {
                        let n: usize = r.runs().map(|(_, b)| b.len()).sum();
                        std::hint::black_box(n);
                        let _ = r.mark_clean();
                    }
                }
            }
        }
    };
    round(&cache, &mut flushes); // warm up (thread-locals, lazily initialised state)
    let before = allocations();
    round(&cache, &mut flushes);
    let after = allocations();
    assert_eq!(after - before, 0, "the steady state allocated");
    let c = cache.counters(0).unwrap();
    assert!(c.hits > 0 && c.misses > 0 && c.evictions > 0, "{c:?}");
    cache.check_invariants().unwrap();
}

/// A store that reads a pattern and drops writes (no allocation of its own).
#[derive(Debug)]
struct Pattern;

impl Store for Pattern {
    fn measure(&self) -> std::io::Result<u64> {
        Ok(1 << 30)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        buf.fill(offset as u8);
        Ok(())
    }
    fn write_at(&self, data: &[u8], _offset: u64, _durable: bool) -> std::io::Result<()> {
        std::hint::black_box(data);
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn coherence_requests_do_not_allocate_once_warm() {
    let cache = small_cache();
    let store =
        BackingStore::from_store(std::path::Path::new("pattern"), 512, Box::new(Pattern)).unwrap();
    let data = vec![9u8; 8192];
    let mut flushes = Vec::with_capacity(64);
    let (mut hits, mut fills) = (0u32, 0u32);
    let mut round = |cache: &BlockCache| {
        for i in 0..200u64 {
            let (offset, len) = ((i * 7919 % 97) * 4096, 4096 * (1 + i % 20));
            let node = (i % 2) as usize;
            match coherence::lookup(cache, 0, node, offset, len) {
                Looked::AllHits(refs) => {
                    hits += 1;
                    std::hint::black_box(refs.len());
                }
                Looked::Pieces(p) => {
                    if let CachedRead::Blocks(refs) = coherence::fill(&store, p) {
                        fills += 1;
                        std::hint::black_box(refs.len());
                    }
                }
                Looked::NotAdmitted | Looked::ReadAround => {}
            }
            let w = (i * 31 % 97) * 4096;
            let _ = coherence::write_back(cache, 0, w, &data, &mut NoWait);
            if i % 8 == 0 {
                for n in 0..2 {
                    cache.collect_dirty(n, 32, &mut flushes);
                    for r in flushes.drain(..) {
                        coherence::write_dirty(&store, &r).unwrap();
                        let _ = r.mark_clean();
                    }
                }
            }
        }
    };
    round(&cache); // warm up: thread-local block lists, per-node piece lists
    let before = allocations();
    round(&cache);
    let after = allocations();
    assert_eq!(after - before, 0, "the coherence steady state allocated");
    assert!(hits > 0 && fills > 0, "hits {hits}, fills {fills}");
    cache.check_invariants().unwrap();
}
