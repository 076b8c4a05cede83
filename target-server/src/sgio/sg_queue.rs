//! An sg device's thread: it queues the LUN's commands in the kernel with `write(2)` (up
//! to [`SG_QUEUE`] at a time, the rest wait here in arrival order) and reaps them with
//! `read(2)` when the sg file is readable, matching each to its command by `pack_id`. It
//! sleeps in `poll(2)` on the sg file and an eventfd that a submitter rings only when the
//! thread sleeps there. The buffers a queued command names (CDB, data, sense) stay in its
//! slot, unmoved, until it is reaped.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};

use super::abi::{self, SgIoHdr};
use super::{Data, Finished, Outcome, Reply, Request, SENSE_MAX, SG_QUEUE};

/// The submitting side of an sg device's thread.
pub(super) struct Queue {
    tx: Mutex<Sender<Request>>,
    wake: Arc<Wake>,
}

/// The eventfd that wakes the thread from poll(2), and whether it sleeps there.
struct Wake {
    fd: OwnedFd,
    polling: AtomicBool,
}

impl Wake {
    fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from `one` to the eventfd this struct owns.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn clear(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads at most 8 bytes into `n` from the non-blocking eventfd.
        unsafe { libc::read(self.fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    }
}

impl Queue {
    /// Starts the thread `sg-NAME` over the non-blocking sg file `fd`.
    pub(super) fn start(fd: OwnedFd, timeout_ms: u32, name: &str) -> io::Result<Queue> {
        // SAFETY: eventfd(2) with valid flags; the result is checked below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        let wake = Arc::new(Wake {
            // SAFETY: `efd` is a new file descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(efd) },
            polling: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let mut worker = Worker {
            fd,
            timeout_ms,
            rx,
            wake: Arc::clone(&wake),
            waiting: VecDeque::new(),
            slots: (0..SG_QUEUE).map(|_| None).collect(),
            queued: 0,
        };
        std::thread::Builder::new()
            .name(format!("sg-{name}"))
            .spawn(move || worker.run())?;
        Ok(Queue {
            tx: Mutex::new(tx),
            wake,
        })
    }

    /// Hands `req` to the thread (answered at once, refused, when the thread is gone).
    pub(super) fn push(&self, req: Request) {
        let sent = {
            let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            tx.send(req)
        };
        match sent {
            Ok(()) => {
                if self.wake.polling.load(Ordering::SeqCst) {
                    self.wake.ring();
                }
            }
            Err(mpsc::SendError(req)) => refuse(req, io::ErrorKind::BrokenPipe.into()),
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // the thread may sleep in poll with commands queued: let it see the end
        self.wake.ring();
    }
}

/// A command queued in the kernel: the buffers its header names.
struct Slot {
    cdb: Vec<u8>,
    sense: Box<[u8; SENSE_MAX]>,
    data: Vec<u8>,
    read: bool,
    done: Box<dyn FnOnce(Reply) + Send>,
}

struct Worker {
    fd: OwnedFd,
    timeout_ms: u32,
    rx: Receiver<Request>,
    wake: Arc<Wake>,
    /// Commands not yet queued in the kernel, in arrival order.
    waiting: VecDeque<Request>,
    /// Commands queued in the kernel, by `pack_id`.
    slots: Vec<Option<Slot>>,
    queued: usize,
}

impl Worker {
    fn run(&mut self) {
        let mut open = true;
        loop {
            open = open && self.take_new();
            self.queue_waiting();
            if self.queued == 0 && self.waiting.is_empty() {
                if !open {
                    return;
                }
                match self.rx.recv() {
                    Ok(r) => self.waiting.push_back(r),
                    Err(_) => return,
                }
                continue;
            }
            self.sleep();
            self.reap();
        }
    }

    /// Moves what was submitted to `waiting`; `false` when every submitter is gone.
    fn take_new(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(r) => self.waiting.push_back(r),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    /// Queues waiting commands in the kernel while slots are free.
    fn queue_waiting(&mut self) {
        while self.queued < SG_QUEUE {
            let Some(req) = self.waiting.pop_front() else {
                return;
            };
            let Some(id) = self.slots.iter().position(Option::is_none) else {
                self.waiting.push_front(req);
                return;
            };
            let (data, read, dir) = match req.data {
                Data::None => (Vec::new(), false, abi::SG_DXFER_NONE),
                Data::Out(d) => (d, false, abi::SG_DXFER_TO_DEV),
                Data::In(n) => (vec![0u8; n], true, abi::SG_DXFER_FROM_DEV),
            };
            let mut slot = Slot {
                cdb: req.cdb,
                sense: Box::new([0u8; SENSE_MAX]),
                data,
                read,
                done: req.done,
            };
            let mut h = SgIoHdr::empty();
            h.dxfer_direction = if slot.data.is_empty() {
                abi::SG_DXFER_NONE
            } else {
                dir
            };
            // `check_request` bounds the CDB's length
            h.cmd_len = slot.cdb.len() as u8;
            h.cmdp = slot.cdb.as_ptr();
            h.dxfer_len = slot.data.len() as u32;
            h.dxferp = slot.data.as_mut_ptr();
            h.mx_sb_len = SENSE_MAX as u8;
            h.sbp = slot.sense.as_mut_ptr();
            h.timeout = self.timeout_ms;
            h.pack_id = id as i32;
            // SAFETY: the header names the slot's CDB, data and sense buffers with their
            // lengths; the slot is kept in `slots[id]` (its heap buffers never move or
            // change size) until `reap` takes this request back by its pack_id.
            match unsafe { abi::sg_queue(self.fd.as_fd(), &h) } {
                Ok(()) => {
                    self.slots[id] = Some(slot);
                    self.queued += 1;
                }
                Err(e) if e.raw_os_error() == Some(libc::EDOM) => {
                    // the driver's queue is full after all: wait for a reap
                    self.waiting.push_front(Request {
                        cdb: slot.cdb,
                        data: if slot.read {
                            Data::In(slot.data.len())
                        } else if slot.data.is_empty() {
                            Data::None
                        } else {
                            Data::Out(slot.data)
                        },
                        done: slot.done,
                    });
                    return;
                }
                Err(e) => {
                    let data = if slot.read { Vec::new() } else { slot.data };
                    (slot.done)(Reply {
                        outcome: Outcome::Refused(e),
                        data,
                    });
                }
            }
        }
    }

    /// Sleeps until the sg file has an answer or a submitter rang.
    fn sleep(&mut self) {
        self.wake.polling.store(true, Ordering::SeqCst);
        // a submission between the last look and the flag: do not sleep past it
        let more = self.take_new_peek();
        if !more {
            let mut fds = [
                libc::pollfd {
                    fd: self.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.wake.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is an array of 2 pollfd structures that outlives the call.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if fds[1].revents != 0 {
                self.wake.clear();
            }
        }
        self.wake.polling.store(false, Ordering::SeqCst);
    }

    /// Takes what was submitted meanwhile; whether there was anything. (Once every
    /// submitter is gone the thread still sleeps until the kernel answers what it holds.)
    fn take_new_peek(&mut self) -> bool {
        let before = self.waiting.len();
        self.take_new();
        self.waiting.len() > before
    }

    /// Answers every command the kernel has finished.
    fn reap(&mut self) {
        loop {
            let h = match abi::sg_reap(self.fd.as_fd()) {
                Ok(Some(h)) => h,
                Ok(None) => return,
                Err(e) => {
                    tracing::error!("sg read failed: {e}");
                    return;
                }
            };
            let Some(slot) = usize::try_from(h.pack_id)
                .ok()
                .and_then(|id| self.slots.get_mut(id))
                .and_then(Option::take)
            else {
                tracing::error!(
                    pack_id = h.pack_id,
                    "sg answered a command it was not given"
                );
                continue;
            };
            self.queued -= 1;
            let fin = Finished {
                status: h.status,
                host: h.host_status,
                driver: h.driver_status,
                sense_len: usize::from(h.sb_len_wr),
            };
            let outcome = fin.outcome(&slot.sense[..]);
            let mut data = slot.data;
            if slot.read {
                let got = data.len().saturating_sub(h.resid.max(0) as usize);
                data.truncate(got);
            }
            (slot.done)(Reply { outcome, data });
        }
    }
}

/// Answers `req` without running it.
fn refuse(req: Request, e: io::Error) {
    let data = match req.data {
        Data::Out(d) => d,
        _ => Vec::new(),
    };
    (req.done)(Reply {
        outcome: Outcome::Refused(e),
        data,
    });
}
