//! Which engine runs a backend job. Every event thread owns its store reads
//! ([`ThreadReads`], thread-local): a read that one of its commands needs (a cache fill, an
//! uncached read) goes to the engine its store names ([`cache::ReadEngine`]) — the thread's
//! io_uring ring for O_DIRECT files and devices (submitted together once per loop turn,
//! reaped when the ring's eventfd fires), its ring of librbd's asynchronous reads for RBD
//! images (unless `io_engine` is `threads`; their callbacks only queue the outcome and write
//! that ring's eventfd), or at once for stores that never block (null) — and its result
//! goes to the connection's mailbox on that thread (no other thread, no wakeup per read).
//! A write without the cache to a store that never blocks completes at once too. Everything
//! else, reads from other threads, buffered stores, writes and flushes, and everything on a
//! host without io_uring (RBD reads excepted), goes to the node's I/O worker threads. A
//! ring read that ends needing blocking work (read around the cache after a racing write,
//! an alignment the file system refused) continues on the worker threads.

use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cache::coherence::{self, CachedRead, FillRead, PieceList};
use cache::store::ThreadReads;
use cache::uring::{ReadOp, ReadRing, RingJob};
use cache::{AlignedBuf, BackingStore, BlockCache, IoPool, Node, ReadEngine};
use config::IoEngine;

use super::Workers;
use super::jobs::{Extent, Job};
use super::reply::Replier;
use super::storage;

/// Slots of an event thread's read ring (reads in flight at most; more wait in its backlog).
const RING_ENTRIES: u32 = 256;

/// The I/O engines of every node.
pub struct NodeWorkers {
    pools: Vec<Arc<IoPool<Job>>>,
    /// Event threads may own read rings (io_uring allowed and available).
    rings: bool,
    /// Event threads read RBD images with librbd's asynchronous calls (`io_engine` is not
    /// `threads`).
    rbd_aio: bool,
    /// Ring jobs in flight per node (all its threads' rings), for the queue-depth metric.
    ring_jobs: Vec<Arc<AtomicUsize>>,
}

impl NodeWorkers {
    /// Start `threads` I/O workers per node and find out whether event threads may own
    /// read rings: not with `threads`; with `auto` when the kernel allows io_uring (else
    /// the worker threads alone, logged); with `io_uring` an error when it does not.
    pub fn start(nodes: &[Node], threads: usize, engine: IoEngine) -> io::Result<NodeWorkers> {
        let mut pools = Vec::new();
        for node in nodes {
            pools.push(Arc::new(IoPool::start(node, threads)?));
        }
        let mut rings = false;
        if engine != IoEngine::Threads {
            // a probe: the rings themselves are made by each event thread
            match ReadRing::<RingRead>::new(2) {
                Ok(_) => {
                    tracing::info!("reads: io_uring, one ring per event thread");
                    rings = true;
                }
                Err(e) if engine == IoEngine::Uring => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("io_engine io_uring: the kernel refuses io_uring: {e}"),
                    ));
                }
                Err(e) => tracing::warn!(
                    "io_uring unavailable ({e}): reads use {threads} I/O threads per node"
                ),
            }
        }
        let ring_jobs = nodes.iter().map(|_| Arc::default()).collect();
        Ok(NodeWorkers {
            pools,
            rings,
            rbd_aio: engine != IoEngine::Threads,
            ring_jobs,
        })
    }

    /// Nodes served.
    pub fn nodes(&self) -> usize {
        self.pools.len()
    }

    /// Give the calling event thread (of node `node`) its store reads, with its io_uring
    /// read ring when rings are on; returns the ring's eventfd to poll, readable
    /// (edge-triggered) when completions arrived. A thread whose ring cannot be made uses
    /// the I/O threads for those reads (logged).
    pub fn start_thread_ring(&self, node: usize) -> Option<RawFd> {
        self.start_engine(node, "io_uring", self.rings, |r| {
            r.start_uring(RING_ENTRIES)
        })
    }

    /// Give the calling event thread (of node `node`) its ring of librbd's asynchronous
    /// reads, unless `io_engine` is `threads`; returns the eventfd to poll (edge-triggered)
    /// for arrived reads. A thread whose ring cannot be made reads RBD images on the I/O
    /// threads (logged).
    pub fn start_thread_aio(&self, node: usize) -> Option<RawFd> {
        self.start_engine(node, "librbd", self.rbd_aio, ThreadReads::start_callback)
    }

    /// This thread's store reads (made on the first call), and the engine `start` makes
    /// in them when `on`.
    fn start_engine(
        &self,
        node: usize,
        what: &str,
        on: bool,
        start: impl FnOnce(&mut ThreadReads<RingRead>) -> io::Result<RawFd>,
    ) -> Option<RawFd> {
        let jobs = self.ring_jobs.get(node).or(self.ring_jobs.first())?;
        THREAD_READS.with(|r| {
            let mut guard = r.try_borrow_mut().ok()?;
            let t = guard.get_or_insert_with(|| Owned {
                reads: ThreadReads::new(),
                jobs: Arc::clone(jobs),
                counted: 0,
                recycling: false,
            });
            if !on {
                return None;
            }
            match start(&mut t.reads) {
                Ok(fd) => {
                    // uncached reads land in buffers this thread drops once they are sent
                    t.recycle();
                    Some(fd)
                }
                Err(e) => {
                    tracing::warn!(
                        "cannot make this thread's {what} ring ({e}): its reads use the I/O threads"
                    );
                    None
                }
            }
        })
    }

    /// Let the threads finish what is queued.
    pub fn shutdown(self) {
        for p in self.pools {
            match Arc::try_unwrap(p) {
                Ok(p) => p.shutdown(),
                Err(p) => drop(p), // a ring job still holds it; its drop joins the workers
            }
        }
    }
}

/// An event thread's store reads and its node's in-flight count.
struct Owned {
    reads: ThreadReads<RingRead>,
    jobs: Arc<AtomicUsize>,
    /// The jobs of `reads` counted in `jobs` now.
    counted: usize,
    /// This thread's recycle bin of read buffers is on.
    recycling: bool,
}

impl Owned {
    /// Bring the node's count up to date with this thread's jobs in flight.
    fn recount(&mut self) {
        let now = self.reads.jobs();
        if now > self.counted {
            self.jobs.fetch_add(now - self.counted, Ordering::Relaxed);
        } else if now < self.counted {
            self.jobs.fetch_sub(self.counted - now, Ordering::Relaxed);
        }
        self.counted = now;
    }

    fn recycle(&mut self) {
        if !self.recycling {
            AlignedBuf::recycle_on_this_thread();
            self.recycling = true;
        }
    }
}

thread_local! {
    static THREAD_READS: RefCell<Option<Owned>> = const { RefCell::new(None) };
}

/// Run `f` on this thread's store reads, when it has them and is not inside them already
/// (finishing a job).
fn with_reads(f: impl FnOnce(&mut Owned)) {
    THREAD_READS.with(|r| {
        if let Ok(mut g) = r.try_borrow_mut()
            && let Some(t) = g.as_mut()
        {
            f(t);
        }
    });
}

/// Whether this thread reads `store` through one of its engines.
fn takes_local(store: &BackingStore) -> bool {
    THREAD_READS.with(|r| {
        r.try_borrow()
            .is_ok_and(|g| g.as_ref().is_some_and(|t| t.reads.takes(store)))
    })
}

/// Run `job` through this thread's engine for its store (`None`); gives it back when the
/// thread has none (or is inside its reads already, finishing a job).
fn push_local(job: RingRead) -> Option<RingRead> {
    THREAD_READS.with(|r| {
        let Ok(mut guard) = r.try_borrow_mut() else {
            return Some(job);
        };
        let Some(t) = guard.as_mut() else {
            return Some(job);
        };
        let store = Arc::clone(job.store());
        if store.read_engine() == ReadEngine::Immediate {
            // the read's buffer is dropped on this thread once sent
            t.recycle();
        }
        let back = t.reads.push(&store, job).err();
        t.recount();
        back
    })
}

/// The event thread's turn ends: submit what its commands queued (one system call).
pub fn submit_thread_ring() {
    with_reads(|t| t.reads.submit());
}

/// Finish this thread's jobs whose reads completed, in its read ring and its librbd ring
/// (no system call when none did).
pub fn reap_thread_ring() {
    with_reads(|t| {
        if t.reads.reap() > 0 {
            t.recount();
        }
    });
}

/// The event thread stops (or cannot poll its read ring): wait for its reads still in the
/// kernel and finish them.
pub fn stop_thread_ring() {
    stop_on(ThreadReads::stop_uring);
}

/// The event thread stops (or cannot poll its librbd ring): wait for its reads still in
/// librbd (they land in cache blocks) and finish them.
pub fn stop_thread_aio() {
    stop_on(ThreadReads::stop_callback);
}

/// Stop one engine of this thread's reads (the drop waits for the reads in flight; their
/// jobs finish outside the thread-local, so they may queue more work).
fn stop_on(stop: fn(&mut ThreadReads<RingRead>)) {
    let taken = THREAD_READS.with(|r| r.try_borrow_mut().ok().and_then(|mut g| g.take()));
    if let Some(mut t) = taken {
        stop(&mut t.reads);
        t.recount();
        THREAD_READS.with(|r| {
            if let Ok(mut g) = r.try_borrow_mut() {
                *g = Some(t);
            }
        });
    }
}

impl Workers for NodeWorkers {
    fn submit(&self, node: usize, job: Job) {
        let n = node.min(self.pools.len().saturating_sub(1));
        let Some(pool) = self.pools.get(n) else {
            return;
        };
        // the store names the engine its reads complete through without blocking this
        // thread (cache::ReadEngine); everything else, and a store this thread has no
        // engine for, goes to the worker threads
        let ring_job = match job {
            Job::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
            } if takes_local(&at.lun.store) => RingRead::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
                spill: Arc::clone(pool),
            },
            // in range: the ring reports end of file as EIO, the store EINVAL past its end
            Job::DirectRead { at, reply }
                if at
                    .offset
                    .checked_add(at.len)
                    .is_some_and(|e| e <= at.lun.store.size())
                    && takes_local(&at.lun.store) =>
            {
                RingRead::Direct {
                    at,
                    buf: None,
                    reply,
                }
            }
            other => {
                pool.submit(other);
                return;
            }
        };
        if let Some(back) = push_local(ring_job) {
            back.run_on(pool);
        }
    }

    fn pending(&self, node: usize) -> usize {
        self.pools.get(node).map_or(0, |p| p.pending())
            + self
                .ring_jobs
                .get(node)
                .map_or(0, |j| j.load(Ordering::Relaxed))
    }
}

/// A read an event thread's engine runs (io_uring's for files and devices, librbd's for RBD
/// images, at once for null stores).
pub enum RingRead {
    /// A cached read's missing blocks, read into the cache, then sent from it.
    Fill {
        cache: Arc<BlockCache>,
        at: Extent,
        pieces: PieceList,
        node: usize,
        reply: Replier,
        /// The node's worker threads, for what must continue blocking.
        spill: Arc<IoPool<Job>>,
    },
    /// An uncached read into a buffer the event thread allocates (its node's memory).
    Direct {
        at: Extent,
        buf: Option<AlignedBuf>,
        reply: Replier,
    },
}

impl RingRead {
    /// The store it reads.
    fn store(&self) -> &Arc<BackingStore> {
        match self {
            RingRead::Fill { at, .. } | RingRead::Direct { at, .. } => &at.lun.store,
        }
    }

    /// Give the read to the worker threads after all (no engine for it on this thread).
    fn run_on(self, pool: &IoPool<Job>) {
        match self {
            RingRead::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
                ..
            } => pool.submit(Job::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
            }),
            RingRead::Direct { at, reply, .. } => pool.submit(Job::DirectRead { at, reply }),
        }
    }
}

// SAFETY: the reads (by the kernel, by librbd's threads, or by this thread at once) point
// into (a) the reserved sectors of the fill's cache blocks, arena memory that never moves
// and that the reservations (owned by `pieces`, which lives until `finish`) keep from every
// other reader and writer, or (b) the heap buffer of an AlignedBuf owned by the job, which
// stays put when the job moves and is touched by no one else until `finish` takes it back.
unsafe impl RingJob for RingRead {
    fn reads(&mut self, out: &mut Vec<ReadOp>) {
        match self {
            RingRead::Fill { at, pieces, .. } => {
                let fd = at.lun.store.raw_fd();
                coherence::fill_reads(pieces, |r: FillRead| {
                    out.push(ReadOp {
                        fd,
                        buf: r.buf,
                        len: r.len,
                        offset: r.disk_offset,
                    })
                });
            }
            RingRead::Direct { at, buf, .. } => {
                // every byte is read over (or the read fails and the buffer is dropped):
                // recycled memory of this thread is fine
                let b = buf.insert(AlignedBuf::for_overwrite(at.len as usize));
                let s = b.as_mut_slice();
                out.push(ReadOp {
                    fd: at.lun.store.raw_fd(),
                    buf: s.as_mut_ptr(),
                    len: s.len(),
                    offset: at.offset,
                });
            }
        }
    }

    fn finish(self, results: &[io::Result<()>]) {
        let failure =
            results
                .iter()
                .find_map(|r| r.as_ref().err())
                .map(|e| match e.raw_os_error() {
                    Some(code) => io::Error::from_raw_os_error(code),
                    None => io::Error::other(e.to_string()),
                });
        match self {
            RingRead::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
                spill,
            } => {
                let read = coherence::fill_done(pieces, failure);
                match storage::fill_finished(&cache, &at, read, node) {
                    Ok(result) => reply.send(result),
                    Err(CachedRead::NotAdmitted) => spill.submit(Job::DirectRead { at, reply }),
                    Err(_) => spill.submit(Job::ReadAround { cache, at, reply }),
                }
            }
            RingRead::Direct { at, buf, reply } => {
                let result = match (buf, failure) {
                    (Some(buf), None) => storage::direct_read_finished(&at, buf, Ok(())),
                    (Some(buf), Some(e)) => storage::direct_read_finished(&at, buf, Err(e)),
                    // `reads` always sets the buffer; without it nothing was read
                    (None, _) => storage::direct_read(&at.lun, at.lba, at.offset, at.len),
                };
                reply.send(result);
            }
        }
    }
}
