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
    step_with(d, "tgtadm", args)
}

/// [`step`] with another tgtadm-compatible program (numatgtadm).
fn step_with(d: &Daemon, prog: &str, args: &[&str]) -> String {
    let r = d.admin_tool(prog, args);
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
    sequence_with(d, "tgtadm", files)
}

fn sequence_with(d: &Daemon, prog: &str, files: &Path) -> String {
    let lun1 = files.join("lun1.img");
    let lun2 = files.join("lun2.img");
    let (l1, l2) = (lun1.to_string_lossy(), lun2.to_string_lossy());
    let missing = files.join("missing.img");
    let steps: Vec<Vec<&str>> = vec![
        vec!["--op", "show", "--mode", "account"],
        vec!["--op", "show", "--mode", "target"],
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
        out.push_str(&normalise(&step_with(d, prog, s), d));
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

// ---------------------------------------------------------------------------------------
// numatgtd only: run-time changes seen by live sessions, ACLs and state at login, forced
// logout, hostile socket clients.

use tests::pdu::{self, Bhs, ReadOutcome};

/// REPORT LUNS on a raw session: the LUN numbers (peripheral addressing).
fn report_luns(s: &mut std::net::TcpStream, itt: u32, cmd_sn: u32) -> Vec<u64> {
    let mut bhs = Bhs::new(0x01, false)
        .flags(0xC1)
        .itt(itt)
        .set_u32(20, 4096)
        .set_u32(24, cmd_sn)
        .set_u32(28, 0);
    bhs.0[32] = 0xA0;
    bhs.0[38..42].copy_from_slice(&4096u32.to_be_bytes());
    s.write_all(bhs.bytes()).expect("send REPORT LUNS");
    let mut data = Vec::new();
    for _ in 0..8 {
        match pdu::read_pdu(s, Duration::from_secs(5)) {
            ReadOutcome::Pdu(p) => {
                if p.opcode() == 0x25 {
                    data.extend_from_slice(&p.data);
                    if p.flags() & 0x01 != 0 {
                        break;
                    }
                } else if p.opcode() == 0x21 {
                    break;
                }
            }
            other => panic!("no answer to REPORT LUNS: {other:?}"),
        }
    }
    assert!(data.len() >= 8, "short REPORT LUNS data {data:?}");
    let n = u32::from_be_bytes([data[0], data[1], data[2], data[3]]) as usize / 8;
    (0..n)
        .filter_map(|i| data.get(8 + i * 8..10 + i * 8))
        .map(|b| u64::from(u16::from_be_bytes([b[0] & 0x3f, b[1]])))
        .collect()
}

fn inq(d: &Daemon, iqn: &str, lun: u64) -> tools::ToolRun {
    tools::run(
        20,
        "iscsi-inq",
        [format!("iscsi://127.0.0.1:{}/{iqn}/{lun}", d.port)],
    )
}

#[test]
fn runtime_changes_reach_live_sessions_and_logins() {
    let files = tempfile::tempdir().expect("temp dir");
    for n in 1..=2 {
        create_sparse(&files.path().join(format!("r{n}.img")), 8 << 20);
    }
    let p = |n: u32| files.path().join(format!("r{n}.img")).display().to_string();
    let d = Daemon::start_bare(TargetKind::Numatgtd);
    let (p1, p2) = (p(1), p(2));
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
            &p1,
        ],
    ] {
        d.tgtadm(&s).check("setup");
    }
    // no ACL yet: nobody may log in (as tgtd), and discovery does not list the target
    let r = inq(&d, IQN1, 1);
    assert!(!r.status.success(), "login without an ACL succeeded: {r}");
    let ls = tools::run(20, "iscsi-ls", [d.portal_url()]);
    assert!(
        !ls.stdout.contains(IQN1),
        "discovery lists a target the initiator may not use: {ls}"
    );
    d.tgtadm(&[
        "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
    ])
    .check("bind ALL");
    inq(&d, IQN1, 1).check("inquiry after bind ALL");
    let ls = tools::run(20, "iscsi-ls", [d.portal_url()]);
    assert!(
        ls.stdout.contains(IQN1),
        "discovery misses the target: {ls}"
    );

    // a live session sees LUNs added and removed at run time
    let mut s = pdu::login_normal(d.addr(), "iqn.2026-11.org.numatgt:raw", IQN1)
        .expect("raw login")
        .stream;
    assert_eq!(report_luns(&mut s, 1, 1), vec![1]);
    d.tgtadm(&[
        "--op",
        "new",
        "--mode",
        "logicalunit",
        "--tid",
        "1",
        "--lun",
        "2",
        "-b",
        &p2,
    ])
    .check("add LUN 2");
    assert_eq!(report_luns(&mut s, 2, 2), vec![1, 2]);
    d.tgtadm(&[
        "--op",
        "delete",
        "--mode",
        "logicalunit",
        "--tid",
        "1",
        "--lun",
        "1",
    ])
    .check("delete LUN 1");
    assert_eq!(report_luns(&mut s, 3, 3), vec![2]);

    // identity updates show in INQUIRY
    d.tgtadm(&[
        "--op",
        "update",
        "--mode",
        "logicalunit",
        "--tid",
        "1",
        "--lun",
        "2",
        "--params",
        "vendor_id=ACME,product_id=Widget,product_rev=0042",
    ])
    .check("update identity");
    let r = inq(&d, IQN1, 2);
    r.check("inquiry after update");
    assert!(r.stdout.contains("Vendor:ACME"), "{r}");
    assert!(r.stdout.contains("Product:Widget"), "{r}");
    assert!(r.stdout.contains("Revision:0042"), "{r}");

    // the live session is listed, then logged out by force
    let conns = d.tgtadm(&["--op", "show", "--mode", "conn", "--tid", "1"]);
    let sid = conns
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Session: "))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no session listed: {conns}"));
    assert!(
        conns
            .stdout
            .contains("Initiator: iqn.2026-11.org.numatgt:raw"),
        "{conns}"
    );
    d.tgtadm(&[
        "--op", "delete", "--mode", "conn", "--tid", "1", "--sid", &sid, "--cid", "0",
    ])
    .check("conn delete");
    let (_, closed) = pdu::drain_until_close(&mut s, Duration::from_secs(5));
    assert!(closed, "the connection was not closed by conn delete");

    // state offline refuses logins; ready allows them again
    d.tgtadm(&[
        "--op", "update", "--mode", "target", "--tid", "1", "-n", "state", "-v", "offline",
    ])
    .check("offline");
    let r = inq(&d, IQN1, 2);
    assert!(
        !r.status.success(),
        "login to an offline target succeeded: {r}"
    );
    d.tgtadm(&[
        "--op", "update", "--mode", "target", "--tid", "1", "-n", "state", "-v", "ready",
    ])
    .check("ready");
    inq(&d, IQN1, 2).check("inquiry after ready");

    // an initiator-name rule that does not match refuses the login
    d.tgtadm(&[
        "--op",
        "bind",
        "--mode",
        "target",
        "--tid",
        "1",
        "-Q",
        "iqn.2026-11.other:host",
    ])
    .check("bind name");
    let r = inq(&d, IQN1, 2);
    assert!(
        !r.status.success(),
        "login by a non-listed initiator succeeded: {r}"
    );

    // target delete --force with a session closes it
    d.tgtadm(&[
        "--op",
        "unbind",
        "--mode",
        "target",
        "--tid",
        "1",
        "-Q",
        "iqn.2026-11.other:host",
    ])
    .check("unbind name");
    let mut s = pdu::login_normal(d.addr(), "iqn.2026-11.org.numatgt:raw", IQN1)
        .expect("raw login 2")
        .stream;
    let r = d.tgtadm(&["--op", "delete", "--mode", "target", "--tid", "1"]);
    assert_eq!(r.status.code(), Some(22), "{r}");
    assert!(r.stderr.contains("this target is still active"), "{r}");
    d.tgtadm(&[
        "--op", "delete", "--mode", "target", "--tid", "1", "--force",
    ])
    .check("delete --force");
    let (_, closed) = pdu::drain_until_close(&mut s, Duration::from_secs(5));
    assert!(closed, "delete --force left the session open");
    let r = d.tgtadm(&["--op", "show", "--mode", "target"]);
    assert_eq!(r.stdout, "", "{r}");
}

/// A raw request: header fields as tgtadm lays them out, then the payload.
fn raw_request(mode: u32, op: u32, tid: i32, len: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 120];
    b[0..4].copy_from_slice(&mode.to_le_bytes());
    b[4..8].copy_from_slice(&op.to_le_bytes());
    b[72..76].copy_from_slice(&len.to_le_bytes());
    b[76..80].copy_from_slice(&tid.to_le_bytes());
    b[88..96].copy_from_slice(&u64::MAX.to_le_bytes());
    b.extend_from_slice(payload);
    b
}

/// Send `bytes`, read the answer (err, text) if any.
fn exchange(path: &Path, bytes: &[u8]) -> Option<(u32, String)> {
    let mut s = UnixStream::connect(path).expect("connect to the management socket");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    if out.len() < 8 {
        return None;
    }
    let err = u32::from_le_bytes([out[0], out[1], out[2], out[3]]);
    let text = &out[8..];
    if let Some(last) = text.last() {
        assert_eq!(*last, 0, "a text answer must end with its NUL, as tgtd's");
    }
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    Some((err, String::from_utf8_lossy(&text[..end]).into_owned()))
}

fn assert_serving(d: &mut Daemon, ctx: &str) {
    d.assert_alive(ctx);
    let r = d.tgtadm(&["--op", "show", "--mode", "sys"]);
    assert!(
        r.status.success() && r.stdout.starts_with("System:"),
        "{ctx}: {r}"
    );
}

const INVALID_REQUEST: u32 = 17;

#[test]
fn hostile_socket_clients_get_errors_and_the_daemon_keeps_serving() {
    let mut d = Daemon::start_bare(TargetKind::Numatgtd);
    let path = d.mgmt_socket();
    // garbage shorter than a header, then close: no answer, no harm
    assert_eq!(exchange(&path, b"\x01\x02garbage"), None);
    assert_serving(&mut d, "after short garbage");
    // 120 random-ish bytes: the length field is nonsense
    let junk: Vec<u8> = (0..120u32).map(|i| (i * 37 + 11) as u8).collect();
    assert_eq!(exchange(&path, &junk).map(|r| r.0), Some(INVALID_REQUEST));
    assert_serving(&mut d, "after a junk header");
    // oversized: the header claims 1 MiB
    let big = raw_request(1, 2, -1, 1 << 20, &[b'a'; 64]);
    assert_eq!(exchange(&path, &big).map(|r| r.0), Some(INVALID_REQUEST));
    assert_serving(&mut d, "after an oversized request");
    // unknown mode and op
    assert_eq!(
        exchange(&path, &raw_request(99, 2, -1, 120, b"")).map(|r| r.0),
        Some(INVALID_REQUEST)
    );
    assert_eq!(
        exchange(&path, &raw_request(1, 42, -1, 120, b"")).map(|r| r.0),
        Some(INVALID_REQUEST)
    );
    // invalid UTF-8 payload
    let bad = raw_request(1, 0, 1, 124, &[0xff, 0xfe, 0xfd, 0]);
    assert_eq!(exchange(&path, &bad).map(|r| r.0), Some(INVALID_REQUEST));
    // target new without a name
    let r = raw_request(1, 0, 1, 121, &[0]);
    assert_eq!(exchange(&path, &r).map(|r| r.0), Some(INVALID_REQUEST));
    // a stuck client (header announces a payload it never sends) does not hang the socket
    let mut stuck = UnixStream::connect(&path).expect("connect");
    stuck
        .write_all(&raw_request(1, 2, -1, 200, b""))
        .expect("send partial request");
    let t0 = std::time::Instant::now();
    assert_serving(&mut d, "while a client is stuck");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "socket blocked by a stuck client"
    );
    drop(stuck);
    // a well-formed request through the raw path still works
    let ok = exchange(&path, &raw_request(0, 2, -1, 120, b"")).expect("answer");
    assert_eq!(ok.0, 0);
    assert!(ok.1.starts_with("System:\n    State: ready\n"), "{ok:?}");
}

#[test]
fn socket_refuses_other_users() {
    tools::require_tool("setpriv");
    let mut d = Daemon::start_bare(TargetKind::Numatgtd);
    let path = d.mgmt_socket();
    // let uid 65534 reach the socket at all: SO_PEERCRED must be what refuses it
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755));
    let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777));
    let ctl = d.control_port.to_string();
    let r = tools::run_env(
        20,
        "setpriv",
        [
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "tgtadm",
            "-C",
            &ctl,
            "--op",
            "show",
            "--mode",
            "sys",
        ],
        &[("TGT_IPC_SOCKET", d.ipc_prefix.as_os_str())],
    );
    assert!(!r.timed_out(), "{r}");
    assert!(!r.status.success(), "another uid was served: {r}");
    assert!(!r.stdout.contains("System:"), "{r}");
    assert!(
        d.log().contains("peer is neither root nor our uid"),
        "{}",
        d.log_tail(20)
    );
    assert_serving(&mut d, "after a refused peer");
}

// ---------------------------------------------------------------------------------------
// tgt-admin (Debian's Perl tool, which shells out to tgtadm) configures numatgtd from a
// targets.conf exactly as it configures tgtd.

fn targets_conf(files: &Path) -> String {
    let f = |n: &str| files.join(n).display().to_string();
    format!(
        "default-driver iscsi\n\
         <target {IQN1}>\n\
         \x20   backing-store {}\n\
         \x20   backing-store {}\n\
         \x20   initiator-address 127.0.0.1\n\
         \x20   vendor_id ACME\n\
         \x20   product_id Confdisk\n\
         \x20   MaxRecvDataSegmentLength 65536\n\
         </target>\n\
         <target {IQN2}>\n\
         \x20   <backing-store {}>\n\
         \x20       lun 5\n\
         \x20       scsi_sn SERIAL5\n\
         \x20   </backing-store>\n\
         \x20   initiator-name iqn.2026-11.org.numatgt:somebody-else\n\
         \x20   incominguser alice secretsecret12\n\
         \x20   outgoinguser bob secretsecret34\n\
         </target>\n",
        f("c1.img"),
        f("c2.img"),
        f("c3.img")
    )
}

fn tgt_admin_steps(d: &Daemon, conf: &Path) -> String {
    let c = conf.to_string_lossy();
    let mut out = String::new();
    let r = d.admin_tool("tgt-admin", &["-e", "-c", &c]);
    assert!(!r.timed_out(), "{r}");
    out.push_str(&format!(
        "$ tgt-admin -e\n[exit {:?}]\n{}{}",
        r.status.code(),
        r.stdout,
        r.stderr
    ));
    for s in [
        vec!["--op", "show", "--mode", "target"],
        vec!["--op", "show", "--mode", "target", "--tid", "1"],
        vec!["--op", "show", "--mode", "account"],
    ] {
        out.push_str(&normalise(&step(d, &s), d));
    }
    // a second run creates nothing new
    let r = d.admin_tool("tgt-admin", &["-e", "-c", &c]);
    out.push_str(&format!(
        "$ tgt-admin -e (again)\n[exit {:?}]\n",
        r.status.code()
    ));
    // the systemd unit's stop/reload steps: offline, ready, update from a changed file
    let changed = conf.with_file_name("targets-changed.conf");
    let text = std::fs::read_to_string(conf).expect("read targets.conf");
    std::fs::write(
        &changed,
        text.replace(
            "initiator-address 127.0.0.1",
            "initiator-address 127.0.0.0/8",
        )
        .replace(
            "MaxRecvDataSegmentLength 65536",
            "MaxRecvDataSegmentLength 32768",
        ),
    )
    .expect("write changed targets.conf");
    let cc = changed.to_string_lossy().into_owned();
    for args in [
        vec!["--offline", "ALL"],
        vec!["--ready", "tid=2"],
        vec!["--update", "ALL", "-f", "-c", &cc],
    ] {
        let r = d.admin_tool("tgt-admin", &args);
        assert!(!r.timed_out(), "{r}");
        out.push_str(&format!(
            "$ tgt-admin {}\n[exit {:?}]\n{}{}",
            args.join(" ").replace(&cc, "CHANGED"),
            r.status.code(),
            r.stdout,
            r.stderr
        ));
        out.push_str(&normalise(
            &step(d, &["--op", "show", "--mode", "target"]),
            d,
        ));
    }
    out.push_str(&normalise(
        &step(d, &["--op", "show", "--mode", "target", "--tid", "1"]),
        d,
    ));
    out
}

#[test]
fn tgt_admin_configures_numatgtd_like_tgtd() {
    tools::require_tool("tgt-admin");
    let files = tempfile::tempdir().expect("temp dir");
    for n in ["c1.img", "c2.img", "c3.img"] {
        create_sparse(&files.path().join(n), 32 << 20);
    }
    let conf = files.path().join("targets.conf");
    std::fs::write(&conf, targets_conf(files.path())).expect("write targets.conf");

    let ours = Daemon::start_bare(TargetKind::Numatgtd);
    let got = tgt_admin_steps(&ours, &conf);

    // libiscsi sees the result: target 1 with its two LUNs and identity; target 2 is not
    // offered to an initiator its ACL does not name
    let ls = tools::run(20, "iscsi-ls", ["-s", &ours.portal_url()]);
    ls.check("iscsi-ls");
    assert!(ls.stdout.contains(IQN1), "{ls}");
    assert!(!ls.stdout.contains(IQN2), "{ls}");
    let r = inq(&ours, IQN1, 2);
    r.check("iscsi-inq LUN 2");
    assert!(r.stdout.contains("Vendor:ACME"), "{r}");
    assert!(r.stdout.contains("Product:Confdisk"), "{r}");

    // tgt-admin --delete ALL removes everything again
    ours.admin_tool("tgt-admin", &["--delete", "ALL"])
        .check("tgt-admin --delete ALL");
    let r = ours.tgtadm(&["--op", "show", "--mode", "target"]);
    assert_eq!(r.stdout, "", "numatgtd still has targets: {r}");
    // tgt-admin refuses backing files another process holds open: stop ours first
    drop(ours);

    // the same file through the same tools against tgtd
    let tgtd = Daemon::start_bare(TargetKind::Tgtd);
    let want = tgt_admin_steps(&tgtd, &conf);
    let _ = std::fs::write(
        tests::reports_dir().join("tgt-admin-transcripts.txt"),
        format!("===== numatgtd =====\n{got}\n===== tgtd =====\n{want}"),
    );
    assert!(
        got == want,
        "tgt-admin results differ:\n{}\n---- numatgtd\n{got}\n---- tgtd\n{want}",
        first_difference(&got, &want)
    );
}

// ---------------------------------------------------------------------------------------
// numatgtadm: tgtadm's command line, compared with Debian's tgtadm.

fn numatgtadm_bin() -> String {
    let p = tests::daemon::numatgtd_bin().with_file_name("numatgtadm");
    assert!(
        p.is_file(),
        "numatgtadm not found at {} (build it: `cargo build -p tools`)",
        p.display()
    );
    p.display().to_string()
}

#[test]
fn numatgtadm_command_line_matches_tgtadm() {
    let bin = numatgtadm_bin();
    let nowhere = tempfile::tempdir().expect("temp dir");
    let prefix = nowhere.path().join("no-daemon");
    let cases: &[&str] = &[
        "",
        "--op show",
        "--mode target",
        "--op foo --mode target",
        "--op show --mode foo",
        "--op show --mode target extra",
        "--bogus",
        "-x",
        "--o show --m target",
        "--op new --mode target",
        "--op new --mode target --tid 0",
        "--op new --mode target --tid 1",
        "--op new --mode target --tid 1 -T x -l 3",
        "--op new --mode target -l 3",
        "--op delete --mode target --tid 1 -F",
        "--op delete --mode target --tid 1 -O x",
        "--op bind --mode target --tid 1",
        "--op unbind --mode target --tid 1",
        "--op update --mode target --tid 1 -n a",
        "--op update --mode target --tid 1 -P a=1",
        "--op start --mode target --tid 1",
        "--op new --mode account --user u",
        "--op new --mode account -u a -p b -O x",
        "--op bind --mode account",
        "--op show --mode account -t 1",
        "--op new --mode lu --tid 1",
        "--op show --mode lu",
        "--op new --mode lu --lun 1",
        "--op new --mode lu --tid 1 --lun 1 -T x",
        "--op delete --mode lu --tid 1 --lun 1 -b x",
        "--op stop --mode lu --tid 1 --lun 1",
        "--op new --mode lu --tid 1 --lun 1 -b /x -Y bogus",
        "--op new --mode lu --tid 1 --lun 1 -b /x -B 1",
        "--op new --mode portal",
        "--op new --mode portal -t 1",
        "--par portal=1.2.3.4 --op new --mode portal",
        "--op stop --mode portal",
        "--op new --mode lld",
        "--op show --mode lld -t 1",
        "--op stop --mode account",
        "--op update --mode sys",
        "--op update --mode sys -t 1 -n a -v b",
        "--tid abc --op show --mode target",
        "--tid -1 --op show --mode target",
        "--op show --mode target --tid 99999999999",
        "--lun -1 --op show --mode target",
        "--sid x --op show --mode target",
        "-C 40000 --op show --mode sys",
        "-C x --op show --mode sys",
        "--blocksize x --op show --mode target",
        "--op=show --mode=target -t1 -x",
        "--lu 3 --op show --mode target",
        "--tid",
        "--force=1 --op show --mode target",
        // no daemon behind the socket
        "--op show --mode target",
        "--op show --mode sys -t 1",
        "--op new --mode lu --tid 1 --lun 1",
    ];
    let mut diffs = Vec::new();
    for c in cases {
        let args: Vec<&str> = c.split_whitespace().collect();
        let env = [("TGT_IPC_SOCKET", prefix.as_os_str())];
        let theirs = tools::run_env(10, "tgtadm", &args, &env);
        let ours = tools::run_env(10, &bin, &args, &env);
        if (theirs.status.code(), &theirs.stdout, &theirs.stderr)
            != (ours.status.code(), &ours.stdout, &ours.stderr)
        {
            diffs.push(format!(
                "tgtadm {c}\n--- tgtadm:\n{theirs}\n--- numatgtadm:\n{ours}"
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} of {} differ:\n{}",
        diffs.len(),
        cases.len(),
        diffs.join("\n\n")
    );
}

#[test]
fn numatgtadm_drives_numatgtd_like_tgtadm() {
    let bin = numatgtadm_bin();
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("lun1.img"), 1 << 30);
    create_sparse(&files.path().join("lun2.img"), 10 << 20);
    let a = Daemon::start_bare(TargetKind::Numatgtd);
    let b = Daemon::start_bare(TargetKind::Numatgtd);
    let want = sequence_with(&a, "tgtadm", files.path()).replace("$ tgtadm", "$ X");
    let got = sequence_with(&b, &bin, files.path()).replace("$ tgtadm", "$ X");
    assert!(
        got == want,
        "numatgtadm vs tgtadm: {}",
        first_difference(&got, &want)
    );
    // --op delete --mode system stops the daemon and returns once it is gone
    let mut b = b;
    step_with(&b, &bin, &["--op", "delete", "--mode", "system"]);
    let (st, _) = b.terminate(Duration::from_secs(5));
    assert!(
        st.is_some_and(|s| s.success()),
        "numatgtd did not exit cleanly: {st:?}"
    );
}

#[test]
fn portals_added_and_removed_at_run_time() {
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("p1.img"), 8 << 20);
    let p1 = files.path().join("p1.img").display().to_string();
    let d = Daemon::start_bare(TargetKind::Numatgtd);
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
            &p1,
        ],
        vec![
            "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ],
    ] {
        d.tgtadm(&s).check("setup");
    }
    let port = tests::daemon::free_port();
    let portal = format!("portal=127.0.0.1:{port}");
    d.tgtadm(&["--op", "new", "--mode", "portal", "--param", &portal])
        .check("portal new");
    let r = d.tgtadm(&["--op", "new", "--mode", "portal", "--param", &portal]);
    assert!(
        r.stderr.contains("invalid request"),
        "duplicate portal: {r}"
    );
    let r = d.tgtadm(&["--op", "new", "--mode", "portal", "--param", "portal=bogus"]);
    assert!(r.stderr.contains("invalid request"), "bad portal: {r}");
    let shown = d.tgtadm(&["--op", "show", "--mode", "portal"]);
    assert_eq!(
        shown.stdout,
        format!(
            "Portal: 127.0.0.1:{port},1\nPortal: 127.0.0.1:{},1\n",
            d.port
        ),
        "{shown}"
    );
    // an initiator uses the new portal; discovery through it advertises both
    let url = format!("iscsi://127.0.0.1:{port}/{IQN1}/1");
    tools::run(20, "iscsi-inq", [&url]).check("inquiry through the new portal");
    let ls = tools::run(20, "iscsi-ls", [format!("iscsi://127.0.0.1:{port}")]);
    ls.check("discovery through the new portal");
    assert!(ls.stdout.contains(&format!("127.0.0.1:{port},1")), "{ls}");
    d.tgtadm(&["--op", "delete", "--mode", "portal", "--param", &portal])
        .check("portal delete");
    let r = tools::run(10, "iscsi-inq", [&url]);
    assert!(!r.status.success(), "the deleted portal still serves: {r}");
    assert!(
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_secs(2)
        )
        .is_err(),
        "the deleted portal still accepts"
    );
    let r = d.tgtadm(&["--op", "delete", "--mode", "portal", "--param", &portal]);
    assert!(r.stderr.contains("invalid request"), "{r}");
}

/// `numatgtadm --dump` writes the running state as YAML; a daemon started from it shows the
/// same targets.
#[test]
fn dump_recreates_the_running_targets() {
    let bin = numatgtadm_bin();
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("lun1.img"), 1 << 30);
    create_sparse(&files.path().join("lun2.img"), 10 << 20);
    let a = Daemon::start_bare(TargetKind::Numatgtd);
    let l1 = files.path().join("lun1.img").display().to_string();
    let l2 = files.path().join("lun2.img").display().to_string();
    for s in [
        vec!["--op", "new", "--mode", "target", "--tid", "3", "-T", IQN1],
        vec!["--op", "new", "--mode", "target", "--tid", "5", "-T", IQN2],
        vec![
            "--op",
            "new",
            "--mode",
            "logicalunit",
            "--tid",
            "3",
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
            "3",
            "--lun",
            "2",
            "-b",
            &l2,
            "-y",
            "4096",
            "-f",
            "direct",
        ],
        vec![
            "--op",
            "update",
            "--mode",
            "logicalunit",
            "--tid",
            "3",
            "--lun",
            "1",
            "--params",
            "vendor_id=ACME,scsi_sn=SN1,readonly=1",
        ],
        vec![
            "--op",
            "bind",
            "--mode",
            "target",
            "--tid",
            "3",
            "-I",
            "127.0.0.0/8",
        ],
        vec![
            "--op",
            "bind",
            "--mode",
            "target",
            "--tid",
            "3",
            "-Q",
            "iqn.2026-11.org.numatgt:one",
        ],
        vec![
            "--op", "bind", "--mode", "target", "--tid", "5", "-I", "ALL",
        ],
        vec![
            "--op",
            "update",
            "--mode",
            "target",
            "--tid",
            "3",
            "-n",
            "MaxBurstLength",
            "-v",
            "131072",
        ],
    ] {
        a.tgtadm(&s).check("setup");
    }
    a.tgtadm(&[
        "--op",
        "new",
        "--mode",
        "target",
        "--tid",
        "7",
        "-T",
        "iqn.2026-11.org.numatgt:closed",
    ])
    .check("closed target");
    let dumped = a.admin_tool(&bin, &["--dump"]);
    dumped.check("numatgtadm --dump");
    // a target nobody may use is not turned into one everybody may use
    assert!(
        dumped
            .stdout
            .contains("# not dumped: iqn.2026-11.org.numatgt:closed (tid 7)"),
        "{dumped}"
    );
    a.tgtadm(&["--op", "delete", "--mode", "target", "--tid", "7"])
        .check("delete closed target");
    let show = |d: &Daemon| {
        let mut out = String::new();
        for s in [
            vec!["--op", "show", "--mode", "target"],
            vec!["--op", "show", "--mode", "target", "--tid", "3"],
            vec!["--op", "show", "--mode", "account"],
            vec!["--op", "show", "--mode", "sys"],
        ] {
            out.push_str(&normalise(&step(d, &s), d));
        }
        out
    };
    let before = show(&a);
    // a daemon started from the dump (on a portal of its own) serves the same targets
    let old = format!("127.0.0.1:{}", a.port);
    drop(a);
    let text = dumped.stdout.clone();
    let c = Daemon::start_numatgtd_yaml(&|port| text.replace(&old, &format!("127.0.0.1:{port}")));
    let after = show(&c);
    assert!(
        before == after,
        "dump + restart changed the targets:\n{}\n---- dump:\n{}",
        first_difference(&after, &before),
        dumped.stdout
    );
}

/// Deleting a LUN that goes through the NUMA block cache (write cache on) first writes its
/// dirty blocks back: the backing file holds the data as soon as tgtadm returns.
#[test]
fn lun_delete_writes_cached_data_back() {
    let d = Daemon::start(&[tests::LunSpec::new(1, 512, 16 << 20)
        .with_cache("numa")
        .with_write_cache(true)]);
    let url = d.url(1);
    let r = tools::run(
        30,
        "qemu-io",
        [
            "-f",
            "raw",
            "-t",
            "unsafe",
            "-c",
            "write -P 0xa7 65536 131072",
            &url,
        ],
    );
    r.check("qemu-io write");
    let shown = d.tgtadm(&["--op", "show", "--mode", "target"]);
    let tid = shown
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Target "))
        .and_then(|l| l.split(':').next())
        .unwrap_or_else(|| panic!("no target shown: {shown}"))
        .to_string();
    d.tgtadm(&[
        "--op",
        "delete",
        "--mode",
        "logicalunit",
        "--tid",
        &tid,
        "--lun",
        "1",
    ])
    .check("delete the LUN");
    let data = std::fs::read(d.lun_path(1)).expect("read backing file");
    assert!(
        data[65536..65536 + 131072].iter().all(|&b| b == 0xa7),
        "the backing file misses data written before the LUN was deleted"
    );
    let r = d.tgtadm(&["--op", "show", "--mode", "target"]);
    assert!(!r.stdout.contains("LUN: 1"), "{r}");
}

/// CHAP accounts bound with tgtadm are enforced at login, as tgtd does: for a target, and
/// for discovery (`--op bind --mode account` without `--tid`).
fn chap_checks(d: &Daemon, files: &Path) -> Vec<String> {
    let p = files.join("chap.img").display().to_string();
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
            &p,
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
            "alice",
            "--password",
            "alicesecret12",
        ],
        vec![
            "--op", "bind", "--mode", "account", "--tid", "1", "--user", "alice",
        ],
    ] {
        d.tgtadm(&s).check("setup");
    }
    let url = |cred: &str| format!("iscsi://{cred}127.0.0.1:{}/{IQN1}/1", d.port);
    let mut out = Vec::new();
    let mut probe = |what: &str, prog: &str, u: String| {
        let r = tools::run(20, prog, [u]);
        assert!(!r.timed_out(), "{r}");
        out.push(format!(
            "{what}: {}",
            if r.status.success() { "ok" } else { "refused" }
        ));
    };
    probe("no credentials", "iscsi-inq", url(""));
    probe("wrong secret", "iscsi-inq", url("alice%wrongsecret12@"));
    probe("unknown user", "iscsi-inq", url("mallory%alicesecret12@"));
    probe("right secret", "iscsi-inq", url("alice%alicesecret12@"));
    let portal = |cred: &str| format!("iscsi://{cred}127.0.0.1:{}", d.port);
    probe("discovery, no accounts bound", "iscsi-ls", portal(""));
    d.tgtadm(&["--op", "bind", "--mode", "account", "--user", "alice"])
        .check("bind discovery account");
    probe("discovery, no credentials", "iscsi-ls", portal(""));
    probe(
        "discovery, right secret",
        "iscsi-ls",
        portal("alice%alicesecret12@"),
    );
    d.tgtadm(&[
        "--op", "unbind", "--mode", "account", "--tid", "1", "--user", "alice",
    ])
    .check("unbind target account");
    probe("after unbind, no credentials", "iscsi-inq", url(""));
    out
}

#[test]
fn chap_accounts_are_enforced_like_tgtd() {
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("chap.img"), 8 << 20);
    let ours = Daemon::start_bare(TargetKind::Numatgtd);
    let got = chap_checks(&ours, files.path());
    drop(ours);
    let tgtd = Daemon::start_bare(TargetKind::Tgtd);
    let want = chap_checks(&tgtd, files.path());
    assert_eq!(got, want, "numatgtd vs tgtd");
    assert_eq!(
        want,
        vec![
            "no credentials: refused",
            "wrong secret: refused",
            "unknown user: refused",
            "right secret: ok",
            "discovery, no accounts bound: ok",
            "discovery, no credentials: refused",
            "discovery, right secret: ok",
            "after unbind, no credentials: ok",
        ]
    );
}

/// A second login with the same initiator name and ISID reinstates (closes) the first
/// session, but only once it has authenticated: a login that fails CHAP leaves the live
/// session alone.
#[test]
fn reinstatement_needs_authentication() {
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("ri.img"), 8 << 20);
    let p = files.path().join("ri.img").display().to_string();
    let d = Daemon::start_bare(TargetKind::Numatgtd);
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
            &p,
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
            "alice",
            "--password",
            "alicesecret12",
        ],
    ] {
        d.tgtadm(&s).check("setup");
    }
    let who = "iqn.2026-11.org.numatgt:same";
    let mut a = pdu::login_normal(d.addr(), who, IQN1)
        .expect("login A")
        .stream;
    assert_eq!(report_luns(&mut a, 1, 1), vec![1]);
    d.tgtadm(&[
        "--op", "bind", "--mode", "account", "--tid", "1", "--user", "alice",
    ])
    .check("require CHAP");
    let b = pdu::login_normal(d.addr(), who, IQN1);
    assert!(b.is_err(), "a login without CHAP succeeded");
    assert_eq!(
        report_luns(&mut a, 2, 2),
        vec![1],
        "session A was disturbed"
    );
    d.tgtadm(&[
        "--op", "unbind", "--mode", "account", "--tid", "1", "--user", "alice",
    ])
    .check("drop CHAP");
    let _c = pdu::login_normal(d.addr(), who, IQN1).expect("login C");
    let (_, closed) = pdu::drain_until_close(&mut a, Duration::from_secs(5));
    assert!(closed, "session A was not reinstated by C");
}

/// `--mode sys --op update -n debug -v on` turns debug logging on at run time, `off` back.
#[test]
fn debug_flag_switches_logging() {
    let d = Daemon::start_bare(TargetKind::Numatgtd);
    let marker = "management request mode=Portal";
    d.tgtadm(&["--op", "show", "--mode", "portal"])
        .check("show");
    assert!(!d.log().contains(marker), "debug lines before debug=on");
    d.tgtadm(&["--op", "update", "--mode", "sys", "-n", "debug", "-v", "on"])
        .check("debug on");
    d.tgtadm(&["--op", "show", "--mode", "portal"])
        .check("show");
    let sys = d.tgtadm(&["--op", "show", "--mode", "sys"]);
    assert!(sys.stdout.contains("    debug: on\n"), "{sys}");
    assert!(d.log().contains(marker), "{}", d.log_tail(20));
    d.tgtadm(&[
        "--op", "update", "--mode", "sys", "-n", "debug", "-v", "off",
    ])
    .check("debug off");
    let n = d.log().matches(marker).count();
    d.tgtadm(&["--op", "show", "--mode", "portal"])
        .check("show");
    assert_eq!(
        d.log().matches(marker).count(),
        n,
        "debug lines after debug=off"
    );
}

/// A second daemon on the same control port stops at start, as tgtd does, and the first
/// keeps serving.
#[test]
fn second_daemon_on_the_same_control_port_is_refused() {
    let mut d = Daemon::start_bare(TargetKind::Numatgtd);
    let port = tests::daemon::free_port();
    let cfg = d.dir.path().join("second.yaml");
    std::fs::write(&cfg, format!("portals:\n  - address: 127.0.0.1:{port}\n"))
        .expect("write config");
    let ctl = d.control_port.to_string();
    let bin = tests::daemon::numatgtd_bin().display().to_string();
    let cfg_s = cfg.display().to_string();
    let r = tools::run_env(
        20,
        &bin,
        ["-f", "--config", &cfg_s, "-C", &ctl],
        &[("TGT_IPC_SOCKET", d.ipc_prefix.as_os_str())],
    );
    assert_eq!(r.status.code(), Some(1), "{r}");
    assert!(
        r.stderr.contains(&format!(
            "another tgtd is using {}.lock",
            d.mgmt_socket().display()
        )),
        "{r}"
    );
    assert_serving(&mut d, "after a second daemon was refused");
}

/// READ(10) past the end on a raw session: the sense response code of the CHECK CONDITION.
fn read_past_end_sense_code(s: &mut std::net::TcpStream, itt: u32, cmd_sn: u32) -> u8 {
    let mut bhs = Bhs::new(0x01, false)
        .flags(0xC1)
        .itt(itt)
        .set_u32(20, 512)
        .set_u32(24, cmd_sn)
        .set_u32(28, 0);
    bhs.0[8] = 0;
    bhs.0[9] = 1; // LUN 1
    bhs.0[32..42].copy_from_slice(&[0x28, 0, 0x7f, 0, 0, 0, 0, 0, 1, 0]);
    s.write_all(bhs.bytes()).expect("send READ(10)");
    for _ in 0..8 {
        match pdu::read_pdu(s, Duration::from_secs(5)) {
            ReadOutcome::Pdu(p) if p.opcode() == 0x21 => {
                assert_eq!(p.bhs[3], 0x02, "not CHECK CONDITION");
                return *p.data.get(2).expect("sense data");
            }
            ReadOutcome::Pdu(_) => continue,
            other => panic!("no response to READ(10): {other:?}"),
        }
    }
    panic!("no SCSI Response to READ(10)");
}

#[test]
fn sense_format_update_reaches_scsi() {
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("sf.img"), 1 << 20);
    let p = files.path().join("sf.img").display().to_string();
    let d = Daemon::start_bare(TargetKind::Numatgtd);
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
            &p,
        ],
        vec![
            "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ],
    ] {
        d.tgtadm(&s).check("setup");
    }
    let mut s = pdu::login_normal(d.addr(), "iqn.2026-11.org.numatgt:sf", IQN1)
        .expect("login")
        .stream;
    assert_eq!(read_past_end_sense_code(&mut s, 1, 1), 0x70);
    d.tgtadm(&[
        "--op",
        "update",
        "--mode",
        "logicalunit",
        "--tid",
        "1",
        "--lun",
        "1",
        "--params",
        "sense_format=1",
    ])
    .check("sense_format=1");
    assert_eq!(read_past_end_sense_code(&mut s, 2, 2), 0x72);
    d.tgtadm(&[
        "--op",
        "update",
        "--mode",
        "logicalunit",
        "--tid",
        "1",
        "--lun",
        "1",
        "--params",
        "sense_format=0,vendor_id=ACME",
    ])
    .check("sense_format=0 with a rebuild");
    assert_eq!(read_past_end_sense_code(&mut s, 3, 3), 0x70);
}
