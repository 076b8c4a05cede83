//! Live upgrade (issue 29, first step): `numatgtadm --upgrade` hands a numatgtd started as
//! tgtd, its target made with Debian's tgtadm, over to a new numatgtd process: the old one
//! asks its sessions to log out, writes its dirty cache back and exits; the new one serves
//! the same targets on the same (passed-on) portal, management socket and metrics port,
//! and reads back what was written before. A binary that cannot take over leaves the
//! running daemon serving, and the admin is told why.

use std::time::{Duration, Instant};

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

fn alive(pid: u32) -> bool {
    // a zombie is gone for this purpose
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// Stops a process this test does not hold a handle of (the new daemon), by PID.
struct StopPid(u32);

impl Drop for StopPid {
    fn drop(&mut self) {
        let signal = |sig: &str| {
            let _ = std::process::Command::new("kill")
                .args([sig, &self.0.to_string()])
                .status();
        };
        signal("-TERM");
        let t0 = Instant::now();
        while alive(self.0) && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(self.0) {
            signal("-KILL");
        }
    }
}

fn upgrade(d: &Daemon, extra: &[&str]) -> tests::tools::ToolRun {
    d.admin_tool(&numatgtadm_bin(), &[&["--upgrade"][..], extra].concat())
}

#[test]
fn upgrade_hands_the_daemon_over_and_the_data_and_targets_stay() {
    require_numatgtd("upgrade");
    let dir = tempfile::tempdir().expect("tempdir");
    let lun = dir.path().join("lun1.img");
    tests::daemon::create_sparse(&lun, 16 << 20);
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_lun1(&d, IQN, &lun, &[]);
    let old = d.pid();
    // written into the cache (write cache on): the old daemon writes it back at handover
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    write_block(&mut s, 7, 0xA7);

    // this raw session does not answer the logout request: it is closed after the wait
    let r = upgrade(&d, &[]);
    assert!(r.status.success(), "{r}\n{}", d.log_tail(40));
    let line = r.stdout.trim();
    assert!(line.starts_with("upgraded: numatgtd pid "), "{line}");
    assert!(line.contains("1 connections asked to log out"), "{line}");
    let new: u32 = line["upgraded: numatgtd pid ".len()..]
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the new pid");
    let _stop = StopPid(new);
    assert_ne!(new, old);
    assert!(alive(new), "the new numatgtd runs");
    let t0 = Instant::now();
    while alive(old) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(old), "the old numatgtd exited");
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
    let log = d.log();
    assert!(
        log.contains("listening socket taken over from the previous numatgtd"),
        "{}",
        d.log_tail(40)
    );

    // and again: the new process hands over as the old one did
    drop(s);
    let r = upgrade(&d, &[]);
    assert!(
        r.status.success(),
        "second upgrade: {r}\n{}",
        d.log_tail(40)
    );
    let third: u32 = r.stdout.trim()["upgraded: numatgtd pid ".len()..]
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the third pid");
    let _stop3 = StopPid(third);
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    assert_eq!(read_block(&mut s, 8), vec![0xB8; 512]);
}

#[test]
fn a_binary_that_cannot_take_over_leaves_the_daemon_serving() {
    require_numatgtd("upgrade");
    let dir = tempfile::tempdir().expect("tempdir");
    let lun = dir.path().join("lun1.img");
    tests::daemon::create_sparse(&lun, 16 << 20);
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_lun1(&d, IQN, &lun, &[]);
    let old = d.pid();
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    write_block(&mut s, 3, 0x33);

    // exits at once; then a file that is no executable at all
    let script = dir.path().join("not-numatgtd");
    std::fs::write(&script, "#!/bin/sh\nexit 3\n").expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    for (binary, says) in [
        (script.display().to_string(), "exit status: 3"),
        (lun.display().to_string(), "cannot start"),
    ] {
        let r = upgrade(&d, &["--binary", &binary]);
        assert!(!r.status.success(), "{r}");
        assert!(
            r.stderr.contains(says) && r.stderr.contains("goes on serving"),
            "{binary}: {r}"
        );
        // the same process serves the same session
        assert!(alive(old));
        assert_eq!(read_block(&mut s, 3), vec![0x33; 512], "{binary}");
        write_block(&mut s, 4, 0x44);
        let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
        assert!(show.status.success() && show.stdout.contains(IQN), "{show}");
    }
}
