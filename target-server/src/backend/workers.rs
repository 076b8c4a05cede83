//! Which engine runs a backend job. Every event thread owns its store I/O
//! ([`ThreadIo`], thread-local): a read that one of its commands needs (a cache fill, an
//! uncached read) goes to the engine its store names ([`cache::ReadEngine`]) — the thread's
//! io_uring ring for O_DIRECT files and devices (submitted together once per loop turn,
//! reaped when the ring's eventfd fires), its ring of librbd's asynchronous operations for
//! RBD images (unless `io_engine` is `threads`; their callbacks only queue the outcome and
//! write that ring's eventfd), or at once for stores that never block (null) — and its
//! result goes to the connection's mailbox on that thread (no other thread, no wakeup per
//! read). The librbd ring takes an RBD LUN's uncached writes (the range held shared by a
//! [`WriteClaim`] until librbd has answered; one that a COMPARE AND WRITE holds goes to a
//! worker instead) and the flush of SYNCHRONIZE CACHE as well. A write without the cache to
//! a store that never blocks completes at once too. Everything else, reads from other
//! threads, buffered stores, file writes and flushes, the cache's write-backs and
//! write-throughs, and everything on a host without io_uring (RBD excepted), goes to the
//! node's I/O worker threads. A ring read that ends needing blocking work (read around the
//! cache after a racing write, an alignment the file system refused) continues on the
//! worker threads.

use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cache::coherence::{self, CachedRead, FillRead, PieceList};
use cache::store::ThreadIo;
use cache::uring::{OpKind, ReadRing, RingJob, RingOp};
use cache::{AlignedBuf, BackingStore, BlockCache, IoPool, Node, ReadEngine};
use config::IoEngine;

use super::Workers;
use super::jobs::{Extent, Job};
use super::reply::Replier;
use super::storage;
use crate::range_locks::WriteClaim;
use crate::registry::Lun;

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
            match ReadRing::<RingIo>::new(2) {
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
        self.start_engine(node, "librbd", self.rbd_aio, ThreadIo::start_callback)
    }

    /// This thread's store reads (made on the first call), and the engine `start` makes
    /// in them when `on`.
    fn start_engine(
        &self,
        node: usize,
        what: &str,
        on: bool,
        start: impl FnOnce(&mut ThreadIo<RingIo>) -> io::Result<RawFd>,
    ) -> Option<RawFd> {
        let jobs = self.ring_jobs.get(node).or(self.ring_jobs.first())?;
        THREAD_READS.with(|r| {
            let mut guard = r.try_borrow_mut().ok()?;
            let t = guard.get_or_insert_with(|| Owned {
                reads: ThreadIo::new(),
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

    /// Let the threads finish what is queued and end, through a shared handle (the daemon's
    /// state is still referred to elsewhere): once it returns no I/O worker touches the cache.
    pub fn drain(&self) {
        for p in &self.pools {
            p.drain();
        }
    }
}

/// An event thread's store reads and its node's in-flight count.
struct Owned {
    reads: ThreadIo<RingIo>,
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

/// Whether this thread's engine for `store` writes and flushes it too (librbd aio).
fn takes_local_writes(store: &BackingStore) -> bool {
    THREAD_READS.with(|r| {
        r.try_borrow()
            .is_ok_and(|g| g.as_ref().is_some_and(|t| t.reads.takes_writes(store)))
    })
}

/// Whether `at` lies inside its store (a ring reports end of file as EIO, a store EINVAL
/// past its end: such a request goes to the worker threads, which report it as ever).
fn inside(at: &Extent) -> bool {
    at.offset
        .checked_add(at.len)
        .is_some_and(|e| e <= at.lun.store.size())
}

/// Run `job` through this thread's engine for its store (`None`); gives it back when the
/// thread has none (or is inside its reads already, finishing a job).
fn push_local(job: RingIo) -> Option<RingIo> {
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
    stop_on(ThreadIo::stop_uring);
}

/// The event thread stops (or cannot poll its librbd ring): wait for its reads still in
/// librbd (they land in cache blocks) and finish them.
pub fn stop_thread_aio() {
    stop_on(ThreadIo::stop_callback);
}

/// Stop one engine of this thread's reads (the drop waits for the reads in flight; their
/// jobs finish outside the thread-local, so they may queue more work).
fn stop_on(stop: fn(&mut ThreadIo<RingIo>)) {
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
            } if takes_local(&at.lun.store) => RingIo::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
                spill: Arc::clone(pool),
            },
            Job::DirectRead { at, reply } if inside(&at) && takes_local(&at.lun.store) => {
                RingIo::Direct {
                    at,
                    buf: None,
                    reply,
                }
            }
            // an uncached write to a store whose engine writes (librbd aio), holding its
            // range shared until the store has it (a range that a COMPARE AND WRITE holds
            // goes to a worker, which waits for it); or a write-through (FUA, WCE=0) to a
            // cached LUN of such a store, holding its range exclusively until the store has
            // it and the cached copy follows, when the range holds no dirty data (older
            // data would have to reach the store first: a worker does that, and so it does
            // for a range another writer holds). A durable write only when the store's
            // acknowledged writes are durable.
            Job::Write {
                ref cache,
                ref at,
                durable,
                ..
            } if inside(at)
                && (cache.is_none() || durable)
                && (!durable || at.lun.store.caps().durable_writes)
                && takes_local_writes(&at.lun.store) =>
            {
                let (lun, offset, len) = (&at.lun, at.offset, at.len);
                let claim = match cache {
                    None => WriteClaim::try_new(lun, offset, len),
                    Some(c) => WriteClaim::try_exclusive(lun, offset, len)
                        .filter(|_| c.range_clean(lun.cache_id, offset, len)),
                };
                let ring = match claim {
                    Some(claim) => RingIo::write(job, claim, pool),
                    None => Err(job),
                };
                match ring {
                    Ok(ring) => ring,
                    Err(job) => {
                        pool.submit(job);
                        return;
                    }
                }
            }
            // UNMAP of a LUN that does not cache, each range held shared until the store
            // has zeroed it
            Job::Deallocate {
                cache: None,
                ref lun,
                ref ranges,
                ..
            } if takes_local_writes(&lun.store) => {
                let bs = u64::from(lun.store.block_size());
                let claims: Option<Vec<WriteClaim<Lun>>> = ranges
                    .iter()
                    .map(|&(lba, blocks)| {
                        let (offset, len) = (lba.checked_mul(bs)?, blocks.checked_mul(bs)?);
                        let end = offset.checked_add(len)?;
                        (end <= lun.store.size() && usize::try_from(len).is_ok())
                            .then(|| WriteClaim::try_new(lun, offset, len))?
                    })
                    .collect();
                let Some(claims) = claims else {
                    pool.submit(job);
                    return;
                };
                match job {
                    Job::Deallocate {
                        lun, ranges, reply, ..
                    } => RingIo::Deallocate {
                        lun,
                        ranges,
                        claims,
                        reply,
                    },
                    other => {
                        pool.submit(other);
                        return;
                    }
                }
            }
            Job::Flush { lun, lba, reply } if takes_local_writes(&lun.store) => {
                RingIo::Flush { lun, lba, reply }
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

/// Work an event thread's engine runs: reads (io_uring's for files and devices, librbd's
/// for RBD images, at once for null stores), and uncached writes and flushes of stores whose
/// engine writes (librbd's).
pub enum RingIo {
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
    /// A write of `data[data_offset..][..at.len]` (the command's buffer, which goes back
    /// to the connection with the status) to the store: uncached (`cache` none; its range
    /// held shared meanwhile), or a write-through to a cached LUN (its range held
    /// exclusively until the cached copy agrees with the store).
    Write {
        at: Extent,
        cache: Option<Arc<BlockCache>>,
        durable: bool,
        data: Vec<u8>,
        data_offset: usize,
        claim: WriteClaim<Lun>,
        reply: Replier,
        /// The node's worker threads, for a cached copy that cannot be updated at once.
        spill: Arc<IoPool<Job>>,
    },
    /// UNMAP of a LUN that does not cache: each `(lba, blocks)` range zeroed, held shared
    /// by its claim meanwhile.
    Deallocate {
        lun: Arc<Lun>,
        ranges: Vec<(u64, u64)>,
        claims: Vec<WriteClaim<Lun>>,
        reply: Replier,
    },
    /// SYNCHRONIZE CACHE of a LUN that does not cache now: the store's flush.
    Flush {
        lun: Arc<Lun>,
        lba: u64,
        reply: Replier,
    },
}

impl RingIo {
    /// A [`Job::Write`] for the ring, its range held by `claim`, `spill` the node's
    /// workers; any other job is given back.
    #[expect(
        clippy::result_large_err,
        reason = "a job moves by value either way; boxing it would allocate per write"
    )]
    fn write(job: Job, claim: WriteClaim<Lun>, spill: &Arc<IoPool<Job>>) -> Result<RingIo, Job> {
        match job {
            Job::Write {
                cache,
                at,
                durable,
                data,
                data_offset,
                reply,
            } => Ok(RingIo::Write {
                at,
                cache,
                durable,
                data,
                data_offset,
                claim,
                reply,
                spill: Arc::clone(spill),
            }),
            other => Err(other),
        }
    }

    /// The store it reads.
    fn store(&self) -> &Arc<BackingStore> {
        match self {
            RingIo::Fill { at, .. } | RingIo::Direct { at, .. } | RingIo::Write { at, .. } => {
                &at.lun.store
            }
            RingIo::Deallocate { lun, .. } | RingIo::Flush { lun, .. } => &lun.store,
        }
    }

    /// Give the read to the worker threads after all (no engine for it on this thread).
    fn run_on(self, pool: &IoPool<Job>) {
        match self {
            RingIo::Fill {
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
            RingIo::Direct { at, reply, .. } => pool.submit(Job::DirectRead { at, reply }),
            RingIo::Write {
                at,
                cache,
                durable,
                data,
                data_offset,
                claim,
                reply,
                ..
            } => {
                // the worker takes the range itself
                drop(claim);
                pool.submit(Job::Write {
                    cache,
                    at,
                    durable,
                    data,
                    data_offset,
                    reply,
                })
            }
            RingIo::Deallocate {
                lun,
                ranges,
                claims,
                reply,
            } => {
                drop(claims);
                pool.submit(Job::Deallocate {
                    cache: None,
                    lun,
                    ranges,
                    reply,
                })
            }
            RingIo::Flush { lun, lba, reply } => pool.submit(Job::Flush { lun, lba, reply }),
        }
    }
}

// SAFETY: the reads (by the kernel, by librbd's threads, or by this thread at once) point
// into (a) the reserved sectors of the fill's cache blocks, arena memory that never moves
// and that the reservations (owned by `pieces`, which lives until `finish`) keep from every
// other reader and writer, or (b) the heap buffer of an AlignedBuf owned by the job, which
// stays put when the job moves and is touched by no one else until `finish` takes it back.
// A write reads (c) the heap buffer of the command's Vec, owned by the job, which stays put
// when the job moves and is neither written nor freed until `finish` hands it back. A flush
// has no memory.
unsafe impl RingJob for RingIo {
    fn ops(&mut self, out: &mut Vec<RingOp>) {
        match self {
            RingIo::Fill { at, pieces, .. } => {
                let fd = at.lun.store.raw_fd();
                coherence::fill_reads(pieces, |r: FillRead| {
                    out.push(RingOp::read(fd, r.buf, r.len, r.disk_offset))
                });
            }
            RingIo::Direct { at, buf, .. } => {
                // every byte is read over (or the read fails and the buffer is dropped):
                // recycled memory of this thread is fine
                let b = buf.insert(AlignedBuf::for_overwrite(at.len as usize));
                let s = b.as_mut_slice();
                out.push(RingOp::read(
                    at.lun.store.raw_fd(),
                    s.as_mut_ptr(),
                    s.len(),
                    at.offset,
                ));
            }
            RingIo::Write {
                at,
                data,
                data_offset,
                ..
            } => {
                // `submit` checked the length against the store, `write` against the buffer
                if let Some(bytes) = data.get(*data_offset..*data_offset + at.len as usize) {
                    out.push(RingOp {
                        fd: -1,
                        buf: bytes.as_ptr().cast_mut(),
                        len: bytes.len(),
                        offset: at.offset,
                        kind: OpKind::Write,
                    });
                }
            }
            RingIo::Flush { .. } => out.push(RingOp {
                fd: -1,
                buf: std::ptr::null_mut(),
                len: 0,
                offset: 0,
                kind: OpKind::Flush,
            }),
            RingIo::Deallocate { lun, ranges, .. } => {
                // `submit` checked every range against the store and usize
                let bs = u64::from(lun.store.block_size());
                out.extend(ranges.iter().map(|&(lba, blocks)| RingOp {
                    fd: -1,
                    buf: std::ptr::null_mut(),
                    len: (blocks * bs) as usize,
                    offset: lba * bs,
                    kind: OpKind::Zero,
                }));
            }
        }
    }

    fn finish(self, results: &[io::Result<()>]) {
        let failure = results.iter().find_map(|r| r.as_ref().err()).map(owned);
        match self {
            RingIo::Fill {
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
            RingIo::Direct { at, buf, reply } => {
                let result = match (buf, failure) {
                    (Some(buf), None) => storage::direct_read_finished(&at, buf, Ok(())),
                    (Some(buf), Some(e)) => storage::direct_read_finished(&at, buf, Err(e)),
                    // `reads` always sets the buffer; without it nothing was read
                    (None, _) => storage::direct_read(&at.lun, at.lba, at.offset, at.len),
                };
                reply.send(result);
            }
            RingIo::Write {
                at,
                cache,
                data,
                data_offset,
                claim,
                reply,
                spill,
                ..
            } => {
                let done = match (results.is_empty(), failure) {
                    (_, Some(e)) => Err(e),
                    // no operation: the buffer was shorter than the write (never, see `ops`)
                    (true, None) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
                    (false, None) => Ok(()),
                };
                let result = storage::write_status(&at.lun, at.lba, done);
                // a write-through's cached copy follows the store (even after a failed
                // write: the store may hold part of it), the range still held
                if let Some(cache) = cache
                    && !results.is_empty()
                    && !storage::cached_copy_follows(&cache, &at, &data, data_offset)
                {
                    // a block of the range is being filled or written back: a worker
                    // waits for it
                    spill.submit(Job::Other(Box::new(move || {
                        let end = data_offset + at.len as usize;
                        if let Some(written) = data.get(data_offset..end) {
                            storage::update_cached_copy(&cache, &at.lun, at.offset, written);
                        }
                        drop(claim);
                        reply.send_with_buffer(result, data);
                    })));
                    return;
                }
                drop(claim);
                reply.send_with_buffer(result, data);
            }
            RingIo::Deallocate {
                lun,
                ranges,
                claims,
                reply,
            } => {
                drop(claims);
                // the first range that failed is reported (the others may be zeros now)
                let failed = results
                    .iter()
                    .zip(&ranges)
                    .find_map(|(r, &(lba, _))| r.as_ref().err().map(|e| (lba, owned(e))));
                let result = match failed {
                    Some((lba, e)) => storage::write_status(&lun, lba, Err(e)),
                    None => storage::write_status(&lun, 0, Ok(())),
                };
                reply.send(result);
            }
            RingIo::Flush { lun, lba, reply } => {
                let done = failure.map_or(Ok(()), Err);
                reply.send(storage::write_status(&lun, lba, done));
            }
        }
    }
}

/// An owned copy of a ring result's error (its errno, or its text).
fn owned(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::other(e.to_string()),
    }
}
