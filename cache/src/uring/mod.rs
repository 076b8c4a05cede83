//! Backing-store I/O through io_uring. [`WriteRing`]: a thread hands a whole batch of
//! positional writes (cache block runs going back to their files or devices) to one ring and
//! waits for all of them, so a batch costs a few `io_uring_enter` calls instead of one
//! `pwritev2` each, and O_DIRECT writes to a device are in flight together from one thread.
//! [`ReadRing`]: a thread's own reads (an event thread's cache fills and uncached reads),
//! many in flight at once, submitted with one call per turn, reaped without a system call
//! and finished on that thread when a job's last read completes. They own only the
//! rings; what to read or write and what a failure means stay with the caller. Where io_uring
//! is missing or disabled (old kernel, `kernel.io_uring_disabled`, a seccomp filter), `new`
//! says why and the caller uses its threads and system calls.

mod ring;

pub(crate) use ring::Flights;
pub use ring::{OpKind, ReadRing, RingJob, RingOp};

use std::io;
use std::os::fd::RawFd;

use io_uring::{IoUring, Probe, opcode, types};

/// One positional write: all of `data` at byte `offset` of `fd`.
pub struct WriteOp<'a> {
    pub fd: RawFd,
    pub data: &'a [u8],
    pub offset: u64,
}

/// A ring that runs batches of writes; one per thread (it is not shared).
pub struct WriteRing {
    ring: IoUring,
    entries: usize,
}

/// Longest write one entry carries (the kernel's per-call limit for a single buffer).
const MAX_WRITE: usize = 0x7fff_f000;

impl WriteRing {
    /// A ring of `entries` submission slots (a power of two is used; at most 4096). Fails
    /// when the kernel has no io_uring, refuses it, or lacks the write opcode.
    pub fn new(entries: u32) -> io::Result<WriteRing> {
        let entries = entries.clamp(1, 4096).next_power_of_two();
        let ring = IoUring::new(entries)?;
        let mut probe = Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        if !probe.is_supported(opcode::Write::CODE) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel's io_uring has no WRITE operation",
            ));
        }
        Ok(WriteRing {
            ring,
            entries: entries as usize,
        })
    }

    /// Run every write of `ops`, several at once, and return when all of them have finished:
    /// `results[i]` is the byte count `ops[i]` wrote (possibly short) or its error. It never
    /// returns while a write is queued or in flight (their buffers are borrowed, and a write
    /// that landed later could overwrite newer data): a failing `io_uring_enter` is retried.
    pub fn write_all(&mut self, ops: &[WriteOp<'_>], results: &mut Vec<io::Result<usize>>) {
        results.clear();
        results.extend(ops.iter().map(|_| Ok(0)));
        let mut next = 0usize; // first op not yet queued
        let mut in_flight = 0usize;
        let mut warned = false;
        while next < ops.len() || in_flight > 0 {
            // queue as many as the ring holds
            while next < ops.len() && in_flight < self.entries {
                let op = &ops[next];
                let len = op.data.len().min(MAX_WRITE) as u32;
                let sqe = opcode::Write::new(types::Fd(op.fd), op.data.as_ptr(), len)
                    .offset(op.offset)
                    .build()
                    .user_data(next as u64);
                // SAFETY: the buffer `op.data` stays borrowed (and so valid and unchanged)
                // until this function returns, and it returns only after the entry's
                // completion has been reaped (the loop runs until nothing is in flight).
                if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                    break; // submission queue full: submit what is queued first
                }
                next += 1;
                in_flight += 1;
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) {
                    // entries are queued or in flight with borrowed buffers: never return
                    // before they complete (a late write could land after a newer one)
                    if !warned {
                        tracing::warn!("io_uring submit/wait failed, retrying: {e}");
                        warned = true;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            for cqe in self.ring.completion() {
                let i = cqe.user_data() as usize;
                in_flight = in_flight.saturating_sub(1);
                if let Some(slot) = results.get_mut(i) {
                    let r = cqe.result();
                    *slot = if r < 0 {
                        Err(io::Error::from_raw_os_error(-r))
                    } else {
                        Ok(r as usize)
                    };
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
