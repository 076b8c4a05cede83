//! Live upgrade (`numatgtadm --upgrade`, SIGUSR2): the running numatgtd hands its work over
//! to a new executable without refusing a connection, in the same process (so the PID,
//! systemd's main process, stays):
//!
//! 1. **Check.** The new binary is started beside the daemon (`NUMATGT_HANDOVER_FD`,
//!    mode `check`) and sent the running configuration ([`wire`]); it reads the format and
//!    the configuration, answers `prepared` or `refused` and exits. Nothing was disturbed:
//!    a refusal, a crash or a timeout leaves the daemon serving, and the admin is told why.
//! 2. **Quiesce.** The daemon stops accepting (connections and tgtadm clients wait in the
//!    listeners' backlog). When the new binary said it takes moved connections, each
//!    normal session's TCP connection is held (its command window stops opening) and,
//!    once quiet, taken out with its iSCSI state and a descriptor of its socket; the other
//!    sessions' initiators are asked to log out (Asynchronous Message "target requests
//!    logout"; the Logout Response says Time2Wait 0). It waits for both (bounded), then
//!    stops as on SIGTERM: remaining connections closed, dirty cache blocks written back,
//!    every LUN synced and closed, RBD locks given back; it lets the management lock go.
//! 3. **Takeover.** The listening sockets (TCP portals, management socket, metrics), the
//!    asking client's connection, a descriptor of the old executable, the moved
//!    connections' sockets and (when the new binary takes them and the cache has them) the
//!    cache's memory files are queued with the configuration, the connections' state, the
//!    cached blocks' list and their places in that memory
//!    on a socket pair, and the process execs the new binary (mode `takeover`): it starts
//!    on the passed-on sockets (the initiators' logins waiting in the backlog reach it),
//!    goes on with the moved connections, and answers the client. If it cannot start, it
//!    tells the client why and execs the old executable again from that descriptor (mode
//!    `resume`), on the same sockets, connections and configuration.

pub mod wire;

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use crate::mgmt::Ctx;
use crate::mgmt::socket::MgmtHandle;
use crate::runtime::{Daemon, Inherited};
use wire::{FORMAT, Mode, Offer, Role};

/// The environment variable that names the new process's end of the socket pair.
pub const ENV_FD: &str = "NUMATGT_HANDOVER_FD";
/// Parameter3 of the logout request: initiators log out within this many seconds.
const LOGOUT_WITHIN: u16 = 5;
/// How long the daemon waits for its sessions to log out.
const QUIESCE_WAIT: Duration = Duration::from_secs(10);
/// How long the new binary's check may take.
const CHECK_WAIT: Duration = Duration::from_secs(60);

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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A handover that did not happen.
pub enum Failure {
    /// Before anything was disturbed: the daemon, still serving, and why.
    Refused(Box<Daemon>, String),
    /// The daemon stopped, but the new executable could not be started: why. The caller
    /// starts the old one again ([`Resume::exec`]).
    Lost(String, Box<Resume>),
}

/// What a takeover or a resume is started with: the offer and its descriptors.
pub struct Resume {
    offer: Offer,
    fds: Vec<OwnedFd>,
}

impl Resume {
    /// Replaces this process with `exe` (a path, or with `fd` the executable's descriptor)
    /// in this offer's mode, the offer queued on a socket pair it inherits; returns only
    /// when that failed.
    fn exec(&self, exe: Exec<'_>) -> String {
        let (ours, theirs) = match UnixStream::pair() {
            Ok(p) => p,
            Err(e) => return format!("cannot make a socket pair: {e}"),
        };
        // nobody reads the socket before the exec, and its buffer holds a few hundred KiB:
        // the offer (the configuration may be large) travels in a memory file
        let text = match offer_file(&self.offer.encode()) {
            Ok(f) => f,
            Err(e) => return format!("cannot write the offer to a memory file: {e}"),
        };
        let mut raw: Vec<RawFd> = vec![text.as_raw_fd()];
        raw.extend(self.fds.iter().map(|f| f.as_raw_fd()));
        // one message when they fit (all a numatgtd of format 1 reads), else the count first
        let first = if raw.len() <= wire::MAX_FDS {
            OFFER_IN_FILE.to_string()
        } else {
            format!("{} {}\n", OFFER_IN_FILE.trim_end(), raw.len())
        };
        if let Err(e) = wire::send_with_fds(&ours, &first, &raw) {
            return format!("cannot queue the sockets for the new executable: {e}");
        }
        drop(ours);
        let inheritable = match inheritable(&theirs) {
            Ok(fd) => fd,
            Err(e) => return e,
        };
        let (_, args) = started_as();
        let argv: Vec<CString> = args
            .iter()
            .filter_map(|a| CString::new(a.as_encoded_bytes()).ok())
            .collect();
        let mut envp: Vec<CString> = std::env::vars_os()
            .filter(|(k, _)| k != ENV_FD)
            .filter_map(|(k, v)| {
                let mut kv = k.into_encoded_bytes();
                kv.push(b'=');
                kv.extend_from_slice(v.as_encoded_bytes());
                CString::new(kv).ok()
            })
            .collect();
        if let Ok(c) = CString::new(format!("{ENV_FD}={inheritable}")) {
            envp.push(c);
        }
        let e = match exe {
            Exec::Path(p) => match CString::new(p.as_os_str().as_encoded_bytes()) {
                Ok(path) => nix::unistd::execve(&path, &argv, &envp).err(),
                Err(_) => Some(nix::errno::Errno::EINVAL),
            },
            Exec::Fd(fd) => nix::unistd::fexecve(fd, &argv, &envp).err(),
        };
        close_raw(inheritable);
        format!(
            "cannot execute it: {}",
            e.map_or_else(String::new, |e| e.to_string())
        )
    }

    /// Starts the old executable again (the one this process started from), on the same
    /// sockets and configuration; `answer` goes to the management client that asked.
    pub fn exec_self(mut self, answer: &str) -> String {
        self.offer.mode = Mode::Resume;
        self.offer.note = answer.to_string();
        self.exec(Exec::Path(Path::new("/proc/self/exe")))
    }
}

/// The message that says: the offer is in the first descriptor (a memory file).
const OFFER_IN_FILE: &str = "numatgt-handover-offer-in-file\n";

/// A memory file (memfd) holding `text`, read from its start.
fn offer_file(text: &str) -> std::io::Result<OwnedFd> {
    use std::io::Write;
    let fd = nix::sys::memfd::memfd_create(
        c"numatgt-handover",
        nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC,
    )?;
    let mut f = std::fs::File::from(fd);
    f.write_all(text.as_bytes())?;
    Ok(OwnedFd::from(f))
}

/// The text of a memory file written by [`offer_file`].
fn read_offer_file(fd: OwnedFd) -> std::io::Result<String> {
    use std::io::{Read, Seek};
    let mut f = std::fs::File::from(fd);
    f.seek(std::io::SeekFrom::Start(0))?;
    let mut t = String::new();
    f.read_to_string(&mut t)?;
    Ok(t)
}

enum Exec<'a> {
    Path(&'a Path),
    Fd(RawFd),
}

/// A descriptor of `s` without FD_CLOEXEC (F_DUPFD), for a child or the next image to
/// inherit. Closed again by [`close_raw`] where the process goes on.
fn inheritable(s: &UnixStream) -> Result<RawFd, String> {
    nix::fcntl::fcntl(s.as_raw_fd(), nix::fcntl::FcntlArg::F_DUPFD(3))
        .map_err(|e| format!("cannot pass the handover socket on: {e}"))
}

fn close_raw(fd: RawFd) {
    // SAFETY: `fd` came from F_DUPFD in `inheritable` and nothing else owns it; it is
    // closed exactly once, here.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
}

/// What the new executable said it can take (its `prepared` answer's words).
struct Takes {
    /// Moved TCP connections ([`wire::CAN_MOVE_CONNECTIONS`]).
    connections: bool,
    /// The cache's memory files ([`wire::CAN_KEEP_CACHE_MEMORY`]).
    cache_memory: bool,
    /// Portals added at run time as such ([`wire::CAN_TAKE_ADDED_PORTALS`]).
    added_portals: bool,
    /// The ownership of the RBD LUNs this gateway owns ([`wire::CAN_KEEP_ALUA_OWNERSHIP`]).
    alua_ownership: bool,
}

/// Runs `binary` in check mode with `offer`: what it takes once it answered `prepared`,
/// the reason otherwise. The child is always reaped.
fn check(binary: &Path, args: &[OsString], offer: &Offer) -> Result<Takes, String> {
    let (ours, theirs) =
        UnixStream::pair().map_err(|e| format!("cannot make a socket pair: {e}"))?;
    let passed = inheritable(&theirs)?;
    let mut cmd = std::process::Command::new(binary);
    if let Some(arg0) = args.first() {
        use std::os::unix::process::CommandExt;
        cmd.arg0(arg0);
    }
    cmd.args(args.iter().skip(1))
        .env(ENV_FD, passed.to_string())
        .stdin(std::process::Stdio::null());
    let spawned = cmd.spawn();
    close_raw(passed);
    drop(theirs);
    let mut child = spawned.map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let pid = child.id();
    let _ = ours.set_read_timeout(Some(CHECK_WAIT));
    let answer = wire::send(&ours, &offer.encode(), &[]).and_then(|()| wire::recv(&ours));
    let status = match child.try_wait() {
        Ok(Some(s)) => Some(s),
        _ => {
            // the check ends by itself right after its answer; give it a moment
            let t0 = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(s)) => break Some(s),
                    Ok(None) if t0.elapsed() < Duration::from_secs(5) => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    _ => {
                        let _ = child.kill();
                        break child.wait().ok();
                    }
                }
            }
        }
    };
    let exit = status.map_or_else(String::new, |s| format!(" (pid {pid}: {s})"));
    match answer.as_ref().map(|(t, _)| t.trim_end()) {
        Ok(t) if t.starts_with("prepared") => {
            let says = |word| t.split_whitespace().any(|w| w == word);
            Ok(Takes {
                connections: says(wire::CAN_MOVE_CONNECTIONS),
                cache_memory: says(wire::CAN_KEEP_CACHE_MEMORY),
                added_portals: says(wire::CAN_TAKE_ADDED_PORTALS),
                alua_ownership: says(wire::CAN_KEEP_ALUA_OWNERSHIP),
            })
        }
        Ok(t) => Err(format!(
            "{} refused: {}{exit}",
            binary.display(),
            t.strip_prefix("refused ").unwrap_or(t)
        )),
        Err(e) => Err(format!("no answer from {}: {e}{exit}", binary.display())),
    }
}

/// Hands the daemon over to `binary` (`None`: the executable this process started
/// from). Returns only when it did not happen (see [`Failure`]); on success this process
/// runs the new executable. `client`: the management client that asked, answered by the
/// new executable.
pub fn upgrade(
    daemon: Daemon,
    mgmt: &MgmtHandle,
    ctx: &Ctx,
    binary: Option<&Path>,
    client: Option<UnixStream>,
) -> Failure {
    let (default_exe, args) = started_as();
    let binary = binary.map_or(default_exe, Path::to_path_buf);
    let mut offer = Offer {
        format: FORMAT,
        from_version: env!("CARGO_PKG_VERSION").to_string(),
        from_pid: std::process::id(),
        mode: Mode::Check,
        roles: Vec::new(),
        paused_at_ms: 0,
        note: String::new(),
        upgrades: crate::upgrade_stats::last().map_or(0, |u| u.count),
        moved: 0,
        conns: Vec::new(),
        lus: Vec::new(),
        alua_owned: Vec::new(),
        hot: None,
        cache_layout: None,
        asked: 0,
        closed: 0,
        quiesce_ms: 0,
        writeback_ms: 0,
        config: crate::mgmt::dump::yaml(&ctx.registry, &ctx.base),
    };
    // the old executable, for the way back (even when its file was replaced since)
    let fallback = match std::fs::File::open("/proc/self/exe") {
        Ok(f) => OwnedFd::from(f),
        Err(e) => {
            let why = format!("cannot open this executable (/proc/self/exe): {e}");
            return Failure::Refused(Box::new(daemon), why);
        }
    };

    // 1. check: the new binary reads the format and the configuration
    tracing::info!(binary = %binary.display(), "upgrade: checking the new numatgtd");
    let takes = match check(&binary, &args, &offer) {
        Ok(t) => t,
        Err(why) => return Failure::Refused(Box::new(daemon), why),
    };
    let moves = takes.connections;
    if !moves {
        tracing::info!("upgrade: the new numatgtd takes no connections: sessions log in again");
    }

    // 2. quiesce and stop: from here on the daemon is gone (its cache report first: the scan
    // of the arenas' pages would lengthen the pause)
    daemon.report();
    let paused = now_ms();
    let (tcp, metrics) = daemon.listeners();
    mgmt.stop_accepting();
    // the portals added at run time stop accepting too: their connections wait as well
    let added = ctx
        .portals
        .as_ref()
        .map(|p| p.stop_accepting())
        .unwrap_or_default();
    let q = daemon.quiesce(LOGOUT_WITHIN, moves, QUIESCE_WAIT);
    let moved = q.moved.len();
    let asked = q.connections.saturating_sub(moved);
    tracing::info!(
        connections = q.connections,
        moved,
        left = q.left,
        ms = q.took.as_millis() as u64,
        "upgrade: connections quiet and moved out, others asked to log out"
    );
    offer.config = crate::mgmt::dump::yaml(&ctx.registry, &ctx.base);
    if moves {
        // what the moved sessions left in their logical units goes with them
        let moving: Vec<scsi::NexusId> = q.moved.iter().filter_map(|m| m.nexus).collect();
        for t in ctx.registry.targets() {
            for (lun, l) in &t.lun_set().map {
                let state = l.scsi.handover_state(&moving);
                offer.lus.push((t.iqn.clone(), *lun, state));
            }
        }
    }
    // the RBD LUNs this gateway owns: the new executable takes their locks back at start
    // (the stop gives them back)
    if takes.alua_ownership {
        offer.alua_owned = crate::alua::owned_records(&ctx.registry);
    }
    let t_stop = Instant::now();
    // the cache's blocks, once written back, are listed for the new process to load again
    let kept = daemon.stop_keeping(moves, takes.cache_memory);
    let hot_blocks = kept.as_ref().map_or(0, |k| k.hot.blocks());
    let in_memory = kept.as_ref().filter(|k| k.memory.is_some()).map_or(0, |k| {
        k.hot.luns.iter().flat_map(|l| &l.at).flatten().count()
    });
    offer.hot = kept.as_ref().map(|k| k.hot.to_text());
    let memory = kept.and_then(|k| k.memory);
    offer.cache_layout = memory.as_ref().map(|m| m.layout.to_text());
    mgmt.release();
    offer.note = format!(
        "{moved} connections moved, {asked} asked to log out ({} left and closed) in {} ms, \
         write-back and sync {} ms, {hot_blocks} cached blocks kept ({in_memory} in the memory \
         passed on), from numatgtd {} ({})",
        q.left,
        q.took.as_millis(),
        t_stop.elapsed().as_millis(),
        env!("CARGO_PKG_VERSION"),
        started_as().0.display()
    );
    offer.paused_at_ms = paused;
    offer.moved = moved as u64;
    offer.asked = asked as u64;
    offer.closed = q.left as u64;
    offer.quiesce_ms = q.took.as_millis() as u64;
    offer.writeback_ms = t_stop.elapsed().as_millis() as u64;

    // 3. takeover: this process becomes the new executable
    let mut fds: Vec<OwnedFd> = Vec::new();
    for l in tcp {
        offer.roles.push(Role::Tcp);
        fds.push(l.into());
    }
    for l in added {
        offer.roles.push(if takes.added_portals {
            Role::AddedTcp
        } else {
            Role::Tcp
        });
        fds.push(l.into());
    }
    if let Some(l) = mgmt.listener() {
        offer.roles.push(Role::Mgmt);
        fds.push(l.into());
    }
    if let Some(l) = metrics {
        offer.roles.push(Role::Metrics);
        fds.push(l.into());
    }
    if let Some(c) = client {
        offer.roles.push(Role::Reply);
        fds.push(c.into());
    }
    offer.roles.push(Role::Fallback);
    fds.push(fallback);
    for m in q.moved {
        offer.roles.push(Role::Conn);
        offer.conns.push(m.state.to_text());
        fds.push(m.socket);
    }
    for f in memory.into_iter().flat_map(|m| m.files) {
        offer.roles.push(Role::CacheMemory);
        fds.push(f);
    }
    offer.mode = Mode::Takeover;
    tracing::info!(binary = %binary.display(), "upgrade: executing the new numatgtd");
    let takeover = Resume { offer, fds };
    let why = takeover.exec(Exec::Path(&binary));
    // still here: the exec failed
    Failure::Lost(format!("{}: {why}", binary.display()), Box::new(takeover))
}

/// The new process's side: what the old one sent.
pub struct Incoming {
    sock: UnixStream,
    /// The offer (mode, configuration).
    pub offer: Offer,
    /// The passed-on listening sockets, for `Daemon::start`.
    pub inherited: Inherited,
    /// The management socket's.
    pub mgmt: Option<UnixListener>,
    /// Second descriptors of the listening sockets and moved connections, for the way
    /// back.
    kept: Vec<(Role, OwnedFd)>,
    /// The state of the kept moved connections, in their order.
    kept_conns: Vec<String>,
    reply: Option<UnixStream>,
    fallback: Option<OwnedFd>,
}

/// When this process was started with a handover socket (`NUMATGT_HANDOVER_FD`): the
/// offer, or why it could not be read.
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
    let _ = sock.set_read_timeout(Some(CHECK_WAIT));
    let (mut text, mut fds) = wire::recv(&sock).map_err(|e| e.to_string())?;
    if let Some(n) = text
        .strip_prefix(OFFER_IN_FILE.trim_end())
        .and_then(|n| n.trim().parse::<usize>().ok())
        .filter(|n| *n <= 1 << 20)
    {
        wire::recv_more_fds(&sock, &mut fds, n).map_err(|e| e.to_string())?;
        text = OFFER_IN_FILE.to_string();
    }
    if text == OFFER_IN_FILE {
        if fds.is_empty() {
            return Err("the offer's memory file did not come".into());
        }
        text = read_offer_file(fds.remove(0)).map_err(|e| format!("the offer: {e}"))?;
    }
    let offer = match Offer::decode(&text) {
        Ok(o) => o,
        Err(e) => {
            let _ = wire::send(&sock, &format!("refused {e}\n"), &[]);
            return Err(e.to_string());
        }
    };
    if offer.roles.len() != fds.len() {
        return Err(format!(
            "the offer names {} descriptors, {} came",
            offer.roles.len(),
            fds.len()
        ));
    }
    let mut inc = Incoming {
        sock,
        offer,
        inherited: Inherited::default(),
        mgmt: None,
        kept: Vec::new(),
        kept_conns: Vec::new(),
        reply: None,
        fallback: None,
    };
    inc.inherited.lu_states = inc.offer.lus.clone();
    inc.inherited.alua_owned = inc.offer.alua_owned.clone();
    inc.inherited.hot = match inc
        .offer
        .hot
        .as_deref()
        .map(crate::backend::warm::HotList::from_text)
    {
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            tracing::warn!(
                "the previous numatgtd's cached blocks are unreadable, the cache starts cold: {e}"
            );
            None
        }
        None => None,
    };
    let layout = inc
        .offer
        .cache_layout
        .as_deref()
        .and_then(cache::MemoryLayout::from_text);
    let mut memory_files = Vec::new();
    let mut conns = inc.offer.conns.clone().into_iter();
    for (role, fd) in inc.offer.roles.clone().into_iter().zip(fds) {
        // the cache memory is not kept for the way back: a takeover that failed may have
        // used its free slots (the previous executable reads its blocks back instead)
        if matches!(
            role,
            Role::Tcp | Role::AddedTcp | Role::Mgmt | Role::Metrics
        ) && let Ok(k) = fd.try_clone()
        {
            inc.kept.push((role, k));
        }
        match role {
            Role::Conn => {
                let text = conns.next().unwrap_or_default();
                let state = match iscsi_proto::MovedConn::from_text(&text) {
                    Ok(s) => s,
                    Err(e) => {
                        // the socket closes: that initiator logs in again
                        tracing::warn!("a moved connection's state is unreadable: {e}");
                        continue;
                    }
                };
                if let Ok(k) = fd.try_clone() {
                    inc.kept.push((role, k));
                    inc.kept_conns.push(text);
                }
                inc.inherited.moved.push((state, fd));
            }
            Role::Tcp => inc.inherited.tcp.push(fd.into()),
            Role::AddedTcp => inc.inherited.added_tcp.push(fd.into()),
            Role::Metrics => inc.inherited.metrics = Some(fd.into()),
            Role::Mgmt => inc.mgmt = Some(UnixListener::from(fd)),
            Role::Reply => inc.reply = Some(UnixStream::from(fd)),
            Role::Fallback => inc.fallback = Some(fd),
            Role::CacheMemory => memory_files.push(fd),
        }
    }
    match layout {
        Some(layout) if !memory_files.is_empty() => {
            inc.inherited.cache_memory = Some(crate::runtime::KeptMemory {
                layout,
                files: memory_files,
            });
        }
        None if !memory_files.is_empty() => {
            tracing::warn!("the previous numatgtd's cache memory has no readable layout: let go");
        }
        _ => {}
    }
    Ok(inc)
}

impl Incoming {
    /// Check mode: tells the old daemon whether this executable can take over (`Err`:
    /// why not).
    pub fn answer_check(&self, r: &Result<(), String>) {
        let t = match r {
            Ok(()) => format!(
                "prepared {} {} {} {} {}\n",
                std::process::id(),
                wire::CAN_MOVE_CONNECTIONS,
                wire::CAN_KEEP_CACHE_MEMORY,
                wire::CAN_TAKE_ADDED_PORTALS,
                wire::CAN_KEEP_ALUA_OWNERSHIP
            ),
            Err(e) => format!("refused {}\n", one_line(e)),
        };
        let _ = wire::send(&self.sock, &t, &[]);
    }

    /// Serving: answers the management client that asked for the upgrade (takeover), or
    /// gives it the old daemon's word (resume after a failed takeover).
    pub fn served(&mut self) {
        let text = match self.offer.mode {
            Mode::Takeover => {
                let exe = std::env::current_exe()
                    .map_or_else(|_| "?".to_string(), |p| p.display().to_string());
                let paused = now_ms().saturating_sub(self.offer.paused_at_ms);
                crate::upgrade_stats::record(crate::upgrade_stats::LastUpgrade {
                    count: self.offer.upgrades + 1,
                    paused_s: paused as f64 / 1e3,
                    quiesce_s: self.offer.quiesce_ms as f64 / 1e3,
                    writeback_s: self.offer.writeback_ms as f64 / 1e3,
                    moved: self.offer.moved,
                    asked: self.offer.asked,
                    closed: self.offer.closed,
                });
                let line = format!(
                    "upgraded: numatgtd pid {} ({exe}, {}) serving; not serving for {paused} \
                     ms: {}",
                    std::process::id(),
                    env!("CARGO_PKG_VERSION"),
                    self.offer.note
                );
                tracing::info!("{line}");
                format!("{line}\n")
            }
            _ => format!("{}\n", self.offer.note),
        };
        if let Some(mut c) = self.reply.take() {
            use std::io::Write;
            let _ = c.set_write_timeout(Some(Duration::from_secs(3)));
            let _ = c.write_all(&tgtadm_wire::encode_response(
                tgtadm_wire::ErrCode::Success,
                &text,
            ));
        }
    }

    /// A takeover that cannot start: the management client is told `why`, and the old
    /// executable starts again in this process on the same sockets and configuration.
    /// Returns only when that failed too.
    pub fn fall_back(mut self, why: &str) -> String {
        if self.offer.mode != Mode::Takeover {
            return why.to_string();
        }
        let answer = format!(
            "upgrade failed: {}; the previous numatgtd starts again (same pid)",
            one_line(why)
        );
        tracing::error!("{answer}");
        if let Some(mut c) = self.reply.take() {
            use std::io::Write;
            let _ = c.set_write_timeout(Some(Duration::from_secs(3)));
            let _ = c.write_all(&tgtadm_wire::encode_response(
                tgtadm_wire::ErrCode::Success,
                &format!("{answer}\n"),
            ));
        }
        let Some(exe) = self.fallback.take() else {
            return format!("{why}; and no previous executable to start again");
        };
        let mut offer = self.offer.clone();
        offer.mode = Mode::Resume;
        offer.roles = self.kept.iter().map(|(r, _)| *r).collect();
        offer.conns = std::mem::take(&mut self.kept_conns);
        offer.moved = offer.conns.len() as u64;
        offer.note.clear();
        offer.cache_layout = None;
        offer.hot = offer.hot.map(|h| {
            h.lines()
                .filter(|l| !l.starts_with("at "))
                .map(|l| format!("{l}\n"))
                .collect()
        });
        let back = Resume {
            offer,
            fds: std::mem::take(&mut self.kept)
                .into_iter()
                .map(|(_, f)| f)
                .collect(),
        };
        let e = back.exec(Exec::Fd(exe.as_raw_fd()));
        format!("{why}; the previous numatgtd could not start again: {e}")
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', "; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    #[test]
    fn a_large_offer_travels_in_a_memory_file_with_its_sockets() {
        // 4 MiB of configuration: far more than a socket buffer holds
        let config = "# filler\n".repeat(4 << 20 >> 4);
        let offer = Offer {
            format: FORMAT,
            from_version: "0.1.0".into(),
            from_pid: 7,
            mode: Mode::Takeover,
            roles: vec![Role::Tcp],
            paused_at_ms: 1,
            note: "n".into(),
            upgrades: 0,
            moved: 0,
            conns: Vec::new(),
            lus: Vec::new(),
            alua_owned: Vec::new(),
            hot: None,
            cache_layout: None,
            asked: 0,
            closed: 0,
            quiesce_ms: 0,
            writeback_ms: 0,
            config: config.clone(),
        };
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let (ours, theirs) = UnixStream::pair().expect("pair");
        let text = offer_file(&offer.encode()).expect("memfd");
        wire::send(&ours, OFFER_IN_FILE, &[text.as_raw_fd(), l.as_raw_fd()]).expect("send");
        drop((ours, text, l));
        let got = receive(&theirs.into_raw_fd().to_string()).expect("receive");
        assert_eq!(got.offer, offer);
        assert_eq!(got.inherited.tcp.len(), 1);
        assert_eq!(got.inherited.tcp[0].local_addr().expect("addr"), addr);
    }

    #[test]
    fn a_handover_variable_that_names_no_socket_is_refused() {
        assert!(receive("x").is_err());
        let f = std::fs::File::open("/proc/self/exe").expect("open");
        let e = receive(&f.as_raw_fd().to_string()).err().expect("a file");
        assert!(e.contains("not a socket"), "{e}");
    }
}
