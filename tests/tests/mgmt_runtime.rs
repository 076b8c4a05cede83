//! numatgtd's management socket at run time: LUN changes seen by live sessions, ACLs, state
//! and CHAP at login, forced logout, reinstatement only after authentication, portals bound
//! and closed, `--dump` and a restart from it, cached data written back on LUN delete, the
//! debug switch, sense format, burst length updates (FirstBurstLength ≤ MaxBurstLength), and
//! hostile or foreign clients on the socket (tgtd's errors, SO_PEERCRED, the lock file).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use tests::daemon::create_sparse;
use tests::mgmt::{
    INVALID_REQUEST, IQN1, IQN2, assert_serving, data_in, exchange, export_lun, first_difference,
    inq, normalise, numatgtadm_bin, raw_request, read_past_end_sense_code, report_luns,
    restart_from_dump, step, update_lun1,
};
use tests::pdu;
use tests::tools;
use tests::{Daemon, TargetKind};

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

#[test]
fn portals_added_and_removed_at_run_time() {
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("p1.img"), 8 << 20);
    let p1 = files.path().join("p1.img").display().to_string();
    let d = Daemon::start_bare(TargetKind::Numatgtd);
    export_lun(&d, "1", IQN1, &p1);
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
    let c = restart_from_dump(a, &dumped.stdout);
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

/// A second login with the same initiator name and ISID reinstates (closes) the first
/// session, but only once it has authenticated: a login that fails CHAP leaves the live
/// session alone.
#[test]
fn reinstatement_needs_authentication() {
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("ri.img"), 8 << 20);
    let p = files.path().join("ri.img").display().to_string();
    let d = Daemon::start_bare(TargetKind::Numatgtd);
    export_lun(&d, "1", IQN1, &p);
    d.tgtadm(&[
        "--op",
        "new",
        "--mode",
        "account",
        "--user",
        "alice",
        "--password",
        "alicesecret12",
    ])
    .check("setup");
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

/// The same initiator port (name and ISID) logged in to two targets has two sessions (two
/// I_T nexuses): the second login must not reinstate — close — the first.
#[test]
fn same_initiator_port_on_two_targets_keeps_both_sessions() {
    let files = tempfile::tempdir().expect("temp dir");
    for f in ["t1.img", "t2.img"] {
        create_sparse(&files.path().join(f), 8 << 20);
    }
    let d = Daemon::start_bare(TargetKind::Numatgtd);
    export_lun(
        &d,
        "1",
        IQN1,
        &files.path().join("t1.img").display().to_string(),
    );
    export_lun(
        &d,
        "2",
        IQN2,
        &files.path().join("t2.img").display().to_string(),
    );
    let who = "iqn.2026-11.org.numatgt:one-port";
    let mut a = pdu::login_normal(d.addr(), who, IQN1)
        .expect("login to target 1")
        .stream;
    let mut b = pdu::login_normal(d.addr(), who, IQN2)
        .expect("login to target 2")
        .stream;
    assert_eq!(
        report_luns(&mut a, 1, 1),
        vec![1],
        "session to target 1 after the second login"
    );
    assert_eq!(report_luns(&mut b, 1, 1), vec![1], "session to target 2");
    assert!(
        !d.log().contains("session reinstated"),
        "a login to another target reinstated a session\n{}",
        d.log_tail(20)
    );
    // the same port to the same target again: that one is a reinstatement
    let _c = pdu::login_normal(d.addr(), who, IQN1).expect("login to target 1 again");
    let (_, closed) = pdu::drain_until_close(&mut a, Duration::from_secs(5));
    assert!(closed, "the first session to target 1 was not reinstated");
    assert_eq!(
        report_luns(&mut b, 2, 2),
        vec![1],
        "session to target 2 was disturbed"
    );
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

#[test]
fn sense_format_and_thin_provisioning_updates_reach_scsi() {
    let files = tempfile::tempdir().expect("temp dir");
    create_sparse(&files.path().join("sf.img"), 1 << 20);
    let p = files.path().join("sf.img").display().to_string();
    let d = Daemon::start_bare(TargetKind::Numatgtd);
    export_lun(&d, "1", IQN1, &p);
    let mut s = pdu::login_normal(d.addr(), "iqn.2026-11.org.numatgt:sf", IQN1)
        .expect("login")
        .stream;
    assert_eq!(read_past_end_sense_code(&mut s, 1, 1), 0x70);
    update_lun1(&d, "sense_format=1").check("sense_format=1");
    assert_eq!(read_past_end_sense_code(&mut s, 2, 2), 0x72);
    update_lun1(&d, "sense_format=0,vendor_id=ACME").check("sense_format=0 with a rebuild");
    assert_eq!(read_past_end_sense_code(&mut s, 3, 3), 0x70);
    // thin_provisioning: READ CAPACITY(16) reports LBPME
    let rc16 = [0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0];
    let lbpme = |s: &mut std::net::TcpStream, itt| {
        let d = data_in(s, itt, itt, 1, &rc16, 32).expect("READ CAPACITY(16)");
        d[14] & 0x80 != 0
    };
    assert!(!lbpme(&mut s, 4));
    update_lun1(&d, "thin_provisioning=1").check("thin_provisioning=1");
    assert!(lbpme(&mut s, 5), "LBPME not set after thin_provisioning=1");
    update_lun1(&d, "thin_provisioning=0,product_id=Other")
        .check("thin_provisioning=0 with a rebuild");
    assert!(
        !lbpme(&mut s, 6),
        "LBPME still set after thin_provisioning=0"
    );
}

/// `--op update` of the burst lengths keeps FirstBurstLength ≤ MaxBurstLength as the
/// configuration file does: a value breaking it is an invalid request and changes nothing.
#[test]
fn burst_length_updates_keep_first_within_max() {
    let d = Daemon::start_bare(TargetKind::Numatgtd);
    d.tgtadm(&["--op", "new", "--mode", "target", "--tid", "1", "-T", IQN1])
        .check("target new");
    let update = |key: &str, value: &str| {
        d.tgtadm(&[
            "--op", "update", "--mode", "target", "--tid", "1", "-n", key, "-v", value,
        ])
    };
    let bursts = || {
        let shown = d.tgtadm(&["--op", "show", "--mode", "target", "--tid", "1"]);
        shown.check("show target");
        let value = |key: &str| {
            shown
                .stdout
                .lines()
                .find_map(|l| {
                    l.trim()
                        .strip_prefix(&format!("{key}="))
                        .map(str::to_string)
                })
                .unwrap_or_else(|| panic!("{key} not shown: {shown}"))
        };
        (value("FirstBurstLength"), value("MaxBurstLength"))
    };
    for (key, value) in [("FirstBurstLength", "524288"), ("MaxBurstLength", "4096")] {
        let r = update(key, value);
        assert!(r.stderr.contains("invalid request"), "{key}={value}: {r}");
    }
    assert_eq!(bursts(), ("65536".into(), "262144".into()));
    update("FirstBurstLength", "4096").check("first burst down");
    update("MaxBurstLength", "8192").check("max burst down");
    assert_eq!(bursts(), ("4096".into(), "8192".into()));
}
