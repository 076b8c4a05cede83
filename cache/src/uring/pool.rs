//! A node's read ring ([`RingPool`]): one thread, bound to the node's CPUs, with one io_uring
//! that keeps the reads of every queued job in flight together (cache fills, uncached
//! reads), so a node's read depth is the ring's, not its number of worker threads. Event
//! threads queue jobs and nudge the ring through an eventfd the ring itself reads (one
//! `write` per burst of submissions, not per job); the ring thread finishes each job when its
//! last read completes, and a job's `finish` hands its result on (to the owning event
//! thread's mailbox, whose wakeups are coalesced). Short reads are continued, end of file is
//! EIO, errors go to the job.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use io_uring::{IoUring, Probe, opcode, squeue, types};

use crate::topology::{Node, bind_current_thread};

/// One positional read: `len` bytes at byte `offset` of `fd` into memory at `buf`.
#[derive(Debug, Clone, Copy)]
pub struct ReadOp {
    pub fd: RawFd,
    pub buf: *mut u8,
    pub len: usize,
    pub offset: u64,
}

// SAFETY: a ReadOp is only an address; the job that made it owns the memory and promises
// (RingJob's contract) that it stays valid until the job is finished, on whichever thread.
unsafe impl Send for ReadOp {}

/// Work a [`RingPool`] runs: some reads, then a continuation.
///
/// # Safety
/// Every [`ReadOp`] that [`reads`](RingJob::reads) gives must point to `len` bytes of memory
/// that is writable, owned by the job (or kept alive by it), not moved when the job value
/// moves (heap or arena memory, never the job's own fields), and not read or written by
/// anything else until [`finish`](RingJob::finish) is called.
pub unsafe trait RingJob: Send + 'static {
    /// Append the reads this job needs to `out` (called once, on the ring thread).
    fn reads(&mut self, out: &mut Vec<ReadOp>);
    /// Every read has ended: `results[i]` tells whether `reads[i]` was filled entirely
    /// (end of file before that is EIO). Runs on the ring thread; must not block for long.
    fn finish(self, results: &[io::Result<()>]);
}

/// A ring for the calling thread alone: single issuer, with completion work deferred to the
/// moment the thread waits for completions (no interrupting task work, no IPI per read);
/// kernels older than 6.1 lack those flags, and get a plain ring. Fails when the kernel has
/// no io_uring, refuses it, or lacks the read operation.
fn new_read_ring() -> io::Result<IoUring> {
    let ring = match IoUring::builder()
        .setup_single_issuer()
        .setup_coop_taskrun()
        .setup_defer_taskrun()
        .build(ENTRIES)
    {
        Ok(r) => r,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::new(ENTRIES)?,
        Err(e) => return Err(e),
    };
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    if !probe.is_supported(opcode::Read::CODE) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel's io_uring has no READ operation",
        ));
    }
    Ok(ring)
}

/// Submission slots of a ring (reads in flight at most, plus the wakeup read).
const ENTRIES: u32 = 256;
/// The `user_data` of the eventfd read.
const WAKE: u64 = u64::MAX;

struct Shared<J> {
    queue: Mutex<VecDeque<J>>,
    /// Jobs queued or in flight.
    pending: AtomicUsize,
    stop: AtomicBool,
    /// The eventfd was written and the ring has not drained the queue since.
    nudged: AtomicBool,
    wake: OwnedFd,
}

impl<J> Shared<J> {
    fn nudge(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let n = unsafe { libc::write(self.wake.as_raw_fd(), (&raw const one).cast(), 8) };
        if n != 8 {
            tracing::error!("cannot wake the read ring: {}", io::Error::last_os_error());
        }
    }
}

/// The read ring of one node.
pub struct RingPool<J: RingJob> {
    shared: Arc<Shared<J>>,
    thread: Option<JoinHandle<()>>,
    node: usize,
}

impl<J: RingJob> RingPool<J> {
    /// Start `node`'s ring thread. Fails when the kernel has no io_uring, refuses it, or
    /// lacks the read operation; nothing is left running then.
    pub fn start(node: &Node) -> io::Result<RingPool<J>> {
        // blocking: the ring's read of it waits (a nonblocking one would answer EAGAIN)
        // SAFETY: plain eventfd creation; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::with_capacity(1024)),
            pending: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            nudged: AtomicBool::new(false),
            wake,
        });
        let sh = Arc::clone(&shared);
        let cpus = node.cpus.clone();
        // the ring is made on its own thread: a single-issuer ring accepts submissions only
        // from the thread that created it
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<io::Result<()>>(1);
        let thread = std::thread::Builder::new()
            .name(format!("ring-n{}", node.index))
            .spawn(move || {
                if let Err(e) = bind_current_thread(&cpus) {
                    tracing::debug!("cannot bind the read ring to {cpus:?}: {e}");
                }
                match new_read_ring() {
                    Ok(ring) => {
                        let _ = ready_tx.send(Ok(()));
                        Runner::new(ring, &sh).run();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })?;
        let made = ready_rx
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("the read ring thread ended at start")));
        if let Err(e) = made {
            let _ = thread.join();
            return Err(e);
        }
        Ok(RingPool {
            shared,
            thread: Some(thread),
            node: node.index,
        })
    }

    /// Queue `job`; its reads start at the ring's next turn.
    pub fn submit(&self, job: J) {
        self.shared.pending.fetch_add(1, Ordering::Relaxed);
        match self.shared.queue.lock() {
            Ok(mut q) => q.push_back(job),
            Err(p) => p.into_inner().push_back(job),
        }
        if !self.shared.nudged.swap(true, Ordering::AcqRel) {
            self.shared.nudge();
        }
    }

    /// Jobs queued or in flight.
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::Relaxed)
    }

    pub fn node(&self) -> usize {
        self.node
    }

    /// Finish every queued and running job, then stop the thread.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(t) = self.thread.take() {
            self.shared.stop.store(true, Ordering::SeqCst);
            self.shared.nudge();
            let _ = t.join();
        }
    }
}

impl<J: RingJob> Drop for RingPool<J> {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// A job with reads in flight.
struct Flight<J> {
    job: J,
    ops: Vec<ReadOp>,
    results: Vec<io::Result<()>>,
    left: usize,
}

/// The ring thread's state.
struct Runner<'a, J> {
    /// Declared first so that it is dropped last: the ring's reads may target it until the
    /// thread has seen their completions.
    wake_buf: Box<u64>,
    ring: IoUring,
    shared: &'a Shared<J>,
    flights: Vec<Option<Flight<J>>>,
    free: Vec<usize>,
    /// Reads (flight, op) waiting for room in the submission queue.
    backlog: VecDeque<(usize, usize)>,
    in_ring: usize,
    wake_armed: bool,
    taken: VecDeque<J>,
}

impl<'a, J: RingJob> Runner<'a, J> {
    fn new(ring: IoUring, shared: &'a Shared<J>) -> Self {
        Runner {
            wake_buf: Box::new(0),
            ring,
            shared,
            flights: Vec::new(),
            free: Vec::new(),
            backlog: VecDeque::new(),
            in_ring: 0,
            wake_armed: false,
            taken: VecDeque::new(),
        }
    }

    fn run(mut self) {
        let mut warned = false;
        loop {
            let stopping = self.shared.stop.load(Ordering::SeqCst);
            if !self.wake_armed && !stopping {
                let sqe = opcode::Read::new(
                    types::Fd(self.shared.wake.as_raw_fd()),
                    (&raw mut *self.wake_buf).cast(),
                    8,
                )
                .build()
                .user_data(WAKE);
                // SAFETY: wake_buf is a heap u64 that lives until the thread ends, and the
                // thread ends only once this read has completed (wake_armed false).
                if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                    self.wake_armed = true;
                    self.in_ring += 1;
                }
            }
            self.take_jobs();
            self.push_backlog();
            if stopping && !self.wake_armed && self.in_ring == 0 && self.flights_empty() {
                // a job queued after the stop flag was read is taken on the next turn
                if self.queue_empty() {
                    return;
                }
                continue;
            }
            if let Err(e) = self.ring.submit_and_wait(1)
                && !matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                )
            {
                if !warned {
                    tracing::warn!("read ring: io_uring_enter failed, retrying: {e}");
                    warned = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.reap();
        }
    }

    fn queue_empty(&self) -> bool {
        match self.shared.queue.lock() {
            Ok(q) => q.is_empty(),
            Err(p) => p.into_inner().is_empty(),
        }
    }

    fn flights_empty(&self) -> bool {
        self.free.len() == self.flights.len()
    }

    /// Move queued jobs into flights and their reads into the backlog.
    fn take_jobs(&mut self) {
        self.shared.nudged.store(false, Ordering::Release);
        {
            let mut q = match self.shared.queue.lock() {
                Ok(q) => q,
                Err(p) => p.into_inner(),
            };
            std::mem::swap(&mut *q, &mut self.taken);
        }
        while let Some(mut job) = self.taken.pop_front() {
            let mut ops = Vec::new();
            job.reads(&mut ops);
            if ops.is_empty() {
                self.shared.pending.fetch_sub(1, Ordering::Relaxed);
                job.finish(&[]);
                continue;
            }
            let n = ops.len();
            let flight = Flight {
                job,
                ops,
                results: (0..n).map(|_| Ok(())).collect(),
                left: n,
            };
            let idx = match self.free.pop() {
                Some(i) => {
                    self.flights[i] = Some(flight);
                    i
                }
                None => {
                    self.flights.push(Some(flight));
                    self.flights.len() - 1
                }
            };
            self.backlog.extend((0..n).map(|op| (idx, op)));
        }
    }

    /// Queue backlog reads while the ring has room (one slot stays for the wakeup read).
    fn push_backlog(&mut self) {
        while self.in_ring + 1 < ENTRIES as usize {
            let Some(&(f, i)) = self.backlog.front() else {
                return;
            };
            let Some(op) = self
                .flights
                .get(f)
                .and_then(|x| x.as_ref())
                .and_then(|x| x.ops.get(i))
            else {
                self.backlog.pop_front();
                continue;
            };
            let len = op.len.min(0x7fff_f000) as u32;
            let sqe = opcode::Read::new(types::Fd(op.fd), op.buf, len)
                .offset(op.offset)
                .build()
                .flags(squeue::Flags::empty())
                .user_data(((f as u64) << 32) | i as u64);
            // SAFETY: RingJob's contract: the buffer is the job's, valid and untouched by
            // others until finish, which runs only after this read's completion is reaped.
            if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                return;
            }
            self.backlog.pop_front();
            self.in_ring += 1;
        }
    }

    fn reap(&mut self) {
        let mut done = Vec::new();
        for cqe in self.ring.completion() {
            self.in_ring = self.in_ring.saturating_sub(1);
            if cqe.user_data() == WAKE {
                self.wake_armed = false;
                continue;
            }
            let (f, i) = (
                (cqe.user_data() >> 32) as usize,
                cqe.user_data() as u32 as usize,
            );
            let Some(flight) = self.flights.get_mut(f).and_then(|x| x.as_mut()) else {
                continue;
            };
            let Some(op) = flight.ops.get_mut(i) else {
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
                None
            } else {
                Some(Ok(()))
            };
            if let Some(res) = outcome {
                flight.results[i] = res;
                flight.left -= 1;
                if flight.left == 0 {
                    done.push(f);
                }
            }
        }
        for f in done {
            if let Some(flight) = self.flights.get_mut(f).and_then(Option::take) {
                self.free.push(f);
                self.shared.pending.fetch_sub(1, Ordering::Relaxed);
                flight.job.finish(&flight.results);
            }
        }
    }
}
