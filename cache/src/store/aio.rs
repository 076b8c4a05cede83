//! Asynchronous operations for one thread through a store's own engine ([`AioRing`];
//! librbd's `rbd_aio_read2`, `rbd_aio_write2`, `rbd_aio_write_zeroes` and `rbd_aio_flush` for
//! RBD images,
//! [`ReadEngine::Callback`](super::ReadEngine) stores), the counterpart of
//! [`ReadRing`](crate::uring::ReadRing): the owner (an event thread) pushes jobs — the same
//! [`RingJob`]s, some reads into memory that stays put, writes from such memory or flushes,
//! and a continuation — and each operation is started at once with
//! [`Store::start_op`](super::Store::start_op), which queues it for the store's own threads
//! and does not wait. The store calls back on one of its threads; the callback
//! ([`PendingOp::done`]) only appends `(job, op, result)` to the ring's arrival list and,
//! when the list was empty, writes the ring's eventfd. The owner polls that eventfd
//! (edge-triggered, never read while running) in its own poll set,
//! [`reap`](AioRing::reap)s the list, and finishes a job on its own thread once its last
//! operation has arrived. No thread waits per request; an operation that the store refuses,
//! or one past its end, arrives as an error like any other. Dropping the ring waits for
//! every operation still in the store (reads write into the jobs' memory, cache blocks among
//! it; writes read from it), which librados' op timeout bounds for librbd.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::BackingStore;
use crate::op_latency::StoreOp;
use crate::uring::{Flights, OpKind, RingJob};

/// One operation that the store finished: the job's slot, the operation's index in it and
/// its kind, 0 or the errno, and how long the store took.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    slot: u32,
    op: u32,
    kind: OpKind,
    errno: i32,
    ns: u64,
}

/// What the store's threads and the owner share: the operations finished and not reaped yet, and
/// the eventfd that says there are some.
struct Arrivals {
    list: Mutex<Vec<Arrival>>,
    event: OwnedFd,
}

impl Arrivals {
    fn add(&self, a: Arrival) {
        let first = {
            let mut list = self.list.lock().unwrap_or_else(|p| p.into_inner());
            list.push(a);
            list.len() == 1
        };
        // a non-empty list was signalled by whoever made it non-empty, after its push; the
        // owner takes the whole list, so this arrival goes with that wakeup's reap
        if first {
            let one = 1u64;
            // SAFETY: writes 8 readable bytes to the eventfd, which `self` keeps open.
            let r = unsafe { libc::write(self.event.as_raw_fd(), (&raw const one).cast(), 8) };
            if r != 8 {
                // only a counter at its maximum refuses (the owner has not reaped for
                // 2^64 wakeups): it is readable then anyway
                tracing::debug!("aio ring: eventfd write: {}", io::Error::last_os_error());
            }
        }
    }
}

/// One operation handed to a store's asynchronous engine: what it is
/// ([`kind`](PendingOp::kind), [`offset`](PendingOp::offset)), its memory (`as_mut` for a
/// read, `as_ref` for a write; memory that stays put until it is done) and whom it reports
/// to. The store calls [`done`](PendingOp::done) exactly once, on any thread, after its
/// last use of the memory.
pub struct PendingOp {
    buf: *mut u8,
    len: usize,
    offset: u64,
    kind: OpKind,
    arrivals: Arc<Arrivals>,
    slot: u32,
    op: u32,
    started: Instant,
}

// SAFETY: the memory `buf` points to is the job's (RingJob's contract: it stays put and no
// one else touches it until the job finishes, which happens only after this operation is
// done); the store's thread reads or writes it and hands the operation back, nothing else.
unsafe impl Send for PendingOp {}

impl AsMut<[u8]> for PendingOp {
    fn as_mut(&mut self) -> &mut [u8] {
        if self.len == 0 || self.buf.is_null() {
            return &mut [];
        }
        // SAFETY: `buf` is valid for `len` bytes (RingJob's contract) and nothing else uses
        // it while the operation is in flight.
        unsafe { std::slice::from_raw_parts_mut(self.buf, self.len) }
    }
}

impl AsRef<[u8]> for PendingOp {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 || self.buf.is_null() {
            return &[];
        }
        // SAFETY: as for `as_mut`: `len` valid bytes of the job's, untouched meanwhile.
        unsafe { std::slice::from_raw_parts(self.buf, self.len) }
    }
}

impl PendingOp {
    /// Bytes to read, write or zero (0 for a flush).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bytes to move.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Byte offset in the store.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Read, write, flush or zero.
    pub fn kind(&self) -> OpKind {
        self.kind
    }

    /// The operation ended with `result` (bytes read, or the error); a read of fewer bytes
    /// than asked is EIO (the store shrank under us). A write's or flush's count is not
    /// looked at (librbd answers 0 for them; a write that was not done entirely fails).
    pub fn done(self, result: io::Result<usize>) {
        let errno = match result {
            Ok(_) if self.kind != OpKind::Read => 0,
            Ok(n) if n == self.len => 0,
            // librbd reads holes as zeros: fewer bytes means the store shrank under us
            Ok(_) => libc::EIO,
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
        };
        let ns = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.arrivals.add(Arrival {
            slot: self.slot,
            op: self.op,
            kind: self.kind,
            errno,
            ns,
        });
    }
}

/// The store operation an op kind is timed as.
fn timed_as(kind: OpKind) -> StoreOp {
    match kind {
        OpKind::Read => StoreOp::Read,
        OpKind::Write => StoreOp::Write,
        OpKind::Flush => StoreOp::Flush,
        OpKind::Zero => StoreOp::Zero,
    }
}

/// A thread's asynchronous operations on callback stores (not shared: `!Send` through its
/// jobs' raw pointers).
pub struct AioRing<J: RingJob> {
    arrivals: Arc<Arrivals>,
    flights: Flights<J>,
    /// The store of each slot's job (its latency histograms), by slot.
    stores: Vec<Option<Arc<BackingStore>>>,
    /// The arrival list taken by the last reap (kept for its memory).
    taken: Vec<Arrival>,
}

impl<J: RingJob> AioRing<J> {
    /// A ring with its eventfd.
    pub fn new() -> io::Result<AioRing<J>> {
        // SAFETY: plain eventfd creation; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(AioRing {
            arrivals: Arc::new(Arrivals {
                list: Mutex::new(Vec::new()),
                event,
            }),
            flights: Flights::new(),
            stores: Vec::new(),
            taken: Vec::new(),
        })
    }

    /// The eventfd written when operations arrive (poll it for readability, edge-triggered).
    pub fn event_fd(&self) -> RawFd {
        self.arrivals.event.as_raw_fd()
    }

    /// Jobs pushed and not finished yet.
    pub fn jobs(&self) -> usize {
        self.flights.jobs()
    }

    /// Start `job`'s operations on `store` (a [`ReadEngine::Callback`](super::ReadEngine)
    /// store; any other fails them with EINVAL, as does one past its end); a job without
    /// operations is finished at once. Never waits for the store.
    pub fn push(&mut self, store: &Arc<BackingStore>, job: J) {
        let Some((slot, n)) = self.flights.insert(job) else {
            return;
        };
        if self.stores.len() <= slot {
            self.stores.resize_with(slot + 1, || None);
        }
        self.stores[slot] = Some(Arc::clone(store));
        for op in 0..n {
            let Some(o) = self
                .flights
                .get_mut(slot)
                .and_then(|f| f.ops.get(op).copied())
            else {
                continue;
            };
            let pending = PendingOp {
                buf: o.buf,
                len: o.len,
                offset: o.offset,
                kind: o.kind,
                arrivals: Arc::clone(&self.arrivals),
                slot: slot as u32,
                op: op as u32,
                started: Instant::now(),
            };
            if let Some(lat) = store.op_latency() {
                lat.started_async();
            }
            store.start_op(pending);
        }
    }

    /// Finish the jobs whose operations have all arrived; returns how many. No system call.
    pub fn reap(&mut self) -> usize {
        let mut taken = std::mem::take(&mut self.taken);
        {
            let mut list = self.arrivals.list.lock().unwrap_or_else(|p| p.into_inner());
            if list.is_empty() {
                drop(list);
                self.taken = taken;
                return 0;
            }
            std::mem::swap(&mut *list, &mut taken);
        }
        let mut finished = 0;
        for a in taken.drain(..) {
            let slot = a.slot as usize;
            if let Some(lat) = self
                .stores
                .get(slot)
                .and_then(Option::as_ref)
                .and_then(|s| s.op_latency())
            {
                lat.record_async(timed_as(a.kind), a.ns, a.errno == 0);
            }
            let result = match a.errno {
                0 => Ok(()),
                e => Err(io::Error::from_raw_os_error(e)),
            };
            if self.flights.ended(slot, a.op as usize, result) {
                if let Some(s) = self.stores.get_mut(slot) {
                    *s = None;
                }
                self.flights.finish(slot);
                finished += 1;
            }
        }
        self.taken = taken;
        finished
    }

    /// Wait up to `timeout` for operations to arrive, then reap (for owners with nothing else
    /// to wait for: tests, the drain at the end).
    pub fn wait(&mut self, timeout: Duration) -> usize {
        let n = self.reap();
        if n > 0 || self.jobs() == 0 {
            return n;
        }
        let mut pfd = libc::pollfd {
            fd: self.event_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut pfd, 1, ms) };
        // reset the counter so the next poll sleeps until the next arrival (one that comes
        // between this read and the reap below is reaped now, and signals again later)
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v`; the eventfd is nonblocking.
        unsafe { libc::read(self.event_fd(), (&raw mut v).cast(), 8) };
        self.reap()
    }
}

impl<J: RingJob> Drop for AioRing<J> {
    /// Wait for every operation still in the store (reads write into the jobs' memory,
    /// writes read it) and finish their jobs. librados' op timeout (`rados_osd_op_timeout`)
    /// ends operations a sick cluster does not answer; until then this waits, and says so
    /// every 30 s.
    fn drop(&mut self) {
        let t0 = Instant::now();
        let mut next_warning = Duration::from_secs(30);
        while self.jobs() > 0 {
            self.wait(Duration::from_millis(100));
            if t0.elapsed() >= next_warning {
                tracing::error!(
                    "aio ring: {} operations still in the store after {:?}; waiting for them",
                    self.jobs(),
                    t0.elapsed()
                );
                next_warning += Duration::from_secs(30);
            }
        }
        self.flights.finish_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uring::tests::Job;
    use std::sync::mpsc;

    /// Without a cluster: a store without its own asynchronous reads fails every read with EINVAL
    /// through the same arrival path (eventfd signalled, finished by reap on this thread),
    /// a job without reads finishes at once, and a drop finishes what is left.
    #[test]
    fn refused_reads_arrive_as_errors_and_signal_the_eventfd() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("lun.img");
        super::super::create_sparse(&p, 1 << 20).expect("create");
        let store = Arc::new(BackingStore::open(&p, &Default::default()).expect("open"));
        let mut ring = AioRing::<Job>::new().expect("aio ring");
        let (tx, rx) = mpsc::channel();
        let job = |id: usize, ranges: Vec<(u64, usize)>| Job {
            id,
            fd: -1,
            ranges,
            bufs: Vec::new(),
            done: tx.clone(),
        };
        // each job's errno per read, in order
        let errnos = |d: crate::uring::tests::Done| -> (usize, Vec<Option<i32>>) {
            let e =
                d.2.iter()
                    .map(|r| r.as_ref().err().and_then(|e| e.raw_os_error()));
            (d.0, e.collect())
        };
        ring.push(&store, job(0, Vec::new()));
        assert_eq!(
            errnos(rx.try_recv().expect("finished at once")),
            (0, vec![])
        );
        ring.push(&store, job(1, vec![(0, 4096), (8192, 4096)]));
        ring.push(&store, job(2, vec![(1 << 20, 512)]));
        assert_eq!(ring.jobs(), 2);
        let mut pfd = libc::pollfd {
            fd: ring.event_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 1000) };
        assert_eq!(ready, 1, "the eventfd was signalled");
        assert!(rx.try_recv().is_err(), "nothing finishes before the reap");
        assert_eq!(ring.reap(), 2);
        assert_eq!(ring.jobs(), 0);
        let einval = Some(libc::EINVAL);
        assert_eq!(
            errnos(rx.try_recv().expect("job 1")),
            (1, vec![einval, einval])
        );
        assert_eq!(errnos(rx.try_recv().expect("job 2")), (2, vec![einval]));
        assert_eq!(ring.reap(), 0);
        // the slots are reused; a dropped ring finishes what it holds
        ring.push(&store, job(3, vec![(0, 512)]));
        drop(ring);
        assert_eq!(
            errnos(rx.try_recv().expect("finished by the drop")),
            (3, vec![einval])
        );
    }
}
