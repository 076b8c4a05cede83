//! Debian's `tgtadm` and `tgt-admin` drive numatgtd through its management socket: the same
//! command sequence runs against numatgtd and against Debian's tgtd (both started here with
//! their own `TGT_IPC_SOCKET` in a temp dir and their own loopback ports), and the outputs,
//! error messages and exit codes must match, byte for byte after normalising what must
//! differ (portal ports, session ids): tgtadm's own sequence, live-session views,
//! `tgt-admin -e/--offline/--ready/--update` from a targets.conf, CHAP enforcement; and
//! `numatgtadm` against Debian's tgtadm (command line, messages, exit codes).

use std::path::Path;
use std::time::Duration;

use tests::daemon::create_sparse;
use tests::mgmt::{IQN1, IQN2, first_difference, inq, normalise, numatgtadm_bin, step, step_with};
use tests::pdu::ScsiSession;
use tests::tools;
use tests::{Daemon, TargetKind};

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
    // SIGTERM to `timeout`, which passes it on to iscsi-perf: a SIGKILL would end `timeout`
    // alone and leave iscsi-perf running for ever (it retries a vanished target)
    tests::daemon::send_signal(child.id(), libc::SIGTERM);
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
         \x20   write-cache off\n\
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
    // `write-cache off` (tgt-admin: --params mode_page=8:0:...): the Caching page's WCE is 0
    let mut s = ScsiSession::open_target(&ours, "iqn.2026-11.org.numatgt:wce-probe", IQN1);
    for lun in [1u16, 2] {
        s.lun = lun;
        let _ = s.command(&[0; 6], &[], 0);
        let (st, sense, page) = s.command(&[0x1a, 0x08, 0x08, 0, 252, 0], &[], 252);
        assert_eq!(st, 0, "MODE SENSE LUN {lun}: {sense:x?}");
        assert_eq!(page.get(4).map(|p| p & 0x3f), Some(0x08), "{page:x?}");
        assert_eq!(
            page.get(6).map(|b| b & 0x04),
            Some(0),
            "LUN {lun}: WCE set: {page:x?}"
        );
    }
    drop(s);

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

/// CHAP secrets never leave the daemon except to the initiator they authenticate: after
/// logins with the right secret, a wrong one and an unknown user (debug logging on), and
/// with the accounts bound for a target and for discovery, neither the log nor any `show`
/// output holds a secret.
#[test]
fn chap_secrets_stay_out_of_logs_and_show() {
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("chap.img"), 8 << 20);
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &["-d", "1"]);
    let outcomes = chap_checks(&d, files.path());
    assert!(
        outcomes.iter().any(|o| o == "right secret: ok")
            && outcomes.iter().any(|o| o == "wrong secret: refused"),
        "the logins this test relies on did not happen: {outcomes:?}"
    );
    // an outgoing (mutual CHAP) account too: its secret is the target's own
    for s in [
        vec![
            "--op",
            "new",
            "--mode",
            "account",
            "--user",
            "tgtout",
            "--password",
            "outgoingsecret34",
        ],
        vec![
            "--op",
            "bind",
            "--mode",
            "account",
            "--tid",
            "1",
            "--user",
            "tgtout",
            "--outgoing",
        ],
    ] {
        d.tgtadm(&s).check("outgoing account");
    }
    let secrets = ["alicesecret12", "wrongsecret12", "outgoingsecret34"];
    let mut shown = String::new();
    for mode in [
        "target", "account", "system", "session", "conn", "lld", "portal",
    ] {
        let r = d.tgtadm(&["--op", "show", "--mode", mode]);
        shown.push_str(&format!("--- show {mode}\n{}\n{}\n", r.stdout, r.stderr));
    }
    assert!(
        shown.contains("alice") && shown.contains("tgtout"),
        "the accounts are not listed at all:\n{shown}"
    );
    let log = d.log();
    assert!(
        log.contains("DEBUG") || log.contains("debug"),
        "no debug lines: the log level did not apply\n{}",
        d.log_tail(10)
    );
    for s in secrets {
        assert!(
            !shown.contains(s),
            "`show` output holds the secret {s}:\n{shown}"
        );
        assert!(
            !log.contains(s),
            "the daemon log holds the secret {s}:\n{}",
            log.lines()
                .filter(|l| l.contains(s))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}
