//! Backend unit tests: no socket, no event loop, no thread. Work the backend queues lands in
//! an in-memory [`Workers`] queue that the test runs job by job on its own thread, and
//! answers land in a [`CompletionSink`] that keeps them, so every step — answered now, queued,
//! answered later, never answered — is visible and in order.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use cache::{BlockCache, CacheConfig, IoJob, Topology};
use iscsi_proto::CommandResult;

use super::jobs::Job;
use super::locked::{self, Blocks, Locked, LockedOp};
use super::payload::Payload;
use super::reply::{Answer, CompletionSink, ReplyTo};
use super::{StorageCtx, Workers, storage};
use crate::conn_id::ConnId;
use crate::registry::Lun;

const BS: usize = 512;
const LUN_BLOCKS: u64 = 2048; // 1 MiB
const CACHE_BLOCK: usize = 64 << 10;

/// Jobs queued by the backend, per node, run when the test says so.
#[derive(Default)]
struct QueuedWorkers {
    queue: Mutex<VecDeque<(usize, Job)>>,
}

impl Workers for QueuedWorkers {
    fn submit(&self, node: usize, job: Job) {
        if let Ok(mut q) = self.queue.lock() {
            q.push_back((node, job));
        }
    }

    fn pending(&self, node: usize) -> usize {
        self.queue
            .lock()
            .map_or(0, |q| q.iter().filter(|(n, _)| *n == node).count())
    }
}

impl QueuedWorkers {
    /// Runs queued jobs (and the jobs they queue) until none is left; returns how many ran.
    fn run_all(&self) -> usize {
        let mut ran = 0;
        loop {
            let next = self.queue.lock().ok().and_then(|mut q| q.pop_front());
            let Some((_, job)) = next else {
                return ran;
            };
            job.run();
            ran += 1;
        }
    }

    fn len(&self) -> usize {
        self.queue.lock().map_or(0, |q| q.len())
    }
}

/// Answers as the connection would receive them.
#[derive(Default)]
struct Answers(Mutex<Vec<(u32, CommandResult<Payload>)>>);

impl CompletionSink for Answers {
    fn complete(
        &self,
        _conn: ConnId,
        itt: u32,
        _tag: crate::io_stats::IoTag,
        result: CommandResult<Payload>,
        _buf: Vec<u8>,
    ) {
        if let Ok(mut v) = self.0.lock() {
            v.push((itt, result));
        }
    }
}

impl Answers {
    fn take(&self) -> Vec<(u32, CommandResult<Payload>)> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// One LUN (a backing file of its own) with or without the cache, and the plumbing a
/// command needs.
struct Bench {
    _dir: TempDir,
    lun: Arc<Lun>,
    cache: Option<Arc<BlockCache>>,
    /// Algorithm 1 over the cache (two-node benches only).
    router: Option<cache::Router>,
    /// What the connection says of itself (`StorageCtx::sends_from_blocks`).
    sends_from_blocks: std::cell::Cell<bool>,
    workers: QueuedWorkers,
    answers: Arc<Answers>,
    next_itt: RefCell<u32>,
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("numatgt-backend-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).expect("temp dir");
    TempDir(p)
}

/// A cache of 16 blocks per node (as small as a test needs to fill it).
fn test_cache(nodes: usize) -> Arc<BlockCache> {
    let cfg = CacheConfig {
        block_size: CACHE_BLOCK,
        group_blocks: 1,
        partitions_per_node: 2,
        bytes_per_node: 16 * CACHE_BLOCK,
        sector_size: BS,
        huge_pages: false,
        dirty_limit_bytes: 16 * CACHE_BLOCK as u64,
        ..CacheConfig::default()
    };
    Arc::new(BlockCache::new(cfg, &Topology::split(&[0], nodes, 1)).expect("cache"))
}

impl Bench {
    /// A `cache: off` LUN of a daemon that has a cache (for other LUNs).
    fn uncached_beside_a_cache(tag: &str, write_cache: bool) -> Bench {
        let mut b = Bench::new(tag, config::CacheMode::Off, write_cache);
        b.cache = Some(test_cache(1));
        b
    }

    /// `mode` as a LUN's `cache:` setting; `write_cache`: the WCE bit.
    fn new(tag: &str, mode: config::CacheMode, write_cache: bool) -> Bench {
        Bench::with(tag, mode, |lc| lc.write_cache = write_cache)
    }

    /// As `new`, with the LUN's configuration changed by `f` first.
    fn with(tag: &str, mode: config::CacheMode, f: impl FnOnce(&mut config::LunConfig)) -> Bench {
        Bench::on_nodes(tag, mode, 1, f)
    }

    /// A cached LUN over a cache of two (virtual) nodes with the affinity router on; the
    /// commands come from node 0.
    fn two_nodes(tag: &str) -> Bench {
        let mut b = Bench::on_nodes(tag, config::CacheMode::Numa, 2, |_| {});
        let geometry = *b.cache.as_ref().expect("cached").geometry();
        b.router = Some(cache::Router::new(
            geometry,
            cache::RouterPolicy {
                min_forward_bytes: 0,
                max_queue: usize::MAX,
            },
        ));
        b
    }

    fn on_nodes(
        tag: &str,
        mode: config::CacheMode,
        nodes: usize,
        f: impl FnOnce(&mut config::LunConfig),
    ) -> Bench {
        let dir = temp_dir(tag);
        let path = dir.0.join("lun.img");
        let mut lc = config::LunConfig::new(1, path);
        lc.create_size = Some(LUN_BLOCKS * BS as u64);
        lc.cache = Some(mode);
        f(&mut lc);
        let settings = config::CacheSettings::default();
        let lun = crate::runtime::open_lun(
            &settings,
            &crate::runtime::LunHome {
                iqn: "iqn.2026-11.org.numatgt:backend-test",
                tid: 1,
                alua: &config::AluaConfig::default(),
                defer_media: false,
            },
            &lc,
            7,
            &dir.0,
            None,
        )
        .expect("open LUN");
        let cache = (mode == config::CacheMode::Numa).then(|| test_cache(nodes));
        Bench {
            _dir: dir,
            lun: Arc::new(lun),
            cache,
            router: None,
            sends_from_blocks: std::cell::Cell::new(false),
            workers: QueuedWorkers::default(),
            answers: Arc::new(Answers::default()),
            next_itt: RefCell::new(1),
        }
    }

    fn ctx(&self) -> StorageCtx<'_> {
        StorageCtx {
            workers: &self.workers,
            node: 0,
            cache: self.cache.as_ref(),
            router: self.router.as_ref(),
            sends_from_blocks: self.sends_from_blocks.get(),
            state_dir: None,
            tasks: None,
            registry: None,
        }
    }

    /// A fresh reply handle (its ITT numbers the answers).
    fn reply(&self) -> ReplyTo {
        let mut itt = self.next_itt.borrow_mut();
        *itt += 1;
        let conn = ConnId {
            thread: 0,
            slot: 0,
            generation: 0,
        };
        ReplyTo::new(
            Arc::clone(&self.answers) as Arc<dyn CompletionSink>,
            conn,
            *itt,
        )
    }

    /// The answer of a command: now, or by running the queued jobs.
    fn finish(&self, answer: Answer) -> CommandResult<Payload> {
        match answer {
            Answer::Now(r) => r,
            Answer::Later(_) => {
                assert!(
                    self.workers.run_all() > 0,
                    "a deferred command queued no job"
                );
                let mut got = self.answers.take();
                assert_eq!(got.len(), 1, "one deferred command, one answer");
                got.remove(0).1
            }
        }
    }

    fn write(&self, lba: u64, data: &[u8], fua: bool) -> CommandResult<Payload> {
        let mut buf = data.to_vec();
        let blocks = (data.len() / BS) as u32;
        let durable = self.lun.scsi.durable_writes(fua);
        let a = storage::write(
            &self.lun,
            lba,
            blocks,
            durable,
            &mut buf,
            0,
            &self.ctx(),
            self.reply(),
        );
        self.finish(a)
    }

    /// A locked write (COMPARE AND WRITE, ORWRITE, WRITE ATOMIC) of one range, no FUA.
    fn locked(&self, op: LockedOp, lba: u64, count: u32, data: Vec<u8>) -> CommandResult<Payload> {
        let w = Locked {
            op,
            at: Blocks { lba, count },
            durable: false,
        };
        self.finish(locked::start(w, &self.lun, data, &self.ctx(), self.reply()))
    }

    fn read(&self, lba: u64, blocks: u32) -> (CommandResult<Payload>, Vec<u8>) {
        let a = storage::read(&self.lun, lba, blocks, &self.ctx(), self.reply());
        let r = self.finish(a);
        let bytes = r
            .data
            .as_ref()
            .map(|p| p.contiguous().into_owned())
            .unwrap_or_default();
        (r, bytes)
    }

    /// What the backing file holds at `lba` (bypassing every cache of ours).
    fn on_disk(&self, lba: u64, len: usize) -> Vec<u8> {
        let all = std::fs::read(self.lun.store.path()).expect("read backing file");
        all[lba as usize * BS..lba as usize * BS + len].to_vec()
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i / 7) as u8)).collect()
}

fn sense_key_asc(r: &CommandResult<Payload>) -> (u8, u8, u8) {
    let s = &r.sense;
    assert!(s.len() >= 14, "fixed-format sense expected: {s:02x?}");
    (s[2] & 0x0f, s[12], s[13])
}

#[test]
fn uncached_write_then_read_goes_through_the_workers() {
    for mode in [config::CacheMode::Off, config::CacheMode::Page] {
        let b = Bench::new("off", mode, true);
        let data = pattern(3, 8 * BS);
        let a = storage::write(
            &b.lun,
            10,
            8,
            false,
            &mut data.clone(),
            0,
            &b.ctx(),
            b.reply(),
        );
        assert!(
            matches!(a, Answer::Later(_)),
            "{mode:?}: no cache, a worker writes"
        );
        assert_eq!(b.workers.len(), 1, "one job queued");
        assert!(
            b.answers.take().is_empty(),
            "nothing answered before the job ran"
        );
        assert_eq!(b.finish(a).status, 0);
        let (r, got) = b.read(10, 8);
        assert_eq!(r.status, 0);
        assert_eq!(got, data, "{mode:?}: read returns what was written");
        assert_eq!(
            b.on_disk(10, data.len()),
            data,
            "{mode:?}: on the backing file"
        );
    }
}

#[test]
fn cached_write_back_is_a_hit_and_reaches_the_disk_on_sync() {
    let b = Bench::new("wb", config::CacheMode::Numa, true);
    let data = pattern(9, 16 * BS);
    // WCE=1, no FUA: a small write completes on the calling thread, dirty in the cache
    let r = b.write(64, &data, false);
    assert_eq!(r.status, 0);
    assert_eq!(b.workers.len(), 0, "write-back copied inline, no job");
    assert_eq!(
        b.on_disk(64, data.len()),
        vec![0; data.len()],
        "not yet written back"
    );
    // the re-read is served from the cache now, without a worker
    let a = storage::read(&b.lun, 64, 16, &b.ctx(), b.reply());
    let Answer::Now(r) = a else {
        panic!("a cached re-read must be answered at once");
    };
    assert_eq!(
        r.data.map(|p| p.contiguous().into_owned()),
        Some(data.clone())
    );
    // SYNCHRONIZE CACHE writes the dirty blocks back before GOOD
    let a = storage::synchronize_cache(&b.lun, 64, &b.ctx(), b.reply());
    assert_eq!(b.finish(a).status, 0);
    assert_eq!(
        b.on_disk(64, data.len()),
        data,
        "durable after SYNCHRONIZE CACHE"
    );
}

#[test]
fn fua_and_wce0_writes_are_on_disk_before_good() {
    for (wce, fua) in [(true, true), (false, false)] {
        let b = Bench::new("durable", config::CacheMode::Numa, wce);
        let data = pattern(17, 4 * BS);
        let r = b.write(200, &data, fua);
        assert_eq!(r.status, 0);
        assert_eq!(
            b.on_disk(200, data.len()),
            data,
            "wce={wce} fua={fua}: durable when GOOD is sent"
        );
        // and the cache agrees with the disk
        assert_eq!(b.read(200, 4).1, data);
    }
}

#[test]
fn a_sync_lun_writes_through_whatever_wce_says() {
    // tgt's `--bsoflags sync`: the LU reports WCE=0 and every write is on the disk before
    // GOOD (scsi's unit tests show the rule holds with WCE=1 too)
    let b = Bench::with("sync", config::CacheMode::Numa, |lc| {
        lc.bsoflags.sync = true
    });
    assert!(!b.lun.scsi.write_cache_enabled());
    assert!(b.lun.scsi.durable_writes(false));
    let data = pattern(77, 2 * BS);
    assert_eq!(b.write(40, &data, false).status, 0);
    assert_eq!(b.on_disk(40, data.len()), data, "written through");
}

#[test]
fn a_cold_read_fills_the_cache_and_the_second_is_a_hit() {
    let b = Bench::new("fill", config::CacheMode::Numa, true);
    let data = pattern(40, 8 * BS);
    // put data on disk behind the cache's back, as a previous run would have left it
    let mut all = std::fs::read(b.lun.store.path()).expect("read");
    all[300 * BS..300 * BS + data.len()].copy_from_slice(&data);
    std::fs::write(b.lun.store.path(), &all).expect("write");
    let a = storage::read(&b.lun, 300, 8, &b.ctx(), b.reply());
    assert!(matches!(a, Answer::Later(_)), "a miss is read by a worker");
    let r = b.finish(a);
    assert_eq!(
        r.data.map(|p| p.contiguous().into_owned()),
        Some(data.clone())
    );
    let again = storage::read(&b.lun, 300, 8, &b.ctx(), b.reply());
    let Answer::Now(r) = again else {
        panic!("the second read must be a cache hit");
    };
    assert_eq!(r.data.map(|p| p.contiguous().into_owned()), Some(data));
}

#[test]
fn a_cached_read_is_forwarded_to_its_blocks_node_unless_the_link_sends_from_blocks() {
    let b = Bench::two_nodes("route");
    let router = b.router.expect("router");
    let data = pattern(7, LUN_BLOCKS as usize * BS);
    assert_eq!(b.write(0, &data, false).status, 0x00);
    // a cache block whose home is node 1 (the commands come from node 0)
    let per_block = (CACHE_BLOCK / BS) as u64;
    let far = (0..LUN_BLOCKS / per_block)
        .find(|i| {
            let a = router.affinity(b.lun.cache_id, i * CACHE_BLOCK as u64, CACHE_BLOCK as u64);
            a.is_some_and(|a| a.bytes[1] > a.bytes[0])
        })
        .expect("some block lives on node 1");
    let lba = far * per_block;
    let want = &data[lba as usize * BS..(lba + per_block) as usize * BS];
    // TCP (copies the bytes): node 1 gathers them into its own memory
    let a = storage::read(&b.lun, lba, per_block as u32, &b.ctx(), b.reply());
    assert!(matches!(a, Answer::Later(_)), "forwarded to node 1");
    assert_eq!(b.workers.len(), 1);
    let r = b.finish(a);
    assert!(matches!(r.data, Some(Payload::Block(_))), "gathered");
    assert_eq!(
        r.data.map(|p| p.contiguous().into_owned()).as_deref(),
        Some(want)
    );
    // iSER with registered arenas: the blocks themselves, at once, on node 0
    b.sends_from_blocks.set(true);
    let a = storage::read(&b.lun, lba, per_block as u32, &b.ctx(), b.reply());
    let Answer::Now(r) = a else {
        panic!("a link that sends from blocks is served where the command arrived");
    };
    assert_eq!(b.workers.len(), 0);
    assert!(
        matches!(r.data, Some(Payload::Blocks(_))),
        "the pinned blocks"
    );
    assert_eq!(
        r.data.map(|p| p.contiguous().into_owned()).as_deref(),
        Some(want)
    );
}

#[test]
fn compare_and_write_matches_then_miscompares() {
    for mode in [config::CacheMode::Numa, config::CacheMode::Off] {
        let b = Bench::new("caw", mode, true);
        let old = pattern(1, BS);
        assert_eq!(b.write(5, &old, false).status, 0);
        let new = pattern(2, BS);
        let mut buf = old.clone();
        buf.extend_from_slice(&new);
        let r = b.locked(LockedOp::CompareAndWrite, 5, 1, buf.clone());
        assert_eq!(r.status, 0, "{mode:?}: compare half matches");
        assert_eq!(b.read(5, 1).1, new);
        // the same buffer again: the medium now holds `new`, the first byte differs
        let diff = old.iter().zip(&new).position(|(x, y)| x != y).unwrap_or(0);
        let r = b.locked(LockedOp::CompareAndWrite, 5, 1, buf);
        assert_eq!(r.status, scsi::status::CHECK_CONDITION);
        assert_eq!(sense_key_asc(&r), (0x0e, 0x1d, 0x00), "MISCOMPARE");
        // INFORMATION: the offset of the first differing byte
        let info = u32::from_be_bytes([r.sense[3], r.sense[4], r.sense[5], r.sense[6]]);
        assert_eq!(info as usize, diff);
        assert_eq!(b.read(5, 1).1, new, "{mode:?}: a miscompare writes nothing");
    }
}

#[test]
fn or_write_ors_into_the_medium() {
    let b = Bench::new("orw", config::CacheMode::Numa, true);
    assert_eq!(b.write(8, &vec![0x0f; BS], false).status, 0);
    assert_eq!(b.locked(LockedOp::OrWrite, 8, 1, vec![0xf0; BS]).status, 0);
    assert_eq!(b.read(8, 1).1, vec![0xff; BS]);
}

#[test]
fn write_atomic_writes_through_over_dirty_cached_data() {
    let b = Bench::new("atomic", config::CacheMode::Numa, true);
    // dirty in the cache first (WCE=1): the atomic write must not be undone by its flush
    assert_eq!(b.write(16, &pattern(3, 2 * BS), false).status, 0);
    let new = pattern(9, 2 * BS);
    assert_eq!(b.locked(LockedOp::Atomic, 16, 2, new.clone()).status, 0);
    assert_eq!(b.read(16, 2).1, new);
    assert_eq!(
        b.on_disk(16, new.len()),
        new,
        "written through, over the flushed data"
    );
    // a Data-Out buffer shorter than the blocks: refused, nothing written
    let r = b.locked(LockedOp::Atomic, 16, 2, vec![0; BS]);
    assert_eq!(r.status, scsi::status::CHECK_CONDITION);
    assert_eq!(b.read(16, 2).1, new);
}

#[test]
fn reads_past_the_limit_are_refused_at_once() {
    let b = Bench::new("big", config::CacheMode::Off, true);
    let blocks = (storage::MAX_IO_BYTES / BS as u64 + 1) as u32;
    let a = storage::read(&b.lun, 0, blocks, &b.ctx(), b.reply());
    let Answer::Now(r) = a else {
        panic!("refused without queueing work");
    };
    assert_eq!(r.status, scsi::status::CHECK_CONDITION);
    assert_eq!(b.workers.len(), 0);
}

#[test]
fn a_job_dropped_unrun_still_answers_check_condition() {
    let b = Bench::new("drop", config::CacheMode::Off, true);
    let a = storage::read(&b.lun, 0, 8, &b.ctx(), b.reply());
    assert!(matches!(a, Answer::Later(_)));
    // the worker pool goes away with the job in its queue (a panic, a shutdown)
    let dropped = b
        .workers
        .queue
        .lock()
        .map(|mut q| q.drain(..).count())
        .unwrap_or(0);
    assert_eq!(dropped, 1);
    let got = b.answers.take();
    assert_eq!(
        got.len(),
        1,
        "the command is answered, not left to time out"
    );
    assert_eq!(got[0].1.status, scsi::status::CHECK_CONDITION);
    assert_eq!(sense_key_asc(&got[0].1), (0x04, 0x44, 0x00));
}

#[test]
fn a_failing_backing_store_answers_medium_or_hardware_error() {
    let b = Bench::new("fail", config::CacheMode::Off, true);
    // a read past the end of the backing file (the LUN shrank under us): an error, not a panic
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(b.lun.store.path())
        .expect("open");
    f.set_len(0).expect("truncate");
    let (r, _) = b.read(100, 8);
    assert_eq!(
        r.status,
        scsi::status::CHECK_CONDITION,
        "short read reported"
    );
}

#[test]
fn a_write_through_to_a_cached_lun_excludes_other_writers_of_its_range() {
    // Two write-throughs of the same blocks must not interleave their disk write and their
    // update of the cached copy (else the disk could keep one and the cache the other):
    // while another writer holds the range, a WCE=0 write waits.
    let b = Bench::new("excl", config::CacheMode::Numa, false);
    let lun = Arc::clone(&b.lun);
    let cache = b.cache.clone();
    let data = pattern(5, 4 * BS);
    let other = b.lun.locks.write(64 * BS as u64, 4 * BS as u64);
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = std::thread::spawn(move || {
        let at = super::jobs::Extent {
            lun: Arc::clone(&lun),
            lba: 64,
            offset: 64 * BS as u64,
            len: 4 * BS as u64,
        };
        let r = storage::write_job(cache.as_ref(), &at, true, &data, 0);
        let _ = tx.send(r.status);
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "the write-through went ahead while another writer held its range"
    );
    drop(other);
    let status = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the write-through finishes once the range is free");
    assert_eq!(status, 0);
    writer.join().expect("writer thread");
    // and an uncached LUN's writers still share their ranges
    let u = Bench::new("shared", config::CacheMode::Off, false);
    let _held = u.lun.locks.write(0, BS as u64);
    assert_eq!(u.write(0, &pattern(6, BS), true).status, 0);
}

/// A WRITE(10) command of `blocks` at `lba` whose first `imm` bytes of `data` came with it
/// (the rest to be fetched), FUA as given.
fn fetching_write(lba: u32, data: &[u8], imm: usize, fua: bool) -> iscsi_proto::ScsiCommand {
    let blocks = (data.len() / BS) as u16;
    let mut cdb = [0x2A, if fua { 0x08 } else { 0 }, 0, 0, 0, 0, 0, 0, 0, 0];
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
    iscsi_proto::ScsiCommand {
        itt: 9,
        lun: 1,
        cdb: iscsi_proto::Cdb::new(&cdb).expect("cdb"),
        attr: 1,
        read: false,
        write: true,
        expected_read_len: 0,
        expected_write_len: data.len() as u32,
        data_out: data[..imm].to_vec(),
        landed: 0,
        immediate: false,
    }
}

/// What the RDMA READs would do: the transfer's bytes from the fetch's start written into
/// the landing's memory.
fn land_rest(l: &super::landing::Landing, data: &[u8]) {
    let from = l.fetch_from();
    let mut pieces = Vec::new();
    assert!(l.pieces(from, data.len() - from, &mut pieces));
    let mut at = from;
    for (addr, n) in pieces {
        // SAFETY: the piece lies in the landing's reserved slot memory (Landing::pieces),
        // which nothing else reads or writes until the landing is committed or dropped.
        unsafe { std::ptr::copy_nonoverlapping(data[at..].as_ptr(), addr as *mut u8, n) };
        at += n;
    }
    assert_eq!(at, data.len());
}

#[test]
fn write_data_landed_in_cache_slots_is_committed_in_place() {
    let b = Bench::new("landing", config::CacheMode::Numa, true);
    b.sends_from_blocks.set(true);
    // (a cache full of dirty blocks has no slot for a landing: three of its 16 here)
    let old = pattern(1, 320 * BS);
    assert_eq!(b.write(0, &old, false).status, 0);
    // 300 blocks from LBA 3: a partial cache block, a whole one, a partial one
    let data = pattern(9, 300 * BS);
    let mut cmd = fetching_write(3, &data, 8192, false);
    let landing = super::landing::Landing::reserve(&b.lun, &cmd, &b.ctx()).expect("lands");
    assert_eq!(
        (landing.fetch_from(), landing.transfer_len()),
        (8192, data.len())
    );
    land_rest(&landing, &data);
    // nothing is visible before the command runs
    assert_eq!(b.read(3, 300).1, old[3 * BS..303 * BS]);
    let a = storage::write_landed(
        &b.lun,
        3,
        300,
        false,
        &mut cmd.data_out,
        landing,
        &b.ctx(),
        b.reply(),
    );
    let Answer::Now(r) = a else {
        panic!("committed on the event thread")
    };
    assert_eq!(r.status, 0);
    assert_eq!(b.workers.len(), 0, "no job: no copy");
    assert_eq!(b.read(3, 300).1, data);
    // around it, the old bytes (copied into the partial blocks' new slots)
    assert_eq!(b.read(0, 3).1, old[..3 * BS]);
    assert_eq!(b.read(303, 10).1, old[303 * BS..313 * BS]);
    // dirty: SYNCHRONIZE CACHE's flush puts it on disk
    let cache = b.cache.as_ref().expect("cache");
    storage::flush_range(cache, &b.lun, 0, LUN_BLOCKS * BS as u64).expect("flush");
    assert_eq!(b.on_disk(3, 300 * BS), data);
    cache.check_invariants().expect("cache invariants");
}

#[test]
fn durable_landed_write_data_goes_to_disk_straight_from_its_slots() {
    let b = Bench::new("landing-durable", config::CacheMode::Numa, true);
    b.sends_from_blocks.set(true);
    let cache = Arc::clone(b.cache.as_ref().expect("cache"));
    let per_block = (CACHE_BLOCK / BS) as u64;
    // older dirty data of the range and around it, and a cached clean block the write
    // covers in part
    let old = pattern(1, 4 * CACHE_BLOCK);
    assert_eq!(b.write(0, &old, false).status, 0);
    let data = pattern(4, 2 * CACHE_BLOCK);
    // from the middle of the first block to the middle of the third
    let lba = per_block / 2;
    let mut cmd = fetching_write(lba as u32, &data, 4096, true);
    let landing = super::landing::Landing::reserve(&b.lun, &cmd, &b.ctx()).expect("FUA lands");
    land_rest(&landing, &data);
    let a = storage::write_landed(
        &b.lun,
        lba,
        (data.len() / BS) as u32,
        true,
        &mut cmd.data_out,
        landing,
        &b.ctx(),
        b.reply(),
    );
    assert!(matches!(a, Answer::Later(_)), "written through on a worker");
    assert_eq!(b.finish(a).status, 0);
    // on disk before GOOD, with the older dirty data of the range written first (the write
    // lands over it) and the cached copy agreeing
    let lo = lba as usize * BS;
    assert_eq!(b.on_disk(lba, data.len()), data);
    assert_eq!(b.on_disk(0, lo), old[..lo]);
    assert_eq!(b.read(lba, (data.len() / BS) as u32).1, data);
    assert_eq!(b.read(0, lba as u32).1, old[..lo]);
    let tail = lo + data.len();
    assert_eq!(
        b.read(
            tail as u64 / BS as u64,
            ((4 * CACHE_BLOCK - tail) / BS) as u32
        )
        .1,
        old[tail..]
    );
    cache.check_invariants().expect("cache invariants");
    // the written blocks are clean (the landed slots are their cached copies now); only
    // the block past the write keeps its dirty old data
    assert_eq!(cache.dirty_bytes(0), CACHE_BLOCK as u64);
    storage::flush_range(&cache, &b.lun, 0, LUN_BLOCKS * BS as u64).expect("flush");
    assert_eq!(cache.dirty_bytes(0), 0);
    assert_eq!(b.on_disk(0, old.len())[tail..], old[tail..]);
}

#[test]
fn landed_write_data_of_an_uncached_lun_goes_to_disk_from_the_cache_slots() {
    for wce in [true, false] {
        let b = Bench::uncached_beside_a_cache("landing-off", wce);
        b.sends_from_blocks.set(true);
        let cache = Arc::clone(b.cache.as_ref().expect("daemon cache"));
        let data = pattern(7, 300 * BS);
        let mut cmd = fetching_write(5, &data, 8192, false);
        let landing = super::landing::Landing::reserve(&b.lun, &cmd, &b.ctx()).expect("lands");
        assert_eq!(landing.fetch_from(), 8192);
        land_rest(&landing, &data);
        let a = storage::write_landed(
            &b.lun,
            5,
            300,
            !wce,
            &mut cmd.data_out,
            landing,
            &b.ctx(),
            b.reply(),
        );
        assert!(matches!(a, Answer::Later(_)), "written on a worker");
        assert_eq!(b.finish(a).status, 0);
        assert_eq!(b.on_disk(5, data.len()), data, "in the file before status");
        assert_eq!(b.read(5, 300).1, data);
        // nothing of the LUN stays in the cache: the slots were only borrowed
        assert_eq!(cache.dirty_bytes(0), 0);
        let spans = cache
            .spans(5 * BS as u64, data.len() as u64)
            .expect("spans");
        for span in spans {
            assert!(
                !matches!(
                    cache.lookup(b.lun.cache_id, &span, cache::ReadAhead::None),
                    cache::Lookup::Hit(_)
                ),
                "an uncached LUN's block is in the cache"
            );
        }
        cache.check_invariants().expect("cache invariants");
    }
}

#[test]
fn a_landing_refused_half_way_writes_the_rest_the_ordinary_way() {
    let b = Bench::new("landing-rest", config::CacheMode::Numa, true);
    b.sends_from_blocks.set(true);
    let cache = Arc::clone(b.cache.as_ref().expect("cache"));
    let per_block = (CACHE_BLOCK / BS) as u64;
    let data = pattern(6, 3 * CACHE_BLOCK);
    let mut cmd = fetching_write(per_block as u32, &data, 0, false);
    let landing = super::landing::Landing::reserve(&b.lun, &cmd, &b.ctx()).expect("lands");
    land_rest(&landing, &data);
    // the second block is being filled from disk when the command runs
    let span = cache
        .spans(2 * CACHE_BLOCK as u64, CACHE_BLOCK as u64)
        .expect("span")
        .next()
        .expect("one");
    let cache::Lookup::Miss(fill) = cache.lookup(b.lun.cache_id, &span, cache::ReadAhead::None)
    else {
        panic!("a miss");
    };
    let a = storage::write_landed(
        &b.lun,
        per_block,
        3 * per_block as u32,
        false,
        &mut cmd.data_out,
        landing,
        &b.ctx(),
        b.reply(),
    );
    assert!(matches!(a, Answer::Later(_)), "the rest waits on a worker");
    fill.abort();
    assert_eq!(b.finish(a).status, 0);
    assert_eq!(b.read(per_block, 3 * per_block as u32).1, data);
    cache.check_invariants().expect("cache invariants");
}

#[test]
fn only_plain_writes_of_a_daemon_with_a_cache_land() {
    let b = Bench::new("landing-no", config::CacheMode::Numa, true);
    let data = pattern(2, 64 * BS);
    let cmd = fetching_write(0, &data, 0, false);
    assert!(
        super::landing::Landing::reserve(&b.lun, &cmd, &b.ctx()).is_none(),
        "the link cannot put data into cache blocks"
    );
    b.sends_from_blocks.set(true);
    assert!(super::landing::Landing::reserve(&b.lun, &cmd, &b.ctx()).is_some());
    let fua = fetching_write(0, &data, 0, true);
    assert!(super::landing::Landing::reserve(&b.lun, &fua, &b.ctx()).is_some());
    let mut short = fetching_write(0, &data, 0, false);
    short.expected_write_len -= BS as u32;
    assert!(super::landing::Landing::reserve(&b.lun, &short, &b.ctx()).is_none());
    let all_in = fetching_write(0, &data, data.len(), false);
    assert!(super::landing::Landing::reserve(&b.lun, &all_in, &b.ctx()).is_none());
    let wt = Bench::new("landing-wce0", config::CacheMode::Numa, false);
    wt.sends_from_blocks.set(true);
    assert!(super::landing::Landing::reserve(&wt.lun, &cmd, &wt.ctx()).is_some());
    // the slots are the daemon cache's memory: none, no landing
    let off = Bench::new("landing-off", config::CacheMode::Off, true);
    off.sends_from_blocks.set(true);
    assert!(super::landing::Landing::reserve(&off.lun, &cmd, &off.ctx()).is_none());
    let beside = Bench::uncached_beside_a_cache("landing-off-cache", true);
    beside.sends_from_blocks.set(true);
    assert!(super::landing::Landing::reserve(&beside.lun, &cmd, &beside.ctx()).is_some());
    // not a plain WRITE (WRITE SAME here): fetched as before
    let mut same = fetching_write(0, &data, 0, false);
    same.cdb = iscsi_proto::Cdb::new(&[0x41, 0, 0, 0, 0, 0, 0, 0, 64, 0]).expect("cdb");
    assert!(super::landing::Landing::reserve(&b.lun, &same, &b.ctx()).is_none());
}
