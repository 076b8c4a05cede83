//! Unit tests of one partition: lookups, fills, write-back and write-through, pins,
//! copy-on-write, flushes, eviction and admission.

use super::*;
use crate::arena::{ArenaOptions, BindPolicy};
use crate::topology::Topology;

fn part(slots: usize, bs: usize) -> Arc<Partition> {
    let t = Topology::split(&[0], 1, 1);
    let a = NodeArena::new(
        &t.nodes()[0],
        true,
        ArenaOptions {
            slot_size: bs,
            slots,
            huge_pages: false,
            policy: BindPolicy::Preferred,
            prefault: false,
        },
    )
    .unwrap();
    Arc::new(Partition::new(0, Arc::new(a), 0, slots, 512, Arc::default()).unwrap())
}

fn key(b: u64) -> BlockKey {
    BlockKey {
        lun: 0,
        block_no: b,
    }
}

fn fill_with(p: &Arc<Partition>, b: u64, byte: u8) -> BlockRef {
    match p.lookup(key(b), 0, 4096, ReadAhead::None) {
        Lookup::Miss(mut f) => {
            for r in f.runs_mut() {
                r.buf.fill(byte);
            }
            f.complete().unwrap()
        }
        other => panic!("expected miss, got {other:?}"),
    }
}

#[test]
fn miss_fill_hit() {
    let p = part(4, 4096);
    let r = fill_with(&p, 7, 0xab);
    assert!(r.bytes().iter().all(|&b| b == 0xab));
    drop(r);
    match p.lookup(key(7), 512, 1024, ReadAhead::None) {
        Lookup::Hit(r) => assert_eq!(r.bytes(), &[0xab; 1024][..]),
        other => panic!("{other:?}"),
    }
    p.check_invariants().unwrap();
}

#[test]
fn lru_evicts_least_recently_used() {
    let p = part(3, 4096);
    for b in 0..3 {
        drop(fill_with(&p, b, b as u8));
    }
    assert_eq!(p.lru_order(), vec![key(0), key(1), key(2)]);
    // Touch 0: now 1 is the oldest.
    let Lookup::Hit(r) = p.lookup(key(0), 0, 512, ReadAhead::None) else {
        panic!()
    };
    drop(r);
    assert_eq!(p.lru_order(), vec![key(1), key(2), key(0)]);
    // full: a block seen for the first time does not displace one read as often
    assert!(matches!(
        p.lookup(key(3), 0, 512, ReadAhead::None),
        Lookup::Bypass
    ));
    assert_eq!(p.lru_order(), vec![key(1), key(2), key(0)]);
    // read again, it is more popular than the victim and comes in
    drop(fill_with(&p, 3, 3));
    assert_eq!(p.lru_order(), vec![key(2), key(0), key(3)]);
    // block 1 was evicted; looked up twice now, it beats block 2 (read once)
    assert!(matches!(
        p.lookup(key(1), 0, 512, ReadAhead::None),
        Lookup::Miss(_)
    ));
    p.check_invariants().unwrap();
}

#[test]
fn pins_stop_eviction() {
    let p = part(2, 4096);
    let a = fill_with(&p, 0, 1);
    let b = fill_with(&p, 1, 2);
    assert!(matches!(
        p.lookup(key(2), 0, 512, ReadAhead::None),
        Lookup::NoSpace
    ));
    let b2 = b.clone();
    drop(b);
    assert!(matches!(
        p.lookup(key(2), 0, 512, ReadAhead::None),
        Lookup::NoSpace
    ));
    drop(b2);
    drop(fill_with(&p, 2, 3)); // evicts block 1, the only unpinned one
    assert!(a.bytes().iter().all(|&x| x == 1));
    assert!(matches!(
        p.lookup(key(0), 0, 512, ReadAhead::None),
        Lookup::Hit(_)
    ));
    p.check_invariants().unwrap();
}

#[test]
fn busy_block_reported_and_partial_fill_reads_only_missing() {
    let p = part(2, 65536);
    let Lookup::Miss(mut f) = p.lookup(key(0), 4096, 4096, ReadAhead::None) else {
        panic!()
    };
    assert_eq!(f.missing_bytes(), 4096);
    assert!(matches!(
        p.lookup(key(0), 0, 512, ReadAhead::None),
        Lookup::Busy
    ));
    assert_eq!(
        p.write_back(key(0), 0, &[0; 512], u64::MAX),
        WriteOutcome::Busy
    );
    for r in f.runs_mut() {
        assert_eq!(r.disk_offset, 4096);
        r.buf.fill(9);
    }
    drop(f.complete().unwrap());
    let Lookup::Miss(f) = p.lookup(key(0), 0, 65536, ReadAhead::None) else {
        panic!()
    };
    assert_eq!(f.missing_bytes(), 65536 - 4096);
    let Lookup::Hit(h) = p.lookup(key(0), 4096, 4096, ReadAhead::None) else {
        panic!("valid sectors stay readable during a fill")
    };
    assert!(h.bytes().iter().all(|&x| x == 9));
    f.abort();
    p.check_invariants().unwrap();
}

#[test]
fn write_to_pinned_block_is_copy_on_write() {
    let p = part(3, 4096);
    let old = fill_with(&p, 0, 1);
    assert!(matches!(
        p.write_back(key(0), 0, &[2; 1024], u64::MAX),
        WriteOutcome::Written { newly_dirty: 1024 }
    ));
    assert!(
        old.bytes().iter().all(|&x| x == 1),
        "a pinned block changed"
    );
    let Lookup::Hit(new) = p.lookup(key(0), 0, 4096, ReadAhead::None) else {
        panic!()
    };
    assert_eq!(&new.bytes()[..1024], &[2; 1024][..]);
    assert_eq!(&new.bytes()[1024..], &[1; 3072][..]);
    assert_eq!(p.stats().detached, 1);
    drop(old);
    assert_eq!(p.stats().detached, 0);
    p.check_invariants().unwrap();
}

#[test]
fn lazy_write_back_takes_only_old_dirty_blocks() {
    let clock = Arc::new(AtomicU64::new(100));
    let t = Topology::split(&[0], 1, 1);
    let a = NodeArena::new(
        &t.nodes()[0],
        true,
        ArenaOptions {
            slot_size: 4096,
            slots: 4,
            huge_pages: false,
            policy: BindPolicy::Preferred,
            prefault: false,
        },
    )
    .unwrap();
    let p = Arc::new(
        Partition::new(0, Arc::new(a), 0, 4, 512, Arc::default())
            .unwrap()
            .with_clock(Arc::clone(&clock)),
    );
    let _ = p.write_back(key(1), 0, &[1; 512], u64::MAX);
    clock.store(200, Ordering::Relaxed);
    let _ = p.write_back(key(2), 0, &[2; 512], u64::MAX);
    // writing again does not make block 1 younger
    let _ = p.write_back(key(1), 512, &[3; 512], u64::MAX);
    let mut v = Vec::new();
    assert_eq!(p.collect_dirty_older(8, &mut v, 99), 0);
    assert_eq!(p.collect_dirty_older(8, &mut v, 150), 1);
    assert_eq!(v[0].key(), key(1));
    assert_eq!(p.collect_dirty_older(8, &mut v, 200), 1);
    assert_eq!(v[1].key(), key(2));
    assert_eq!(p.dirty_queued(), (0, 4));
}

#[test]
fn dirty_generation_and_mark_clean() {
    let p = part(4, 4096);
    let _ = p.write_back(key(1), 512, &[5; 1024], u64::MAX);
    assert_eq!(
        p.counters
            .dirty_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        1024
    );
    assert_eq!(
        p.write_back(key(2), 0, &[5; 4096], 4096),
        WriteOutcome::Throttled
    );
    let mut v = Vec::new();
    assert_eq!(p.collect_dirty(8, &mut v), 1);
    let r = v.pop().unwrap();
    let runs: Vec<(u64, usize)> = r.runs().map(|(o, b)| (o, b.len())).collect();
    assert_eq!(runs, vec![(4096 + 512, 1024)]);
    assert!(matches!(p.dirty_of(key(1)), DirtyProbe::InFlight));
    // A newer write while the flush is in flight: cleaning must not happen.
    let _ = p.write_back(key(1), 0, &[6; 512], u64::MAX);
    assert!(!r.mark_clean());
    assert_eq!(p.dirty_sectors(), 3);
    let DirtyProbe::Taken(r) = p.dirty_of(key(1)) else {
        panic!()
    };
    assert_eq!(
        r.runs().map(|(o, b)| (o, b.len())).collect::<Vec<_>>(),
        vec![(4096, 1536)]
    );
    assert!(r.mark_clean());
    assert_eq!(p.dirty_sectors(), 0);
    assert_eq!(
        p.counters
            .dirty_bytes
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    p.check_invariants().unwrap();
}

#[test]
fn dropped_flush_requeues() {
    let p = part(2, 4096);
    let _ = p.write_back(key(0), 0, &[1; 4096], u64::MAX);
    let mut v = Vec::new();
    p.collect_dirty(1, &mut v);
    assert_eq!(p.collect_dirty(1, &mut v), 0);
    v.clear();
    assert_eq!(p.collect_dirty(1, &mut v), 1);
    p.check_invariants().unwrap();
}

#[test]
fn invalidate_lun_waits_for_pins() {
    let p = part(2, 4096);
    let r = fill_with(&p, 0, 4);
    let _ = p.write_back(key(1), 0, &[1; 512], u64::MAX);
    assert_eq!(p.invalidate_lun(0), 2);
    assert_eq!(p.dirty_sectors(), 0);
    assert_eq!(p.stats().free, 1);
    assert!(r.bytes().iter().all(|&x| x == 4));
    drop(r);
    assert_eq!(p.stats().free, 2);
    p.check_invariants().unwrap();
}

#[test]
fn write_through_update_marks_fill_stale() {
    let p = part(2, 4096);
    let Lookup::Miss(mut f) = p.lookup(key(0), 0, 4096, ReadAhead::None) else {
        panic!()
    };
    assert_eq!(
        p.write_through_update(key(0), 0, &[7; 512]),
        UpdateOutcome::Busy
    );
    for r in f.runs_mut() {
        r.buf.fill(1);
    }
    assert_eq!(f.complete().unwrap_err(), FillRaced);
    assert_eq!(
        p.write_through_update(key(0), 0, &[7; 512]),
        UpdateOutcome::NotCached
    );
    p.check_invariants().unwrap();
}

fn landing_with(p: &Arc<Partition>, b: u64, start: usize, len: usize, byte: u8) -> Landing {
    let mut l = p.reserve_landing(key(b), start, len).unwrap();
    // what a device would write at its address
    assert!(l.fill(0, &vec![byte; len]));
    l
}

#[test]
fn a_landing_is_invisible_until_committed_then_dirty() {
    let p = part(4, 4096);
    let old = fill_with(&p, 3, 0x11);
    let l = landing_with(&p, 3, 1024, 2048, 0x22);
    // readers still see the old copy
    match p.lookup(key(3), 0, 4096, ReadAhead::None) {
        Lookup::Hit(r) => assert!(r.bytes().iter().all(|&b| b == 0x11)),
        other => panic!("{other:?}"),
    }
    p.check_invariants().unwrap();
    assert_eq!(l.commit(u64::MAX).unwrap(), 2048);
    // the old reference keeps its bytes (copy-on-write); a new lookup sees both parts
    assert!(old.bytes().iter().all(|&b| b == 0x11));
    match p.lookup(key(3), 0, 4096, ReadAhead::None) {
        Lookup::Hit(r) => {
            assert!(r.bytes()[..1024].iter().all(|&b| b == 0x11));
            assert!(r.bytes()[1024..3072].iter().all(|&b| b == 0x22));
            assert!(r.bytes()[3072..].iter().all(|&b| b == 0x11));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(p.dirty_sectors(), 4);
    drop(old);
    p.check_invariants().unwrap();
}

#[test]
fn a_dropped_landing_frees_its_slot_and_changes_nothing() {
    let p = part(3, 4096);
    drop(fill_with(&p, 0, 0x11));
    drop(landing_with(&p, 0, 0, 4096, 0x33));
    match p.lookup(key(0), 0, 4096, ReadAhead::None) {
        Lookup::Hit(r) => assert!(r.bytes().iter().all(|&b| b == 0x11)),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.dirty_sectors(), 0);
    // landings hold their slots: two take the free ones, a third evicts the clean block,
    // a fourth finds none; once dropped, all three slots are free again
    let held: Vec<_> = (1..4)
        .map(|b| p.reserve_landing(key(b), 0, 4096).unwrap())
        .collect();
    assert!(p.reserve_landing(key(4), 0, 4096).is_none());
    p.check_invariants().unwrap();
    drop(held);
    let again: Vec<_> = (1..4)
        .map(|b| p.reserve_landing(key(b), 0, 4096).unwrap())
        .collect();
    drop(again);
    p.check_invariants().unwrap();
}

#[test]
fn a_landing_is_refused_unaligned_and_its_fill_bounded() {
    let p = part(2, 4096);
    assert!(p.reserve_landing(key(0), 100, 512).is_none());
    assert!(p.reserve_landing(key(0), 0, 8192).is_none());
    let mut l = p.reserve_landing(key(0), 512, 1024).unwrap();
    assert!(!l.fill(512, &[0; 1024]));
    assert!(l.fill(512, &[7; 512]));
    assert_eq!(l.dma_addr() % 512, 0);
    // SAFETY: no device writes into it
    assert_eq!(unsafe { &l.bytes()[512..] }, &[7; 512][..]);
}

#[test]
fn a_landing_commit_is_refused_over_the_dirty_limit_and_during_a_fill() {
    let p = part(4, 4096);
    let l = landing_with(&p, 0, 0, 4096, 0x44);
    let (l, why) = p.commit_landing_for_test(l, 1024);
    assert_eq!(why, WriteOutcome::Throttled);
    let f = match p.lookup(key(0), 0, 4096, ReadAhead::None) {
        Lookup::Miss(f) => f,
        other => panic!("{other:?}"),
    };
    let (l, why) = p.commit_landing_for_test(l, u64::MAX);
    assert_eq!(why, WriteOutcome::Busy);
    f.abort();
    assert!(l.commit(u64::MAX).is_ok());
    assert_eq!(p.dirty_sectors(), 8);
    p.check_invariants().unwrap();
}

#[test]
fn a_flush_in_flight_cannot_mark_a_committed_landing_clean() {
    let p = part(4, 4096);
    assert!(matches!(
        p.write_back(key(0), 0, &[0x55; 4096], u64::MAX),
        WriteOutcome::Written { .. }
    ));
    let mut out = Vec::new();
    p.collect_dirty(4, &mut out);
    let range = out.pop().unwrap();
    // new data lands and commits while the old data is being written back
    let l = landing_with(&p, 0, 0, 4096, 0x66);
    l.commit(u64::MAX).unwrap();
    assert!(!range.mark_clean());
    assert_eq!(p.dirty_sectors(), 8);
    // the next flush writes the new bytes
    p.collect_dirty(4, &mut out);
    let range = out.pop().unwrap();
    assert!(range.runs().all(|(_, b)| b.iter().all(|&x| x == 0x66)));
    assert!(range.mark_clean());
    assert_eq!(p.dirty_sectors(), 0);
    p.check_invariants().unwrap();
}

#[test]
fn a_written_through_landing_replaces_a_cached_copy_clean_without_a_copy() {
    let p = part(4, 4096);
    // a cached block with dirty sectors at both ends of the landing
    let old = fill_with(&p, 2, 0x11);
    assert!(matches!(
        p.write_back(key(2), 0, &[0x12; 1024], u64::MAX),
        WriteOutcome::Written { .. }
    ));
    assert!(matches!(
        p.write_back(key(2), 3072, &[0x13; 1024], u64::MAX),
        WriteOutcome::Written { .. }
    ));
    let l = landing_with(&p, 2, 512, 3072, 0x77);
    let addr = l.dma_addr();
    l.replace().unwrap();
    match p.lookup(key(2), 0, 4096, ReadAhead::None) {
        Lookup::Hit(r) => {
            // the landing's own memory is the cached copy now
            assert_eq!(r.bytes().as_ptr() as usize + 512, addr);
            assert!(r.bytes()[..512].iter().all(|&b| b == 0x12));
            assert!(r.bytes()[512..3584].iter().all(|&b| b == 0x77));
            assert!(r.bytes()[3584..].iter().all(|&b| b == 0x13));
        }
        other => panic!("{other:?}"),
    }
    // the landed sectors are clean (on disk); the old copy's dirty sectors outside stay dirty
    assert_eq!(p.dirty_sectors(), 2);
    // a reader of the old copy keeps its bytes (copy-on-write)
    assert!(old.bytes().iter().all(|&b| b == 0x11));
    drop(old);
    p.check_invariants().unwrap();
}

#[test]
fn a_written_through_landing_of_a_block_not_cached_or_being_filled_is_handed_back() {
    let p = part(4, 4096);
    let l = landing_with(&p, 5, 0, 4096, 0x21);
    let (l, why) = l.replace().unwrap_err();
    assert_eq!(why, UpdateOutcome::NotCached);
    drop(l);
    assert!(matches!(
        p.lookup(key(5), 0, 4096, ReadAhead::None),
        Lookup::Miss(_)
    ));
    // (that lookup's fill was aborted when dropped) a fill in flight: Busy, and the fill
    // will not validate what it read
    let f = match p.lookup(key(6), 0, 4096, ReadAhead::None) {
        Lookup::Miss(f) => f,
        other => panic!("{other:?}"),
    };
    let l = landing_with(&p, 6, 0, 4096, 0x31);
    let (l, why) = l.replace().unwrap_err();
    assert_eq!(why, UpdateOutcome::Busy);
    let mut f = f;
    for r in f.runs_mut() {
        r.buf.fill(1);
    }
    assert!(f.complete().is_err(), "the fill raced with the write");
    // the landing frees its slot: every slot can be had again
    drop(l);
    let all: Vec<_> = (10..14)
        .map(|b| p.reserve_landing(key(b), 0, 4096).unwrap())
        .collect();
    drop(all);
    p.check_invariants().unwrap();
}

impl Partition {
    /// `Landing::commit` with its refusal unpacked, for the tests above.
    fn commit_landing_for_test(&self, l: Landing, limit: u64) -> (Landing, WriteOutcome) {
        match l.commit(limit) {
            Ok(n) => panic!("committed ({n} bytes)"),
            Err(e) => e,
        }
    }
}
