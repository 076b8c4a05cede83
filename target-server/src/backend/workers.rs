//! Which engine runs a backend job. With io_uring, every event thread owns a read ring
//! (`ThreadRing`, thread-local): the cache fills and uncached reads of O_DIRECT stores that
//! the thread's commands need are queued in it, submitted together once per loop turn, and
//! reaped by the same thread when the ring's eventfd fires; their results go to the
//! connection's mailbox on that thread (no other thread, no wakeup per read). The same
//! reads of RBD images go to the thread's librbd ring (`ThreadAio`, unless `io_engine` is
//! `threads`): started at once with librbd's asynchronous reads, whose callbacks only queue
//! the outcome and write that ring's eventfd, and finished the same way by the same thread.
//! Everything else, reads from other threads, buffered stores, writes and flushes, and
//! everything on a host without io_uring (RBD reads excepted), goes to the node's I/O worker
//! threads. A ring read that ends needing blocking work (read around the cache after a
//! racing write, an alignment the file system refused) continues on the worker threads.

use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::LocalKey;

use cache::coherence::{self, CachedRead, FillRead, PieceList};
use cache::rbd_aio::AioRing;
use cache::uring::{ReadOp, ReadRing, RingJob};
use cache::{AlignedBuf, BackingStore, BlockCache, IoPool, Node};
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

    /// Give the calling event thread (of node `node`) its read ring, when rings are on;
    /// returns the eventfd to poll, readable (edge-triggered) when completions arrived.
    /// A thread whose ring cannot be made uses the I/O threads (logged).
    pub fn start_thread_ring(&self, node: usize) -> Option<RawFd> {
        if !self.rings {
            return None;
        }
        let jobs = self.ring_jobs.get(node).or(self.ring_jobs.first())?;
        match ReadRing::new(RING_ENTRIES) {
            Ok(ring) => {
                // uncached reads land in buffers this thread drops once they are sent
                AlignedBuf::recycle_on_this_thread();
                let fd = ring.event_fd();
                THREAD_RING.with(|r| {
                    *r.borrow_mut() = Some(Owned {
                        ring,
                        jobs: Arc::clone(jobs),
                    })
                });
                Some(fd)
            }
            Err(e) => {
                tracing::warn!(
                    "cannot make this thread's io_uring ({e}): its reads use the I/O threads"
                );
                None
            }
        }
    }

    /// Give the calling event thread (of node `node`) its librbd ring, unless `io_engine`
    /// is `threads`; returns the eventfd to poll (edge-triggered) for arrived reads. A
    /// thread whose ring cannot be made reads RBD images on the I/O threads (logged).
    pub fn start_thread_aio(&self, node: usize) -> Option<RawFd> {
        if !self.rbd_aio {
            return None;
        }
        let jobs = self.ring_jobs.get(node).or(self.ring_jobs.first())?;
        match AioRing::new() {
            Ok(ring) => {
                if !has_local_ring() {
                    AlignedBuf::recycle_on_this_thread();
                }
                let fd = ring.event_fd();
                THREAD_AIO.with(|r| {
                    *r.borrow_mut() = Some(Owned {
                        ring,
                        jobs: Arc::clone(jobs),
                    })
                });
                Some(fd)
            }
            Err(e) => {
                tracing::warn!(
                    "cannot make this thread's librbd ring ({e}): its RBD reads use the I/O threads"
                );
                None
            }
        }
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

/// An event thread's ring (io_uring's or librbd's) and its node's in-flight count.
struct Owned<R> {
    ring: R,
    jobs: Arc<AtomicUsize>,
}

type ThreadRing = Owned<ReadRing<RingRead>>;
type ThreadAio = Owned<AioRing<RingRead>>;

/// What this module asks of either ring.
trait LocalRing {
    fn push_job(&mut self, job: RingRead);
    fn reap_jobs(&mut self) -> usize;
    fn jobs_left(&self) -> usize;
}

impl LocalRing for ReadRing<RingRead> {
    fn push_job(&mut self, job: RingRead) {
        self.push(job);
    }
    fn reap_jobs(&mut self) -> usize {
        self.reap()
    }
    fn jobs_left(&self) -> usize {
        self.jobs()
    }
}

impl LocalRing for AioRing<RingRead> {
    fn push_job(&mut self, job: RingRead) {
        let store = Arc::clone(job.store());
        self.push(&store, job);
    }
    fn reap_jobs(&mut self) -> usize {
        self.reap()
    }
    fn jobs_left(&self) -> usize {
        self.jobs()
    }
}

type Slot<R> = LocalKey<RefCell<Option<Owned<R>>>>;

thread_local! {
    static THREAD_RING: RefCell<Option<ThreadRing>> = const { RefCell::new(None) };
    static THREAD_AIO: RefCell<Option<ThreadAio>> = const { RefCell::new(None) };
}

/// Queue `job` in this thread's ring for its store (`None`); gives it back when the thread
/// has none (or is inside that ring already, finishing a job).
fn push_local(job: RingRead) -> Option<RingRead> {
    if job.store().is_rbd() {
        push_to(&THREAD_AIO, job)
    } else {
        push_to(&THREAD_RING, job)
    }
}

fn push_to<R: LocalRing>(slot: &'static Slot<R>, job: RingRead) -> Option<RingRead> {
    slot.with(|r| match r.try_borrow_mut() {
        Ok(mut guard) => match guard.as_mut() {
            Some(t) => {
                t.jobs.fetch_add(1, Ordering::Relaxed);
                t.ring.push_job(job);
                None
            }
            None => Some(job),
        },
        Err(_) => Some(job),
    })
}

/// Whether the calling thread owns the ring of `slot`.
fn has_local<R>(slot: &'static Slot<R>) -> bool {
    slot.with(|r| r.try_borrow().is_ok_and(|g| g.is_some()))
}

/// Whether the calling thread owns a read ring.
fn has_local_ring() -> bool {
    has_local(&THREAD_RING)
}

/// Whether the calling thread owns a librbd ring.
fn has_local_aio() -> bool {
    has_local(&THREAD_AIO)
}

/// The event thread's turn ends: submit what its commands queued (one system call).
pub fn submit_thread_ring() {
    THREAD_RING.with(|r| {
        if let Ok(mut g) = r.try_borrow_mut()
            && let Some(t) = g.as_mut()
        {
            t.ring.submit();
        }
    });
}

/// Finish this thread's jobs whose reads completed, in its read ring and its librbd ring
/// (no system call when none did).
pub fn reap_thread_ring() {
    reap_on(&THREAD_RING);
    reap_on(&THREAD_AIO);
}

fn reap_on<R: LocalRing>(slot: &'static Slot<R>) {
    slot.with(|r| {
        if let Ok(mut g) = r.try_borrow_mut()
            && let Some(t) = g.as_mut()
        {
            let n = t.ring.reap_jobs();
            if n > 0 {
                t.jobs.fetch_sub(n, Ordering::Relaxed);
            }
        }
    });
}

/// The event thread stops (or cannot poll its read ring): wait for its reads still in the
/// kernel and finish them.
pub fn stop_thread_ring() {
    stop_on(&THREAD_RING);
}

/// The event thread stops (or cannot poll its librbd ring): wait for its reads still in
/// librbd (they land in cache blocks) and finish them.
pub fn stop_thread_aio() {
    stop_on(&THREAD_AIO);
}

fn stop_on<R: LocalRing>(slot: &'static Slot<R>) {
    let taken = slot.with(|r| r.try_borrow_mut().ok().and_then(|mut g| g.take()));
    if let Some(t) = taken {
        let left = t.ring.jobs_left();
        drop(t.ring); // the drop waits for the reads in flight
        t.jobs.fetch_sub(left, Ordering::Relaxed);
    }
}

impl Workers for NodeWorkers {
    fn submit(&self, node: usize, job: Job) {
        let n = node.min(self.pools.len().saturating_sub(1));
        let Some(pool) = self.pools.get(n) else {
            return;
        };
        // only O_DIRECT stores: a buffered read (tmpfs, a file system without O_DIRECT, the
        // page cache) completes inside the submitting call, so the event thread would do
        // the copy itself; the worker threads copy in parallel (measured: cold 64 KiB
        // random fills from tmpfs, QD32, 40-54 K IOPS through a ring, 55-63 K on threads).
        // RBD images: librbd's asynchronous reads never wait for the cluster
        let local = match job_store(&job) {
            Some(store) if store.is_rbd() => self.rbd_aio && has_local_aio(),
            Some(store) => self.rings && store.is_direct() && has_local_ring(),
            None => false,
        };
        if !local {
            pool.submit(job);
            return;
        }
        let ring_job = match job {
            Job::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
            } => RingRead::Fill {
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
                    .is_some_and(|e| e <= at.lun.store.size()) =>
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

/// The store a job a ring may run reads (`None` for every other job).
fn job_store(job: &Job) -> Option<&Arc<BackingStore>> {
    match job {
        Job::Fill { at, .. } | Job::DirectRead { at, .. } => Some(&at.lun.store),
        _ => None,
    }
}

/// A read an event thread's ring runs (io_uring's for files and devices, librbd's for RBD
/// images).
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

    /// Give the read to the worker threads after all (no ring on this thread).
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

// SAFETY: the reads (by the kernel, or by librbd's threads) point into (a) the reserved sectors of the fill's cache blocks, arena
// memory that never moves and that the reservations (owned by `pieces`, which lives until
// `finish`) keep from every other reader and writer, or (b) the heap buffer of an AlignedBuf
// owned by the job, which stays put when the job moves and is touched by no one else until
// `finish` takes it back.
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
