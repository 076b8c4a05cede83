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

/// Above any cache identity a process hands out (one per LUN opened).
const MAX_CACHE_ID: u32 = 1 << 24;

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
    /// Where each block's bytes are in the cache memory passed on with the list (partition
    /// and slot; `None`: not whole, read it again); empty when no memory goes with it.
    pub at: Vec<Option<Place>>,
    /// The LUN's cache identity in the process that made the list, with `at`: the next
    /// process gives the LUN the same one, so its blocks' home partitions stay where the
    /// memory holds them.
    pub cache_id: Option<u32>,
}

/// Where a listed block's bytes are in the cache memory passed on with the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// Global partition number, and slot within it.
    pub partition: u32,
    pub slot: u32,
    /// The valid sectors of a block cached in part (one bit per sector, 64 per word);
    /// `None`: every sector.
    pub valid: Option<Vec<u64>>,
}

impl Place {
    /// `P.S`, or `P.S~W0:W1…` with the valid-sector words in hexadecimal.
    fn to_text(&self) -> String {
        let mut t = format!("{}.{}", self.partition, self.slot);
        if let Some(v) = &self.valid {
            let words: Vec<String> = v.iter().map(|w| format!("{w:x}")).collect();
            t.push('~');
            t.push_str(&words.join(":"));
        }
        t
    }

    fn from_text(t: &str) -> Option<Place> {
        let (at, valid) = match t.split_once('~') {
            Some((a, v)) => (a, Some(v)),
            None => (t, None),
        };
        let (p, s) = at.split_once('.')?;
        let valid = match valid {
            None => None,
            Some(v) => Some(
                v.split(':')
                    .map(|w| u64::from_str_radix(w, 16).ok())
                    .collect::<Option<Vec<u64>>>()
                    .filter(|w| !w.is_empty() && w.len() <= 64)?,
            ),
        };
        Some(Place {
            partition: p.parse().ok()?,
            slot: s.parse().ok()?,
            valid,
        })
    }
}

impl HotList {
    /// The clean cached blocks of every LUN of `registry` (call it after the write-back);
    /// `places`: with where each whole block is in the cache's memory (it goes along).
    pub fn collect(cache: &BlockCache, registry: &Registry, places: bool) -> HotList {
        // (cache identity, whether its places go along, the list): a store other hosts may
        // write meanwhile (an RBD image) has its blocks read back
        let mut luns: Vec<(u32, bool, HotLun)> = Vec::new();
        for t in registry.targets() {
            for (n, l) in &t.lun_set().map {
                luns.push((
                    l.cache_id,
                    places && !l.store.caps().shared,
                    HotLun {
                        target: t.iqn.clone(),
                        lun: *n,
                        blocks: Vec::new(),
                        at: Vec::new(),
                        cache_id: (places && !l.store.caps().shared).then_some(l.cache_id),
                    },
                ));
            }
        }
        for k in cache.hot_blocks() {
            if let Some((_, places, h)) = luns.iter_mut().find(|(id, _, _)| *id == k.key.lun) {
                h.blocks.push(k.key.block_no);
                if *places {
                    h.at.push(Some(Place {
                        partition: k.partition,
                        slot: k.slot,
                        valid: k.valid,
                    }));
                }
            }
        }
        HotList {
            block_size: cache.geometry().block_size() as u64,
            luns: luns
                .into_iter()
                .map(|(_, _, h)| h)
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
            let target = iscsi_proto::text::binary::encode_hex(l.target.as_bytes());
            t.push_str(&format!("lun {target} {} {}\n", l.lun, runs.join(",")));
            if !l.at.is_empty() {
                let at: Vec<String> =
                    l.at.iter()
                        .map(|a| a.as_ref().map_or_else(|| "-".to_string(), Place::to_text))
                        .collect();
                let id = l.cache_id.map_or_else(String::new, |i| format!(" {i}"));
                t.push_str(&format!("at {target} {} {}{id}\n", l.lun, at.join(",")));
            }
        }
        t
    }

    /// The cache identities the list gives its LUNs (target name in lower case, LUN,
    /// identity): none when two LUNs share one or one LUN has two (a list no numatgtd
    /// made), or one is beyond any a process hands out, as two LUNs with one identity
    /// would share cached blocks.
    pub fn cache_ids(&self) -> Vec<(String, u64, u32)> {
        let ids: Vec<(String, u64, u32)> = self
            .luns
            .iter()
            .filter_map(|l| Some((l.target.to_ascii_lowercase(), l.lun, l.cache_id?)))
            .collect();
        let clash = ids.iter().enumerate().any(|(i, (t, l, id))| {
            *id >= MAX_CACHE_ID
                || ids[..i]
                    .iter()
                    .any(|(t2, l2, id2)| id2 == id || (t2 == t && l2 == l))
        });
        if clash {
            tracing::warn!("the previous numatgtd's cache identities are inconsistent: not kept");
            return Vec::new();
        }
        ids
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
                        at: Vec::new(),
                        cache_id: None,
                    });
                }
                Some("at") => {
                    // the places of the blocks of the `lun` line just before
                    let last = h.luns.last_mut().ok_or("an at line before any lun line")?;
                    let target = w
                        .next()
                        .and_then(|t| iscsi_proto::text::binary::decode_hex_record(t, 4096).ok());
                    let lun = w.next().and_then(|n| n.parse::<u64>().ok());
                    if target.as_deref() != Some(last.target.as_bytes()) || lun != Some(last.lun) {
                        return Err(format!("at line of another LUN: {line:.60}"));
                    }
                    let mut at = Vec::with_capacity(last.blocks.len());
                    let places = w.next().unwrap_or("");
                    // the cache identity (a list of an older numatgtd has none)
                    last.cache_id = match w.next() {
                        Some(i) => Some(i.parse().map_err(|_| format!("bad cache id {i:.20}"))?),
                        None => None,
                    };
                    for p in places.split(',').filter(|r| !r.is_empty()) {
                        at.push(match p {
                            "-" => None,
                            _ => Some(
                                Place::from_text(p).ok_or_else(|| format!("bad place {p:.40}"))?,
                            ),
                        });
                    }
                    if at.len() != last.blocks.len() {
                        return Err(format!(
                            "{} places for {} blocks of LUN {}",
                            at.len(),
                            last.blocks.len(),
                            last.lun
                        ));
                    }
                    last.at = at;
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
    /// Found in the cache memory passed on, cached again without a read.
    pub adopted: AtomicU64,
    pub loaded: AtomicU64,
    pub skipped: AtomicU64,
    pub dropped: AtomicU64,
    /// 1 while the warm start runs.
    running: AtomicUsize,
}

static PROGRESS: Progress = Progress {
    listed: AtomicU64::new(0),
    adopted: AtomicU64::new(0),
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

/// Caches again, without reading them, the blocks of `list` whose bytes are in the cache
/// memory the previous executable passed on (`cache` was built on it: its layout is the
/// same), and takes them out of the list: what is left is read back by [`start`]. Each LUN's
/// blocks are adopted coldest first, so the hottest end most recently used. A block whose
/// place is not its home partition here (the LUN's cache identity changed), or is taken,
/// stays in the list. Call it before the sessions' commands run.
pub fn adopt(list: &mut HotList, cache: &BlockCache, registry: &Registry) -> u64 {
    let t0 = Instant::now();
    let mut adopted = 0u64;
    for h in &mut list.luns {
        if h.at.len() != h.blocks.len() {
            h.at.clear();
            continue;
        }
        let Some(lun) = registry
            .target(&h.target)
            .and_then(|t| t.lun_set().map.get(&h.lun).cloned())
            .filter(|l| l.caches_now())
        else {
            h.at.clear();
            continue;
        };
        let mut keep = vec![true; h.blocks.len()];
        for (i, (b, at)) in h.blocks.iter().zip(&h.at).enumerate().rev() {
            let Some(at) = at else {
                continue;
            };
            let k = cache::KeptBlock {
                key: cache::BlockKey {
                    lun: lun.cache_id,
                    block_no: *b,
                },
                partition: at.partition,
                slot: at.slot,
                valid: at.valid.clone(),
            };
            if cache.adopt(lun.cache_id, &k) {
                keep[i] = false;
                adopted += 1;
            }
        }
        let mut it = keep.iter();
        h.blocks.retain(|_| it.next().copied().unwrap_or(true));
        h.at.clear();
    }
    list.luns.retain(|h| !h.blocks.is_empty());
    progress().adopted.store(adopted, Ordering::Relaxed);
    let bs = cache.geometry().block_size() as u64;
    tracing::info!(
        adopted,
        mib = (adopted * bs) >> 20,
        to_read = list.blocks(),
        ms = t0.elapsed().as_millis() as u64,
        "cache memory kept: blocks cached again without a read"
    );
    adopted
}

/// Asks a running warm start to end (the daemon stops): it lets go of its LUNs after the
/// chunk it is loading. Waits for that (at most [`STOP_WAIT`]); true when no warm start
/// runs any more.
pub fn stop() -> bool {
    STOP.store(true, Ordering::Release);
    let until = Instant::now() + STOP_WAIT;
    while progress().running() > 0 {
        if Instant::now() >= until {
            tracing::warn!("the cache's warm start did not end in time");
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// How long [`stop`] waits for the chunk being loaded.
const STOP_WAIT: Duration = Duration::from_secs(10);

static STOP: AtomicBool = AtomicBool::new(false);

/// Loads `list`'s blocks in the background (see the module documentation) on a thread of
/// its own, which waits [`WARM_DELAY`] first and then rests as long as each chunk took: the
/// sessions' own I/O, and the daemon's start, come first. LUNs that are gone or do not go
/// through the cache, and a list of another block size, are skipped with a log line.
pub fn start(list: HotList, cache: Option<&Arc<BlockCache>>, registry: &Registry) {
    let p = progress();
    p.listed.store(
        list.blocks() + p.adopted.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
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

    fn place(partition: u32, slot: u32, valid: Option<Vec<u64>>) -> Place {
        Place {
            partition,
            slot,
            valid,
        }
    }

    #[test]
    fn cache_identities_are_kept_only_when_consistent() {
        let lun = |target: &str, lun, cache_id| HotLun {
            target: target.into(),
            lun,
            blocks: vec![1],
            at: vec![None],
            cache_id,
        };
        let mut h = HotList {
            block_size: 65536,
            luns: vec![
                lun("iqn.A", 1, Some(4)),
                lun("iqn.a", 2, Some(0)),
                lun("iqn.b", 1, None),
            ],
        };
        assert_eq!(
            h.cache_ids(),
            vec![("iqn.a".to_string(), 1, 4), ("iqn.a".to_string(), 2, 0)]
        );
        h.luns.push(lun("iqn.c", 1, Some(4)));
        assert!(h.cache_ids().is_empty(), "one identity for two LUNs");
        h.luns.pop();
        h.luns.push(lun("IQN.a", 1, Some(7)));
        assert!(h.cache_ids().is_empty(), "two identities for one LUN");
        h.luns.pop();
        h.luns.push(lun("iqn.d", 1, Some(u32::MAX)));
        assert!(h.cache_ids().is_empty(), "an identity no process hands out");
    }

    #[test]
    fn a_hot_list_reads_back_in_its_order_with_runs() {
        let h = HotList {
            block_size: 65536,
            luns: vec![
                HotLun {
                    target: "iqn.2026-11.org.numatgt:a b".into(),
                    lun: 1,
                    blocks: vec![9, 10, 11, 3, 4, 100, 7],
                    at: vec![
                        Some(place(3, 70, None)),
                        None,
                        Some(place(0, 0, Some(vec![0xff, 1 << 63]))),
                        None,
                        None,
                        None,
                        Some(place(9, 1, None)),
                    ],
                    cache_id: Some(5),
                },
                HotLun {
                    target: "iqn.x".into(),
                    lun: 2,
                    blocks: vec![0],
                    at: Vec::new(),
                    cache_id: None,
                },
            ],
        };
        let t = h.to_text();
        assert!(t.contains(" 9+3,3+2,100+1,7+1\n"), "{t}");
        assert!(
            t.contains(" 1 3.70,-,0.0~ff:8000000000000000,-,-,-,9.1 5\n"),
            "{t}"
        );
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
            "at 0x61 1 1.1",
            "lun 0x61 1 1+2\nat 0x61 1 1.1",
            "lun 0x61 1 1+1\nat 0x62 1 1.1",
            "lun 0x61 1 1+1\nat 0x61 1 x.1",
            "lun 0x61 1 1+1\nat 0x61 1 1.1~",
            "lun 0x61 1 1+1\nat 0x61 1 1.1~g",
        ] {
            assert!(HotList::from_text(bad).is_err(), "{bad}");
        }
    }
}
