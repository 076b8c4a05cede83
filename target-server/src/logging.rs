//! Log output: owns how numatgtd's log lines look and where they go. [`init`] installs the
//! tracing subscriber on stderr (level from `NUMATGT_LOG` or `-d`, switchable at run time).
//! Two formats:
//!
//! - on a terminal or a file: tracing-subscriber's default lines (timestamp, level, span
//!   context, message; ANSI colours only on a terminal);
//! - when stderr is the systemd journal (`JOURNAL_STREAM` names the very stream fd 2 is):
//!   [`JournalFormat`], one line per event prefixed with its sd-daemon(3) priority (`<3>`
//!   error, `<4>` warning, `<6>` info, `<7>` debug and trace) so that journald records
//!   the level, without timestamp (the journal has its own) or colours.
//!
//! Both print the spans an event happened in with their fields, root first
//! (`conn{peer=… initiator=… target=…}: message key=value`).

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// Installs the global subscriber on stderr, in the journal format when stderr is the
/// journal ([`stderr_is_journal`]). `debug` is `-d LEVEL` (0 info, 1 debug, more trace);
/// `NUMATGT_LOG` (an `EnvFilter` directive) wins over it. Returns the switch that
/// `tgtadm --mode sys --op update -n debug -v on|off` flips (debug level on, or back to the
/// level the daemon started with).
pub fn init(debug: Option<u32>) -> crate::mgmt::DebugSwitch {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt, reload};
    let level = match debug.unwrap_or(0) {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let start = std::env::var("NUMATGT_LOG").unwrap_or_else(|_| level.to_string());
    let filter = EnvFilter::try_new(&start).unwrap_or_else(|_| EnvFilter::new(level));
    let (filter, handle) = reload::Layer::new(filter);
    let journal = stderr_is_journal();
    tracing_subscriber::registry()
        .with(filter)
        .with(journal.then(|| journal_layer(std::io::stderr)))
        .with((!journal).then(|| {
            fmt::layer()
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
        }))
        .init();
    std::sync::Arc::new(move |on: bool| {
        let f = if on {
            EnvFilter::new("debug")
        } else {
            EnvFilter::try_new(&start).unwrap_or_else(|_| EnvFilter::new("info"))
        };
        if let Err(e) = handle.reload(f) {
            tracing::warn!("cannot change the log level: {e}");
        }
    })
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
        // a plain writer: no ANSI escapes whatever the layer's setting
        ctx.format_fields(Writer::new(&mut text), event)?;
        let prefix = Self::prefix(event.metadata().level());
        for line in text.trim_end_matches('\n').split('\n') {
            writeln!(writer, "{prefix}{line}")?;
        }
        Ok(())
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
