//! From a SCSI command to its answer, for any transport: the `scsi` crate decides what the
//! command means; emulated commands complete at once, the rest go to the backend (cache,
//! O_DIRECT or page cache, on the node's I/O workers), whose results come back through the
//! command's `Replier`. This module only maps one to the other.

use iscsi_proto::ScsiCommand;
use scsi::{Action, CmdCtx};

use crate::backend::locked::{self, Blocks};
use crate::backend::reply::{Answer, ReplyTo, completed};
use crate::backend::{StorageCtx, pr, sanitize, selftest, storage, thin, xcopy};
use crate::registry::{LunSet, Target};

/// Run `cmd` against `target`: [`Answer::Now`] with the result, or [`Answer::Later`] when it
/// continues on an I/O worker (the result then arrives through the deferred `reply`).
/// Results of commands with a write part carry the CDB's transfer length, for the write
/// residuals. A write buffer the command no longer needs is left in `cmd.data_out` (to be
/// recycled); one an I/O worker still uses is taken out.
pub fn execute(
    cmd: &mut ScsiCommand,
    target: &Target,
    luns: &LunSet,
    nexus: Option<&scsi::Nexus>,
    ctx: &StorageCtx<'_>,
    mut reply: ReplyTo,
) -> Answer {
    let lun = luns.map.get(&cmd.lun);
    let block_size = lun.map_or(512, |l| l.store.block_size());
    let stamp = if cmd.write {
        scsi::data_out_len(&cmd.cdb, block_size).map(|n| n.min(u64::from(u32::MAX)) as u32)
    } else {
        None
    };
    reply.set_write_transfer_len(stamp);
    let Some(lun) = lun else {
        let mut r = completed(scsi::execute_unmapped(&cmd.cdb, &luns.numbers, false));
        r.write_transfer_len = stamp;
        return Answer::Now(r);
    };
    let cmd_ctx = CmdCtx {
        cdb: &cmd.cdb,
        data_out: &cmd.data_out,
        luns: &luns.numbers,
    };
    // reservations and unit attentions are per I_T nexus: every session has one
    let outcome = match nexus {
        Some(n) => lun.scsi.execute_nexus(n, &cmd_ctx),
        None => scsi::Outcome::Action(lun.scsi.execute(&cmd_ctx)),
    };
    let action = match outcome {
        scsi::Outcome::Action(a) => a,
        scsi::Outcome::PersistentReserveOut(po) => {
            return stamped(pr::reserve_out(po, lun, target, ctx, reply), stamp);
        }
    };
    let answer = match action {
        Action::Complete(c) => Answer::Now(completed(c)),
        Action::Read {
            lba,
            blocks,
            fua: _,
        } => storage::read(lun, lba, blocks, ctx, reply),
        Action::Write {
            lba,
            blocks,
            fua,
            data_offset,
        } => {
            let durable = lun.durable_writes(fua);
            storage::write(
                lun,
                lba,
                blocks,
                durable,
                &mut cmd.data_out,
                data_offset,
                ctx,
                reply,
            )
        }
        Action::Verify {
            lba,
            blocks,
            same_block,
        } => {
            let data = std::mem::take(&mut cmd.data_out);
            storage::verify(lun, lba, blocks, same_block, data, ctx, reply)
        }
        Action::CompareAndWrite { lba, blocks, fua } => {
            let data = std::mem::take(&mut cmd.data_out);
            let at = Blocks { lba, count: blocks };
            locked::compare_and_write(lun, at, fua, data, ctx, reply)
        }
        Action::OrWrite { lba, blocks, fua } => {
            let data = std::mem::take(&mut cmd.data_out);
            locked::or_write(lun, Blocks { lba, count: blocks }, fua, data, ctx, reply)
        }
        Action::AtomicWrite { lba, blocks, fua } => {
            let data = std::mem::take(&mut cmd.data_out);
            let at = Blocks { lba, count: blocks };
            locked::write_atomic(lun, at, fua, data, ctx, reply)
        }
        Action::Unmap { ranges } => thin::start_unmap(lun, ranges, ctx, reply),
        Action::WriteSame {
            lba,
            blocks,
            ndob,
            unmap,
        } => thin::start_write_same(lun, (lba, blocks), ndob, unmap, &cmd.data_out, ctx, reply),
        Action::GetLbaStatus { lba, alloc_len } => {
            thin::start_lba_status(lun, lba, alloc_len, ctx, reply)
        }
        Action::ExtendedCopy(job) => xcopy::start(job, lun, luns, ctx, reply),
        Action::SelfTest { lba, blocks } => selftest::run(lun, lba, blocks, ctx, reply),
        Action::Sanitize(op) => sanitize::start(lun, op, ctx.cache_for(lun).cloned(), reply),
        Action::Sync { lba, blocks: _ } => storage::synchronize_cache(lun, lba, ctx, reply),
    };
    stamped(answer, stamp)
}

/// An answer given now carries the CDB's write transfer length (for the write residuals);
/// a deferred one gets it from its `Replier`.
fn stamped(answer: Answer, stamp: Option<u32>) -> Answer {
    match answer {
        Answer::Now(mut r) => {
            r.write_transfer_len = stamp;
            Answer::Now(r)
        }
        later => later,
    }
}
