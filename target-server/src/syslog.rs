//! Log lines to the local syslog socket, for a numatgtd that detached (started without
//! `-f`), as tgtd does (it opens syslog with its program name as the identifier and
//! facility daemon). numatgtd adds its PID to the identifier (glibc's `LOG_PID` form), so
//! that the lines of the process that started it and those of the daemon it became are
//! told apart. Each line is one datagram in the RFC 3164 form glibc's syslog(3) sends,
//!
//! ```text
//! <PRI>Mmm dd hh:mm:ss numatgtd[PID]: message
//! ```
//!
//! with facility daemon (3) and the severity of the tracing level (error → `LOG_ERR`,
//! warn → `LOG_WARNING`, info → `LOG_INFO`, debug and trace → `LOG_DEBUG`), so `<30>` is an
//! info line. journald serves `/dev/log` too and records the identifier, PID and priority.
//!
//! Not glibc's syslog(3): it always writes to `/dev/log`, and the tests need another
//! socket (`NUMATGT_SYSLOG_SOCKET`, a test and debugging knob). The client is std's
//! `UnixDatagram`, unconnected: each send looks the path up again, so a syslog daemon that
//! restarted (a new socket) is found again without reconnecting.
//!
//! A send waits while the receiver's queue is full, as glibc's does, but at most
//! [`SEND_WAIT`]: lines are logged from event threads too, and a syslog daemon that stopped
//! reading must not stop the target (tgtd hands its lines to a logger process through a
//! buffer that drops them when full, for the same reason). After such a timeout lines are
//! dropped at once until the receiver takes one again; then a warning says how many were
//! lost. A line that cannot be sent for another reason (no socket) is dropped and counted
//! the same way.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// The local syslog socket (journald's and rsyslog's).
pub const DEFAULT_SOCKET: &str = "/dev/log";

/// Environment variable naming another syslog socket (tests and debugging only).
pub const SOCKET_ENV: &str = "NUMATGT_SYSLOG_SOCKET";

/// The identifier numatgtd's lines carry (tgtd's is its program name, `tgtd`).
pub const IDENT: &str = "numatgtd";

/// The facility code of `LOG_DAEMON` (`LOG_DAEMON >> 3`).
pub const FACILITY_DAEMON: u8 = 3;

/// How long a line waits for room in the receiver's queue before it is dropped.
pub const SEND_WAIT: Duration = Duration::from_millis(500);

/// The socket to log to: `$NUMATGT_SYSLOG_SOCKET` when set and not empty, else `/dev/log`.
pub fn socket_path() -> PathBuf {
    std::env::var_os(SOCKET_ENV)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_SOCKET), PathBuf::from)
}

/// The syslog(3) severity of a tracing level.
pub fn severity(level: &Level) -> u8 {
    match *level {
        Level::ERROR => libc::LOG_ERR as u8,
        Level::WARN => libc::LOG_WARNING as u8,
        Level::INFO => libc::LOG_INFO as u8,
        _ => libc::LOG_DEBUG as u8,
    }
}

/// A client of the local syslog socket.
#[derive(Debug)]
pub struct Syslog {
    /// Waits at most [`SEND_WAIT`] for room in the receiver's queue.
    waiting: UnixDatagram,
    /// Never waits: used while the receiver is not taking lines.
    not_waiting: UnixDatagram,
    path: PathBuf,
    /// A send timed out and none has succeeded since.
    stalled: AtomicBool,
    /// Lines lost since the last one sent.
    dropped: AtomicU64,
}

impl Syslog {
    /// A client of the socket at `path`, which must be there and take datagrams now (a
    /// probe connects to it); otherwise the error says why.
    pub fn open(path: &Path) -> io::Result<Syslog> {
        Self::open_waiting(path, SEND_WAIT)
    }

    /// [`open`](Self::open) with another wait for a full queue.
    fn open_waiting(path: &Path, wait: Duration) -> io::Result<Syslog> {
        UnixDatagram::unbound()?.connect(path)?;
        let waiting = UnixDatagram::unbound()?;
        waiting.set_write_timeout(Some(wait))?;
        let not_waiting = UnixDatagram::unbound()?;
        not_waiting.set_nonblocking(true)?;
        Ok(Syslog {
            waiting,
            not_waiting,
            path: path.to_path_buf(),
            stalled: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        })
    }

    /// Sends `line` (one line, no newline) with `severity`, facility daemon, the time now
    /// and this process's PID (read at each line: a forked daemon logs with its own). A
    /// line that could not be sent is counted; the first one sent after it is followed by
    /// a warning with the count.
    pub fn send(&self, severity: u8, line: &str) -> io::Result<()> {
        let stalled = self.stalled.load(Ordering::Relaxed);
        match self.send_now(severity, line, stalled) {
            Ok(()) => {
                if stalled {
                    self.stalled.store(false, Ordering::Relaxed);
                }
                if self.dropped.load(Ordering::Relaxed) > 0 {
                    let n = self.dropped.swap(0, Ordering::Relaxed);
                    let _ = self.send_now(
                        libc::LOG_WARNING as u8,
                        &format!("{n} log lines lost: the syslog socket did not take them"),
                        false,
                    );
                }
                Ok(())
            }
            Err(e) => {
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) {
                    self.stalled.store(true, Ordering::Relaxed);
                }
                self.dropped.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// One datagram: waiting for room (at most [`SEND_WAIT`]) unless `stalled`.
    fn send_now(&self, severity: u8, line: &str, stalled: bool) -> io::Result<()> {
        let msg = format!(
            "{}{line}",
            header(
                FACILITY_DAEMON * 8 + severity,
                &timestamp(std::time::SystemTime::now()),
                std::process::id()
            )
        );
        let sock = if stalled {
            &self.not_waiting
        } else {
            &self.waiting
        };
        sock.send_to(msg.as_bytes(), &self.path).map(drop)
    }
}

/// `<PRI>TIMESTAMP numatgtd[PID]: `.
fn header(pri: u8, timestamp: &str, pid: u32) -> String {
    format!("<{pri}>{timestamp} {IDENT}[{pid}]: ")
}

/// RFC 3164's `Mmm dd hh:mm:ss` (day padded with a space) of `t` in local time, as glibc's
/// syslog(3) writes it (`%h %e %T`, C locale).
fn timestamp(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let secs = libc::time_t::try_from(secs).unwrap_or(libc::time_t::MAX);
    // SAFETY: `tm` is plain data that localtime_r fills; both pointers are valid for the
    // call, and localtime_r keeps neither.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return format_timestamp(0, 1, 0, 0, 0);
        }
        tm
    };
    format_timestamp(tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec)
}

/// `Mmm dd hh:mm:ss` of a month (0 = January), day, hour, minute and second.
fn format_timestamp(mon: i32, mday: i32, hour: i32, min: i32, sec: i32) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = usize::try_from(mon)
        .ok()
        .and_then(|m| MONTHS.get(m))
        .unwrap_or(&"Jan");
    format!("{month} {mday:>2} {hour:02}:{min:02}:{sec:02}")
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> LineWriter<'a> {
        LineWriter {
            syslog: self,
            severity: libc::LOG_INFO as u8,
            buf: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> LineWriter<'a> {
        LineWriter {
            syslog: self,
            severity: severity(meta.level()),
            buf: Vec::new(),
        }
    }
}

/// One event's text on its way to syslog: collected, then sent one datagram per line (each
/// line keeps the header, so none loses its level) when flushed or dropped.
#[derive(Debug)]
pub struct LineWriter<'a> {
    syslog: &'a Syslog,
    severity: u8,
    buf: Vec<u8>,
}

impl io::Write for LineWriter<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&self.buf).into_owned();
        self.buf.clear();
        let mut first_error = Ok(());
        for line in text.trim_end_matches('\n').split('\n') {
            if let Err(e) = self.syslog.send(self.severity, line)
                && first_error.is_ok()
            {
                first_error = Err(e);
            }
        }
        first_error
    }
}

impl Drop for LineWriter<'_> {
    fn drop(&mut self) {
        // nowhere to report a lost line: the log is where it would be reported
        let _ = io::Write::flush(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    /// A receiver bound in a temp dir and a client of it.
    fn pair() -> (tempfile::TempDir, UnixDatagram, Syslog) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = Syslog::open(&path).unwrap();
        (dir, rx, tx)
    }

    fn recv(rx: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = rx.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn severities() {
        assert_eq!(severity(&Level::ERROR), 3);
        assert_eq!(severity(&Level::WARN), 4);
        assert_eq!(severity(&Level::INFO), 6);
        assert_eq!(severity(&Level::DEBUG), 7);
        assert_eq!(severity(&Level::TRACE), 7);
        // facility daemon: an info line is <30>, as tgtd's
        assert_eq!(FACILITY_DAEMON * 8 + severity(&Level::INFO), 30);
    }

    #[test]
    fn rfc3164_header() {
        assert_eq!(format_timestamp(2, 5, 7, 8, 9), "Mar  5 07:08:09");
        assert_eq!(format_timestamp(11, 31, 23, 59, 60), "Dec 31 23:59:60");
        assert_eq!(format_timestamp(12, 1, 0, 0, 0), "Jan  1 00:00:00");
        assert_eq!(
            header(28, "Mar  5 07:08:09", 42),
            "<28>Mar  5 07:08:09 numatgtd[42]: "
        );
        let now = timestamp(std::time::SystemTime::now());
        assert_eq!(now.len(), 15, "{now:?}");
    }

    #[test]
    fn one_datagram_per_line_with_header() {
        let (_dir, rx, tx) = pair();
        {
            let mut w = tx.make_writer();
            w.severity = 4;
            w.write_all(b"first\nsecond\n").unwrap();
        }
        let pid = std::process::id();
        for want in ["first", "second"] {
            let got = recv(&rx);
            assert!(got.starts_with("<28>"), "{got:?}");
            assert!(
                got.ends_with(&format!(" numatgtd[{pid}]: {want}")),
                "{got:?}"
            );
        }
    }

    #[test]
    fn a_receiver_that_stops_reading_costs_one_wait_then_lines_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = Syslog::open_waiting(&path, Duration::from_millis(100)).unwrap();
        // fill the queue (net.unix.max_dgram_qlen datagrams, or the buffers)
        let mut sent = 0;
        let t = std::time::Instant::now();
        while tx.send(6, "fill").is_ok() {
            sent += 1;
            assert!(sent < 100_000, "the queue never filled");
        }
        assert!(tx.stalled.load(Ordering::Relaxed));
        // stalled: the next lines are dropped without waiting
        let t2 = std::time::Instant::now();
        for _ in 0..5 {
            assert!(tx.send(6, "lost").is_err());
        }
        assert!(
            t2.elapsed() < Duration::from_millis(50),
            "{:?}",
            t2.elapsed()
        );
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert_eq!(tx.dropped.load(Ordering::Relaxed), 6);
        // the receiver reads again: the next line goes, then the count
        for _ in 0..sent {
            assert!(recv(&rx).ends_with(": fill"));
        }
        tx.send(3, "back").unwrap();
        assert!(recv(&rx).ends_with(": back"));
        let note = recv(&rx);
        assert!(note.starts_with("<28>"), "{note:?}");
        assert!(note.ends_with(": 6 log lines lost: the syslog socket did not take them"));
        assert!(!tx.stalled.load(Ordering::Relaxed));
        assert_eq!(tx.dropped.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_missing_socket_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Syslog::open(&dir.path().join("none")).is_err());
    }

    #[test]
    fn socket_path_from_the_environment() {
        // only the default: changing the environment would race with other tests
        if std::env::var_os(SOCKET_ENV).is_none() {
            assert_eq!(socket_path(), Path::new(DEFAULT_SOCKET));
        }
    }
}
