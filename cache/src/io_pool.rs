//! Per-node I/O worker pools: threads bound to one node's CPUs that run blocking backing-store
//! calls (pread/pwrite/fdatasync) submitted by event threads, so that no event thread ever
//! blocks on a disk. The queue is bounded only by the callers' task limits (each session's
//! CmdSN window bounds its outstanding commands). Jobs are any [`IoJob`] type: a boxed
//! closure, or a server's own enum of requests, which submits without allocating.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::topology::{Node, bind_current_thread};

/// One unit of blocking work; it reports its own completion (e.g. a channel + waker).
pub type IoRequest = Box<dyn FnOnce() + Send + 'static>;

/// Work a pool's workers can run.
pub trait IoJob: Send + 'static {
    fn run(self);
}

impl IoJob for IoRequest {
    fn run(self) {
        self()
    }
}

struct Shared<J> {
    queue: Mutex<VecDeque<J>>,
    ready: Condvar,
    stop: AtomicBool,
    queued: AtomicUsize,
}

/// The I/O workers of one node.
pub struct IoPool<J: IoJob = IoRequest> {
    shared: Arc<Shared<J>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    node: usize,
}

/// Jobs the queue holds without growing (enough for 8 sessions with 128 commands each in
/// flight): submitting, which event threads do per command, then never allocates.
const QUEUE_PREALLOC: usize = 1024;

impl<J: IoJob> IoPool<J> {
    /// Start `threads` workers bound to `node`'s CPUs.
    pub fn start(node: &Node, threads: usize) -> std::io::Result<IoPool<J>> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::with_capacity(QUEUE_PREALLOC)),
            ready: Condvar::new(),
            stop: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
        });
        let mut workers = Vec::new();
        for i in 0..threads.max(1) {
            let shared = Arc::clone(&shared);
            let cpus = node.cpus.clone();
            let name = format!("io-n{}-{}", node.index, i);
            let h = std::thread::Builder::new().name(name).spawn(move || {
                if let Err(e) = bind_current_thread(&cpus) {
                    tracing::debug!("cannot bind I/O worker to {cpus:?}: {e}");
                }
                worker(&shared);
            })?;
            workers.push(h);
        }
        Ok(IoPool {
            shared,
            workers: Mutex::new(workers),
            node: node.index,
        })
    }

    /// Queue a request; a worker of this node runs it.
    pub fn submit(&self, req: J) {
        self.shared.queued.fetch_add(1, Ordering::Relaxed);
        match self.shared.queue.lock() {
            Ok(mut q) => q.push_back(req),
            Err(poisoned) => poisoned.into_inner().push_back(req),
        }
        self.shared.ready.notify_one();
    }

    /// Requests queued or running.
    pub fn pending(&self) -> usize {
        self.shared.queued.load(Ordering::Relaxed)
    }

    pub fn node(&self) -> usize {
        self.node
    }

    /// Finish queued work and stop the workers.
    pub fn shutdown(self) {
        self.stop_and_join();
    }

    /// As [`IoPool::shutdown`], through a shared handle: once it returns no worker runs,
    /// and work submitted afterwards is never run (it is dropped with the pool).
    pub fn drain(&self) {
        self.stop_and_join();
    }

    fn stop_and_join(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.ready.notify_all();
        let handles = match self.workers.lock() {
            Ok(mut w) => std::mem::take(&mut *w),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        for h in handles {
            let _ = h.join();
        }
    }
}

impl<J: IoJob> Drop for IoPool<J> {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

fn worker<J: IoJob>(shared: &Shared<J>) {
    loop {
        let job = {
            let mut q = match shared.queue.lock() {
                Ok(q) => q,
                Err(p) => p.into_inner(),
            };
            loop {
                if let Some(j) = q.pop_front() {
                    break Some(j);
                }
                if shared.stop.load(Ordering::SeqCst) {
                    break None;
                }
                q = match shared.ready.wait(q) {
                    Ok(q) => q,
                    Err(p) => p.into_inner(),
                };
            }
        };
        let Some(job) = job else { return };
        // a panicking job must not take the worker (and every later request) with it
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run())).is_err() {
            tracing::error!("an I/O request panicked; the worker continues");
        }
        shared.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn runs_all_jobs_then_stops() {
        let node = Node {
            index: 0,
            os_index: 0,
            cpus: vec![0],
        };
        let pool: IoPool = IoPool::start(&node, 3).expect("start");
        let (tx, rx) = mpsc::channel();
        for i in 0..100u32 {
            let tx = tx.clone();
            pool.submit(Box::new(move || {
                let _ = tx.send(i);
            }));
        }
        let mut got: Vec<u32> = (0..100).map(|_| rx.recv().expect("result")).collect();
        got.sort_unstable();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        pool.shutdown();
    }

    #[test]
    fn survives_a_panicking_job() {
        let node = Node {
            index: 0,
            os_index: 0,
            cpus: vec![0],
        };
        let pool: IoPool = IoPool::start(&node, 1).expect("start");
        pool.submit(Box::new(|| panic!("boom")));
        let (tx, rx) = mpsc::channel();
        pool.submit(Box::new(move || {
            let _ = tx.send(7);
        }));
        assert_eq!(rx.recv().expect("after panic"), 7);
    }
}
