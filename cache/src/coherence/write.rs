//! The write side: write-back into the cache, write-through to the backing store with the cached
//! copy brought up to date after it, and writing dirty blocks back (a node's flusher, or a
//! range before SYNCHRONIZE CACHE, a read around the cache or a write-through). The order of
//! these steps is what keeps the backing store, the cache and every reader in agreement.

use std::io;

use crate::block_cache::BlockCache;
use crate::geometry::BlockSpan;
use crate::partition::{DirtyRange, Landing, UpdateOutcome, WriteOutcome};

use super::wait::Waiter;
use crate::store::BackingStore;

/// `data` at byte `offset` cut at cache-block boundaries: each block's span and its bytes.
/// `None`: the range maps onto no blocks (overflow).
fn block_pieces<'d>(
    cache: &BlockCache,
    offset: u64,
    data: &'d [u8],
) -> Option<impl Iterator<Item = (BlockSpan, &'d [u8])> + 'd> {
    let spans = cache.spans(offset, data.len() as u64).ok()?;
    Some(spans.map(move |span| {
        let at = span.req_offset() as usize;
        // the spans cover `data` exactly; an empty piece would be refused as Unaligned
        let piece = data.get(at..at + span.len()).unwrap_or(&[]);
        (span, piece)
    }))
}

/// Put `data` into `lun`'s cache at byte `offset` as dirty blocks, waiting on busy blocks
/// as `waiter` says. `Err`: the cache could not take all of it (throttled, no room, a fill
/// in the way, the refusing block's outcome); the caller writes it through instead, after
/// [`flush_range`] (blocks already taken are flushed first, so nothing is lost or
/// reordered).
pub fn write_back(
    cache: &BlockCache,
    lun: u32,
    offset: u64,
    data: &[u8],
    waiter: &mut impl Waiter,
) -> Result<(), WriteOutcome> {
    let Some(pieces) = block_pieces(cache, offset, data) else {
        return Err(WriteOutcome::Unaligned);
    };
    for (span, piece) in pieces {
        loop {
            match cache.write_back(lun, &span, piece) {
                WriteOutcome::Written { .. } => break,
                WriteOutcome::Busy if waiter.wait().is_ok() => {}
                refused => return Err(refused),
            }
        }
    }
    Ok(())
}

/// The cached copy could not be brought up to date after a write reached the backing store, so
/// every cached block of the LUN was dropped (later reads go to the backing store).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot update cached block {block} after a write ({last:?}); the LUN's cache was dropped")]
pub struct Invalidated {
    pub block: u64,
    pub last: UpdateOutcome,
}

/// After `data` reached the backing store at `offset`: make every cached block of the range agree
/// with it (or drop it), waiting on fills and flushes in the way as `waiter` says. A fill
/// racing with the write never validates what it read.
pub fn update_cached_copy(
    cache: &BlockCache,
    lun: u32,
    offset: u64,
    data: &[u8],
    waiter: &mut impl Waiter,
) -> Result<(), Invalidated> {
    update_pieces(cache, lun, offset, data, || waiter.wait().is_ok()).unwrap_or_else(|busy| {
        // the waiter gave up: no cached copy may keep the old bytes
        cache.invalidate_lun(lun);
        Err(busy)
    })
}

/// [`update_cached_copy`] for a thread that must not wait (an event thread finishing an
/// asynchronous write-through): `Err` when a block of the range is being filled or written
/// back, or has no room now — the blocks before it are up to date, nothing was dropped,
/// and the caller finishes with [`update_cached_copy`] on a thread that may wait (bringing
/// a block up to date twice with the same bytes is harmless).
pub fn try_update_cached_copy(
    cache: &BlockCache,
    lun: u32,
    offset: u64,
    data: &[u8],
) -> Result<Result<(), Invalidated>, Invalidated> {
    update_pieces(cache, lun, offset, data, || false)
}

/// Bring each cached block of the range up to date; on a busy block ask `wait` (`false`:
/// stop, `Err` naming it, nothing dropped). `Ok(Err)`: a block refused for good and the
/// LUN's cache was dropped.
fn update_pieces(
    cache: &BlockCache,
    lun: u32,
    offset: u64,
    data: &[u8],
    mut wait: impl FnMut() -> bool,
) -> Result<Result<(), Invalidated>, Invalidated> {
    let Some(pieces) = block_pieces(cache, offset, data) else {
        return Ok(Ok(())); // no cache block holds such a range
    };
    for (span, piece) in pieces {
        loop {
            match cache.write_through_update(lun, &span, piece) {
                UpdateOutcome::Updated | UpdateOutcome::NotCached | UpdateOutcome::Dropped => break,
                // a fill or flush of this block is finishing: wait for it
                last @ (UpdateOutcome::Busy | UpdateOutcome::NoSpace) => {
                    if !wait() {
                        return Err(Invalidated {
                            block: span.block_no(),
                            last,
                        });
                    }
                }
                last => {
                    cache.invalidate_lun(lun);
                    return Ok(Err(Invalidated {
                        block: span.block_no(),
                        last,
                    }));
                }
            }
        }
    }
    Ok(Ok(()))
}

/// How a write-through ended.
#[derive(Debug)]
pub struct WrittenThrough {
    /// The backing-store write.
    pub written: io::Result<()>,
    /// The cached copy (`Ok` also without a cache).
    pub cached: Result<(), Invalidated>,
}

/// Write `data` to the backing store at `offset` (durable first when `durable`), then bring
/// `lun`'s cached copy up to date — even after a failed write, for the store may hold part
/// of the data and no cached copy may keep the old bytes. The caller flushed the range's
/// dirty blocks first ([`flush_range`]) and holds the range's write lock.
pub fn write_through<S: AsRef<BackingStore> + ?Sized>(
    cache: Option<&BlockCache>,
    lun: u32,
    store: &S,
    offset: u64,
    data: &[u8],
    durable: bool,
    waiter: &mut impl Waiter,
) -> WrittenThrough {
    let store = store.as_ref();
    let written = store.write_at(data, offset, durable);
    let cached = match cache {
        Some(c) => update_cached_copy(c, lun, offset, data, waiter),
        None => Ok(()),
    };
    WrittenThrough { written, cached }
}

/// [`write_through`] of write data that a device put into fresh cache slots
/// ([`Landing`]s, in order from `offset`): written to the backing store straight from the
/// slots as one vectored write where the store can (O_DIRECT without a bounce: the slots are
/// sector-aligned), then each slot becomes its block's cached copy, clean, where the block is
/// cached ([`Landing::replace`]: the data is not copied again), and is freed where it is not.
/// As `write_through` does, the cached copy follows even a failed write; a fill in the way is
/// waited for as `waiter` says, and when it does not end the LUN's cache is dropped.
///
/// # Safety
/// No device write into any of the landings may be in flight: their bytes are read as they
/// are.
pub unsafe fn write_through_landed<S: AsRef<BackingStore> + ?Sized>(
    cache: Option<&BlockCache>,
    store: &S,
    offset: u64,
    landings: &mut [Option<Landing>],
    durable: bool,
    waiter: &mut impl Waiter,
) -> WrittenThrough {
    let store = store.as_ref();
    let written = {
        let bufs: Vec<&[u8]> = landings
            .iter()
            .flatten()
            // SAFETY: the caller guarantees no device writes into the landings meanwhile.
            .map(|l| unsafe { l.bytes() })
            .collect();
        store.write_vectored_at(&bufs, offset, durable)
    };
    let mut cached = Ok(());
    for slot in landings.iter_mut() {
        let Some(mut l) = slot.take() else { continue };
        let Some(c) = cache.filter(|_| cached.is_ok()) else {
            continue; // dropped: the slot is free again
        };
        loop {
            match l.replace() {
                Ok(()) => break,
                Err((_, UpdateOutcome::NotCached)) => break,
                Err((back, UpdateOutcome::Busy)) if waiter.wait().is_ok() => l = back,
                Err((back, last)) => {
                    let key = back.key();
                    drop(back);
                    c.invalidate_lun(key.lun);
                    cached = Err(Invalidated {
                        block: key.block_no,
                        last,
                    });
                    break;
                }
            }
        }
    }
    WrittenThrough { written, cached }
}

/// Write one dirty block's runs to the backing store (which aligns the buffers).
pub fn write_dirty<S: AsRef<BackingStore> + ?Sized>(store: &S, r: &DirtyRange) -> io::Result<()> {
    let store = store.as_ref();
    for (off, bytes) in r.runs() {
        store.write_at(bytes, off, false)?;
    }
    Ok(())
}

/// Write the runs of several dirty blocks of one store back at once
/// ([`BackingStore::write_all`]: an RBD image has them in flight together);
/// `results[i]` tells whether every run of `ranges[i]` was written.
pub fn write_dirty_all<S: AsRef<BackingStore> + ?Sized>(
    store: &S,
    ranges: &[&DirtyRange],
    results: &mut Vec<io::Result<()>>,
) {
    let store = store.as_ref();
    let mut writes: Vec<(u64, &[u8])> = Vec::new();
    let mut owner: Vec<usize> = Vec::new();
    for (i, r) in ranges.iter().enumerate() {
        for run in r.runs() {
            writes.push(run);
            owner.push(i);
        }
    }
    let mut each = Vec::with_capacity(writes.len());
    store.write_all(&writes, &mut each);
    results.clear();
    results.extend(ranges.iter().map(|_| Ok(())));
    for (r, &i) in each.into_iter().zip(&owner) {
        if let (Err(e), Some(slot)) = (r, results.get_mut(i))
            && slot.is_ok()
        {
            *slot = Err(e);
        }
    }
}

/// Write every dirty cached block of `lun`'s range back to the backing store (no sync: the
/// caller syncs when it promises durability), waiting as `waiter` says for flushes of the range
/// already running elsewhere (given up: ETIMEDOUT). On error the blocks stay dirty.
pub fn flush_range<S: AsRef<BackingStore> + ?Sized>(
    cache: &BlockCache,
    lun: u32,
    store: &S,
    offset: u64,
    len: u64,
    waiter: &mut impl Waiter,
) -> io::Result<()> {
    let store = store.as_ref();
    let mut ranges = Vec::new();
    let mut results = Vec::new();
    loop {
        ranges.clear();
        let scan = cache
            .dirty_ranges(lun, offset, len, &mut ranges)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // all of the round's blocks at once (in flight together where the store can)
        let refs: Vec<&DirtyRange> = ranges.iter().collect();
        write_dirty_all(store, &refs, &mut results);
        drop(refs);
        let mut failed = None;
        for (r, done) in ranges.drain(..).zip(results.drain(..)) {
            match done {
                // false: written again meanwhile; the next round takes it again
                Ok(()) => {
                    let _ = r.mark_clean();
                }
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if scan.taken == 0 && scan.in_flight == 0 {
            return Ok(());
        }
        if scan.taken == 0 && waiter.wait().is_err() {
            // another thread is writing part of the range back and did not finish in time
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
    }
}

/// Write `lun`'s dirty blocks back, then make the backing store durable (SYNCHRONIZE CACHE).
pub fn flush_and_sync<S: AsRef<BackingStore> + ?Sized>(
    cache: &BlockCache,
    lun: u32,
    store: &S,
    waiter: &mut impl Waiter,
) -> io::Result<()> {
    let store = store.as_ref();
    flush_range(cache, lun, store, 0, store.size(), waiter)?;
    store.sync()
}
