//! The read side: look every block of a request up (pinning hits, reserving misses), fill
//! the misses from the backing store straight into the blocks' home-node memory, and read
//! ahead of sequential readers. What cannot go through the cache is said by the outcome
//! (read the store directly, or around the cache after its dirty data); the caller does
//! that I/O.

use std::io;

use crate::block_cache::BlockCache;
use crate::geometry::BlockSpan;
use crate::partition::{Lookup, ReadAhead};

use super::lists::{BlockList, Piece, PieceList};
use crate::store::BackingStore;

/// What looking a request's blocks up found (on the event thread: no I/O, no wait).
#[derive(Debug)]
pub enum Looked {
    /// Every block cached: pinned references, in a pooled list (no allocation).
    AllHits(BlockList),
    /// Some blocks must be read first: [`fill`] them on an I/O worker.
    Pieces(PieceList),
    /// No block of the request is cached and none was admitted into its full partition:
    /// read it from the backing store, bypassing the cache (the store holds the newest
    /// data).
    NotAdmitted,
    /// Some block is busy or has no room: read around the cache, after [`flush_range`]
    /// (the pieces looked up so far were released).
    ///
    /// [`flush_range`]: super::flush_range
    ReadAround,
}

/// How a cached read ended.
#[derive(Debug)]
pub enum CachedRead {
    /// Every block pinned, in request order.
    Blocks(BlockList),
    /// Nothing of the range is cached: read the backing store directly.
    NotAdmitted,
    /// The cache could not take the request (busy, no room, a racing write, an odd
    /// alignment): read around it, after [`flush_range`](super::flush_range).
    ReadAround,
    /// Reading the backing store failed (every reservation was released).
    Failed(io::Error),
}

/// Look every block of `lun`'s `[offset, offset + len)` up, pinning hits and reserving
/// misses; a piece list comes from `node`'s pool (the caller's node).
pub fn lookup(cache: &BlockCache, lun: u32, node: usize, offset: u64, len: u64) -> Looked {
    let Ok(spans) = cache.spans(offset, len) else {
        return Looked::ReadAround;
    };
    let mut hits = BlockList::new();
    let mut pieces: Option<PieceList> = None;
    // every block so far was not admitted (nothing of them is cached)
    let mut bypassed = false;
    for span in spans {
        let l = cache.lookup(lun, &span, ReadAhead::None);
        if bypassed && !matches!(l, Lookup::Bypass) {
            // partly cached, partly not: read around the cache, after its dirty data
            return Looked::ReadAround;
        }
        match (l, &mut pieces) {
            (Lookup::Hit(r), None) => hits.push(r),
            (Lookup::Hit(r), Some(p)) => p.push(Piece::Hit(r)),
            (Lookup::Miss(f), Some(p)) => p.push(Piece::Miss(f)),
            (Lookup::Miss(f), None) => {
                // the first miss: from here on the request needs an I/O worker
                let mut p = cache.piece_list(node);
                for r in hits.drain() {
                    p.push(Piece::Hit(r));
                }
                p.push(Piece::Miss(f));
                pieces = Some(p);
            }
            (Lookup::Bypass, None) if hits.is_empty() => bypassed = true,
            (Lookup::Busy | Lookup::NoSpace | Lookup::Bypass, _) => return Looked::ReadAround,
        }
    }
    if bypassed {
        return Looked::NotAdmitted;
    }
    match pieces {
        Some(p) => Looked::Pieces(p),
        None => Looked::AllHits(hits),
    }
}

/// On an I/O worker: read the missing sectors of every reserved block from `store`
/// (straight into the block's home-node memory) and turn the reservations into pinned
/// references.
pub fn fill<S: AsRef<BackingStore> + ?Sized>(store: &S, mut pieces: PieceList) -> CachedRead {
    let store = store.as_ref();
    for p in pieces.iter_mut() {
        if let Piece::Miss(f) = p {
            for run in f.runs_mut() {
                if let Err(e) = store.read_at(run.buf, run.disk_offset) {
                    return fill_done(pieces, Some(e));
                }
            }
        }
    }
    fill_done(pieces, None)
}

/// One read a fill needs, for an I/O engine that issues it itself (io_uring): `len` bytes
/// at byte `disk_offset` of the backing store into `buf`, which is in the block's home-node memory.
#[derive(Debug, Clone, Copy)]
pub struct FillRead {
    pub buf: *mut u8,
    pub len: usize,
    pub disk_offset: u64,
}

/// Hand `out` each read that fills `pieces`' misses. Each buffer stays reserved for this
/// fill (no one else reads or writes those sectors) while `pieces` lives, and is cache
/// arena memory, which does not move; after the reads, call [`fill_done`].
pub fn fill_reads(pieces: &mut PieceList, mut out: impl FnMut(FillRead)) {
    for p in pieces.iter_mut() {
        if let Piece::Miss(f) = p {
            for run in f.runs_mut() {
                out(FillRead {
                    buf: run.buf.as_mut_ptr(),
                    len: run.buf.len(),
                    disk_offset: run.disk_offset,
                });
            }
        }
    }
}

/// The reads of `pieces` ended, `failure` being the first error (`None`: every sector was
/// read): turn the reservations into pinned references in request order, or release them.
/// EINVAL (an alignment the backing store refused) and a block invalidated during the read say
/// read around the cache.
pub fn fill_done(mut pieces: PieceList, failure: Option<io::Error>) -> CachedRead {
    if let Some(e) = failure {
        // dropping `pieces` releases every reservation
        return if e.raw_os_error() == Some(libc::EINVAL) {
            CachedRead::ReadAround
        } else {
            CachedRead::Failed(e)
        };
    }
    let mut out = BlockList::new();
    for p in pieces.drain() {
        match p {
            Piece::Hit(r) => out.push(r),
            Piece::Miss(f) => match f.complete() {
                Ok(r) => out.push(r),
                Err(_raced) => return CachedRead::ReadAround,
            },
        }
    }
    CachedRead::Blocks(out)
}

/// On an I/O worker: look up and fill in one go (a forwarded read, EXTENDED COPY).
pub fn read<S: AsRef<BackingStore> + ?Sized>(
    cache: &BlockCache,
    lun: u32,
    store: &S,
    node: usize,
    offset: u64,
    len: u64,
) -> CachedRead {
    let store = store.as_ref();
    match lookup(cache, lun, node, offset, len) {
        Looked::AllHits(refs) => CachedRead::Blocks(refs),
        Looked::Pieces(pieces) => fill(store, pieces),
        Looked::NotAdmitted => CachedRead::NotAdmitted,
        Looked::ReadAround => CachedRead::ReadAround,
    }
}

/// On an I/O worker: load cache blocks `first..last` of `lun` whole, skipping cached ones;
/// stops at the first busy block, full partition or read error.
pub fn read_ahead<S: AsRef<BackingStore> + ?Sized>(
    cache: &BlockCache,
    lun: u32,
    store: &S,
    first: u64,
    last: u64,
) {
    let store = store.as_ref();
    for b in first..last {
        match load_block(cache, lun, store, b) {
            BlockLoad::Loaded | BlockLoad::Cached => {}
            BlockLoad::Busy | BlockLoad::Stop => return,
        }
    }
}

/// What [`warm`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Warmed {
    /// Blocks read into the cache.
    pub loaded: u64,
    /// Blocks already cached, busy (a command has them), or past the end of the store.
    pub skipped: u64,
    /// Blocks not tried: the partition was full, a read failed or the cache bypasses the
    /// LUN.
    pub dropped: u64,
}

/// On an I/O worker: load `blocks` of `lun` whole (a warm start: what a previous process
/// had cached), skipping cached and busy ones; stops at a full partition or read error.
/// Goes through the same fill as a read miss, so a write meanwhile is never overwritten
/// by what was read.
pub fn warm<S: AsRef<BackingStore> + ?Sized>(
    cache: &BlockCache,
    lun: u32,
    store: &S,
    blocks: &[u64],
) -> Warmed {
    let store = store.as_ref();
    let mut w = Warmed::default();
    for (i, &b) in blocks.iter().enumerate() {
        match load_block(cache, lun, store, b) {
            BlockLoad::Loaded => w.loaded += 1,
            BlockLoad::Cached | BlockLoad::Busy => w.skipped += 1,
            BlockLoad::Stop => {
                w.dropped = (blocks.len() - i) as u64;
                break;
            }
        }
    }
    w
}

enum BlockLoad {
    Loaded,
    Cached,
    Busy,
    /// Full, failed, bypassed or past the end: no point in going on.
    Stop,
}

/// Loads block `b` of `lun` whole unless it is cached or busy.
fn load_block(cache: &BlockCache, lun: u32, store: &BackingStore, b: u64) -> BlockLoad {
    let bs = cache.geometry().block_size() as u64;
    let start = b.saturating_mul(bs);
    let Some(span) = BlockSpan::new(
        bs as usize,
        b,
        0,
        store.size().saturating_sub(start).min(bs) as usize,
    ) else {
        return BlockLoad::Stop;
    };
    match cache.lookup(lun, &span, ReadAhead::WholeBlock) {
        Lookup::Hit(_) => BlockLoad::Cached,
        Lookup::Miss(mut f) => {
            let ok = f
                .runs_mut()
                .all(|run| store.read_at(run.buf, run.disk_offset).is_ok());
            if ok {
                let _ = f.complete();
                BlockLoad::Loaded
            } else {
                f.abort();
                BlockLoad::Stop
            }
        }
        Lookup::Busy => BlockLoad::Busy,
        Lookup::NoSpace | Lookup::Bypass => BlockLoad::Stop,
    }
}
