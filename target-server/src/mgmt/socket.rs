//! The management socket thread: lock file (`<socket>.lock`, `lockf(F_TLOCK)`), unlink +
//! bind + listen, then one request per connection: SO_PEERCRED check (root or the daemon's
//! uid), bounded reads with a timeout, decode, handle, answer. Each client is read on a
//! thread of its own, at most `limits.max_mgmt_clients` at once (one more is answered
//! "busy" and closed), so a slow client does not hold the others up; the requests
//! themselves are handled one at a time.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Ctx, handlers};
use tgtadm_wire::{ErrCode, MAX_REQUEST_LEN, REQ_HEADER_LEN, ReqHeader};

/// How long a client may take to send its request or read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(3);

/// Why the management socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another daemon holds the lock file (named here) of this control port.
    #[error("another tgtd is using {0}")]
    Locked(PathBuf),
    /// The lock file could not be opened.
    #[error("cannot open the lock file {path}: {source}")]
    LockFile {
        /// The lock file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The socket could not be bound.
    #[error("cannot listen on the management socket {path}: {source}")]
    Bind {
        /// The socket's path.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The serving thread could not be started.
    #[error("cannot start the management thread: {0}")]
    Thread(std::io::Error),
}

/// The bound socket and its lock; the lock is held as long as this lives (or until a
/// handover lets it go: [`MgmtHandle::release`]).
pub struct MgmtSocket {
    path: PathBuf,
    listener: UnixListener,
    lock: std::fs::File,
}

/// What the daemon keeps of the socket once its thread serves it: a handover stops the
/// serving, passes the listening socket on and lets the lock go.
pub struct MgmtHandle {
    path: PathBuf,
    listener: Option<UnixListener>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    lock: Arc<Mutex<Option<std::fs::File>>>,
}

impl MgmtHandle {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new descriptor of the listening socket.
    pub fn listener(&self) -> Option<UnixListener> {
        self.listener.as_ref().and_then(|l| l.try_clone().ok())
    }

    /// No more clients are accepted from now on (those that connect wait in the backlog);
    /// the ones being served are answered.
    pub fn stop_accepting(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Accepting again (a handover that failed before the lock was let go).
    pub fn resume_accepting(&self) {
        self.stop.store(false, Ordering::SeqCst);
    }

    /// Lets the lock go, so that the daemon taking over can take it.
    pub fn release(&self) {
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl MgmtSocket {
    /// Take the lock and bind `path`.
    pub fn bind(path: &Path) -> Result<MgmtSocket, SocketError> {
        let lock = take_lock(path)?;
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|source| SocketError::Bind {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(MgmtSocket {
            path: path.to_path_buf(),
            listener,
            lock,
        })
    }

    /// Take the lock and serve `listener`, the socket bound at `path` that the daemon
    /// handing over passed on (the file stays: clients never find it missing).
    pub fn adopt(path: &Path, listener: UnixListener) -> Result<MgmtSocket, SocketError> {
        let lock = take_lock(path)?;
        Ok(MgmtSocket {
            path: path.to_path_buf(),
            listener,
            lock,
        })
    }
}

/// Opens `<path>.lock` and takes its lock (tgtd's `lockf(F_TLOCK)`, so a tgtd and a
/// numatgtd never serve one control port together).
fn take_lock(path: &Path) -> Result<std::fs::File, SocketError> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            let _ = std::fs::create_dir_all(dir);
        }
    }
    let lock_path = PathBuf::from(format!("{}.lock", path.display()));
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|source| SocketError::LockFile {
            path: lock_path.clone(),
            source,
        })?;
    // SAFETY: lockf on a file descriptor we own and keep open; no memory is passed.
    let r = unsafe { libc::lockf(lock.as_raw_fd(), libc::F_TLOCK, 1) };
    if r != 0 {
        return Err(SocketError::Locked(lock_path));
    }
    Ok(lock)
}

impl MgmtSocket {
    /// Serve requests on a thread of its own for the life of the process (or until a
    /// handover stops it: the returned handle).
    pub fn spawn(self, ctx: Ctx) -> Result<MgmtHandle, SocketError> {
        let MgmtSocket {
            path,
            listener,
            lock,
        } = self;
        let handle = MgmtHandle {
            path: path.clone(),
            listener: listener.try_clone().ok(),
            stop: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            lock: Arc::new(Mutex::new(Some(lock))),
        };
        let stop = Arc::clone(&handle.stop);
        std::thread::Builder::new()
            .name("mgmt".into())
            .spawn(move || {
                tracing::info!(socket = %path.display(), "management socket ready");
                let clients = Arc::new(Clients::default());
                loop {
                    // accept only when a client waits and no handover stopped us: the
                    // listening socket may be shared with the daemon taking over
                    if stop.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                    if !readable(&listener, 200) {
                        continue;
                    }
                    if stop.load(Ordering::SeqCst) {
                        continue;
                    }
                    match listener.accept() {
                        Ok((s, _)) => {
                            // the listening socket is non-blocking (shared flags): the
                            // client is served with blocking reads and timeouts
                            let _ = s.set_nonblocking(false);
                            admit(s, &ctx, &clients)
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            tracing::warn!("management socket accept failed: {e}");
                            std::thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            })
            .map_err(SocketError::Thread)?;
        Ok(handle)
    }
}

/// Whether a client waits on `listener` (poll(2), at most `ms` milliseconds); a stopped
/// handover sleeps the same time instead.
fn readable(listener: &UnixListener, ms: u16) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let _ = listener.set_nonblocking(true);
    let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(n) => n > 0,
        Err(_) => {
            std::thread::sleep(Duration::from_millis(u64::from(ms)));
            false
        }
    }
}

/// The clients being served, and the lock that has their requests handled one at a time.
#[derive(Default)]
struct Clients {
    open: AtomicUsize,
    handling: Mutex<()>,
}

/// One client less when its thread ends (or panics).
struct ClientSlot(Arc<Clients>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves a new client on a thread of its own, or refuses it when
/// `limits.max_mgmt_clients` are being served: it is answered tgtd's "driver busy" code
/// (tgtadm prints "this driver is busy") without its request being read, and closed.
fn admit(mut s: UnixStream, ctx: &Ctx, clients: &Arc<Clients>) {
    let limits = &ctx.registry.limits;
    let max = limits.max_mgmt_clients();
    let open = clients.open.fetch_add(1, Ordering::AcqRel);
    let slot = ClientSlot(Arc::clone(clients));
    if open >= max {
        drop(slot);
        limits.refuse(
            crate::limits::Limit::MgmtClients,
            None,
            format_args!(
                "management client refused: {open} clients being served (limits.max_mgmt_clients {max})"
            ),
        );
        // take the request in first (briefly): answering and closing before the client
        // wrote it would kill tgtadm with SIGPIPE instead of letting it print the answer
        let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
        let mut buf = [0u8; 4096];
        let _ = std::io::Read::read(&mut s, &mut buf);
        let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
        let _ = s.write_all(&tgtadm_wire::encode_response(ErrCode::DriverActive, ""));
        return;
    }
    let ctx = ctx.clone();
    let spawned = std::thread::Builder::new()
        .name("mgmt-client".into())
        .spawn(move || {
            serve(s, &ctx, &slot.0.handling);
            drop(slot);
        });
    if let Err(e) = spawned {
        // the closure (client and slot) was dropped with the error
        tracing::warn!("management client dropped: cannot start its thread: {e}");
    }
}

/// The peer may manage us: root, or our own uid (SO_PEERCRED). Under the unit our uid is the
/// service user numatgt, so root's tgtadm and numatgt itself get in, nobody else.
fn peer_allowed(s: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    match getsockopt(s, PeerCredentials) {
        Ok(c) => c.uid() == 0 || c.uid() == nix::unistd::getuid().as_raw(),
        Err(_) => false,
    }
}

fn serve(mut s: UnixStream, ctx: &Ctx, handling: &Mutex<()>) {
    if !peer_allowed(&s) {
        tracing::warn!("management request refused: peer is neither root nor our uid");
        return;
    }
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    let mut head = [0u8; REQ_HEADER_LEN];
    if let Err(e) = s.read_exact(&mut head) {
        tracing::debug!("management request dropped: {e}");
        return;
    }
    let mut shutdown = false;
    let reply = match ReqHeader::decode(&head) {
        Err(e) => {
            tracing::warn!("malformed management request: {e:?}");
            Err(ErrCode::InvalidRequest)
        }
        Ok(h) => {
            let rest = (h.len as usize).saturating_sub(REQ_HEADER_LEN);
            let mut body = vec![0u8; rest.min(MAX_REQUEST_LEN)];
            if let Err(e) = s.read_exact(&mut body) {
                tracing::debug!("management request payload incomplete: {e}");
                return;
            }
            match tgtadm_wire::Payload::parse(&body) {
                Ok(p) => {
                    shutdown = h.mode == tgtadm_wire::Mode::System.as_u32()
                        && h.op == tgtadm_wire::Op::Delete.as_u32();
                    // one request at a time, as tgtd; a bug in a handler must not take the
                    // management thread down
                    let _one = handling.lock().unwrap_or_else(|p| p.into_inner());
                    // an upgrade hands the client's connection to the new process, which
                    // answers it
                    let upgrade =
                        h.mode == tgtadm_wire::Mode::System.as_u32() && p.get("upgrade").is_some();
                    super::upgrade_request::serving(if upgrade {
                        s.try_clone().ok()
                    } else {
                        None
                    });
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        handlers::handle(ctx, &h, &p)
                    }))
                    .unwrap_or_else(|_| {
                        tracing::error!("management request handler panicked");
                        Err(ErrCode::UnknownErr)
                    })
                }
                Err(e) => {
                    tracing::warn!("malformed management payload: {e:?}");
                    Err(ErrCode::InvalidRequest)
                }
            }
        }
    };
    let (code, text) = match reply {
        Ok(t) => (ErrCode::Success, t),
        Err(c) => (c, String::new()),
    };
    let shutdown = shutdown && code == ErrCode::Success;
    let _ = s.write_all(&tgtadm_wire::encode_response(code, &text));
    drop(s);
    if shutdown {
        handlers::system::shutdown_now();
    }
}
