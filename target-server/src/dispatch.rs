//! From a SCSI command to its answer, for any transport: the `scsi` crate decides what the
//! command means; emulated commands complete at once, the rest go to the backend (cache,
//! O_DIRECT or page cache, on the node's I/O workers), whose results come back through the
//! command's `Replier`. This module only maps one to the other — for task management
//! requests too: `scsi::task_mgmt` plans them, [`task_management`] carries out the logical
//! units' side, the transport ends its own connection's tasks and answers.

use std::sync::Arc;

use iscsi_proto::ScsiCommand;
use scsi::task_mgmt::{self, ResetKind, TaskFunction, TaskScope, TmfPlan, TmfVerdict};
use scsi::{Action, CmdCtx};

use crate::backend::landing::Landing;
use crate::backend::locked::{self, Blocks, Locked, LockedOp};
use crate::backend::reply::{Answer, ReplyTo, TaskControl, TasksEnded, completed};
use crate::backend::{
    StorageCtx, changer, passthrough, pr, pr_cluster, sanitize, selftest, storage, tape, thin,
    xcopy,
};
use crate::conn_id::ConnId;
use crate::io_stats::{IoClass, IoKind};
use crate::registry::{Lun, LunSet, Target};

/// Run `cmd` against `target`: [`Answer::Now`] with the result, or [`Answer::Later`] when it
/// continues on an I/O worker (the result then arrives through the deferred `reply`), and
/// what kind of I/O the command is (for the statistics; also set on the deferred reply).
/// Results of commands with a write part carry the CDB's transfer length, for the write
/// residuals. A write buffer the command no longer needs is left in `cmd.data_out` (to be
/// recycled); one an I/O worker still uses is taken out.
///
/// The steps: the LUN (or the answer of a LUN without a logical unit); its capacity
/// brought up to date; what `scsi` makes of the command (or a PERSISTENT RESERVE OUT to
/// carry out); its statistics class; the refusal of a LUN another gateway owns; the
/// action started.
pub fn execute(
    cmd: &mut ScsiCommand,
    landing: Option<Landing>,
    target: &Target,
    luns: &LunSet,
    nexus: Option<&scsi::Nexus>,
    ctx: &StorageCtx<'_>,
    mut reply: ReplyTo,
) -> (Answer, IoKind) {
    let lun = luns.map.get(&cmd.lun);
    let block_size = lun.map_or(512, |l| l.store.block_size());
    let stamp = write_transfer_len(cmd, lun.map(|l| &l.scsi), block_size);
    reply.set_write_transfer_len(stamp);
    let Some(lun) = lun else {
        let r = completed(scsi::execute_unmapped(&cmd.cdb, &luns.numbers, false));
        return (stamped(Answer::Now(r), stamp), IoKind::OTHER);
    };
    if cmd.landed > 0 && landing.is_none() {
        // the transport reported write data put somewhere it cannot show: never write
        // what is not there
        tracing::error!(itt = cmd.itt, "write data landed nowhere");
        let r = completed(
            lun.scsi
                .check_condition(&scsi::Sense::internal_target_failure()),
        );
        return (stamped(Answer::Now(r), stamp), IoKind::OTHER);
    }
    follow_outside_resize(lun);
    if let Some(sp) = &lun.shared_pr {
        // several gateways share the LUN's reservations: a copy past its lease is not
        // trusted, and a change goes through the cluster, on an I/O worker
        sp.check_lease(&lun.scsi);
        if changes_reservations(&cmd.cdb)
            && let Some(n) = nexus
        {
            let answer =
                pr_cluster::reserve_out(lun, target.tid, n, &cmd.cdb, &cmd.data_out, ctx, reply);
            return (stamped(answer, stamp), IoKind::OTHER);
        }
    }
    let action = match scsi_outcome(cmd, lun, luns, nexus) {
        scsi::Outcome::Action(a) => a,
        scsi::Outcome::PersistentReserveOut(po) => {
            let answer = pr::reserve_out(po, lun, target, ctx, reply);
            return (stamped(answer, stamp), IoKind::OTHER);
        }
    };
    let kind = io_kind(
        &action,
        &cmd.cdb,
        u64::from(block_size),
        lun.scsi.tape_block_len(),
    );
    reply.set_kind(kind);
    // a passed-through device's command carries the transport's data direction and length
    let action = match action {
        Action::Passthrough(op) => {
            let kind = IoKind {
                bytes: u64::from(cmd.expected_read_len.max(cmd.expected_write_len)),
                ..kind
            };
            reply.set_kind(kind);
            let answer = passthrough::start(lun, op, cmd, reply);
            return (stamped(answer, stamp), kind);
        }
        a => a,
    };
    let reply = match owned_elsewhere(lun, target, &action, cmd, landing.is_some(), reply) {
        Owner::Here(reply) => reply,
        Owner::Answered(answer) => return (stamped(answer, stamp), kind),
    };
    let answer = start(
        action,
        &mut cmd.data_out,
        landing,
        lun,
        target,
        luns,
        ctx,
        reply,
    );
    (stamped(answer, stamp), kind)
}

/// PERSISTENT RESERVE OUT, RESERVE and RELEASE: on a LUN whose reservations several
/// gateways share, they change the cluster's state (`pr_cluster::reserve_out`).
fn changes_reservations(cdb: &[u8]) -> bool {
    use scsi::ops::opcode::{PERSISTENT_RESERVE_OUT, RELEASE_6, RELEASE_10, RESERVE_6, RESERVE_10};
    matches!(
        cdb.first(),
        Some(&(PERSISTENT_RESERVE_OUT | RESERVE_6 | RESERVE_10 | RELEASE_6 | RELEASE_10))
    )
}

/// A media action another gateway shipped here, to the LUN's owner (`ship::serve`): started
/// on the backend as if it had arrived here. Its command was checked where it arrived
/// (unit attentions, reservations, ALUA); its answer goes back through `reply`.
pub fn run_shipped(
    action: Action,
    data: &mut Vec<u8>,
    lun: &Arc<Lun>,
    target: &Target,
    luns: &LunSet,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    follow_outside_resize(lun);
    start(action, data, None, lun, target, luns, ctx, reply)
}

/// The Data-Out length the CDB of a write announces (`None` for a command without a write
/// part), saturated to 32 bits: the write residuals are computed against it.
fn write_transfer_len(
    cmd: &ScsiCommand,
    lu: Option<&scsi::LogicalUnit>,
    block_size: u32,
) -> Option<u32> {
    if !cmd.write {
        return None;
    }
    match lu {
        Some(lu) => lu.data_out_len(&cmd.cdb),
        None => scsi::data_out_len(&cmd.cdb, block_size),
    }
    .map(|n| n.min(u64::from(u32::MAX)) as u32)
}

/// An RBD image resized outside the daemon (its update watch noticed): the LU's capacity
/// follows, and every I_T nexus gets CAPACITY DATA HAS CHANGED.
fn follow_outside_resize(lun: &Lun) {
    if let Some(blocks) = lun.store.take_size_change() {
        tracing::info!(
            lun = lun.number,
            blocks,
            "backing store resized outside: LUN follows"
        );
        lun.scsi.set_capacity(blocks);
    }
}

/// What the LU's emulation makes of the command. Reservations and unit attentions are per
/// I_T nexus: every session has one (without one, an anonymous nexus).
fn scsi_outcome(
    cmd: &ScsiCommand,
    lun: &Lun,
    luns: &LunSet,
    nexus: Option<&scsi::Nexus>,
) -> scsi::Outcome {
    let cmd_ctx = CmdCtx {
        cdb: &cmd.cdb,
        data_out: &cmd.data_out,
        landed: u64::from(cmd.landed),
        luns: &luns.numbers,
    };
    match nexus {
        Some(n) => lun.scsi.execute_nexus(n, &cmd_ctx),
        None => scsi::Outcome::Action(lun.scsi.execute(&cmd_ctx)),
    }
}

/// Where a command of an RBD LUN that another gateway may own goes.
enum Owner {
    /// It runs here (this gateway owns the LUN, the LUN has no owner to ask, or the action
    /// touches no medium).
    Here(ReplyTo),
    /// It was answered or shipped.
    Answered(Answer),
}

/// An RBD LUN another gateway owns. On an active/non-optimized path a media action is
/// shipped to the owner over the gateway link (`ship`), its write data with it, and
/// answered when the owner answers; while the link is being made it is refused
/// transitioning (the initiator retries). Without a link (the owner publishes none, or it
/// cannot be reached), the owner is asked to hand the LUN over (its cache written back)
/// and the command is refused transitioning meanwhile; a fenced gateway answers
/// unavailable.
fn owned_elsewhere(
    lun: &Arc<Lun>,
    target: &Target,
    action: &Action,
    cmd: &mut ScsiCommand,
    landed: bool,
    reply: ReplyTo,
) -> Owner {
    use crate::ship::link::NotShipped;
    use crate::ship::route;
    use crate::ship::wire::{LunRef, Shipped};
    let Some(a) = &lun.rbd_ownership else {
        return Owner::Here(reply);
    };
    if matches!(action, Action::Complete(_) | Action::SetTargetPortGroups(_)) || a.owns() {
        return Owner::Here(reply);
    }
    let refuse = |sense: &scsi::Sense| {
        Owner::Answered(Answer::Now(completed(lun.scsi.check_condition(sense))))
    };
    if a.is_fenced() {
        return refuse(&scsi::alua::UNAVAILABLE);
    }
    let shippable = !landed && lun.scsi.access_state() == scsi::AccessState::ActiveNonOptimized;
    if let Some(s) = Shipped::from_action(action).filter(|_| shippable) {
        match route::way(a.record(), a.owner_group()) {
            route::Way::Ship(link, st) => {
                let (replier, deferred) = reply.defer();
                let to = LunRef {
                    target: &target.iqn,
                    lun: lun.number,
                    record: a.record(),
                };
                let data = std::mem::take(&mut cmd.data_out);
                match link.ship(to, s, data, replier, Arc::clone(lun), st) {
                    Ok(()) => {}
                    Err(NotShipped::Full(r, buf)) => {
                        let full = scsi::Completion {
                            status: scsi::status::TASK_SET_FULL,
                            ..scsi::Completion::default()
                        };
                        r.send_with_buffer(completed(full), buf);
                    }
                    Err(NotShipped::Dead(r, buf)) => {
                        let c = lun.scsi.check_condition(&scsi::alua::TRANSITIONING);
                        r.send_with_buffer(completed(c), buf);
                    }
                }
                return Owner::Answered(Answer::Later(deferred));
            }
            route::Way::Wait => return refuse(&scsi::alua::TRANSITIONING),
            route::Way::Move => {}
        }
    }
    a.want_ownership(crate::alua::MoveCause::Io);
    refuse(&scsi::alua::TRANSITIONING)
}

/// Starts `action` (with the command's write data `data_out`) on the backend: the one place
/// where an action meets the store, the cache and the I/O workers. Emulated results are
/// answered at once.
#[expect(
    clippy::too_many_arguments,
    reason = "the command, its landing and its context"
)]
fn start(
    action: Action,
    data_out: &mut Vec<u8>,
    landing: Option<Landing>,
    lun: &Arc<Lun>,
    target: &Target,
    luns: &LunSet,
    ctx: &StorageCtx<'_>,
    reply: ReplyTo,
) -> Answer {
    // COMPARE AND WRITE, ORWRITE, WRITE ATOMIC: one path, the range held exclusively
    let mut locked_write = |op, (lba, count, durable), reply| {
        let data = std::mem::take(data_out);
        let w = Locked {
            op,
            at: Blocks { lba, count },
            durable,
        };
        locked::start(w, lun, data, ctx, reply)
    };
    match action {
        Action::Complete(c) => Answer::Now(completed(c)),
        Action::Read {
            lba,
            blocks,
            fua: _,
        } => storage::read(lun, lba, blocks, ctx, reply),
        Action::Write {
            lba,
            blocks,
            durable,
            data_offset: 0,
        } if let Some(landing) = landing => {
            storage::write_landed(lun, lba, blocks, durable, data_out, landing, ctx, reply)
        }
        Action::Write {
            lba,
            blocks,
            durable,
            data_offset,
        } => storage::write(lun, lba, blocks, durable, data_out, data_offset, ctx, reply),
        Action::Verify {
            lba,
            blocks,
            same_block,
        } => {
            let data = std::mem::take(data_out);
            storage::verify(lun, lba, blocks, same_block, data, ctx, reply)
        }
        Action::CompareAndWrite {
            lba,
            blocks,
            durable,
        } => locked_write(LockedOp::CompareAndWrite, (lba, blocks, durable), reply),
        Action::OrWrite {
            lba,
            blocks,
            durable,
        } => locked_write(LockedOp::OrWrite, (lba, blocks, durable), reply),
        Action::AtomicWrite {
            lba,
            blocks,
            durable,
        } => locked_write(LockedOp::Atomic, (lba, blocks, durable), reply),
        Action::Unmap { ranges } => thin::start_unmap(lun, ranges, ctx, reply),
        Action::WriteSame {
            lba,
            blocks,
            ndob,
            unmap,
        } => thin::start_write_same(lun, (lba, blocks), ndob, unmap, data_out, ctx, reply),
        Action::GetLbaStatus { lba, alloc_len } => {
            thin::start_lba_status(lun, lba, alloc_len, ctx, reply)
        }
        Action::ExtendedCopy(job) => xcopy::start(job, lun, luns, ctx, reply),
        Action::SelfTest { lba, blocks } => selftest::run(lun, lba, blocks, ctx, reply),
        Action::Sanitize(op) => sanitize::start(lun, op, ctx.cache_for(lun).cloned(), reply),
        Action::Sync { lba, blocks: _ } => storage::synchronize_cache(lun, lba, ctx, reply),
        Action::SetTargetPortGroups(asks) => {
            crate::alua::set_target_port_groups(lun, target, &asks, reply)
        }
        Action::Tape(op) => tape::start(lun, op, std::mem::take(data_out), reply),
        Action::Changer(op) => changer::start(lun, op, ctx.registry, reply),
        // started by `execute` (the transport's data direction), never shipped
        Action::Passthrough(_) => Answer::Now(completed(
            lun.scsi
                .check_condition(&scsi::Sense::internal_target_failure()),
        )),
    }
}

/// What an action counts as in the LUN's statistics, and the bytes it moves. A command
/// answered at once (refused, or emulated) counts by its operation code, moving nothing.
fn io_kind(action: &Action, cdb: &[u8], block_size: u64, tape_block_len: u32) -> IoKind {
    let kind = |class, blocks: u64| IoKind {
        class,
        bytes: blocks.saturating_mul(block_size),
    };
    match action {
        Action::Read { blocks, .. } => kind(IoClass::Read, u64::from(*blocks)),
        Action::Write { blocks, .. }
        | Action::CompareAndWrite { blocks, .. }
        | Action::OrWrite { blocks, .. }
        | Action::AtomicWrite { blocks, .. } => kind(IoClass::Write, u64::from(*blocks)),
        Action::WriteSame {
            blocks,
            unmap: true,
            ..
        } => kind(IoClass::Discard, *blocks),
        Action::WriteSame { blocks, .. } => kind(IoClass::Write, *blocks),
        Action::Unmap { ranges } => kind(
            IoClass::Discard,
            ranges.iter().fold(0u64, |a, r| a.saturating_add(r.1)),
        ),
        Action::Sync { .. } => kind(IoClass::Flush, 0),
        // a tape's block size is 1: its bytes
        Action::Tape(op @ scsi::ssc::TapeOp::Read { .. }) => {
            kind(IoClass::Read, op.bytes(tape_block_len))
        }
        Action::Tape(op @ scsi::ssc::TapeOp::Write { .. }) => {
            kind(IoClass::Write, op.bytes(tape_block_len))
        }
        Action::Tape(scsi::ssc::TapeOp::WriteFilemarks { immed: false, .. }) => {
            kind(IoClass::Flush, 0)
        }
        // a passed-through command by its operation code (its bytes: the transport's)
        Action::Complete(_) | Action::Passthrough(_) => kind(
            io_class(scsi::op_class(cdb.first().copied().unwrap_or(0))),
            0,
        ),
        _ => IoKind::OTHER,
    }
}

/// The statistics class of a command's operation class (`scsi::op_class`).
fn io_class(class: scsi::OpClass) -> IoClass {
    match class {
        scsi::OpClass::Read => IoClass::Read,
        scsi::OpClass::Write => IoClass::Write,
        scsi::OpClass::Flush => IoClass::Flush,
        scsi::OpClass::Discard => IoClass::Discard,
        scsi::OpClass::Other => IoClass::Other,
    }
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

/// A task management request of a session with `target` (none: a session without logical
/// units), for any transport: `scsi` plans it (response, tasks ended, reset); this carries
/// out the logical units' side — the reset (reservations released,
/// unit attentions for every I_T nexus: SAM-5 6.3.3, 6.4) and the end of other sessions'
/// tasks through `tasks` (never those of connection `issuer`, whose own tasks its
/// transport ends; `ended` counts those whose work still runs until it has ended). Returns the plan: its verdict is the response, its `close_connections`
/// asks the transport to drop the target's connections after answering.
pub fn task_management(
    req: &iscsi_proto::TmfRequest,
    target: Option<&Target>,
    tasks: &dyn TaskControl,
    issuer: ConnId,
    ended: Option<&Arc<TasksEnded>>,
) -> TmfPlan {
    let function = task_function(req.function);
    let Some(target) = target else {
        // a session without a target has no logical units
        return task_mgmt::plan(function, false);
    };
    let luns = target.lun_set();
    let lu = luns.map.get(&req.lun);
    let plan = task_mgmt::plan(function, lu.is_some());
    if plan.verdict != TmfVerdict::Complete {
        return plan;
    }
    match plan.reset {
        ResetKind::None => {}
        ResetKind::LogicalUnit => {
            // a passed-through device is reset itself and reports it (its own unit
            // attention): the target adds none, or the reset would be seen twice
            if let Some(l) = lu {
                if passthrough::reset(l, ended) {
                    l.scsi.passthrough_reset();
                } else {
                    l.scsi.logical_unit_reset();
                }
            }
        }
        ResetKind::Target => {
            for l in luns.map.values() {
                if passthrough::reset(l, ended) {
                    l.scsi.passthrough_reset();
                } else {
                    l.scsi.target_reset();
                }
            }
        }
    }
    let lun = match plan.scope {
        TaskScope::AllOnLun => Some(Some(req.lun)),
        TaskScope::AllOnTarget => Some(None),
        TaskScope::Nothing | TaskScope::OneTask | TaskScope::OwnOnLun => None,
    };
    if let Some(lun) = lun {
        tasks.abort_tasks(target.tid, lun, None, Some(issuer), ended.cloned());
    }
    plan
}

/// The LUNs of `target` whose reset by `plan` (carried out here by [`task_management`])
/// the other gateways must make too — RBD LUNs several gateways share, whose copies there
/// hold their own nexuses' unit attentions and tasks — and whether it is a target reset;
/// `None` when there are none.
pub fn shared_resets(
    req: &iscsi_proto::TmfRequest,
    target: Option<&Target>,
    plan: &TmfPlan,
) -> Option<(Vec<Arc<Lun>>, bool)> {
    let target = target?;
    if plan.verdict != TmfVerdict::Complete {
        return None;
    }
    let luns = target.lun_set();
    let shared = |l: &&Arc<Lun>| l.shared_pr.is_some();
    let (list, whole): (Vec<Arc<Lun>>, bool) = match plan.reset {
        ResetKind::None => return None,
        ResetKind::LogicalUnit => (
            luns.map
                .get(&req.lun)
                .filter(shared)
                .cloned()
                .into_iter()
                .collect(),
            false,
        ),
        ResetKind::Target => (luns.map.values().filter(shared).cloned().collect(), true),
    };
    (!list.is_empty()).then_some((list, whole))
}

/// iSCSI's task management function codes (RFC 7143 11.5.1) as SAM-5 functions.
fn task_function(f: iscsi_proto::TmfFunction) -> TaskFunction {
    use iscsi_proto::TmfFunction as F;
    match f {
        F::AbortTask => TaskFunction::AbortTask,
        F::AbortTaskSet => TaskFunction::AbortTaskSet,
        F::ClearAca => TaskFunction::ClearAca,
        F::ClearTaskSet => TaskFunction::ClearTaskSet,
        F::LogicalUnitReset => TaskFunction::LogicalUnitReset,
        F::TargetWarmReset => TaskFunction::TargetWarmReset,
        F::TargetColdReset => TaskFunction::TargetColdReset,
        F::TaskReassign | F::Other(_) => TaskFunction::Other,
    }
}

/// A plan's verdict as the iSCSI Task Management Function Response code.
pub fn tmf_response(plan: &TmfPlan) -> iscsi_proto::TmfResponse {
    match plan.verdict {
        TmfVerdict::Complete => iscsi_proto::TmfResponse::Complete,
        TmfVerdict::LunNotExist => iscsi_proto::TmfResponse::LunNotExist,
        TmfVerdict::NotSupported => iscsi_proto::TmfResponse::NotSupported,
    }
}
