//! Each store through the template: the file store (regular files; round trips, holes,
//! resizes, alignment bounces, ranges), the null store (zeros, writes dropped, tgtd's size),
//! the RBD opener's refusals without a cluster, the bstype table, the contract every store
//! keeps (ranges, read-only, deallocation reads zeros), and [`ThreadIo`] routing a job
//! by the store's read engine.

use std::path::Path;
use std::sync::{Arc, mpsc};

use super::*;
use crate::aligned::AlignedBuf;
use crate::uring::tests::{Done, Job};

fn file_store(size: u64, bs: u32) -> (tempfile::TempDir, BackingStore) {
    let opts = OpenOptions {
        block_size: bs,
        ..Default::default()
    };
    file_store_with(size, &opts)
}

/// Buffered I/O through the page cache.
const BUFFERED: OpenOptions = OpenOptions {
    block_size: 512,
    readonly: false,
    direct: false,
    fenced_alone: false,
};

/// A new sparse file of `size` bytes opened with `opts`.
fn file_store_with(size: u64, opts: &OpenOptions) -> (tempfile::TempDir, BackingStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("lun.img");
    assert!(create_sparse(&p, size).expect("create"));
    assert!(!create_sparse(&p, size).expect("exists"));
    (dir, BackingStore::open(&p, opts).expect("open"))
}

fn open_as(bstype: &str, path: &str, opts: &OpenOptions) -> Result<BackingStore, BackingError> {
    BackingStore::open_as(
        bstype,
        &OpenRequest {
            path: Path::new(path),
            bsopts: "",
            skip: &[],
            options: opts,
        },
    )
}

fn null_store(bs: u32) -> BackingStore {
    let opts = OpenOptions {
        block_size: bs,
        ..Default::default()
    };
    open_as("null", "anything", &opts).expect("null")
}

// ---- the file store

#[test]
fn file_write_read_roundtrip() {
    for bs in [512u32, 4096] {
        let (_d, s) = file_store(1 << 20, bs);
        assert_eq!(s.num_blocks(), (1 << 20) / u64::from(bs));
        let mut data = AlignedBuf::new(3 * bs as usize);
        for (i, b) in data.as_mut_slice().iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        s.write_at(data.as_slice(), u64::from(bs) * 5, false)
            .expect("write");
        s.write_at(data.as_slice(), u64::from(bs) * 9, true)
            .expect("durable write");
        s.sync().expect("sync");
        let mut back = AlignedBuf::new(3 * bs as usize);
        s.read_at(back.as_mut_slice(), u64::from(bs) * 5)
            .expect("read");
        assert_eq!(back.as_slice(), data.as_slice());
        let mut zero = AlignedBuf::new(bs as usize);
        s.read_at(zero.as_mut_slice(), 0).expect("read hole");
        assert!(zero.as_slice().iter().all(|&b| b == 0));
    }
}

#[test]
fn file_deallocate_zeroes_and_reports_holes() {
    let (_d, s) = file_store(4 << 20, 512);
    let mut data = AlignedBuf::new(1 << 20);
    data.as_mut_slice().fill(0xAB);
    s.write_at(data.as_slice(), 1 << 20, false).expect("write");
    s.write_at(data.as_slice(), 2 << 20, false).expect("write");
    s.sync().expect("sync");
    let runs = s.allocation(0, 4 << 20).expect("allocation");
    // the file system may round to its own blocks; the written MiBs are data
    assert!(
        runs.iter()
            .any(|&(o, l, a)| a && o <= 1 << 20 && o + l >= 3 << 20),
        "{runs:?}"
    );
    assert!(runs.iter().any(|&(o, _, a)| !a && o == 0), "{runs:?}");
    // punch the middle of the first written MiB
    s.deallocate((1 << 20) + 65536, 131072).expect("deallocate");
    let mut back = AlignedBuf::new(1 << 20);
    s.read_at(back.as_mut_slice(), 1 << 20).expect("read");
    let b = back.as_slice();
    assert!(b[..65536].iter().all(|&x| x == 0xAB));
    assert!(b[65536..196608].iter().all(|&x| x == 0));
    assert!(b[196608..].iter().all(|&x| x == 0xAB));
    // the runs cover the range exactly, in order
    let runs = s.allocation(4096, (4 << 20) - 8192).expect("allocation");
    assert_eq!(runs.first().map(|r| r.0), Some(4096));
    let mut at = 4096;
    for &(o, l, _) in &runs {
        assert_eq!(o, at);
        at += l;
    }
    assert_eq!(at, (4 << 20) - 4096);
    assert!(s.deallocate(4 << 20, 512).is_err(), "beyond the end");
}

#[test]
fn file_online_resize_grows_files_only() {
    let (_d, s) = file_store(1 << 20, 512);
    assert!(s.caps().resizable);
    assert_eq!(s.resize(Some(2 << 20)).expect("grow"), 2 << 20);
    assert_eq!(s.size(), 2 << 20);
    let data = AlignedBuf::new(512);
    s.write_at(data.as_slice(), (2 << 20) - 512, false)
        .expect("write in the new space");
    assert!(s.resize(Some(1 << 20)).is_err(), "shrinking is refused");
    assert!(s.resize(Some((3 << 20) + 1)).is_err(), "not whole blocks");
    assert_eq!(s.resize(None).expect("re-measure"), 2 << 20);
    assert_eq!(s.take_size_change(), None, "a file has no resize watch");
}

#[test]
fn file_writes_from_unaligned_buffers() {
    let (_d, s) = file_store(1 << 20, 512);
    // a Vec slice at an odd address: bounced when the store is O_DIRECT
    let v: Vec<u8> = (0..4097u32).map(|i| (i % 253) as u8).collect();
    s.write_at(&v[1..], 8192, false).expect("unaligned write");
    let mut back = AlignedBuf::new(4096);
    s.read_at(back.as_mut_slice(), 8192).expect("read");
    assert_eq!(back.as_slice(), &v[1..]);
    // sector-aligned but not page-aligned memory
    let mut a = AlignedBuf::new(8192);
    a.as_mut_slice()[512..1536].fill(0x5A);
    s.write_at(&a.as_slice()[512..1536], 4096, true)
        .expect("sector-aligned write");
    let mut back = AlignedBuf::new(1024);
    s.read_at(back.as_mut_slice(), 4096).expect("read");
    assert!(back.as_slice().iter().all(|&b| b == 0x5A));
}

#[test]
fn file_vectored_writes_land_in_order_from_any_memory() {
    for opts in [
        OpenOptions {
            block_size: 512,
            ..Default::default()
        },
        BUFFERED,
    ] {
        let (_d, s) = file_store_with(1 << 20, &opts);
        // aligned pieces (one pwritev2), as landed cache slots give them
        let mut a = AlignedBuf::new(3 * 4096);
        for (i, b) in a.as_mut_slice().iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let pieces = [
            &a.as_slice()[..4096],
            &a.as_slice()[8192..],
            &a.as_slice()[512..1024],
        ];
        s.write_vectored_at(&pieces, 65536, true).expect("vectored");
        let mut back = AlignedBuf::new(4096 + 4096 + 512);
        s.read_at(back.as_mut_slice(), 65536).expect("read");
        assert_eq!(&back.as_slice()[..4096], pieces[0]);
        assert_eq!(&back.as_slice()[4096..8192], pieces[1]);
        assert_eq!(&back.as_slice()[8192..], pieces[2]);
        // a piece at an odd address among them: written piece by piece, bounced
        let v: Vec<u8> = (0..1025u32).map(|i| (i % 13) as u8).collect();
        let mixed = [&a.as_slice()[..512], &v[1..]];
        s.write_vectored_at(&mixed, 0, false).expect("mixed");
        let mut back = AlignedBuf::new(1536);
        s.read_at(back.as_mut_slice(), 0).expect("read");
        assert_eq!(&back.as_slice()[..512], mixed[0]);
        assert_eq!(&back.as_slice()[512..], mixed[1]);
        // the range is checked as a whole, before anything is written
        let too_far = [&a.as_slice()[..4096], &a.as_slice()[..4096]];
        let e = s.write_vectored_at(&too_far, (1 << 20) - 4096, false);
        assert_eq!(e.map_err(|e| e.raw_os_error()), Err(Some(libc::EINVAL)));
        s.read_at(back.as_mut_slice(), (1 << 20) - 4096 - 1536)
            .expect("read");
        assert!(back.as_slice().iter().all(|&b| b == 0), "nothing written");
    }
}

#[test]
fn file_rejects_unaligned_size_and_dirs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("odd.img");
    std::fs::write(&p, vec![0u8; 1000]).expect("write");
    let e = BackingStore::open(&p, &OpenOptions::default()).expect_err("unaligned");
    assert!(e.to_string().contains("not a multiple"), "{e}");
    let e = BackingStore::open(dir.path(), &OpenOptions::default()).expect_err("dir");
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let e = BackingStore::open(&dir.path().join("missing"), &OpenOptions::default())
        .expect_err("missing");
    assert!(e.to_string().contains("missing"), "{e}");
    let empty = dir.path().join("empty.img");
    std::fs::write(&empty, b"").expect("write");
    let e = BackingStore::open(&empty, &OpenOptions::default()).expect_err("empty");
    assert!(e.to_string().contains("is empty"), "{e}");
}

#[test]
fn file_engine_follows_its_io_mode() {
    let (_d, s) = file_store(1 << 20, 512);
    // tmpfs has no O_DIRECT: the store falls back to buffered I/O there
    match s.read_engine() {
        ReadEngine::Uring(fd) => {
            assert!(s.is_direct());
            assert_eq!(s.raw_fd(), fd);
        }
        other => {
            assert_eq!(other, ReadEngine::Threads);
            assert!(!s.is_direct());
            assert_eq!(s.raw_fd(), -1);
        }
    }
    let (_b, buffered) = file_store_with(1 << 20, &BUFFERED);
    assert_eq!(buffered.read_engine(), ReadEngine::Threads);
    assert!(!buffered.is_direct());
}

// ---- the null store

#[test]
fn null_reads_zeros_and_drops_writes() {
    for bs in [512u32, 1024, 4096] {
        let s = null_store(bs);
        assert_eq!(s.size(), null::NULL_SIZE, "tgtd's 1 TiB");
        assert_eq!(s.num_blocks(), null::NULL_SIZE / u64::from(bs));
        assert_eq!(s.read_engine(), ReadEngine::Immediate);
        assert!(!s.is_direct() && !s.is_readonly());
        let data = vec![0xA5u8; 3 * bs as usize];
        s.write_at(&data, u64::from(bs) * 7, true).expect("write");
        s.write_at(&data[1..], 3, false).expect("any alignment");
        s.sync().expect("flush");
        let mut back = vec![0xFFu8; 3 * bs as usize];
        s.read_at(&mut back, u64::from(bs) * 7).expect("read");
        assert!(back.iter().all(|&b| b == 0), "reads return zeros");
        // the last block is there, the one after it is not
        let last = null::NULL_SIZE - u64::from(bs);
        s.read_at(&mut back[..bs as usize], last)
            .expect("last block");
        let e = s.read_at(&mut back[..bs as usize], null::NULL_SIZE);
        assert_eq!(e.map_err(|e| e.raw_os_error()), Err(Some(libc::EINVAL)));
        assert!(s.deallocate(0, 1 << 30).expect("discard"), "deallocated");
        let runs = s.allocation(0, 1 << 20).expect("allocation");
        assert_eq!(runs, vec![(0, 1 << 20, true)]);
    }
}

#[test]
fn null_size_is_fixed() {
    let s = null_store(512);
    assert!(!s.caps().resizable);
    assert_eq!(
        s.resize(Some(2 << 40)).expect("re-measured"),
        null::NULL_SIZE
    );
    assert_eq!(s.take_size_change(), None);
    assert_eq!(s.path(), Path::new("anything"), "the path is only a name");
}

#[test]
fn null_readonly_refuses_writes() {
    let opts = OpenOptions {
        readonly: true,
        ..Default::default()
    };
    let s = open_as("null", "ro", &opts).expect("null");
    let e = s.write_at(&[0u8; 512], 0, false).expect_err("ro");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    let e = s.deallocate(0, 512).expect_err("ro");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
}

// ---- the RBD store, without a cluster

#[test]
fn rbd_refuses_bad_specs_and_options_before_any_cluster() {
    let opts = OpenOptions::default();
    let bad = |path: &str, bsopts: &str| {
        BackingStore::open_as(
            "rbd",
            &OpenRequest {
                path: Path::new(path),
                bsopts,
                skip: &["cache"],
                options: &opts,
            },
        )
        .expect_err("refused")
    };
    for e in [bad("", ""), bad("pool/img", "no-equals-sign")] {
        assert!(matches!(e, BackingError::Rbd { .. }), "{e}");
    }
}

// ---- the table and the contract

#[test]
fn every_bstype_has_an_opener() {
    for name in ["rdwr", "aio", "rbd", "null", "NULL", " Rdwr "] {
        assert!(opener(name).is_some(), "{name}");
    }
    for name in ["sg", "bsg", "glfs", "sheepdog", ""] {
        assert!(opener(name).is_none(), "{name}");
    }
    let e = open_as("glfs", "x", &OpenOptions::default()).expect_err("unknown");
    assert!(matches!(e, BackingError::UnknownType { .. }), "{e}");
}

/// What every store keeps, whatever it stores: the size is whole blocks, nothing is
/// reached past the end, a deallocated range reads as zeros, a sync succeeds.
#[test]
fn every_store_keeps_the_contract() {
    let (_d, file) = file_store(1 << 20, 512);
    for s in [&file, &null_store(512)] {
        assert_eq!(s.size() % u64::from(s.block_size()), 0);
        let end = s.size();
        let mut buf = AlignedBuf::new(1024);
        let past = s.read_at(buf.as_mut_slice(), end - 512);
        assert_eq!(past.map_err(|e| e.raw_os_error()), Err(Some(libc::EINVAL)));
        let past = s.write_at(&buf.as_slice()[..1024], end - 512, false);
        assert_eq!(past.map_err(|e| e.raw_os_error()), Err(Some(libc::EINVAL)));
        let past = s.check_write(buf.as_slice().as_ptr() as usize, end, 512);
        assert_eq!(past.map_err(|e| e.raw_os_error()), Err(Some(libc::EINVAL)));
        buf.as_mut_slice().fill(0x33);
        s.write_at(buf.as_slice(), 8192, false).expect("write");
        s.deallocate(8192, 1024).expect("deallocate");
        buf.as_mut_slice().fill(0x77);
        s.read_at(buf.as_mut_slice(), 8192).expect("read");
        assert!(buf.as_slice().iter().all(|&b| b == 0), "{:?}", s.path());
        assert!(s.allocation(end, 512).expect("past the end").is_empty());
        s.sync().expect("sync");
    }
}

#[test]
fn file_readonly_refuses_writes() {
    let opts = OpenOptions {
        readonly: true,
        ..Default::default()
    };
    let (_d, s) = file_store_with(4096, &opts);
    let b = AlignedBuf::new(512);
    let e = s.write_at(b.as_slice(), 0, false).expect_err("ro");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    assert!(s.sync().is_ok(), "nothing to make durable");
}

// ---- one thread's read engines

fn job(id: usize, ranges: Vec<(u64, usize)>, done: &mpsc::Sender<Done>) -> Job {
    job_on(-1, id, ranges, done)
}

fn job_on(fd: RawFd, id: usize, ranges: Vec<(u64, usize)>, done: &mpsc::Sender<Done>) -> Job {
    Job {
        id,
        fd,
        ranges,
        bufs: Vec::new(),
        done: done.clone(),
    }
}

/// A job whose buffers hold 0xFF before they are read into (what an immediate read
/// leaves in them is the store's).
struct Dirty(Job);

// SAFETY: as `Job`'s: each read goes into one of its boxed slices, which `Dirty` only fills
// before handing them out.
unsafe impl crate::uring::RingJob for Dirty {
    fn ops(&mut self, out: &mut Vec<crate::uring::RingOp>) {
        self.0.ops(out);
        for op in out.iter() {
            // SAFETY: the op points into a buffer the job just made, `len` bytes long.
            unsafe { std::ptr::write_bytes(op.buf, 0xFF, op.len) };
        }
    }
    fn finish(self, results: &[std::io::Result<()>]) {
        self.0.finish(results)
    }
}

#[test]
fn thread_io_finishes_immediate_stores_at_once() {
    let store = Arc::new(null_store(512));
    let mut reads = ThreadIo::<Dirty>::new();
    assert!(reads.takes(&store), "no ring needed");
    let (tx, rx) = mpsc::channel();
    let ranges = vec![(0, 4096), (1 << 30, 512)];
    assert!(reads.push(&store, Dirty(job(1, ranges, &tx))).is_ok());
    let (id, bufs, results) = rx.try_recv().expect("finished inside push");
    assert_eq!(id, 1);
    assert!(results.iter().all(Result::is_ok));
    assert!(bufs.iter().all(|b| b.iter().all(|&x| x == 0)));
    assert_eq!(reads.jobs(), 0, "nothing in flight");
    assert_eq!(reads.reap(), 0);
    // past the end: the job still finishes at once, with EINVAL
    let past = vec![(null::NULL_SIZE, 512)];
    assert!(reads.push(&store, Dirty(job(2, past, &tx))).is_ok());
    let (_, _, results) = rx.try_recv().expect("finished");
    let e = results[0].as_ref().map_err(|e| e.raw_os_error());
    assert_eq!(e, Err(Some(libc::EINVAL)));
}

#[test]
fn thread_io_gives_back_what_this_thread_cannot_read() {
    let (_b, buffered) = file_store_with(1 << 20, &BUFFERED);
    let buffered = Arc::new(buffered);
    let mut reads = ThreadIo::<Job>::new();
    let (tx, rx) = mpsc::channel();
    assert!(
        !reads.takes(&buffered),
        "worker threads read a buffered file"
    );
    let back = reads.push(&buffered, job(1, vec![(0, 512)], &tx));
    assert!(back.is_err(), "the job comes back");
    assert!(rx.try_recv().is_err(), "not run");
    // an O_DIRECT file (where the file system has O_DIRECT) wants the io_uring ring
    let (_d, direct) = file_store(1 << 20, 512);
    if direct.is_direct() {
        let direct = Arc::new(direct);
        assert!(!reads.takes(&direct), "no ring yet");
        assert!(reads.push(&direct, job(2, vec![(0, 512)], &tx)).is_err());
        if reads.start_uring(8).is_ok() {
            assert!(reads.takes(&direct));
            let fd = direct.raw_fd();
            assert!(
                reads
                    .push(&direct, job_on(fd, 3, vec![(0, 512)], &tx))
                    .is_ok()
            );
            reads.submit();
            let t0 = std::time::Instant::now();
            while reads.jobs() > 0 && t0.elapsed().as_secs() < 10 {
                reads.reap();
                std::thread::yield_now();
            }
            let (id, _, results) = rx.try_recv().expect("reaped");
            assert_eq!(id, 3);
            assert!(results.iter().all(Result::is_ok));
            reads.stop_uring();
            assert!(!reads.has_rings());
        }
    }
}
