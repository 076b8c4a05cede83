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
    lun_rbd_metric(d, 1, name, op)
}

/// [`rbd_metric`] of LUN `lun`.
fn lun_rbd_metric(d: &Daemon, lun: u64, name: &str, op: &str) -> f64 {
    let (code, body) = d.http_get("/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    let lun = format!("lun=\"{lun}\"");
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| l.contains(&format!("op=\"{op}\"")) && l.contains(&lun))
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

/// With the cluster sick: `cdb` (`op`: READ, WRITE or UNMAP) on `s` ends in CHECK CONDITION
/// within 20 s, as one asynchronous librbd operation of its kind (UNMAP's: zero) that
/// failed (the metrics).
fn fails_through_aio(
    d: &Daemon,
    s: &mut ScsiSession,
    op: &str,
    cdb: &[u8],
    data: &[u8],
    read_len: u32,
) {
    let kind = match op {
        "UNMAP" => "zero".to_string(),
        other => other.to_ascii_lowercase(),
    };
    let aio_before = rbd_metric(d, "numatgt_lun_rbd_op_async_total", &kind);
    let errors_before = rbd_metric(d, "numatgt_lun_rbd_op_errors_total", &kind);
    let t0 = Instant::now();
    let (status, sense, _) = s.command(cdb, data, read_len);
    let took = t0.elapsed();
    eprintln!(
        "{op} with the OSD down: status {status:#x} sense {:x?} after {took:?}",
        sense_of(&sense)
    );
    assert_eq!(status, 0x02, "{op}: CHECK CONDITION expected");
    assert!(
        took < Duration::from_secs(20),
        "{op}: the error took {took:?}"
    );
    assert_eq!(
        rbd_metric(d, "numatgt_lun_rbd_op_async_total", &kind) - aio_before,
        1.0,
        "the {op} went through librbd aio"
    );
    assert_eq!(
        rbd_metric(d, "numatgt_lun_rbd_op_errors_total", &kind) - errors_before,
        1.0,
        "the {op} failed there"
    );
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
    update_lun1(&d, "thin_provisioning=1").check("thin_provisioning=1");
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
    // a READ and an uncached WRITE: asynchronous librbd calls that librados timed out,
    // completed into the event thread as CHECK CONDITION
    fails_through_aio(&d, &mut s, "READ", &cdb10(0x28, 1024, 8), &[], 4096);
    fails_through_aio(&d, &mut s, "WRITE", &cdb10(0x2a, 2048, 8), &data, 0);
    let mut unmap = vec![0u8; 24];
    unmap[1] = 22;
    unmap[3] = 16;
    unmap[8..16].copy_from_slice(&4096u64.to_be_bytes());
    unmap[16..20].copy_from_slice(&64u32.to_be_bytes());
    let cdb = [0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0];
    fails_through_aio(&d, &mut s, "UNMAP", &cdb, &unmap, 0);
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

/// libiscsi suites run on an uncached RBD LUN, whose writes and flushes are librbd aio:
/// writes of every kind (FUA among them), and COMPARE AND WRITE, ORWRITE and WRITE ATOMIC,
/// whose exclusive range holds must wait for the asynchronous writes.
const RBD_UNCACHED_SUITES: &[&str] = &[
    "SCSI.Read10",
    "SCSI.Write10",
    "SCSI.Write12",
    "SCSI.Write16",
    "SCSI.WriteVerify10",
    "SCSI.WriteVerify16",
    "SCSI.CompareAndWrite",
    "SCSI.OrWrite",
    "SCSI.WriteAtomic16",
];

/// Cache fills and uncached reads, writes and flushes of rbd LUNs are librbd aio completed
/// into the event threads; `--io-engine threads` keeps them blocking calls on the I/O
/// workers. Both put the same bytes in Ceph (`rbd export`) and read them back, the metrics
/// tell the paths apart, and the uncached aio LUN passes libiscsi's write,
/// compare-and-write and atomic-write suites and qemu-img's random-data check. (Each daemon
/// has an image of its own: two clients writing one image pass its exclusive lock to and
/// fro, and librbd then takes ~25 s to close the image of the one that lost it.)
#[test]
fn rbd_io_is_aio_unless_io_engine_threads() {
    let c = Cluster::start();
    c.create_image("paths-aio", 32 * MIB);
    c.create_image("paths-threads", 32 * MIB);
    let mut aio = daemon_with_target(&[]);
    let blocking =
        Daemon::start_like_tgtd_env(TargetKind::Numatgtd, &["--io-engine", "threads"], &[]);
    new_open_target(&blocking, "1", TEST_IQN);
    // LUN 1 uncached (every read a DirectRead), LUN 2 cached (every miss a fill)
    for (d, image) in [(&aio, "rbd/paths-aio"), (&blocking, "rbd/paths-threads")] {
        add_rbd_lun(d, 1, image, &c.bsopts("cache=off")).check("uncached LUN");
        add_rbd_lun(d, 2, image, &c.bsopts("")).check("cached LUN");
    }
    // each daemon writes its own MiB through its uncached LUN, then syncs
    let pattern = |seed: usize| -> Vec<u8> {
        (0..MIB as usize)
            .map(|i| ((i * 13 + seed) % 251) as u8)
            .collect()
    };
    let regions = [(4 * MIB / 512, pattern(0)), (8 * MIB / 512, pattern(7))];
    let daemons = [
        ("aio", &aio, true, "rbd/paths-aio"),
        ("threads", &blocking, false, "rbd/paths-threads"),
    ];
    for (name, d, want_async, image) in daemons {
        let writes_before = rbd_metric(d, "numatgt_lun_rbd_op_duration_seconds_count", "write");
        let async_before = rbd_metric(d, "numatgt_lun_rbd_op_async_total", "write");
        let flush_before = rbd_metric(d, "numatgt_lun_rbd_op_async_total", "flush");
        let mut w = ScsiSession::open(d, "iqn.2026-01.test:rbd-writer");
        let _ = w.command(&[0; 6], &[], 0);
        // one region with 16 writes in flight at once, the other one write at a time
        let (first, data) = &regions[0];
        let cdbs: Vec<Vec<u8>> = (0..16u64)
            .map(|k| cdb10(0x2a, first + k * 128, 128).to_vec())
            .collect();
        let chunks: Vec<&[u8]> = data.chunks(65536).collect();
        for (k, (status, sense)) in w.pipeline_writes(&cdbs, &chunks).into_iter().enumerate() {
            assert_eq!(status, 0, "{name} WRITE {k}: {:x?}", sense_of(&sense));
        }
        let (first, data) = &regions[1];
        for (k, chunk) in data.chunks(65536).enumerate() {
            let (status, sense, _) = w.command(&cdb10(0x2a, first + k as u64 * 128, 128), chunk, 0);
            assert_eq!(status, 0, "{name} WRITE {k}: {:x?}", sense_of(&sense));
        }
        let (status, sense, _) = w.command(&SYNC10, &[], 0);
        assert_eq!(
            status,
            0,
            "{name} SYNCHRONIZE CACHE: {:x?}",
            sense_of(&sense)
        );
        drop(w);
        let writes =
            rbd_metric(d, "numatgt_lun_rbd_op_duration_seconds_count", "write") - writes_before;
        let async_writes = rbd_metric(d, "numatgt_lun_rbd_op_async_total", "write") - async_before;
        let async_flushes = rbd_metric(d, "numatgt_lun_rbd_op_async_total", "flush") - flush_before;
        eprintln!(
            "{name}: {writes} librbd writes, {async_writes} asynchronous; {async_flushes} asynchronous flushes"
        );
        assert_eq!(writes, 32.0, "{name}: librbd writes");
        if want_async {
            assert_eq!(async_writes, 32.0, "{name}: every write asynchronous");
            assert_eq!(async_flushes, 1.0, "{name}: the flush asynchronous");
        } else {
            assert_eq!(
                (async_writes, async_flushes),
                (0.0, 0.0),
                "{name}: nothing asynchronous"
            );
        }
        // in Ceph, as written
        let exported = aio.dir.path().join(format!("{name}.img"));
        c.rbd(120, &["export", image, &exported.to_string_lossy()])
            .check("rbd export");
        let ceph = std::fs::read(&exported).expect("exported image");
        for (first, data) in &regions {
            let at = (*first * 512) as usize;
            assert!(
                ceph[at..at + data.len()] == data[..],
                "{name}: rbd export differs at {at}"
            );
        }
    }
    for (name, d, want_async, _) in daemons {
        let before = rbd_metric(d, "numatgt_lun_rbd_op_async_total", "read");
        let reads_before = rbd_metric(d, "numatgt_lun_rbd_op_duration_seconds_count", "read");
        let mut s = ScsiSession::open(d, "iqn.2026-01.test:rbd-reader");
        for lun in [1u16, 2] {
            s.lun = lun;
            // the LUN's power-on unit attention first
            let _ = s.command(&[0; 6], &[], 0);
            for (first, data) in &regions {
                for (k, chunk) in data.chunks(65536).enumerate() {
                    let lba = first + k as u64 * 128;
                    let (status, sense, got) = s.command(&cdb10(0x28, lba, 128), &[], 65536);
                    assert_eq!(
                        status,
                        0,
                        "{name} LUN {lun} READ {lba}: {:x?}",
                        sense_of(&sense)
                    );
                    assert!(got == chunk, "{name} LUN {lun} READ {lba}: other bytes");
                }
            }
        }
        drop(s);
        let reads =
            rbd_metric(d, "numatgt_lun_rbd_op_duration_seconds_count", "read") - reads_before;
        let async_reads = rbd_metric(d, "numatgt_lun_rbd_op_async_total", "read") - before;
        eprintln!("{name}: {reads} librbd reads, {async_reads} of them asynchronous");
        assert!(reads >= 32.0, "{name}: {reads} librbd reads");
        if want_async {
            assert_eq!(async_reads, reads, "{name}: every read asynchronous");
        } else {
            assert_eq!(async_reads, 0.0, "{name}: no asynchronous read");
        }
    }
    // nothing left in flight
    let (code, body) = aio.http_get("/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    let in_flight: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("numatgt_lun_rbd_ops_in_flight{"))
        .collect();
    assert!(in_flight.len() >= 2, "{in_flight:?}");
    assert!(in_flight.iter().all(|l| l.ends_with(" 0")), "{in_flight:?}");

    // the uncached aio LUN: random data in and back, then the conformance suites
    let url = aio.url(1);
    let pattern = qemuio::write_random(&url, aio.dir.path(), "pattern.bin", 16 * MIB as usize);
    let back = qemuio::read_all(&url, aio.dir.path(), "back.img").expect("qemu-img read");
    assert!(
        back[..pattern.len()] == pattern[..],
        "read back differs from the write"
    );
    tools::require_tool("iscsi-test-cu");
    let results: Vec<SuiteResult> = RBD_UNCACHED_SUITES
        .iter()
        .map(|suite| run_suite(&mut aio, suite, "iscsi-test-cu-rbd-aio", false))
        .collect();
    assert_clean(
        &results,
        "numatgtd uncached rbd LUN (aio)",
        "iscsi-test-cu-rbd-aio",
    );

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

/// `tgtadm --op delete --mode logicalunit --tid TID --lun LUN`, which must succeed.
fn delete_lun(d: &Daemon, tid: &str, lun: u64) {
    let lun = lun.to_string();
    let args = ["--lld", "iscsi", "--op", "delete", "--mode", "logicalunit"];
    d.tgtadm(&[&args[..], &["--tid", tid, "--lun", &lun]].concat())
        .check("tgtadm delete logicalunit");
}

/// The daemon's value of the unlabelled gauge `name`.
fn gauge(d: &Daemon, name: &str) -> f64 {
    let (code, body) = d.http_get("/metrics").expect("GET /metrics");
    assert_eq!(code, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
}

/// Threads and resident memory (KiB) of process `pid`.
fn threads_and_rss(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k)?.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("Threads:"), field("VmRSS:"))
}

/// 64 RBD LUNs made with Debian's tgtadm on one cluster: one cluster connection for all of
/// them (and for a second target's LUNs), every LUN served with its own image's bytes; a
/// LUN with other librados settings gets a connection of its own, and the shared one
/// closes with its last LUN.
#[test]
fn rbd_luns_of_one_cluster_share_one_connection() {
    const LUNS: u64 = 64;
    let c = Cluster::start();
    for i in 1..=LUNS {
        c.create_image(&format!("many{i}"), 4 * MIB);
    }
    let mut d = daemon_with_target(&[]);
    assert_eq!(gauge(&d, "numatgt_rbd_cluster_connections"), 0.0);
    let (threads0, rss0) = threads_and_rss(d.pid());
    let t0 = Instant::now();
    for i in 1..=LUNS {
        // every other LUN uncached; the order of the options does not matter
        let bsopts = if i % 2 == 0 {
            c.bsopts("cache=off")
        } else {
            format!("cache=numa;{}", c.bsopts(""))
        };
        add_rbd_lun(&d, i, &format!("rbd/many{i}"), &bsopts).check("tgtadm --bstype rbd");
    }
    let took = t0.elapsed();
    let (threads, rss) = threads_and_rss(d.pid());
    eprintln!(
        "{LUNS} rbd LUNs added in {took:.1?} ({:.0} ms each): threads {threads0} -> {threads}, \
         RSS {rss0} -> {rss} KiB",
        took.as_secs_f64() * 1000.0 / LUNS as f64
    );
    assert_eq!(
        gauge(&d, "numatgt_rbd_cluster_connections"),
        1.0,
        "one cluster connection for {LUNS} LUNs"
    );
    // a second target's LUN on the same cluster shares it too
    new_open_target(&d, "2", "iqn.2026-11.org.numatgt:second");
    new_lun(
        &d,
        "2",
        "1",
        Path::new("rbd/many1"),
        &["--bstype", "rbd", "--bsopts", &c.bsopts("")],
    )
    .check("second target's LUN");
    assert_eq!(gauge(&d, "numatgt_rbd_cluster_connections"), 1.0);
    // every LUN serves its own image: a tag written through each LUN, read back by all
    let mut s = ScsiSession::open(&d, "iqn.2026-01.test:rbd-many");
    for i in 1..=LUNS {
        s.lun = i as u16;
        let _ = s.command(&[0; 6], &[], 0);
        let tag = vec![i as u8; 512];
        let (status, sense, _) = s.command(&cdb10(0x2a, 100, 1), &tag, 0);
        assert_eq!(status, 0, "WRITE to LUN {i}: {:x?}", sense_of(&sense));
    }
    for i in 1..=LUNS {
        s.lun = i as u16;
        let (status, sense, got) = s.command(&cdb10(0x28, 100, 1), &[], 512);
        assert_eq!(status, 0, "READ of LUN {i}: {:x?}", sense_of(&sense));
        assert!(
            got.iter().all(|&b| b == i as u8),
            "LUN {i} read another image's tag"
        );
    }
    drop(s);
    // other librados settings: another connection; gone again with its LUN
    add_rbd_lun(&d, 65, "rbd/many2", &c.bsopts("rados_osd_op_timeout=7")).check("LUN 65");
    assert_eq!(gauge(&d, "numatgt_rbd_cluster_connections"), 2.0);
    delete_lun(&d, "1", 65);
    // (an event thread may hold the LUN until its next turn)
    let t0 = Instant::now();
    while gauge(&d, "numatgt_rbd_cluster_connections") != 1.0
        && t0.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(gauge(&d, "numatgt_rbd_cluster_connections"), 1.0);
    // the shared connection closes with the last LUN on it
    for (tid, lun) in (1..=LUNS).map(|l| ("1", l)).chain([("2", 1)]) {
        delete_lun(&d, tid, lun);
    }
    let t0 = Instant::now();
    while gauge(&d, "numatgt_rbd_cluster_connections") != 0.0
        && t0.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        gauge(&d, "numatgt_rbd_cluster_connections"),
        0.0,
        "the shared connection outlived its LUNs"
    );
    d.assert_alive("after 64 rbd LUNs");
}

/// GET LBA STATUS from `lba` on `s`'s LUN: `(lba, blocks, provisioning status)` per
/// descriptor (0 mapped, 1 deallocated).
fn lba_status(s: &mut ScsiSession, lba: u64) -> Vec<(u64, u64, u8)> {
    let mut cdb = [0u8; 16];
    cdb[0] = 0x9e;
    cdb[1] = 0x12;
    cdb[2..10].copy_from_slice(&lba.to_be_bytes());
    cdb[10..14].copy_from_slice(&4096u32.to_be_bytes());
    let (status, sense, data) = s.command(&cdb, &[], 4096);
    assert_eq!(status, 0, "GET LBA STATUS {lba}: {:x?}", sense_of(&sense));
    data.get(8..)
        .unwrap_or_default()
        .chunks_exact(16)
        .map(|d| {
            let lba = u64::from_be_bytes(d[0..8].try_into().expect("8 bytes"));
            let n = u32::from_be_bytes(d[8..12].try_into().expect("4 bytes"));
            (lba, u64::from(n), d[12] & 0x0f)
        })
        .collect()
}

/// The data extents `rbd diff` (librbd, straight from the cluster) reports for `image`, in
/// 512-byte blocks, neighbours merged.
fn rbd_diff_blocks(c: &Cluster, image: &str) -> Vec<(u64, u64)> {
    let r = c.rbd(60, &["diff", image]);
    r.check("rbd diff");
    let mut out: Vec<(u64, u64)> = Vec::new();
    for line in r.stdout.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(o), Some(l), Some("data")) = (f.first(), f.get(1), f.get(2).copied()) else {
            continue;
        };
        let (o, l): (u64, u64) = (o.parse().expect("offset"), l.parse().expect("length"));
        match out.last_mut() {
            Some(last) if last.0 + last.1 == o / 512 => last.1 += l / 512,
            _ => out.push((o / 512, l / 512)),
        }
    }
    out
}

/// GET LBA STATUS of an RBD LUN reports the image's allocation as librbd has it: the
/// extents `rbd diff` lists mapped, the rest deallocated, before and after an UNMAP of
/// whole objects; then libiscsi's GetLBAStatus, Unmap and WriteSame suites on the thin LUN.
#[test]
fn rbd_lba_status_follows_the_image() {
    let c = Cluster::start();
    c.create_image("holes", 64 * MIB);
    let mut d = daemon_with_target(&[]);
    add_rbd_lun(&d, 1, "rbd/holes", &c.bsopts("cache=off")).check("tgtadm --bstype rbd");
    update_lun1(&d, "thin_provisioning=1").check("thin_provisioning=1");
    let mut s = ScsiSession::open(&d, "iqn.2026-01.test:rbd-holes");
    let _ = s.command(&[0; 6], &[], 0);
    let mapped = |st: &[(u64, u64, u8)]| -> Vec<(u64, u64)> {
        st.iter().filter(|e| e.2 == 0).map(|e| (e.0, e.1)).collect()
    };
    // a fresh image: all deallocated
    let st = lba_status(&mut s, 0);
    assert_eq!(st.first().map(|e| (e.0, e.2)), Some((0, 1)), "{st:?}");
    assert!(mapped(&st).is_empty(), "{st:?}");
    // data: 4 MiB at 0 (one object), 64 KiB at 40 MiB, one block at 50 MiB
    let data = vec![0xa5u8; 65536];
    for k in 0..64u64 {
        let (status, _, _) = s.command(&cdb10(0x2a, k * 128, 128), &data, 0);
        assert_eq!(status, 0);
    }
    let (status, _, _) = s.command(&cdb10(0x2a, 40 * 2048, 128), &data, 0);
    assert_eq!(status, 0);
    let (status, _, _) = s.command(&cdb10(0x2a, 50 * 2048, 1), &data[..512], 0);
    assert_eq!(status, 0);
    let want = rbd_diff_blocks(&c, "rbd/holes");
    eprintln!("rbd diff: {want:?}");
    assert!(want.len() >= 3, "{want:?}");
    let st = lba_status(&mut s, 0);
    eprintln!("GET LBA STATUS: {st:?}");
    assert_eq!(mapped(&st), want, "GET LBA STATUS against rbd diff");
    // descriptors cover the LUN from LBA 0 without gaps
    let mut next = 0;
    for e in &st {
        assert_eq!(e.0, next, "{st:?}");
        next = e.0 + e.1;
    }
    assert_eq!(next, 64 * MIB / 512, "{st:?}");
    // from inside the second extent
    let st = lba_status(&mut s, 40 * 2048 + 64);
    assert_eq!(
        st.first().map(|e| (e.0, e.2)),
        Some((40 * 2048 + 64, 0)),
        "{st:?}"
    );
    // UNMAP of the first object: a hole again, for rbd diff and for GET LBA STATUS; as
    // every UNMAP of a LUN that does not cache, one librbd aio write_zeroes per range
    let zeros = || rbd_metric(&d, "numatgt_lun_rbd_op_async_total", "zero");
    let zeros_before = zeros();
    let mut unmap = vec![0u8; 24];
    unmap[1] = 22;
    unmap[3] = 16;
    unmap[16..20].copy_from_slice(&(8192u32).to_be_bytes());
    let (status, sense, _) = s.command(&[0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0], &unmap, 0);
    assert_eq!(status, 0, "UNMAP: {:x?}", sense_of(&sense));
    let want = rbd_diff_blocks(&c, "rbd/holes");
    assert!(want.first().is_some_and(|e| e.0 >= 8192), "{want:?}");
    let st = lba_status(&mut s, 0);
    assert_eq!(st.first().map(|e| (e.0, e.2)), Some((0, 1)), "{st:?}");
    assert_eq!(mapped(&st), want, "after UNMAP");
    assert_eq!(zeros() - zeros_before, 1.0, "UNMAP: asynchronous zeroes");
    // two ranges inside objects (64 KiB at 40 MiB, the block at 50 MiB): zeros, both
    let mut unmap = vec![0u8; 40];
    unmap[1] = 38;
    unmap[3] = 32;
    unmap[8..16].copy_from_slice(&(40u64 * 2048).to_be_bytes());
    unmap[16..20].copy_from_slice(&128u32.to_be_bytes());
    unmap[24..32].copy_from_slice(&(50u64 * 2048).to_be_bytes());
    unmap[32..36].copy_from_slice(&1u32.to_be_bytes());
    let (status, sense, _) = s.command(&[0x42, 0, 0, 0, 0, 0, 0, 0, 40, 0], &unmap, 0);
    assert_eq!(status, 0, "UNMAP of two ranges: {:x?}", sense_of(&sense));
    assert_eq!(
        zeros() - zeros_before,
        3.0,
        "one asynchronous zeroing per range"
    );
    // WRITE SAME(16) with UNMAP over 8 written blocks at 60 MiB
    let (status, _, _) = s.command(&cdb10(0x2a, 60 * 2048, 8), &data[..4096], 0);
    assert_eq!(status, 0);
    let mut ws = [0u8; 16];
    ws[0] = 0x93;
    ws[1] = 0x08;
    ws[2..10].copy_from_slice(&(60u64 * 2048).to_be_bytes());
    ws[10..14].copy_from_slice(&8u32.to_be_bytes());
    let (status, sense, _) = s.command(&ws, &[0u8; 512], 0);
    assert_eq!(status, 0, "WRITE SAME(16) UNMAP: {:x?}", sense_of(&sense));
    assert_eq!(
        zeros() - zeros_before,
        4.0,
        "WRITE SAME with UNMAP zeroes as UNMAP does"
    );
    for (lba, blocks) in [(40 * 2048, 128u16), (50 * 2048, 1), (60 * 2048, 8)] {
        let (status, _, got) = s.command(&cdb10(0x28, lba, blocks), &[], u32::from(blocks) * 512);
        assert_eq!(status, 0, "READ {lba}");
        assert!(
            got.iter().all(|&b| b == 0),
            "READ {lba}: not zeros after UNMAP"
        );
    }
    drop(s);
    let exported = d.dir.path().join("holes.img");
    c.rbd(120, &["export", "rbd/holes", &exported.to_string_lossy()])
        .check("rbd export");
    let ceph = std::fs::read(&exported).expect("exported image");
    for (lba, blocks) in [
        (0u64, 8192u64),
        (40 * 2048, 128),
        (50 * 2048, 1),
        (60 * 2048, 8),
    ] {
        let (a, n) = ((lba * 512) as usize, (blocks * 512) as usize);
        assert!(
            ceph[a..a + n].iter().all(|&b| b == 0),
            "rbd export: LBA {lba} not zeros"
        );
    }

    tools::require_tool("iscsi-test-cu");
    let results: Vec<SuiteResult> = [
        "SCSI.GetLBAStatus",
        "SCSI.Unmap",
        "SCSI.WriteSame10",
        "SCSI.WriteSame16",
    ]
    .iter()
    .map(|suite| run_suite(&mut d, suite, "iscsi-test-cu-rbd-thin", false))
    .collect();
    assert_clean(&results, "numatgtd thin rbd LUN", "iscsi-test-cu-rbd-thin");
    d.assert_alive("after GET LBA STATUS of an rbd LUN");
}

/// FUA on an uncached RBD LUN: without librbd's cache (numatgt's default) the write is
/// durable once librbd acknowledges it, so it goes out as one asynchronous write and no
/// flush; with `rbd_cache=true` in bsopts librbd may acknowledge from its cache, so the
/// write runs on an I/O worker and is flushed before GOOD.
#[test]
fn fua_is_flushed_when_the_admin_turns_librbd_cache_on() {
    let c = Cluster::start();
    c.create_image("fua", 16 * MIB);
    let d = daemon_with_target(&[]);
    add_rbd_lun(&d, 1, "rbd/fua", &c.bsopts("cache=off")).check("LUN 1");
    add_rbd_lun(&d, 2, "rbd/fua", &c.bsopts("cache=off;rbd_cache=true")).check("LUN 2");
    let mut s = ScsiSession::open(&d, "iqn.2026-01.test:rbd-fua");
    let data = vec![0x3cu8; 4096];
    for (lun, want_async, want_flush) in [(1u64, 1.0, 0.0), (2, 0.0, 1.0)] {
        s.lun = lun as u16;
        let _ = s.command(&[0; 6], &[], 0);
        let metric = |name: &str, op: &str| lun_rbd_metric(&d, lun, name, op);
        let writes = metric("numatgt_lun_rbd_op_duration_seconds_count", "write");
        let async_writes = metric("numatgt_lun_rbd_op_async_total", "write");
        let flushes = metric("numatgt_lun_rbd_op_duration_seconds_count", "flush");
        let mut fua = cdb10(0x2a, 64 * lun, 8);
        fua[1] |= 0x08;
        let (status, sense, _) = s.command(&fua, &data, 0);
        assert_eq!(status, 0, "LUN {lun} WRITE FUA: {:x?}", sense_of(&sense));
        assert_eq!(
            metric("numatgt_lun_rbd_op_duration_seconds_count", "write") - writes,
            1.0
        );
        assert_eq!(
            metric("numatgt_lun_rbd_op_async_total", "write") - async_writes,
            want_async,
            "LUN {lun}: asynchronous FUA writes"
        );
        assert_eq!(
            metric("numatgt_lun_rbd_op_duration_seconds_count", "flush") - flushes,
            want_flush,
            "LUN {lun}: flushes after the FUA write"
        );
    }
    // librbd's cache or not, the other LUN reads what was written
    s.lun = 1;
    let (status, _, got) = s.command(&cdb10(0x28, 128, 8), &[], 4096);
    assert_eq!(status, 0);
    assert!(got == data, "LUN 1 reads LUN 2's FUA write");
}

/// A write-through to a cached RBD LUN (FUA here; WCE=0 takes the same path) is one librbd
/// aio write on the event thread, many in flight at once, and the cached copy follows it:
/// blocks read into the cache before the writes are read back from the cache (no librbd
/// read) with the new bytes, and `rbd export` holds them. A FUA write over dirty cached data
/// goes the long way (the older data reaches the image first) and its bytes, not the older
/// ones, end up in both.
#[test]
fn cached_rbd_write_through_is_aio_and_the_cache_follows() {
    let c = Cluster::start();
    c.create_image("through", 16 * MIB);
    let d = daemon_with_target(&[]);
    add_rbd_lun(&d, 1, "rbd/through", &c.bsopts("")).check("cached LUN");
    let metric = |name: &str, op: &str| rbd_metric(&d, name, op);
    let mut s = ScsiSession::open(&d, "iqn.2026-01.test:rbd-through");
    let _ = s.command(&[0; 6], &[], 0);
    // 1 MiB at LBA 2048 read into the cache (zeros)
    let first = 2048u64;
    for k in 0..16u64 {
        let (status, sense, got) = s.command(&cdb10(0x28, first + k * 128, 128), &[], 65536);
        assert_eq!(status, 0, "READ {k}: {:x?}", sense_of(&sense));
        assert!(got.iter().all(|&b| b == 0), "a new image reads zeros");
    }
    let data: Vec<u8> = (0..MIB as usize)
        .map(|i| ((i * 7 + 3) % 253) as u8)
        .collect();
    let writes = metric("numatgt_lun_rbd_op_duration_seconds_count", "write");
    let async_writes = metric("numatgt_lun_rbd_op_async_total", "write");
    let flushes = metric("numatgt_lun_rbd_op_duration_seconds_count", "flush");
    let cdbs: Vec<Vec<u8>> = (0..16u64)
        .map(|k| {
            let mut fua = cdb10(0x2a, first + k * 128, 128);
            fua[1] |= 0x08;
            fua.to_vec()
        })
        .collect();
    let chunks: Vec<&[u8]> = data.chunks(65536).collect();
    for (k, (status, sense)) in s.pipeline_writes(&cdbs, &chunks).into_iter().enumerate() {
        assert_eq!(status, 0, "WRITE FUA {k}: {:x?}", sense_of(&sense));
    }
    let writes = metric("numatgt_lun_rbd_op_duration_seconds_count", "write") - writes;
    let async_writes = metric("numatgt_lun_rbd_op_async_total", "write") - async_writes;
    let flushes = metric("numatgt_lun_rbd_op_duration_seconds_count", "flush") - flushes;
    eprintln!("{writes} librbd writes, {async_writes} asynchronous, {flushes} flushes");
    assert_eq!(writes, 16.0, "one librbd write per FUA write");
    assert_eq!(async_writes, 16.0, "every write-through asynchronous");
    assert_eq!(
        flushes, 0.0,
        "an acknowledged librbd write is durable: no flush"
    );
    // the cached copy followed: read back from the cache, no librbd read
    let reads = metric("numatgt_lun_rbd_op_duration_seconds_count", "read");
    for (k, chunk) in chunks.iter().enumerate() {
        let lba = first + k as u64 * 128;
        let (status, sense, got) = s.command(&cdb10(0x28, lba, 128), &[], 65536);
        assert_eq!(status, 0, "READ {lba}: {:x?}", sense_of(&sense));
        assert!(got == *chunk, "READ {lba}: the cache kept older bytes");
    }
    assert_eq!(
        metric("numatgt_lun_rbd_op_duration_seconds_count", "read") - reads,
        0.0,
        "the read-back came from the cache"
    );

    // dirty cached data under a FUA write: 4 KiB written back (dirty), then 64 KiB FUA
    // over it; then a plain write after it to other blocks
    let at = 8192u64;
    let older = vec![0x11u8; 4096];
    let (status, sense, _) = s.command(&cdb10(0x2a, at + 8, 8), &older, 0);
    assert_eq!(status, 0, "WRITE: {:x?}", sense_of(&sense));
    let newer: Vec<u8> = (0..65536usize).map(|i| (i % 241) as u8 ^ 0x5a).collect();
    let mut fua = cdb10(0x2a, at, 128);
    fua[1] |= 0x08;
    let (status, sense, _) = s.command(&fua, &newer, 0);
    assert_eq!(
        status,
        0,
        "WRITE FUA over dirty data: {:x?}",
        sense_of(&sense)
    );
    let (status, _, got) = s.command(&cdb10(0x28, at, 128), &[], 65536);
    assert_eq!(status, 0);
    assert!(got == newer, "READ after the FUA write over dirty data");
    let (status, sense, _) = s.command(&SYNC10, &[], 0);
    assert_eq!(status, 0, "SYNCHRONIZE CACHE: {:x?}", sense_of(&sense));
    drop(s);

    let exported = d.dir.path().join("through.img");
    c.rbd(120, &["export", "rbd/through", &exported.to_string_lossy()])
        .check("rbd export");
    let ceph = std::fs::read(&exported).expect("exported image");
    let a = (first * 512) as usize;
    assert!(
        ceph[a..a + data.len()] == data[..],
        "rbd export: the FUA writes"
    );
    let b = (at * 512) as usize;
    assert!(
        ceph[b..b + newer.len()] == newer[..],
        "rbd export: the older dirty data overwrote the FUA write"
    );
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
    // a clean stop writes the cached LUN back and lets the images go: closed, no watch or
    // lock left for the cluster to time out
    let (status, _) = d.terminate(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        d.log_tail(20)
    );
    for image in ["rbd/plain", "rbd/cached"] {
        let st = c.rbd(30, &["status", image]);
        st.check("rbd status");
        assert!(
            st.stdout.contains("Watchers: none"),
            "{image} still watched after a clean stop:\n{st}"
        );
    }
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
