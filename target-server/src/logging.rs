//! Log output: owns how numatgtd's log lines look and where they go. [`init`] installs the
//! tracing subscriber (level from `NUMATGT_LOG` or `-d`, switchable at run time). Where the
//! lines go:
//!
//! - in the foreground (`-f`), to stderr, in one of two formats:
//!   - on a terminal or a file: tracing-subscriber's default lines (timestamp, level, span
//!     context, message; ANSI colours only on a terminal);
//!   - when stderr is the systemd journal (`JOURNAL_STREAM` names the very stream fd 2
//!     is): [`JournalFormat`], one line per event prefixed with its sd-daemon(3) priority
//!     (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug and trace) so that journald
//!     records the level, without timestamp (the journal has its own) or colours;
//! - detached (no `-f`), to syslog as tgtd's do (`syslog.rs`: `/dev/log`, identifier
//!   `numatgtd[PID]`, facility daemon, the level as the priority). Until the daemon has
//!   detached the lines go to stderr too, so that what is said about the command line and
//!   the configuration reaches the terminal; [`Logging::detached`] stops that copy and
//!   [`Logging::release_stdio`] points stdin, stdout and stderr at /dev/null once the
//!   daemon is up. Without a syslog socket the daemon says so on stderr and keeps logging
//!   there.
//!
//! Every format prints the spans an event happened in with their fields, root first
//! (`conn{peer=… initiator=… target=…}: message key=value`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// What [`init`] set up: the run-time debug switch, and for a daemon that detaches and
/// logs to syslog, the copy of its lines on stderr that lasts until it has detached.
pub struct Logging {
    debug: crate::mgmt::DebugSwitch,
    /// Some when the lines go to syslog: whether they still go to stderr as well.
    stderr_copy: Option<Arc<AtomicBool>>,
}

impl Logging {
    /// The switch that `tgtadm --mode sys --op update -n debug -v on|off` flips (debug
    /// level on, or back to the level the daemon started with), whatever the output.
    pub fn debug_switch(&self) -> crate::mgmt::DebugSwitch {
        self.debug.clone()
    }

    /// In the daemon after it detached: its lines go to syslog only from now on (the
    /// terminal the daemon was started from is no place for them). Nothing changes when
    /// the lines go to stderr.
    pub fn detached(&self) {
        if let Some(copy) = &self.stderr_copy {
            copy.store(false, Ordering::Relaxed);
        }
    }

    /// Once the detached daemon is up: stdin, stdout and stderr become /dev/null, as a
    /// daemon's are, so that it holds no terminal. Only when the lines go to syslog (else
    /// stderr is the log and stays).
    pub fn release_stdio(&self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        if self.stderr_copy.is_none() {
            return Ok(());
        }
        self.detached();
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?;
        for fd in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
            nix::unistd::dup2(null.as_raw_fd(), fd)?;
        }
        Ok(())
    }
}

/// Installs the global subscriber. `debug` is `-d LEVEL` (0 info, 1 debug, more trace);
/// `NUMATGT_LOG` (an `EnvFilter` directive) wins over it. `detach`: the daemon is going to
/// detach (no `-f`), so its lines go to syslog (`syslog::socket_path`), and to
/// stderr as well until [`Logging::detached`]; when that socket cannot be reached, this
/// says so on stderr and the lines go to stderr alone. Otherwise they go to stderr, in the
/// journal format when stderr is the journal ([`stderr_is_journal`]).
pub fn init(debug: Option<u32>, detach: bool) -> Logging {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, reload};
    let level = match debug.unwrap_or(0) {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let start = std::env::var("NUMATGT_LOG").unwrap_or_else(|_| level.to_string());
    let filter = EnvFilter::try_new(&start).unwrap_or_else(|_| EnvFilter::new(level));
    let (filter, handle) = reload::Layer::new(filter);
    let syslog = if detach {
        let path = crate::syslog::socket_path();
        match crate::syslog::Syslog::open(&path) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!(
                    "numatgtd: cannot log to syslog ({}: {e}): the log stays on stderr",
                    path.display()
                );
                None
            }
        }
    } else {
        None
    };
    let stderr_copy = syslog.is_some().then(|| Arc::new(AtomicBool::new(true)));
    tracing_subscriber::registry()
        .with(filter)
        .with(stderr_layer(
            stderr_is_journal(),
            std::io::stderr().is_terminal(),
            std::io::stderr,
            stderr_copy.clone(),
        ))
        .with(syslog.map(syslog_layer))
        .init();
    let debug = std::sync::Arc::new(move |on: bool| {
        let f = if on {
            EnvFilter::new("debug")
        } else {
            EnvFilter::try_new(&start).unwrap_or_else(|_| EnvFilter::new("info"))
        };
        if let Err(e) = handle.reload(f) {
            tracing::warn!("cannot change the log level: {e}");
        }
    });
    Logging { debug, stderr_copy }
}

/// The layer that writes to stderr (`writer`): [`JournalFormat`] when `journal`, else the
/// default lines (colours when `ansi`). With `copy`, only while it holds true.
fn stderr_layer<S, W>(
    journal: bool,
    ansi: bool,
    writer: W,
    copy: Option<Arc<AtomicBool>>,
) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer;
    let layer = if journal {
        journal_layer(writer).boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(writer)
            .boxed()
    };
    match copy {
        None => layer,
        Some(on) => layer
            .with_filter(tracing_subscriber::filter::dynamic_filter_fn(
                move |_, _| on.load(Ordering::Relaxed),
            ))
            .boxed(),
    }
}

/// True when stderr is the journal stream systemd connected: `JOURNAL_STREAM` is set
/// (`DEVICE:INODE`, systemd.exec(5)) and names the device and inode of fd 2. A child
/// that inherited the variable but writes elsewhere (a terminal, a file) gets `false`.
pub fn stderr_is_journal() -> bool {
    std::env::var("JOURNAL_STREAM").is_ok_and(|v| names_fd(&v, libc::STDERR_FILENO))
}

/// The `JOURNAL_STREAM` value `v` names the file open on `fd`.
fn names_fd(v: &str, fd: std::os::fd::RawFd) -> bool {
    let Some((dev, ino)) = parse_journal_stream(v) else {
        return false;
    };
    nix::sys::stat::fstat(fd).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

/// The device and inode numbers of a `JOURNAL_STREAM` value (`"8:12345"`).
fn parse_journal_stream(v: &str) -> Option<(libc::dev_t, libc::ino_t)> {
    let (dev, ino) = v.trim().split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

/// The fmt layer that writes [`JournalFormat`] lines to `writer`, never with ANSI escapes
/// (span fields are formatted plain too).
pub fn journal_layer<S, W>(
    writer: W,
) -> tracing_subscriber::fmt::Layer<S, DefaultFields, JournalFormat, W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(writer)
        .event_format(JournalFormat)
}

/// Event format for the journal: `<P>` (the sd-daemon priority of the level), the spans
/// root first with their fields, then the message and the event's fields. A message of
/// several lines gives several lines, each with the prefix, so no part of it loses its
/// level.
#[derive(Debug, Clone, Copy, Default)]
pub struct JournalFormat;

impl JournalFormat {
    /// The sd-daemon(3) priority prefix of `level`: `<3>` error, `<4>` warning, `<6>`
    /// info, `<7>` debug and trace.
    pub fn prefix(level: &Level) -> &'static str {
        match *level {
            Level::ERROR => "<3>",
            Level::WARN => "<4>",
            Level::INFO => "<6>",
            _ => "<7>",
        }
    }
}

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let text = event_text(ctx, event)?;
        let prefix = Self::prefix(event.metadata().level());
        for line in text.trim_end_matches('\n').split('\n') {
            writeln!(writer, "{prefix}{line}")?;
        }
        Ok(())
    }
}

/// The spans of `event`, root first with their fields, then its message and fields, with
/// no ANSI escapes (a plain writer, whatever the layer's setting).
fn event_text<S, N>(ctx: &FmtContext<'_, S, N>, event: &Event<'_>) -> Result<String, fmt::Error>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    let mut text = String::new();
    if let Some(scope) = ctx.event_scope() {
        for span in scope.from_root() {
            text.push_str(span.name());
            let ext = span.extensions();
            if let Some(fields) = ext.get::<FormattedFields<N>>()
                && !fields.is_empty()
            {
                text.push('{');
                text.push_str(fields);
                text.push('}');
            }
            text.push(':');
        }
        if !text.is_empty() {
            text.push(' ');
        }
    }
    ctx.format_fields(Writer::new(&mut text), event)?;
    Ok(text)
}

/// The fmt layer that sends events to `syslog` in [`SyslogFormat`], each with the priority
/// of its level (`syslog::LineWriter`).
fn syslog_layer<S>(
    syslog: crate::syslog::Syslog,
) -> tracing_subscriber::fmt::Layer<S, SyslogFields, SyslogFormat, crate::syslog::Syslog>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .fmt_fields(SyslogFields::default())
        .with_writer(syslog)
        .event_format(SyslogFormat)
}

/// Event format for syslog: the text of [`JournalFormat`] without its prefix (the syslog
/// header, added per line by the writer, carries the priority, time and identifier).
#[derive(Debug, Clone, Copy, Default)]
pub struct SyslogFormat;

impl<S, N> FormatEvent<S, N> for SyslogFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let text = event_text(ctx, event)?;
        writeln!(writer, "{}", text.trim_end_matches('\n'))
    }
}

/// The syslog layer's field formatter: tracing-subscriber's default, as a type of its own
/// so that the span fields it keeps are its own, never those a stderr layer on a terminal
/// formatted with colours.
#[derive(Debug, Default)]
pub struct SyslogFields(DefaultFields);

impl<'w> FormatFields<'w> for SyslogFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: Writer<'w>,
        fields: R,
    ) -> fmt::Result {
        self.0.format_fields(writer, fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::prelude::*;

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The journal lines `f` logs.
    fn journal_lines(f: impl FnOnce()) -> Vec<String> {
        let sink = Sink::default();
        let w = sink.clone();
        let sub = tracing_subscriber::registry().with(journal_layer(move || w.clone()));
        tracing::subscriber::with_default(sub, f);
        let bytes = sink.0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn level_prefixes() {
        let want = [
            (Level::ERROR, "<3>"),
            (Level::WARN, "<4>"),
            (Level::INFO, "<6>"),
            (Level::DEBUG, "<7>"),
            (Level::TRACE, "<7>"),
        ];
        for (level, prefix) in want {
            assert_eq!(JournalFormat::prefix(&level), prefix, "{level}");
        }
        let lines = journal_lines(|| {
            tracing::error!("e");
            tracing::warn!("w");
            tracing::info!("i");
            tracing::debug!("d");
            tracing::trace!("t");
        });
        assert_eq!(lines, ["<3>e", "<4>w", "<6>i", "<7>d", "<7>t"]);
    }

    #[test]
    fn spans_and_fields_without_ansi_or_timestamp() {
        let peer: std::net::SocketAddr = "10.0.0.1:50000".parse().unwrap();
        let lines = journal_lines(|| {
            let conn = tracing::info_span!("conn", %peer, initiator = "iqn.i", target = "iqn.t");
            let _c = conn.enter();
            let task = tracing::debug_span!("task", itt = 7);
            let _t = task.enter();
            tracing::warn!(lun = 3, "slow backing store");
        });
        assert_eq!(
            lines,
            [
                "<4>conn{peer=10.0.0.1:50000 initiator=\"iqn.i\" target=\"iqn.t\"}:task{itt=7}: \
                 slow backing store lun=3"
            ]
        );
        assert!(!lines[0].contains('\x1b'));
    }

    #[test]
    fn every_line_of_a_message_keeps_its_level() {
        let lines = journal_lines(|| tracing::error!("first\nsecond"));
        assert_eq!(lines, ["<3>first", "<3>second"]);
    }

    /// The datagrams a syslog receiver got within a short while.
    fn datagrams(rx: &std::os::unix::net::UnixDatagram) -> Vec<String> {
        rx.set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = rx.recv(&mut buf) {
            got.push(String::from_utf8(buf[..n].to_vec()).unwrap());
        }
        got
    }

    /// A syslog receiver in a temp dir and a client of it.
    fn syslog_pair() -> (
        tempfile::TempDir,
        std::os::unix::net::UnixDatagram,
        crate::syslog::Syslog,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let tx = crate::syslog::Syslog::open(&path).unwrap();
        (dir, rx, tx)
    }

    #[test]
    fn syslog_lines_carry_priority_identifier_and_spans() {
        let (_dir, rx, tx) = syslog_pair();
        let sub = tracing_subscriber::registry().with(syslog_layer(tx));
        tracing::subscriber::with_default(sub, || {
            let conn = tracing::info_span!("conn", initiator = "iqn.i");
            let _c = conn.enter();
            tracing::error!("e");
            tracing::warn!(lun = 3, "w");
            tracing::info!("first\nsecond");
            tracing::debug!("d");
            tracing::trace!("t");
        });
        let got = datagrams(&rx);
        let ident = format!(" numatgtd[{}]: ", std::process::id());
        let want = [
            ("<27>", "conn{initiator=\"iqn.i\"}: e"),
            ("<28>", "conn{initiator=\"iqn.i\"}: w lun=3"),
            ("<30>", "conn{initiator=\"iqn.i\"}: first"),
            ("<30>", "second"),
            ("<31>", "conn{initiator=\"iqn.i\"}: d"),
            ("<31>", "conn{initiator=\"iqn.i\"}: t"),
        ];
        assert_eq!(got.len(), want.len(), "{got:#?}");
        for (line, (pri, text)) in got.iter().zip(want) {
            assert!(line.starts_with(pri), "{line:?}");
            let (_, rest) = line
                .split_once(&ident)
                .unwrap_or_else(|| panic!("{line:?}"));
            assert_eq!(rest, text);
            assert!(!line.contains('\x1b'));
        }
    }

    #[test]
    fn stderr_copy_stops_when_detached() {
        let (_dir, rx, tx) = syslog_pair();
        let sink = Sink::default();
        let w = sink.clone();
        let copy = Arc::new(AtomicBool::new(true));
        let logging = Logging {
            debug: Arc::new(|_| {}),
            stderr_copy: Some(copy.clone()),
        };
        let sub = tracing_subscriber::registry()
            .with(stderr_layer(true, false, move || w.clone(), Some(copy)))
            .with(syslog_layer(tx));
        tracing::subscriber::with_default(sub, || {
            tracing::warn!("before");
            logging.detached();
            tracing::warn!("after");
        });
        let stderr = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(stderr, "<4>before\n");
        let got = datagrams(&rx);
        assert_eq!(got.len(), 2, "{got:#?}");
        assert!(got[0].ends_with(": before") && got[1].ends_with(": after"));
    }

    #[test]
    fn journal_stream_names_the_open_file() {
        use std::os::fd::AsRawFd;
        let a = tempfile::tempfile().unwrap();
        let b = tempfile::tempfile().unwrap();
        let st = nix::sys::stat::fstat(a.as_raw_fd()).unwrap();
        let v = format!("{}:{}", st.st_dev, st.st_ino);
        assert!(names_fd(&v, a.as_raw_fd()));
        assert!(!names_fd(&v, b.as_raw_fd()));
        assert!(!names_fd("garbage", a.as_raw_fd()));
    }

    #[test]
    fn journal_stream_values() {
        assert_eq!(parse_journal_stream("8:12345"), Some((8, 12345)));
        assert_eq!(parse_journal_stream(" 0:1\n"), Some((0, 1)));
        for bad in ["", "8", "8:", ":1", "a:1", "8:x", "-1:2"] {
            assert_eq!(parse_journal_stream(bad), None, "{bad:?}");
        }
    }
}
