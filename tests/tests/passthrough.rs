//! SCSI passthrough (issue 27, `--bstype sg|bsg --device-type pt`) on the host, which has
//! no SCSI device to pass through (the QEMU guest's scsi_debug disk proves the data path:
//! `tools/vm/guest-passthrough.sh`): what Debian's tgtadm asks that is not a passthrough
//! LUN is refused by numatgtd as by Debian's tgtd — sg without `--device-type pt`, pt
//! without sg or bsg, flags a SCSI generic node does not take — and a path that is no SCSI
//! generic node (a file, `/dev/null`) is refused with a message that says what was
//! expected; no LUN is left behind.

use tests::daemon::{Daemon, TargetKind, require_numatgtd};
use tests::mgmt::{new_lun, tgtadm_ok};
use tests::tools;

/// Target 1, then every request of the table refused; the LUNs shown afterwards.
fn refusals(d: &Daemon, file: &std::path::Path) -> Vec<String> {
    tgtadm_ok(
        d,
        &[
            "--lld",
            "iscsi",
            "--op",
            "new",
            "--mode",
            "target",
            "--tid",
            "1",
            "-T",
            "iqn.2026-11.org.numatgt:pt",
        ],
    );
    let null = std::path::Path::new("/dev/null");
    let cases: [(&str, &std::path::Path, &[&str]); 7] = [
        ("sg without --device-type pt", null, &["--bstype", "sg"]),
        ("pt without --bstype", null, &["--device-type", "pt"]),
        (
            "pt on rdwr",
            file,
            &["--device-type", "pt", "--bstype", "rdwr"],
        ),
        (
            "sg with --bsoflags",
            null,
            &[
                "--device-type",
                "pt",
                "--bstype",
                "sg",
                "--bsoflags",
                "direct",
            ],
        ),
        (
            "sg on a file",
            file,
            &["--device-type", "pt", "--bstype", "sg"],
        ),
        (
            "sg on /dev/null",
            null,
            &["--device-type", "pt", "--bstype", "sg"],
        ),
        (
            "bsg on /dev/null",
            null,
            &["--device-type", "pt", "--bstype", "bsg"],
        ),
    ];
    for (i, (what, path, extra)) in cases.iter().enumerate() {
        let r = new_lun(d, "1", &(i + 1).to_string(), path, extra);
        assert!(!r.status.success(), "{what}: accepted\n{r}");
    }
    let shown = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    shown.check("tgtadm show");
    shown
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("LUN:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn what_is_no_passthrough_lun_is_refused_as_tgtd_refuses_it() {
    require_numatgtd("passthrough");
    tools::require_tool("tgtd");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("plain.img");
    std::fs::write(&file, vec![0u8; 1 << 20]).expect("write");

    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    let ours = refusals(&d, &file);
    let log = d.log_tail(80);
    for said in [
        "is not a character device: passthrough needs a SCSI generic node",
        "/dev/null is not a SCSI generic node (/dev/sgN",
        "/dev/null is not a bsg node (/dev/bsg/H:C:T:L)",
    ] {
        assert!(log.contains(said), "the log does not say {said:?}\n{log}");
    }
    drop(d);

    let t = Daemon::start_like_tgtd(TargetKind::Tgtd, &[]);
    let theirs = refusals(&t, &file);
    assert_eq!(ours, theirs, "the LUNs left: numatgtd's vs tgtd's");
    assert_eq!(
        ours,
        vec!["        LUN: 0".to_string()],
        "only the controller LUN"
    );
}
