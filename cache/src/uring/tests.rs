//! The rings against a real file: every byte where it belongs, short reads continued, end
//! of file as EIO, more reads than ring slots, shutdown finishing queued work.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::mpsc;

use super::*;
use crate::topology::Topology;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
}

fn file_with(data: &[u8]) -> std::fs::File {
    let mut f = tempfile::tempfile().expect("tempfile");
    f.write_all(data).expect("write");
    f
}

/// What a finished [`Job`] reports: its id, its buffers and the result of each read.
type Done = (usize, Vec<Box<[u8]>>, Vec<io::Result<()>>);

/// Reads `ranges` of a file into a heap buffer each and reports them through a channel.
struct Job {
    id: usize,
    fd: std::os::fd::RawFd,
    ranges: Vec<(u64, usize)>,
    bufs: Vec<Box<[u8]>>,
    done: mpsc::Sender<Done>,
}

// SAFETY: each read goes into one of the job's boxed slices (heap memory that does not move
// with the job), touched by nothing else until finish takes them back.
unsafe impl RingJob for Job {
    fn reads(&mut self, out: &mut Vec<ReadOp>) {
        for &(offset, len) in &self.ranges {
            let mut b = vec![0u8; len].into_boxed_slice();
            out.push(ReadOp {
                fd: self.fd,
                buf: b.as_mut_ptr(),
                len,
                offset,
            });
            self.bufs.push(b);
        }
    }
    fn finish(self, results: &[io::Result<()>]) {
        let r = results
            .iter()
            .map(|r| match r {
                Ok(()) => Ok(()),
                Err(e) => Err(io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0))),
            })
            .collect();
        let _ = self.done.send((self.id, self.bufs, r));
    }
}

fn start() -> Option<RingPool<Job>> {
    let topo = Topology::detect(None);
    match RingPool::start(&topo.nodes()[0]) {
        Ok(p) => Some(p),
        Err(e) => {
            // a kernel without io_uring (or with it disabled) cannot run these; say so
            // loudly: the daemon falls back to threads there, which other tests cover
            eprintln!("io_uring unavailable here, ring tests not run: {e}");
            None
        }
    }
}

#[test]
fn reads_land_where_they_belong_with_more_reads_than_slots() {
    let Some(pool) = start() else { return };
    let data = pattern(4 << 20);
    let f = file_with(&data);
    let (tx, rx) = mpsc::channel();
    // 40 jobs x 16 reads = 640 reads > the ring's 256 slots
    let mut expected = Vec::new();
    for j in 0..40u64 {
        let ranges: Vec<(u64, usize)> = (0..16u64)
            .map(|k| {
                (
                    ((j * 16 + k) * 6151) % ((4 << 20) - 9000),
                    512 + (k as usize * 509),
                )
            })
            .collect();
        expected.push(ranges.clone());
        pool.submit(Job {
            id: j as usize,
            fd: f.as_raw_fd(),
            ranges,
            bufs: Vec::new(),
            done: tx.clone(),
        });
    }
    let mut seen = 0;
    for _ in 0..40 {
        let (id, bufs, results) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("every job finishes");
        assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
        for (b, &(o, l)) in bufs.iter().zip(&expected[id]) {
            assert!(
                b[..] == data[o as usize..o as usize + l],
                "job {id} read at {o}"
            );
        }
        seen += 1;
    }
    assert_eq!(seen, 40);
    assert_eq!(pool.pending(), 0);
    pool.shutdown();
}

#[test]
fn end_of_file_is_eio_and_other_reads_still_complete() {
    let Some(pool) = start() else { return };
    let data = pattern(8192);
    let f = file_with(&data);
    let (tx, rx) = mpsc::channel();
    pool.submit(Job {
        id: 0,
        fd: f.as_raw_fd(),
        // in range; crossing the end (short, then EOF); wholly past the end
        ranges: vec![(0, 4096), (6144, 4096), (16384, 512)],
        bufs: Vec::new(),
        done: tx,
    });
    let (_, bufs, results) = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("finishes");
    assert!(results[0].is_ok());
    assert_eq!(&bufs[0][..], &data[..4096]);
    assert_eq!(
        results[1].as_ref().err().and_then(|e| e.raw_os_error()),
        Some(libc::EIO)
    );
    // the short part was read before the end was hit
    assert_eq!(&bufs[1][..2048], &data[6144..]);
    assert_eq!(
        results[2].as_ref().err().and_then(|e| e.raw_os_error()),
        Some(libc::EIO)
    );
}

#[test]
fn a_bad_descriptor_is_an_error_of_that_read() {
    let Some(pool) = start() else { return };
    let (tx, rx) = mpsc::channel();
    pool.submit(Job {
        id: 0,
        fd: -1,
        ranges: vec![(0, 512)],
        bufs: Vec::new(),
        done: tx,
    });
    let (_, _, results) = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("finishes");
    assert_eq!(
        results[0].as_ref().err().and_then(|e| e.raw_os_error()),
        Some(libc::EBADF)
    );
}

#[test]
fn shutdown_finishes_what_was_queued() {
    let Some(pool) = start() else { return };
    let data = pattern(1 << 20);
    let f = file_with(&data);
    let (tx, rx) = mpsc::channel();
    for j in 0..300u64 {
        pool.submit(Job {
            id: j as usize,
            fd: f.as_raw_fd(),
            ranges: vec![(j * 2048, 2048)],
            bufs: Vec::new(),
            done: tx.clone(),
        });
    }
    pool.shutdown();
    drop(tx);
    let done: Vec<_> = rx.iter().collect();
    assert_eq!(
        done.len(),
        300,
        "every queued job finished before shutdown returned"
    );
    assert!(done.iter().all(|(_, _, r)| r.iter().all(|x| x.is_ok())));
}

#[test]
fn write_ring_writes_every_op_and_reports_errors_per_op() {
    let mut ring = match WriteRing::new(8) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("io_uring unavailable here, write ring test not run: {e}");
            return;
        }
    };
    let f = file_with(&vec![0u8; 1 << 20]);
    let data = pattern(1 << 20);
    // 64 ops > 8 slots, plus one on a bad descriptor
    let mut ops: Vec<WriteOp<'_>> = (0..64usize)
        .map(|i| WriteOp {
            fd: f.as_raw_fd(),
            data: &data[i * 16384..(i + 1) * 16384],
            offset: (i * 16384) as u64,
        })
        .collect();
    ops.push(WriteOp {
        fd: -1,
        data: &data[..512],
        offset: 0,
    });
    let mut results = Vec::new();
    ring.write_all(&ops, &mut results);
    assert_eq!(results.len(), 65);
    for r in &results[..64] {
        assert_eq!(*r.as_ref().expect("written"), 16384);
    }
    assert_eq!(
        results[64].as_ref().err().and_then(|e| e.raw_os_error()),
        Some(libc::EBADF)
    );
    let mut back = vec![0u8; 1 << 20];
    let n = nix::sys::uio::pread(&f, &mut back, 0).expect("pread");
    assert_eq!(n, 1 << 20);
    assert!(back == data, "the file holds what the ring wrote");
}
