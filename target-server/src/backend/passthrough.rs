//! A passthrough LUN's commands (tgt's `--device-type pt`): each goes to the LUN's local
//! SCSI device (`sgio::PtDevice`) with the data direction and length the transport
//! announced — Data-Out the write buffer as received, Data-In the Expected Data Transfer
//! Length — and the device's status, sense and data come back as they are; the connection
//! reports a read's residual from what the device sent. What did not end at the device
//! (a timeout, a reset, a device gone, a request the kernel refused) becomes sense data an
//! initiator knows how to handle. A LOGICAL UNIT RESET is passed on to the device.

use std::io;
use std::sync::Arc;

use iscsi_proto::ScsiCommand;
use scsi::sense::{Sense, key};

use super::reply::{Answer, ReplyTo, TasksEnded, completed};
use crate::registry::Lun;
use crate::sgio::{Data, Outcome, Reply, Request};

/// Sends `op` of `cmd` to `lun`'s device; answers when the device has.
pub fn start(
    lun: &Arc<Lun>,
    op: scsi::pt::PassOp,
    cmd: &mut ScsiCommand,
    reply: ReplyTo,
) -> Answer {
    let Some(dev) = &lun.passthrough else {
        let c = lun.scsi.check_condition(&Sense::internal_target_failure());
        return Answer::Now(completed(c));
    };
    let data = match (cmd.read, cmd.write) {
        // Linux's block layer carries no bidirectional commands any more
        (true, true) => {
            let c = lun
                .scsi
                .check_condition(&Sense::invalid_field_in_cdb_unspecified());
            return Answer::Now(completed(c));
        }
        (false, true) => Data::Out(std::mem::take(&mut cmd.data_out)),
        (true, false) if cmd.expected_read_len > 0 => Data::In(cmd.expected_read_len as usize),
        _ => Data::None,
    };
    let (replier, later) = reply.defer();
    let lu = Arc::clone(lun);
    let read = matches!(data, Data::In(_));
    dev.submit(Request {
        cdb: op.cdb,
        data,
        done: Box::new(move |r: Reply| {
            let (c, buffer) = completion(&lu, r, read);
            replier.send_with_buffer(completed(c), buffer);
        }),
    });
    Answer::Later(later)
}

/// The completion of a device's answer, and the write buffer to give back.
fn completion(lun: &Lun, r: Reply, read: bool) -> (scsi::Completion, Vec<u8>) {
    let (data, buffer) = if read {
        (r.data, Vec::new())
    } else {
        (Vec::new(), r.data)
    };
    let sense = match r.outcome {
        Outcome::Device { status, sense } => {
            return (
                scsi::Completion {
                    status,
                    sense,
                    data,
                },
                buffer,
            );
        }
        Outcome::Transport { host, driver } => {
            tracing::warn!(
                lun = lun.number,
                host_status = host,
                driver_status = driver,
                "passthrough: the command did not end at the device"
            );
            transport_sense(host)
        }
        Outcome::Refused(e) => {
            tracing::warn!(
                lun = lun.number,
                "passthrough: the kernel refused the command: {e}"
            );
            refused_sense(&e)
        }
    };
    (lun.scsi.check_condition(&sense), buffer)
}

/// The sense of a command the host adapter ended (Linux's `DID_*` codes): ABORTED COMMAND
/// for what an initiator retries (a timeout, an abort, a reset, a busy or disrupted
/// transport), HARDWARE ERROR / LOGICAL UNIT COMMUNICATION FAILURE for a device that cannot
/// be reached, INTERNAL TARGET FAILURE for the rest.
fn transport_sense(host: u16) -> Sense {
    match host {
        0 | 2 | 3 | 5 | 8 | 11 | 12 | 13 | 14 => Sense::new(key::ABORTED_COMMAND, 0, 0),
        1 | 4 | 15 | 16 => Sense::new(key::HARDWARE_ERROR, 0x08, 0x00),
        _ => Sense::internal_target_failure(),
    }
}

/// The sense of a request the kernel refused: a transfer it cannot make is the command's
/// fault (INVALID FIELD IN CDB), a device gone is LOGICAL UNIT COMMUNICATION FAILURE.
fn refused_sense(e: &io::Error) -> Sense {
    match e.raw_os_error() {
        Some(libc::EINVAL | libc::ENOMEM | libc::EOVERFLOW | libc::E2BIG) => {
            Sense::invalid_field_in_cdb_unspecified()
        }
        Some(libc::ENODEV | libc::ENXIO | libc::EIO) => Sense::new(key::HARDWARE_ERROR, 0x08, 0x00),
        _ => Sense::internal_target_failure(),
    }
}

/// LOGICAL UNIT RESET (or a target reset) of a passthrough LUN: the device is reset, and
/// the task management response waits for it when `ended` counts what it waits for.
/// Whether the device is being reset (`false`: not a passthrough LUN, or a device that
/// cannot be reset from here: the target's own reset applies).
pub fn reset(lun: &Lun, ended: Option<&Arc<TasksEnded>>) -> bool {
    let Some(dev) = lun.passthrough.as_ref().filter(|d| d.can_reset()) else {
        return false;
    };
    let waiter = ended.cloned();
    if let Some(w) = &waiter {
        w.add(1);
    }
    dev.reset(Box::new(move || {
        if let Some(w) = waiter {
            w.one_done();
        }
    }));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_become_sense_an_initiator_handles() {
        for retried in [3, 5, 8, 14] {
            assert_eq!(
                transport_sense(retried).key,
                key::ABORTED_COMMAND,
                "DID {retried}"
            );
        }
        assert_eq!(
            (transport_sense(1).key, transport_sense(1).asc),
            (key::HARDWARE_ERROR, 0x08),
            "DID_NO_CONNECT"
        );
        assert_eq!(transport_sense(0x7F), Sense::internal_target_failure());
        let refused = |errno| refused_sense(&io::Error::from_raw_os_error(errno));
        assert_eq!(
            refused(libc::EINVAL).asc,
            0x24,
            "a transfer the kernel cannot make"
        );
        assert_eq!(refused(libc::ENODEV).asc, 0x08, "a device gone");
        assert_eq!(refused(libc::EPIPE), Sense::internal_target_failure());
    }
}
