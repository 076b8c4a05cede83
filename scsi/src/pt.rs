//! SCSI passthrough (tgt's `--device-type pt`, bstype `sg` or `bsg`): the logical unit is a
//! real local SCSI device that the server reaches through the kernel's SCSI generic
//! interfaces. This module decides which commands go to the device: all of them, as they
//! came, except the few the target must answer itself ([`answered_here`]): REPORT LUNS,
//! which must name the target's LUNs, not the device's, and the reservation commands
//! (RESERVE / RELEASE (6)/(10), PERSISTENT RESERVE IN / OUT). Every initiator reaches the
//! device through one local port, so the device cannot tell them apart: its own
//! reservations would hold nobody off. The target keeps them per I_T nexus, as for its
//! own logical units, and refuses the commands a reservation forbids with RESERVATION
//! CONFLICT before they reach the device. The device answers everything else with its
//! own identity, data, status and sense; the server only carries the bytes ([`PassOp`])
//! and the data direction and length the transport announced.
//!
//! The target's unit attentions (a new I_T nexus, a changed LUN inventory) come first, as
//! for every logical unit; a LOGICAL UNIT RESET is passed on to the device, which reports
//! it itself.

use crate::ops;
use crate::sense::Sense;
use crate::{Action, LogicalUnit};

/// A command for the device: its CDB, cut to the length its operation code has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassOp {
    pub cdb: Vec<u8>,
}

/// The commands the target answers itself on a passthrough LU (with the disk's handlers:
/// REPORT LUNS and the reservations).
pub fn answered_here(cdb: &[u8]) -> bool {
    use ops::opcode::*;
    matches!(
        cdb.first(),
        Some(
            &(REPORT_LUNS
                | RESERVE_6
                | RELEASE_6
                | RESERVE_10
                | RELEASE_10
                | PERSISTENT_RESERVE_IN
                | PERSISTENT_RESERVE_OUT)
        )
    )
}

/// The length of the CDB that starts `cdb` (SPC-4 4.2.5.1, the group code in the operation
/// code's top three bits): 6, 10, 12 or 16 bytes; a variable-length CDB (7Eh, 7Fh) says
/// its own length in byte 7; a reserved or vendor-specific group takes what was sent, up to
/// 16 bytes. `None` when fewer bytes came than the length needs.
pub fn cdb_len(cdb: &[u8]) -> Option<usize> {
    let op = *cdb.first()?;
    let n = match op >> 5 {
        0 => 6,
        1 | 2 => 10,
        4 => 16,
        5 => 12,
        3 if op == 0x7E || op == 0x7F => 8 + usize::from(*cdb.get(7)?),
        _ => cdb.len().min(16),
    };
    (n >= 6 && n <= cdb.len()).then_some(n)
}

/// A command of passthrough LU `lu` that is not [`answered_here`], after the unit
/// attentions and reservations the target holds: [`Action::Passthrough`].
pub(crate) fn pass(lu: &LogicalUnit, cdb: &[u8]) -> Action {
    match cdb_len(cdb) {
        Some(n) => Action::Passthrough(PassOp {
            cdb: cdb[..n].to_vec(),
        }),
        None => Action::Complete(lu.check_condition(&Sense::invalid_field_in_cdb_unspecified())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;
    use crate::{DeviceType, Nexus, NexusId, Outcome, UnitAttention};

    fn pt() -> LogicalUnit {
        lu_with(|p| p.device_type = DeviceType::Passthrough)
    }

    fn passed(lu: &LogicalUnit, cdb: &[u8]) -> Vec<u8> {
        match exec(lu, cdb, &[]) {
            Action::Passthrough(op) => op.cdb,
            other => panic!("{cdb:02x?} was not passed through: {other:?}"),
        }
    }

    #[test]
    fn cdb_lengths_follow_the_group_code() {
        let mut c = [0u8; 16];
        for (op, n) in [
            (0x12, 6),
            (0x28, 10),
            (0x5A, 10),
            (0x88, 16),
            (0xA8, 12),
            (0xC0, 16),
            (0x60, 16),
        ] {
            c[0] = op;
            assert_eq!(cdb_len(&c), Some(n), "opcode {op:02x}");
        }
        let mut var = vec![0x7F, 0, 0, 0, 0, 0, 0, 0x18];
        var.resize(32, 0);
        assert_eq!(cdb_len(&var), Some(32));
        assert_eq!(
            cdb_len(&var[..16]),
            None,
            "a variable CDB longer than what came"
        );
        assert_eq!(cdb_len(&[0x28, 0, 0]), None);
        assert_eq!(cdb_len(&[]), None);
    }

    #[test]
    fn the_device_answers_everything_but_report_luns_and_reservations() {
        let lu = pt();
        let mut inq = [0u8; 16];
        inq[0] = 0x12;
        inq[4] = 96;
        assert_eq!(
            passed(&lu, &inq),
            inq[..6].to_vec(),
            "INQUIRY is the device's own"
        );
        let mut w = [0u8; 16];
        w[0] = 0x2A;
        w[8] = 8;
        assert_eq!(passed(&lu, &w).len(), 10);
        // the target's own commands elsewhere go to the device too
        for op in [0x00, 0x25, 0x9E, 0xA3, 0xC1] {
            let mut c = [0u8; 16];
            c[0] = op;
            passed(&lu, &c);
        }
        // REPORT LUNS names the target's LUNs (0, 1 and 300 in the test context)
        let c = complete(&lu, &[0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(c.status, 0);
        assert_eq!(&c.data[..4], &[0, 0, 0, 24]);
        assert_eq!(
            lu.data_out_len(&w),
            None,
            "the device knows its transfer lengths"
        );
    }

    #[test]
    fn reservations_are_the_targets_and_hold_other_initiators_off() {
        let lu = pt();
        let a = Nexus::iscsi(NexusId(1), "iqn.2026-11.test:a", 1, "iqn.t", 1);
        let b = Nexus::iscsi(NexusId(2), "iqn.2026-11.test:b", 1, "iqn.t", 1);
        let run = |n: &Nexus, cdb: &[u8]| {
            let ctx = crate::CmdCtx {
                cdb,
                data_out: &[],
                landed: 0,
                luns: &[0, 1],
            };
            match lu.execute_nexus(n, &ctx) {
                Outcome::Action(a) => a,
                Outcome::PersistentReserveOut(p) => Action::Complete(p.completion),
            }
        };
        let status = |a: Action| match a {
            Action::Complete(c) => c.status,
            other => panic!("not answered here: {other:?}"),
        };
        let reserve = [0x16u8, 0, 0, 0, 0, 0];
        let read = [0x28u8, 0, 0, 0, 0, 0, 0, 0, 1, 0];
        assert_eq!(status(run(&a, &reserve)), 0);
        assert!(
            matches!(run(&a, &read), Action::Passthrough(_)),
            "the holder reads"
        );
        let conflict = crate::status::RESERVATION_CONFLICT;
        assert_eq!(status(run(&b, &read)), conflict, "another initiator");
        assert_eq!(status(run(&b, &reserve)), conflict);
        assert_eq!(status(run(&a, &[0x17, 0, 0, 0, 0, 0])), 0, "RELEASE(6)");
        assert!(matches!(run(&b, &read), Action::Passthrough(_)), "released");
        // PERSISTENT RESERVE IN is answered here too
        let prin = [0x5Eu8, 0, 0, 0, 0, 0, 0, 0, 64, 0];
        assert_eq!(status(run(&a, &prin)), 0);
        // a reset (the device's) releases the reservation and adds no unit attention
        assert_eq!(status(run(&a, &reserve)), 0);
        lu.passthrough_reset();
        assert!(
            matches!(run(&b, &read), Action::Passthrough(_)),
            "released by the reset"
        );
        assert!(
            matches!(run(&a, &read), Action::Passthrough(_)),
            "no unit attention"
        );
    }

    #[test]
    fn the_targets_unit_attentions_come_first() {
        let lu = pt();
        let n = Nexus::iscsi(NexusId(7), "iqn.2026-11.test:ua", 1, "iqn.t", 1);
        lu.nexus_added(&n);
        lu.establish_unit_attention(UnitAttention::LunsChanged);
        let ctx = |cdb: &'static [u8]| crate::CmdCtx {
            cdb,
            data_out: &[],
            landed: 0,
            luns: &[0, 1],
        };
        let first = lu.execute_nexus(&n, &ctx(&[0; 16]));
        let Outcome::Action(Action::Complete(c)) = first else {
            panic!("no unit attention: {first:?}");
        };
        assert_eq!(check(&c).0, 6, "UNIT ATTENTION");
        // INQUIRY passes whatever is pending
        let inq: &'static [u8] = &[0x12, 0, 0, 0, 36, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(matches!(
            lu.execute_nexus(&n, &ctx(inq)),
            Outcome::Action(Action::Passthrough(_))
        ));
    }
}
