//! The writes that hold the LUN's range locks exclusively on an I/O worker: COMPARE AND
//! WRITE, ORWRITE (read-modify-writes atomic against every other writer of the blocks) and
//! WRITE ATOMIC. What the data means (compare, OR) is the `scsi` crate's rule; here is the
//! order of the I/O: lock, write dirty cached data of the range back, read the medium,
//! write through, update the cached copy.

use std::sync::Arc;

use cache::BlockCache;
use iscsi_proto::CommandResult;

use super::StorageCtx;
use super::payload::Payload;
use super::reply::{Answer, ReplyTo, completed};
use super::storage;
use crate::registry::Lun;

/// Where a locked write's blocks are: first LBA and block count.
#[derive(Clone, Copy, Debug)]
pub struct Blocks {
    pub lba: u64,
    pub count: u32,
}

/// COMPARE AND WRITE: the medium compared with the first half of `data`; on a match the
/// second half is written, else MISCOMPARE at the first differing byte. Answers through
/// `reply`.
pub fn compare_and_write(
    lun: &Arc<Lun>,
    at: Blocks,
    durable: bool,
    data: Vec<u8>,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    on_worker(lun, data, durable, ctx, reply, move |w| {
        let len = at.count as usize * w.lun.store.block_size() as usize;
        read_modify_write(w, at, |medium| {
            scsi::compare_and_write_data(medium, w.data, len).map(<[u8]>::to_vec)
        })
    })
}

/// ORWRITE: the blocks become their bitwise OR with `data`. Answers through `reply`.
pub fn or_write(
    lun: &Arc<Lun>,
    at: Blocks,
    durable: bool,
    data: Vec<u8>,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    on_worker(lun, data, durable, ctx, reply, move |w| {
        read_modify_write(w, at, |medium| scsi::or_write_data(medium, w.data))
    })
}

/// WRITE ATOMIC(16): with the range held exclusively (no other writer of these blocks on
/// any node can interleave), dirty cached data of the range is written back first (so no
/// later write-back brings old bytes over the new ones), then the blocks go to the backing
/// store in one write, and cached copies are updated. Answers through `reply`.
pub fn write_atomic(
    lun: &Arc<Lun>,
    at: Blocks,
    durable: bool,
    data: Vec<u8>,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    on_worker(lun, data, durable, ctx, reply, move |w| {
        let lun = w.lun;
        let bs = u64::from(lun.store.block_size());
        let (offset, len) = (at.lba * bs, u64::from(at.count) * bs);
        let Some(new) = w.data.get(..len as usize) else {
            return completed(
                lun.scsi
                    .check_condition(&scsi::Sense::invalid_field_in_information_unit()),
            );
        };
        let _exclusive = lun.locks.compare_and_write(offset, len);
        if let Some(c) = w.cache
            && let Err(e) = storage::flush_range(c, lun, offset, len)
        {
            return storage::io_failure(lun, &e, true, at.lba);
        }
        storage::write_through(w.cache, lun, at.lba, offset, new, w.durable)
    })
}

/// What a locked write works with on its I/O worker.
struct LockedWrite<'a> {
    cache: Option<&'a Arc<BlockCache>>,
    lun: &'a Lun,
    /// The command's Data-Out buffer.
    data: &'a [u8],
    /// Stable before GOOD (`scsi::LogicalUnit::durable_writes`).
    durable: bool,
}

/// Runs `op` on an I/O worker of this node (it may wait for the range locks, which an
/// event thread never does) and sends its result.
fn on_worker(
    lun: &Arc<Lun>,
    data: Vec<u8>,
    durable: bool,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
    op: impl FnOnce(&LockedWrite<'_>) -> CommandResult<Payload> + Send + 'static,
) -> Answer {
    let lun = Arc::clone(lun);
    let cache = ctx.cache_for(&lun).cloned();
    let (reply, later) = reply.defer();
    ctx.run(move || {
        reply.send(op(&LockedWrite {
            cache: cache.as_ref(),
            lun: &lun,
            data: &data,
            durable,
        }));
    });
    Answer::Later(later)
}

/// A read-modify-write, atomic against every other writer of the blocks (the LUN's range
/// locks, `atomic.rs`, held exclusively throughout): the medium is read (after dirty cached
/// data of the range reached it), `modify` turns it into the new content (or a SCSI error
/// that ends the command), which is written through — durable when asked — with the cached
/// copy updated.
fn read_modify_write(
    w: &LockedWrite<'_>,
    at: Blocks,
    modify: impl FnOnce(&[u8]) -> Result<Vec<u8>, scsi::Sense>,
) -> CommandResult<Payload> {
    let lun = w.lun;
    let bs = u64::from(lun.store.block_size());
    let (offset, len) = (at.lba * bs, u64::from(at.count) * bs);
    let _exclusive = lun.locks.compare_and_write(offset, len);
    let current = match w.cache {
        Some(c) => storage::read_around(c, lun, at.lba, offset, len),
        None => storage::direct_read(lun, at.lba, offset, len),
    };
    let new = match &current.data {
        Some(p) if current.status == 0 => match modify(&p.contiguous()) {
            Ok(new) => new,
            Err(sense) => return completed(lun.scsi.check_condition(&sense)),
        },
        _ => return current,
    };
    storage::write_through(w.cache, lun, at.lba, offset, &new, w.durable)
}
