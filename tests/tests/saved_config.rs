//! Saved configuration (issue 28, `--save-config`): what an administrator makes with
//! Debian's tgtadm at run time — a target, a LUN on a file, an ACL, an account — is written
//! to the state directory once it took effect and comes back when numatgtd is started
//! again, with the same data on the LUN; a `--config` file edited after the last save wins
//! at the next start; without the option nothing is saved.

use std::path::Path;

use tests::daemon::{Daemon, TargetKind, require_numatgtd};
use tests::mgmt::{export_lun1, tgtadm_ok, update_lun1};
use tests::pdu::ScsiSession;

const IQN: &str = "iqn.2026-11.org.numatgt:saved";
const INITIATOR: &str = "iqn.2026-11.org.numatgt:saved-host";

fn show(d: &Daemon) -> String {
    let r = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    r.check("tgtadm show");
    r.stdout
}

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

#[test]
fn what_tgtadm_made_comes_back_after_a_restart() {
    require_numatgtd("saved_config");
    let dir = tempfile::tempdir().expect("tempdir");
    let lun = dir.path().join("lun1.img");
    tests::daemon::create_sparse(&lun, 16 << 20);
    let mut d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &["--save-config"]);
    export_lun1(&d, IQN, &lun, &[]);
    update_lun1(&d, "scsi_sn=SAVED001").check("update scsi_sn");
    for args in [
        &[
            "--op",
            "new",
            "--mode",
            "account",
            "--user",
            "keeper",
            "--password",
            "keepersecret1",
        ][..],
        &[
            "--op", "bind", "--mode", "account", "--tid", "1", "--user", "keeper",
        ][..],
        &[
            "--op", "unbind", "--mode", "account", "--tid", "1", "--user", "keeper",
        ][..],
    ] {
        tgtadm_ok(&d, &[&["--lld", "iscsi"][..], args].concat());
    }
    let saved = d.state_dir.join("saved-config.yaml");
    let text = std::fs::read_to_string(&saved).expect("the saved configuration");
    assert!(
        text.contains(IQN) && text.contains("SAVED001") && text.contains("keeper"),
        "{text}"
    );
    {
        let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
        s.lun = 1;
        write_block(&mut s, 7, 0xA7);
    }
    let before = show(&d);

    d.restart();
    let after = show(&d);
    assert_eq!(
        before
            .lines()
            .filter(|l| !l.contains("I_T nexus") && !l.contains("Connection"))
            .count(),
        after
            .lines()
            .filter(|l| !l.contains("I_T nexus") && !l.contains("Connection"))
            .count(),
        "before:\n{before}\nafter:\n{after}"
    );
    assert!(after.contains(&format!("Target 1: {IQN}")), "{after}");
    assert!(after.contains("SCSI SN: SAVED001"), "{after}");
    assert!(
        after.contains(&format!("Backing store path: {}", lun.display())),
        "{after}"
    );
    assert!(
        d.log().contains("saved configuration"),
        "{}",
        d.log_tail(30)
    );
    let mut s = ScsiSession::open_target(&d, INITIATOR, IQN);
    s.lun = 1;
    assert_eq!(read_block(&mut s, 7), vec![0xA7; 512], "the LUN's data");
    drop(s);

    // a change after the restart is saved too: the target goes, and stays gone
    tgtadm_ok(
        &d,
        &[
            "--lld", "iscsi", "--op", "delete", "--mode", "target", "--tid", "1",
        ],
    );
    d.restart();
    assert!(!show(&d).contains(IQN), "{}", show(&d));
}

#[test]
fn a_config_file_edited_after_the_last_save_wins_and_without_the_option_nothing_is_saved() {
    require_numatgtd("saved_config");
    let dir = tempfile::tempdir().expect("tempdir");
    let lun = dir.path().join("lun1.img");
    tests::daemon::create_sparse(&lun, 16 << 20);
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    export_lun1(&d, IQN, &lun, &[]);
    assert!(
        !d.state_dir.join("saved-config.yaml").exists(),
        "saved without --save-config"
    );
    drop(d);

    // a YAML file older than the saved state loses; touched after it, it wins
    let yaml = dir.path().join("numatgt.yaml");
    std::fs::write(
        &yaml,
        format!(
            "targets:\n  - iqn: {IQN}-file\n    luns:\n      - lun: 1\n        path: {}\n",
            lun.display()
        ),
    )
    .expect("write yaml");
    let yaml_arg = yaml.to_string_lossy().into_owned();
    let mut d = Daemon::start_like_tgtd(
        TargetKind::Numatgtd,
        &["--save-config", "--config", &yaml_arg],
    );
    assert!(show(&d).contains(&format!("{IQN}-file")), "{}", show(&d));
    tgtadm_ok(
        &d,
        &[
            "--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", "9", "-T", IQN,
        ],
    );
    tgtadm_ok(
        &d,
        &[
            "--lld", "iscsi", "--op", "bind", "--mode", "target", "--tid", "9", "-I", "ALL",
        ],
    );
    d.restart();
    assert!(
        show(&d).contains(&format!("Target 9: {IQN}\n")),
        "{}",
        show(&d)
    );
    touch_later(&yaml);
    d.restart();
    let shown = show(&d);
    assert!(
        !shown.contains(&format!("Target 9: {IQN}\n")),
        "the edited file did not win\n{shown}"
    );
    assert!(
        d.log().contains("written after the saved configuration"),
        "{}",
        d.log_tail(30)
    );
}

/// Sets `p`'s modification time a minute ahead, as an edit after the last save.
fn touch_later(p: &Path) {
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(p)
        .and_then(|f| f.set_modified(later))
        .expect("touch");
}
