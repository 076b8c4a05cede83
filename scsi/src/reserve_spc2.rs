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
//!
//! The holder is kept by I_T nexus identity (initiator port, target port and relative port)
//! beside the persistent reservation state, so that the gateways sharing a logical unit's
//! reservations share this one too: there RESERVE and RELEASE change the shared state as a
//! PERSISTENT RESERVE OUT does ([`crate::LogicalUnit::set_shared_pr`]), and the server
//! writes the releases that nexus loss and resets make
//! ([`crate::LogicalUnit::release_spc2_in`]).

use crate::nexus::Ident;
use crate::ops::opcode;
use crate::pr::PrEffects;
use crate::sense::Sense;
use crate::shared::Shared;
use crate::{Action, Completion, LogicalUnit, PersistRequest, Req, status};

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
    match &g.pr.spc2 {
        Some(h) if req.nexus.is(h) => Ok(Action::good()),
        Some(_) => Ok(conflict()),
        None => {
            g.pr.spc2 = Some(req.nexus.key());
            shared_change(&mut g, req);
            Ok(Action::good())
        }
    }
}

pub(crate) fn release(lu: &LogicalUnit, _: &[u8], req: &Req<'_>) -> Result<Action, Sense> {
    let mut g = lu.shared().lock();
    if !g.pr.regs.is_empty() {
        return Ok(conflict());
    }
    if g.pr.spc2.as_ref().is_some_and(|h| req.nexus.is(h)) {
        g.pr.spc2 = None;
        shared_change(&mut g, req);
    }
    Ok(Action::good())
}

/// A logical unit whose reservations several gateways share: the changed state is stored
/// where every gateway reads it before the status goes out, as after a PERSISTENT RESERVE
/// OUT (the server runs RESERVE and RELEASE of such a logical unit the same way).
fn shared_change(g: &mut Shared, req: &Req<'_>) {
    if !g.shared_pr {
        return;
    }
    g.seq = g.seq.wrapping_add(1);
    req.set_effects(PrEffects {
        persist: Some(PersistRequest {
            seq: g.seq,
            bytes: crate::pr::persist::encode(&g.pr, g.seq),
        }),
        ..PrEffects::default()
    });
}
