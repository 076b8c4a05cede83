//! Persistent reservations (SPC-4 5.9, 6.15, 6.16): the PERSISTENT RESERVE IN / OUT
//! handlers over the logical unit's shared state, and the classification of every command
//! for the reservation access rules.
//!
//! Submodules: `state` (registrations, reservation, access rule), `in_cmds` (PR IN
//! parameter data), `out_cmds` (PR OUT service actions), `persist` (APTPL state bytes),
//! `events` (a PR OUT's effects on other nexuses, for the other gateways of a shared LU).
//!
//! A logical unit whose reservations several gateways share
//! ([`crate::LogicalUnit::set_shared_pr`]) asks for the state to be stored after every
//! change, APTPL or not, and reports the effects on other nexuses as bytes for the others.
//!
//! A PR OUT that changes the state while APTPL is (or was) active yields a persistence
//! request: the command's completion is handed to the server together with the bytes, and
//! the server sends it only once the bytes are on stable storage ([`crate::PrOutcome`]).

pub(crate) mod events;
pub(crate) mod in_cmds;
pub(crate) mod out_cmds;
pub(crate) mod persist;
pub(crate) mod state;

pub use persist::PrStateError;
pub use state::PrType;

use crate::nexus::PortPair;
use crate::ops::opcode;
use crate::reserve_spc2::conflict;
use crate::sense::Sense;
use crate::{Action, LogicalUnit, NexusId, PersistRequest, Req};
use out_cmds::OutError;
use state::Access;

/// What a PR OUT asks of the server beyond its completion.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PrEffects {
    pub abort: Vec<NexusId>,
    pub persist: Option<PersistRequest>,
    /// Shared logical units: the effects on other nexuses ([`events`]), for the others.
    pub peer_events: Vec<u8>,
}

/// Reservation access class of a command (SPC-4 table 53, SBC-3 table 13). Unknown
/// operation codes are `Always` so that they fail with INVALID COMMAND OPERATION CODE.
pub(crate) fn access_class(cdb: &[u8]) -> Access {
    use opcode::*;
    match cdb.first().copied().unwrap_or(0) {
        READ_6 | READ_10 | READ_12 | READ_16 | VERIFY_10 | VERIFY_12 | VERIFY_16 | MODE_SENSE_6
        | MODE_SENSE_10 => Access::Read,
        WRITE_6 | WRITE_10 | WRITE_12 | WRITE_16 | WRITE_AND_VERIFY_10 | WRITE_AND_VERIFY_12
        | WRITE_AND_VERIFY_16 | SYNCHRONIZE_CACHE_10 | SYNCHRONIZE_CACHE_16 | MODE_SELECT_6
        | MODE_SELECT_10 | SANITIZE => Access::Write,
        _ => Access::Always,
    }
}

/// PERSISTENT RESERVE IN.
pub(crate) fn pr_in(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let g = lu.shared().lock();
    if g.pr.spc2.is_some() {
        return Ok(conflict());
    }
    let mut d = in_cmds::data(&g.pr, cdb[1] & 0x1F, lu.params().rel_port_id);
    d.truncate(usize::from(u16::from_be_bytes([cdb[7], cdb[8]])));
    Ok(Action::data(d))
}

/// The I_T nexuses of `me`'s initiator port through every target port of the logical
/// unit (ALL_TG_PT): one per relative port of its target port groups when `me` came
/// through a numbered relative port of an iSCSI target port (`<target>,t,0x<TPGT>`; a
/// target several gateways serve, where the TPGT is the port's group), else `me` alone.
fn every_target_port(lu: &LogicalUnit, me: &PortPair) -> Vec<PortPair> {
    let Some((name, _)) = me.target.rsplit_once(",t,0x") else {
        return vec![me.clone()];
    };
    if me.rel_port == 0 {
        return vec![me.clone()];
    }
    let mut out: Vec<PortPair> = lu
        .port_groups()
        .iter()
        .flat_map(|g| {
            g.rel_ports.iter().map(move |&rp| PortPair {
                initiator: me.initiator.clone(),
                target: format!("{name},t,0x{:04x}", g.id),
                rel_port: rp,
            })
        })
        .collect();
    if !out.contains(me) {
        out.push(me.clone());
    }
    out
}

/// PERSISTENT RESERVE OUT.
pub(crate) fn pr_out(lu: &LogicalUnit, cdb: &[u8], req: &Req<'_>) -> Result<Action, Sense> {
    let mut g = lu.shared().lock();
    if g.pr.spc2.is_some() {
        return Ok(conflict());
    }
    let me = req.nexus.key();
    let was_aptpl = g.pr.aptpl;
    let mut next = g.pr.clone();
    let all_ports = every_target_port(lu, &me);
    let fx = match out_cmds::execute(
        &mut next,
        &me,
        &all_ports,
        cdb,
        req.cmd.data_out,
        lu.params().rel_port_id,
    ) {
        Ok(fx) => fx,
        Err(OutError::Conflict) => return Ok(conflict()),
        Err(OutError::Check(s)) => return Err(s),
    };
    g.pr = next;
    for (p, ua) in &fx.ua {
        g.ua_for(p, *ua);
    }
    let mut effects = PrEffects::default();
    for p in &fx.abort {
        effects.abort.extend(g.ids_of(p));
    }
    if g.shared_pr && fx.changed {
        let ev: Vec<events::PeerEvent> = fx
            .ua
            .iter()
            .map(|(p, ua)| events::PeerEvent::Attention(p.clone(), *ua))
            .chain(fx.abort.iter().map(|p| events::PeerEvent::Abort(p.clone())))
            .collect();
        effects.peer_events = events::encode(&ev);
    }
    if fx.changed && (was_aptpl || g.pr.aptpl || g.shared_pr) {
        g.seq = g.seq.wrapping_add(1);
        effects.persist = Some(PersistRequest {
            seq: g.seq,
            bytes: persist::encode(&g.pr, g.seq),
        });
    }
    if effects != PrEffects::default() {
        req.set_effects(effects);
    }
    Ok(Action::good())
}
