//! SPC-2 RESERVE(6) / RESERVE(10) / RELEASE(6) / RELEASE(10) (SPC-2 7.21-7.24): a logical
//! unit reservation for one I_T nexus. Third-party and extent reservations (obsolete) are
//! not supported: their CDB bits are INVALID FIELD IN CDB through the usage maps.
//!
//! While another I_T nexus holds the reservation only INQUIRY, REPORT LUNS, REQUEST SENSE,
//! READ CAPACITY, MAINTENANCE IN (REPORT SUPPORTED OPERATION CODES / TASK MANAGEMENT
//! FUNCTIONS) and RELEASE (which then does nothing, GOOD) are allowed; everything else is
//! RESERVATION CONFLICT. Interaction with persistent reservations (SPC-4 5.9.3 with CRH = 0, as SPC-3 5.6.3):
//! while any registration exists RESERVE and RELEASE conflict; while an SPC-2 reservation
//! exists PERSISTENT RESERVE IN and OUT conflict. The reservation ends with RELEASE from
//! its holder, the holder's I_T nexus loss, a logical unit reset or a hard reset.

use crate::ops::opcode;
use crate::sense::Sense;
use crate::{Action, Completion, LogicalUnit, Req, status};

/// RESERVE(6), RELEASE(6), RESERVE(10), RELEASE(10).
pub(crate) fn is_reserve_release(op: u8) -> bool {
    matches!(
        op,
        opcode::RESERVE_6 | opcode::RELEASE_6 | opcode::RESERVE_10 | opcode::RELEASE_10
    )
}

/// Commands another I_T nexus may send while the SPC-2 reservation is held.
pub(crate) fn allowed(cdb: &[u8]) -> bool {
    let sa = cdb.get(1).map(|b| b & 0x1F);
    match cdb.first().copied().unwrap_or(0) {
        opcode::INQUIRY
        | opcode::REPORT_LUNS
        | opcode::REQUEST_SENSE
        | opcode::READ_CAPACITY_10
        | opcode::MAINTENANCE_IN
        | opcode::RELEASE_6
        | opcode::RELEASE_10 => true,
        opcode::SERVICE_ACTION_IN_16 => sa == Some(opcode::SA_READ_CAPACITY_16),
        _ => false,
    }
}

pub(crate) fn conflict() -> Action {
    Action::Complete(Completion {
        status: status::RESERVATION_CONFLICT,
        sense: Vec::new(),
        data: Vec::new(),
    })
}

pub(crate) fn reserve(lu: &LogicalUnit, _: &[u8], req: &Req<'_>) -> Result<Action, Sense> {
    let mut g = lu.shared().lock();
    if !g.pr.regs.is_empty() {
        return Ok(conflict());
    }
    match g.spc2 {
        Some(h) if h != req.nexus.id => Ok(conflict()),
        _ => {
            g.spc2 = Some(req.nexus.id);
            Ok(Action::good())
        }
    }
}

pub(crate) fn release(lu: &LogicalUnit, _: &[u8], req: &Req<'_>) -> Result<Action, Sense> {
    let mut g = lu.shared().lock();
    if !g.pr.regs.is_empty() {
        return Ok(conflict());
    }
    if g.spc2 == Some(req.nexus.id) {
        g.spc2 = None;
    }
    Ok(Action::good())
}
