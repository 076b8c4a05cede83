//! The rings against a real file: every byte where it belongs, short reads continued, end
//! of file as EIO, more reads than ring slots, the eventfd signalled, a drop finishing
//! every job.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::mpsc;

use super::*;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096) as u8).collect()
}

fn file_with(data: &[u8]) -> std::fs::File {
    let mut f = tempfile::tempfile().expect("tempfile");
    f.write_all(data).expect("write");
    f
}

/// What a finished [`Job`] reports: its id, its buffers and the result of each read.
pub(crate) type Done = (usize, Vec<Box<[u8]>>, Vec<io::Result<()>>);

/// Reads `ranges` of a file into a heap buffer each and reports them through a channel
/// (also the librbd ring's test job).
pub(crate) struct Job {
    pub(crate) id: usize,
    pub(crate) fd: std::os::fd::RawFd,
    pub(crate) ranges: Vec<(u64, usize)>,
    pub(crate) bufs: Vec<Box<[u8]>>,
    pub(crate) done: mpsc::Sender<Done>,
}

// SAFETY: each read goes into one of the job's boxed slices (heap memory that does not move
// with the job), touched by nothing else until finish takes them back.
unsafe impl RingJob for Job {
    fn ops(&mut self, out: &mut Vec<RingOp>) {
        for &(offset, len) in &self.ranges {
            let mut b = vec![0u8; len].into_boxed_slice();
            out.push(RingOp::read(self.fd, b.as_mut_ptr(), len, offset));
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

fn ring() -> Option<ReadRing<Job>> {
    match ReadRing::new(256) {
        Ok(r) => Some(r),
        Err(e) => {
            // a kernel without io_uring (or with it disabled) cannot run these; say so
            // loudly: the daemon falls back to threads there, which other tests cover
            eprintln!("io_uring unavailable here, ring tests not run: {e}");
            None
        }
    }
}

/// Drive `ring` until every pushed job has finished (bounded).
fn run_all(ring: &mut ReadRing<Job>) {
    let t0 = std::time::Instant::now();
    while ring.jobs() > 0 {
        ring.wait();
        assert!(t0.elapsed().as_secs() < 10, "jobs still running after 10 s");
    }
}

#[test]
fn reads_land_where_they_belong_with_more_reads_than_slots() {
    let Some(mut ring) = ring() else { return };
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
        ring.push(Job {
            id: j as usize,
            fd: f.as_raw_fd(),
            ranges,
            bufs: Vec::new(),
            done: tx.clone(),
        });
    }
    ring.submit();
    run_all(&mut ring);
    drop(tx);
    let mut seen = 0;
    for (id, bufs, results) in rx.iter() {
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
}

#[test]
fn completions_signal_the_eventfd() {
    let Some(mut ring) = ring() else { return };
    let data = pattern(65536);
    let f = file_with(&data);
    let (tx, rx) = mpsc::channel();
    ring.push(Job {
        id: 7,
        fd: f.as_raw_fd(),
        ranges: vec![(4096, 8192)],
        bufs: Vec::new(),
        done: tx,
    });
    ring.submit();
    // the owner sleeps in poll(2) on the eventfd, not in the ring
    let mut pfd = libc::pollfd {
        fd: ring.event_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, count 1.
    let n = unsafe { libc::poll(&mut pfd, 1, 5000) };
    assert_eq!(n, 1, "no completion signalled within 5 s");
    let t0 = std::time::Instant::now();
    while ring.reap() == 0 {
        assert!(t0.elapsed().as_secs() < 5, "signalled but nothing to reap");
        std::thread::yield_now();
    }
    let (id, bufs, results) = rx.try_recv().expect("finished on reap");
    assert_eq!(id, 7);
    assert!(results[0].is_ok());
    assert_eq!(&bufs[0][..], &data[4096..12288]);
}

#[test]
fn end_of_file_is_eio_and_other_reads_still_complete() {
    let Some(mut ring) = ring() else { return };
    let data = pattern(8192);
    let f = file_with(&data);
    let (tx, rx) = mpsc::channel();
    ring.push(Job {
        id: 0,
        fd: f.as_raw_fd(),
        // in range; crossing the end (short, then EOF); wholly past the end
        ranges: vec![(0, 4096), (6144, 4096), (16384, 512)],
        bufs: Vec::new(),
        done: tx,
    });
    run_all(&mut ring);
    let (_, bufs, results) = rx.try_recv().expect("finishes");
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
    let Some(mut ring) = ring() else { return };
    let (tx, rx) = mpsc::channel();
    ring.push(Job {
        id: 0,
        fd: -1,
        ranges: vec![(0, 512)],
        bufs: Vec::new(),
        done: tx,
    });
    run_all(&mut ring);
    let (_, _, results) = rx.try_recv().expect("finishes");
    assert_eq!(
        results[0].as_ref().err().and_then(|e| e.raw_os_error()),
        Some(libc::EBADF)
    );
}

#[test]
fn drop_finishes_what_was_pushed() {
    let Some(mut ring) = ring() else { return };
    let data = pattern(1 << 20);
    let f = file_with(&data);
    let (tx, rx) = mpsc::channel();
    // 300 jobs > 256 slots: some are still in the backlog when the ring is dropped
    for j in 0..300u64 {
        ring.push(Job {
            id: j as usize,
            fd: f.as_raw_fd(),
            ranges: vec![(j * 2048, 2048)],
            bufs: Vec::new(),
            done: tx.clone(),
        });
    }
    ring.submit();
    drop(ring);
    drop(tx);
    let done: Vec<_> = rx.iter().collect();
    assert_eq!(done.len(), 300, "every pushed job finished by the drop");
    // what was in the kernel completed; what never left the backlog was cancelled
    for (id, bufs, r) in &done {
        match &r[0] {
            Ok(()) => assert_eq!(&bufs[0][..], &data[id * 2048..id * 2048 + 2048]),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ECANCELED)),
        }
    }
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
