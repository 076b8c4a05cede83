//! numatgtd started without `-f` detaches and logs to syslog as tgtd does: a test-owned
//! datagram socket stands in for /dev/log (`NUMATGT_SYSLOG_SOCKET`) and receives RFC 3164
//! lines `<PRI>Mmm dd hh:mm:ss numatgtd[PID]: message` with facility daemon and the
//! priority of each level (info `<30>`, a refused `--bsopts` warning `<28>`, debug `<31>`
//! while `tgtadm --mode sys --op update -n debug -v on` holds). The lines logged before
//! detaching also reach the starting terminal (stderr), those after do not; once up, the
//! daemon's stdin, stdout and stderr are /dev/null. With `-f` nothing goes to the socket;
//! without a syslog socket the detached daemon says so and keeps logging to stderr.
//!
//! The detached daemon is not our child: this test process becomes a child subreaper
//! (prctl), so the daemon is reparented to it and reaped here; its PID is the owner of the
//! management socket's lock in /proc/locks. It is stopped by that PID.

use std::fs::File;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use rand::Rng;
use tests::daemon::{free_port, numatgtd_bin, require_numatgtd};
use tests::mgmt::numatgtadm_bin;
use tests::tools::{self, ToolRun};
use tests::{Daemon, TargetKind};

/// A numatgtd started without `-f` in a temp dir of its own.
struct Detached {
    dir: tempfile::TempDir,
    port: u16,
    control_port: u16,
    /// The PID of the process we started (the one that detached, then exited).
    starter: u32,
    /// The detached daemon, once found.
    pid: Option<i32>,
}

impl Detached {
    /// Starts numatgtd as tgtd is started, without `-f`, logging to `syslog` (a path in
    /// `dir`), and waits for the starting process to exit 0.
    fn start(dir: tempfile::TempDir, syslog: &Path) -> Detached {
        become_subreaper();
        let port = free_port();
        // tgtadm and numatgtadm take -C up to 32767
        let control_port = rand::thread_rng().gen_range(1000..32000);
        let out = File::create(dir.path().join("stdout")).expect("create stdout file");
        let err = File::create(dir.path().join("stderr")).expect("create stderr file");
        let mut child = Command::new(numatgtd_bin())
            .args(["-C", &control_port.to_string()])
            .args(["--iscsi", &format!("portal=127.0.0.1:{port}")])
            .arg("--state-dir")
            .arg(dir.path())
            .args(["--metrics", "off"])
            .env("TGT_IPC_SOCKET", dir.path().join("tgtd-socket"))
            .env("NUMATGT_SYSLOG_SOCKET", syslog)
            .env_remove("NUMATGT_LOG")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn numatgtd");
        let starter = child.id();
        let t = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                break st;
            }
            if t.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("numatgtd without -f did not return within 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut d = Detached {
            dir,
            port,
            control_port,
            starter,
            pid: None,
        };
        assert!(
            status.success(),
            "numatgtd without -f exited with {status}\n{}",
            d.stderr()
        );
        d.pid = Some(d.wait_for_pid());
        d
    }

    /// The detached daemon: the owner of the management socket's lock (taken after
    /// detaching), from /proc/locks.
    fn wait_for_pid(&self) -> i32 {
        let lock = PathBuf::from(format!(
            "{}.{}.lock",
            self.dir.path().join("tgtd-socket").display(),
            self.control_port
        ));
        let t = Instant::now();
        loop {
            if let Some(pid) = lock_owner(&lock) {
                return pid;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "no process holds {} after 20 s\n{}",
                lock.display(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn pid(&self) -> i32 {
        self.pid.expect("the daemon was found")
    }

    /// What the starting process and the daemon wrote to the stderr they were given.
    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// `numatgtadm -C N ARGS` against this daemon.
    fn admin(&self, args: &[&str]) -> ToolRun {
        let ctl = self.control_port.to_string();
        let sock = self.dir.path().join("tgtd-socket");
        let mut all = vec!["-C", ctl.as_str()];
        all.extend_from_slice(args);
        tools::run_env(
            20,
            &numatgtadm_bin(),
            all,
            &[("TGT_IPC_SOCKET", sock.as_os_str())],
        )
    }

    /// SIGTERM and reap (SIGKILL after 10 s); the exit code, None when it had to be killed
    /// or could not be reaped.
    fn stop(&mut self) -> Option<i32> {
        let pid = self.pid.take()?;
        // SAFETY: kill has no memory-safety preconditions; pid is our (reparented) child
        // and not yet reaped, so it cannot have been recycled.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let t = Instant::now();
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into a local we own.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
            }
            if r < 0 {
                // not our child (this process is its subreaper: cannot happen)
                return None;
            }
            if t.elapsed() > Duration::from_secs(10) {
                // SAFETY: as above.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Make this process the reaper of its orphaned descendants (the detached daemon).
fn become_subreaper() {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes an integer flag; no memory is passed.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(r, 0, "prctl(PR_SET_CHILD_SUBREAPER)");
}

/// The PID holding a POSIX lock on `path`, from /proc/locks (`N: POSIX ADVISORY WRITE PID
/// MAJ:MIN:INODE START END`).
fn lock_owner(path: &Path) -> Option<i32> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(path).ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (kind, pid, dev_ino) = (f.get(1)?, f.get(4)?, f.get(5)?);
        let lock_ino: u64 = dev_ino.rsplit(':').next()?.parse().ok()?;
        (*kind == "POSIX" && lock_ino == ino)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

/// A syslog line taken apart: priority, PID, message. Panics unless it is
/// `<PRI>Mmm dd hh:mm:ss numatgtd[PID]: message`.
fn parse(line: &str) -> (u8, i32, &str) {
    fn fail<T>(line: &str) -> T {
        panic!("not an RFC 3164 line of numatgtd: {line:?}")
    }
    let rest = line.strip_prefix('<').unwrap_or_else(|| fail(line));
    let (pri, rest) = rest.split_once('>').unwrap_or_else(|| fail(line));
    let pri: u8 = pri.parse().unwrap_or_else(|_| fail(line));
    // Mmm dd hh:mm:ss
    let stamp = rest.get(..15).unwrap_or_else(|| fail(line));
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let b = stamp.as_bytes();
    assert!(
        months.contains(&&stamp[..3])
            && b[3] == b' '
            && (b[4] == b' ' || b[4].is_ascii_digit())
            && b[5].is_ascii_digit()
            && b[6] == b' '
            && b[9] == b':'
            && b[12] == b':'
            && [7, 8, 10, 11, 13, 14]
                .iter()
                .all(|&i| b[i].is_ascii_digit()),
        "bad timestamp in {line:?}"
    );
    let rest = rest[15..]
        .strip_prefix(" numatgtd[")
        .unwrap_or_else(|| fail(line));
    let (pid, msg) = rest.split_once("]: ").unwrap_or_else(|| fail(line));
    (pri, pid.parse().unwrap_or_else(|_| fail(line)), msg)
}

/// A receiver standing in for /dev/log, in `dir`: a thread reads it all the time (as
/// journald would; numatgtd drops lines a full queue does not take within 0.5 s) and hands
/// the lines over in order.
fn receiver(dir: &Path) -> (PathBuf, Receiver<String>) {
    let path = dir.join("log");
    let sock = UnixDatagram::bind(&path).expect("bind the syslog socket");
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        loop {
            match sock.recv(&mut buf) {
                Ok(n) => {
                    let line = String::from_utf8_lossy(&buf[..n]).into_owned();
                    if tx.send(line).is_err() {
                        return;
                    }
                }
                // the test is over when nobody takes lines any more
                Err(_) => {
                    if tx.send(String::new()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    (path, rx)
}

/// Lines until one contains `needle` (at most 20 s); returns all of them.
fn recv_until(rx: &Receiver<String>, needle: &str) -> Vec<String> {
    let t = Instant::now();
    let mut got = Vec::new();
    loop {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100))
            && !line.is_empty()
        {
            let done = line.contains(needle);
            got.push(line);
            if done {
                return got;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no syslog line with `{needle}` within 20 s; got:\n{}",
            got.join("\n")
        );
    }
}

/// Every line received by now (the daemon sends before it answers a request), after a
/// moment for the reader thread to pass them on.
fn drain(rx: &Receiver<String>) -> Vec<String> {
    std::thread::sleep(Duration::from_millis(300));
    rx.try_iter().filter(|l| !l.is_empty()).collect()
}

/// The first line containing `needle`.
fn line_with<'a>(lines: &'a [String], needle: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with `{needle}` in\n{}", lines.join("\n")))
}

/// A request numatgtd refuses with a warning: a LUN with an unknown cache mode.
const BAD_BSOPTS: [&str; 14] = [
    "--lld",
    "iscsi",
    "--mode",
    "logicalunit",
    "--op",
    "new",
    "--tid",
    "1",
    "--lun",
    "1",
    "-b",
    "/dev/null",
    "--bsopts",
    "cache=bogus",
];
const NEW_TARGET: [&str; 10] = [
    "--lld",
    "iscsi",
    "--mode",
    "target",
    "--op",
    "new",
    "--tid",
    "1",
    "-T",
    "iqn.2026-11.org.numatgt:syslog",
];

#[test]
fn detached_numatgtd_logs_to_syslog_as_tgtd() {
    require_numatgtd("syslog");
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, rx) = receiver(dir.path());
    let mut d = Detached::start(dir, &path);
    let pid = d.pid();
    let listening = format!("listening on 127.0.0.1:{}", d.port);
    let lines = recv_until(&rx, &listening);

    // every line has the header; before detaching the PID is the starter's, after it the
    // daemon's
    for l in &lines {
        let (_, p, _) = parse(l);
        assert!(
            p == pid || u32::try_from(p) == Ok(d.starter),
            "PID {p} is neither the daemon's ({pid}) nor the starter's ({}): {l:?}",
            d.starter
        );
    }
    let (pri, p, _) = parse(line_with(&lines, &listening));
    assert_eq!(
        (pri, p),
        (30, pid),
        "info, facility daemon, the daemon's PID"
    );
    let before = line_with(&lines, "no --config: starting with no targets");
    assert_eq!(parse(before).0, 30);
    assert_eq!(u32::try_from(parse(before).1), Ok(d.starter), "{before:?}");
    assert_ne!(
        u32::try_from(pid),
        Ok(d.starter),
        "the daemon is a new process"
    );

    // the terminal saw what came before detaching, not what came after
    let stderr = d.stderr();
    assert!(stderr.contains("no --config: starting"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    // and the running daemon holds no terminal
    let t = Instant::now();
    for fd in 0..3 {
        let link = format!("/proc/{pid}/fd/{fd}");
        loop {
            let to = std::fs::read_link(&link).unwrap_or_default();
            if to == Path::new("/dev/null") {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{link} -> {}, not /dev/null",
                to.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // a warning: <28>; the failed request itself is an info line
    d.admin(&NEW_TARGET).check("new target");
    let r = d.admin(&BAD_BSOPTS);
    assert!(!r.status.success(), "cache=bogus must be refused: {r}");
    let lines = recv_until(&rx, "management request failed");
    let (pri, p, msg) = parse(line_with(&lines, "--bsopts cache=bogus"));
    assert_eq!((pri, p), (28, pid), "{msg}");
    assert_eq!(parse(line_with(&lines, "management request failed")).0, 30);
    assert!(
        lines.iter().all(|l| parse(l).0 != 31),
        "no debug lines before `-n debug -v on`:\n{}",
        lines.join("\n")
    );

    // the run-time debug switch: <31> lines while on, none after off
    d.admin(&["--mode", "sys", "--op", "update", "-n", "debug", "-v", "on"])
        .check("debug on");
    d.admin(&["--mode", "target", "--op", "show"]).check("show");
    let lines = recv_until(&rx, "op=Show");
    let (pri, p, _) = parse(line_with(&lines, "management request mode=Target op=Show"));
    assert_eq!((pri, p), (31, pid));
    d.admin(&[
        "--mode", "sys", "--op", "update", "-n", "debug", "-v", "off",
    ])
    .check("debug off");
    drain(&rx);
    d.admin(&["--mode", "target", "--op", "show"]).check("show");
    let r = d.admin(&BAD_BSOPTS);
    assert!(!r.status.success(), "{r}");
    let lines = recv_until(&rx, "management request failed");
    assert!(
        lines.iter().all(|l| parse(l).0 != 31),
        "debug lines after `-n debug -v off`:\n{}",
        lines.join("\n")
    );

    // SIGTERM: the last line is in syslog too, and the daemon exits 0
    let code = d.stop();
    let lines = recv_until(&rx, "numatgtd stopped");
    assert_eq!(parse(line_with(&lines, "numatgtd stopped")).0, 30);
    assert_eq!(code, Some(0), "the detached daemon's exit after SIGTERM");
}

#[test]
fn foreground_numatgtd_leaves_syslog_alone() {
    require_numatgtd("syslog");
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, rx) = receiver(dir.path());
    let socket = path.display().to_string();
    let d = Daemon::start_like_tgtd_env(
        TargetKind::Numatgtd,
        &[],
        &[("NUMATGT_SYSLOG_SOCKET", socket.as_str())],
    );
    d.admin_tool(&numatgtadm_bin(), &NEW_TARGET)
        .check("new target");
    let r = d.admin_tool(&numatgtadm_bin(), &BAD_BSOPTS);
    assert!(!r.status.success(), "{r}");
    // the warning is on stderr (the harness's log file), as before
    let t = Instant::now();
    while !d.log().contains("--bsopts cache=bogus") {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no warning in the log\n{}",
            d.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        d.log()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("--bsopts cache=bogus")),
        "{}",
        d.log_tail(30)
    );
    let got = drain(&rx);
    assert!(
        got.is_empty(),
        "numatgtd -f sent to syslog:\n{}",
        got.join("\n")
    );
}

#[test]
fn without_a_syslog_socket_the_log_stays_on_stderr() {
    require_numatgtd("syslog");
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-socket");
    let d = Detached::start(dir, &missing);
    let listening = format!("listening on 127.0.0.1:{}", d.port);
    let t = Instant::now();
    while !d.stderr().contains(&listening) {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the detached daemon does not log to stderr:\n{}",
            d.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stderr = d.stderr();
    assert!(
        stderr.contains(&format!(
            "numatgtd: cannot log to syslog ({}",
            missing.display()
        )) && stderr.contains("the log stays on stderr"),
        "{stderr}"
    );
    let fd2 = std::fs::read_link(format!("/proc/{}/fd/2", d.pid())).expect("readlink fd 2");
    assert_eq!(fd2, d.dir.path().join("stderr"), "stderr is kept");
}
