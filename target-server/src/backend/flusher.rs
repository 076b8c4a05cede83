//! Per-node write-back flushers: a few threads per NUMA node, bound to the node's CPUs, that
//! write the node's dirty cache blocks back to their backing stores (oldest first; the cache
//! hands each block to one flusher at a time, so they work in parallel). Lazily while little
//! is dirty: only blocks dirty for [`WRITEBACK_AGE`] or longer, so repeated writes to a block
//! coalesce in the cache (as the kernel's dirty expiry does for the page cache; SYNCHRONIZE
//! CACHE and FUA make data durable at once). Continuously, whatever their age, once a
//! quarter of the node's blocks or an eighth of its dirty limit is dirty. While nothing is
//! dirty on the node they look twice a second. At shutdown they drain every dirty block
//! before the final sync. A batch goes out at once: an O_DIRECT file's blocks through the
//! flusher's io_uring, an RBD image's as librbd asynchronous writes in flight together
//! (waited for by the flusher), a buffered file's one write after the other.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cache::coherence::write_dirty_all;
use cache::uring::{WriteOp, WriteRing};
use cache::{BlockCache, BlockKey, DirtyRange, Node};
use config::IoEngine;

use crate::registry::{Lun, Registry};

/// Blocks taken per pass (flushers writing with system calls).
const BATCH: usize = 64;
/// Blocks taken per pass by a flusher with an io_uring (written all at once).
const RING_BATCH: usize = 256;
/// Submission slots of a flusher's ring.
const RING_ENTRIES: u32 = 256;
/// Pause between passes while little is dirty (lets writes to the same block coalesce).
const LAZY_PAUSE: Duration = Duration::from_millis(50);
/// Pause while nothing at all is dirty on the node (2 wakeups a second per idle flusher,
/// not 20).
const IDLE_PAUSE: Duration = Duration::from_millis(500);
/// How long a block stays dirty before lazy write-back takes it.
pub const WRITEBACK_AGE: Duration = Duration::from_secs(1);
/// Pause after a failed write-back (the blocks stay dirty; SYNCHRONIZE CACHE reports it).
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// The flusher threads of all nodes.
pub struct Flushers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Flushers {
    /// Start the flushers of every node: one per node with an io_uring of its own when
    /// `engine` allows it and the kernel does, else `per_node` writing with system calls
    /// (the log says which, and why; `io_uring` required and unavailable is an error). A dirty block's LUN is found in `registry` by its cache id,
    /// so LUNs added at run time (tgtadm, reload) are written back too.
    pub fn start(
        cache: &Arc<BlockCache>,
        nodes: &[Node],
        registry: Arc<Registry>,
        dirty_limit: u64,
        per_node: usize,
        engine: IoEngine,
    ) -> std::io::Result<Flushers> {
        let mut rings: Vec<Option<WriteRing>> = Vec::new();
        if engine != IoEngine::Threads {
            match nodes.iter().map(|_| WriteRing::new(RING_ENTRIES)).collect() {
                Ok(r) => {
                    let r: Vec<WriteRing> = r;
                    tracing::info!("write-back: io_uring, one flusher per node");
                    rings = r.into_iter().map(Some).collect();
                }
                Err(e) if engine == IoEngine::Uring => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("io_engine io_uring: the kernel refuses io_uring: {e}"),
                    ));
                }
                Err(e) => tracing::warn!(
                    "io_uring unavailable ({e}): write-back uses {} threads per node with pwrite",
                    per_node.max(1)
                ),
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut rings = rings.into_iter();
        for node in nodes {
            let ring = rings.next();
            let count = if ring.is_some() { 1 } else { per_node.max(1) };
            let mut ring = ring.flatten();
            for i in 0..count {
                let (cache, registry, stop) =
                    (Arc::clone(cache), Arc::clone(&registry), Arc::clone(&stop));
                let (index, cpus) = (node.index, node.cpus.clone());
                let ring = ring.take();
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("flush-n{index}-{i}"))
                        .spawn(move || {
                            if let Err(e) = cache::topology::bind_current_thread(&cpus) {
                                tracing::debug!("cannot bind flusher to {cpus:?}: {e}");
                            }
                            run(&cache, index, &registry, &stop, dirty_limit, ring);
                        })?,
                );
            }
        }
        Ok(Flushers { stop, threads })
    }

    /// Write every dirty block back, then stop the threads.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in &self.threads {
            t.thread().unpark(); // out of an idle pause at once
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn run(
    cache: &BlockCache,
    node: usize,
    registry: &Registry,
    stop: &AtomicBool,
    dirty_limit: u64,
    mut ring: Option<WriteRing>,
) {
    let batch_max = if ring.is_some() { RING_BATCH } else { BATCH };
    let mut batch = Vec::with_capacity(batch_max);
    let mut work: Vec<(DirtyRange, Arc<Lun>)> = Vec::with_capacity(batch_max);
    let mut results = Vec::new();
    let mut last_error: Option<Instant> = None;
    // the LUN of the previous block of the batch (a batch is mostly one LUN's blocks)
    let mut last: Option<Arc<Lun>> = None;
    let started = Instant::now();
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        batch.clear();
        cache.set_clock_ms(started.elapsed().as_millis() as u64);
        let under_pressure = stopping || pressed(cache, node, dirty_limit);
        let age = if under_pressure {
            0
        } else {
            WRITEBACK_AGE.as_millis() as u64
        };
        let taken = cache.collect_dirty_aged(node, batch_max, &mut batch, age);
        let mut orphans = 0usize;
        for r in batch.drain(..) {
            let id = r.key().lun;
            if last.as_ref().is_none_or(|l| l.cache_id != id) {
                last = registry.lun_by_cache_id(id);
            }
            match &last {
                Some(lun) => work.push((r, Arc::clone(lun))),
                // no LUN has this id any more (deleted while a write was landing): the
                // block stays dirty and queued (dropping the range requeues it)
                None => orphans += 1,
            }
        }
        let failure = match ring.as_mut() {
            Some(ring) => write_ring(ring, &work, &mut results),
            None => write_each(&work),
        };
        for (r, _) in work.drain(..) {
            if !failure
                .as_ref()
                .is_some_and(|f| f.failed.contains(&r.key()))
            {
                let _ = r.mark_clean();
            }
        }
        // not kept between batches: a LUN deleted meanwhile must close (its image, its
        // cluster connection) now, not when this thread next flushes another LUN
        last = None;
        let failed = failure.is_some();
        if let Some(f) = failure
            && last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10))
        {
            tracing::error!(lun = f.lun, path = %f.path.display(),
                blocks = f.failed.len(),
                "write-back failed, data stays dirty in the cache: {}", f.error);
            last_error = Some(Instant::now());
        }
        if failed {
            if stopping {
                tracing::error!(
                    node,
                    "stopping with dirty data that could not be written back"
                );
                return;
            }
            std::thread::sleep(ERROR_PAUSE);
        } else if taken == 0 || orphans == taken {
            if stopping {
                if orphans > 0 {
                    tracing::error!(
                        node,
                        blocks = orphans,
                        "stopping with dirty blocks of LUNs that no longer exist"
                    );
                }
                return;
            }
            if cache.dirty_bytes(node) == 0 {
                // nothing dirty on the node at all: a longer pause (a block dirtied now
                // is not due before WRITEBACK_AGE anyway; a burst that reaches the dirty
                // limit meanwhile is written through by its writers)
                std::thread::park_timeout(IDLE_PAUSE);
            } else {
                std::thread::sleep(LAZY_PAUSE);
            }
        } else if !under_pressure && taken < batch_max {
            std::thread::sleep(LAZY_PAUSE);
        }
    }
}

/// Blocks of a batch whose write-back failed (they stay dirty), and the first error.
struct Failure {
    failed: Vec<BlockKey>,
    lun: u64,
    path: std::path::PathBuf,
    error: std::io::Error,
}

impl Failure {
    fn add(this: &mut Option<Failure>, key: BlockKey, lun: &Lun, error: std::io::Error) {
        match this {
            Some(f) => f.failed.push(key),
            None => {
                *this = Some(Failure {
                    failed: vec![key],
                    lun: lun.number,
                    path: lun.store.path().to_path_buf(),
                    error,
                })
            }
        }
    }
}

/// Write the blocks without io_uring: each LUN's run of neighbouring blocks in the batch
/// handed to its store at once (an RBD image has them in flight together; a file writes
/// them one after the other with system calls).
fn write_each(work: &[(DirtyRange, Arc<Lun>)]) -> Option<Failure> {
    let mut failure = None;
    write_groups(work.iter(), &mut failure);
    failure
}

/// [`write_each`] for the blocks `items` yields (in batch order).
fn write_groups<'a>(
    items: impl Iterator<Item = &'a (DirtyRange, Arc<Lun>)>,
    failure: &mut Option<Failure>,
) {
    let mut results = Vec::new();
    let mut ranges: Vec<&DirtyRange> = Vec::new();
    let mut items = items.peekable();
    while let Some((first, lun)) = items.next() {
        ranges.clear();
        ranges.push(first);
        while let Some((r, _)) = items.next_if(|(_, l)| Arc::ptr_eq(l, lun)) {
            ranges.push(r);
        }
        write_dirty_all(&*lun.store, &ranges, &mut results);
        for (r, done) in ranges.iter().zip(results.drain(..)) {
            if let Err(e) = done {
                Failure::add(failure, r.key(), lun, e);
            }
        }
    }
}

/// Write the whole batch through the ring at once (the runs of O_DIRECT stores; the others
/// are handed to their stores as [`write_each`] does). A run the ring wrote short, or refused
/// (e.g. EINVAL from a file system that wants coarser O_DIRECT alignment), is finished or
/// retried with `write_at`, which bounces unaligned memory; only what that also fails
/// leaves its block dirty.
fn write_ring(
    ring: &mut WriteRing,
    work: &[(DirtyRange, Arc<Lun>)],
    results: &mut Vec<std::io::Result<usize>>,
) -> Option<Failure> {
    let mut ops = Vec::new();
    let mut owners = Vec::new();
    let mut failure = None;
    // a buffered store (tmpfs, no O_DIRECT) or an RBD image is written by its store: io_uring
    // would hand a buffered write to one of its own kernel workers (a thread hop per write)
    write_groups(
        work.iter().filter(|(_, lun)| !lun.store.is_direct()),
        &mut failure,
    );
    for (j, (r, lun)) in work.iter().enumerate() {
        if !lun.store.is_direct() {
            continue;
        }
        for (offset, data) in r.runs() {
            match lun
                .store
                .check_write(data.as_ptr() as usize, offset, data.len())
            {
                Ok(()) => {
                    ops.push(WriteOp {
                        fd: lun.store.raw_fd(),
                        data,
                        offset,
                    });
                    owners.push(j);
                }
                Err(_) => {
                    if let Err(e) = lun.store.write_at(data, offset, false) {
                        Failure::add(&mut failure, r.key(), lun, e);
                    }
                }
            }
        }
    }
    ring.write_all(&ops, results);
    for ((op, result), &j) in ops.iter().zip(results.iter()).zip(&owners) {
        let (r, lun) = &work[j];
        let retry = match result {
            Ok(n) if *n == op.data.len() => continue,
            Ok(n) => *n,
            Err(_) => 0,
        };
        let rest = &op.data[retry..];
        if let Err(e) = lun.store.write_at(rest, op.offset + retry as u64, false) {
            if !failure
                .as_ref()
                .is_some_and(|f: &Failure| f.failed.contains(&r.key()))
            {
                Failure::add(&mut failure, r.key(), lun, e);
            }
        }
    }
    failure
}

/// True when the node should be flushed without pause: a quarter of its blocks are dirty, or
/// an eighth of its dirty limit.
fn pressed(cache: &BlockCache, node: usize, dirty_limit: u64) -> bool {
    if cache.dirty_bytes(node) >= dirty_limit / 8 {
        return true;
    }
    let (mut dirty, mut slots) = (0usize, 0usize);
    for p in cache.partitions().iter().filter(|p| p.node() == node) {
        let (d, s) = p.dirty_queued();
        dirty += d;
        slots += s;
    }
    dirty * 4 >= slots
}
