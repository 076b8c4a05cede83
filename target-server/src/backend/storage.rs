//! How a LUN's data commands reach its blocks, by cache mode: through the NUMA-aware block
//! cache (`numa`: hits are sent straight from the pinned cache blocks, misses are read with
//! O_DIRECT into the block's home-node memory, large requests are routed to the node holding
//! most of their blocks — seed 004 Algorithm 1), straight to the backing store with O_DIRECT
//! (`off`), or through the kernel page cache (`page`). With the write cache enabled, writes to
//! a cached LUN stay in the cache as dirty blocks until a flusher, SYNCHRONIZE CACHE or
//! shutdown writes them back; otherwise they go through to the backing store and then bring
//! any cached copy up to date. A block is cached at most once, so every reader agrees with
//! every writer. Every blocking call runs on an I/O pool worker.

use std::sync::Arc;

use cache::{
    AlignedBuf, BlockCache, BlockRef, BlockSpan, DirtyRange, Fill, Lookup, ReadAhead, RouteRequest,
    UpdateOutcome, WriteOutcome,
};
use iscsi_proto::CommandResult;

use super::StorageCtx;
use super::jobs::{Extent, Job};
use super::payload::{BlockList, Payload};
use super::reply::{Answer, ReplyTo, completed};
use crate::registry::Lun;

/// Largest single data transfer executed (bytes); the SCSI layer's block limits stop larger
/// requests first, this is the last line of defence.
pub const MAX_IO_BYTES: u64 = 32 << 20;

/// Write-back writes up to this size are copied into the cache on the event thread; larger
/// ones on an I/O worker.
const INLINE_WRITE_BACK: u64 = 128 << 10;

fn good() -> CommandResult<Payload> {
    CommandResult::good()
}

fn with_data(p: Payload) -> CommandResult<Payload> {
    CommandResult {
        data: Some(p),
        ..good()
    }
}

/// CHECK CONDITION for a failed backing-store call (MEDIUM ERROR, SPACE ALLOCATION FAILED…).
pub fn io_failure(lun: &Lun, e: &std::io::Error, write: bool, lba: u64) -> CommandResult<Payload> {
    tracing::error!(lun = lun.number, path = %lun.store.path().display(), lba, write,
        "backing store I/O failed: {e}");
    completed(scsi::io_error_completion(
        &lun.scsi,
        e.raw_os_error().unwrap_or(libc::EIO),
        write,
        lba,
    ))
}

fn too_large(lun: &Lun, write: bool, lba: u64) -> CommandResult<Payload> {
    completed(scsi::io_error_completion(
        &lun.scsi,
        libc::EINVAL,
        write,
        lba,
    ))
}

/// READ: the result now (every block cached and the request stays on this node), or later
/// through `reply`.
pub fn read(lun: &Arc<Lun>, lba: u64, blocks: u32, ctx: &StorageCtx<'_>, reply: ReplyTo) -> Answer {
    let bs = u64::from(lun.store.block_size());
    let (offset, len) = (lba * bs, u64::from(blocks) * bs);
    if len > MAX_IO_BYTES {
        return Answer::Now(too_large(lun, false, lba));
    }
    let at = || Extent {
        lun: Arc::clone(lun),
        lba,
        offset,
        len,
    };
    let Some(cache) = ctx.cache_for(lun) else {
        let (reply, later) = reply.defer();
        ctx.submit(Job::DirectRead { at: at(), reply });
        return Answer::Later(later);
    };
    maybe_read_ahead(cache, lun, offset, len, ctx);
    // Algorithm 1: serve where most of the request's blocks live (unless it is small, the
    // target node is saturated, or routing is off)
    let serve_on = match ctx.router {
        Some(router) => {
            let route = router.route(
                &RouteRequest {
                    lun: lun.cache_id,
                    offset,
                    len,
                    conn_node: ctx.node,
                    already_routed: false,
                },
                |n| ctx.workers.pending(n),
            );
            if route.forward {
                cache.record_forward(ctx.node, route.node);
            }
            route.node
        }
        None => ctx.node,
    };
    if serve_on != ctx.node {
        // forwarded (marked: it is never routed again): node `serve_on` gathers from its
        // local blocks into a buffer of its own memory
        let (reply, later) = reply.defer();
        ctx.workers.submit(
            serve_on,
            Job::Gather {
                cache: Arc::clone(cache),
                at: at(),
                node: serve_on,
                reply,
            },
        );
        return Answer::Later(later);
    }
    let pieces = match lookup_all(cache, lun, offset, len) {
        Some(Looked::AllHits(refs)) => return Answer::Now(served(cache, refs, ctx.node)),
        Some(Looked::Pieces(pieces)) => pieces,
        Some(Looked::NotAdmitted) => {
            // as an uncached read costs: nothing of the range is in the cache
            let (reply, later) = reply.defer();
            ctx.submit(Job::DirectRead { at: at(), reply });
            return Answer::Later(later);
        }
        None => {
            // some block is busy or has no room: read around the cache (after its dirty data)
            let (reply, later) = reply.defer();
            ctx.submit(Job::ReadAround {
                cache: Arc::clone(cache),
                at: at(),
                reply,
            });
            return Answer::Later(later);
        }
    };
    let (reply, later) = reply.defer();
    ctx.submit(Job::Fill {
        cache: Arc::clone(cache),
        at: at(),
        pieces,
        node: ctx.node,
        reply,
    });
    Answer::Later(later)
}

/// On an I/O worker: read a request's missing blocks into the cache, then serve it from there.
pub(crate) fn fill_and_serve(
    cache: &BlockCache,
    at: &Extent,
    pieces: PieceList,
    node: usize,
) -> CommandResult<Payload> {
    let (lun, lba) = (&*at.lun, at.lba);
    match fill_pieces(lun, pieces) {
        Ok(refs) => served(cache, refs, node),
        Err(FillFailure::Bypass) => read_around(cache, lun, lba, at.offset, at.len),
        Err(FillFailure::Io(e)) => io_failure(lun, &e, false, lba),
    }
}

/// Read-ahead policy: when a read starts where the previous read of the LUN ended and
/// crosses into a new cache block, the next `read_ahead` blocks are loaded in the background
/// (on their home node's I/O workers); blocks already cached or busy are skipped.
fn maybe_read_ahead(
    cache: &Arc<BlockCache>,
    lun: &Arc<Lun>,
    offset: u64,
    len: u64,
    ctx: &StorageCtx<'_>,
) {
    use std::sync::atomic::Ordering;
    let end = offset + len;
    let previous_end = lun.last_read_end.swap(end, Ordering::Relaxed);
    if lun.read_ahead == 0 || previous_end != offset {
        return;
    }
    let g = cache.geometry();
    let bs = g.block_size() as u64;
    if offset > 0 && g.block_of(offset - 1) == g.block_of(end - 1) {
        return; // still inside the block the previous read ended in
    }
    let first = g.block_of(end - 1) + 1;
    let size = lun.store.size();
    let last = (first + u64::from(lun.read_ahead)).min(size.div_ceil(bs));
    if first >= last {
        return;
    }
    let home = cache.home_node(lun.cache_id, first);
    ctx.workers.submit(
        home,
        Job::ReadAhead {
            cache: Arc::clone(cache),
            lun: Arc::clone(lun),
            first,
            last,
        },
    );
}

/// On an I/O worker: load cache blocks `first..last` (skipping cached and busy ones).
pub(crate) fn read_ahead(cache: &BlockCache, lun: &Lun, first: u64, last: u64) {
    let bs = cache.geometry().block_size() as u64;
    let size = lun.store.size();
    {
        for b in first..last {
            let start = b * bs;
            let Some(span) = BlockSpan::new(bs as usize, b, 0, (size - start).min(bs) as usize)
            else {
                return;
            };
            match cache.lookup(lun.cache_id, &span, ReadAhead::WholeBlock) {
                Lookup::Hit(_) => {}
                Lookup::Miss(mut f) => {
                    let ok = f
                        .runs_mut()
                        .all(|run| lun.store.read_at(run.buf, run.disk_offset).is_ok());
                    if ok {
                        let _ = f.complete();
                    } else {
                        f.abort();
                        return;
                    }
                }
                Lookup::Busy | Lookup::NoSpace | Lookup::Bypass => return,
            }
        }
    }
}

/// Zero-copy Data-In from pinned blocks; counts local and remote bytes for the node that
/// sends them.
fn served(cache: &BlockCache, refs: BlockList, node: usize) -> CommandResult<Payload> {
    for r in refs.iter() {
        cache.record_served(r.node(), node, r.len() as u64);
    }
    with_data(Payload::Blocks(refs))
}

#[allow(
    clippy::large_enum_variant,
    reason = "a Fill carries its sector mask inline; boxing would allocate per miss"
)]
pub(crate) enum Piece {
    Hit(BlockRef),
    Miss(Fill),
}

/// Pieces lists kept for reuse (they travel from event threads to I/O workers, so the pool
/// is shared), and the longest list kept.
const PIECE_LISTS: usize = 1024;
const PIECE_LIST_MAX: usize = 256;
static PIECE_POOL: std::sync::Mutex<Vec<Vec<Piece>>> = std::sync::Mutex::new(Vec::new());

/// The pieces of a request with misses, in request order; the list's memory is reused.
pub struct PieceList {
    pieces: Vec<Piece>,
}

impl PieceList {
    fn new() -> Self {
        let pooled = PIECE_POOL.lock().ok().and_then(|mut p| p.pop());
        PieceList {
            pieces: pooled.unwrap_or_else(|| Vec::with_capacity(16)),
        }
    }
}

impl Drop for PieceList {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.pieces);
        v.clear(); // unpins hits, releases reservations
        if v.capacity() == 0 || v.capacity() > PIECE_LIST_MAX {
            return;
        }
        if let Ok(mut p) = PIECE_POOL.lock()
            && p.len() < PIECE_LISTS
        {
            let room = PIECE_LISTS - p.len();
            p.reserve_exact(room); // once: the pool never reallocates after
            p.push(v);
        }
    }
}

enum FillFailure {
    /// The cache could not take the request (a racing write, an odd alignment): read around it.
    Bypass,
    Io(std::io::Error),
}

/// What looking a request's blocks up found.
enum Looked {
    /// Every block cached: pinned references, in a pooled list (no allocation).
    AllHits(BlockList),
    /// Some blocks must be read first.
    Pieces(PieceList),
    /// No block of the request is cached and none was admitted into its full partition:
    /// read it from the backing store, bypassing the cache (the disk holds the newest data).
    NotAdmitted,
}

/// Look every block of the request up, pinning hits and reserving misses. `None`: some block
/// is busy or has no room, so the request reads around the cache (dropping the pieces unpins
/// the hits and releases the reservations).
fn lookup_all(cache: &BlockCache, lun: &Lun, offset: u64, len: u64) -> Option<Looked> {
    let spans = cache.spans(offset, len).ok()?;
    let mut hits = BlockList::new();
    let mut pieces: Option<PieceList> = None;
    // every block so far was not admitted (nothing of them is cached)
    let mut bypassed = false;
    for span in spans {
        let l = cache.lookup(lun.cache_id, &span, ReadAhead::None);
        if bypassed && !matches!(l, Lookup::Bypass) {
            // partly cached, partly not: read around the cache, after its dirty data
            return None;
        }
        match (l, &mut pieces) {
            (Lookup::Hit(r), None) => hits.push(r),
            (Lookup::Hit(r), Some(p)) => p.pieces.push(Piece::Hit(r)),
            (Lookup::Miss(f), Some(p)) => p.pieces.push(Piece::Miss(f)),
            (Lookup::Miss(f), None) => {
                // the first miss: from here on the request needs an I/O worker
                let mut p = PieceList::new();
                p.pieces.extend(hits.drain().map(Piece::Hit));
                p.pieces.push(Piece::Miss(f));
                pieces = Some(p);
            }
            (Lookup::Bypass, None) if hits.is_empty() => bypassed = true,
            (Lookup::Busy | Lookup::NoSpace | Lookup::Bypass, _) => return None,
        }
    }
    if bypassed {
        return Some(Looked::NotAdmitted);
    }
    Some(match pieces {
        Some(p) => Looked::Pieces(p),
        None => Looked::AllHits(hits),
    })
}

/// On an I/O worker: read the missing sectors of every reserved block (O_DIRECT, straight
/// into the block's home-node memory) and turn the reservations into pinned references.
fn fill_pieces(lun: &Lun, mut pieces: PieceList) -> Result<BlockList, FillFailure> {
    let mut out = BlockList::new();
    for p in pieces.pieces.drain(..) {
        match p {
            Piece::Hit(r) => out.push(r),
            Piece::Miss(mut f) => {
                for run in f.runs_mut() {
                    if let Err(e) = lun.store.read_at(run.buf, run.disk_offset) {
                        // dropping `f` (and the rest) releases every reservation
                        return Err(if e.raw_os_error() == Some(libc::EINVAL) {
                            FillFailure::Bypass
                        } else {
                            FillFailure::Io(e)
                        });
                    }
                }
                match f.complete() {
                    Ok(r) => out.push(r),
                    Err(_raced) => return Err(FillFailure::Bypass),
                }
            }
        }
    }
    Ok(out)
}

/// A forwarded READ, on a worker of `node`: look up and fill there, then copy the blocks into
/// a buffer first touched by this node's worker (so it lives in `node`'s memory).
pub(crate) fn gather_read(
    cache: &BlockCache,
    lun: &Lun,
    lba: u64,
    offset: u64,
    len: u64,
    node: usize,
) -> CommandResult<Payload> {
    let pieces = match lookup_all(cache, lun, offset, len) {
        Some(Looked::AllHits(refs)) => Ok(refs),
        Some(Looked::Pieces(pieces)) => fill_pieces(lun, pieces),
        Some(Looked::NotAdmitted) => return direct_read(lun, lba, offset, len),
        None => return read_around(cache, lun, lba, offset, len),
    };
    match pieces {
        Ok(refs) => {
            let mut buf = AlignedBuf::new(len as usize);
            let out = buf.as_mut_slice();
            let mut at = 0usize;
            for r in refs.iter() {
                let b = r.bytes();
                out[at..at + b.len()].copy_from_slice(b);
                at += b.len();
                cache.record_served(r.node(), node, b.len() as u64);
            }
            with_data(Payload::Block(buf))
        }
        Err(FillFailure::Bypass) => read_around(cache, lun, lba, offset, len),
        Err(FillFailure::Io(e)) => io_failure(lun, &e, false, lba),
    }
}

/// Read a cached LUN's range from the backing store itself: dirty cached data of the range
/// is written back first, so the disk holds the newest bytes.
pub fn read_around(
    cache: &BlockCache,
    lun: &Lun,
    lba: u64,
    offset: u64,
    len: u64,
) -> CommandResult<Payload> {
    if let Err(e) = flush_range(cache, lun, offset, len) {
        return io_failure(lun, &e, true, lba);
    }
    direct_read(lun, lba, offset, len)
}

/// Read around the cache (and the whole path of `off` and `page` LUNs).
pub fn direct_read(lun: &Lun, lba: u64, offset: u64, len: u64) -> CommandResult<Payload> {
    let mut buf = AlignedBuf::new(len as usize);
    match lun.store.read_at(buf.as_mut_slice(), offset) {
        Ok(()) => with_data(Payload::Block(buf)),
        Err(e) => io_failure(lun, &e, false, lba),
    }
}

/// WRITE. With the write cache enabled (WCE=1) and no FUA, a cached LUN keeps the data in the
/// cache (dirty; the node's flusher writes it back; SYNCHRONIZE CACHE makes it durable) and
/// answers at once. Otherwise, or when the cache cannot take it (throttled, no room), the data
/// goes through to the backing store — durable first when `durable` (FUA or WCE=0) — after any
/// older dirty copy of the range, and the cached copy is brought up to date before status.
#[allow(clippy::too_many_arguments)]
pub fn write(
    lun: &Arc<Lun>,
    lba: u64,
    blocks: u32,
    durable: bool,
    data: &mut Vec<u8>,
    data_offset: usize,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    let bs = u64::from(lun.store.block_size());
    let (offset, len) = (lba * bs, u64::from(blocks) * bs);
    let end = data_offset
        .checked_add(len as usize)
        .filter(|&e| e <= data.len() && len <= MAX_IO_BYTES);
    let Some(end) = end else {
        return Answer::Now(too_large(lun, true, lba));
    };
    let cache = ctx.cache_for(lun);
    if let Some(cache) = cache {
        // small write-back writes complete right here: a copy into the cache under a
        // partition lock costs less than the hand-off to an I/O worker and back (unless a
        // COMPARE AND WRITE holds the range: then a worker waits for it)
        if !durable
            && len <= INLINE_WRITE_BACK
            && let Some(_hold) = lun.locks.try_write(offset, len)
            && write_back(cache, lun, offset, &data[data_offset..end])
        {
            return Answer::Now(good());
        }
    }
    let (reply, later) = reply.defer();
    ctx.submit(Job::Write {
        cache: cache.cloned(),
        at: Extent {
            lun: Arc::clone(lun),
            lba,
            offset,
            len,
        },
        durable,
        data: std::mem::take(data),
        data_offset,
        reply,
    });
    Answer::Later(later)
}

/// On an I/O worker: a write that did not complete on the event thread.
pub(crate) fn write_job(
    cache: Option<&Arc<BlockCache>>,
    at: &Extent,
    durable: bool,
    data: &[u8],
    data_offset: usize,
) -> CommandResult<Payload> {
    let (lun, lba, offset, len) = (&*at.lun, at.lba, at.offset, at.len);
    let Some(payload) = data.get(data_offset..data_offset + len as usize) else {
        return too_large(lun, true, lba);
    };
    let Some(cache) = cache else {
        let _hold = lun.locks.write(offset, len);
        return write_through(None, lun, lba, offset, payload, durable);
    };
    if !durable && len > INLINE_WRITE_BACK {
        let _hold = lun.locks.write(offset, len);
        if write_back(cache, lun, offset, payload) {
            return good();
        }
        // blocks the cache did take stay dirty: the flush below writes them first
    }
    // through to the backing store, the range held exclusively: the disk write and the
    // cached copy's update must not interleave with another write-through of these blocks
    let _exclusive = lun.locks.exclusive(offset, len);
    match flush_range(cache, lun, offset, len) {
        Ok(()) => write_through(Some(cache), lun, lba, offset, payload, durable),
        Err(e) => io_failure(lun, &e, true, lba),
    }
}

/// Put the data in the cache as dirty blocks. `false`: the cache could not take all of it
/// (throttled, no room, a fill in the way); the caller writes it through instead (blocks
/// already taken are flushed first, so nothing is lost or reordered).
fn write_back(cache: &BlockCache, lun: &Lun, offset: u64, data: &[u8]) -> bool {
    let Ok(spans) = cache.spans(offset, data.len() as u64) else {
        return false;
    };
    for span in spans {
        let at = span.req_offset() as usize;
        let Some(piece) = data.get(at..at + span.len()) else {
            return false;
        };
        let mut tries = 0;
        loop {
            match cache.write_back(lun.cache_id, &span, piece) {
                WriteOutcome::Written { .. } => break,
                WriteOutcome::Busy if tries < 64 => {
                    tries += 1;
                    std::thread::yield_now();
                }
                _ => return false,
            }
        }
    }
    true
}

pub(crate) fn write_through(
    cache: Option<&Arc<BlockCache>>,
    lun: &Lun,
    lba: u64,
    offset: u64,
    payload: &[u8],
    durable: bool,
) -> CommandResult<Payload> {
    let res = if lun.store.is_direct() {
        // O_DIRECT needs an aligned source buffer
        let aligned = AlignedBuf::from_slice(payload);
        lun.store.write_at(aligned.as_slice(), offset, durable)
    } else {
        lun.store.write_at(payload, offset, durable)
    };
    // even after a failed write the disk may hold part of the data: no cached copy may keep
    // the old bytes
    if let Some(cache) = cache {
        update_cached_copy(cache, lun, offset, payload);
    }
    match res {
        Ok(()) => good(),
        Err(e) => io_failure(lun, &e, true, lba),
    }
}

/// Write every dirty cached block of the range back to the backing store (no fdatasync: the
/// caller syncs when it promises durability). Waits for flushes of the range already running
/// elsewhere. On error the blocks stay dirty.
pub fn flush_range(cache: &BlockCache, lun: &Lun, offset: u64, len: u64) -> std::io::Result<()> {
    let mut ranges = Vec::new();
    for round in 0u32.. {
        ranges.clear();
        let scan = cache
            .dirty_ranges(lun.cache_id, offset, len, &mut ranges)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        for r in ranges.drain(..) {
            write_dirty(lun, &r)?;
            // false: written again meanwhile; the next round takes it again
            let _ = r.mark_clean();
        }
        if scan.taken == 0 && scan.in_flight == 0 {
            return Ok(());
        }
        if scan.taken == 0 {
            if round > 100_000 {
                return Err(std::io::Error::from_raw_os_error(libc::ETIMEDOUT));
            }
            // another thread is writing part of the range back: give it a moment
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    Ok(())
}

/// Write one dirty block's runs to the backing store.
pub fn write_dirty(lun: &Lun, r: &DirtyRange) -> std::io::Result<()> {
    for (off, bytes) in r.runs() {
        match lun.store.write_at(bytes, off, false) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && lun.store.is_direct() => {
                // the file system wants coarser memory alignment than a sector: bounce
                let a = AlignedBuf::from_slice(bytes);
                lun.store.write_at(a.as_slice(), off, false)?;
            }
            other => other?,
        }
    }
    Ok(())
}

/// SYNCHRONIZE CACHE: write the LUN's dirty blocks back, then make the backing store durable.
pub fn sync(cache: Option<&Arc<BlockCache>>, lun: &Lun) -> std::io::Result<()> {
    if let Some(cache) = cache.filter(|_| lun.cached) {
        flush_range(cache, lun, 0, lun.store.size())?;
    }
    lun.store.sync()
}

/// After `data` reached the backing store at `offset`: make every cached block of the range
/// agree with it (or drop it). A fill racing with the write never validates what it read.
pub(crate) fn update_cached_copy(cache: &BlockCache, lun: &Lun, offset: u64, data: &[u8]) {
    let Ok(spans) = cache.spans(offset, data.len() as u64) else {
        return;
    };
    for span in spans {
        let at = span.req_offset() as usize;
        let Some(piece) = data.get(at..at + span.len()) else {
            return;
        };
        let mut tries = 0u32;
        loop {
            match cache.write_through_update(lun.cache_id, &span, piece) {
                UpdateOutcome::Updated | UpdateOutcome::NotCached | UpdateOutcome::Dropped => break,
                UpdateOutcome::Busy | UpdateOutcome::NoSpace if tries < 200_000 => {
                    // a fill or flush of this block is finishing: wait for it
                    tries += 1;
                    if tries % 64 == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    } else {
                        std::thread::yield_now();
                    }
                }
                other => {
                    tracing::error!(
                        lun = lun.number,
                        block = span.block_no(),
                        ?other,
                        "cannot update the cached copy after a write; invalidating the LUN's cache"
                    );
                    cache.invalidate_lun(lun.cache_id);
                    return;
                }
            }
        }
    }
}

/// VERIFY with a byte check, on an I/O worker: the medium itself is compared (after dirty
/// cached data of the range reached it) with the Data-Out buffer (`same_block`: its first
/// block with every block).
pub fn verify(
    lun: &Arc<Lun>,
    lba: u64,
    blocks: u32,
    same_block: bool,
    data: Vec<u8>,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    let bs = u64::from(lun.store.block_size());
    let len = u64::from(blocks) * bs;
    let lun = Arc::clone(lun);
    let cache = ctx.cache_for(&lun).cloned();
    let (reply, later) = reply.defer();
    ctx.run(move || {
        let read = match &cache {
            Some(c) => read_around(c, &lun, lba, lba * bs, len),
            None => direct_read(&lun, lba, lba * bs, len),
        };
        let result = match &read.data {
            Some(p) if read.status == 0 => {
                let medium = p.contiguous();
                match scsi::verify_compare(&medium, &data, bs as usize, same_block) {
                    None => good(),
                    Some(sense) => completed(lun.scsi.check_condition(&sense)),
                }
            }
            _ => read,
        };
        reply.send(result);
    });
    Answer::Later(later)
}

/// SYNCHRONIZE CACHE on an I/O worker: see [`sync`]; a failure is reported at `lba`.
pub fn synchronize_cache(lun: &Arc<Lun>, lba: u64, ctx: &StorageCtx<'_>, reply: ReplyTo) -> Answer {
    let lun = Arc::clone(lun);
    let cache = ctx.cache_for(&lun).cloned();
    let (reply, later) = reply.defer();
    ctx.run(move || {
        let result = match sync(cache.as_ref(), &lun) {
            Ok(()) => good(),
            Err(e) => io_failure(&lun, &e, true, lba),
        };
        reply.send(result);
    });
    Answer::Later(later)
}
