//! The Ceph RBD backing store (issue 16) against a real local cluster (tools/ceph/up.sh,
//! torn down by PID): the rbd crate's calls on their own, then images served by numatgtd
//! with LUNs added through Debian's tgtadm `--bstype rbd`: qemu-img data integrity, the
//! libiscsi conformance suites for reads, writes, unmap, write same and sync, the data seen
//! by `rbd export`, online resize, a sick cluster (OSD killed), the cache mode in
//! `numatgtadm --dump` and a restart from it, and clear errors for a missing image, an
//! unreachable cluster and a host without librbd.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tests::cdb::{SYNC10, cdb10, sense_of};
use tests::ceph::Cluster;
use tests::daemon::TargetKind;
use tests::mgmt::{
    dumped_cache_modes, new_lun, new_open_target, numatgtadm_bin, restart_from_dump, update_lun1,
};
use tests::pdu::ScsiSession;
use tests::testcu::{SuiteResult, assert_clean, run_suite};
use tests::{Daemon, MIB, TEST_IQN, qemuio, tools};

/// libiscsi suites run on the RBD LUN: reads, writes (FUA included), UNMAP and WRITE SAME
/// (with and without UNMAP, on a thin LUN) and their VPD pages.
const RBD_SUITES: &[&str] = &[
    "SCSI.Read10",
    "SCSI.Read16",
    "SCSI.Write10",
    "SCSI.Write16",
    "SCSI.Unmap",
    "SCSI.WriteSame10",
    "SCSI.WriteSame16",
    "SCSI.ReadCapacity16",
];

/// numatgtd started as tgtd is, with `env` (e.g. NUMATGT_LIBRBD), and target 1 (`TEST_IQN`,
/// open to all) made through Debian's tgtadm.
fn daemon_with_target(env: &[(&str, &str)]) -> Daemon {
    tools::require_tool("tgtadm");
    let d = Daemon::start_like_tgtd_env(TargetKind::Numatgtd, &[], env);
    new_open_target(&d, "1", TEST_IQN);
    d
}

/// `tgtadm --op new --mode logicalunit --tid 1 --lun LUN --bstype rbd -b IMAGE --bsopts B`.
fn add_rbd_lun(d: &Daemon, lun: u64, image: &str, bsopts: &str) -> tools::ToolRun {
    let extra = ["--bstype", "rbd", "--bsopts", bsopts];
    new_lun(d, "1", &lun.to_string(), Path::new(image), &extra)
}

/// The capacity iscsi-readcapacity16 reports, in bytes.
fn capacity(url: &str) -> Option<u64> {
    let r = tools::run(30, "iscsi-readcapacity16", [url]);
    r.stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Total size:"))
        .and_then(|v| v.trim().parse().ok())
}

/// LUN 1's value of the rbd metric `name` (a counter, or a histogram's `_count`) for
/// operation `op` (`read`, `write`, `zero`, `flush`); 0 when the series is missing.
fn rbd_metric(d: &Daemon, name: &str, op: &str) -> f64 {
    let (code, body) = d.http_get("/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| l.contains(&format!("op=\"{op}\"")) && l.contains("lun=\"1\""))
        .find_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
}

type Completion = (u64, std::io::Result<usize>, Vec<u8>);

/// `n` completions from `rx`, each within 30 s.
fn completions(rx: &mpsc::Receiver<Completion>, n: usize) -> Vec<Completion> {
    (0..n)
        .map(|k| {
            rx.recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("completion {k} of {n}: {e}"))
        })
        .collect()
}

fn options(c: &Cluster, extra: &str) -> rbd::ClusterOptions {
    rbd::ClusterOptions::parse(&c.bsopts(extra), &[]).expect("bsopts")
}

/// The rbd crate on its own: blocking and asynchronous I/O, discard and zeroes, flush,
/// size, resize seen by a second client's update watch, and the exclusive lock passing
/// from one client to another by a break that fences the first.
#[test]
fn rbd_crate_calls_against_a_live_cluster() {
    let c = Cluster::start();
    c.create_image("api", 16 * MIB);
    let spec = rbd::ImageSpec::parse("rbd/api").expect("spec");
    let opts = options(&c, "");
    let img = rbd::open(&spec, &opts, false).expect("open");
    assert_eq!(img.size().expect("size"), 16 * MIB);

    // blocking round trip
    let data: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    img.write_at(&data, 3 * MIB).expect("write");
    let mut back = vec![0u8; data.len()];
    img.read_at(&mut back, 3 * MIB).expect("read");
    assert!(back == data, "blocking read differs from the write");
    // zeroes over a partial object, discard, flush
    img.write_zeroes(3 * MIB + 4096, 8192)
        .expect("write_zeroes");
    img.read_at(&mut back[..16384], 3 * MIB).expect("read");
    assert_eq!(&back[..4096], &data[..4096]);
    assert!(back[4096..12288].iter().all(|&b| b == 0), "zeroed range");
    assert_eq!(&back[12288..16384], &data[12288..16384]);
    img.flush().expect("flush");
    let e = img
        .read_at(&mut back[..4096], 16 * MIB - 2048)
        .expect_err("read past the end");
    assert!(e.raw_os_error().is_some(), "{e}");

    // asynchronous: 32 writes in flight, then reads, every completion exactly once
    let (tx, rx) = mpsc::channel::<Completion>();
    for i in 0..32u64 {
        let tx = tx.clone();
        let done = move |r, b| drop(tx.send((i, r, b)));
        img.aio_write(vec![i as u8 + 1; 65536], i * 65536, Box::new(done));
    }
    for (i, r, b) in completions(&rx, 32) {
        assert_eq!(
            r.expect("aio write"),
            0,
            "write {i}: librbd reports 0 for a write"
        );
        assert_eq!(b.len(), 65536);
    }
    for i in 0..32u64 {
        let tx = tx.clone();
        let done = move |r, b| drop(tx.send((i, r, b)));
        img.aio_read(vec![0u8; 65536], i * 65536, Box::new(done));
    }
    for (i, r, b) in completions(&rx, 32) {
        assert_eq!(r.expect("aio read"), 65536);
        assert!(b.iter().all(|&x| x == i as u8 + 1), "aio read {i} content");
    }
    let (ftx, frx) = mpsc::channel();
    let t2 = ftx.clone();
    img.aio_discard(0, 65536, Box::new(move |r, ()| drop(t2.send(r))));
    let t3 = ftx.clone();
    img.aio_write_zeroes(65536, 65536, Box::new(move |r, ()| drop(t3.send(r))));
    img.aio_flush(Box::new(move |r, ()| drop(ftx.send(r))));
    for _ in 0..3 {
        frx.recv_timeout(Duration::from_secs(30))
            .expect("completion")
            .expect("discard / zeroes / flush");
    }
    let mut z = vec![1u8; 65536];
    img.read_at(&mut z, 65536).expect("read");
    assert!(z.iter().all(|&b| b == 0), "aio_write_zeroes zeroed");

    // a resize by another client reaches this one's update watch
    let (wtx, wrx) = mpsc::channel();
    let wtx = std::sync::Mutex::new(wtx);
    img.update_watch(move || {
        let _ = wtx.lock().map(|t| t.send(()));
    })
    .expect("watch");
    c.rbd(60, &["resize", "--size", "32M", "rbd/api"])
        .check("rbd resize");
    wrx.recv_timeout(Duration::from_secs(30))
        .expect("update watch fired");
    let t0 = Instant::now();
    while img.size().expect("size") != 32 * MIB && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(img.size().expect("size"), 32 * MIB);

    // exclusive lock: ours, then broken by a second client, after which our write fails
    img.lock_acquire().expect("lock");
    assert!(img.is_lock_owner().expect("owner?"));
    let other = rbd::open(&spec, &opts, false).expect("second client");
    let owners = other.lock_owners().expect("owners");
    assert_eq!(owners.len(), 1, "{owners:?}");
    let t0 = Instant::now();
    other.lock_break(&owners[0]).expect("break");
    eprintln!("lock break took {:?}", t0.elapsed());
    other.lock_acquire().expect("second client takes the lock");
    assert!(other.is_lock_owner().expect("owner?"));
    let e = img.write_at(&data[..4096], 0).expect_err("fenced write");
    eprintln!("fenced write: {e}");
    assert_eq!(e.raw_os_error(), Some(libc::ESHUTDOWN), "{e}");
    other.lock_release().expect("release");

    // errors: a missing image, a missing pool
    let missing = rbd::ImageSpec::parse("rbd/nope").expect("spec");
    let e = rbd::open(&missing, &opts, false)
        .err()
        .expect("no such image");
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("rbd/nope"), "{e}");
    drop(other);
    drop(img);
}

/// An image served by numatgtd, its LUN added with Debian's tgtadm `--bstype rbd`: shown as
/// tgtd shows it; 64 MiB of random data written by qemu-img reads back byte-exact through
/// the target AND through `rbd export` (it is in Ceph); the libiscsi suites for reads,
/// writes, unmap and write same pass on it (thin); SYNCHRONIZE CACHE succeeds; an `rbd
/// resize` by another client reaches READ CAPACITY without any admin step.
#[test]
fn image_served_through_tgtadm() {
    let c = Cluster::start();
    c.create_image("disk1", 128 * MIB);
    let mut d = daemon_with_target(&[]);
    let t0 = Instant::now();
    add_rbd_lun(&d, 1, "rbd/disk1", &c.bsopts("")).check("tgtadm --bstype rbd");
    eprintln!("rbd LUN added in {:?}", t0.elapsed());
    let show = d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"]);
    show.check("tgtadm show");
    for want in [
        "Size: 134 MB, Block size: 512",
        "Backing store type: rbd",
        "Backing store path: rbd/disk1",
    ] {
        assert!(
            show.stdout.contains(want),
            "{want:?} not in\n{}",
            show.stdout
        );
    }
    assert!(!show.stdout.contains("keyring"), "{}", show.stdout);

    // 64 MiB of random data in, read back through the target and straight from Ceph
    let url = d.url(1);
    let t0 = Instant::now();
    let pattern = qemuio::write_random(&url, d.dir.path(), "pattern.bin", 64 * MIB as usize);
    eprintln!("qemu-img wrote 64 MiB in {:.1?}", t0.elapsed());
    let t0 = Instant::now();
    let back = qemuio::read_all(&url, d.dir.path(), "back.img").expect("qemu-img read");
    eprintln!("qemu-img read 128 MiB in {:.1?}", t0.elapsed());
    assert_eq!(back.len() as u64, 128 * MIB);
    assert!(
        back[..pattern.len()] == pattern[..],
        "read back differs from the write"
    );
    assert!(
        back[pattern.len()..].iter().all(|&b| b == 0),
        "past the data: zeros"
    );
    // what the cache still holds reaches Ceph at SYNCHRONIZE CACHE
    let mut s = ScsiSession::open(&d, "iqn.2026-01.test:rbd-sync");
    let (status, sense, _) = s.command(&SYNC10, &[], 0);
    assert_eq!(status, 0, "SYNCHRONIZE CACHE: {:x?}", sense_of(&sense));
    drop(s);
    let exported = d.dir.path().join("export.img");
    c.rbd(120, &["export", "rbd/disk1", &exported.to_string_lossy()])
        .check("rbd export");
    let ceph = std::fs::read(&exported).expect("exported image");
    assert!(
        ceph[..pattern.len()] == pattern[..],
        "rbd export differs from what was written"
    );
    // librbd's own latency, per operation, in the metrics; the cache fills were
    // asynchronous reads completed into the event threads
    for op in ["read", "write", "flush"] {
        let n = rbd_metric(&d, "numatgt_lun_rbd_op_duration_seconds_count", op);
        assert!(n >= 1.0, "rbd {op} latency count {n}");
    }
    let aio = rbd_metric(&d, "numatgt_lun_rbd_op_async_total", "read");
    assert!(aio >= 1.0, "asynchronous rbd reads: {aio}");

    // the conformance suites, on a thin LUN
    update_lun1(&d, "thin_provisioning=1").check("thin_provisioning=1");
    tools::require_tool("iscsi-test-cu");
    let results: Vec<SuiteResult> = RBD_SUITES
        .iter()
        .map(|suite| run_suite(&mut d, suite, "iscsi-test-cu-rbd", false))
        .collect();
    assert_clean(&results, "numatgtd rbd LUN (thin)", "iscsi-test-cu-rbd");

    // rbd resize by another client: READ CAPACITY follows
    assert_eq!(capacity(&url), Some(128 * MIB));
    c.rbd(60, &["resize", "--size", "192M", "rbd/disk1"])
        .check("rbd resize");
    let t0 = Instant::now();
    while capacity(&url) != Some(192 * MIB) && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(capacity(&url), Some(192 * MIB), "{}", d.log_tail(20));
    eprintln!("resize seen after {:?}", t0.elapsed());
    d.assert_alive("after the rbd LUN tests");
}

/// A sick cluster (its only OSD killed) gives SCSI errors within the op timeout set in
/// bsopts, never a hang, and numatgtd stays responsive to tgtadm meanwhile. Then clear
/// tgtadm errors: a missing image, an unreachable cluster (within the mount timeout).
#[test]
fn sick_cluster_gives_errors_not_hangs() {
    let c = Cluster::start();
    c.create_image("sick", 16 * MIB);
    let mut d = daemon_with_target(&[]);

    // a missing image: refused at once, the log says which
    let t0 = Instant::now();
    let r = add_rbd_lun(&d, 2, "rbd/nope", &c.bsopts(""));
    assert!(!r.status.success(), "a missing image was accepted\n{r}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let log = d.log();
    assert!(
        log.contains("rbd/nope") && log.contains("No such file"),
        "{}",
        d.log_tail(10)
    );

    // an unreachable cluster: a monitor address nobody listens on
    let dead = d.dir.path().join("dead.conf");
    let port = tests::daemon::free_port();
    std::fs::write(
        &dead,
        format!("[global]\nmon host = v2:127.0.0.1:{port}\nauth client required = none\n"),
    )
    .expect("conf");
    let t0 = Instant::now();
    let r = add_rbd_lun(
        &d,
        3,
        "rbd/sick",
        &format!("conf={};client_mount_timeout=3", dead.display()),
    );
    let took = t0.elapsed();
    assert!(
        !r.status.success(),
        "an unreachable cluster was accepted\n{r}"
    );
    assert!(took < Duration::from_secs(15), "tgtadm took {took:?}");
    eprintln!("unreachable cluster refused after {took:?}");
    assert!(
        d.log().contains("connecting to the cluster"),
        "{}",
        d.log_tail(10)
    );

    // the healthy LUN, uncached so that every read goes to the cluster
    add_rbd_lun(
        &d,
        1,
        "rbd/sick",
        &c.bsopts("cache=off;rados_osd_op_timeout=4"),
    )
    .check("tgtadm --bstype rbd");
    // the same image as a cached LUN (its fills land in cache blocks)
    add_rbd_lun(&d, 4, "rbd/sick", &c.bsopts("rados_osd_op_timeout=4")).check("cached LUN");
    let mut s = ScsiSession::open(&d, "iqn.2026-01.test:rbd-sick");
    let data = vec![0x5au8; 4096];
    let (status, sense, _) = s.command(&cdb10(0x2a, 8, 8), &data, 0);
    assert_eq!(
        status,
        0,
        "WRITE on the healthy cluster: {:x?}",
        sense_of(&sense)
    );

    c.kill_daemon("osd.0");
    let aio_before = rbd_metric(&d, "numatgt_lun_rbd_op_async_total", "read");
    let errors_before = rbd_metric(&d, "numatgt_lun_rbd_op_errors_total", "read");
    let t0 = Instant::now();
    let (status, sense, _) = s.command(&cdb10(0x28, 1024, 8), &[], 4096);
    let took = t0.elapsed();
    eprintln!(
        "READ with the OSD down: status {status:#x} sense {:x?} after {took:?}",
        sense_of(&sense)
    );
    assert_eq!(status, 0x02, "CHECK CONDITION expected");
    assert!(took < Duration::from_secs(20), "the error took {took:?}");
    // it was an asynchronous read that librados timed out, completed into the event thread
    assert_eq!(
        rbd_metric(&d, "numatgt_lun_rbd_op_async_total", "read") - aio_before,
        1.0,
        "the READ went through librbd aio"
    );
    assert_eq!(
        rbd_metric(&d, "numatgt_lun_rbd_op_errors_total", "read") - errors_before,
        1.0,
        "and failed there"
    );
    // reads in flight when the daemon stops are waited for (they land in cache blocks):
    // the cached LUN 4, with reads still in librbd at the stop below
    let perf = tools::require_tool("iscsi-perf");
    let mut reader = std::process::Command::new(perf)
        .args(["-m", "8", "-b", "8", "-r", &d.url(4)])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn iscsi-perf");
    std::thread::sleep(Duration::from_millis(1500));
    // the management socket answers meanwhile
    let t0 = Instant::now();
    d.tgtadm(&["--lld", "iscsi", "--op", "show", "--mode", "target"])
        .check("show");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "tgtadm show took {:?}",
        t0.elapsed()
    );
    drop(s);
    d.assert_alive("after the cluster went sick");
    let (status, took) = d.terminate(Duration::from_secs(30));
    // the reader goes before any assertion can fail (a failed test must not leave it)
    let _ = reader.kill();
    let _ = reader.wait();
    eprintln!("numatgtd stopped in {took:?} with its cluster sick: {status:?}");
    // reads in flight time out, then every LUN's final flush gives up together: no hang
    assert!(
        status.is_some_and(|s| s.success()),
        "numatgtd did not stop by itself with its cluster sick ({status:?})\n{}",
        d.log_tail(20)
    );
    // the event threads waited for the reads in librbd (timed out by librados, answered
    // as errors) before they ended and the cache went (its report is logged after)
    let log = d.log();
    let stop = log.find("SIGTERM: stopping").expect("the stop is logged");
    let report = log[stop..]
        .find("cache report:")
        .map(|i| stop + i)
        .unwrap_or_else(|| panic!("event threads never ended\n{}", d.log_tail(20)));
    assert!(
        log[stop..report].contains("lun=4"),
        "no read of LUN 4 was in flight at the stop, or it was not waited for\n{}",
        d.log_tail(30)
    );
}

/// Cache fills and uncached reads of rbd LUNs are librbd aio completed into the event
/// threads; `--io-engine threads` keeps them blocking calls on the I/O workers. Both give
/// the same bytes (written by the other path), and the metrics tell the paths apart.
#[test]
fn rbd_reads_are_aio_unless_io_engine_threads() {
    let c = Cluster::start();
    c.create_image("paths", 32 * MIB);
    let aio = daemon_with_target(&[]);
    let blocking =
        Daemon::start_like_tgtd_env(TargetKind::Numatgtd, &["--io-engine", "threads"], &[]);
    new_open_target(&blocking, "1", TEST_IQN);
    // LUN 1 uncached (every read a DirectRead), LUN 2 cached (every miss a fill)
    for d in [&aio, &blocking] {
        add_rbd_lun(d, 1, "rbd/paths", &c.bsopts("cache=off")).check("uncached LUN");
        add_rbd_lun(d, 2, "rbd/paths", &c.bsopts("")).check("cached LUN");
    }
    let pattern: Vec<u8> = (0..MIB as usize).map(|i| (i * 13 % 251) as u8).collect();
    let mut w = ScsiSession::open(&blocking, "iqn.2026-01.test:rbd-writer");
    for (k, chunk) in pattern.chunks(65536).enumerate() {
        let lba = 4 * MIB / 512 + k as u64 * 128;
        let (status, sense, _) = w.command(&cdb10(0x2a, lba, 128), chunk, 0);
        assert_eq!(status, 0, "WRITE {k}: {:x?}", sense_of(&sense));
    }
    drop(w);
    for (name, d, want_async) in [("aio", &aio, true), ("threads", &blocking, false)] {
        let before = rbd_metric(d, "numatgt_lun_rbd_op_async_total", "read");
        let reads_before = rbd_metric(d, "numatgt_lun_rbd_op_duration_seconds_count", "read");
        let mut s = ScsiSession::open(d, "iqn.2026-01.test:rbd-reader");
        for lun in [1u16, 2] {
            s.lun = lun;
            // the LUN's power-on unit attention first
            let _ = s.command(&[0; 6], &[], 0);
            for (k, chunk) in pattern.chunks(65536).enumerate() {
                let lba = 4 * MIB / 512 + k as u64 * 128;
                let (status, sense, data) = s.command(&cdb10(0x28, lba, 128), &[], 65536);
                assert_eq!(
                    status,
                    0,
                    "{name} LUN {lun} READ {k}: {:x?}",
                    sense_of(&sense)
                );
                assert!(data == chunk, "{name} LUN {lun} READ {k}: other bytes");
            }
        }
        drop(s);
        let reads =
            rbd_metric(d, "numatgt_lun_rbd_op_duration_seconds_count", "read") - reads_before;
        let async_reads = rbd_metric(d, "numatgt_lun_rbd_op_async_total", "read") - before;
        eprintln!("{name}: {reads} librbd reads, {async_reads} of them asynchronous");
        assert!(reads >= 16.0, "{name}: {reads} librbd reads");
        if want_async {
            assert_eq!(async_reads, reads, "{name}: every read asynchronous");
        } else {
            assert_eq!(async_reads, 0.0, "{name}: no asynchronous read");
        }
    }
    for (name, mut d) in [("threads", blocking), ("aio", aio)] {
        let (status, took) = d.terminate(Duration::from_secs(30));
        eprintln!("{name}: stopped in {took:?}");
        assert!(
            status.is_some_and(|s| s.success()),
            "{name}: {status:?}\n{}",
            d.log_tail(20)
        );
    }
}

/// `numatgtadm --dump` says each RBD LUN's cache mode as it runs: `off` for the uncached
/// one (an RBD image has no page cache; it was once dumped as `page`), `numa` for the
/// cached one; a daemon started from the dump runs and dumps the same, and serves what was
/// written before.
#[test]
fn rbd_luns_dump_their_cache_mode_and_restart_from_it() {
    let c = Cluster::start();
    c.create_image("plain", 8 * MIB);
    c.create_image("cached", 8 * MIB);
    let mut d = daemon_with_target(&[]);
    add_rbd_lun(&d, 1, "rbd/plain", &c.bsopts("cache=off")).check("uncached LUN");
    add_rbd_lun(&d, 2, "rbd/cached", &c.bsopts("")).check("cached LUN");
    let block: Vec<u8> = (0..4096).map(|i| (i * 7 % 253) as u8).collect();
    let mut s = ScsiSession::open(&d, "iqn.2026-01.test:rbd-dump");
    for lun in [1u16, 2] {
        s.lun = lun;
        // the LUN's power-on unit attention first
        let _ = s.command(&[0; 6], &[], 0);
        let (status, sense, _) = s.command(&cdb10(0x2a, 64, 8), &block, 0);
        assert_eq!(status, 0, "LUN {lun} WRITE: {:x?}", sense_of(&sense));
    }
    drop(s);
    let bin = numatgtadm_bin();
    let dumped = d.admin_tool(&bin, &["--dump"]);
    dumped.check("numatgtadm --dump");
    let want = vec![
        (TEST_IQN.to_string(), 1, Some(config::CacheMode::Off)),
        (TEST_IQN.to_string(), 2, Some(config::CacheMode::Numa)),
    ];
    assert_eq!(dumped_cache_modes(&dumped.stdout), want, "{dumped}");
    // a clean stop writes the cached LUN back and lets the images go
    let (status, _) = d.terminate(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        d.log_tail(20)
    );
    let again = restart_from_dump(d, &dumped.stdout);
    let redumped = again.admin_tool(&bin, &["--dump"]);
    redumped.check("numatgtadm --dump after the restart");
    assert_eq!(dumped_cache_modes(&redumped.stdout), want, "{redumped}");
    let mut s = ScsiSession::open(&again, "iqn.2026-01.test:rbd-dump");
    for lun in [1u16, 2] {
        s.lun = lun;
        let _ = s.command(&[0; 6], &[], 0);
        let (status, sense, data) = s.command(&cdb10(0x28, 64, 8), &[], 4096);
        assert_eq!(
            status,
            0,
            "restarted LUN {lun} READ: {:x?}",
            sense_of(&sense)
        );
        assert!(data == block, "restarted LUN {lun}: other bytes");
    }
}

/// A host without librbd (played with NUMATGT_LIBRBD naming a library that does not
/// exist): numatgtd runs, and an rbd LUN is refused at once, the log saying what to install.
#[test]
fn without_librbd_an_rbd_lun_is_refused_clearly() {
    let mut d = daemon_with_target(&[("NUMATGT_LIBRBD", "/nonexistent/librbd.so.1")]);
    let t0 = Instant::now();
    let r = add_rbd_lun(&d, 1, "rbd/disk", "conf=/nonexistent/ceph.conf");
    assert!(!r.status.success(), "accepted without librbd\n{r}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let log = d.log();
    assert!(
        log.contains("rbd backing store needs librbd (Debian: apt-get install librbd1)")
            && log.contains("/nonexistent/librbd.so.1"),
        "{}",
        d.log_tail(10)
    );
    d.assert_alive("after the refused rbd LUN");
}
