//! Multi-threaded stress test of the block cache (bounded: a few thousand operations on a
//! few threads over a tiny cache, so eviction, copy-on-write, busy blocks and flush races are
//! frequent). Every sector carries a self-describing header (LUN, block, sector, version), so
//! any read can check it got the right block; each thread owns the blocks it writes, so it
//! can also check it reads its own latest version. At the end everything is flushed and the
//! disk must hold every block's last version; invariants must hold throughout.

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};

use cache::{
    BlockCache, BlockSpan, CacheConfig, Lookup, ReadAhead, Topology, UpdateOutcome, WriteOutcome,
};
use rand::{Rng, SeedableRng, rngs::StdRng};

const BS: usize = 8192;
const SECTOR: usize = 512;
const SECTORS: usize = BS / SECTOR;
const THREADS: usize = 4;
const OPS: usize = 2500;
const BLOCKS: u64 = 24;
const LUNS: u32 = 2;

type Disk = Arc<Mutex<HashMap<(u32, u64), Vec<u8>>>>;

fn sector_bytes(lun: u32, block: u64, sector: usize, version: u32) -> [u8; SECTOR] {
    let mut s = [0u8; SECTOR];
    s[0..4].copy_from_slice(&lun.to_le_bytes());
    s[4..12].copy_from_slice(&block.to_le_bytes());
    s[12..16].copy_from_slice(&(sector as u32).to_le_bytes());
    s[16..20].copy_from_slice(&version.to_le_bytes());
    for (i, b) in s[20..].iter_mut().enumerate() {
        *b = (version as usize + i) as u8;
    }
    s
}

/// Check the header of every whole sector in `bytes` (which start at sector `s0`); return
/// the versions seen.
fn check_sectors(lun: u32, block: u64, s0: usize, bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(SECTOR)
        .enumerate()
        .map(|(i, s)| {
            let v = u32::from_le_bytes(s[16..20].try_into().unwrap());
            assert_eq!(
                s,
                &sector_bytes(lun, block, s0 + i, v)[..],
                "sector {} of {lun}/{block} is not its own",
                s0 + i
            );
            v
        })
        .collect()
}

fn disk_read(disk: &Disk, lun: u32, block: u64, off: usize, buf: &mut [u8]) {
    let mut d = disk.lock().unwrap();
    let b = d.entry((lun, block)).or_insert_with(|| {
        (0..SECTORS)
            .flat_map(|s| sector_bytes(lun, block, s, 0))
            .collect()
    });
    buf.copy_from_slice(&b[off..off + buf.len()]);
}

fn disk_write(disk: &Disk, lun: u32, block: u64, off: usize, data: &[u8]) {
    let mut tmp = vec![0u8; BS];
    disk_read(disk, lun, block, 0, &mut tmp);
    let mut d = disk.lock().unwrap();
    let b = d.get_mut(&(lun, block)).unwrap();
    b[off..off + data.len()].copy_from_slice(data);
}

fn flush(cache: &BlockCache, disk: &Disk, out: &mut Vec<cache::DirtyRange>) {
    for r in out.drain(..) {
        let (lun, block) = (r.key().lun, r.key().block_no);
        for (o, bytes) in r.runs() {
            disk_write(disk, lun, block, (o - block * BS as u64) as usize, bytes);
        }
        let _ = cache.mark_clean(r);
    }
}

#[test]
fn concurrent_ops_keep_invariants_and_data() {
    let topo = Topology::split(&[0, 1], 2, 1);
    let cfg = CacheConfig {
        block_size: BS,
        group_blocks: 2,
        partitions_per_node: 2,
        bytes_per_node: 10 * BS,
        sector_size: SECTOR,
        huge_pages: false,
        dirty_limit_bytes: 6 * BS as u64,
        ..CacheConfig::default()
    };
    let cache = Arc::new(BlockCache::new(cfg, &topo).unwrap());
    let disk: Disk = Arc::default();
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (cache, disk, barrier) = (cache.clone(), disk.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(0x5eed + t as u64);
                // Versions of the sectors this thread owns (block % THREADS == t).
                let mut mine: HashMap<(u32, u64), [u32; SECTORS]> = HashMap::new();
                let mut held = Vec::new();
                let mut out = Vec::new();
                let mut version = 1u32 + (t as u32) * 1_000_000;
                barrier.wait();
                for _ in 0..OPS {
                    let lun = rng.gen_range(0..LUNS);
                    let block = rng.gen_range(0..BLOCKS);
                    let s0 = rng.gen_range(0..SECTORS);
                    let n = rng.gen_range(1..=SECTORS - s0);
                    let span = BlockSpan::new(BS, block, s0 * SECTOR, n * SECTOR).unwrap();
                    let owned = block as usize % THREADS == t;
                    match rng.gen_range(0..10) {
                        0..=4 => {
                            let ra = if rng.gen_bool(0.3) {
                                ReadAhead::WholeBlock
                            } else {
                                ReadAhead::None
                            };
                            let r = match cache.lookup(lun, &span, ra) {
                                Lookup::Hit(r) => r,
                                Lookup::Miss(mut f) => {
                                    for run in f.runs_mut() {
                                        let off = (run.disk_offset - block * BS as u64) as usize;
                                        disk_read(&disk, lun, block, off, run.buf);
                                    }
                                    if rng.gen_bool(0.1) {
                                        f.abort();
                                        continue;
                                    }
                                    match f.complete() {
                                        Ok(r) => r,
                                        Err(_) => continue,
                                    }
                                }
                                Lookup::Busy | Lookup::NoSpace | Lookup::Bypass => continue,
                            };
                            let vs = check_sectors(lun, block, s0, r.bytes());
                            if owned {
                                let want = mine.get(&(lun, block)).copied().unwrap_or([0; SECTORS]);
                                assert_eq!(&vs[..], &want[s0..s0 + n], "owner read stale data");
                            }
                            if rng.gen_bool(0.3) {
                                let snap = r.bytes().to_vec();
                                held.push((r, snap));
                            }
                        }
                        5..=6 if owned => {
                            version += 1;
                            let data: Vec<u8> = (s0..s0 + n)
                                .flat_map(|s| sector_bytes(lun, block, s, version))
                                .collect();
                            if rng.gen_bool(0.8) {
                                if let WriteOutcome::Written { .. } =
                                    cache.write_back(lun, &span, &data)
                                {
                                    mine.entry((lun, block)).or_insert([0; SECTORS])[s0..s0 + n]
                                        .fill(version);
                                }
                            } else {
                                // Bypass protocol: flush the block, write the disk, update.
                                loop {
                                    let scan = cache
                                        .dirty_ranges(lun, block * BS as u64, BS as u64, &mut out)
                                        .unwrap();
                                    flush(&cache, &disk, &mut out);
                                    if scan.in_flight == 0 && scan.taken == 0 {
                                        break;
                                    }
                                    std::thread::yield_now();
                                }
                                disk_write(&disk, lun, block, s0 * SECTOR, &data);
                                mine.entry((lun, block)).or_insert([0; SECTORS])[s0..s0 + n]
                                    .fill(version);
                                loop {
                                    match cache.write_through_update(lun, &span, &data) {
                                        UpdateOutcome::Busy | UpdateOutcome::NoSpace => {
                                            held.clear();
                                            std::thread::yield_now()
                                        }
                                        UpdateOutcome::Unaligned => panic!("unaligned"),
                                        _ => break,
                                    }
                                }
                            }
                        }
                        7 => {
                            cache.collect_dirty(rng.gen_range(0..2), 3, &mut out);
                            flush(&cache, &disk, &mut out);
                        }
                        _ => {
                            if !held.is_empty() {
                                let i = rng.gen_range(0..held.len());
                                let (r, snap) = held.swap_remove(i);
                                assert_eq!(r.bytes(), &snap[..], "pinned bytes changed");
                            }
                        }
                    }
                }
                for (r, snap) in held {
                    assert_eq!(r.bytes(), &snap[..], "pinned bytes changed");
                }
                mine
            })
        })
        .collect();
    let mut latest = HashMap::new();
    for h in handles {
        latest.extend(h.join().unwrap());
    }
    cache.check_invariants().unwrap();
    let mut out = Vec::new();
    for node in 0..2 {
        while cache.collect_dirty(node, 8, &mut out) > 0 {
            flush(&cache, &disk, &mut out);
        }
    }
    cache.check_invariants().unwrap();
    let s = cache.stats();
    assert_eq!(
        (s.pinned, s.busy, s.detached, s.dirty_sectors),
        (0, 0, 0, 0)
    );
    for ((lun, block), versions) in latest {
        let mut buf = vec![0u8; BS];
        disk_read(&disk, lun, block, 0, &mut buf);
        assert_eq!(
            check_sectors(lun, block, 0, &buf),
            versions,
            "disk lost a write to {lun}/{block}"
        );
    }
    let c0 = cache.counters(0).unwrap();
    let c1 = cache.counters(1).unwrap();
    assert!(c0.hits + c1.hits > 0 && c0.misses + c1.misses > 0 && c0.evictions + c1.evictions > 0);
}
