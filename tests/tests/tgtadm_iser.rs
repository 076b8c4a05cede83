//! `tgtadm --lld iser` against numatgtd on a host without an RDMA device (the iSER LLD is
//! `error`): Debian's tgtadm gets tgtd's "can't find the driver" for every iSER request, the
//! same transcript Debian's tgtd gives, while `--lld iscsi` keeps working and shows
//! `Driver: iscsi`. On a host with an RDMA device the test says so and checks nothing (the
//! iSER side needs the RDMA runtime).

use tests::mgmt::{IQN1, first_difference, normalise, step};
use tests::tools;
use tests::{Daemon, TargetKind};

fn has_rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// The `--lld iser` requests of every kind, then a target made over `--lld iscsi`.
fn lld_steps(d: &Daemon) -> String {
    let steps: Vec<Vec<&str>> = vec![
        vec!["--lld", "iser", "--mode", "target", "--op", "show"],
        vec![
            "--lld", "iser", "--mode", "target", "--op", "new", "--tid", "1", "-T", IQN1,
        ],
        vec!["--lld", "iser", "--mode", "portal", "--op", "show"],
        vec![
            "--lld",
            "iser",
            "--mode",
            "portal",
            "--op",
            "new",
            "--param",
            "portal=127.0.0.1:3999",
        ],
        vec![
            "--lld", "iser", "--mode", "conn", "--op", "show", "--tid", "1",
        ],
        vec![
            "--lld", "iscsi", "--mode", "target", "--op", "new", "--tid", "1", "-T", IQN1,
        ],
        vec!["--lld", "iser", "--mode", "target", "--op", "show"],
        vec![
            "--lld", "iscsi", "--mode", "target", "--op", "show", "--tid", "1",
        ],
        vec![
            "--lld", "iser", "--mode", "target", "--op", "delete", "--tid", "1",
        ],
        vec![
            "--lld", "iscsi", "--mode", "target", "--op", "delete", "--tid", "1",
        ],
        vec!["--lld", "iscsi", "--mode", "target", "--op", "show"],
    ];
    let mut out = String::new();
    for s in &steps {
        out.push_str(&normalise(&step(d, s), d));
    }
    out
}

#[test]
fn lld_iser_without_rdma_is_not_found_as_in_tgtd() {
    tools::require_tool("tgtadm");
    if has_rdma_device() {
        eprintln!("this host has an RDMA device: the iSER LLD is ready, nothing to check here");
        return;
    }
    let ours = Daemon::start_bare(TargetKind::Numatgtd);
    let got = lld_steps(&ours);
    // every iSER request: tgtd's error for an LLD that failed to initialise
    for cmd in [
        "$ tgtadm --lld iser --mode target --op show\n",
        "$ tgtadm --lld iser --mode target --op new --tid 1",
        "$ tgtadm --lld iser --mode portal --op show\n",
        "$ tgtadm --lld iser --mode portal --op new",
        "$ tgtadm --lld iser --mode target --op delete",
    ] {
        let at = got
            .find(cmd)
            .unwrap_or_else(|| panic!("{cmd:?} missing:\n{got}"));
        let rest = &got[at..];
        let block = rest[1..].find("$ tgtadm").map_or(rest, |e| &rest[..=e]);
        assert!(
            block.contains("tgtadm: can't find the driver"),
            "{cmd:?} was not refused as tgtd does:\n{block}"
        );
        assert!(!block.contains("[exit Some(0)]"), "{block}");
    }
    // the iscsi LLD works and the target shows its driver
    let r = ours.tgtadm(&[
        "--lld",
        "iscsi",
        "--mode",
        "target",
        "--op",
        "new",
        "--tid",
        "2",
        "-T",
        "iqn.2026-11.org.numatgt:t2",
    ]);
    r.check("new iscsi target");
    let r = ours.tgtadm(&["--lld", "iscsi", "--mode", "target", "--op", "show"]);
    r.check("show iscsi targets");
    assert!(
        r.stdout.contains(
            "Target 2: iqn.2026-11.org.numatgt:t2\n    System information:\n        Driver: iscsi\n"
        ),
        "{}",
        r.stdout
    );
    let sys = ours.tgtadm(&["--op", "show", "--mode", "sys"]);
    sys.check("show sys");
    assert!(sys.stdout.contains("    iser: error\n"), "{}", sys.stdout);

    // the same requests against Debian's tgtd give the same transcript
    let tgtd = Daemon::start_bare(TargetKind::Tgtd);
    let want = lld_steps(&tgtd);
    let report = tests::reports_dir().join("tgtadm-iser-transcripts.txt");
    let _ = std::fs::write(
        &report,
        format!("===== numatgtd =====\n{got}\n===== tgtd =====\n{want}"),
    );
    assert!(
        got == want,
        "tgtadm --lld iser transcripts differ ({}): {}",
        report.display(),
        first_difference(&got, &want)
    );
}
