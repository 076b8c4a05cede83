//! SCSI passthrough (tgt's `--device-type pt`, bstype `sg` or `bsg`): the logical unit is a
//! real local SCSI device that the server reaches through the kernel's SCSI generic
//! interfaces. This module decides which commands go to the device: all of them, as they
//! came, except REPORT LUNS, which must name the target's LUNs, not the device's. The
//! device answers with its own identity, data, status and sense; the server only carries
//! the bytes ([`PassOp`]) and the data direction and length the transport announced.
//!
//! What the target itself still does for such a logical unit: the unit attentions it
//! establishes (a new I_T nexus, a changed LUN inventory, its resets: the server passes a
//! LOGICAL UNIT RESET on to the device as well). Reservations are the device's: every
//! initiator reaches it through one local port, so the device cannot tell them apart.

use crate::ops::{self, OpInfo};
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// The commands the target answers itself on a passthrough LU.
pub(crate) const TABLE: &[OpInfo] = &[ops::REPORT_LUNS_OP];

/// A command for the device: its CDB, cut to the length its operation code has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassOp {
    pub cdb: Vec<u8>,
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

/// What a command to passthrough LU `lu` becomes (after the unit attentions the target
/// holds for the nexus): REPORT LUNS answered here, everything else [`Action::Passthrough`].
pub(crate) fn execute(lu: &LogicalUnit, req: &Req<'_>) -> Action {
    let cdb = req.cdb;
    if cdb.first() == Some(&ops::opcode::REPORT_LUNS) {
        let answer = ops::lookup(TABLE, cdb).and_then(|(op, c)| (op.handler)(lu, c, req));
        return answer.unwrap_or_else(|s| Action::Complete(lu.check_condition(&s)));
    }
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
    fn the_device_answers_everything_but_report_luns() {
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
        for op in [0x00, 0x25, 0x5F, 0x9E, 0xA3, 0xC1] {
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
