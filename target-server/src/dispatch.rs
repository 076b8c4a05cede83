//! From a SCSI command to its result: the `scsi` crate decides what the command means;
//! emulated commands complete at once, data commands go to `storage` (cache, O_DIRECT or page
//! cache, on the node's I/O pool), whose results come back to the owning event thread.

use std::sync::Arc;

use iscsi_proto::{CommandResult, ScsiCommand};
use scsi::{Action, CmdCtx, Completion};

use crate::jobs::Job;
use crate::payload::Payload;
use crate::registry::Target;
use crate::storage::{self, Replier, StorageCtx};
use crate::thin;

/// Convert a finished emulated command into what the connection sends.
pub fn to_result(c: Completion) -> CommandResult<Payload> {
    CommandResult {
        status: c.status,
        sense: c.sense,
        data: if c.data.is_empty() {
            None
        } else {
            Some(Payload::bytes(c.data))
        },
        write_transfer_len: None,
    }
}

/// Run `cmd` against `target`. Returns the result now, or `None` when it continues on an I/O
/// worker (the result then arrives through `reply`). Results of commands with a write part
/// carry the CDB's transfer length, for the write residuals. A write buffer the command no
/// longer needs is left in `cmd.data_out` (to be recycled); one an I/O worker still uses is
/// taken out.
pub fn execute(
    cmd: &mut ScsiCommand,
    target: &Target,
    luns: &crate::registry::LunSet,
    nexus: Option<&scsi::Nexus>,
    ctx: &StorageCtx<'_>,
    mut reply: Replier,
) -> Option<CommandResult<Payload>> {
    let lun = luns.map.get(&cmd.lun);
    let block_size = lun.map_or(512, |l| l.store.block_size());
    reply.write_transfer_len = if cmd.write {
        scsi::data_out_len(&cmd.cdb, block_size).map(|n| n.min(u64::from(u32::MAX)) as u32)
    } else {
        None
    };
    let stamp = reply.write_transfer_len;
    let Some(lun) = lun else {
        let mut r = to_result(scsi::execute_unmapped(&cmd.cdb, &luns.numbers, false));
        r.write_transfer_len = stamp;
        return Some(r);
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
            return persistent_reserve_out(po, lun, target, ctx, reply).map(|mut r| {
                r.write_transfer_len = stamp;
                r
            });
        }
    };
    let now = match action {
        Action::Complete(c) => Some(to_result(c)),
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
            let bs = u64::from(lun.store.block_size());
            let len = u64::from(blocks) * bs;
            let lun = Arc::clone(lun);
            let data = std::mem::take(&mut cmd.data_out);
            let cache = storage::uses_cache(&lun, ctx).cloned();
            ctx.pool(ctx.node).submit(Job::Other(Box::new(move || {
                // the medium itself is compared, after dirty cached data reached it
                let read = match &cache {
                    Some(c) => storage::read_around(c, &lun, lba, lba * bs, len),
                    None => storage::direct_read(&lun, lba, lba * bs, len),
                };
                let result = match &read.data {
                    Some(p) if read.status == 0 => {
                        let medium = p.contiguous();
                        match scsi::verify_compare(&medium, &data, bs as usize, same_block) {
                            None => CommandResult::good(),
                            Some(sense) => to_result(lun.scsi.check_condition(&sense)),
                        }
                    }
                    _ => read,
                };
                reply.send(result);
            })));
            None
        }
        Action::CompareAndWrite { lba, blocks, fua } => {
            locked_write_on_worker(lun, cmd, fua, ctx, reply, move |w| {
                compare_and_write(w.cache, w.lun, lba, blocks, w.data, w.durable)
            })
        }
        Action::OrWrite { lba, blocks, fua } => {
            locked_write_on_worker(lun, cmd, fua, ctx, reply, move |w| {
                read_modify_write(w.cache, w.lun, lba, blocks, w.durable, |m| {
                    Ok(m.iter().zip(w.data).map(|(a, b)| a | b).collect())
                })
            })
        }
        Action::AtomicWrite { lba, blocks, fua } => {
            locked_write_on_worker(lun, cmd, fua, ctx, reply, move |w| {
                write_atomic(w.cache, w.lun, lba, blocks, w.data, w.durable)
            })
        }
        Action::Unmap { ranges } => {
            let lun = Arc::clone(lun);
            let cache = storage::uses_cache(&lun, ctx).cloned();
            ctx.pool(ctx.node).submit(Job::Other(Box::new(move || {
                reply.send(thin::unmap(cache.as_ref(), &lun, &ranges));
            })));
            None
        }
        Action::WriteSame {
            lba,
            blocks,
            ndob,
            unmap,
        } => {
            let lun = Arc::clone(lun);
            let cache = storage::uses_cache(&lun, ctx).cloned();
            let bs = lun.store.block_size() as usize;
            let block = if ndob {
                vec![0u8; bs]
            } else {
                cmd.data_out
                    .get(..bs)
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default()
            };
            let durable = lun.durable_writes(false);
            ctx.pool(ctx.node).submit(Job::Other(Box::new(move || {
                let op = thin::WriteSame {
                    lba,
                    blocks,
                    block: &block,
                    unmap,
                    durable,
                };
                reply.send(thin::write_same(cache.as_ref(), &lun, &op));
            })));
            None
        }
        Action::GetLbaStatus { lba, alloc_len } => {
            let lun = Arc::clone(lun);
            let cache = storage::uses_cache(&lun, ctx).cloned();
            ctx.pool(ctx.node).submit(Job::Other(Box::new(move || {
                reply.send(thin::lba_status(cache.as_ref(), &lun, lba, alloc_len));
            })));
            None
        }
        Action::ExtendedCopy(job) => crate::xcopy::start(job, lun, luns, ctx, reply),
        Action::SelfTest { lba, blocks } => crate::selftest::run(lun, lba, blocks, ctx, reply),
        Action::Sanitize(op) => {
            crate::sanitize::start(lun, op, storage::uses_cache(lun, ctx).cloned(), reply)
        }
        Action::Sync { lba, blocks: _ } => {
            let lun = Arc::clone(lun);
            let cache = storage::uses_cache(&lun, ctx).cloned();
            ctx.pool(ctx.node).submit(Job::Other(Box::new(move || {
                let result = match storage::sync(cache.as_ref(), &lun) {
                    Ok(()) => CommandResult::good(),
                    Err(e) => storage::io_failure(&lun, &e, true, lba),
                };
                reply.send(result);
            })));
            None
        }
    };
    now.map(|mut r| {
        r.write_transfer_len = stamp;
        r
    })
}

/// A PERSISTENT RESERVE OUT that changed state: the new state is stored (APTPL) before the
/// status is sent; storing it failed → HARDWARE ERROR (the state in memory stays changed).
fn persistent_reserve_out(
    po: scsi::PrOutcome,
    lun: &Arc<crate::registry::Lun>,
    target: &Target,
    ctx: &StorageCtx<'_>,
    reply: Replier,
) -> Option<CommandResult<Payload>> {
    let iqn = target.iqn.as_str();
    if !po.abort.is_empty() {
        // PREEMPT AND ABORT: the preempted nexuses' tasks on this LU end without status
        // (their backing-store jobs run to completion; nothing is sent for them)
        tracing::info!(
            lun = lun.number,
            nexuses = po.abort.len(),
            "PREEMPT AND ABORT: ending the preempted I_T nexuses' tasks"
        );
        if let Some(tasks) = ctx.tasks {
            tasks.abort_tasks(target.tid, Some(lun.number), Some(po.abort.clone()), None);
        }
    }
    let Some(req) = po.persist else {
        return Some(to_result(po.completion));
    };
    let (lun, iqn, dir) = (
        Arc::clone(lun),
        iqn.to_string(),
        ctx.state_dir.map(|p| p.to_path_buf()),
    );
    let completion = po.completion;
    ctx.pool(ctx.node).submit(Job::Other(Box::new(move || {
        let stored = match &dir {
            Some(d) => crate::pr_store::persist(d, &iqn, lun.number, &req),
            None => Err(std::io::Error::other("no state directory")),
        };
        let c = match stored {
            Ok(()) => completion,
            Err(e) => {
                tracing::error!(target = %iqn, lun = lun.number,
                    "cannot store persistent reservations (APTPL): {e}");
                lun.scsi.persist_failed()
            }
        };
        reply.send(to_result(c));
    })));
    None
}

/// What a write that holds the LUN's range locks exclusively (COMPARE AND WRITE, ORWRITE,
/// WRITE ATOMIC) works with on its I/O worker.
struct LockedWrite<'a> {
    cache: Option<&'a Arc<cache::BlockCache>>,
    lun: &'a crate::registry::Lun,
    /// The command's Data-Out buffer.
    data: &'a [u8],
    /// Stable before GOOD: FUA or the write cache disabled.
    durable: bool,
}

/// Runs `op` for the command on an I/O worker of this node (it may wait for the range
/// locks, which an event thread never does) and sends its result.
fn locked_write_on_worker(
    lun: &Arc<crate::registry::Lun>,
    cmd: &mut ScsiCommand,
    fua: bool,
    ctx: &StorageCtx<'_>,
    reply: Replier,
    op: impl FnOnce(&LockedWrite<'_>) -> CommandResult<Payload> + Send + 'static,
) -> Option<CommandResult<Payload>> {
    let lun = Arc::clone(lun);
    let cache = storage::uses_cache(&lun, ctx).cloned();
    let data = std::mem::take(&mut cmd.data_out);
    let durable = lun.durable_writes(fua);
    ctx.pool(ctx.node).submit(Job::Other(Box::new(move || {
        reply.send(op(&LockedWrite {
            cache: cache.as_ref(),
            lun: &lun,
            data: &data,
            durable,
        }));
    })));
    None
}

/// WRITE ATOMIC(16) on an I/O worker: with the range held exclusively (no other writer of
/// these blocks on any node can interleave), dirty cached data of the range is written back
/// first (so no later write-back brings old bytes over the new ones), then the blocks go to
/// the backing store in one write, and cached copies are updated.
fn write_atomic(
    cache: Option<&Arc<cache::BlockCache>>,
    lun: &crate::registry::Lun,
    lba: u64,
    blocks: u32,
    data: &[u8],
    durable: bool,
) -> CommandResult<Payload> {
    let bs = u64::from(lun.store.block_size());
    let (offset, len) = (lba * bs, u64::from(blocks) * bs);
    let Some(new) = data.get(..len as usize) else {
        return to_result(
            lun.scsi
                .check_condition(&scsi::Sense::invalid_field_in_information_unit()),
        );
    };
    let _exclusive = lun.locks.compare_and_write(offset, len);
    if let Some(c) = cache
        && let Err(e) = storage::flush_range(c, lun, offset, len)
    {
        return storage::io_failure(lun, &e, true, lba);
    }
    storage::write_through(cache, lun, lba, offset, new, durable)
}

/// COMPARE AND WRITE on an I/O worker: the medium compared with the first half of `data`;
/// on a match the second half is written, else MISCOMPARE at the first differing byte.
fn compare_and_write(
    cache: Option<&Arc<cache::BlockCache>>,
    lun: &crate::registry::Lun,
    lba: u64,
    blocks: u32,
    data: &[u8],
    durable: bool,
) -> CommandResult<Payload> {
    let n = blocks as usize * lun.store.block_size() as usize;
    let (Some(expected), Some(new)) = (data.get(..n), data.get(n..2 * n)) else {
        return to_result(
            lun.scsi
                .check_condition(&scsi::Sense::invalid_field_in_information_unit()),
        );
    };
    read_modify_write(cache, lun, lba, blocks, durable, |medium| {
        match medium.iter().zip(expected).position(|(a, b)| a != b) {
            Some(at) => Err(to_result(
                lun.scsi
                    .check_condition(&scsi::Sense::miscompare(at as u64)),
            )),
            None => Ok(new.to_vec()),
        }
    })
}

/// A read-modify-write on an I/O worker, atomic against every other writer of the blocks
/// (the LUN's range locks, `atomic.rs`, held exclusively throughout): the medium is read
/// (after dirty cached data of the range reached it), `modify` turns it into the new
/// content (or an answer that ends the command), which is written through — durable when
/// asked — with the cached copy updated.
fn read_modify_write(
    cache: Option<&Arc<cache::BlockCache>>,
    lun: &crate::registry::Lun,
    lba: u64,
    blocks: u32,
    durable: bool,
    modify: impl FnOnce(&[u8]) -> Result<Vec<u8>, CommandResult<Payload>>,
) -> CommandResult<Payload> {
    let bs = u64::from(lun.store.block_size());
    let (offset, len) = (lba * bs, u64::from(blocks) * bs);
    let _exclusive = lun.locks.compare_and_write(offset, len);
    let current = match cache {
        Some(c) => storage::read_around(c, lun, lba, offset, len),
        None => storage::direct_read(lun, lba, offset, len),
    };
    let new = match &current.data {
        Some(p) if current.status == 0 => match modify(&p.contiguous()) {
            Ok(new) => new,
            Err(answer) => return answer,
        },
        _ => return current,
    };
    storage::write_through(cache, lun, lba, offset, &new, durable)
}
