//! How a LUN's data commands reach its blocks, by cache mode: through the NUMA-aware block
//! cache (`numa`: hits are sent straight from the pinned cache blocks, misses are read with
//! O_DIRECT into the block's home-node memory, large requests are routed to the node holding
//! most of their blocks — seed 004 Algorithm 1), straight to the backing store with O_DIRECT
//! (`off`), or through the kernel page cache (`page`). With the write cache enabled, writes to
//! a cached LUN stay in the cache as dirty blocks until a flusher, SYNCHRONIZE CACHE or
//! shutdown writes them back; otherwise they go through to the backing store and then bring
//! any cached copy up to date. A block is cached at most once, so every reader agrees with
//! every writer. Every blocking call runs on an I/O pool worker.
//!
//! The coherence steps themselves (lookup, fill, read-ahead, write-back, write-through,
//! flushes) are the `cache` crate's ([`cache::coherence`]); this module picks the thread
//! each runs on and maps its outcome to the command's result (status, sense data).

use std::sync::Arc;

use cache::coherence::{self, Backoff, CachedRead, Looked, NoWait, PieceList};
use cache::{AlignedBuf, BlockCache, RouteRequest};
use iscsi_proto::CommandResult;

use super::StorageCtx;
use super::jobs::{Extent, Job};
use super::landing::Landing;
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
        if lun.store.caps().zeroes {
            // nothing is stored (null): zeros from the shared buffer, no read, no memory
            return Answer::Now(with_data(Payload::Zeros(len as usize)));
        }
        let (reply, later) = reply.defer();
        ctx.submit(Job::DirectRead { at: at(), reply });
        return Answer::Later(later);
    };
    maybe_read_ahead(cache, lun, offset, len, ctx);
    // Algorithm 1: serve where most of the request's blocks live (unless it is small, the
    // target node is saturated, or routing is off)
    let serve_on = match ctx.router {
        Some(router) if !ctx.sends_from_blocks => {
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
        _ => ctx.node,
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
    let pieces = match coherence::lookup(cache, lun.cache_id, ctx.node, offset, len) {
        Looked::AllHits(refs) => return Answer::Now(served(cache, refs, ctx.node)),
        Looked::Pieces(pieces) => pieces,
        Looked::NotAdmitted => {
            // as an uncached read costs: nothing of the range is in the cache
            let (reply, later) = reply.defer();
            ctx.submit(Job::DirectRead { at: at(), reply });
            return Answer::Later(later);
        }
        Looked::ReadAround => {
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
    let read = coherence::fill(&*lun.store, pieces);
    cached_read_result(cache, lun, lba, at.offset, at.len, read, |refs| {
        served(cache, refs, node)
    })
}

/// The result of a cached read: `blocks` sends the pinned blocks; otherwise the backing
/// store is read directly (nothing cached) or around the cache, or the failure reported.
fn cached_read_result(
    cache: &BlockCache,
    lun: &Lun,
    lba: u64,
    offset: u64,
    len: u64,
    read: CachedRead,
    blocks: impl FnOnce(BlockList) -> CommandResult<Payload>,
) -> CommandResult<Payload> {
    match read {
        CachedRead::Blocks(refs) => blocks(refs),
        CachedRead::NotAdmitted => direct_read(lun, lba, offset, len),
        CachedRead::ReadAround => read_around(cache, lun, lba, offset, len),
        CachedRead::Failed(e) => io_failure(lun, &e, false, lba),
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
    coherence::read_ahead(cache, lun.cache_id, &*lun.store, first, last);
}

/// Zero-copy Data-In from pinned blocks; counts local and remote bytes for the node that
/// sends them.
fn served(cache: &BlockCache, refs: BlockList, node: usize) -> CommandResult<Payload> {
    for r in refs.iter() {
        cache.record_served(r.node(), node, r.len() as u64);
    }
    with_data(Payload::Blocks(refs))
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
    let read = coherence::read(cache, lun.cache_id, &*lun.store, node, offset, len);
    cached_read_result(cache, lun, lba, offset, len, read, |refs| {
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
    })
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

/// A fill whose reads ran elsewhere (the node's read ring) ended with `read`: the result,
/// or `None` when the request must be read around the cache or directly after all (blocking
/// work for an I/O worker: [`Job::ReadAround`](super::jobs::Job) or `DirectRead`).
pub(crate) fn fill_finished(
    cache: &BlockCache,
    at: &Extent,
    read: CachedRead,
    node: usize,
) -> Result<CommandResult<Payload>, CachedRead> {
    match read {
        CachedRead::Blocks(refs) => Ok(served(cache, refs, node)),
        CachedRead::Failed(e) => Ok(io_failure(&at.lun, &e, false, at.lba)),
        other => Err(other),
    }
}

/// An uncached read that ran elsewhere (the node's read ring) into `buf` ended with `read`.
pub(crate) fn direct_read_finished(
    at: &Extent,
    buf: AlignedBuf,
    read: std::io::Result<()>,
) -> CommandResult<Payload> {
    match read {
        Ok(()) => with_data(Payload::Block(buf)),
        Err(e) => io_failure(&at.lun, &e, false, at.lba),
    }
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
    // a store that never blocks (null) takes an uncached write right here
    if cache.is_none()
        && lun.store.read_engine() == cache::ReadEngine::Immediate
        && let Some(_hold) = lun.locks.try_write(offset, len)
    {
        let payload = &data[data_offset..end];
        return Answer::Now(write_through(None, lun, lba, offset, payload, durable));
    }
    if let Some(cache) = cache {
        // small write-back writes complete right here: a copy into the cache under a
        // partition lock costs less than the hand-off to an I/O worker and back (unless a
        // COMPARE AND WRITE holds the range, or a block is busy: then a worker takes it;
        // an event thread never waits)
        if !durable
            && len <= INLINE_WRITE_BACK
            && let Some(_hold) = lun.locks.try_write(offset, len)
            && coherence::write_back(
                cache,
                lun.cache_id,
                offset,
                &data[data_offset..end],
                &mut NoWait,
            )
            .is_ok()
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

/// A WRITE whose data landed in fresh cache slots ([`Landing`]) while it was fetched, the
/// bytes in `data` (the write data that came with the command) being the first of it:
/// - a write-back to a cached LUN: the slots become the cached copies, dirty, under the
///   range's write lock — no byte copied; GOOD at once;
/// - a durable write or a LUN that does not cache: an I/O worker writes the slots to the
///   backing store as they are ([`write_landed_job`]);
/// - otherwise (the LUN's cache changed, the range held by another write, a block refused:
///   throttled or being filled) the bytes not committed join `data` and the ordinary
///   [`write`] takes them: what was committed stays (it is this command's data, in place).
///
/// The landing's fetch must be over (its transport gave it back).
#[expect(
    clippy::too_many_arguments,
    reason = "write's arguments and the landing"
)]
pub fn write_landed(
    lun: &Arc<Lun>,
    lba: u64,
    blocks: u32,
    durable: bool,
    data: &mut Vec<u8>,
    mut landing: Landing,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    let bs = u64::from(lun.store.block_size());
    let (offset, len) = (lba.saturating_mul(bs), u64::from(blocks) * bs);
    let cached = ctx.cache_for(lun);
    let held = ctx
        .cache
        .is_some_and(|c| landing.holds(c, lun, offset, len));
    if held && (durable || cached.is_none()) {
        let (reply, later) = reply.defer();
        ctx.submit(Job::WriteLanded {
            cache: cached.cloned(),
            at: Extent {
                lun: Arc::clone(lun),
                lba,
                offset,
                len,
            },
            durable,
            landing,
            data: std::mem::take(data),
            reply,
        });
        return Answer::Later(later);
    }
    if held
        && cached.is_some()
        && let Some(hold) = lun.locks.try_write(offset, len)
    {
        let done = landing.commit();
        drop(hold);
        match done {
            Ok(()) => return Answer::Now(good()),
            Err(at) => {
                // the blocks before `at` are in the cache; the rest is written the
                // ordinary way (cache block boundaries are LUN block boundaries)
                data.clear();
                // SAFETY: the transport gave the landing back: its fetch is over.
                unsafe { landing.append_rest(0, data) };
                drop(landing);
                let done = at as u64 / bs;
                return write(
                    lun,
                    lba + done,
                    blocks - done as u32,
                    durable,
                    data,
                    0,
                    ctx,
                    reply,
                );
            }
        }
    }
    // SAFETY: as above.
    unsafe { landing.append_rest(data.len(), data) };
    drop(landing);
    write(lun, lba, blocks, durable, data, 0, ctx, reply)
}

/// On an I/O worker: a WRITE's landed data (all of it, in `landing`) written through to the
/// backing store straight from the slots — one vectored write, durable when `durable` —
/// as [`write_job`] does for a write-through from the command's buffer: a cached LUN's range
/// held exclusively, its older dirty data written first, and its cached blocks then taking
/// the slots as their copies (`coherence::write_through_landed`: no copy). Slots not taken
/// are freed.
pub(crate) fn write_landed_job(
    cache: Option<&Arc<BlockCache>>,
    at: &Extent,
    durable: bool,
    landing: &mut Landing,
) -> CommandResult<Payload> {
    let (lun, lba, offset, len) = (&*at.lun, at.lba, at.offset, at.len);
    if landing.transfer_len() as u64 != len {
        return too_large(lun, true, lba);
    }
    let mut write = || {
        // SAFETY: the transport gave the landing back before the command ran: no RDMA READ
        // into it is in flight.
        let done = unsafe {
            coherence::write_through_landed(
                cache.map(|c| &**c),
                &*lun.store,
                offset,
                landing.blocks_mut(),
                durable,
                &mut Backoff::update_cached_copy(),
            )
        };
        if let Err(e) = done.cached {
            cache_dropped(lun, &e);
        }
        write_status(lun, lba, done.written)
    };
    match cache {
        Some(cache) => through_cached_range(cache, at, write),
        None => {
            let _hold = lun.locks.write(offset, len);
            write()
        }
    }
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
        let mut wait = Backoff::write_back();
        if coherence::write_back(cache, lun.cache_id, offset, payload, &mut wait).is_ok() {
            return good();
        }
        // blocks the cache did take stay dirty: the flush below writes them first
    }
    through_cached_range(cache, at, || {
        write_through(Some(cache), lun, lba, offset, payload, durable)
    })
}

/// A write-through to a cached LUN, in the order that keeps disk and cache in agreement:
/// the range held exclusively (the disk write and the cached copy's update must not
/// interleave with another write-through of these blocks), its older dirty data written
/// back first, then `write`.
fn through_cached_range(
    cache: &BlockCache,
    at: &Extent,
    write: impl FnOnce() -> CommandResult<Payload>,
) -> CommandResult<Payload> {
    let (lun, offset, len) = (&*at.lun, at.offset, at.len);
    let _exclusive = lun.locks.exclusive(offset, len);
    match flush_range(cache, lun, offset, len) {
        Ok(()) => write(),
        Err(e) => write_status(lun, at.lba, Err(e)),
    }
}

/// Write `payload` through to the backing store (the caller flushed the range's dirty
/// blocks first), then bring the cached copy up to date.
pub(crate) fn write_through(
    cache: Option<&Arc<BlockCache>>,
    lun: &Lun,
    lba: u64,
    offset: u64,
    payload: &[u8],
    durable: bool,
) -> CommandResult<Payload> {
    write_status(
        lun,
        lba,
        write_through_io(cache, lun, offset, payload, durable),
    )
}

/// [`write_through`] for callers that report failures themselves (WRITE SAME's chunks).
pub(crate) fn write_through_io(
    cache: Option<&Arc<BlockCache>>,
    lun: &Lun,
    offset: u64,
    payload: &[u8],
    durable: bool,
) -> std::io::Result<()> {
    let done = coherence::write_through(
        cache.map(|c| &**c),
        lun.cache_id,
        &*lun.store,
        offset,
        payload,
        durable,
        &mut Backoff::update_cached_copy(),
    );
    if let Err(e) = done.cached {
        cache_dropped(lun, &e);
    }
    done.written
}

/// On an event thread, after an asynchronous write-through of `data[data_offset..]` (its
/// first `at.len` bytes) reached the store: bring the cached copy up to date without
/// waiting. `false`: a block of the range is being filled or written back — finish with
/// [`update_cached_copy`] on a worker, the range still held.
pub(crate) fn cached_copy_follows(
    cache: &BlockCache,
    at: &Extent,
    data: &[u8],
    data_offset: usize,
) -> bool {
    let Some(written) = data.get(data_offset..data_offset + at.len as usize) else {
        return true; // never: the write was not started (see the ring's `ops`)
    };
    match coherence::try_update_cached_copy(cache, at.lun.cache_id, at.offset, written) {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            cache_dropped(&at.lun, &e);
            true
        }
        Err(_busy) => false,
    }
}

fn cache_dropped(lun: &Lun, e: &coherence::Invalidated) {
    tracing::error!(lun = lun.number, block = e.block, last = ?e.last,
        "cannot update the cached copy after a write; invalidated the LUN's cache");
}

/// Write every dirty cached block of the range back to the backing store (no fdatasync: the
/// caller syncs when it promises durability). Waits for flushes of the range already running
/// elsewhere. On error the blocks stay dirty.
pub fn flush_range(cache: &BlockCache, lun: &Lun, offset: u64, len: u64) -> std::io::Result<()> {
    coherence::flush_range(
        cache,
        lun.cache_id,
        &*lun.store,
        offset,
        len,
        &mut Backoff::flush_range(),
    )
}

/// SYNCHRONIZE CACHE: write the LUN's dirty blocks back, then make the backing store durable.
pub fn sync(cache: Option<&Arc<BlockCache>>, lun: &Lun) -> std::io::Result<()> {
    match cache.filter(|_| lun.caches_now()) {
        Some(cache) => coherence::flush_and_sync(
            cache,
            lun.cache_id,
            &*lun.store,
            &mut Backoff::flush_range(),
        ),
        None => lun.store.sync(),
    }
}

/// After `data` reached the backing store at `offset`: make every cached block of the range
/// agree with it (or drop the LUN's cache, logged). A fill racing with the write never
/// validates what it read.
pub(crate) fn update_cached_copy(cache: &BlockCache, lun: &Lun, offset: u64, data: &[u8]) {
    let updated = coherence::update_cached_copy(
        cache,
        lun.cache_id,
        offset,
        data,
        &mut Backoff::update_cached_copy(),
    );
    if let Err(e) = updated {
        cache_dropped(lun, &e);
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
            Some(p) if read.status == scsi::status::GOOD => {
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

/// SYNCHRONIZE CACHE: see [`sync`]; a failure is reported at `lba`. A LUN that does not
/// cache now is a [`Job::Flush`] (the event thread's engine for stores with their own
/// asynchronous flush, else an I/O worker); a cached one writes its dirty blocks back on an
/// I/O worker first.
pub fn synchronize_cache(lun: &Arc<Lun>, lba: u64, ctx: &StorageCtx<'_>, reply: ReplyTo) -> Answer {
    let lun = Arc::clone(lun);
    let cache = ctx.cache_for(&lun).cloned();
    let (reply, later) = reply.defer();
    if cache.is_none() {
        ctx.submit(Job::Flush { lun, lba, reply });
        return Answer::Later(later);
    }
    ctx.run(move || {
        reply.send(write_status(&lun, lba, sync(cache.as_ref(), &lun)));
    });
    Answer::Later(later)
}

/// The status of a write or flush to `lun`'s backing store that ended with `done`; a
/// failure is reported at `lba` (a write's first block; a flush's, SYNCHRONIZE CACHE's).
pub(crate) fn write_status(
    lun: &Lun,
    lba: u64,
    done: std::io::Result<()>,
) -> CommandResult<Payload> {
    match done {
        Ok(()) => good(),
        Err(e) => io_failure(lun, &e, true, lba),
    }
}

/// A job handed to an I/O worker runs here.
impl cache::IoJob for Job {
    fn run(self) {
        match self {
            Job::DirectRead { at, reply } => {
                reply.send(direct_read(&at.lun, at.lba, at.offset, at.len))
            }
            Job::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
            } => reply.send(fill_and_serve(&cache, &at, pieces, node)),
            Job::ReadAround { cache, at, reply } => {
                reply.send(read_around(&cache, &at.lun, at.lba, at.offset, at.len))
            }
            Job::Gather {
                cache,
                at,
                node,
                reply,
            } => reply.send(gather_read(
                &cache, &at.lun, at.lba, at.offset, at.len, node,
            )),
            Job::ReadAhead {
                cache,
                lun,
                first,
                last,
            } => read_ahead(&cache, &lun, first, last),
            Job::Write {
                cache,
                at,
                durable,
                data,
                data_offset,
                reply,
            } => {
                let result = write_job(cache.as_ref(), &at, durable, &data, data_offset);
                reply.send_with_buffer(result, data);
            }
            Job::WriteLanded {
                cache,
                at,
                durable,
                mut landing,
                data,
                reply,
            } => {
                let result = write_landed_job(cache.as_ref(), &at, durable, &mut landing);
                drop(landing);
                reply.send_with_buffer(result, data);
            }
            Job::Deallocate {
                cache,
                lun,
                ranges,
                reply,
            } => reply.send(super::thin::unmap(cache.as_ref(), &lun, &ranges)),
            Job::Flush { lun, lba, reply } => reply.send(write_status(&lun, lba, lun.store.sync())),
            Job::Other(f) => f(),
        }
    }
}
