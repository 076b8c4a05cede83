//! SEND DIAGNOSTIC self-test (`scsi::Action::SelfTest`): a small read of the backing store
//! on the node's I/O pool, straight from the store (bypassing the block cache, which would
//! hide an unreadable medium). GOOD when it reads, else HARDWARE ERROR / LOGICAL UNIT FAILED
//! SELF-TEST; the data is discarded.

use std::sync::Arc;

use iscsi_proto::CommandResult;

use super::StorageCtx;
use super::payload::Payload;
use super::reply::{Answer, ReplyTo, completed};
use super::storage;
use crate::registry::Lun;

/// Runs the self-test read of `blocks` blocks at `lba` on an I/O worker; the result comes
/// through `reply`.
pub fn run(lun: &Arc<Lun>, lba: u64, blocks: u32, ctx: &StorageCtx<'_>, reply: ReplyTo) -> Answer {
    let lun = Arc::clone(lun);
    let (reply, later) = reply.defer();
    ctx.run(move || reply.send(check(&lun, lba, blocks)));
    Answer::Later(later)
}

/// The self-test itself (blocking).
pub fn check(lun: &Lun, lba: u64, blocks: u32) -> CommandResult<Payload> {
    let bs = u64::from(lun.store.block_size());
    let read = storage::direct_read(lun, lba, lba * bs, u64::from(blocks) * bs);
    if read.status == scsi::status::GOOD {
        CommandResult::good()
    } else {
        tracing::warn!(lun = lun.number, "self-test read failed");
        completed(scsi::self_test_failed(&lun.scsi))
    }
}
