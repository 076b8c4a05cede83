//! Running external tools (libiscsi utilities, qemu-img, tgtadm) under `timeout`, with their
//! output captured, and checking that they exist: a missing tool is a test FAILURE with a
//! message that says how to install it, never a silent pass.

use std::ffi::OsStr;
use std::fmt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Where `name` lives in PATH, if anywhere.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Panics (fails the test) when a tool the test needs is missing.
pub fn require_tool(name: &str) -> PathBuf {
    find_in_path(name).unwrap_or_else(|| {
        panic!(
            "required tool `{name}` not found in PATH: run `sudo tools/install-test-deps.sh` \
             (CI installs it; this test does not skip)"
        )
    })
}

/// Panics unless running as root (tgtd and the VM need it).
pub fn require_root(what: &str) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "{what} needs root (this test does not skip)");
}

/// Result of one tool run.
pub struct ToolRun {
    pub cmdline: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl ToolRun {
    /// True when the tool was killed by `timeout` (exit 124, or 137 after the -k grace).
    pub fn timed_out(&self) -> bool {
        matches!(self.status.code(), Some(124) | Some(137))
    }

    /// Panics with the full output unless the tool exited 0.
    pub fn check(&self, ctx: &str) -> &Self {
        assert!(
            self.status.success(),
            "{ctx}: `{}` failed ({}{})\n{self}",
            self.cmdline,
            self.status,
            if self.timed_out() { ", TIMED OUT" } else { "" }
        );
        self
    }
}

impl fmt::Display for ToolRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "--- `{}` -> {} after {:.1?}",
            self.cmdline, self.status, self.elapsed
        )?;
        writeln!(f, "--- stdout:\n{}", self.stdout)?;
        write!(f, "--- stderr:\n{}", self.stderr)
    }
}

/// Runs `prog args...` under `timeout -k 5 SECS`, stdin closed, output captured.
pub fn run<I, S>(timeout_secs: u64, prog: &str, args: I) -> ToolRun
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_opts(timeout_secs, prog, args, false, &[])
}

/// Like [`run`], with extra environment variables for the tool (e.g. `TGT_IPC_SOCKET`).
pub fn run_env<I, S>(timeout_secs: u64, prog: &str, args: I, env: &[(&str, &OsStr)]) -> ToolRun
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_opts(timeout_secs, prog, args, false, env)
}

/// Like [`run`], with SIGPIPE ignored in the tool (inherited across exec through `sh`), so a
/// target that closes a connection makes the initiator see EPIPE instead of killing it.
/// libiscsi's iscsi-test-cu dies of SIGPIPE otherwise when a target drops a connection on a
/// protocol error, which is a legal reaction.
pub fn run_no_sigpipe<I, S>(timeout_secs: u64, prog: &str, args: I) -> ToolRun
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_opts(timeout_secs, prog, args, true, &[])
}

fn run_opts<I, S>(
    timeout_secs: u64,
    prog: &str,
    args: I,
    ignore_sigpipe: bool,
    env: &[(&str, &OsStr)],
) -> ToolRun
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    require_tool("timeout");
    if prog.contains('/') {
        assert!(
            std::path::Path::new(prog).is_file(),
            "program {prog} does not exist"
        );
    } else {
        require_tool(prog);
    }
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let cmdline = std::iter::once(prog.to_string())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    let start = Instant::now();
    let mut cmd = if ignore_sigpipe {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("trap '' PIPE; exec \"$@\"")
            .arg("sh")
            .arg("timeout");
        c
    } else {
        Command::new("timeout")
    };
    let out = cmd
        .arg("-k")
        .arg("5")
        .arg(timeout_secs.to_string())
        .arg(prog)
        .args(&args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot spawn `timeout {prog}`: {e}"));
    ToolRun {
        cmdline,
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: start.elapsed(),
    }
}

/// The size string `iscsi-ls -s` prints for a direct-access LUN: it multiplies the block
/// length by the LAST LBA from READ CAPACITY(10) (so 256 MiB prints as "255M") and divides by
/// 1024 while the value is above 1024.
pub fn iscsi_ls_size(block_size: u64, num_blocks: u64) -> String {
    const SUFFIX: [char; 5] = [' ', 'k', 'M', 'G', 'T'];
    let mut size = block_size * num_blocks.saturating_sub(1);
    let mut i = 0;
    while i < 4 && size > 1024 {
        size /= 1024;
        i += 1;
    }
    format!("{size}{}", SUFFIX[i])
}

/// Builds the preload fault shim (tests/fixtures/faultshim.c) into `dir` with cc and
/// returns the library's path (for `LD_PRELOAD`; numatgtd must run `--io-engine threads`,
/// whose I/O goes through the C library).
pub fn fault_shim(dir: &std::path::Path) -> String {
    let src = crate::workspace_root().join("tests/fixtures/faultshim.c");
    let so = dir.join("faultshim.so");
    require_tool("cc");
    run(
        60,
        "cc",
        [
            "-shared".to_string(),
            "-fPIC".into(),
            "-O2".into(),
            "-o".into(),
            so.display().to_string(),
            src.display().to_string(),
            "-ldl".into(),
        ],
    )
    .check("build the fault shim");
    so.display().to_string()
}
