//! A read ring owned by one thread ([`ReadRing`]): the thread pushes jobs (each some reads
//! and a continuation), submits everything queued with one `io_uring_enter` when it is about
//! to wait anyway, and reaps completions from the shared completion queue without a system
//! call. A registered eventfd says that completions arrived, so the owner can sleep in its
//! own poll set (the event thread's epoll) instead of in the ring. A job is finished on the
//! owning thread when its last read has ended; short reads are continued, end of file is
//! EIO, errors go to the job. Nothing here sleeps except [`ReadRing::wait`] and the drain
//! on drop, which must not return while the kernel may still write into a job's memory.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use io_uring::{IoUring, Probe, opcode, types};

/// What a [`RingOp`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Fill the op's memory from the store.
    Read,
    /// Write the op's memory to the store (acknowledged = as durable as the store's writes
    /// are: an RBD image's are in the cluster).
    Write,
    /// Make every write acknowledged before it durable (no memory: `buf` null, `len` 0).
    Flush,
    /// Make `len` bytes at `offset` read as zeros, deallocated where the store can (no
    /// memory: `buf` null): UNMAP, WRITE SAME with UNMAP.
    Zero,
}

/// One positional operation on `fd` (or on the store of a [`crate::store::AioRing`] job):
/// `len` bytes at byte `offset`, read into or written from memory at `buf`. The io_uring
/// [`ReadRing`] runs reads only (it ends other kinds with EINVAL); a store's own
/// asynchronous engine runs every kind it offers ([`crate::store::Store::start_op`]).
#[derive(Debug, Clone, Copy)]
pub struct RingOp {
    pub fd: RawFd,
    pub buf: *mut u8,
    pub len: usize,
    pub offset: u64,
    pub kind: OpKind,
}

impl RingOp {
    /// A read of `len` bytes at `offset` of `fd` into `buf`.
    pub fn read(fd: RawFd, buf: *mut u8, len: usize, offset: u64) -> RingOp {
        RingOp {
            fd,
            buf,
            len,
            offset,
            kind: OpKind::Read,
        }
    }
}

/// Work a ring runs: some operations (reads, for the io_uring ring), then a continuation.
///
/// # Safety
/// Every read or write [`RingOp`] that [`ops`](RingJob::ops) gives (flushes and zeros
/// carry no memory: a null `buf`) must point to `len` bytes of memory that is valid (writable for a read), owned by the job (or kept alive by it), not moved
/// when the job value moves (heap or arena memory, never the job's own fields), and not
/// touched by anything else (a write's memory: not written) until
/// [`finish`](RingJob::finish) is called.
pub unsafe trait RingJob: 'static {
    /// Append the operations this job needs to `out` (called once, when the job is pushed).
    fn ops(&mut self, out: &mut Vec<RingOp>);
    /// Every operation has ended: `results[i]` tells whether `ops[i]` was done entirely
    /// (a read's end of file before that is EIO). Runs on the ring's thread; must not
    /// block.
    fn finish(self, results: &[io::Result<()>]);
}

/// Longest read one entry carries.
const MAX_READ: usize = 0x7fff_f000;

/// A job with reads in flight.
pub(crate) struct Flight<J> {
    job: J,
    pub(crate) ops: Vec<RingOp>,
    results: Vec<io::Result<()>>,
    left: usize,
}

/// The jobs of a ring (io_uring's or librbd's) with reads in flight, by slot; their
/// emptied vectors are reused, so a warm ring allocates nothing per job.
pub(crate) struct Flights<J> {
    slots: Vec<Option<Flight<J>>>,
    free: Vec<usize>,
    /// Jobs inserted and not finished.
    jobs: usize,
    spare_ops: Vec<Vec<RingOp>>,
    spare_results: Vec<Vec<io::Result<()>>>,
}

impl<J: RingJob> Flights<J> {
    pub(crate) fn new() -> Self {
        Flights {
            slots: Vec::new(),
            free: Vec::new(),
            jobs: 0,
            spare_ops: Vec::new(),
            spare_results: Vec::new(),
        }
    }

    pub(crate) fn jobs(&self) -> usize {
        self.jobs
    }

    /// Ask `job` for its reads and give it a slot: `Some((slot, reads))`, or `None` when it
    /// has no reads (then it is finished at once).
    pub(crate) fn insert(&mut self, mut job: J) -> Option<(usize, usize)> {
        let mut ops = self.spare_ops.pop().unwrap_or_default();
        job.ops(&mut ops);
        if ops.is_empty() {
            self.spare_ops.push(ops);
            job.finish(&[]);
            return None;
        }
        let n = ops.len();
        let mut results = self.spare_results.pop().unwrap_or_default();
        results.extend((0..n).map(|_| Ok(())));
        let flight = Flight {
            job,
            ops,
            results,
            left: n,
        };
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(flight);
                i
            }
            None => {
                self.slots.push(Some(flight));
                self.slots.len() - 1
            }
        };
        self.jobs += 1;
        Some((slot, n))
    }

    pub(crate) fn get_mut(&mut self, slot: usize) -> Option<&mut Flight<J>> {
        self.slots.get_mut(slot).and_then(Option::as_mut)
    }

    /// Read `op` of `slot` ended with `result`; whether it was the job's last.
    pub(crate) fn ended(&mut self, slot: usize, op: usize, result: io::Result<()>) -> bool {
        let Some(flight) = self.get_mut(slot) else {
            return false;
        };
        let Some(r) = flight.results.get_mut(op) else {
            return false;
        };
        *r = result;
        flight.left = flight.left.saturating_sub(1);
        flight.left == 0
    }

    /// Finish the job of `slot` (every read ended) and free the slot.
    pub(crate) fn finish(&mut self, slot: usize) {
        if let Some(flight) = self.slots.get_mut(slot).and_then(Option::take) {
            self.free.push(slot);
            self.jobs -= 1;
            let Flight {
                job,
                mut ops,
                mut results,
                ..
            } = flight;
            job.finish(&results);
            ops.clear();
            results.clear();
            self.spare_ops.push(ops);
            self.spare_results.push(results);
        }
    }

    /// Finish every job left, with what its reads got so far (the drop of a drained ring).
    pub(crate) fn finish_all(&mut self) {
        for slot in 0..self.slots.len() {
            self.finish(slot);
        }
    }
}

/// A thread's read ring (not shared: `!Send` through its jobs' raw pointers).
pub struct ReadRing<J: RingJob> {
    ring: IoUring,
    /// Signalled by the kernel when completions are posted (nonblocking, never read: the
    /// owner polls it edge-triggered and reaps the completion queue instead).
    event: OwnedFd,
    entries: usize,
    flights: Flights<J>,
    /// Reads (flight, op) waiting for room in the submission queue.
    backlog: VecDeque<(usize, usize)>,
    /// Entries submitted or queued and not completed.
    in_ring: usize,
    /// Entries queued since the last submit.
    unsubmitted: usize,
    /// Flights completed in one reap (kept for its memory).
    done: Vec<usize>,
}

impl<J: RingJob> ReadRing<J> {
    /// A ring of `entries` slots (a power of two, at most 4096) with its eventfd. Fails when
    /// the kernel has no io_uring, refuses it, or lacks the read operation.
    pub fn new(entries: u32) -> io::Result<ReadRing<J>> {
        let entries = entries.clamp(2, 4096).next_power_of_two();
        let ring = IoUring::new(entries)?;
        let mut probe = Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        if !probe.is_supported(opcode::Read::CODE) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel's io_uring has no READ operation",
            ));
        }
        // SAFETY: plain eventfd creation; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(event.as_raw_fd())?;
        Ok(ReadRing {
            ring,
            event,
            entries: entries as usize,
            flights: Flights::new(),
            backlog: VecDeque::new(),
            in_ring: 0,
            unsubmitted: 0,
            done: Vec::new(),
        })
    }

    /// The eventfd the kernel signals when completions arrive (poll it for readability,
    /// edge-triggered; it is never read).
    pub fn event_fd(&self) -> RawFd {
        self.event.as_raw_fd()
    }

    /// Jobs pushed and not finished yet.
    pub fn jobs(&self) -> usize {
        self.flights.jobs()
    }

    /// Queue `job`'s reads (submitted at the next [`submit`](Self::submit)); a job without
    /// operations is finished at once, and so is one whose other operations (writes,
    /// flushes: EINVAL here) were its last.
    pub fn push(&mut self, job: J) {
        let Some((slot, n)) = self.flights.insert(job) else {
            return;
        };
        let mut last = false;
        for i in 0..n {
            let kind = self
                .flights
                .get_mut(slot)
                .and_then(|x| x.ops.get(i))
                .map(|o| o.kind);
            if kind == Some(OpKind::Read) {
                self.backlog.push_back((slot, i));
            } else {
                // this ring reads; other operations fail at once
                let einval = Err(io::Error::from_raw_os_error(libc::EINVAL));
                last = self.flights.ended(slot, i, einval);
            }
        }
        if last {
            self.flights.finish(slot);
        }
        self.fill_queue();
    }

    /// Hand everything queued to the kernel (one system call; none when nothing is queued).
    pub fn submit(&mut self) {
        if self.unsubmitted == 0 {
            return;
        }
        match self.ring.submit() {
            Ok(n) => self.unsubmitted = self.unsubmitted.saturating_sub(n),
            // EAGAIN/EBUSY: the kernel is short of resources; what stays queued goes with
            // the next call (the owner reaps and submits again on every turn)
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::EINTR)
                ) => {}
            Err(e) => tracing::warn!("read ring: io_uring_enter failed, retrying: {e}"),
        }
    }

    /// Finish the jobs whose reads have all completed; returns how many. No system call
    /// unless short reads had to be resubmitted.
    pub fn reap(&mut self) -> usize {
        let mut done = std::mem::take(&mut self.done);
        let mut requeued = false;
        for cqe in self.ring.completion() {
            self.in_ring = self.in_ring.saturating_sub(1);
            let (f, i) = (
                (cqe.user_data() >> 32) as usize,
                cqe.user_data() as u32 as usize,
            );
            let Some(op) = self.flights.get_mut(f).and_then(|x| x.ops.get_mut(i)) else {
                continue;
            };
            let r = cqe.result();
            let outcome = if r < 0 {
                Some(Err(io::Error::from_raw_os_error(-r)))
            } else if r == 0 {
                // end of file before the range ended: the file shrank under us
                Some(Err(io::Error::from_raw_os_error(libc::EIO)))
            } else if (r as usize) < op.len {
                // short: read the rest next
                let n = r as usize;
                // SAFETY: n < op.len, so the advanced pointer stays inside the buffer.
                op.buf = unsafe { op.buf.add(n) };
                op.len -= n;
                op.offset += n as u64;
                self.backlog.push_back((f, i));
                requeued = true;
                None
            } else {
                Some(Ok(()))
            };
            if let Some(res) = outcome
                && self.flights.ended(f, i, res)
            {
                done.push(f);
            }
        }
        if requeued || !self.backlog.is_empty() {
            self.fill_queue();
            self.submit();
        }
        let n = done.len();
        for f in done.drain(..) {
            self.flights.finish(f);
        }
        self.done = done;
        n
    }

    /// Submit, then block until at least one completion is there, and reap (for owners
    /// that have nothing else to wait for: tests, the drain at the end).
    pub fn wait(&mut self) -> usize {
        self.fill_queue();
        if self.in_ring > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(n) => self.unsubmitted = self.unsubmitted.saturating_sub(n),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    tracing::warn!("read ring: io_uring_enter failed, retrying: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
        self.reap()
    }

    /// Queue backlog reads while the submission queue has room.
    fn fill_queue(&mut self) {
        while self.in_ring < self.entries {
            let Some(&(f, i)) = self.backlog.front() else {
                return;
            };
            let Some(op) = self.flights.get_mut(f).and_then(|x| x.ops.get(i)) else {
                self.backlog.pop_front();
                continue;
            };
            let len = op.len.min(MAX_READ) as u32;
            let sqe = opcode::Read::new(types::Fd(op.fd), op.buf, len)
                .offset(op.offset)
                .build()
                .user_data(((f as u64) << 32) | i as u64);
            if self.ring.submission().is_full() {
                // the queue is full of unsubmitted entries: hand them over first
                self.submit();
            }
            // SAFETY: RingJob's contract: the buffer is the job's, valid and untouched by
            // others until finish, which runs only after this read's completion is reaped
            // (and the ring is drained before it is dropped).
            if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                return; // still full (the kernel took nothing): the next turn goes on
            }
            self.backlog.pop_front();
            self.in_ring += 1;
            self.unsubmitted += 1;
        }
    }
}

impl<J: RingJob> Drop for ReadRing<J> {
    /// Wait for every read still in the kernel (they write into the jobs' memory) and
    /// finish their jobs; backlog reads never issued end as ECANCELED.
    fn drop(&mut self) {
        for (f, i) in std::mem::take(&mut self.backlog) {
            self.flights
                .ended(f, i, Err(io::Error::from_raw_os_error(libc::ECANCELED)));
        }
        let mut turns = 0u32;
        while self.in_ring > 0 {
            self.wait();
            turns += 1;
            if turns == 100_000 {
                tracing::error!(
                    "read ring: {} reads still in the kernel at shutdown",
                    self.in_ring
                );
            }
        }
        self.flights.finish_all();
    }
}
