//! Live upgrade (`numatgtadm --upgrade`, SIGUSR2): the running numatgtd starts a new
//! executable and hands its work over to it without refusing a connection.
//!
//! 1. **Offer.** The old process starts the new binary with the old command line and one
//!    end of a Unix socket pair (`NUMATGT_HANDOVER_FD`), and sends it the listening
//!    sockets (TCP portals, management socket, metrics) as SCM_RIGHTS with the running
//!    configuration ([`wire`]). The new process checks the format and the configuration
//!    and answers `prepared` or `refused`. Up to here nothing was disturbed: a refusal, a
//!    crash or a timeout of the new binary leaves the old one serving, and the admin
//!    gets the reason.
//! 2. **Quiesce.** The old process stops accepting (connections and tgtadm clients wait
//!    in the shared listeners' backlog), asks every session's initiator to log out
//!    (Asynchronous Message "target requests logout"), waits for them (bounded), then
//!    stops as on SIGTERM: remaining connections closed, dirty cache blocks written back,
//!    every LUN synced and closed, RBD locks given back. It lets the management lock go.
//! 3. **Go.** The new process gets the configuration as it is now and starts on the
//!    passed-on sockets: the initiators' new logins, waiting in the backlog, reach it.
//!    It answers `serving`; the old one tells systemd the new main PID and exits.
//!    If the new one fails now, the old process starts again from its own image
//!    (`/proc/self/exe`, even when the file was replaced) with the same sockets and
//!    configuration, and the admin gets the reason.

pub mod wire;

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::mgmt::Ctx;
use crate::mgmt::socket::MgmtHandle;
use crate::runtime::{Daemon, Inherited};
use wire::{FORMAT, Mode, Offer, Role, WireError};

/// The environment variable that names the new process's end of the socket pair.
pub const ENV_FD: &str = "NUMATGT_HANDOVER_FD";
/// Parameter3 of the logout request: initiators log out within this many seconds.
const LOGOUT_WITHIN: u16 = 5;
/// How long the old process waits for its sessions to log out.
const QUIESCE_WAIT: Duration = Duration::from_secs(10);
/// How long the new binary may take to answer the offer.
const PREPARE_WAIT: Duration = Duration::from_secs(60);
/// How long the new process may take to start serving once told to go (its cache is
/// allocated and every LUN opened in that time).
const START_WAIT: Duration = Duration::from_secs(300);

/// The executable and command line this process started with.
static STARTED_AS: OnceLock<(PathBuf, Vec<OsString>)> = OnceLock::new();

/// Records the executable's path and the command line (call first in `main`): the
/// default binary of an upgrade is the file at that path, whatever it holds by then.
pub fn record_start() {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    let _ = STARTED_AS.set((exe, std::env::args_os().collect()));
}

fn started_as() -> (PathBuf, Vec<OsString>) {
    STARTED_AS.get().cloned().unwrap_or_else(|| {
        (
            PathBuf::from("/proc/self/exe"),
            std::env::args_os().collect(),
        )
    })
}

/// A finished handover.
#[derive(Debug)]
pub struct Upgraded {
    /// The new main process.
    pub pid: u32,
    /// One line for the admin and the log.
    pub summary: String,
}

/// A handover that did not happen.
pub enum Failure {
    /// Before anything was disturbed: the daemon, still serving, and why.
    Refused(Box<Daemon>, String),
    /// After the old daemon stopped: why, and how to start it again.
    Lost(String, Box<Resume>),
}

/// The old daemon's way back: itself, started again from its own image on the same
/// sockets and configuration.
pub struct Resume {
    offer: Offer,
    fds: Vec<OwnedFd>,
}

impl Resume {
    /// Replaces this process with a fresh start of its own executable (same PID, so
    /// systemd's main process stays); returns only when that failed.
    pub fn exec(self) -> String {
        use std::os::unix::process::CommandExt;
        let (ours, theirs) = match UnixStream::pair() {
            Ok(p) => p,
            Err(e) => return format!("cannot make a socket pair: {e}"),
        };
        let raw: Vec<RawFd> = self.fds.iter().map(|f| f.as_raw_fd()).collect();
        if let Err(e) = wire::send(&ours, &self.offer.encode(), &raw) {
            return format!("cannot queue the sockets for the restart: {e}");
        }
        drop(ours);
        let inheritable = match inheritable(&theirs) {
            Ok(fd) => fd,
            Err(e) => return e,
        };
        let (_, args) = started_as();
        let mut cmd = std::process::Command::new("/proc/self/exe");
        if let Some(arg0) = args.first() {
            cmd.arg0(arg0);
        }
        cmd.args(args.iter().skip(1))
            .env(ENV_FD, inheritable.to_string());
        format!("cannot start again: {}", cmd.exec())
    }
}

/// A descriptor of `s` without FD_CLOEXEC (F_DUPFD), for a child to inherit. It is left
/// open in this process: a resume replaces the process, an upgrade closes it after the
/// spawn ([`close_raw`]).
fn inheritable(s: &UnixStream) -> Result<RawFd, String> {
    nix::fcntl::fcntl(s.as_raw_fd(), nix::fcntl::FcntlArg::F_DUPFD(3))
        .map_err(|e| format!("cannot pass the handover socket on: {e}"))
}

fn close_raw(fd: RawFd) {
    // SAFETY: `fd` came from F_DUPFD in `inheritable` and nothing else owns it; it is
    // closed exactly once, here.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
}

/// Hands the daemon over to `binary` (`None`: the executable this process started
/// from). On success the caller exits; see [`Failure`] otherwise.
pub fn upgrade(
    daemon: Daemon,
    mgmt: &MgmtHandle,
    ctx: &Ctx,
    binary: Option<&Path>,
) -> Result<Upgraded, Failure> {
    let t0 = Instant::now();
    let (default_exe, args) = started_as();
    let binary = binary.map_or(default_exe, Path::to_path_buf);
    // the sockets, each as a new descriptor (the daemon keeps serving on its own)
    let (tcp, metrics) = daemon.listeners();
    let mut roles = Vec::new();
    let mut fds: Vec<OwnedFd> = Vec::new();
    for l in tcp {
        roles.push(Role::Tcp);
        fds.push(l.into());
    }
    if let Some(l) = mgmt.listener() {
        roles.push(Role::Mgmt);
        fds.push(l.into());
    }
    if let Some(l) = metrics {
        roles.push(Role::Metrics);
        fds.push(l.into());
    }
    let mut offer = Offer {
        format: FORMAT,
        from_version: env!("CARGO_PKG_VERSION").to_string(),
        from_pid: std::process::id(),
        mode: Mode::Upgrade,
        roles,
        config: crate::mgmt::dump::yaml(&ctx.registry, &ctx.base),
    };
    let refused = |daemon: Daemon, why: String| Failure::Refused(Box::new(daemon), why);

    let (ours, theirs) = match UnixStream::pair() {
        Ok(p) => p,
        Err(e) => return Err(refused(daemon, format!("cannot make a socket pair: {e}"))),
    };
    let passed = match inheritable(&theirs) {
        Ok(fd) => fd,
        Err(e) => return Err(refused(daemon, e)),
    };
    let mut cmd = std::process::Command::new(&binary);
    if let Some(arg0) = args.first() {
        use std::os::unix::process::CommandExt;
        cmd.arg0(arg0);
    }
    cmd.args(args.iter().skip(1))
        .env(ENV_FD, passed.to_string());
    tracing::info!(binary = %binary.display(), "upgrade: starting the new numatgtd");
    let spawned = cmd.spawn();
    close_raw(passed);
    drop(theirs);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return Err(refused(
                daemon,
                format!("cannot start {}: {e}", binary.display()),
            ));
        }
    };
    let pid = child.id();
    // gives up on the child: stopped, reaped, its exit described
    let give_up = |child: &mut std::process::Child, why: String| -> String {
        let status = match child.try_wait() {
            Ok(Some(s)) => Some(s),
            _ => {
                let _ = child.kill();
                child.wait().ok()
            }
        };
        match status {
            Some(s) if s.code().is_some() || s.success() => {
                format!("{why} (the new numatgtd, pid {pid}, exited: {s})")
            }
            Some(s) => format!("{why} (the new numatgtd, pid {pid}, stopped: {s})"),
            None => why,
        }
    };

    // 1. offer: the new binary checks format and configuration
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let _ = ours.set_read_timeout(Some(PREPARE_WAIT));
    let answer = wire::send(&ours, &offer.encode(), &raw).and_then(|()| wire::recv(&ours));
    match answer.as_ref().map(|(t, _)| t.trim_end()) {
        Ok(t) if t.starts_with("prepared") => {}
        Ok(t) => {
            let why = t.strip_prefix("refused ").unwrap_or(t).to_string();
            let why = give_up(&mut child, format!("the new numatgtd refused: {why}"));
            return Err(refused(daemon, why));
        }
        Err(e) => {
            let why = give_up(&mut child, format!("no answer from the new numatgtd: {e}"));
            return Err(refused(daemon, why));
        }
    }
    tracing::info!(pid, "upgrade: the new numatgtd is prepared; handing over");

    // 2. quiesce and stop: from here on the old daemon is gone
    mgmt.stop_accepting();
    let q = daemon.quiesce(LOGOUT_WITHIN, QUIESCE_WAIT);
    tracing::info!(
        connections = q.connections,
        left = q.left,
        ms = q.took.as_millis() as u64,
        "upgrade: sessions asked to log out"
    );
    offer.config = crate::mgmt::dump::yaml(&ctx.registry, &ctx.base);
    let t_stop = Instant::now();
    daemon.stop();
    let stop_ms = t_stop.elapsed().as_millis();
    mgmt.release();

    // 3. go
    let _ = ours.set_read_timeout(Some(START_WAIT));
    let go = format!("go\n{}", offer.config);
    let answer = wire::send(&ours, &go, &[]).and_then(|()| wire::recv(&ours));
    let lost = |why: String| {
        offer.mode = Mode::Resume;
        Failure::Lost(why, Box::new(Resume { offer, fds }))
    };
    match answer.as_ref().map(|(t, _)| t.trim_end()) {
        Ok(t) if t.starts_with("serving") => {
            let summary = format!(
                "upgraded: numatgtd pid {pid} ({}) serving; handover {} ms: {} connections \
                 asked to log out ({} left and closed) in {} ms, write-back and sync {} ms",
                binary.display(),
                t0.elapsed().as_millis(),
                q.connections,
                q.left,
                q.took.as_millis(),
                stop_ms
            );
            Ok(Upgraded { pid, summary })
        }
        Ok(t) => {
            let why = t.strip_prefix("failed ").unwrap_or(t).to_string();
            Err(lost(give_up(
                &mut child,
                format!("the new numatgtd could not start: {why}"),
            )))
        }
        Err(e) => Err(lost(give_up(
            &mut child,
            format!("the new numatgtd did not report serving: {e}"),
        ))),
    }
}

/// The new process's side: what the old one sent.
pub struct Incoming {
    sock: UnixStream,
    /// The offer (mode, configuration).
    pub offer: Offer,
    /// The passed-on listening sockets.
    pub inherited: Inherited,
    /// The management socket's.
    pub mgmt: Option<UnixListener>,
}

/// When this process was started by a handover (`NUMATGT_HANDOVER_FD`): the offer, or
/// why it could not be read (the old process is told, as far as it can be).
pub fn incoming() -> Option<Result<Incoming, String>> {
    let v = std::env::var(ENV_FD).ok()?;
    Some(receive(&v))
}

fn receive(v: &str) -> Result<Incoming, String> {
    let fd: RawFd = v
        .parse()
        .map_err(|_| format!("{ENV_FD}={v}: not a descriptor number"))?;
    let st = nix::sys::stat::fstat(fd).map_err(|e| format!("{ENV_FD}={v}: {e}"))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(format!("{ENV_FD}={v}: not a socket"));
    }
    // SAFETY: the descriptor was inherited for this purpose (the variable names it and
    // fstat found a socket); this process takes it once and owns it from here.
    let sock = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let _ = nix::fcntl::fcntl(
        sock.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    let _ = sock.set_read_timeout(Some(PREPARE_WAIT));
    let (text, fds) = wire::recv(&sock).map_err(|e| e.to_string())?;
    let _ = sock.set_read_timeout(None);
    let offer = match Offer::decode(&text) {
        Ok(o) => o,
        Err(e) => {
            let _ = wire::send(&sock, &format!("refused {e}\n"), &[]);
            return Err(e.to_string());
        }
    };
    if offer.roles.len() != fds.len() {
        let why = format!(
            "the offer names {} sockets, {} came",
            offer.roles.len(),
            fds.len()
        );
        let _ = wire::send(&sock, &format!("refused {why}\n"), &[]);
        return Err(why);
    }
    let mut inherited = Inherited::default();
    let mut mgmt = None;
    for (role, fd) in offer.roles.iter().zip(fds) {
        match role {
            Role::Tcp => inherited.tcp.push(fd.into()),
            Role::Metrics => inherited.metrics = Some(fd.into()),
            Role::Mgmt => mgmt = Some(UnixListener::from(fd)),
        }
    }
    Ok(Incoming {
        sock,
        offer,
        inherited,
        mgmt,
    })
}

impl Incoming {
    /// Tells the old process that this one refuses (it goes on serving).
    pub fn refuse(&self, why: &str) {
        let _ = wire::send(&self.sock, &format!("refused {}\n", one_line(why)), &[]);
    }

    /// Tells the old process that this one is ready to take over, and waits for it to
    /// stop: returns the configuration as it was then.
    pub fn prepared_then_wait(&self) -> Result<String, String> {
        wire::send(
            &self.sock,
            &format!("prepared {}\n", std::process::id()),
            &[],
        )
        .map_err(|e| e.to_string())?;
        let (text, _) = wire::recv(&self.sock).map_err(|e| match e {
            WireError::Closed => "the old numatgtd went away before the handover".to_string(),
            e => e.to_string(),
        })?;
        match text.strip_prefix("go\n") {
            Some(config) => Ok(config.to_string()),
            None => Err(format!("unexpected handover message {:?}", one_line(&text))),
        }
    }

    /// Tells the old process that this one serves.
    pub fn serving(&self) {
        let _ = wire::send(
            &self.sock,
            &format!("serving {}\n", std::process::id()),
            &[],
        );
    }

    /// Tells the old process that this one could not start.
    pub fn failed(&self, why: &str) {
        let _ = wire::send(&self.sock, &format!("failed {}\n", one_line(why)), &[]);
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', "; ")
}
