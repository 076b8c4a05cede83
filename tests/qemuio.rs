//! qemu-io (qemu-utils + qemu-block-extra's libiscsi driver) as a scripted initiator: batches
//! of `write -P`, `read -P` and `flush` commands in one process (one iSCSI session), and an
//! interactive session on a pipe for crash tests (commands sent, completion awaited through a
//! marker, the session kept logged in while the target is killed).
//!
//! Every command's outcome is checked strictly: each read and write must print its own
//! `read|wrote LEN/LEN bytes at offset OFF` line in order, no `Pattern verification failed` or
//! any other line may appear, and the exit status must be 0. qemu-io is opened with
//! `-t writeback` so the block layer adds neither FUA nor flushes: the target's WCE bit alone
//! decides durability, and `flush` is the only SYNCHRONIZE CACHE.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::tools;

/// One qemu-io command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoCmd {
    /// `write -P pat off len`
    Write { off: u64, len: u64, pat: u8 },
    /// `read [-P pat -s s -l l] off len`: reads `off..off+len`; with `check`, verifies that
    /// bytes `off+s..off+s+l` all equal `pat`.
    Read {
        off: u64,
        len: u64,
        check: Option<Check>,
    },
    /// `flush` (SYNCHRONIZE CACHE through the libiscsi driver)
    Flush,
}

/// A pattern check of part of a read: `len` bytes at `start` (relative to the read) equal `pat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    pub start: u64,
    pub len: u64,
    pub pat: u8,
}

impl IoCmd {
    /// The qemu-io command line.
    pub fn command(&self) -> String {
        match *self {
            IoCmd::Write { off, len, pat } => format!("write -P {pat:#04x} {off} {len}"),
            IoCmd::Read {
                off,
                len,
                check: None,
            } => format!("read {off} {len}"),
            IoCmd::Read {
                off,
                len,
                check: Some(c),
            } if c.start == 0 && c.len == len => format!("read -P {:#04x} {off} {len}", c.pat),
            IoCmd::Read {
                off,
                len,
                check: Some(c),
            } => format!(
                "read -P {:#04x} -s {} -l {} {off} {len}",
                c.pat, c.start, c.len
            ),
            IoCmd::Flush => "flush".into(),
        }
    }

    /// The line qemu-io prints when the command succeeded (None: `flush` prints nothing).
    fn result_line(&self) -> Option<String> {
        match *self {
            IoCmd::Write { off, len, .. } => {
                Some(format!("wrote {len}/{len} bytes at offset {off}"))
            }
            IoCmd::Read { off, len, .. } => Some(format!("read {len}/{len} bytes at offset {off}")),
            IoCmd::Flush => None,
        }
    }
}

/// Why a batch failed: the command (index into the batch) and what qemu-io said.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Index of the command in the batch; None when it cannot be attributed.
    pub index: Option<usize>,
    pub message: String,
    /// For `Pattern verification failed at offset X, N bytes`: (X, N).
    pub pattern_mismatch: Option<(u64, u64)>,
}

fn strip_prompts(mut l: &str) -> &str {
    while let Some(rest) = l.strip_prefix("qemu-io> ") {
        l = rest;
    }
    l.strip_prefix("qemu-io>").unwrap_or(l).trim_end()
}

fn is_stats_line(l: &str) -> bool {
    // "4 KiB, 1 ops; 00.00 sec (689.862 KiB/sec and 172.4655 ops/sec)"
    l.contains(" ops; ") && l.contains(" sec (")
}

fn parse_mismatch(l: &str) -> Option<(u64, u64)> {
    let rest = l.strip_prefix("Pattern verification failed at offset ")?;
    let (off, n) = rest.split_once(", ")?;
    let n = n.strip_suffix(" bytes")?;
    Some((off.trim().parse().ok()?, n.trim().parse().ok()?))
}

/// Checks qemu-io's output for `cmds`: every read/write printed its result line, in order, and
/// nothing else was printed (bar I/O statistics and prompts). Returns every failure found.
pub fn check_output<'a>(cmds: &[IoCmd], lines: impl IntoIterator<Item = &'a str>) -> Vec<Failure> {
    let producing: Vec<usize> = (0..cmds.len())
        .filter(|&i| cmds[i].result_line().is_some())
        .collect();
    let mut cursor = 0usize; // index into `producing`
    let mut failures = Vec::new();
    for raw in lines {
        let l = strip_prompts(raw);
        if l.is_empty() || is_stats_line(l) {
            continue;
        }
        let at = producing.get(cursor).copied();
        if l.starts_with("wrote ") || l.starts_with("read ") {
            match at {
                Some(i) => {
                    let want = cmds[i].result_line().expect("producing command");
                    if l != want {
                        failures.push(Failure {
                            index: Some(i),
                            message: format!("expected `{want}`, qemu-io printed `{l}`"),
                            pattern_mismatch: None,
                        });
                    }
                    cursor += 1;
                }
                None => failures.push(Failure {
                    index: None,
                    message: format!("result line after the last command: `{l}`"),
                    pattern_mismatch: None,
                }),
            }
            continue;
        }
        let pm = parse_mismatch(l);
        failures.push(Failure {
            index: at,
            message: if pm.is_some() {
                l.to_string()
            } else {
                format!("unexpected qemu-io output (before the result of this command, or from a flush just before it): `{l}`")
            },
            pattern_mismatch: pm,
        });
    }
    if let Some(&i) = producing.get(cursor) {
        failures.push(Failure {
            index: Some(i),
            message: format!(
                "no result for this command or the {} after it (qemu-io stopped early?)",
                producing.len() - cursor - 1
            ),
            pattern_mismatch: None,
        });
    }
    failures
}

fn base_args() -> Vec<String> {
    ["-f", "raw", "-t", "writeback"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// Runs `cmds` in one qemu-io process (one iSCSI session) against `url`, under `timeout`.
/// Returns the run and the failures found (empty = every command succeeded and verified).
pub fn run_batch(url: &str, cmds: &[IoCmd], timeout_secs: u64) -> (tools::ToolRun, Vec<Failure>) {
    let mut args = base_args();
    for c in cmds {
        args.push("-c".into());
        args.push(c.command());
    }
    args.push(url.to_string());
    let run = tools::run(timeout_secs, "qemu-io", args);
    let mut failures = check_output(cmds, run.stdout.lines());
    if !run.status.success() {
        failures.push(Failure {
            index: None,
            message: format!(
                "qemu-io exited with {}{}",
                run.status,
                if run.timed_out() { " (TIMED OUT)" } else { "" }
            ),
            pattern_mismatch: None,
        });
    }
    (run, failures)
}

/// Reads `off..off+len` of `url` through `qemu-img dd` with requests of `bs` bytes (`off` and
/// `len` multiples of `bs`), into memory. A new iSCSI session.
pub fn read_range(
    url: &str,
    off: u64,
    len: u64,
    bs: u64,
    tmp: &std::path::Path,
) -> Result<Vec<u8>, String> {
    assert!(
        off % bs == 0 && len % bs == 0,
        "read_range: {off}+{len} is not whole blocks of {bs}"
    );
    let out = tmp.join(format!("range-{off}-{len}-{bs}.bin"));
    let _ = std::fs::remove_file(&out);
    let r = tools::run(
        60,
        "qemu-img",
        [
            "dd".to_string(),
            "-f".into(),
            "raw".into(),
            "-O".into(),
            "raw".into(),
            format!("bs={bs}"),
            format!("skip={}", off / bs),
            // qemu-img dd applies count before skip: the input ends at count*bs
            format!("count={}", (off + len) / bs),
            format!("if={url}"),
            format!("of={}", out.display()),
        ],
    );
    if !r.status.success() {
        return Err(format!("qemu-img dd failed:\n{r}"));
    }
    let data = std::fs::read(&out).map_err(|e| format!("read {}: {e}", out.display()));
    let _ = std::fs::remove_file(&out);
    let data = data?;
    if data.len() as u64 != len {
        return Err(format!(
            "qemu-img dd returned {} bytes, wanted {len}",
            data.len()
        ));
    }
    Ok(data)
}

/// Reads `off..off+len` of `url` with ONE qemu-io read of exactly that request (`read -v`,
/// the hexdump parsed back into bytes): the same request shape as a failed verified read.
pub fn read_verbatim(url: &str, off: u64, len: u64) -> Result<Vec<u8>, String> {
    let mut args = base_args();
    args.extend([
        "-c".to_string(),
        format!("read -v {off} {len}"),
        url.to_string(),
    ]);
    let r = tools::run(60, "qemu-io", args);
    if !r.status.success() {
        return Err(format!("qemu-io read -v failed:\n{r}"));
    }
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    for l in r.stdout.lines() {
        let Some((addr, rest)) = l.split_once(':') else {
            continue;
        };
        if addr.len() < 8 || !addr.chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let at = u64::from_str_radix(addr, 16).map_err(|e| format!("hexdump `{l}`: {e}"))?;
        if at != off + out.len() as u64 {
            return Err(format!("hexdump line `{l}` out of sequence"));
        }
        for t in rest.split_whitespace().take(16) {
            let b = u8::from_str_radix(t, 16).map_err(|e| format!("hexdump `{l}`: {e}"))?;
            out.push(b);
        }
    }
    if out.len() as u64 != len {
        return Err(format!("hexdump has {} bytes, wanted {len}", out.len()));
    }
    Ok(out)
}

/// Writes `size` random bytes (kept in `dir/name`) to the start of the LUN at `url` through
/// `qemu-img convert -n` (a new iSCSI session) and returns them, for comparison.
pub fn write_random(url: &str, dir: &std::path::Path, name: &str, size: usize) -> Vec<u8> {
    use rand::RngCore;
    tools::require_tool("qemu-img");
    let mut data = vec![0u8; size];
    rand::thread_rng().fill_bytes(&mut data);
    let src = dir.join(name);
    std::fs::write(&src, &data).expect("write pattern");
    let src = src.to_string_lossy();
    let args = ["convert", "-n", "-f", "raw", "-O", "raw", &src, url];
    tools::run(300, "qemu-img", args).check("qemu-img convert (write)");
    data
}

/// Reads the whole LUN at `url` through `qemu-img convert` (large requests), into memory.
/// A new iSCSI session.
pub fn read_all(url: &str, tmp: &std::path::Path, name: &str) -> Result<Vec<u8>, String> {
    let out = tmp.join(name);
    let _ = std::fs::remove_file(&out);
    let r = tools::run(
        60,
        "qemu-img",
        [
            "convert".to_string(),
            "-f".into(),
            "raw".into(),
            "-O".into(),
            "raw".into(),
            "-S".into(),
            "0".into(),
            url.to_string(),
            out.to_string_lossy().into_owned(),
        ],
    );
    if !r.status.success() {
        return Err(format!("qemu-img convert failed:\n{r}"));
    }
    let data = std::fs::read(&out).map_err(|e| format!("read {}: {e}", out.display()));
    let _ = std::fs::remove_file(&out);
    data
}

/// What the reader thread of a [`Session`] saw on qemu-io's stdout.
enum Event {
    /// A complete output line.
    Line(String),
    /// A `qemu-io> ` prompt: the previous command has completed.
    Prompt,
}

/// Splits qemu-io's stdout into lines and prompts (a prompt has no newline after it).
fn read_events(mut out: impl std::io::Read, tx: mpsc::Sender<Event>) {
    const PROMPT: &[u8] = b"qemu-io> ";
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        // at the start of a line: prompts first
        loop {
            if buf.starts_with(PROMPT) {
                buf.drain(..PROMPT.len());
                if tx.send(Event::Prompt).is_err() {
                    return;
                }
            } else if let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let l = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                if tx.send(Event::Line(l)).is_err() {
                    return;
                }
            } else {
                break;
            }
        }
        match out.read(&mut chunk) {
            Ok(0) | Err(_) => {
                if !buf.is_empty() {
                    let _ = tx.send(Event::Line(String::from_utf8_lossy(&buf).into_owned()));
                }
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// An interactive qemu-io process: one command at a time goes to its stdin, and the next
/// prompt says it completed (qemu-io reads its stdin through stdio buffering, so a script
/// written all at once would stall). The session stays logged in until [`Session::close`].
pub struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    events: Receiver<Event>,
    /// Everything qemu-io printed so far (for failure reports).
    pub transcript: Vec<String>,
}

impl Session {
    /// Starts `qemu-io -f raw -t writeback URL` under `timeout -k 5 SECS` and waits for its
    /// first prompt (so the login is done).
    pub fn open(url: &str, timeout_secs: u64) -> Result<Session, String> {
        tools::require_tool("qemu-io");
        tools::require_tool("timeout");
        let mut child = Command::new("timeout")
            .arg("-k")
            .arg("5")
            .arg(timeout_secs.to_string())
            .arg("qemu-io")
            .args(base_args())
            .arg(url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn qemu-io: {e}"))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || read_events(stdout, tx));
        let mut s = Session {
            child,
            stdin: Some(stdin),
            events: rx,
            transcript: Vec::new(),
        };
        let opened = s.wait_prompt(Instant::now() + Duration::from_secs(20))?;
        if !opened.is_empty() {
            return Err(format!(
                "qemu-io printed before its first prompt:\n{}",
                opened.join("\n")
            ));
        }
        Ok(s)
    }

    /// Collects output lines until the next prompt or `deadline`.
    fn wait_prompt(&mut self, deadline: Instant) -> Result<Vec<String>, String> {
        let mut got = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Prompt) => return Ok(got),
                Ok(Event::Line(l)) => {
                    self.transcript.push(l.clone());
                    got.push(l);
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "no qemu-io prompt in time; output so far:\n{}",
                        got.join("\n")
                    ));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("qemu-io exited; output:\n{}", got.join("\n")));
                }
            }
        }
    }

    /// Runs `cmds` one by one, each awaited (bounded by `wait` in total), and checks their
    /// output. When this returns Ok, the target has acknowledged every command.
    pub fn run(&mut self, cmds: &[IoCmd], wait: Duration) -> Result<(), String> {
        let deadline = Instant::now() + wait;
        let mut all: Vec<String> = Vec::new();
        for (i, c) in cmds.iter().enumerate() {
            let stdin = self.stdin.as_mut().ok_or("session already closed")?;
            stdin
                .write_all(format!("{}\n", c.command()).as_bytes())
                .and_then(|()| stdin.flush())
                .map_err(|e| format!("write to qemu-io stdin: {e}"))?;
            match self.wait_prompt(deadline) {
                Ok(lines) => all.extend(lines),
                Err(e) => {
                    return Err(format!(
                        "command #{i} `{}` did not complete within {wait:?} of the first: {e}",
                        c.command()
                    ));
                }
            }
        }
        let failures = check_output(cmds, all.iter().map(String::as_str));
        if failures.is_empty() {
            return Ok(());
        }
        let mut msg = String::from("qemu-io session reported failures:");
        for f in &failures {
            let cmd = f.index.map(|i| cmds[i].command()).unwrap_or_default();
            msg.push_str(&format!(
                "\n  command #{:?} `{cmd}`: {}",
                f.index, f.message
            ));
        }
        msg.push_str(&format!("\noutput:\n{}", all.join("\n")));
        Err(msg)
    }

    /// Closes stdin and waits up to `grace` for qemu-io to exit; then SIGTERMs the `timeout`
    /// wrapper (which passes it on) and, after its -k grace, it SIGKILLs qemu-io.
    pub fn close(mut self, grace: Duration) -> Option<ExitStatus> {
        drop(self.stdin.take());
        let start = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if start.elapsed() > grace {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        crate::daemon::send_signal(self.child.id(), libc::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(8) {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
