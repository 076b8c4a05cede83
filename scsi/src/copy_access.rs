//! Access checks of the copy manager (EXTENDED COPY, SPC-4 5.17 / 6.4): the copy manager
//! reads the copy sources and writes the copy destinations on behalf of the I_T nexus the
//! EXTENDED COPY came from, so each logical unit a segment touches must accept that READ or
//! WRITE from that nexus: no reservation making it RESERVATION CONFLICT (SPC-2 RESERVE or a
//! persistent reservation), a medium present (removable LUs), and for a destination no write
//! protection.
//!
//! How a refusal ends the copy: a conflict on the logical unit the EXTENDED COPY was sent to
//! is the command's own RESERVATION CONFLICT (checked before the copy starts,
//! [`check_receiving_lu`]); a conflict on another logical unit ends the copy with COPY
//! ABORTED, COPY TARGET DEVICE NOT REACHABLE (the copy manager cannot use it for this
//! nexus); NOT READY and DATA PROTECT are reported with their own sense data, as the copy
//! target would report them for the READ or WRITE.

use crate::nexus::Nexus;
use crate::ops::opcode;
use crate::removable::MEDIUM_NOT_PRESENT;
use crate::sense::{Sense, key};
use crate::xcopy::{ParamList, copy_target_not_reachable};
use crate::{Action, LogicalUnit};

/// Why the copy manager may not read or write a logical unit for an I_T nexus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CopyDenied {
    /// The READ / WRITE would be RESERVATION CONFLICT.
    Conflict,
    /// The READ / WRITE would end with this sense data (NOT READY, DATA PROTECT).
    Sense(Sense),
}

impl CopyDenied {
    /// The sense data the EXTENDED COPY ends with when a copy target other than the
    /// logical unit the command was sent to refuses the access.
    pub fn copy_sense(self) -> Sense {
        match self {
            CopyDenied::Conflict => copy_target_not_reachable(),
            CopyDenied::Sense(s) => s,
        }
    }
}

/// ABORTED COMMAND, no additional sense: the copy status held for RECEIVE COPY RESULTS when
/// task management (ABORT TASK, LOGICAL UNIT RESET …) ended the copy between chunks.
pub const fn copy_ended_by_task_management() -> Sense {
    Sense::new(key::ABORTED_COMMAND, 0x00, 0x00)
}

impl LogicalUnit {
    /// Whether the copy manager may read (`write == false`) or write this logical unit on
    /// behalf of `nexus`: reservations first (SAM-5 status precedence), then the medium,
    /// then write protection.
    pub fn copy_access(&self, nexus: &Nexus, write: bool) -> Result<(), CopyDenied> {
        let op = if write {
            opcode::WRITE_16
        } else {
            opcode::READ_16
        };
        let mut cdb = [0u8; 16];
        cdb[0] = op;
        if self.shared().would_conflict(nexus, &cdb) {
            return Err(CopyDenied::Conflict);
        }
        if self.medium_ejected() {
            return Err(CopyDenied::Sense(MEDIUM_NOT_PRESENT));
        }
        if write {
            self.check_writable().map_err(CopyDenied::Sense)?;
        }
        Ok(())
    }
}

/// The checks of the logical unit the EXTENDED COPY was sent to, for the segments that read
/// or write it (its CSCD names this LU's NAA designator): `Ok(Some(action))` ends the
/// command now with RESERVATION CONFLICT, `Err` with that sense data.
pub(crate) fn check_receiving_lu(
    lu: &LogicalUnit,
    nexus: &Nexus,
    list: &ParamList,
) -> Result<Option<Action>, Sense> {
    let me = |i: u16| {
        list.cscds
            .get(usize::from(i))
            .is_some_and(|c| c.designator.names_naa_id(lu.params().naa_id))
    };
    let reads = list.segments.iter().any(|s| me(s.src));
    let writes = list.segments.iter().any(|s| me(s.dst));
    for (used, write) in [(reads, false), (writes, true)] {
        if !used {
            continue;
        }
        match lu.copy_access(nexus, write) {
            Ok(()) => {}
            Err(CopyDenied::Conflict) => return Ok(Some(crate::reserve_spc2::conflict())),
            Err(CopyDenied::Sense(s)) => return Err(s),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NexusId;
    use crate::test_util::*;

    fn nexus(id: u64, initiator: &str) -> Nexus {
        Nexus::iscsi(NexusId(id), initiator, 1, "iqn.2026-11.org.numatgt:t1", 1)
    }

    fn run(lu: &LogicalUnit, n: &Nexus, cdb: &[u8], data: &[u8]) -> crate::Completion {
        let cmd = crate::CmdCtx {
            cdb,
            data_out: data,
            landed: 0,
            luns: &[1],
        };
        match lu.execute_nexus(n, &cmd) {
            crate::Outcome::Action(crate::Action::Complete(c)) => c,
            crate::Outcome::PersistentReserveOut(p) => p.completion,
            crate::Outcome::Action(a) => panic!("unexpected {a:?}"),
        }
    }

    fn pr_out(lu: &LogicalUnit, n: &Nexus, sa: u8, ty: u8, key: u64) {
        let mut cdb = [0u8; 10];
        cdb[0] = 0x5F;
        cdb[1] = sa;
        cdb[2] = ty;
        cdb[8] = 24;
        let mut p = vec![0u8; 24];
        if sa == 0 {
            p[8..16].copy_from_slice(&key.to_be_bytes());
        } else {
            p[0..8].copy_from_slice(&key.to_be_bytes());
        }
        assert_eq!(run(lu, n, &cdb, &p).status, 0, "PR OUT {sa:x}");
    }

    #[test]
    fn unreserved_lu_is_open_to_every_nexus() {
        let lu = lu();
        let a = nexus(1, "iqn.a");
        assert_eq!(lu.copy_access(&a, false), Ok(()));
        assert_eq!(lu.copy_access(&a, true), Ok(()));
    }

    #[test]
    fn spc2_reservation_of_another_nexus_conflicts() {
        let lu = lu();
        let (a, b) = (nexus(1, "iqn.a"), nexus(2, "iqn.b"));
        assert_eq!(run(&lu, &a, &[0x16, 0, 0, 0, 0, 0], &[]).status, 0);
        assert_eq!(lu.copy_access(&a, true), Ok(()));
        assert_eq!(lu.copy_access(&b, false), Err(CopyDenied::Conflict));
        assert_eq!(lu.copy_access(&b, true), Err(CopyDenied::Conflict));
        assert_eq!(
            CopyDenied::Conflict.copy_sense(),
            Sense::new(crate::xcopy::COPY_ABORTED, 0x0D, 0x02)
        );
        assert_eq!(run(&lu, &a, &[0x17, 0, 0, 0, 0, 0], &[]).status, 0);
        assert_eq!(lu.copy_access(&b, true), Ok(()));
    }

    #[test]
    fn write_exclusive_blocks_only_writes_of_others() {
        let lu = lu();
        let (a, b) = (nexus(1, "iqn.a"), nexus(2, "iqn.b"));
        pr_out(&lu, &a, 0x00, 0, 0xA);
        pr_out(&lu, &a, 0x01, 0x01, 0xA); // RESERVE, Write Exclusive
        assert_eq!(lu.copy_access(&a, true), Ok(()));
        assert_eq!(lu.copy_access(&b, false), Ok(()));
        assert_eq!(lu.copy_access(&b, true), Err(CopyDenied::Conflict));
    }

    #[test]
    fn medium_and_write_protection() {
        let lu = lu();
        let a = nexus(1, "iqn.a");
        lu.set_removable(true);
        // START STOP UNIT LOEJ=1 START=0: eject
        assert_eq!(run(&lu, &a, &[0x1B, 0, 0, 0, 0x02, 0], &[]).status, 0);
        assert_eq!(
            lu.copy_access(&a, false),
            Err(CopyDenied::Sense(MEDIUM_NOT_PRESENT))
        );
        let ro = lu_with(|p| p.readonly = true);
        assert_eq!(ro.copy_access(&a, false), Ok(()));
        assert_eq!(
            ro.copy_access(&a, true),
            Err(CopyDenied::Sense(Sense::write_protected()))
        );
    }

    /// A parameter list copying 8 blocks of the LU with NAA id `naa_id` within itself.
    fn self_copy_list(naa_id: u64) -> Vec<u8> {
        let mut c = vec![0u8; 32];
        c[0] = 0xE4;
        c[4] = 0x01;
        c[5] = 0x03;
        c[7] = 16;
        c[8..24].copy_from_slice(&crate::naa6(naa_id));
        c[29..32].copy_from_slice(&512u32.to_be_bytes()[1..]);
        let mut s = vec![0u8; 28];
        s[0] = 0x02;
        s[3] = 0x18;
        s[10..12].copy_from_slice(&8u16.to_be_bytes());
        s[20..28].copy_from_slice(&100u64.to_be_bytes());
        let mut d = vec![0u8; 16];
        d[0] = 7;
        d[2..4].copy_from_slice(&32u16.to_be_bytes());
        d[8..12].copy_from_slice(&28u32.to_be_bytes());
        d.extend(c);
        d.extend(s);
        d
    }

    /// EXTENDED COPY naming its own LU: the own LU's checks end the command before a copy
    /// starts (RESERVATION CONFLICT status, DATA PROTECT sense).
    #[test]
    fn receiving_lu_checked_before_the_copy() {
        let p = self_copy_list(0x1234_5678_9abc_def0);
        let mut cdb = vec![0u8; 16];
        cdb[0] = 0x83;
        cdb[10..14].copy_from_slice(&(p.len() as u32).to_be_bytes());
        // exclusive access by another nexus: the command itself conflicts
        let lu = lu();
        let (a, b) = (nexus(1, "iqn.a"), nexus(2, "iqn.b"));
        pr_out(&lu, &a, 0x00, 0, 0xA);
        pr_out(&lu, &a, 0x01, 0x03, 0xA); // Exclusive Access
        let c = run(&lu, &b, &cdb, &p);
        assert_eq!(c.status, crate::status::RESERVATION_CONFLICT);
        // the holder copies
        let cmd = crate::CmdCtx {
            cdb: &cdb,
            data_out: &p,
            landed: 0,
            luns: &[1],
        };
        assert!(matches!(
            lu.execute_nexus(&a, &cmd),
            crate::Outcome::Action(crate::Action::ExtendedCopy(_))
        ));
        // write protected: DATA PROTECT before anything runs
        let ro = lu_with(|p| p.readonly = true);
        let c = run(&ro, &a, &cdb, &p);
        assert_eq!(
            crate::sense::parse_key_asc(&c.sense),
            Some((key::DATA_PROTECT, 0x27, 0x00))
        );
    }
}
