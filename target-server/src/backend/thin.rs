//! The I/O of logical block provisioning and WRITE SAME, on an I/O worker: UNMAP deallocates
//! ranges of the backing store (holes in files, zeroing discards on block devices) after
//! writing back any dirty cached data of the range, then makes cached copies zeros, so the
//! cache and the medium agree that unmapped blocks read as zeros. WRITE SAME writes one
//! block repeatedly in large aligned chunks (or deallocates, when allowed and the block is
//! zeros). GET LBA STATUS reports holes and data from the file's extents.

use std::sync::Arc;

use cache::{AlignedBuf, BlockCache};
use iscsi_proto::CommandResult;
use scsi::LbaExtent;

use super::StorageCtx;
use super::jobs::Job;
use super::payload::Payload;
use super::reply::{Answer, ReplyTo, completed};
use super::storage::{flush_range, io_failure, update_cached_copy, write_through_io};
use crate::registry::Lun;

/// Bytes written per call while repeating a WRITE SAME block, and zeros per cache update.
const CHUNK: usize = 1 << 20;
/// Largest range one GET LBA STATUS examines.
const STATUS_WINDOW: u64 = 1 << 30;

static ZEROS: [u8; CHUNK] = [0; CHUNK];

fn good() -> CommandResult<Payload> {
    CommandResult::good()
}

/// Cached copies of `offset .. offset + len` become zeros (clean: the medium has zeros).
fn zero_cached(cache: &BlockCache, lun: &Lun, offset: u64, len: u64) {
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(CHUNK as u64) as usize;
        update_cached_copy(cache, lun, offset + at, &ZEROS[..n]);
        at += n as u64;
    }
}

/// Deallocate one byte range: dirty data written back first (so no flusher writes it over
/// the hole later), then the hole, then the cached copies zeroed.
fn deallocate(
    cache: Option<&Arc<BlockCache>>,
    lun: &Lun,
    offset: u64,
    len: u64,
) -> std::io::Result<()> {
    if let Some(c) = cache {
        flush_range(c, lun, offset, len)?;
    }
    let res = lun.store.deallocate(offset, len).map(|_| ());
    // even after a failure part of the range may be zeros: no cached copy may disagree
    if let Some(c) = cache {
        zero_cached(c, lun, offset, len);
    }
    res
}

/// Runs `op` with the LUN's cache on an I/O worker of this node and sends its result.
fn on_worker(
    lun: &Arc<Lun>,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
    op: impl FnOnce(Option<&Arc<BlockCache>>, &Lun) -> CommandResult<Payload> + Send + 'static,
) -> Answer {
    let lun = Arc::clone(lun);
    let cache = ctx.cache_for(&lun).cloned();
    let (reply, later) = reply.defer();
    ctx.run(move || reply.send(op(cache.as_ref(), &lun)));
    Answer::Later(later)
}

/// UNMAP of `ranges`: a [`Job::Deallocate`] (the event thread's engine for a LUN that does
/// not cache on a store whose engine writes, librbd's `rbd_aio_write_zeroes`; else an I/O
/// worker).
pub fn start_unmap(
    lun: &Arc<Lun>,
    ranges: Vec<(u64, u64)>,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    let (reply, later) = reply.defer();
    ctx.submit(Job::Deallocate {
        cache: ctx.cache_for(lun).cloned(),
        lun: Arc::clone(lun),
        ranges,
        reply,
    });
    Answer::Later(later)
}

/// WRITE SAME of `blocks` blocks from `lba`, on an I/O worker: the first block of
/// `data_out` repeated (zeros with `ndob`), or the range deallocated with `unmap`.
pub fn start_write_same(
    lun: &Arc<Lun>,
    range: (u64, u64),
    ndob: bool,
    unmap: bool,
    data_out: &[u8],
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    let bs = lun.store.block_size() as usize;
    let block = if ndob {
        vec![0u8; bs]
    } else {
        data_out.get(..bs).map(<[u8]>::to_vec).unwrap_or_default()
    };
    let durable = lun.scsi.durable_writes(false);
    let (lba, blocks) = range;
    if unmap && block.len() == bs {
        // the range deallocated, as UNMAP does it
        return start_unmap(lun, vec![range], ctx, reply);
    }
    on_worker(lun, ctx, reply, move |cache, lun| {
        let op = WriteSame {
            lba,
            blocks,
            block: &block,
            unmap,
            durable,
        };
        write_same(cache, lun, &op)
    })
}

/// GET LBA STATUS from `lba`, on an I/O worker.
pub fn start_lba_status(
    lun: &Arc<Lun>,
    lba: u64,
    alloc_len: u32,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    on_worker(lun, ctx, reply, move |cache, lun| {
        lba_status(cache, lun, lba, alloc_len)
    })
}

/// UNMAP: deallocate every `(lba, blocks)` range.
pub fn unmap(
    cache: Option<&Arc<BlockCache>>,
    lun: &Lun,
    ranges: &[(u64, u64)],
) -> CommandResult<Payload> {
    let bs = u64::from(lun.store.block_size());
    for &(lba, blocks) in ranges {
        // exclusive on a cached LUN: see `range_locks.rs` (write-through and cached copy)
        let _hold = hold(cache.is_some(), lun, lba * bs, blocks * bs);
        if let Err(e) = deallocate(cache, lun, lba * bs, blocks * bs) {
            return io_failure(lun, &e, true, lba);
        }
    }
    good()
}

/// The range hold of a write to the backing store: shared, or exclusive when a cached copy
/// must be brought up to date too (`range_locks.rs` says why).
enum Hold<'a> {
    Shared(#[allow(dead_code, reason = "held, never read")] crate::range_locks::SharedHold<'a>),
    Exclusive(
        #[allow(dead_code, reason = "held, never read")] crate::range_locks::ExclusiveHold<'a>,
    ),
}

fn hold(cached: bool, lun: &Lun, offset: u64, len: u64) -> Hold<'_> {
    if cached {
        Hold::Exclusive(lun.locks.exclusive(offset, len))
    } else {
        Hold::Shared(lun.locks.write(offset, len))
    }
}

/// One WRITE SAME.
pub struct WriteSame<'a> {
    pub lba: u64,
    pub blocks: u64,
    /// The block to repeat (one logical block).
    pub block: &'a [u8],
    /// Unmap operation (thin LU, UNMAP bit): the range is deallocated (reads zeros), as SBC-3
    /// says, whatever `block` holds.
    pub unmap: bool,
    /// Each write reaches stable storage before the next (write cache disabled).
    pub durable: bool,
}

/// WRITE SAME: the block repeated over the range, written through to the backing store
/// (after dirty cached data of the range) with the cached copies brought up to date.
pub fn write_same(
    cache: Option<&Arc<BlockCache>>,
    lun: &Lun,
    op: &WriteSame<'_>,
) -> CommandResult<Payload> {
    let bs = u64::from(lun.store.block_size());
    let (offset, len) = (op.lba * bs, op.blocks * bs);
    let _hold = hold(cache.is_some(), lun, offset, len);
    if op.block.len() as u64 != bs {
        return io_failure(
            lun,
            &std::io::Error::from_raw_os_error(libc::EINVAL),
            true,
            op.lba,
        );
    }
    if op.unmap {
        return match deallocate(cache, lun, offset, len) {
            Ok(()) => good(),
            Err(e) => io_failure(lun, &e, true, op.lba),
        };
    }
    if let Some(c) = cache
        && let Err(e) = flush_range(c, lun, offset, len)
    {
        return io_failure(lun, &e, true, op.lba);
    }
    let chunk_len = (CHUNK as u64).min(len) as usize;
    let mut pattern = AlignedBuf::new(chunk_len);
    for piece in pattern.as_mut_slice().chunks_mut(bs as usize) {
        piece.copy_from_slice(&op.block[..piece.len()]);
    }
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(chunk_len as u64) as usize;
        let data = &pattern.as_slice()[..n];
        // the cached copies follow even a failed write (part of it may be on the medium)
        if let Err(e) = write_through_io(cache, lun, offset + at, data, op.durable) {
            return io_failure(lun, &e, true, op.lba + at / bs);
        }
        at += n as u64;
    }
    good()
}

/// GET LBA STATUS from `lba`: mapped and deallocated extents of up to [`STATUS_WINDOW`]
/// bytes, after dirty cached data of that window reached the medium (a cached write into a
/// hole is mapped data).
pub fn lba_status(
    cache: Option<&Arc<BlockCache>>,
    lun: &Lun,
    lba: u64,
    alloc_len: u32,
) -> CommandResult<Payload> {
    let bs = u64::from(lun.store.block_size());
    let offset = lba * bs;
    let len = STATUS_WINDOW.min(lun.store.size().saturating_sub(offset));
    if let Some(c) = cache
        && let Err(e) = flush_range(c, lun, offset, len)
    {
        return io_failure(lun, &e, false, lba);
    }
    let runs = match lun.store.allocation(offset, len) {
        Ok(r) => r,
        Err(e) => return io_failure(lun, &e, false, lba),
    };
    let extents = extents_from_runs(&runs, bs);
    completed(scsi::lba_status_completion(&extents, alloc_len))
}

/// Byte runs `(offset, len, allocated)` to block extents; a block partly allocated counts as
/// mapped; neighbours with the same state merge.
fn extents_from_runs(runs: &[(u64, u64, bool)], bs: u64) -> Vec<LbaExtent> {
    let mut out: Vec<LbaExtent> = Vec::new();
    for &(off, len, allocated) in runs {
        let (mut first, last) = if allocated {
            (off / bs, (off + len).div_ceil(bs))
        } else {
            (off.div_ceil(bs), (off + len) / bs)
        };
        if let Some(prev) = out.last() {
            first = first.max(prev.lba + prev.blocks);
        }
        if last <= first {
            continue;
        }
        match out.last_mut() {
            Some(prev) if prev.deallocated != allocated && prev.lba + prev.blocks == first => {
                prev.blocks += last - first;
            }
            _ => out.push(LbaExtent {
                lba: first,
                blocks: last - first,
                deallocated: !allocated,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_become_block_extents() {
        let e = extents_from_runs(
            &[(0, 4096, true), (4096, 8192, false), (12288, 4096, true)],
            512,
        );
        assert_eq!(
            e,
            vec![
                LbaExtent {
                    lba: 0,
                    blocks: 8,
                    deallocated: false
                },
                LbaExtent {
                    lba: 8,
                    blocks: 16,
                    deallocated: true
                },
                LbaExtent {
                    lba: 24,
                    blocks: 8,
                    deallocated: false
                },
            ]
        );
        // a 4 KiB-block LUN over 512-byte-aligned runs: partial blocks are mapped
        let e = extents_from_runs(
            &[(0, 1024, true), (1024, 7168, false), (8192, 4096, true)],
            4096,
        );
        assert_eq!(
            e,
            vec![
                LbaExtent {
                    lba: 0,
                    blocks: 1,
                    deallocated: false
                },
                LbaExtent {
                    lba: 1,
                    blocks: 1,
                    deallocated: true
                },
                LbaExtent {
                    lba: 2,
                    blocks: 1,
                    deallocated: false
                },
            ]
        );
    }
}
