//! A warm start of the block cache: the blocks a previous process had cached ([`HotList`]:
//! taken after its write-back, so every one is clean; a live upgrade passes it to the new
//! executable, a clean stop with `cache.warm_restart` saves it in the state directory), and
//! their loading in the background ([`start`]): hottest first, on a thread of its own that
//! leaves the sessions' I/O the first turn (it starts after a delay and rests as long as
//! each chunk took), through the same fill as a read miss, so a command's write meanwhile
//! is never overwritten and a block a command already brought in is skipped. The blocks
//! land in their home node's arena whatever CPU reads them (the arenas are bound).
//! [`progress`] counts it for the metrics and the log.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cache::BlockCache;

use crate::registry::Registry;

/// Blocks per chunk: the thread rests after each as long as it took.
const CHUNK: usize = 64;
/// How long the warm start waits before its first read: the daemon's start and the moved
/// sessions' first commands come first.
pub const WARM_DELAY: Duration = Duration::from_millis(500);
/// Most blocks a list may name (one per slot of a large cache).
const MAX_BLOCKS: u64 = 1 << 28;

/// The blocks to load again, by LUN, hottest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HotList {
    /// The cache block size they were cached with (another size: nothing is loaded).
    pub block_size: u64,
    pub luns: Vec<HotLun>,
}

/// One LUN's hot blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotLun {
    /// The target's iSCSI name and the LUN number (cache identities are per process).
    pub target: String,
    pub lun: u64,
    /// Cache block numbers, hottest first.
    pub blocks: Vec<u64>,
}

impl HotList {
    /// The clean cached blocks of every LUN of `registry` (call it after the write-back).
    pub fn collect(cache: &BlockCache, registry: &Registry) -> HotList {
        let mut luns: Vec<(u32, HotLun)> = Vec::new();
        for t in registry.targets() {
            for (n, l) in &t.lun_set().map {
                luns.push((
                    l.cache_id,
                    HotLun {
                        target: t.iqn.clone(),
                        lun: *n,
                        blocks: Vec::new(),
                    },
                ));
            }
        }
        for k in cache.hot_blocks() {
            if let Some((_, h)) = luns.iter_mut().find(|(id, _)| *id == k.lun) {
                h.blocks.push(k.block_no);
            }
        }
        HotList {
            block_size: cache.geometry().block_size() as u64,
            luns: luns
                .into_iter()
                .map(|(_, h)| h)
                .filter(|h| !h.blocks.is_empty())
                .collect(),
        }
    }

    /// Blocks listed, all LUNs together.
    pub fn blocks(&self) -> u64 {
        self.luns.iter().map(|l| l.blocks.len() as u64).sum()
    }

    /// As text: `block-size N`, then per LUN `lun TARGET-HEX LUN RUNS`, the runs of
    /// consecutive blocks (in the list's order) as `FIRST+COUNT` separated by commas.
    pub fn to_text(&self) -> String {
        let mut t = format!("block-size {}\n", self.block_size);
        for l in &self.luns {
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for &b in &l.blocks {
                match runs.last_mut() {
                    Some((first, n)) if first.checked_add(*n) == Some(b) => *n += 1,
                    _ => runs.push((b, 1)),
                }
            }
            let runs: Vec<String> = runs.iter().map(|(f, n)| format!("{f}+{n}")).collect();
            t.push_str(&format!(
                "lun {} {} {}\n",
                iscsi_proto::text::binary::encode_hex(l.target.as_bytes()),
                l.lun,
                runs.join(",")
            ));
        }
        t
    }

    /// Reads [`HotList::to_text`] back.
    pub fn from_text(text: &str) -> Result<HotList, String> {
        let mut h = HotList::default();
        let mut total = 0u64;
        for line in text.lines().filter(|l| !l.is_empty()) {
            let mut w = line.split(' ');
            match w.next() {
                Some("block-size") => {
                    h.block_size = w
                        .next()
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| format!("bad line {line:.60}"))?;
                }
                Some("lun") => {
                    let target = w
                        .next()
                        .and_then(|t| iscsi_proto::text::binary::decode_hex_record(t, 4096).ok())
                        .and_then(|b| String::from_utf8(b).ok())
                        .ok_or_else(|| format!("bad target in {line:.60}"))?;
                    let lun = w
                        .next()
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| format!("bad LUN in {line:.60}"))?;
                    let mut blocks = Vec::new();
                    for run in w.next().unwrap_or("").split(',').filter(|r| !r.is_empty()) {
                        let (f, n) = run
                            .split_once('+')
                            .and_then(|(f, n)| {
                                Some((f.parse::<u64>().ok()?, n.parse::<u64>().ok()?))
                            })
                            .ok_or_else(|| format!("bad run {run:.40}"))?;
                        total = total.saturating_add(n);
                        if total > MAX_BLOCKS || f.checked_add(n).is_none() {
                            return Err("too many blocks".into());
                        }
                        blocks.extend(f..f + n);
                    }
                    h.luns.push(HotLun {
                        target,
                        lun,
                        blocks,
                    });
                }
                _ => return Err(format!("bad line {line:.60}")),
            }
        }
        Ok(h)
    }
}

/// How the last warm start went (all zero: none).
#[derive(Debug, Default)]
pub struct Progress {
    pub listed: AtomicU64,
    pub loaded: AtomicU64,
    pub skipped: AtomicU64,
    pub dropped: AtomicU64,
    /// 1 while the warm start runs.
    running: AtomicUsize,
}

static PROGRESS: Progress = Progress {
    listed: AtomicU64::new(0),
    loaded: AtomicU64::new(0),
    skipped: AtomicU64::new(0),
    dropped: AtomicU64::new(0),
    running: AtomicUsize::new(0),
};

/// The last warm start's counters.
pub fn progress() -> &'static Progress {
    &PROGRESS
}

impl Progress {
    /// 1 while the warm start runs, 0 otherwise.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }
}

/// Asks a running warm start to end (the daemon stops): it lets go of its LUNs after the
/// chunk it is loading.
pub fn stop() {
    STOP.store(true, Ordering::Release);
}

static STOP: AtomicBool = AtomicBool::new(false);

/// Loads `list`'s blocks in the background (see the module documentation) on a thread of
/// its own, which waits [`WARM_DELAY`] first and then rests as long as each chunk took: the
/// sessions' own I/O, and the daemon's start, come first. LUNs that are gone or do not go
/// through the cache, and a list of another block size, are skipped with a log line.
pub fn start(list: HotList, cache: Option<&Arc<BlockCache>>, registry: &Registry) {
    let p = progress();
    p.listed.store(list.blocks(), Ordering::Relaxed);
    if list.luns.is_empty() {
        return;
    }
    let Some(cache) = cache else {
        tracing::info!(
            blocks = list.blocks(),
            "cache warm-up: this daemon has no block cache"
        );
        return;
    };
    let bs = cache.geometry().block_size() as u64;
    if list.block_size != bs {
        tracing::warn!(
            listed = list.block_size,
            now = bs,
            "cache warm-up skipped: the cache block size changed"
        );
        return;
    }
    let mut work = Vec::new();
    for h in list.luns {
        let Some(lun) = registry
            .target(&h.target)
            .and_then(|t| t.lun_set().map.get(&h.lun).cloned())
            .filter(|l| l.caches_now())
        else {
            tracing::info!(target = %h.target, lun = h.lun, "cache warm-up: LUN not cached here");
            continue;
        };
        work.push((lun, h.blocks));
    }
    if work.is_empty() {
        return;
    }
    STOP.store(false, Ordering::Release);
    p.running.store(1, Ordering::Relaxed);
    let cache = Arc::clone(cache);
    let spawned = std::thread::Builder::new()
        .name("numatgt-warm".into())
        .spawn(move || {
            let t0 = Instant::now();
            std::thread::sleep(WARM_DELAY);
            tracing::info!(
                blocks = progress().listed.load(Ordering::Relaxed),
                "cache warm-up started"
            );
            let p = progress();
            'luns: for (lun, blocks) in work {
                for chunk in blocks.chunks(CHUNK) {
                    if STOP.load(Ordering::Acquire) {
                        break 'luns;
                    }
                    let t = Instant::now();
                    let w = cache::coherence::warm(&cache, lun.cache_id, &*lun.store, chunk);
                    p.loaded.fetch_add(w.loaded, Ordering::Relaxed);
                    p.skipped.fetch_add(w.skipped, Ordering::Relaxed);
                    p.dropped.fetch_add(w.dropped, Ordering::Relaxed);
                    if w.dropped > 0 {
                        break; // full, or the store failed: the rest of this LUN waits
                    }
                    std::thread::sleep(t.elapsed().min(Duration::from_millis(100)));
                }
            }
            let loaded = p.loaded.load(Ordering::Relaxed);
            tracing::info!(
                loaded,
                skipped = p.skipped.load(Ordering::Relaxed),
                dropped = p.dropped.load(Ordering::Relaxed),
                mib = (loaded * bs) >> 20,
                ms = t0.elapsed().as_millis() as u64,
                "cache warm-up done"
            );
            p.running.store(0, Ordering::Relaxed);
        });
    if let Err(e) = spawned {
        p.running.store(0, Ordering::Relaxed);
        tracing::warn!("cache warm-up: cannot start its thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hot_list_reads_back_in_its_order_with_runs() {
        let h = HotList {
            block_size: 65536,
            luns: vec![
                HotLun {
                    target: "iqn.2026-11.org.numatgt:a b".into(),
                    lun: 1,
                    blocks: vec![9, 10, 11, 3, 4, 100, 7],
                },
                HotLun {
                    target: "iqn.x".into(),
                    lun: 2,
                    blocks: vec![0],
                },
            ],
        };
        let t = h.to_text();
        assert!(t.contains(" 9+3,3+2,100+1,7+1\n"), "{t}");
        assert_eq!(HotList::from_text(&t).expect("read back"), h);
        assert_eq!(h.blocks(), 8);
    }

    #[test]
    fn a_bad_hot_list_is_refused() {
        for bad in [
            "block-size x",
            "lun zz 1 1+1",
            "lun 0x61 x 1+1",
            "lun 0x61 1 1-1",
            "lun 0x61 1 18446744073709551615+2",
            "lun 0x61 1 0+999999999999",
            "colour blue",
        ] {
            assert!(HotList::from_text(bad).is_err(), "{bad}");
        }
    }
}
