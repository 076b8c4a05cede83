//! Live upgrade (issue 29, first step): `numatgtadm --upgrade` hands a numatgtd started as
//! tgtd, its target made with Debian's tgtadm, over to a new numatgtd process: the old one
//! asks its sessions to log out, writes its dirty cache back and exits; the new one serves
//! the same targets on the same (passed-on) portal, management socket and metrics port,
//! and reads back what was written before. A binary that cannot take over leaves the
//! running daemon serving, and the admin is told why.

use tests::daemon::{Daemon, TargetKind, require_numatgtd};
use tests::mgmt::{export_lun1, numatgtadm_bin};
use tests::pdu::ScsiSession;

const IQN: &str = "iqn.2026-11.org.numatgt:upgrade";
const INITIATOR: &str = "iqn.2026-11.org.numatgt:upgrade-host";

fn write_block(s: &mut ScsiSession, lba: u32, fill: u8) {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x2A;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[8] = 1;
    let (st, sense, _) = s.command(&cdb, &[fill; 512], 0);
    assert_eq!(st, 0, "WRITE(10): {sense:02x?}");
}

fn read_block(s: &mut ScsiSession, lba: u32) -> Vec<u8> {
    let mut cdb = [0u8; 10];
    cdb[0] = 0x28;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[8] = 1;
    let (st, sense, data) = s.command(&cdb, &[], 512);
    assert_eq!(st, 0, "READ(10): {sense:02x?}");
    data
}

/// numatgtd started as tgtd, a 16 MiB file LUN exported with Debian's tgtadm.
fn serving() -> (tempfile::TempDir, std::path::PathBuf, Daemon) {
    require_numatgtd("upgrade");
    let dir = tempfile::tempdir().expect("tempdir");
    let lun = dir.path().join("lun1.img");
    tests::daemon::create_sparse(&lun, 16 << 20);
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_lun1(&d, IQN, &lun, &[]);
    (dir, lun, d)
}

/// An executable shell script `name` in `dir`.
fn script(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).expect("script");
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    p
}

fn upgrade(d: &Daemon, extra: &[&str]) -> tests::tools::ToolRun {
    d.admin_tool(&numatgtadm_bin(), &[&["--upgrade"][..], extra].concat())
}

#[test]
fn upgrade_hands_the_daemon_over_and_the_data_and_targets_stay() {
    let (_dir, lun, d) = serving();
    let old = d.pid();
    // written into the cache (write cache on): the old daemon writes it back at handover
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    write_block(&mut s, 7, 0xA7);

    // this raw session does not answer the logout request: it is closed after the wait
    let r = upgrade(&d, &[]);
    assert!(r.status.success(), "{r}\n{}", d.log_tail(40));
    let line = r.stdout.trim();
    // the same process (systemd's main PID stays), running the new executable
    assert!(
        line.starts_with(&format!("upgraded: numatgtd pid {old} (")),
        "{line}"
    );
    assert!(line.contains("1 connections asked to log out"), "{line}");
    assert!(line.contains("not serving for "), "{line}");
    assert_eq!(d.pid(), old);
    drop(s);

    // the same target, LUN and data, on the same portal and management socket
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    assert!(show.status.success(), "{show}");
    assert!(show.stdout.contains(IQN), "{}", show.stdout);
    assert!(
        show.stdout
            .contains(&format!("Backing store path: {}", lun.display())),
        "{}",
        show.stdout
    );
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    assert_eq!(
        read_block(&mut s, 7),
        vec![0xA7; 512],
        "written before the upgrade"
    );
    write_block(&mut s, 8, 0xB8);
    assert_eq!(read_block(&mut s, 8), vec![0xB8; 512]);
    // the metrics listener was passed on too: the new process answers on it
    let (code, body) = d.http_get("/metrics").expect("metrics after the upgrade");
    assert_eq!(code, 200);
    assert!(
        body.contains("process_start_time_seconds"),
        "{}",
        &body[..body.len().min(400)]
    );
    // the upgrade's figures
    assert_eq!(d.metric("numatgt_upgrades_total", ""), 1.0);
    assert_eq!(
        d.metric("numatgt_upgrade_last_connections", "outcome=\"asked\""),
        1.0
    );
    assert!(d.metric("numatgt_upgrade_last_seconds", "phase=\"paused\"") > 0.0);
    let log = d.log();
    assert!(
        log.contains("listening socket taken over from the previous numatgtd"),
        "{}",
        d.log_tail(40)
    );

    // and again: the new executable hands over as the old one did
    drop(s);
    let r = upgrade(&d, &[]);
    assert!(
        r.status.success(),
        "second upgrade: {r}\n{}",
        d.log_tail(40)
    );
    assert!(
        r.stdout
            .starts_with(&format!("upgraded: numatgtd pid {old} (")),
        "{r}"
    );
    assert_eq!(d.metric("numatgt_upgrades_total", ""), 2.0, "carried on");
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    assert_eq!(read_block(&mut s, 8), vec![0xB8; 512]);
    assert_eq!(
        d.log()
            .matches("handover: taking over from the previous numatgtd")
            .count(),
        2,
        "{}",
        d.log_tail(40)
    );
}

#[test]
fn a_binary_that_cannot_take_over_leaves_the_daemon_serving() {
    let (dir, lun, d) = serving();
    let old = d.pid();
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    write_block(&mut s, 3, 0x33);

    // exits at once; then a file that is no executable at all
    let exits = script(dir.path(), "not-numatgtd", "exit 3\n");
    for (binary, says) in [
        (exits.display().to_string(), "exit status: 3"),
        (lun.display().to_string(), "cannot start"),
    ] {
        let r = upgrade(&d, &["--binary", &binary]);
        assert!(!r.status.success(), "{r}");
        assert!(
            r.stderr.contains(says) && r.stderr.contains("goes on serving"),
            "{binary}: {r}"
        );
        // the same process serves the same session
        assert_eq!(d.pid(), old);
        assert_eq!(read_block(&mut s, 3), vec![0x33; 512], "{binary}");
        write_block(&mut s, 4, 0x44);
        let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
        assert!(show.status.success() && show.stdout.contains(IQN), "{show}");
    }
}

#[test]
fn a_new_executable_that_vanishes_before_the_takeover_gives_way_to_the_old_one() {
    let (dir, _lun, d) = serving();
    let old = d.pid();
    {
        let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
        s.lun = 1;
        write_block(&mut s, 5, 0x55);
    }
    // passes the check, then is gone when the daemon executes it: the daemon has stopped
    // by then, and starts its own executable again on the same sockets
    let vanishing = script(
        dir.path(),
        "vanishing-numatgtd",
        &format!(
            "rm -f -- \"$0\"\nexec {} \"$@\"\n",
            tests::daemon::numatgtd_bin().display()
        ),
    );
    let r = upgrade(&d, &["--binary", &vanishing.display().to_string()]);
    assert!(!r.status.success(), "{r}");
    assert!(
        r.stderr.contains("starts again (same pid)"),
        "{r}\n{}",
        d.log_tail(30)
    );
    assert_eq!(d.pid(), old);
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    assert_eq!(read_block(&mut s, 5), vec![0x55; 512]);
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    assert!(show.status.success() && show.stdout.contains(IQN), "{show}");
    assert!(
        d.log().contains("mode=Resume"),
        "the old executable started again: {}",
        d.log_tail(30)
    );
}
