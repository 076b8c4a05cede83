//! What the iSER connections of one event thread on one RDMA device share, so a connection
//! does not pin megabytes of its own: a shared receive queue with its registered receive
//! buffers ([`RecvPool`]), and staging chunks for RDMA READs and copied RDMA WRITEs
//! ([`SharedChunks`]).
//!
//! A [`Share`] is made by the first connection an event thread accepts on a device, on that
//! thread (its buffers are first touched, hence placed, on the thread's NUMA node, which is
//! the device's node when the device has one), and goes with the thread's last connection
//! on the device. Only the owning thread posts into it or reads its buffers; the pool's
//! tables are append-only (read without a lock), and the one lock is taken only when a
//! connection joins.
//!
//! Sizing: the receive pool starts with what one connection used to post on its own (its
//! full command window and reserve, [`FIRST`]) and grows by [`PER_LINK`] receives with each
//! further connection, up to [`CAP`]. Every connection still grants its full command
//! window: the pool is shared, so it may hold fewer receives than all windows together; a
//! Send that finds it empty is answered Receiver-Not-Ready and retried by the initiator
//! (numatgtd accepts with an infinite RNR retry count), never lost. A device without
//! shared receive queues (or `NUMATGTD_ISER_SRQ=0` in the environment) gets per-connection
//! receive queues instead, as before.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rdma::{Access, Buffer, MemoryRegion, Sge, SharedReceiveQueue};

use super::device::DeviceRes;
use super::error::IserError;
use crate::transport::iser_stats::{self, Kind};

/// Marks receive work requests (the rest are send-queue requests, by slab index).
pub const RECV_WR: u64 = 1 << 63;
/// Receives per registered slab (the unit the pool grows by).
const SLAB: u32 = 16;
/// Receives of the pool with its first connection: Linux's queue depth (128) plus the
/// reserve for PDUs outside the window, rounded up to whole slabs.
pub const FIRST: u32 = (128 + iser::proto::credits::DEFAULT_RESERVE).next_multiple_of(SLAB);
/// Receives added per further connection.
pub const PER_LINK: u32 = 2 * SLAB;
/// Most receives one pool holds.
pub const CAP: u32 = 1024;
const MAX_SLABS: usize = (CAP / SLAB) as usize;
/// Staging chunks every connection of the thread may borrow (one registered region).
pub const SHARED_CHUNKS: usize = 32;
const _: () = assert!(SHARED_CHUNKS <= 64, "the free set is one u64");

/// The environment switch that turns shared receive queues off (`0`).
const SRQ_ENV: &str = "NUMATGTD_ISER_SRQ";

/// One registered slab of receive buffers.
struct Slab {
    mr: MemoryRegion,
    buf: Arc<Buffer>,
    /// Its buffers posted (all of them unless a post failed).
    posted: u32,
}

/// A shared receive queue and its buffers (see the module documentation). Buffer `i` is
/// receive work request `i`'s; every buffer is posted except while its completion is being
/// handled.
pub struct RecvPool {
    // field order is drop order: the queue (and the receives posted in it) before the
    // buffers they point into
    srq: Arc<SharedReceiveQueue>,
    slabs: Box<[OnceLock<Slab>]>,
    /// Receives posted in all (grows only, under the lock).
    posted: Mutex<u32>,
    buf_len: usize,
}

impl RecvPool {
    /// The shared receive queue (queue pairs are made on it).
    pub fn srq(&self) -> &Arc<SharedReceiveQueue> {
        &self.srq
    }

    /// Grows the pool to `want` receives (within [`CAP`] and the queue's size), a slab at a
    /// time, registering and posting each; stops at the first failure (logged: the pool
    /// works with what it has).
    fn grow_to(&self, pd: &Arc<rdma::ProtectionDomain>, want: u32) -> Result<(), IserError> {
        let mut posted = self.posted.lock().unwrap_or_else(|p| p.into_inner());
        let want = want.min(CAP).min(self.srq.max_wr());
        while *posted + SLAB <= want {
            let k = (*posted / SLAB) as usize;
            let Some(cell) = self.slabs.get(k) else {
                break;
            };
            let len = self.buf_len * SLAB as usize;
            let buf = Arc::new(Buffer::new(len).map_err(IserError::rdma("receive buffers"))?);
            let mr = MemoryRegion::register(pd, buf.clone(), Access::LOCAL_WRITE)
                .map_err(|source| IserError::Register { len, source })?;
            // a slab with any receive posted is kept (the posted receives point into it),
            // even when a later post fails
            let mut failed = None;
            let mut n = 0;
            for j in 0..SLAB {
                let posted_one = mr
                    .sge(j as usize * self.buf_len, self.buf_len as u32)
                    .ok_or(IserError::OutOfRange("receive buffer"))
                    .and_then(|sge| {
                        self.srq
                            .post_recv(RECV_WR | u64::from(*posted + j), sge)
                            .map_err(IserError::rdma("posting a shared receive"))
                    });
                if let Err(e) = posted_one {
                    failed = Some(e);
                    break;
                }
                n += 1;
            }
            if n > 0 {
                // the lock is held and `posted` names a new slab: the cell is empty
                let _ = cell.set(Slab { mr, buf, posted: n });
                *posted += SLAB;
                iser_stats::add(Kind::Receive, len as i64);
                iser_stats::add_posted(true, i64::from(n));
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(())
    }

    fn slab(&self, i: u32) -> Result<(&Slab, usize), IserError> {
        let s = self
            .slabs
            .get((i / SLAB) as usize)
            .and_then(OnceLock::get)
            .ok_or(IserError::OutOfRange("shared receive"))?;
        Ok((s, (i % SLAB) as usize * self.buf_len))
    }

    /// The first `len` bytes received into buffer `i`.
    ///
    /// # Safety
    ///
    /// The receive into buffer `i` has completed and the buffer is not posted again while
    /// the slice lives; only the calling thread touches it.
    pub unsafe fn received(&self, i: u32, len: usize) -> Result<&[u8], IserError> {
        let (s, at) = self.slab(i)?;
        if len > self.buf_len {
            return Err(IserError::ReceiveTooLong {
                len,
                cap: self.buf_len,
            });
        }
        // SAFETY: the caller's contract.
        unsafe { s.buf.slice_quiescent(at, len) }.map_err(IserError::rdma("a shared receive"))
    }

    /// Posts buffer `i` again.
    pub fn repost(&self, i: u32) -> Result<(), IserError> {
        let (s, at) = self.slab(i)?;
        let sge: Sge =
            s.mr.sge(at, self.buf_len as u32)
                .ok_or(IserError::OutOfRange("shared receive"))?;
        self.srq
            .post_recv(RECV_WR | u64::from(i), sge)
            .map_err(IserError::rdma("posting a shared receive"))
    }
}

impl Drop for RecvPool {
    fn drop(&mut self) {
        let slabs = self.slabs.iter().filter_map(OnceLock::get);
        let (n, posted) = slabs.fold((0i64, 0i64), |(n, p), s| (n + 1, p + i64::from(s.posted)));
        iser_stats::add(
            Kind::Receive,
            -(n * (self.buf_len as i64) * i64::from(SLAB)),
        );
        iser_stats::add_posted(true, -posted);
        iser_stats::add_srqs(-1);
    }
}

/// A lock-free set of up to 64 free slots (bit `i` set: slot `i` free).
pub struct FreeSet(AtomicU64);

impl FreeSet {
    /// Slots `0..n` free (`n` at most 64).
    pub fn full(n: usize) -> FreeSet {
        FreeSet(AtomicU64::new(match n {
            0 => 0,
            64.. => u64::MAX,
            n => (1u64 << n) - 1,
        }))
    }

    /// Takes the lowest free slot.
    pub fn take(&self) -> Option<usize> {
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            if cur == 0 {
                return None;
            }
            let i = cur.trailing_zeros();
            match self.0.compare_exchange_weak(
                cur,
                cur & !(1 << i),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(i as usize),
                Err(now) => cur = now,
            }
        }
    }

    /// Gives slot `i` back (ignored above 63).
    pub fn put(&self, i: usize) {
        if i < 64 {
            self.0.fetch_or(1 << i, Ordering::Release);
        }
    }

    /// Slots free now.
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed).count_ones() as usize
    }
}

/// Staging chunks the connections of a thread borrow when their own are in use: one
/// registered region, a lock-free free set.
pub struct SharedChunks {
    mr: MemoryRegion,
    buf: Arc<Buffer>,
    free: FreeSet,
    chunk: usize,
}

impl SharedChunks {
    /// Takes a free chunk.
    pub fn alloc(&self) -> Option<usize> {
        self.free.take()
    }

    /// Gives chunk `i` back.
    pub fn free(&self, i: usize) {
        if i < SHARED_CHUNKS {
            self.free.put(i);
        }
    }

    /// The region's scatter/gather entry for `len` bytes of chunk `i`.
    pub fn sge(&self, i: usize, len: usize) -> Option<Sge> {
        (len <= self.chunk).then_some(())?;
        self.mr.sge(i * self.chunk, u32::try_from(len).ok()?)
    }

    /// The buffer behind the chunks.
    pub fn buffer(&self) -> &Buffer {
        &self.buf
    }

    /// Bytes per chunk.
    pub fn chunk_len(&self) -> usize {
        self.chunk
    }
}

impl Drop for SharedChunks {
    fn drop(&mut self) {
        iser_stats::add(Kind::Staging, -((self.chunk * SHARED_CHUNKS) as i64));
    }
}

/// What the connections of one event thread on one device share.
pub struct Share {
    /// None: per-connection receive queues (no SRQ on the device, or turned off).
    recv: Option<RecvPool>,
    /// None: registration failed; connections use their own chunks only.
    chunks: Option<SharedChunks>,
    dev: Arc<DeviceRes>,
    members: Mutex<u32>,
}

thread_local! {
    /// The shares of this event thread, by device.
    static SHARES: RefCell<Vec<Weak<Share>>> = const { RefCell::new(Vec::new()) };
}

/// A connection's membership of its [`Share`]: joining grows the receive pool; dropping it
/// leaves (the memory stays until the share goes).
pub struct Member {
    share: Arc<Share>,
}

impl Member {
    /// Joins the calling thread's share on `dev` (made on first use), growing its receive
    /// pool for one more connection.
    pub fn join(dev: &Arc<DeviceRes>, recv_len: usize, chunk: usize) -> Member {
        let share = SHARES.with(|all| {
            let mut all = all.borrow_mut();
            all.retain(|w| w.strong_count() > 0);
            let found = all
                .iter()
                .filter_map(Weak::upgrade)
                .find(|s| Arc::ptr_eq(&s.dev, dev));
            found.unwrap_or_else(|| {
                let s = Arc::new(Share::new(dev, recv_len, chunk));
                all.push(Arc::downgrade(&s));
                s
            })
        });
        let n = {
            let mut m = share.members.lock().unwrap_or_else(|p| p.into_inner());
            *m += 1;
            *m
        };
        if let Some(pool) = &share.recv {
            let want = FIRST + (n - 1) * PER_LINK;
            if let Err(e) = pool.grow_to(dev.pd(), want) {
                tracing::warn!(device = dev.name(), "shared receive queue not grown: {e}");
            }
        }
        if n == 1 {
            // a new share, its first slab registered (pinned, so placed for good)
            share.check_placement();
        }
        Member { share }
    }

    /// The shared receive pool, when the device has one with receives posted (a pool whose
    /// first slab could not be registered is not used: the connection posts its own).
    pub fn recv(&self) -> Option<&RecvPool> {
        self.share
            .recv
            .as_ref()
            .filter(|p| p.slabs.first().is_some_and(|s| s.get().is_some()))
    }

    /// The shared staging chunks, when registered.
    pub fn chunks(&self) -> Option<&SharedChunks> {
        self.share.chunks.as_ref()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut m = self.share.members.lock().unwrap_or_else(|p| p.into_inner());
        *m = m.saturating_sub(1);
    }
}

impl Share {
    fn new(dev: &Arc<DeviceRes>, recv_len: usize, chunk: usize) -> Share {
        let recv = if std::env::var(SRQ_ENV).is_ok_and(|v| v == "0") {
            tracing::info!(
                device = dev.name(),
                "{SRQ_ENV}=0: per-connection receive queues"
            );
            None
        } else {
            match SharedReceiveQueue::new(dev.pd(), CAP) {
                Ok(srq) => {
                    iser_stats::add_srqs(1);
                    Some(RecvPool {
                        srq,
                        slabs: (0..MAX_SLABS).map(|_| OnceLock::new()).collect(),
                        posted: Mutex::new(0),
                        buf_len: recv_len,
                    })
                }
                Err(e) => {
                    tracing::info!(
                        device = dev.name(),
                        "no shared receive queue ({e}): each iSER connection posts its own receives"
                    );
                    None
                }
            }
        };
        let chunks = (|| -> Result<SharedChunks, IserError> {
            let len = chunk * SHARED_CHUNKS;
            let buf = Arc::new(Buffer::new(len).map_err(IserError::rdma("staging memory"))?);
            let mr = MemoryRegion::register(dev.pd(), buf.clone(), Access::LOCAL_WRITE)
                .map_err(|source| IserError::Register { len, source })?;
            iser_stats::add(Kind::Staging, len as i64);
            Ok(SharedChunks {
                mr,
                buf,
                free: FreeSet::full(SHARED_CHUNKS),
                chunk,
            })
        })();
        let chunks = chunks
            .inspect_err(|e| {
                tracing::warn!(device = dev.name(), "no shared staging chunks: {e}");
            })
            .ok();
        Share {
            recv,
            chunks,
            dev: Arc::clone(dev),
            members: Mutex::new(0),
        }
    }

    /// Asks the kernel where the pages of the pool's first slab and of the shared chunks
    /// are (`move_pages(2)`), counts them as on the calling thread's node or not (the
    /// `numatgt_iser_shared_pool_pages_total` counter) and logs it: the proof that an event
    /// thread's iSER memory is its node's. Runs once per share, when its first connection
    /// joined.
    fn check_placement(&self) {
        let Some(node) = this_node() else {
            return;
        };
        let mut bufs: Vec<(&str, (std::ptr::NonNull<u8>, usize))> = Vec::new();
        if let Some(s) = self.recv.as_ref().and_then(|r| r.slabs.first()?.get()) {
            bufs.push(("receive", rdma::MemoryHolder::memory(&*s.buf)));
        }
        if let Some(c) = &self.chunks {
            bufs.push(("staging", rdma::MemoryHolder::memory(&*c.buf)));
        }
        for (what, (ptr, len)) in bufs {
            let Ok(pages) = cache::arena::placement(ptr.as_ptr(), len) else {
                continue;
            };
            let local = pages.iter().filter(|&&n| n == node as i32).count();
            let remote = pages
                .iter()
                .filter(|&&n| n >= 0 && n != node as i32)
                .count();
            iser_stats::add_pool_pages(local as i64, remote as i64);
            tracing::info!(
                device = self.dev.name(),
                node,
                local,
                remote,
                "iSER shared {what} memory of this event thread: {local} pages on its node {node}, {remote} elsewhere"
            );
        }
    }
}

/// The NUMA node (OS index) the calling thread runs on now (`getcpu(2)`).
fn this_node() -> Option<u32> {
    let (mut cpu, mut node) = (0u32, 0u32);
    // SAFETY: getcpu writes two unsigned ints through valid pointers; the cache argument
    // is unused by the kernel and may be null.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut u32,
            &mut node as *mut u32,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    (rc == 0).then_some(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    const _: () = {
        assert!(FIRST % SLAB == 0);
        assert!(FIRST > 128);
        assert!(FIRST + 31 * PER_LINK > CAP, "32 connections reach the cap");
    };

    #[test]
    fn free_set_hands_out_each_slot_once() {
        let f = FreeSet::full(3);
        let got: Vec<_> = std::iter::from_fn(|| f.take()).collect();
        assert_eq!(got, [0, 1, 2]);
        f.put(1);
        f.put(1);
        f.put(70);
        assert_eq!(f.count(), 1);
        assert_eq!(f.take(), Some(1));
        assert_eq!(f.take(), None);
        assert_eq!(FreeSet::full(64).count(), 64);
        assert_eq!(FreeSet::full(0).take(), None);
    }

    #[test]
    fn free_set_across_threads() {
        let f = Arc::new(FreeSet::full(64));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let f = Arc::clone(&f);
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..1000 {
                        if let Some(i) = f.take() {
                            mine.push(i);
                        }
                        if mine.len() > 8 {
                            f.put(mine.remove(0));
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut held: Vec<usize> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let n = held.len();
        held.sort_unstable();
        held.dedup();
        assert_eq!(held.len(), n, "no slot held twice");
        assert_eq!(f.count() + n, 64);
    }
}
