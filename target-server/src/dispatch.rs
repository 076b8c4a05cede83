//! From a SCSI command to its result: the `scsi` crate decides what the command means; data
//! commands become backing-store jobs on the node's I/O pool, whose results come back to the
//! owning event thread through its inbox. Emulated commands complete at once.

use std::sync::Arc;

use cache::{AlignedBuf, IoPool};
use iscsi_proto::{CommandResult, ScsiCommand};
use scsi::{Action, CmdCtx, Completion};

use crate::event_loop::{Inbox, Msg};
use crate::payload::Payload;
use crate::registry::{ConnId, Lun, Target};

/// Largest single data transfer we execute (bytes); larger requests get INVALID FIELD IN CDB
/// from the SCSI layer's block limits, and this is the last line of defence.
pub const MAX_IO_BYTES: u64 = 32 << 20;

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

fn good() -> CommandResult<Payload> {
    CommandResult::good()
}

/// Run `cmd` against `target`. Returns the result now, or `None` when it was queued on the
/// I/O pool (the result then arrives as `Msg::IoDone` in `inbox`). Results of commands with
/// a write part carry the CDB's transfer length, for the write residuals.
pub fn execute(
    cmd: ScsiCommand,
    target: &Target,
    pool: &IoPool,
    inbox: &Arc<Inbox>,
    conn: ConnId,
) -> Option<CommandResult<Payload>> {
    let block_size = target
        .luns
        .get(&cmd.lun)
        .map_or(512, |l| l.store.block_size());
    let spdtl = if cmd.write {
        scsi::data_out_len(&cmd.cdb, block_size).map(|n| n.min(u64::from(u32::MAX)) as u32)
    } else {
        None
    };
    let inbox_spdtl = SpdtlInbox {
        inbox: Arc::clone(inbox),
        spdtl,
    };
    execute_inner(cmd, target, pool, &inbox_spdtl, conn).map(|mut r| {
        r.write_transfer_len = spdtl;
        r
    })
}

/// The event thread's inbox, plus the write transfer length to stamp on the result.
#[derive(Clone)]
struct SpdtlInbox {
    inbox: Arc<Inbox>,
    spdtl: Option<u32>,
}

impl SpdtlInbox {
    fn send(&self, conn: ConnId, itt: u32, mut result: CommandResult<Payload>) {
        result.write_transfer_len = self.spdtl;
        self.inbox.send(Msg::IoDone { conn, itt, result });
    }
}

fn execute_inner(
    cmd: ScsiCommand,
    target: &Target,
    pool: &IoPool,
    inbox: &SpdtlInbox,
    conn: ConnId,
) -> Option<CommandResult<Payload>> {
    let Some(lun) = target.luns.get(&cmd.lun) else {
        return Some(to_result(scsi::execute_unmapped(
            &cmd.cdb,
            &target.lun_numbers,
            false,
        )));
    };
    let action = lun.scsi.execute(&CmdCtx {
        cdb: &cmd.cdb,
        data_out: &cmd.data_out,
        luns: &target.lun_numbers,
    });
    let bs = u64::from(lun.store.block_size());
    match action {
        Action::Complete(c) => Some(to_result(c)),
        Action::Read {
            lba,
            blocks,
            fua: _,
        } => {
            let len = u64::from(blocks) * bs;
            if len > MAX_IO_BYTES {
                return Some(to_result(scsi::io_error_completion(
                    &lun.scsi,
                    libc::EINVAL,
                    false,
                    lba,
                )));
            }
            let lun = Arc::clone(lun);
            let inbox = inbox.clone();
            let itt = cmd.itt;
            pool.submit(Box::new(move || {
                let mut buf = AlignedBuf::new(len as usize);
                let result = match lun.store.read_at(buf.as_mut_slice(), lba * bs) {
                    Ok(()) => CommandResult {
                        data: Some(Payload::Block(Arc::new(buf))),
                        ..good()
                    },
                    Err(e) => io_failure(&lun, &e, false, lba),
                };
                inbox.send(conn, itt, result);
            }));
            None
        }
        Action::Write {
            lba,
            blocks,
            fua,
            data_offset,
        } => {
            let len = (u64::from(blocks) * bs) as usize;
            let Some(end) = data_offset
                .checked_add(len)
                .filter(|&e| e <= cmd.data_out.len())
            else {
                // the SCSI layer checked the length against the data received; be safe anyway
                return Some(to_result(scsi::io_error_completion(
                    &lun.scsi,
                    libc::EINVAL,
                    true,
                    lba,
                )));
            };
            let durable = fua || !lun.scsi.write_cache_enabled();
            let lun = Arc::clone(lun);
            let inbox = inbox.clone();
            let itt = cmd.itt;
            let data = cmd.data_out;
            pool.submit(Box::new(move || {
                let payload = &data[data_offset..end];
                let res = if lun.store.is_direct() {
                    // O_DIRECT needs an aligned source buffer
                    let aligned = AlignedBuf::from_slice(payload);
                    lun.store.write_at(aligned.as_slice(), lba * bs, durable)
                } else {
                    lun.store.write_at(payload, lba * bs, durable)
                };
                let result = match res {
                    Ok(()) => good(),
                    Err(e) => io_failure(&lun, &e, true, lba),
                };
                inbox.send(conn, itt, result);
            }));
            None
        }
        Action::Verify {
            lba,
            blocks,
            same_block,
        } => {
            let len = u64::from(blocks) * bs;
            if len > MAX_IO_BYTES {
                return Some(to_result(scsi::io_error_completion(
                    &lun.scsi,
                    libc::EINVAL,
                    false,
                    lba,
                )));
            }
            let lun = Arc::clone(lun);
            let inbox = inbox.clone();
            let itt = cmd.itt;
            let data = cmd.data_out;
            pool.submit(Box::new(move || {
                let mut buf = AlignedBuf::new(len as usize);
                let result = match lun.store.read_at(buf.as_mut_slice(), lba * bs) {
                    Ok(()) => {
                        match scsi::verify_compare(buf.as_slice(), &data, bs as usize, same_block) {
                            None => good(),
                            Some(sense) => to_result(lun.scsi.check_condition(&sense)),
                        }
                    }
                    Err(e) => io_failure(&lun, &e, false, lba),
                };
                inbox.send(conn, itt, result);
            }));
            None
        }
        Action::Sync { lba, blocks: _ } => {
            let lun = Arc::clone(lun);
            let inbox = inbox.clone();
            let itt = cmd.itt;
            pool.submit(Box::new(move || {
                let result = match lun.store.sync() {
                    Ok(()) => good(),
                    Err(e) => io_failure(&lun, &e, true, lba),
                };
                inbox.send(conn, itt, result);
            }));
            None
        }
    }
}

fn io_failure(lun: &Lun, e: &std::io::Error, write: bool, lba: u64) -> CommandResult<Payload> {
    tracing::error!(lun = lun.number, path = %lun.store.path().display(), lba, write,
        "backing store I/O failed: {e}");
    to_result(scsi::io_error_completion(
        &lun.scsi,
        e.raw_os_error().unwrap_or(libc::EIO),
        write,
        lba,
    ))
}
