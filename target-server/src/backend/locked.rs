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

/// Which locked write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockedOp {
    /// COMPARE AND WRITE: the medium compared with the first half of the data; on a match
    /// the second half is written, else MISCOMPARE at the first differing byte.
    CompareAndWrite,
    /// ORWRITE: the blocks become their bitwise OR with the data.
    OrWrite,
    /// WRITE ATOMIC(16): with the range held exclusively (no other writer of these blocks
    /// on any node can interleave), dirty cached data of the range is written back first
    /// (so no later write-back brings old bytes over the new ones), then the blocks go to
    /// the backing store in one write, and cached copies are updated.
    Atomic,
}

/// One locked write: what, where, and whether it is stable before GOOD
/// (`scsi::LogicalUnit::durable_writes`).
#[derive(Clone, Copy, Debug)]
pub struct Locked {
    pub op: LockedOp,
    pub at: Blocks,
    pub durable: bool,
}

/// Runs `w` with the command's Data-Out buffer `data` on an I/O worker of this node (it may
/// wait for the range locks, which an event thread never does); answers through `reply`.
pub fn start(
    w: Locked,
    lun: &Arc<Lun>,
    data: Vec<u8>,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    let lun = Arc::clone(lun);
    let cache = ctx.cache_for(&lun).cloned();
    let (reply, later) = reply.defer();
    ctx.run(move || {
        let on = LockedWrite {
            cache: cache.as_ref(),
            lun: &lun,
            data: &data,
            durable: w.durable,
        };
        reply.send(run(w.op, &on, w.at));
    });
    Answer::Later(later)
}

/// On the worker: the data rule of `op` (the `scsi` crate's) applied in the I/O order.
fn run(op: LockedOp, w: &LockedWrite<'_>, at: Blocks) -> CommandResult<Payload> {
    match op {
        LockedOp::CompareAndWrite => {
            let len = at.count as usize * w.lun.store.block_size() as usize;
            read_modify_write(w, at, |medium| {
                scsi::compare_and_write_data(medium, w.data, len).map(<[u8]>::to_vec)
            })
        }
        LockedOp::OrWrite => read_modify_write(w, at, |medium| scsi::or_write_data(medium, w.data)),
        LockedOp::Atomic => write_atomic(w, at),
    }
}

/// WRITE ATOMIC(16) on the worker (see [`LockedOp::Atomic`]).
fn write_atomic(w: &LockedWrite<'_>, at: Blocks) -> CommandResult<Payload> {
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

/// A read-modify-write, atomic against every other writer of the blocks (the LUN's range
/// locks, `range_locks.rs`, held exclusively throughout): the medium is read (after dirty cached
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
        Some(p) if current.status == scsi::status::GOOD => match modify(&p.contiguous()) {
            Ok(new) => new,
            Err(sense) => return completed(lun.scsi.check_condition(&sense)),
        },
        _ => return current,
    };
    storage::write_through(w.cache, lun, at.lba, offset, &new, w.durable)
}
