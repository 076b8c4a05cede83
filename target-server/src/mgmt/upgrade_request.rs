//! The way an upgrade asked for over the management socket (`numatgtadm --upgrade`)
//! reaches the main thread, which owns the daemon and runs the handover
//! (`crate::handover`): the request is queued with the client's connection, SIGUSR2 wakes
//! the main thread's sigwait, and the management thread waits for the outcome. A refused
//! upgrade is answered from here; a completed one replaces this process, and the new
//! numatgtd answers the client on the connection it was handed.

use std::cell::RefCell;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Mutex, mpsc};
use std::time::Duration;

/// An upgrade asked for over the management socket, waiting for the main thread.
pub struct Request {
    /// The binary to start (`None`: the one this process started from).
    pub binary: Option<PathBuf>,
    /// The management client's connection (a second descriptor of it): the new process
    /// writes the answer to it.
    pub client: Option<UnixStream>,
    reply: mpsc::SyncSender<Result<String, String>>,
}

impl Request {
    /// Answers the management client from this process (the upgrade did not happen).
    pub fn answer(self, r: Result<String, String>) {
        let _ = self.reply.send(r);
    }
}

static PENDING: Mutex<Option<Request>> = Mutex::new(None);

thread_local! {
    /// The connection of the request this management thread is handling.
    static CLIENT: RefCell<Option<UnixStream>> = const { RefCell::new(None) };
}

/// The management thread is about to handle a request from `client`.
pub(crate) fn serving(client: Option<UnixStream>) {
    CLIENT.with(|c| *c.borrow_mut() = client);
}

/// The management handler's side: queues the upgrade for the main thread (SIGUSR2) and
/// waits for its outcome.
pub fn request(binary: Option<PathBuf>) -> Result<String, String> {
    let (tx, rx) = mpsc::sync_channel(1);
    let client = CLIENT.with(|c| c.borrow_mut().take());
    {
        let mut p = PENDING.lock().unwrap_or_else(|p| p.into_inner());
        if p.is_some() {
            return Err("an upgrade is already under way".into());
        }
        *p = Some(Request {
            binary,
            client,
            reply: tx,
        });
    }
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
