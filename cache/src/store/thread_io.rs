//! [`ThreadIo`]: everything one event thread reads stores with (and, for stores with their
//! own asynchronous engine, writes and flushes them with), behind one call. The thread's
//! io_uring ring ([`ReadRing`], [`ReadEngine::Uring`] stores: reads), its ring of the
//! stores' own asynchronous operations ([`AioRing`], [`ReadEngine::Callback`]: reads,
//! writes, flushes), and operations that complete at once ([`ReadEngine::Immediate`]).
//! [`push`](ThreadIo::push) asks the store for its engine and gives the job back when this
//! thread has no such engine (the caller's I/O worker threads run it then); each ring keeps
//! its own eventfd, submits once per turn and reaps without a system call, as before. Not
//! shared: one per thread.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use super::{AioRing, BackingStore, ReadEngine};
use crate::uring::{OpKind, ReadRing, RingJob, RingOp};

/// One thread's read engines.
pub struct ThreadIo<J: RingJob> {
    uring: Option<ReadRing<J>>,
    callback: Option<AioRing<J>>,
    /// The reads of an immediate job, and their results (kept for their memory).
    ops: Vec<RingOp>,
    results: Vec<io::Result<()>>,
}

impl<J: RingJob> Default for ThreadIo<J> {
    fn default() -> Self {
        Self::new()
    }
}

impl<J: RingJob> ThreadIo<J> {
    /// Immediate reads only, until rings are started.
    pub fn new() -> Self {
        ThreadIo {
            uring: None,
            callback: None,
            ops: Vec::new(),
            results: Vec::new(),
        }
    }

    /// Make this thread's io_uring read ring of `entries` slots; returns its eventfd
    /// (readable, edge-triggered, when completions arrived).
    pub fn start_uring(&mut self, entries: u32) -> io::Result<RawFd> {
        let ring = ReadRing::new(entries)?;
        let fd = ring.event_fd();
        self.uring = Some(ring);
        Ok(fd)
    }

    /// Make this thread's ring of asynchronous store reads; returns its eventfd.
    pub fn start_callback(&mut self) -> io::Result<RawFd> {
        let ring = AioRing::new()?;
        let fd = ring.event_fd();
        self.callback = Some(ring);
        Ok(fd)
    }

    /// Whether this thread has the engine `store` reads through (a job of it would be
    /// taken by [`push`](Self::push)).
    pub fn takes(&self, store: &BackingStore) -> bool {
        match store.read_engine() {
            ReadEngine::Uring(_) => self.uring.is_some(),
            ReadEngine::Callback => self.callback.is_some(),
            ReadEngine::Immediate => true,
            ReadEngine::Threads => false,
        }
    }

    /// Whether this thread's engine for `store` takes writes and flushes as well (a
    /// [`ReadEngine::Callback`] store, with this thread's ring of its operations).
    pub fn takes_writes(&self, store: &BackingStore) -> bool {
        store.read_engine() == ReadEngine::Callback && self.callback.is_some()
    }

    /// Run `job`'s operations on `store` through the store's engine: queued in a ring (finished
    /// by a later [`reap`](Self::reap)) or, for an immediate store, read and finished now.
    /// Gives the job back when this thread has no such engine.
    pub fn push(&mut self, store: &Arc<BackingStore>, job: J) -> Result<(), J> {
        match store.read_engine() {
            ReadEngine::Uring(_) => match &mut self.uring {
                Some(ring) => ring.push(job),
                None => return Err(job),
            },
            ReadEngine::Callback => match &mut self.callback {
                Some(ring) => ring.push(store, job),
                None => return Err(job),
            },
            ReadEngine::Immediate => self.now(store, job),
            ReadEngine::Threads => return Err(job),
        }
        Ok(())
    }

    /// An immediate store's job: every operation now (they never block), then the job
    /// finished.
    fn now(&mut self, store: &BackingStore, mut job: J) {
        self.ops.clear();
        self.results.clear();
        job.ops(&mut self.ops);
        for op in &self.ops {
            let r = match op.kind {
                OpKind::Flush => store.sync(),
                _ if op.len == 0 => Ok(()),
                OpKind::Zero => store.deallocate(op.offset, op.len as u64).map(drop),
                OpKind::Read => {
                    // SAFETY: RingJob's contract: `op.buf` is valid for writes of `op.len`
                    // bytes, the job's own, and nothing else touches it until `finish`.
                    let buf = unsafe { std::slice::from_raw_parts_mut(op.buf, op.len) };
                    store.read_at(buf, op.offset)
                }
                OpKind::Write => {
                    // SAFETY: as above, valid for reads of `op.len` bytes.
                    let data = unsafe { std::slice::from_raw_parts(op.buf, op.len) };
                    store.write_at(data, op.offset, false)
                }
            };
            self.results.push(r);
        }
        job.finish(&self.results);
        self.results.clear();
    }

    /// Hand what the rings queued to the kernel (one system call; none when nothing is).
    pub fn submit(&mut self) {
        if let Some(ring) = &mut self.uring {
            ring.submit();
        }
    }

    /// Finish the jobs whose reads all completed, in every ring; returns how many. No
    /// system call when none did.
    pub fn reap(&mut self) -> usize {
        let mut n = 0;
        if let Some(ring) = &mut self.uring {
            n += ring.reap();
        }
        if let Some(ring) = &mut self.callback {
            n += ring.reap();
        }
        n
    }

    /// Jobs in the rings, not finished yet.
    pub fn jobs(&self) -> usize {
        self.uring.as_ref().map_or(0, ReadRing::jobs)
            + self.callback.as_ref().map_or(0, AioRing::jobs)
    }

    /// Drop the io_uring ring: waits for its reads still in the kernel and finishes them.
    pub fn stop_uring(&mut self) {
        drop(self.uring.take());
    }

    /// Drop the ring of asynchronous reads: waits for its reads still in the stores (they
    /// land in cache blocks) and finishes them.
    pub fn stop_callback(&mut self) {
        drop(self.callback.take());
    }

    /// Whether a ring is running.
    pub fn has_rings(&self) -> bool {
        self.uring.is_some() || self.callback.is_some()
    }
}
