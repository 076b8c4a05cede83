//! Model-based property test of the block cache and of its coherence code: random
//! interleavings of reads (hits, held fills completed or aborted later, whole requests
//! through the production lookup/fill path), write-back writes, write-through writes, held
//! and failed flushes, SYNCHRONIZE-CACHE-style range flushes and LUN invalidation, checked
//! after every step against a plain `HashMap` model of the latest data. The disk is an
//! in-memory [`Store`](cache::Store) behind the production handle, and writes,
//! write-throughs, flushes and fills run the production `cache::coherence` functions over
//! it; where they wait for another thread's fill or flush, the test's waiter finishes the
//! fills and flushes the test holds. Checked:
//! - every read returns the latest data;
//! - a held `BlockRef` never sees its bytes change;
//! - a fill that raced with a write-through never validates what it read;
//! - structural invariants hold (one cached copy per block, lists, counters);
//! - after a range flush the disk holds the latest data of the range, and after a final
//!   flush the disk equals the latest data (no acknowledged write lost).

use std::collections::HashMap;
use std::io;

use cache::coherence::{self, CachedRead, GaveUp, NoWait, Waiter};
use cache::{BackingStore, Store};
use cache::{
    BlockCache, BlockRef, BlockSpan, CacheConfig, DirtyRange, Fill, Lookup, ReadAhead, Topology,
    WriteOutcome,
};
use proptest::prelude::*;

const BS: usize = 4096;
const SECTOR: usize = 512;
type Key = (u32, u64);

#[derive(Debug, Clone)]
enum Op {
    Read {
        lun: u32,
        block: u64,
        s0: usize,
        n: usize,
        hold: bool,
        ra: bool,
    },
    FinishFill {
        idx: usize,
        ok: bool,
    },
    Release {
        idx: usize,
    },
    WriteBack {
        lun: u32,
        block: u64,
        s0: usize,
        n: usize,
        byte: u8,
    },
    WriteThrough {
        lun: u32,
        block: u64,
        s0: usize,
        n: usize,
        byte: u8,
    },
    Flush {
        node: usize,
        max: usize,
        hold: bool,
    },
    FinishFlush {
        idx: usize,
        ok: bool,
    },
    SyncRange {
        lun: u32,
        block: u64,
        blocks: u64,
    },
    /// The production range flush (read-around, write-through, SYNCHRONIZE CACHE).
    FlushRange {
        lun: u32,
        block: u64,
        blocks: u64,
    },
    /// A whole request through the production lookup + fill path.
    ReadRange {
        lun: u32,
        block: u64,
        s0: usize,
        sectors: usize,
    },
    InvalidateLun {
        lun: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let key = (0u32..2, 0u64..7);
    let sectors = (0usize..8).prop_flat_map(|s0| (Just(s0), 1..=8 - s0));
    prop_oneof![
        4 => (key.clone(), sectors.clone(), any::<bool>(), any::<bool>())
            .prop_map(|((lun, block), (s0, n), hold, ra)| Op::Read { lun, block, s0, n, hold, ra }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(idx, ok)| Op::FinishFill { idx, ok }),
        2 => any::<usize>().prop_map(|idx| Op::Release { idx }),
        4 => (key.clone(), sectors.clone(), any::<u8>())
            .prop_map(|((lun, block), (s0, n), byte)| Op::WriteBack { lun, block, s0, n, byte }),
        1 => (key.clone(), sectors, any::<u8>())
            .prop_map(|((lun, block), (s0, n), byte)| Op::WriteThrough { lun, block, s0, n, byte }),
        2 => (0usize..2, 1usize..4, any::<bool>()).prop_map(|(node, max, hold)| Op::Flush { node, max, hold }),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(idx, ok)| Op::FinishFlush { idx, ok }),
        1 => (key.clone(), 1u64..4).prop_map(|((lun, block), blocks)| Op::SyncRange { lun, block, blocks }),
        1 => (key.clone(), 1u64..4).prop_map(|((lun, block), blocks)| Op::FlushRange { lun, block, blocks }),
        2 => (key, 0usize..8, 1usize..20)
            .prop_map(|((lun, block), s0, sectors)| Op::ReadRange { lun, block, s0, sectors }),
        1 => (0u32..2).prop_map(|lun| Op::InvalidateLun { lun }),
    ]
}

/// A LUN's disk in memory: blocks created with their initial content when first touched.
#[derive(Debug)]
struct MemDisk {
    lun: u32,
    blocks: std::sync::Mutex<HashMap<u64, Vec<u8>>>,
}

/// Blocks a LUN's disk has (requests may reach past the blocks the ops name).
const DISK_BLOCKS: u64 = 16;

impl MemDisk {
    /// LUN `lun`'s disk, behind the handle the production code takes.
    fn store(lun: u32) -> BackingStore {
        let disk = MemDisk {
            lun,
            blocks: std::sync::Mutex::new(HashMap::new()),
        };
        BackingStore::from_store(std::path::Path::new("mem"), SECTOR as u32, Box::new(disk))
            .unwrap()
    }

    /// The disk behind `store`.
    fn of(store: &BackingStore) -> &MemDisk {
        store.store_as::<MemDisk>().unwrap()
    }

    fn block(&self, b: u64) -> Vec<u8> {
        self.blocks
            .lock()
            .unwrap()
            .entry(b)
            .or_insert_with(|| initial((self.lun, b)))
            .clone()
    }

    /// Each block-sized piece of `[offset, offset + len)` as (block, start in block, start
    /// in the buffer, length).
    fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
        let mut at = 0usize;
        std::iter::from_fn(move || {
            if at >= len {
                return None;
            }
            let pos = offset + at as u64;
            let (b, o) = (pos / BS as u64, (pos % BS as u64) as usize);
            let n = (BS - o).min(len - at);
            let piece = (b, o, at, n);
            at += n;
            Some(piece)
        })
    }

    fn check(&self, offset: u64, len: usize) -> io::Result<()> {
        if offset + len as u64 > DISK_BLOCKS * BS as u64 || offset % SECTOR as u64 != 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(())
    }
}

impl Store for MemDisk {
    fn measure(&self) -> io::Result<u64> {
        Ok(DISK_BLOCKS * BS as u64)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(offset, buf.len())?;
        let mut blocks = self.blocks.lock().unwrap();
        for (b, o, at, n) in Self::pieces(offset, buf.len()) {
            let block = blocks.entry(b).or_insert_with(|| initial((self.lun, b)));
            buf[at..at + n].copy_from_slice(&block[o..o + n]);
        }
        Ok(())
    }
    fn write_at(&self, data: &[u8], offset: u64, _durable: bool) -> io::Result<()> {
        self.check(offset, data.len())?;
        let mut blocks = self.blocks.lock().unwrap();
        for (b, o, at, n) in Self::pieces(offset, data.len()) {
            let block = blocks.entry(b).or_insert_with(|| initial((self.lun, b)));
            block[o..o + n].copy_from_slice(&data[at..at + n]);
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Where the production code waits for another thread, the test plays that thread: it
/// finishes the flushes it holds for blocks of `lun` in `first..=last` (written, cleaned),
/// else the fills it holds for them (each must have been told it raced with the write that
/// waits), else drops its held references (a pinned dirty copy with no slot for
/// copy-on-write). Nothing left to finish: the wait would never end.
struct PlayOthers<'a> {
    lun: u32,
    first: u64,
    last: u64,
    disk: &'a BackingStore,
    fills: &'a mut Vec<(Fill, Key, usize, usize)>,
    flushes: &'a mut Vec<DirtyRange>,
    refs: &'a mut Vec<(BlockRef, Vec<u8>)>,
}

impl PlayOthers<'_> {
    fn covers(&self, k: Key) -> bool {
        k.0 == self.lun && (self.first..=self.last).contains(&k.1)
    }
}

impl Waiter for PlayOthers<'_> {
    fn wait(&mut self) -> Result<(), GaveUp> {
        let mut done = false;
        let mut i = 0;
        while i < self.flushes.len() {
            let k = self.flushes[i].key();
            if self.covers((k.lun, k.block_no)) {
                let r = self.flushes.swap_remove(i);
                coherence::write_dirty(self.disk, &r).unwrap();
                let _ = r.mark_clean();
                done = true;
            } else {
                i += 1;
            }
        }
        if done {
            return Ok(());
        }
        let mut i = 0;
        while i < self.fills.len() {
            if self.covers(self.fills[i].1) {
                let (mut f, _, _, _) = self.fills.swap_remove(i);
                for run in f.runs_mut() {
                    self.disk.read_at(run.buf, run.disk_offset).unwrap();
                }
                assert!(f.complete().is_err(), "raced fill validated");
                done = true;
            } else {
                i += 1;
            }
        }
        if done {
            return Ok(());
        }
        assert!(
            !self.refs.is_empty(),
            "waiting for a fill or flush that nobody holds"
        );
        self.refs.clear();
        Ok(())
    }
}

struct World {
    cache: BlockCache,
    disks: [BackingStore; 2],
    latest: HashMap<Key, Vec<u8>>,
    refs: Vec<(BlockRef, Vec<u8>)>,
    fills: Vec<(Fill, Key, usize, usize)>,
    flushes: Vec<DirtyRange>,
}

fn initial(key: Key) -> Vec<u8> {
    // Distinct initial disk content per block and sector.
    (0..BS)
        .map(|i| (key.0 as usize * 31 + key.1 as usize * 7 + i / SECTOR) as u8)
        .collect()
}

impl World {
    fn new() -> World {
        let topo = Topology::split(&[0, 1], 2, 1);
        let cfg = CacheConfig {
            block_size: BS,
            group_blocks: 1,
            partitions_per_node: 1,
            bytes_per_node: 3 * BS,
            sector_size: SECTOR,
            huge_pages: false,
            dirty_limit_bytes: 3 * BS as u64,
            ..CacheConfig::default()
        };
        World {
            cache: BlockCache::new(cfg, &topo).unwrap(),
            disks: [MemDisk::store(0), MemDisk::store(1)],
            latest: HashMap::new(),
            refs: Vec::new(),
            fills: Vec::new(),
            flushes: Vec::new(),
        }
    }

    fn disk(&self, k: Key) -> Vec<u8> {
        MemDisk::of(&self.disks[k.0 as usize]).block(k.1)
    }
    fn latest(&mut self, k: Key) -> &mut Vec<u8> {
        self.latest.entry(k).or_insert_with(|| initial(k))
    }

    fn do_fill_io(&mut self, f: &mut Fill, k: Key) {
        let disk = &self.disks[k.0 as usize];
        for run in f.runs_mut() {
            disk.read_at(run.buf, run.disk_offset).unwrap();
        }
    }

    /// The cache and `lun`'s disk, with the test playing the other threads for blocks
    /// `first..=last`.
    fn with_others(
        &mut self,
        lun: u32,
        first: u64,
        last: u64,
    ) -> (&BlockCache, &BackingStore, PlayOthers<'_>) {
        let World {
            cache,
            disks,
            fills,
            flushes,
            refs,
            ..
        } = self;
        let disk = &disks[lun as usize];
        let others = PlayOthers {
            lun,
            first,
            last,
            disk,
            fills,
            flushes,
            refs,
        };
        (cache, disk, others)
    }

    /// The production range flush, with the test playing the other threads.
    fn flush_range(&mut self, lun: u32, first: u64, blocks: u64) {
        let (cache, disk, mut others) = self.with_others(lun, first, first + blocks - 1);
        coherence::flush_range(
            cache,
            lun,
            disk,
            first * BS as u64,
            blocks * BS as u64,
            &mut others,
        )
        .unwrap();
    }

    /// The disk holds the latest data of every block in the range.
    fn check_disk(&mut self, lun: u32, first: u64, blocks: u64) {
        for b in first..first + blocks {
            let k = (lun, b);
            let want = self.latest(k).clone();
            assert_eq!(self.disk(k), want, "disk lost a write to {k:?}");
        }
    }

    fn check_read(&mut self, r: &BlockRef, k: Key, start: usize, len: usize) {
        let want = self.latest(k)[start..start + len].to_vec();
        assert_eq!(
            r.bytes(),
            &want[..],
            "read of {k:?} at {start}+{len} is not the latest data"
        );
    }

    fn write_flush(&mut self, r: &DirtyRange) {
        coherence::write_dirty(&self.disks[r.key().lun as usize], r).unwrap();
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Read {
                lun,
                block,
                s0,
                n,
                hold,
                ra,
            } => {
                let k = (lun, block);
                let span = BlockSpan::new(BS, block, s0 * SECTOR, n * SECTOR).unwrap();
                let ra = if ra {
                    ReadAhead::WholeBlock
                } else {
                    ReadAhead::None
                };
                match self.cache.lookup(lun, &span, ra) {
                    Lookup::Hit(r) => {
                        self.check_read(&r, k, span.start(), span.len());
                        if hold {
                            let snap = r.bytes().to_vec();
                            self.refs.push((r, snap));
                        }
                    }
                    Lookup::Miss(f) => self.fills.push((f, k, span.start(), span.len())),
                    Lookup::Busy => assert!(
                        self.fills.iter().any(|(_, fk, _, _)| *fk == k),
                        "busy without a fill in flight"
                    ),
                    Lookup::NoSpace | Lookup::Bypass => {}
                }
            }
            Op::FinishFill { idx, ok } => {
                if self.fills.is_empty() {
                    return;
                }
                let (mut f, k, start, len) = self.fills.swap_remove(idx % self.fills.len());
                if !ok {
                    f.abort();
                    return;
                }
                self.do_fill_io(&mut f, k);
                if let Ok(r) = f.complete() {
                    self.check_read(&r, k, start, len);
                    let snap = r.bytes().to_vec();
                    self.refs.push((r, snap));
                }
            }
            Op::Release { idx } => {
                if !self.refs.is_empty() {
                    self.refs.swap_remove(idx % self.refs.len());
                }
            }
            Op::WriteBack {
                lun,
                block,
                s0,
                n,
                byte,
            } => {
                let k = (lun, block);
                let span = BlockSpan::new(BS, block, s0 * SECTOR, n * SECTOR).unwrap();
                let data = vec![byte; span.len()];
                let offset = block * BS as u64 + span.start() as u64;
                // as on an event thread: a busy block is not waited for
                match coherence::write_back(&self.cache, lun, offset, &data, &mut NoWait) {
                    Ok(()) => self.latest(k)[span.start()..span.end()].copy_from_slice(&data),
                    Err(WriteOutcome::Busy) => {
                        assert!(self.fills.iter().any(|(_, fk, _, _)| *fk == k))
                    }
                    Err(WriteOutcome::Throttled | WriteOutcome::NoSpace) => {}
                    Err(other) => panic!("aligned write refused: {other:?}"),
                }
            }
            Op::WriteThrough {
                lun,
                block,
                s0,
                n,
                byte,
            } => {
                // The bypass protocol: flush the range, write the disk, update the cache.
                let k = (lun, block);
                let span = BlockSpan::new(BS, block, s0 * SECTOR, n * SECTOR).unwrap();
                let data = vec![byte; span.len()];
                self.flush_range(lun, block, 1);
                self.latest(k)[span.start()..span.end()].copy_from_slice(&data);
                let (cache, disk, mut others) = self.with_others(lun, block, block);
                let offset = block * BS as u64 + span.start() as u64;
                let done = coherence::write_through(
                    Some(cache),
                    lun,
                    disk,
                    offset,
                    &data,
                    false,
                    &mut others,
                );
                done.written.unwrap();
                done.cached.unwrap();
            }
            Op::Flush { node, max, hold } => {
                let mut out = Vec::new();
                self.cache.collect_dirty(node, max, &mut out);
                for r in out {
                    if hold {
                        self.flushes.push(r);
                    } else {
                        self.write_flush(&r);
                        let _ = self.cache.mark_clean(r);
                    }
                }
            }
            Op::FinishFlush { idx, ok } => {
                if self.flushes.is_empty() {
                    return;
                }
                let r = self.flushes.swap_remove(idx % self.flushes.len());
                if ok {
                    self.write_flush(&r);
                    let _ = r.mark_clean();
                } // else: I/O error, dropped: stays dirty
            }
            Op::SyncRange { lun, block, blocks } => {
                let mut out = Vec::new();
                let scan = self
                    .cache
                    .dirty_ranges(lun, block * BS as u64, blocks * BS as u64, &mut out)
                    .unwrap();
                assert_eq!(scan.taken, out.len());
                let held = self
                    .flushes
                    .iter()
                    .filter(|r| {
                        r.key().lun == lun && (block..block + blocks).contains(&r.key().block_no)
                    })
                    .count();
                assert!(scan.in_flight <= held, "in-flight flush that nobody holds");
                for r in out {
                    self.write_flush(&r);
                    assert!(r.mark_clean(), "nothing changed, so the block must clean");
                }
            }
            Op::FlushRange { lun, block, blocks } => {
                self.flush_range(lun, block, blocks);
                let mut out = Vec::new();
                let scan = self
                    .cache
                    .dirty_ranges(lun, block * BS as u64, blocks * BS as u64, &mut out)
                    .unwrap();
                assert_eq!((scan.taken, scan.in_flight), (0, 0), "dirty after a flush");
                self.check_disk(lun, block, blocks);
            }
            Op::ReadRange {
                lun,
                block,
                s0,
                sectors,
            } => {
                let offset = block * BS as u64 + (s0 * SECTOR) as u64;
                let len = (sectors * SECTOR) as u64;
                let disk = &self.disks[lun as usize];
                let got: Vec<u8> = match coherence::read(&self.cache, lun, disk, 0, offset, len) {
                    CachedRead::Blocks(refs) => refs
                        .iter()
                        .flat_map(|r| r.bytes().iter().copied())
                        .collect(),
                    CachedRead::NotAdmitted => {
                        // nothing of it is cached: the disk must hold the latest data as is
                        let mut buf = vec![0u8; len as usize];
                        disk.read_at(&mut buf, offset).unwrap();
                        buf
                    }
                    CachedRead::ReadAround => {
                        let last = (offset + len - 1) / BS as u64;
                        self.flush_range(lun, block, last - block + 1);
                        let mut buf = vec![0u8; len as usize];
                        self.disks[lun as usize].read_at(&mut buf, offset).unwrap();
                        buf
                    }
                    CachedRead::Failed(e) => panic!("in-memory read failed: {e}"),
                };
                let mut want = Vec::new();
                for (b, o, _, n) in MemDisk::pieces(offset, len as usize) {
                    want.extend_from_slice(&self.latest((lun, b))[o..o + n]);
                }
                assert_eq!(
                    got, want,
                    "read of lun {lun} at {offset}+{len} is not the latest"
                );
            }
            Op::InvalidateLun { lun } => {
                // LUN removal: in-flight flushes finish first, then cached data is dropped and
                // what counts is the disk.
                let keys: Vec<Key> = self.latest.keys().copied().filter(|k| k.0 == lun).collect();
                let mut i = 0;
                while i < self.flushes.len() {
                    if self.flushes[i].key().lun == lun {
                        let r = self.flushes.swap_remove(i);
                        self.write_flush(&r);
                        let _ = r.mark_clean();
                    } else {
                        i += 1;
                    }
                }
                self.cache.invalidate_lun(lun);
                for k in keys {
                    let d = self.disk(k);
                    *self.latest(k) = d;
                }
            }
        }
    }

    fn check(&self) {
        self.cache.check_invariants().unwrap();
        for (r, snap) in &self.refs {
            assert_eq!(r.bytes(), &snap[..], "pinned block {:?} changed", r.key());
        }
    }

    fn finish(mut self) {
        self.refs.clear();
        while let Some((mut f, k, start, len)) = self.fills.pop() {
            self.do_fill_io(&mut f, k);
            if let Ok(r) = f.complete() {
                self.check_read(&r, k, start, len);
            }
        }
        // the production SYNCHRONIZE CACHE of each LUN (finishing the held flushes)
        for lun in 0..2u32 {
            let (cache, disk, mut others) = self.with_others(lun, 0, DISK_BLOCKS - 1);
            coherence::flush_and_sync(cache, lun, disk, &mut others).unwrap();
        }
        assert!(
            self.flushes.is_empty(),
            "a held flush outlived SYNCHRONIZE CACHE"
        );
        let mut out = Vec::new();
        for node in 0..2 {
            while self.cache.collect_dirty(node, 16, &mut out) > 0 {
                for r in out.drain(..) {
                    self.write_flush(&r);
                    assert!(r.mark_clean());
                }
            }
            assert_eq!(self.cache.dirty_bytes(node), 0);
        }
        self.cache.check_invariants().unwrap();
        let s = self.cache.stats();
        assert_eq!((s.pinned, s.busy, s.detached), (0, 0, 0));
        let keys: Vec<Key> = self.latest.keys().copied().collect();
        for k in keys {
            self.check_disk(k.0, k.1, 1);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn cache_matches_model(ops in prop::collection::vec(op(), 1..120)) {
        let mut w = World::new();
        for op in ops {
            w.step(op);
            w.check();
        }
        w.finish();
    }
}
