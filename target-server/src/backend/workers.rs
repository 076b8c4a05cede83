//! Which engine of a node runs a backend job: cache fills and uncached reads go to the node's
//! io_uring read ring when it has one and the store is opened with O_DIRECT (many reads in
//! flight from one thread, finished on the ring thread and answered into the connection's
//! mailbox); everything else, and everything
//! on a host without io_uring, goes to the node's I/O worker threads. A ring read that ends
//! needing blocking work (read around the cache after a racing write, an alignment the file
//! system refused) continues on the worker threads.

use std::io;
use std::sync::Arc;

use cache::coherence::{self, CachedRead, FillRead, PieceList};
use cache::uring::{ReadOp, RingJob, RingPool};
use cache::{AlignedBuf, BlockCache, IoPool, Node};
use config::IoEngine;

use super::Workers;
use super::jobs::{Extent, Job};
use super::reply::Replier;
use super::storage;

/// The I/O engines of every node.
pub struct NodeWorkers {
    pools: Vec<Arc<IoPool<Job>>>,
    /// One per node, or none (io_uring unavailable or `io_engine: threads`).
    rings: Vec<RingPool<RingRead>>,
}

impl NodeWorkers {
    /// Start `threads` I/O workers per node and, unless `engine` is `threads`, a read ring
    /// per node (`auto`: the worker threads alone when the kernel refuses io_uring, logged;
    /// `io_uring`: an error then).
    pub fn start(nodes: &[Node], threads: usize, engine: IoEngine) -> io::Result<NodeWorkers> {
        let mut pools = Vec::new();
        for node in nodes {
            pools.push(Arc::new(IoPool::start(node, threads)?));
        }
        let mut rings = Vec::new();
        if engine != IoEngine::Threads {
            match nodes
                .iter()
                .map(RingPool::start)
                .collect::<io::Result<Vec<_>>>()
            {
                Ok(r) => {
                    tracing::info!("reads: io_uring, one ring per node");
                    rings = r;
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
        Ok(NodeWorkers { pools, rings })
    }

    /// Nodes served.
    pub fn nodes(&self) -> usize {
        self.pools.len()
    }

    /// Let every ring finish its reads (they may hand work to the threads), then the
    /// threads finish what is queued.
    pub fn shutdown(self) {
        for r in self.rings {
            r.shutdown();
        }
        for p in self.pools {
            match Arc::try_unwrap(p) {
                Ok(p) => p.shutdown(),
                Err(p) => drop(p), // a ring job still holds it; its drop joins the workers
            }
        }
    }
}

impl Workers for NodeWorkers {
    fn submit(&self, node: usize, job: Job) {
        let n = node.min(self.pools.len().saturating_sub(1));
        let Some(pool) = self.pools.get(n) else {
            return;
        };
        let Some(ring) = self.rings.get(n) else {
            pool.submit(job);
            return;
        };
        // only O_DIRECT stores: a buffered read (tmpfs, a file system without O_DIRECT, the
        // page cache) completes inside the submitting call, so the one ring thread would do
        // every copy itself; the worker threads copy in parallel (measured: cold 64 KiB
        // random fills from tmpfs, QD32, 40-54 K IOPS through the ring, 55-63 K on threads)
        if !job_store_is_direct(&job) {
            pool.submit(job);
            return;
        }
        match job {
            Job::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
            } => ring.submit(RingRead::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
                spill: Arc::clone(pool),
            }),
            // in range: the ring reports end of file as EIO, the store EINVAL past its end
            Job::DirectRead { at, reply }
                if at
                    .offset
                    .checked_add(at.len)
                    .is_some_and(|e| e <= at.lun.store.size()) =>
            {
                ring.submit(RingRead::Direct {
                    at,
                    buf: None,
                    reply,
                })
            }
            other => pool.submit(other),
        }
    }

    fn pending(&self, node: usize) -> usize {
        self.pools.get(node).map_or(0, |p| p.pending())
            + self.rings.get(node).map_or(0, RingPool::pending)
    }
}

fn job_store_is_direct(job: &Job) -> bool {
    match job {
        Job::Fill { at, .. } | Job::DirectRead { at, .. } => at.lun.store.is_direct(),
        _ => false,
    }
}

/// A read the ring runs.
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
    /// An uncached read into a buffer the ring thread allocates (node-local memory).
    Direct {
        at: Extent,
        buf: Option<AlignedBuf>,
        reply: Replier,
    },
}

// SAFETY: the reads point into (a) the reserved sectors of the fill's cache blocks, arena
// memory that never moves and that the reservations (owned by `pieces`, which lives until
// `finish`) keep from every other reader and writer, or (b) the heap buffer of an AlignedBuf
// owned by the job, which stays put when the job moves and is touched by no one else until
// `finish` takes it back.
unsafe impl RingJob for RingRead {
    fn reads(&mut self, out: &mut Vec<ReadOp>) {
        match self {
            RingRead::Fill { at, pieces, .. } => {
                let fd = at.lun.store.raw_fd();
                let mut runs: Vec<FillRead> = Vec::new();
                coherence::fill_reads(pieces, &mut runs);
                out.extend(runs.into_iter().map(|r| ReadOp {
                    fd,
                    buf: r.buf,
                    len: r.len,
                    offset: r.disk_offset,
                }));
            }
            RingRead::Direct { at, buf, .. } => {
                let b = buf.insert(AlignedBuf::new(at.len as usize));
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
