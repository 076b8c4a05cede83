//! PERSISTENT RESERVE OUT commands that changed state: the preempted nexuses' tasks are
//! ended (PREEMPT AND ABORT) and, with APTPL, the new state is stored on an I/O worker
//! before the status is sent.

use std::sync::Arc;

use super::StorageCtx;
use super::reply::{Answer, ReplyTo, completed};
use crate::registry::{Lun, Target};

/// A PERSISTENT RESERVE OUT that changed state: the new state is stored (APTPL) before the
/// status is sent; storing it failed → HARDWARE ERROR (the state in memory stays changed).
pub fn reserve_out(
    po: scsi::PrOutcome,
    lun: &Arc<Lun>,
    target: &Target,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    if !po.abort.is_empty() {
        // PREEMPT AND ABORT: the preempted nexuses' tasks on this LU end without status
        // (their backing-store jobs run to completion; nothing is sent for them)
        tracing::info!(
            lun = lun.number,
            nexuses = po.abort.len(),
            "PREEMPT AND ABORT: ending the preempted I_T nexuses' tasks"
        );
        if let Some(tasks) = ctx.tasks {
            tasks.abort_tasks(
                target.tid,
                Some(lun.number),
                Some(po.abort.clone()),
                None,
                None,
            );
        }
    }
    let Some(req) = po.persist else {
        return Answer::Now(completed(po.completion));
    };
    let (lun, iqn, dir) = (
        Arc::clone(lun),
        target.iqn.clone(),
        ctx.state_dir.map(|p| p.to_path_buf()),
    );
    let completion = po.completion;
    let (reply, later) = reply.defer();
    ctx.run(move || {
        let stored = match &dir {
            Some(d) => super::pr_store::persist(d, &iqn, lun.number, &req),
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
        reply.send(completed(c));
    });
    Answer::Later(later)
}
