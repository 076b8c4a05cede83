//! numatgtd as tgtd users run it (issue 10): started exactly as tgtd is — `-f -C N --iscsi
//! portal=…`, no configuration file — it starts empty and waits; Debian's `tgtadm` and
//! `tgt-admin -e` then configure it, and the LUNs they make are served from the NUMA block
//! cache (the configured default mode) unless `--bsopts cache=off|page` says otherwise.
//! Proven by the cache counters numatgtd logs on SIGUSR1 and by `numatgtadm --dump`.

use std::path::Path;

use tests::MIB;
use tests::daemon::{Daemon, TargetKind, create_sparse, require_numatgtd};
use tests::mgmt::{new_lun, tgtadm_ok};
use tests::{qemuio, tools};

const IQN: &str = "iqn.2026-11.org.numatgt:dropin";

/// `tgtadm --op new --mode target` as tid 1 named [`IQN`], open to every initiator.
fn new_target(d: &Daemon) {
    tgtadm_ok(
        d,
        &[
            "--lld", "iscsi", "--op", "new", "--mode", "target", "--tid", "1", "-T", IQN,
        ],
    );
    tgtadm_ok(
        d,
        &[
            "--lld", "iscsi", "--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL",
        ],
    );
}

fn numatgtadm_bin() -> String {
    tests::daemon::numatgtd_bin()
        .with_file_name("numatgtadm")
        .to_string_lossy()
        .into_owned()
}

/// Random bytes written to LUN `lun` through qemu-img (libiscsi), returned for comparison.
fn write_pattern(d: &Daemon, iqn: &str, lun: u64, dir: &Path, size: usize) -> Vec<u8> {
    let url = format!("{}/{iqn}/{lun}", d.portal_url());
    qemuio::write_random(&url, dir, &format!("pattern{lun}.bin"), size)
}

fn read_lun(d: &Daemon, iqn: &str, lun: u64, dir: &Path, name: &str) -> Vec<u8> {
    qemuio::read_all(&format!("{}/{iqn}/{lun}", d.portal_url()), dir, name)
        .unwrap_or_else(|e| panic!("read LUN {lun}: {e}\n{}", d.log_tail(30)))
}

/// The `cache:` word numatgtadm --dump writes for LUN `lun` of `iqn`.
fn dumped_cache_mode(d: &Daemon, iqn: &str, lun: u64) -> String {
    let dump = d.admin_tool(&numatgtadm_bin(), &["--dump"]);
    dump.check("numatgtadm --dump");
    let cfg = config::parse(&dump.stdout, "dump").unwrap_or_else(|e| panic!("{e}\n{dump}"));
    let t = cfg.target(iqn).expect("target in the dump");
    let l = t
        .luns
        .iter()
        .find(|l| l.lun == lun)
        .expect("LUN in the dump");
    l.cache_mode(&cfg.cache).as_str().to_string()
}

#[test]
fn starts_empty_and_tgtadm_luns_are_served_from_the_numa_cache() {
    require_numatgtd("tgtd_dropin");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    assert!(
        d.log().contains("no --config: starting with no targets"),
        "{}",
        d.log_tail(20)
    );
    // nothing configured yet: discovery answers with no target
    let ls = tools::run(20, "iscsi-ls", ["-s", &d.portal_url()]);
    ls.check("iscsi-ls on an empty numatgtd");
    assert!(!ls.stdout.contains("Target:"), "{ls}");

    let dir = tempfile::tempdir().expect("tempdir");
    let size = 8 * MIB;
    let files: Vec<_> = (1..=3)
        .map(|n| {
            let p = dir.path().join(format!("lun{n}.img"));
            create_sparse(&p, size);
            p
        })
        .collect();
    new_target(&d);
    for (n, extra) in [
        ("1", &[][..]),
        ("2", &["--bsopts", "cache=off"][..]),
        ("3", &["--bsopts", "cache=page", "--bsoflags", "sync"][..]),
    ] {
        let i: usize = n.parse().expect("lun");
        new_lun(&d, "1", n, &files[i - 1], extra).check("tgtadm new logicalunit");
    }
    // the modes are visible in the dump and in the log; tgtadm's own view is tgtd's
    assert_eq!(dumped_cache_mode(&d, IQN, 1), "numa");
    assert_eq!(dumped_cache_mode(&d, IQN, 2), "off");
    assert_eq!(dumped_cache_mode(&d, IQN, 3), "page");
    let log = d.log();
    assert!(
        log.contains("LUN created") && log.contains("cache=\"numa\""),
        "{}",
        d.log_tail(20)
    );
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    show.check("tgtadm show");
    assert!(show.stdout.contains("Backing store flags: sync"), "{show}");

    // LUN 1 (numa): write, then read twice; the second read is served by the cache
    let data = write_pattern(&d, IQN, 1, dir.path(), size as usize);
    let before = d.cache_report();
    assert!(before.nodes >= 1 && before.capacity_bytes > 0, "{before:?}");
    let first = read_lun(&d, IQN, 1, dir.path(), "r1.img");
    assert!(
        first == data,
        "LUN 1 read back differs from what was written"
    );
    let mid = d.cache_report();
    let second = read_lun(&d, IQN, 1, dir.path(), "r2.img");
    assert!(second == data, "LUN 1 second read differs");
    let after = d.cache_report();
    // 8 MiB in 64 KiB blocks: 128 block lookups per full read, all hits the second time
    assert!(
        after.hits - mid.hits >= 128 && after.misses == mid.misses,
        "second read not served from the cache: {mid:?} -> {after:?}\n{}",
        d.log_tail(20)
    );
    assert!(after.resident_bytes >= size, "{after:?}");

    // LUNs 2 (off) and 3 (page) bypass the cache: their reads do not touch its counters
    for lun in [2u64, 3] {
        let data = write_pattern(&d, IQN, lun, dir.path(), size as usize);
        let a = d.cache_report();
        let back = read_lun(&d, IQN, lun, dir.path(), &format!("r{lun}.img"));
        assert!(back == data, "LUN {lun} read back differs");
        let b = d.cache_report();
        assert_eq!(
            (a.hits, a.misses, a.bypassed),
            (b.hits, b.misses, b.bypassed),
            "LUN {lun} used the cache"
        );
    }
    // the data is on disk once the LUN is deleted (cached data written back)
    tests::mgmt::delete_lun(&d, "1", "1").check("tgtadm delete LUN 1");
    let on_disk = std::fs::read(&files[0]).expect("read LUN 1 file");
    assert!(
        on_disk == data,
        "LUN 1's file does not hold the written data"
    );
}

#[test]
fn bad_cache_options_are_refused() {
    require_numatgtd("tgtd_dropin");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("lun.img");
    create_sparse(&f, 4 * MIB);
    new_target(&d);
    for bad in ["cache=fast", "cache", "speed=9", "cache=numa;x=1"] {
        let r = new_lun(&d, "1", "1", &f, &["--bsopts", bad]);
        assert!(!r.status.success(), "--bsopts {bad} accepted\n{r}");
    }
    // nothing was created by the refused requests
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    assert!(!show.stdout.contains("LUN: 1"), "{show}");
    new_lun(&d, "1", "1", &f, &["--bsopts", "cache=NUMA"]).check("--bsopts cache=NUMA");
    // the mode is chosen at creation; an update is refused and changes nothing
    let r = tests::mgmt::update_lun1(&d, "cache=off");
    assert!(!r.status.success(), "{r}");
    assert!(
        d.log()
            .contains("the cache mode is chosen when a LUN is created"),
        "{}",
        d.log_tail(10)
    );
    assert_eq!(dumped_cache_mode(&d, IQN, 1), "numa");
}

#[test]
fn tgt_admin_configures_an_empty_numatgtd_with_cached_luns() {
    require_numatgtd("tgtd_dropin");
    tools::require_tool("tgt-admin");
    let d = Daemon::start_like_tgtd(TargetKind::Numatgtd, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a.img"), dir.path().join("b.img"));
    create_sparse(&a, 4 * MIB);
    create_sparse(&b, 4 * MIB);
    let conf = dir.path().join("targets.conf");
    std::fs::write(
        &conf,
        format!(
            "<target {IQN}>\n    <backing-store {}>\n        lun 1\n    </backing-store>\n    <backing-store {}>\n        lun 2\n        bsopts cache=off\n    </backing-store>\n    initiator-address 127.0.0.1\n</target>\n",
            a.display(),
            b.display()
        ),
    )
    .expect("write targets.conf");
    let r = d.admin_tool("tgt-admin", &["-e", "-c", &conf.to_string_lossy()]);
    assert!(r.status.success(), "tgt-admin -e\n{r}\n{}", d.log_tail(30));
    assert_eq!(dumped_cache_mode(&d, IQN, 1), "numa");
    assert_eq!(dumped_cache_mode(&d, IQN, 2), "off");
    let data = write_pattern(&d, IQN, 1, dir.path(), 4 * MIB as usize);
    let x = d.cache_report();
    assert!(read_lun(&d, IQN, 1, dir.path(), "r.img") == data);
    let y = d.cache_report();
    assert!(y.hits > x.hits, "{x:?} -> {y:?}");
}
