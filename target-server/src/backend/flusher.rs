//! Per-node write-back flushers: a few threads per NUMA node, bound to the node's CPUs, that
//! write the node's dirty cache blocks back to their backing stores (oldest first; the cache
//! hands each block to one flusher at a time, so they work in parallel). Lazily while little
//! is dirty: only blocks dirty for [`WRITEBACK_AGE`] or longer, so repeated writes to a block
//! coalesce in the cache (as the kernel's dirty expiry does for the page cache; SYNCHRONIZE
//! CACHE and FUA make data durable at once). Continuously, whatever their age, once a
//! quarter of the node's blocks or an eighth of its dirty limit is dirty. At shutdown they
//! drain every dirty block before the final sync.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cache::coherence::write_dirty;
use cache::{BlockCache, Node};

use crate::registry::{Lun, Registry};

/// Blocks taken per pass.
const BATCH: usize = 64;
/// Pause between passes while little is dirty (lets writes to the same block coalesce).
const LAZY_PAUSE: Duration = Duration::from_millis(50);
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
    /// Start `per_node` flushers on every node. A dirty block's LUN is found in `registry`
    /// by its cache id, so LUNs added at run time (tgtadm, reload) are written back too.
    pub fn start(
        cache: &Arc<BlockCache>,
        nodes: &[Node],
        registry: Arc<Registry>,
        dirty_limit: u64,
        per_node: usize,
    ) -> std::io::Result<Flushers> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for node in nodes {
            for i in 0..per_node.max(1) {
                let (cache, registry, stop) =
                    (Arc::clone(cache), Arc::clone(&registry), Arc::clone(&stop));
                let (index, cpus) = (node.index, node.cpus.clone());
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("flush-n{index}-{i}"))
                        .spawn(move || {
                            if let Err(e) = cache::topology::bind_current_thread(&cpus) {
                                tracing::debug!("cannot bind flusher to {cpus:?}: {e}");
                            }
                            run(&cache, index, &registry, &stop, dirty_limit);
                        })?,
                );
            }
        }
        Ok(Flushers { stop, threads })
    }

    /// Write every dirty block back, then stop the threads.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn run(cache: &BlockCache, node: usize, registry: &Registry, stop: &AtomicBool, dirty_limit: u64) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut last_error: Option<Instant> = None;
    // the LUN of the previous block (a batch is mostly one LUN's blocks)
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
        let taken = cache.collect_dirty_aged(node, BATCH, &mut batch, age);
        let mut failed = false;
        let mut orphans = 0usize;
        for r in batch.drain(..) {
            let id = r.key().lun;
            if last.as_ref().is_none_or(|l| l.cache_id != id) {
                last = registry.lun_by_cache_id(id);
            }
            let Some(lun) = last.as_deref() else {
                // no LUN has this id any more (deleted while a write was landing): the
                // block stays dirty and queued (dropping the range requeues it)
                orphans += 1;
                continue;
            };
            match write_dirty(&*lun.store, &r) {
                Ok(()) => {
                    let _ = r.mark_clean();
                }
                Err(e) => {
                    failed = true;
                    if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        tracing::error!(lun = lun.number, path = %lun.store.path().display(),
                            "write-back failed, data stays dirty in the cache: {e}");
                        last_error = Some(Instant::now());
                    }
                }
            }
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
            std::thread::sleep(LAZY_PAUSE);
        } else if !under_pressure && taken < BATCH {
            std::thread::sleep(LAZY_PAUSE);
        }
    }
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
