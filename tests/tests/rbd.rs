//! The Ceph RBD backing store (issue 16) against a real local cluster (tools/ceph/up.sh,
//! torn down by PID): the rbd crate's calls on their own, then images served by numatgtd
//! with LUNs added through Debian's tgtadm `--bstype rbd`: qemu-img data integrity, the
//! libiscsi conformance suites for reads, writes, unmap, write same and sync, the data seen
//! by `rbd export`, online resize, a sick cluster (OSD killed) and clear errors for a
//! missing image, an unreachable cluster and a host without librbd.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tests::ceph::Cluster;

const MIB: u64 = 1 << 20;

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
    let (tx, rx) = mpsc::channel::<(u64, std::io::Result<usize>, Vec<u8>)>();
    for i in 0..32u64 {
        let tx = tx.clone();
        let buf = vec![i as u8 + 1; 65536];
        img.aio_write(
            buf,
            i * 65536,
            Box::new(move |r, b| {
                let _ = tx.send((i, r, b));
            }),
        );
    }
    for _ in 0..32 {
        let (i, r, b) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("aio write done");
        assert_eq!(
            r.expect("aio write"),
            0,
            "write {i}: librbd reports 0 for a write"
        );
        assert_eq!(b.len(), 65536);
    }
    for i in 0..32u64 {
        let tx = tx.clone();
        img.aio_read(
            vec![0u8; 65536],
            i * 65536,
            Box::new(move |r, b| {
                let _ = tx.send((i, r, b));
            }),
        );
    }
    for _ in 0..32 {
        let (i, r, b) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("aio read done");
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
