//! Debian's `tgtadm` and `tgt-admin` drive numatgtd through its management socket: the same
//! command sequence runs against numatgtd and against Debian's tgtd (both started here with
//! their own `TGT_IPC_SOCKET` in a temp dir and their own loopback ports), and the outputs,
//! error messages and exit codes must match, byte for byte after normalising what must
//! differ (portal ports, session ids). Then `tgt-admin -e` configures numatgtd from a
//! targets.conf and libiscsi sees the result; hostile clients on the socket get tgtd's error
//! and the daemon keeps serving.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use tests::daemon::create_sparse;
use tests::tools;
use tests::{Daemon, TargetKind};

const IQN1: &str = "iqn.2026-11.org.numatgt:mgmt1";
const IQN2: &str = "iqn.2026-11.org.numatgt:mgmt2";

/// One step's transcript: command, exit code, stdout, stderr.
fn step(d: &Daemon, args: &[&str]) -> String {
    let r = d.tgtadm(args);
    assert!(!r.timed_out(), "tgtadm timed out: {r}");
    format!(
        "$ tgtadm {}\n[exit {:?}]\n{}{}",
        args.join(" "),
        r.status.code(),
        r.stdout,
        r.stderr
    )
}

/// The ports differ between the two daemons; session ids are each daemon's own.
fn normalise(text: &str, d: &Daemon) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let l = line.replace(&format!(":{}", d.port), ":PORT");
        let l = match l.split_once("I_T nexus: ") {
            Some((a, _)) => format!("{a}I_T nexus: SID"),
            None => l,
        };
        let l = match l.strip_prefix("Session: ") {
            Some(_) => "Session: SID".to_string(),
            None => l,
        };
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn sequence(d: &Daemon, files: &Path) -> String {
    let lun1 = files.join("lun1.img");
    let lun2 = files.join("lun2.img");
    let (l1, l2) = (lun1.to_string_lossy(), lun2.to_string_lossy());
    let missing = files.join("missing.img");
    let steps: Vec<Vec<&str>> = vec![
        vec![
            "--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", "1", "-T", IQN1,
        ],
        vec![
            "--lld",
            "iscsi",
            "--op",
            "new",
            "--mode",
            "target",
            "--tid",
            "1",
            "-T",
            "iqn.x:dup",
        ],
        vec![
            "--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", "2", "-T", IQN1,
        ],
        vec![
            "--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", "2", "-T", IQN2,
        ],
        vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "1",
            "-b",
            &l1,
        ],
        vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "2",
            "-b",
            &l2,
            "--blocksize",
            "4096",
        ],
        vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "1",
            "-b",
            &l1,
        ],
        vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "3",
            "-b",
            missing.to_str().unwrap_or("/nonexistent"),
        ],
        vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "3",
            "-b",
            &l2,
            "-E",
            "bogus",
        ],
        vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "9",
            "--lun",
            "3",
            "-b",
            &l2,
        ],
        vec![
            "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ],
        vec![
            "--op",
            "bind",
            "--mode",
            "target",
            "--tid",
            "1",
            "-I",
            "127.0.0.0/8",
        ],
        vec![
            "--op",
            "bind",
            "--mode",
            "target",
            "--tid",
            "1",
            "-Q",
            "iqn.1994-05.com.redhat:x",
        ],
        vec![
            "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ],
        vec![
            "--op",
            "new",
            "--mode",
            "account",
            "--user",
            "u1",
            "--password",
            "p1",
        ],
        vec![
            "--op",
            "new",
            "--mode",
            "account",
            "--user",
            "u2",
            "--password",
            "p2",
        ],
        vec![
            "--op",
            "new",
            "--mode",
            "account",
            "--user",
            "u1",
            "--password",
            "p3",
        ],
        vec![
            "--op", "bind", "--mode", "account", "--tid", "1", "--user", "u1",
        ],
        vec![
            "--op",
            "bind",
            "--mode",
            "account",
            "--tid",
            "1",
            "--user",
            "u2",
            "--outgoing",
        ],
        vec![
            "--op",
            "bind",
            "--mode",
            "account",
            "--tid",
            "1",
            "--user",
            "u1",
            "--outgoing",
        ],
        vec![
            "--op", "bind", "--mode", "account", "--tid", "1", "--user", "nobody",
        ],
        vec!["--op", "show", "--mode", "account"],
        vec!["--op", "show", "--mode", "target"],
        vec!["--op", "show", "--mode", "target", "--tid", "1"],
        vec!["--op", "show", "--mode", "target", "--tid", "9"],
        vec![
            "--op",
            "update",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "1",
            "--params",
            "vendor_id=ACME,product_id=Widget,product_rev=0042,scsi_id=myid,scsi_sn=mysn,removable=1,readonly=1,thin_provisioning=1",
        ],
        vec![
            "--op",
            "update",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "1",
            "--params",
            "bogus=1",
        ],
        vec![
            "--op", "update", "--mode", "target", "--tid", "1", "-n", "bogus", "-v", "1",
        ],
        vec![
            "--op",
            "update",
            "--mode",
            "target",
            "--tid",
            "1",
            "-n",
            "nop_interval",
            "-v",
            "5",
        ],
        vec![
            "--op",
            "update",
            "--mode",
            "target",
            "--tid",
            "1",
            "-n",
            "MaxRecvDataSegmentLength",
            "-v",
            "65536",
        ],
        vec![
            "--op",
            "update",
            "--mode",
            "target",
            "--tid",
            "1",
            "-n",
            "ImmediateData",
            "-v",
            "No",
        ],
        vec![
            "--op", "update", "--mode", "target", "--tid", "1", "-n", "state", "-v", "offline",
        ],
        vec!["--op", "show", "--mode", "target"],
        vec!["--op", "show", "--mode", "target", "--tid", "1"],
        vec![
            "--op", "update", "--mode", "target", "--tid", "1", "-n", "state", "-v", "ready",
        ],
        vec![
            "--op",
            "update",
            "--mode",
            "target",
            "--tid",
            "1",
            "-n",
            "nop_interval",
            "-v",
            "0",
        ],
        vec![
            "--op", "unbind", "--mode", "account", "--tid", "1", "--user", "u1",
        ],
        vec![
            "--op", "unbind", "--mode", "account", "--tid", "1", "--user", "u1",
        ],
        vec!["--op", "delete", "--mode", "account", "--user", "u2"],
        vec!["--op", "delete", "--mode", "account", "--user", "u2"],
        vec![
            "--op",
            "unbind",
            "--mode",
            "target",
            "--tid",
            "1",
            "-I",
            "127.0.0.0/8",
        ],
        vec![
            "--op",
            "unbind",
            "--mode",
            "target",
            "--tid",
            "1",
            "-I",
            "127.0.0.0/8",
        ],
        vec![
            "--op",
            "unbind",
            "--mode",
            "target",
            "--tid",
            "1",
            "-Q",
            "iqn.1994-05.com.redhat:x",
        ],
        vec!["--op", "stat", "--mode", "target", "--tid", "1"],
        vec!["--op", "show", "--mode", "portal"],
        vec!["--op", "show", "--mode", "lld"],
        vec!["--op", "stop", "--mode", "lld"],
        vec!["--op", "show", "--mode", "conn", "--tid", "1"],
        vec![
            "--op", "delete", "--mode", "conn", "--tid", "1", "--sid", "77", "--cid", "0",
        ],
        vec!["--op", "update", "--mode", "sys", "-n", "foo", "-v", "1"],
        vec![
            "--op",
            "delete",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "5",
        ],
        vec![
            "--op",
            "delete",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "2",
        ],
        vec!["--op", "delete", "--mode", "target", "--tid", "2"],
        vec!["--op", "delete", "--mode", "target", "--tid", "2"],
        vec!["--op", "show", "--mode", "target"],
    ];
    let mut out = String::new();
    for s in &steps {
        out.push_str(&normalise(&step(d, s), d));
    }
    out
}

fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            let from = i.saturating_sub(8);
            let ctx: Vec<&str> = a.lines().skip(from).take(i - from).collect();
            return format!(
                "line {}: numatgtd {x:?} vs tgtd {y:?}\ncontext:\n{}",
                i + 1,
                ctx.join("\n")
            );
        }
    }
    format!(
        "lengths differ: numatgtd {} lines, tgtd {} lines",
        a.lines().count(),
        b.lines().count()
    )
}

#[test]
fn tgtadm_sequence_matches_tgtd() {
    tools::require_tool("tgtadm");
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("lun1.img"), 1 << 30);
    create_sparse(&files.path().join("lun2.img"), 10 << 20);
    let ours = Daemon::start_bare(TargetKind::Numatgtd);
    let got = sequence(&ours, files.path());
    let tgtd = Daemon::start_bare(TargetKind::Tgtd);
    let want = sequence(&tgtd, files.path());
    let report = tests::reports_dir().join("tgtadm-transcripts.txt");
    let _ = std::fs::write(
        &report,
        format!("===== numatgtd =====\n{got}\n===== tgtd =====\n{want}"),
    );
    assert!(
        got == want,
        "tgtadm transcripts differ ({}): {}",
        report.display(),
        first_difference(&got, &want)
    );
}

/// A live session from iscsi-perf (bounded), for I_T nexus / conn output.
fn with_session<R>(d: &Daemon, iqn: &str, f: impl FnOnce() -> R) -> R {
    let url = format!("iscsi://127.0.0.1:{}/{iqn}/1", d.port);
    let mut child = std::process::Command::new("timeout")
        .args([
            "-k",
            "2",
            "6",
            "iscsi-perf",
            "-i",
            "iqn.2010-11.test:init",
            &url,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn iscsi-perf");
    // wait (bounded) until the session shows up
    let mut ok = false;
    for _ in 0..50 {
        let r = d.tgtadm(&["--op", "show", "--mode", "conn", "--tid", "1"]);
        if r.stdout.contains("Session:") {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = f();
    let _ = child.kill();
    let _ = child.wait();
    assert!(ok, "no session appeared within 5 s");
    r
}

fn session_steps(d: &Daemon, files: &Path) -> String {
    let lun1 = files.join("s1.img");
    let l1 = lun1.to_string_lossy();
    for s in [
        vec!["--op", "new", "--mode", "target", "--tid", "1", "-T", IQN1],
        vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "1",
            "--lun",
            "1",
            "-b",
            &l1,
        ],
        vec![
            "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ],
    ] {
        d.tgtadm(&s).check("setup");
    }
    with_session(d, IQN1, || {
        let mut out = String::new();
        for s in [
            vec!["--op", "show", "--mode", "target"],
            vec!["--op", "show", "--mode", "conn", "--tid", "1"],
            vec!["--op", "delete", "--mode", "target", "--tid", "1"],
            vec![
                "--op",
                "delete",
                "--mode",
                "logicalunit",
                "--tid",
                "1",
                "--lun",
                "9",
            ],
        ] {
            out.push_str(&normalise(&step(d, &s), d));
        }
        out
    })
}

#[test]
fn session_views_match_tgtd() {
    tools::require_tool("iscsi-perf");
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("s1.img"), 16 << 20);
    let ours = Daemon::start_bare(TargetKind::Numatgtd);
    let got = session_steps(&ours, files.path());
    let tgtd = Daemon::start_bare(TargetKind::Tgtd);
    let want = session_steps(&tgtd, files.path());
    assert!(
        got == want,
        "with a session: numatgtd\n{got}\n---- tgtd\n{want}\n{}",
        first_difference(&got, &want)
    );
}
