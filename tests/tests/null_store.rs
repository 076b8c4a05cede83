//! The `null` backing store (tgtd's `--bstype null`, the benchmark floor): numatgtd started
//! the way tgtd is gets null LUNs from Debian's tgtadm, and tgtadm's transcript matches
//! Debian's tgtd for the same steps (refused `--bsoflags`, ignored `--bsopts`, the 1 TiB
//! size, the path shown back as given); libiscsi's tools see the size, reads return zeros
//! after writes (tgtd's null returns whatever its buffer held), `iscsi-perf` runs against it
//! for a bounded time and reports IOPS; YAML `bs_type: null` LUNs survive a
//! `numatgtadm --dump` and a restart from the dump.

use std::path::Path;
use std::time::Duration;

use tests::mgmt::{
    IQN1, dumped_cache_modes, first_difference, new_lun, new_open_target, normalise,
    numatgtadm_bin, restart_from_dump, step,
};
use tests::pdu::ScsiSession;
use tests::tools;
use tests::{Daemon, TargetKind};

/// Every null LUN's size: tgtd's 1 TiB.
const NULL_BYTES: u64 = 1 << 40;

/// tgtadm's steps, one command line each (no argument has a space).
const STEPS: &[&str] = &[
    "--lld iscsi --op new --mode target --tid 1 -T iqn.2026-11.org.numatgt:mgmt1",
    "--op new --mode logicalunit --tid 1 --lun 1 --bstype null -b X",
    "--op new --mode logicalunit --tid 1 --lun 1 --bstype null -b X",
    "--op new --mode logicalunit --tid 1 --lun 2 -E null -b /tmp/whatever --blocksize 4096",
    "--op new --mode logicalunit --tid 1 --lun 3 -E null -b Y --bsoflags direct",
    "--op new --mode logicalunit --tid 1 --lun 3 -E null -b Y --bsoflags sync",
    "--op new --mode logicalunit --tid 1 --lun 4 -E null -b Z --bsopts foo=1",
    "--op new --mode logicalunit --tid 1 --lun 5 -E null -b /dev/null --blocksize 1024",
    "--op new --mode logicalunit --tid 1 --lun 6 -E NULL -b W",
    "--op show --mode target",
    "--op update --mode logicalunit --tid 1 --lun 1 --params readonly=1,thin_provisioning=1",
    "--op delete --mode logicalunit --tid 1 --lun 2",
    "--op show --mode target",
];

fn sequence(d: &Daemon) -> String {
    assert!(STEPS[0].ends_with(IQN1));
    let mut out = String::new();
    for s in STEPS {
        let args: Vec<&str> = s.split_whitespace().collect();
        out.push_str(&normalise(&step(d, &args), d));
    }
    out
}

/// The same tgtadm steps against numatgtd and Debian's tgtd print the same.
#[test]
fn null_luns_through_tgtadm_match_tgtd() {
    tools::require_tool("tgtadm");
    let ours = Daemon::start_bare(TargetKind::Numatgtd);
    let got = sequence(&ours);
    let tgtd = Daemon::start_bare(TargetKind::Tgtd);
    let want = sequence(&tgtd);
    let report = tests::reports_dir().join("null-store-transcripts.txt");
    let _ = std::fs::write(
        &report,
        format!("===== numatgtd =====\n{got}\n===== tgtd =====\n{want}"),
    );
    assert!(
        got.contains("Backing store type: null") && got.contains("Size: 1099512 MB"),
        "{got}"
    );
    assert!(
        got == want,
        "tgtadm transcripts differ ({}): {}",
        report.display(),
        first_difference(&got, &want)
    );
}

/// READ(16)/WRITE(16) CDBs of `blocks` blocks at `lba`.
fn cdb16(op: u8, lba: u64, blocks: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = op;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

/// A null LUN made by tgtadm on numatgtd started as tgtd: its size through libiscsi, zeros
/// read back after writes (first, last block; past the end refused), and iscsi-perf's IOPS.
#[test]
fn null_lun_serves_zeros_and_iscsi_perf_runs() {
    let d = Daemon::start_bare(TargetKind::Numatgtd);
    new_open_target(&d, "1", IQN1);
    new_lun(&d, "1", "1", Path::new("nothing"), &["--bstype", "null"]).check("a null LUN");
    // both the "LUN ready" and the "LUN created" lines say so
    let log = d.log();
    let created = log
        .lines()
        .find(|l| l.contains("LUN created"))
        .unwrap_or("");
    assert!(
        created.contains("cache=\"off\"") || created.contains("cache=off"),
        "a null LUN is uncached unless asked:\n{}",
        d.log_tail(20)
    );
    let url = format!("iscsi://127.0.0.1:{}/{IQN1}/1", d.port);
    let cap = tools::run(20, "iscsi-readcapacity16", [url.as_str()]);
    cap.check("iscsi-readcapacity16");
    assert!(
        cap.stdout.contains(&format!("Total size:{NULL_BYTES}")),
        "{cap}"
    );
    assert!(
        cap.stdout.contains(&format!(
            "RETURNED LOGICAL BLOCK ADDRESS:{}",
            NULL_BYTES / 512 - 1
        )),
        "{cap}"
    );
    let inq = tools::run(20, "iscsi-inq", [url.as_str()]);
    inq.check("iscsi-inq");
    assert!(inq.stdout.contains("DIRECT_ACCESS"), "{inq}");

    // writes are acknowledged and dropped; reads return zeros
    let mut s = ScsiSession::open_target(&d, "iqn.2026-11.test:null", IQN1);
    let last = NULL_BYTES / 512 - 1;
    for lba in [0, 12345, last - 7] {
        let data = vec![0xABu8; 8 * 512];
        let (st, sense, _) = s.command(&cdb16(0x8A, lba, 8), &data, 0);
        assert_eq!(st, 0, "WRITE(16) at {lba}: {sense:?}");
        let (st, sense, back) = s.command(&cdb16(0x88, lba, 8), &[], 8 * 512);
        assert_eq!(st, 0, "READ(16) at {lba}: {sense:?}");
        assert_eq!(back.len(), 8 * 512);
        assert!(back.iter().all(|&b| b == 0), "zeros at {lba}");
    }
    let (st, _, _) = s.command(&cdb16(0x88, last, 2), &[], 1024);
    assert_eq!(st, 2, "a read past the end is refused");
    let (st, _, _) = s.command(&[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 0);
    assert_eq!(st, 0, "SYNCHRONIZE CACHE");
    drop(s);

    // iscsi-perf, bounded: it prints its IOPS every second and an average at SIGINT
    for random in [false, true] {
        let mut args = vec!["-k", "2", "-s", "INT", "4", "iscsi-perf", "-m", "16"];
        if random {
            args.push("-r");
        }
        args.push(&url);
        let run = tools::run(20, "timeout", args);
        let out = format!("{}{}", run.stdout, run.stderr).replace('\r', "\n");
        // "00:00:01 - lba N, iops current N (N MB/s), iops average N (N MB/s), ..."
        let iops: Vec<u64> = out
            .split("iops average ")
            .skip(1)
            .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
            .collect();
        assert!(
            iops.iter().any(|&n| n > 0),
            "iscsi-perf (random {random}) reported no IOPS:\n{out}\n{}",
            d.log_tail(20)
        );
    }
    std::thread::sleep(Duration::from_millis(200));
    d.tgtadm(&["--op", "show", "--mode", "target"])
        .check("still serving");
}

/// `bs_type: null` from YAML: served, dumped by `numatgtadm --dump` as `bs_type: null` with
/// the cache mode it runs with (`off` unless asked: no page cache), and a daemon started
/// from the dump shows the same LUN and dumps the same.
#[test]
fn yaml_null_lun_survives_dump_and_restart() {
    let bin = numatgtadm_bin();
    let a = Daemon::start_numatgtd_yaml(&|port| {
        format!(
            "portals:\n  - address: 127.0.0.1:{port}\n\
             targets:\n  - iqn: {IQN1}\n    luns:\n      - lun: 1\n        path: floor\n        \
             bs_type: null\n        block_size: 4096\n      - lun: 2\n        path: cached-floor\n        \
             bs_type: null\n        cache: numa\n"
        )
    });
    let show = |d: &Daemon| {
        let mut out = String::new();
        for s in [
            vec!["--op", "show", "--mode", "target"],
            vec!["--op", "show", "--mode", "target", "--tid", "1"],
        ] {
            out.push_str(&normalise(&step(d, &s), d));
        }
        out
    };
    let before = show(&a);
    assert!(before.contains("Backing store type: null"), "{before}");
    assert!(before.contains("Backing store path: floor"), "{before}");
    // the LUN that asked for the cache reads zeros through it too
    let mut s = ScsiSession::open_target(&a, "iqn.2026-11.test:null-yaml", IQN1);
    s.lun = 2;
    let mut read = || s.command(&cdb16(0x88, 100, 8), &[], 8 * 512);
    // the LU's power-on unit attention first
    let (st, sense, back) = (0..3)
        .map(|_| read())
        .find(|r| r.0 == 0)
        .unwrap_or_else(&mut read);
    assert_eq!(st, 0, "{sense:?}");
    assert!(back.iter().all(|&b| b == 0));
    drop(s);
    let dumped = a.admin_tool(&bin, &["--dump"]);
    dumped.check("numatgtadm --dump");
    // quoted: YAML's own null would do too, but a dump says exactly what it means
    let null_type = ["bs_type: 'null'", "bs_type: \"null\""];
    assert!(
        null_type.iter().any(|t| dumped.stdout.contains(t)),
        "{dumped}"
    );
    let modes = |dump: &str| {
        dumped_cache_modes(dump)
            .into_iter()
            .map(|(_, lun, mode)| (lun, mode))
            .collect::<Vec<_>>()
    };
    let want = vec![
        (1, Some(config::CacheMode::Off)),
        (2, Some(config::CacheMode::Numa)),
    ];
    assert_eq!(modes(&dumped.stdout), want, "{dumped}");
    let c = restart_from_dump(a, &dumped.stdout);
    let after = show(&c);
    assert!(
        before == after,
        "dump + restart changed the null LUNs:\n{}\n---- dump:\n{}",
        first_difference(&after, &before),
        dumped.stdout
    );
    let again = c.admin_tool(&bin, &["--dump"]);
    again.check("numatgtadm --dump after the restart");
    assert_eq!(modes(&again.stdout), want, "{again}");
}
