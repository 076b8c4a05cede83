//! Model-based property test of the block cache: random interleavings of reads (hits, held
//! fills completed or aborted later), write-back writes, write-through writes, held and
//! failed flushes, SYNCHRONIZE-CACHE-style range flushes and LUN invalidation, checked after
//! every step against a plain `HashMap` model of the disk and of the latest data:
//! - every read returns the latest data;
//! - a held `BlockRef` never sees its bytes change;
//! - structural invariants hold (one cached copy per block, lists, counters);
//! - after a final flush, the disk equals the latest data (no acknowledged write lost).

use std::collections::HashMap;

use cache::{
    BlockCache, BlockRef, BlockSpan, CacheConfig, DirtyRange, Fill, Lookup, ReadAhead, Topology,
    UpdateOutcome, WriteOutcome,
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
        1 => (key, 1u64..4).prop_map(|((lun, block), blocks)| Op::SyncRange { lun, block, blocks }),
        1 => (0u32..2).prop_map(|lun| Op::InvalidateLun { lun }),
    ]
}

struct World {
    cache: BlockCache,
    disk: HashMap<Key, Vec<u8>>,
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
            disk: HashMap::new(),
            latest: HashMap::new(),
            refs: Vec::new(),
            fills: Vec::new(),
            flushes: Vec::new(),
        }
    }

    fn disk(&mut self, k: Key) -> &mut Vec<u8> {
        self.disk.entry(k).or_insert_with(|| initial(k))
    }
    fn latest(&mut self, k: Key) -> &mut Vec<u8> {
        self.latest.entry(k).or_insert_with(|| initial(k))
    }

    fn do_fill_io(&mut self, f: &mut Fill, k: Key) {
        let disk = self.disk(k).clone();
        for run in f.runs_mut() {
            let o = (run.disk_offset - k.1 * BS as u64) as usize;
            run.buf.copy_from_slice(&disk[o..o + run.buf.len()]);
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
        let k = (r.key().lun, r.key().block_no);
        let runs: Vec<(u64, Vec<u8>)> = r.runs().map(|(o, b)| (o, b.to_vec())).collect();
        for (o, b) in runs {
            let o = (o - k.1 * BS as u64) as usize;
            self.disk(k)[o..o + b.len()].copy_from_slice(&b);
        }
    }

    fn flush_key_fully(&mut self, k: Key) {
        // Complete held flushes of the block, then flush what remains dirty.
        let mut i = 0;
        while i < self.flushes.len() {
            if (self.flushes[i].key().lun, self.flushes[i].key().block_no) == k {
                let r = self.flushes.swap_remove(i);
                self.write_flush(&r);
                let _ = r.mark_clean();
            } else {
                i += 1;
            }
        }
        let mut out = Vec::new();
        loop {
            let scan = self
                .cache
                .dirty_ranges(k.0, k.1 * BS as u64, BS as u64, &mut out)
                .unwrap();
            assert_eq!(scan.in_flight, 0);
            if out.is_empty() {
                break;
            }
            for r in out.drain(..) {
                self.write_flush(&r);
                let _ = r.mark_clean();
            }
        }
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
                match self.cache.write_back(lun, &span, &data) {
                    WriteOutcome::Written { .. } => {
                        self.latest(k)[span.start()..span.end()].copy_from_slice(&data)
                    }
                    WriteOutcome::Busy => {
                        assert!(self.fills.iter().any(|(_, fk, _, _)| *fk == k))
                    }
                    WriteOutcome::Throttled | WriteOutcome::NoSpace => {}
                    WriteOutcome::Unaligned => panic!("aligned write refused"),
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
                self.flush_key_fully(k);
                self.disk(k)[span.start()..span.end()].copy_from_slice(&data);
                self.latest(k)[span.start()..span.end()].copy_from_slice(&data);
                loop {
                    match self.cache.write_through_update(lun, &span, &data) {
                        UpdateOutcome::Updated
                        | UpdateOutcome::NotCached
                        | UpdateOutcome::Dropped => break,
                        UpdateOutcome::Busy => {
                            // Finish the fills of this block (they were told they raced).
                            let mut i = 0;
                            while i < self.fills.len() {
                                if self.fills[i].1 == k {
                                    let (mut f, _, _, _) = self.fills.swap_remove(i);
                                    self.do_fill_io(&mut f, k);
                                    assert!(f.complete().is_err(), "raced fill validated");
                                } else {
                                    i += 1;
                                }
                            }
                        }
                        UpdateOutcome::NoSpace => self.refs.clear(),
                        UpdateOutcome::Unaligned => panic!("aligned update refused"),
                    }
                }
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
                    let d = self.disk(k).clone();
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
        for r in std::mem::take(&mut self.flushes) {
            self.write_flush(&r);
            let _ = r.mark_clean();
        }
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
            let want = self.latest(k).clone();
            assert_eq!(self.disk(k), &want, "disk lost a write to {k:?}");
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
