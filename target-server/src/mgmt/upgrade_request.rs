//! The way an upgrade asked for over the management socket (`numatgtadm --upgrade`)
//! reaches the main thread, which owns the daemon and runs the handover
//! (`crate::handover`): the request is queued, SIGUSR2 wakes the main thread's sigwait,
//! and the management client waits for the outcome; after a successful handover the
//! main thread exits only once the client has its answer.

use std::path::PathBuf;
use std::sync::{Condvar, Mutex, mpsc};
use std::time::Duration;

/// An upgrade asked for over the management socket, waiting for the main thread.
pub struct Request {
    /// The binary to start (`None`: the one this process started from).
    pub binary: Option<PathBuf>,
    reply: mpsc::SyncSender<Result<String, String>>,
}

impl Request {
    /// Answers the management client.
    pub fn answer(self, r: Result<String, String>) {
        let _ = self.reply.send(r);
    }
}

static PENDING: Mutex<Option<Request>> = Mutex::new(None);
/// Set once the management thread has written an upgrade's answer to its client.
static ANSWERED: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());

/// The management handler's side: queues the upgrade for the main thread (SIGUSR2) and
/// waits for its outcome.
pub fn request(binary: Option<PathBuf>) -> Result<String, String> {
    let (tx, rx) = mpsc::sync_channel(1);
    {
        let mut p = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        if p.is_some() {
            return Err("an upgrade is already under way".into());
        }
        *p = Some(Request { binary, reply: tx });
    }
    *ANSWERED.0.lock().unwrap_or_else(|p| p.into_inner()) = false;
    // to the process (raise(3) would aim at this thread, which blocks it): the main
    // thread's sigwait takes it
    if let Err(e) =
        nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGUSR2)
    {
        PENDING.lock().unwrap_or_else(|p| p.into_inner()).take();
        return Err(format!("cannot signal the main thread: {e}"));
    }
    rx.recv_timeout(Duration::from_secs(900))
        .unwrap_or_else(|_| Err("no outcome from the main thread".into()))
}

/// The main thread's side: the request behind a SIGUSR2 (`None`: the signal came from
/// outside, e.g. `kill -USR2`).
pub fn take_request() -> Option<Request> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// The management thread wrote a response (the main thread may exit after an upgrade).
pub fn answer_written() {
    let (m, c) = &ANSWERED;
    *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
    c.notify_all();
}

/// Waits (3 s at most) until the management client has its answer.
pub fn wait_answer_written() {
    let (m, c) = &ANSWERED;
    let g = m.lock().unwrap_or_else(|p| p.into_inner());
    let _ = c.wait_timeout_while(g, Duration::from_secs(3), |done| !*done);
}
