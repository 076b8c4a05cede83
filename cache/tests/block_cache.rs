//! BlockCache-level behaviour: configuration errors, block placement (home node, memory from
//! the home node's arena), default geometry and the 512 KiB two-partition bound, counters,
//! dirty accounting and throttling per node, range flushes, LUN invalidation with pins.

use cache::{
    BlockCache, BlockSpan, CacheConfig, Lookup, ReadAhead, Topology, UpdateOutcome, WriteOutcome,
};

fn small(nodes: usize) -> BlockCache {
    small_with(nodes, cache::MemoryKind::Private)
}

fn span(block: u64, start: usize, len: usize) -> BlockSpan {
    BlockSpan::new(4096, block, start, len).unwrap()
}

fn fill(c: &BlockCache, lun: u32, block: u64, byte: u8) -> cache::BlockRef {
    match c.lookup(lun, &span(block, 0, 4096), ReadAhead::None) {
        Lookup::Miss(mut f) => {
            for r in f.runs_mut() {
                r.buf.fill(byte);
            }
            f.complete().unwrap()
        }
        Lookup::Hit(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn config_errors_name_the_field() {
    let topo = Topology::split(&[0], 2, 1);
    let base = CacheConfig {
        huge_pages: false,
        bytes_per_node: 1 << 20,
        dirty_limit_bytes: 1 << 19,
        ..CacheConfig::default()
    };
    let field = |cfg: CacheConfig| match BlockCache::new(cfg, &topo) {
        Err(cache::CacheError::Config(e)) => e.field,
        other => panic!("expected a config error, got {other:?}"),
    };
    assert_eq!(
        field(CacheConfig {
            block_size: 6000,
            ..base.clone()
        }),
        "block_size"
    );
    assert_eq!(
        field(CacheConfig {
            block_size: 2 << 20,
            ..base.clone()
        }),
        "block_size"
    );
    assert_eq!(
        field(CacheConfig {
            sector_size: 100,
            ..base.clone()
        }),
        "sector_size"
    );
    assert_eq!(
        field(CacheConfig {
            group_blocks: 0,
            ..base.clone()
        }),
        "group_blocks"
    );
    assert_eq!(
        field(CacheConfig {
            partitions_per_node: 0,
            ..base.clone()
        }),
        "partitions_per_node"
    );
    assert_eq!(
        field(CacheConfig {
            partitions_per_node: 64,
            ..base.clone()
        }),
        "bytes_per_node"
    );
    assert_eq!(
        field(CacheConfig {
            dirty_limit_bytes: 2 << 20,
            ..base.clone()
        }),
        "dirty_limit_bytes"
    );
    assert_eq!(
        field(CacheConfig {
            dirty_limit_bytes: 10,
            ..base.clone()
        }),
        "dirty_limit_bytes"
    );
    let msg = CacheConfig {
        block_size: 6000,
        ..base.clone()
    }
    .validate(2)
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("cache.block_size") && msg.contains("6000"),
        "{msg}"
    );
    assert!(BlockCache::new(base, &topo).is_ok());
}

#[test]
fn default_geometry_512k_request_takes_at_most_two_partitions() {
    let g = CacheConfig::default().validate(2).unwrap();
    for offset in (0..(8u64 << 20)).step_by(4096) {
        let mut parts: Vec<usize> = g
            .spans(offset, 512 << 10)
            .unwrap()
            .map(|s| g.partition_of(1, s.block_no()))
            .collect();
        parts.dedup();
        assert!(parts.len() <= 2, "offset {offset}: {parts:?}");
    }
}

#[test]
fn blocks_live_in_their_home_nodes_arena() {
    let c = small(3);
    for b in 0..24u64 {
        let r = fill(&c, 1, b, b as u8);
        let home = c.home_node(1, b);
        assert_eq!(r.node(), home);
        assert_eq!(home, c.geometry().home_node(1, b), "home_node is pure");
        let a = &c.arenas()[home];
        let p = r.bytes().as_ptr() as usize;
        let base = a.base().as_ptr() as usize;
        assert!(
            p >= base && p < base + a.len(),
            "block {b} not in node {home}'s arena"
        );
        assert_eq!(p % 4096, 0, "slot not 4096-aligned");
    }
}

#[test]
fn one_copy_visible_from_every_node() {
    // A write through the cache is seen by a later read whatever node asks: there is one
    // home per block.
    let c = small(2);
    let _ = c.write_back(0, &span(5, 0, 512), &[9; 512]);
    let Lookup::Hit(r) = c.lookup(0, &span(5, 0, 512), ReadAhead::None) else {
        panic!()
    };
    assert_eq!(r.bytes(), &[9; 512][..]);
    c.check_invariants().unwrap();
}

#[test]
fn counters_and_served_bytes() {
    let c = small(2);
    drop(fill(&c, 0, 0, 1));
    let Lookup::Hit(r) = c.lookup(0, &span(0, 0, 4096), ReadAhead::None) else {
        panic!()
    };
    let home = r.node();
    c.record_served(home, home, 4096);
    c.record_served(home, 1 - home, 1000);
    c.record_forward(1 - home, home);
    let h = c.counters(home).unwrap();
    let o = c.counters(1 - home).unwrap();
    assert_eq!((h.hits, h.misses), (1, 1));
    assert_eq!(h.served_local_bytes, 4096);
    assert_eq!(o.served_remote_bytes, 1000);
    assert_eq!((o.forwards_out, h.forwards_in), (1, 1));
    assert!(c.counters(7).is_none());
    c.record_served(9, 9, 1); // unknown nodes are ignored
}

#[test]
fn dirty_limit_is_per_node_and_throttles() {
    let c = small(2);
    // group_blocks 2: blocks 0,1 -> partition 0 (node 0); 2,3 -> partition 1 (node 1).
    assert_eq!(c.home_node(0, 0), 0);
    assert_eq!(c.home_node(0, 2), 1);
    assert!(matches!(
        c.write_back(0, &span(0, 0, 4096), &[1; 4096]),
        WriteOutcome::Written { .. }
    ));
    assert!(matches!(
        c.write_back(0, &span(1, 0, 4096), &[1; 4096]),
        WriteOutcome::Written { .. }
    ));
    assert_eq!(c.dirty_bytes(0), 8192);
    // Node 0 is at its limit; rewriting dirty sectors is still allowed, new ones are not.
    assert!(matches!(
        c.write_back(0, &span(0, 0, 512), &[2; 512]),
        WriteOutcome::Written { newly_dirty: 0 }
    ));
    assert_eq!(
        c.write_back(0, &span(8, 0, 512), &[2; 512]),
        WriteOutcome::Throttled
    );
    // Node 1 is independent.
    assert!(matches!(
        c.write_back(0, &span(2, 0, 512), &[1; 512]),
        WriteOutcome::Written { .. }
    ));
    assert_eq!(c.counters(0).unwrap().throttled, 1);
    assert_eq!(
        c.write_back(0, &span(2, 0, 512), &[1; 100]),
        WriteOutcome::Unaligned
    );
    let mut out = Vec::new();
    assert_eq!(c.collect_dirty(0, 10, &mut out), 2);
    assert!(out.iter().all(|r| r.node() == 0));
    for r in out.drain(..) {
        assert!(c.mark_clean(r));
    }
    assert_eq!(c.dirty_bytes(0), 0);
    assert_eq!(c.dirty_bytes(1), 512);
    c.check_invariants().unwrap();
}

#[test]
fn dirty_ranges_small_and_whole_lun() {
    let c = small(2);
    for b in [1u64, 2, 6] {
        let _ = c.write_back(3, &span(b, 1024, 512), &[1; 512]);
    }
    let _ = c.write_back(4, &span(2, 0, 512), &[1; 512]);
    let mut out = Vec::new();
    let scan = c.dirty_ranges(3, 4096, 2 * 4096, &mut out).unwrap();
    assert_eq!((scan.taken, scan.in_flight), (2, 0));
    let again = c.dirty_ranges(3, 0, 8 * 4096, &mut Vec::new()).unwrap();
    assert_eq!((again.taken, again.in_flight), (1, 2));
    // A whole (huge) LUN range walks the cached keys instead of every block number.
    let mut rest = Vec::new();
    let whole = c.dirty_ranges(4, 0, 1 << 50, &mut rest).unwrap();
    assert_eq!(whole.taken, 1);
    assert!(c.dirty_ranges(3, u64::MAX, 2, &mut rest).is_err());
    drop(out);
    drop(rest);
    c.check_invariants().unwrap();
}

#[test]
fn invalidate_lun_keeps_pinned_blocks_until_dropped() {
    let c = small(2);
    let r = fill(&c, 2, 0, 5);
    drop(fill(&c, 2, 1, 6));
    let _ = c.write_back(2, &span(2, 0, 512), &[1; 512]);
    drop(fill(&c, 3, 0, 7));
    assert_eq!(c.invalidate_lun(2), 3);
    assert_eq!(c.dirty_bytes(0) + c.dirty_bytes(1), 0);
    assert_eq!(
        r.bytes(),
        &[5; 4096][..],
        "pinned data must survive invalidation"
    );
    assert_eq!(c.stats().detached, 1);
    assert!(matches!(
        c.lookup(2, &span(0, 0, 512), ReadAhead::None),
        Lookup::Miss(_)
    ));
    assert!(matches!(
        c.lookup(3, &span(0, 0, 512), ReadAhead::None),
        Lookup::Hit(_)
    ));
    drop(r);
    assert_eq!(c.stats().detached, 0);
    c.check_invariants().unwrap();
}

#[test]
fn write_through_update_paths() {
    let c = small(1);
    let s = span(0, 512, 512);
    assert_eq!(
        c.write_through_update(0, &s, &[1; 512]),
        UpdateOutcome::NotCached
    );
    let r = fill(&c, 0, 0, 0);
    assert_eq!(
        c.write_through_update(0, &s, &[1; 512]),
        UpdateOutcome::Updated
    );
    assert_eq!(r.bytes()[512], 0, "pinned copy unchanged (copy-on-write)");
    let Lookup::Hit(h) = c.lookup(0, &s, ReadAhead::None) else {
        panic!()
    };
    assert_eq!(h.bytes(), &[1; 512][..]);
    assert_eq!(c.dirty_bytes(0), 0, "write-through data is clean");
    assert_eq!(
        c.write_through_update(0, &s, &[1; 3]),
        UpdateOutcome::Unaligned
    );
    c.check_invariants().unwrap();
}

#[test]
fn bypass_when_everything_is_pinned() {
    let c = small(1);
    // Partition 0 holds blocks 0,1 (group 0) and 4,5 (group 2): 4 slots per partition.
    let refs: Vec<_> = [0u64, 1, 4, 5].iter().map(|&b| fill(&c, 0, b, 1)).collect();
    assert_eq!(
        c.lookup(0, &span(9, 0, 512), ReadAhead::None)
            .to_string_kind(),
        "NoSpace"
    );
    assert_eq!(
        c.write_back(0, &span(12, 0, 512), &[0; 512]),
        WriteOutcome::NoSpace
    );
    drop(refs);
    assert!(matches!(
        c.lookup(0, &span(9, 0, 512), ReadAhead::None),
        Lookup::Miss(_)
    ));
}

trait Kind {
    fn to_string_kind(&self) -> &'static str;
}
impl Kind for Lookup {
    fn to_string_kind(&self) -> &'static str {
        match self {
            Lookup::Hit(_) => "Hit",
            Lookup::Miss(_) => "Miss",
            Lookup::Busy => "Busy",
            Lookup::NoSpace => "NoSpace",
            Lookup::Bypass => "Bypass",
        }
    }
}

fn small_with(nodes: usize, memory: cache::MemoryKind) -> BlockCache {
    let cpus: Vec<usize> = (0..nodes).collect();
    let topo = Topology::split(&cpus, nodes, 1);
    let cfg = CacheConfig {
        block_size: 4096,
        group_blocks: 2,
        partitions_per_node: 2,
        bytes_per_node: 8 * 4096,
        huge_pages: false,
        dirty_limit_bytes: 2 * 4096,
        ..CacheConfig::default()
    };
    BlockCache::with_memory(cfg, &topo, memory).unwrap()
}

/// A live upgrade's cache memory: the first cache's memory files, mapped by a second cache
/// of the same layout, hold its clean blocks; adopted, they are hits with the same bytes
/// (a block cached in part: its valid sectors only); blocks whose home moved (another LUN
/// id) are not adopted.
#[test]
fn kept_memory_files_are_adopted_by_a_cache_of_the_same_layout() {
    use std::os::fd::BorrowedFd;
    let a = small_with(2, cache::MemoryKind::Shared);
    for b in 0..6u64 {
        drop(fill(&a, 3, b, 0x40 + b as u8));
    }
    // block 6 is cached in part only: its first sector
    match a.lookup(3, &span(6, 0, 512), ReadAhead::None) {
        Lookup::Miss(mut f) => {
            for r in f.runs_mut() {
                r.buf.fill(0x99);
            }
            drop(f.complete().unwrap());
        }
        other => panic!("{}", other.to_string_kind()),
    }
    let hot = a.hot_blocks();
    assert_eq!(hot.len(), 7);
    assert_eq!(hot.iter().filter(|b| b.valid.is_none()).count(), 6);
    let files: Vec<std::os::fd::OwnedFd> = a
        .memory_files()
        .expect("shared memory")
        .into_iter()
        .map(|f: BorrowedFd<'_>| f.try_clone_to_owned().unwrap())
        .collect();
    let layout = a.layout();
    assert_eq!(
        cache::MemoryLayout::from_text(&layout.to_text()),
        Some(layout)
    );
    drop(a);

    let b = small_with(2, cache::MemoryKind::Kept(files));
    assert_eq!(b.layout(), layout);
    // coldest first, so the hottest ends most recently used
    let mut adopted = 0;
    for k in hot.iter().rev() {
        if b.adopt(3, k) {
            adopted += 1;
        }
    }
    assert_eq!(adopted, 7);
    for blk in 0..6u64 {
        match b.lookup(3, &span(blk, 0, 4096), ReadAhead::None) {
            Lookup::Hit(r) => assert!(
                r.bytes().iter().all(|&x| x == 0x40 + blk as u8),
                "block {blk}"
            ),
            other => panic!("block {blk}: {}", other.to_string_kind()),
        }
    }
    match b.lookup(3, &span(6, 0, 512), ReadAhead::None) {
        Lookup::Hit(r) => assert!(r.bytes().iter().all(|&x| x == 0x99)),
        other => panic!("block 6's valid sector: {}", other.to_string_kind()),
    }
    assert!(matches!(
        b.lookup(3, &span(6, 512, 512), ReadAhead::None),
        Lookup::Miss(_)
    ));
    // adopting twice, or as a LUN whose blocks have other homes, changes nothing
    assert!(!b.adopt(3, &hot[0]));
    let moved: Vec<&cache::KeptBlock> = hot
        .iter()
        .filter(|k| b.geometry().partition_of(4, k.key.block_no) != k.partition as usize)
        .collect();
    assert!(!moved.is_empty());
    for k in moved {
        assert!(
            !b.adopt(4, k),
            "block {} is not at home for LUN 4",
            k.key.block_no
        );
    }
    let c = small_with(2, cache::MemoryKind::Private);
    assert!(c.memory_files().is_none());
}

#[test]
fn kept_memory_of_another_size_is_refused() {
    let a = small_with(1, cache::MemoryKind::Shared);
    let files: Vec<std::os::fd::OwnedFd> = a
        .memory_files()
        .unwrap()
        .into_iter()
        .map(|f| f.try_clone_to_owned().unwrap())
        .collect();
    let topo = Topology::split(&[0], 1, 1);
    let cfg = CacheConfig {
        block_size: 4096,
        group_blocks: 2,
        partitions_per_node: 2,
        bytes_per_node: 16 * 4096,
        huge_pages: false,
        dirty_limit_bytes: 2 * 4096,
        ..CacheConfig::default()
    };
    let e = BlockCache::with_memory(cfg.clone(), &topo, cache::MemoryKind::Kept(files))
        .expect_err("another size");
    assert!(e.to_string().contains("memory file"), "{e}");
    let e = BlockCache::with_memory(cfg, &topo, cache::MemoryKind::Kept(Vec::new()))
        .expect_err("no file");
    assert!(e.to_string().contains("0 memory files for 1 nodes"), "{e}");
}
