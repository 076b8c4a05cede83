//! Asymmetric logical unit access (SPC-4 5.16): the target port groups through which a
//! logical unit is reached, their access states, REPORT TARGET PORT GROUPS (MAINTENANCE IN
//! 0Ah), the commands each access state allows, and the unit attention an access state
//! change establishes.
//!
//! Access is implicit (TPGS = 01b): the device server changes states itself (the server
//! calls [`LogicalUnit::set_port_groups`], e.g. when a gateway takes over a LUN). An LU
//! whose server can move it on request ([`LogicalUnit::set_explicit_alua`]) is also
//! explicit (TPGS = 11b): SET TARGET PORT GROUPS comes to the server as
//! [`Action::SetTargetPortGroups`]; otherwise that command is not offered. Every LU has at least one group: with nothing
//! configured, the group of its own port (`LuParams::tpg`), active/optimized — so a single
//! target looks to a multipath initiator like one always-optimized path.
//!
//! The group state of this LU's own port (`LuParams::tpg`) is kept in an atomic, so the
//! per-command check reads no lock.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::cdb::{be32, truncate};
use crate::sense::{Sense, key};
use crate::ua::UnitAttention;
use crate::{Action, LogicalUnit, Req};

/// An asymmetric access state (SPC-4 table 90, the ASYMMETRIC ACCESS STATE field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessState {
    ActiveOptimized,
    ActiveNonOptimized,
    Standby,
    Unavailable,
    Transitioning,
}

impl AccessState {
    /// The ASYMMETRIC ACCESS STATE code.
    pub const fn code(self) -> u8 {
        match self {
            AccessState::ActiveOptimized => 0x0,
            AccessState::ActiveNonOptimized => 0x1,
            AccessState::Standby => 0x2,
            AccessState::Unavailable => 0x3,
            AccessState::Transitioning => 0xF,
        }
    }

    const fn from_code(c: u8) -> AccessState {
        match c {
            0x0 => AccessState::ActiveOptimized,
            0x1 => AccessState::ActiveNonOptimized,
            0x2 => AccessState::Standby,
            0x3 => AccessState::Unavailable,
            _ => AccessState::Transitioning,
        }
    }

    /// The name used in the configuration, tgtadm `--params` and `show` output.
    pub const fn name(self) -> &'static str {
        match self {
            AccessState::ActiveOptimized => "active-optimized",
            AccessState::ActiveNonOptimized => "active-non-optimized",
            AccessState::Standby => "standby",
            AccessState::Unavailable => "unavailable",
            AccessState::Transitioning => "transitioning",
        }
    }

    /// Parses [`AccessState::name`] (also `ao`, `ano`).
    pub fn parse(s: &str) -> Option<AccessState> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "active-optimized" | "ao" | "active/optimized" => AccessState::ActiveOptimized,
            "active-non-optimized" | "ano" | "active/non-optimized" => {
                AccessState::ActiveNonOptimized
            }
            "standby" => AccessState::Standby,
            "unavailable" => AccessState::Unavailable,
            "transitioning" => AccessState::Transitioning,
            _ => return None,
        })
    }

    /// Whether a command with operation code `op` (service action `sa` for MAINTENANCE
    /// IN / OUT) may run in this state (SPC-4 5.16.2.4.3 to 5.16.2.4.6); `Err` is the
    /// NOT READY sense to answer otherwise.
    fn admits(self, cdb: &[u8]) -> Result<(), Sense> {
        use crate::ops::opcode::*;
        let op = cdb.first().copied().unwrap_or(0);
        let sa = cdb.get(1).map_or(0, |b| b & 0x1F);
        let rtpg = op == MAINTENANCE_IN && sa == SA_REPORT_TARGET_PORT_GROUPS;
        let stpg = op == MAINTENANCE_OUT && sa == SA_SET_TARGET_PORT_GROUPS;
        // Commands every state accepts.
        let always = matches!(op, INQUIRY | REPORT_LUNS | REQUEST_SENSE) || rtpg;
        match self {
            AccessState::ActiveOptimized | AccessState::ActiveNonOptimized => Ok(()),
            AccessState::Standby => {
                let standby_ok = always
                    || stpg
                    || matches!(
                        op,
                        MODE_SELECT_6
                            | MODE_SENSE_6
                            | MODE_SELECT_10
                            | MODE_SENSE_10
                            | RECEIVE_DIAGNOSTIC_RESULTS
                            | SEND_DIAGNOSTIC
                            | PERSISTENT_RESERVE_IN
                            | PERSISTENT_RESERVE_OUT
                            | 0x4C // LOG SELECT
                            | 0x4D // LOG SENSE
                    )
                    || (op == MAINTENANCE_IN && sa == SA_REPORT_SUPPORTED_OPCODES)
                    || (op == MAINTENANCE_IN && sa == SA_REPORT_SUPPORTED_TMFS)
                    // READ CAPACITY beyond SPC-4's list (as LIO does): Linux probes a
                    // standby path's size once, at login; refused, sd records 0 blocks
                    // and every command dm-multipath sends that path after a takeover
                    // fails with "access beyond end of device"
                    || op == READ_CAPACITY_10
                    || (op == SERVICE_ACTION_IN_16 && sa == SA_READ_CAPACITY_16);
                if standby_ok { Ok(()) } else { Err(STANDBY) }
            }
            AccessState::Unavailable => {
                let ok = always
                    || stpg
                    || (op == MAINTENANCE_IN
                        && matches!(sa, SA_REPORT_SUPPORTED_OPCODES | SA_REPORT_SUPPORTED_TMFS));
                if ok { Ok(()) } else { Err(UNAVAILABLE) }
            }
            AccessState::Transitioning => {
                if always {
                    Ok(())
                } else {
                    Err(TRANSITIONING)
                }
            }
        }
    }

    /// The NOT READY condition REQUEST SENSE reports in this state, if any.
    fn condition(self) -> Option<Sense> {
        match self {
            AccessState::ActiveOptimized | AccessState::ActiveNonOptimized => None,
            AccessState::Standby => Some(STANDBY),
            AccessState::Unavailable => Some(UNAVAILABLE),
            AccessState::Transitioning => Some(TRANSITIONING),
        }
    }
}

/// NOT READY, LOGICAL UNIT NOT ACCESSIBLE, ASYMMETRIC ACCESS STATE TRANSITION (04h/0Ah).
pub const TRANSITIONING: Sense = Sense::new(key::NOT_READY, 0x04, 0x0A);
/// NOT READY, LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE (04h/0Bh).
const STANDBY: Sense = Sense::new(key::NOT_READY, 0x04, 0x0B);
/// NOT READY, LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE (04h/0Ch).
pub const UNAVAILABLE: Sense = Sense::new(key::NOT_READY, 0x04, 0x0C);

/// HARDWARE ERROR, SET TARGET PORT GROUPS COMMAND FAILED (67h/0Ah): the server could not
/// carry a SET TARGET PORT GROUPS out.
pub const STPG_FAILED: Sense = Sense::new(key::HARDWARE_ERROR, 0x67, 0x0A);

/// How a group reached its current state (the STATUS CODE field of a target port group
/// descriptor, SPC-4 table 169).
const STATUS_NONE: u8 = 0x00;
const STATUS_IMPLICIT: u8 = 0x02;

/// Seconds an implicit transition may take (IMPLICIT TRANSITION TIME in the extended
/// header): a gateway takes over a LUN by breaking a lock, which takes well under that.
pub const IMPLICIT_TRANSITION_SECS: u8 = 30;

/// One target port group of a logical unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortGroup {
    /// TARGET PORT GROUP identifier (also the target port group designator of VPD 83h on
    /// that group's ports).
    pub id: u16,
    pub state: AccessState,
    /// RELATIVE TARGET PORT IDENTIFIERs of the group's ports.
    pub rel_ports: Vec<u16>,
    /// PREF: the group is preferred for access.
    pub preferred: bool,
}

/// The ALUA state of one LU.
#[derive(Debug)]
pub(crate) struct AluaState {
    groups: Mutex<Groups>,
    /// [`AccessState::code`] of the LU's own port group.
    local: AtomicU8,
    /// SET TARGET PORT GROUPS is offered (TPGS = 11b).
    explicit: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
struct Groups {
    list: Vec<PortGroup>,
    /// STATUS CODE: whether the states were changed by an implicit transition.
    changed: bool,
}

impl AluaState {
    /// One group, the LU's own port's, active/optimized.
    pub(crate) fn single(tpg: u16, rel_port: u16) -> AluaState {
        AluaState {
            groups: Mutex::new(Groups {
                list: vec![PortGroup {
                    id: tpg,
                    state: AccessState::ActiveOptimized,
                    rel_ports: vec![rel_port],
                    preferred: false,
                }],
                changed: false,
            }),
            local: AtomicU8::new(AccessState::ActiveOptimized.code()),
            explicit: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn local(&self) -> AccessState {
        AccessState::from_code(self.local.load(Ordering::Acquire))
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, Groups> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why a port group list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortGroupError {
    #[error("the port group list does not contain this port's group {0}")]
    OwnGroupMissing(u16),
    #[error("target port group {0} is listed twice")]
    DuplicateGroup(u16),
    #[error("relative target port {0} is listed twice")]
    DuplicatePort(u16),
    #[error("relative target port 0 is reserved")]
    PortZero,
    #[error("too many target port groups ({0}, at most 32)")]
    TooMany(usize),
}

/// Most groups one LU reports (each gateway is one group).
const MAX_GROUPS: usize = 32;

impl LogicalUnit {
    /// Replaces the LU's target port groups and their states (an implicit transition when a
    /// state changed). The list must contain the LU's own port group. Establishes
    /// ASYMMETRIC ACCESS STATE CHANGED (2Ah/06h) for every I_T nexus when any group's
    /// state changed; returns whether one did.
    pub fn set_port_groups(&self, list: Vec<PortGroup>) -> Result<bool, PortGroupError> {
        let own = self.params().tpg;
        if list.len() > MAX_GROUPS {
            return Err(PortGroupError::TooMany(list.len()));
        }
        let mut ids = std::collections::HashSet::new();
        let mut ports = std::collections::HashSet::new();
        for g in &list {
            if !ids.insert(g.id) {
                return Err(PortGroupError::DuplicateGroup(g.id));
            }
            for &p in &g.rel_ports {
                if p == 0 {
                    return Err(PortGroupError::PortZero);
                }
                if !ports.insert(p) {
                    return Err(PortGroupError::DuplicatePort(p));
                }
            }
        }
        let Some(mine) = list.iter().find(|g| g.id == own) else {
            return Err(PortGroupError::OwnGroupMissing(own));
        };
        let local = mine.state;
        let mut g = self.alua.groups();
        let state_of = |l: &[PortGroup], id: u16| l.iter().find(|x| x.id == id).map(|x| x.state);
        let changed = list.len() != g.list.len()
            || list
                .iter()
                .any(|n| state_of(&g.list, n.id) != Some(n.state));
        g.list = list;
        if changed {
            g.changed = true;
            self.alua.local.store(local.code(), Ordering::Release);
            drop(g);
            self.shared
                .ua_all(UnitAttention::AsymmetricAccessStateChanged);
        }
        Ok(changed)
    }

    /// The target port groups and their states, as REPORT TARGET PORT GROUPS reports them.
    pub fn port_groups(&self) -> Vec<PortGroup> {
        self.alua.groups().list.clone()
    }

    /// Offers SET TARGET PORT GROUPS (INQUIRY TPGS = 11b): the server can move the LU to
    /// another group on request.
    pub fn set_explicit_alua(&self, on: bool) {
        self.alua.explicit.store(on, Ordering::Release);
    }

    /// Whether SET TARGET PORT GROUPS is offered.
    pub fn explicit_alua(&self) -> bool {
        self.alua.explicit.load(Ordering::Acquire)
    }

    /// The access state of the LU's own port group.
    pub fn access_state(&self) -> AccessState {
        self.alua.local()
    }

    /// `Err(NOT READY …)` when the own port group's state does not allow the command.
    pub(crate) fn check_access_state(&self, cdb: &[u8]) -> Result<(), Sense> {
        self.alua.local().admits(cdb)
    }

    /// The NOT READY condition of the own port group's state (REQUEST SENSE), if any.
    pub(crate) fn access_condition(&self) -> Option<Sense> {
        self.alua.local().condition()
    }
}

/// REPORT TARGET PORT GROUPS (SPC-4 6.27): PARAMETER DATA FORMAT 000b (length only) or 001b
/// (extended header with the implicit transition time); one descriptor per group with the
/// states it supports (AO, ANO, S, U, T), its state and the relative target ports.
pub(crate) fn report_target_port_groups(
    lu: &LogicalUnit,
    cdb: &[u8],
    _: &Req<'_>,
) -> Result<Action, Sense> {
    let format = cdb[1] >> 5;
    if format > 1 {
        return Err(Sense::invalid_field_in_cdb(1, Some(7)));
    }
    let alloc = be32(cdb, 6) as usize;
    let g = lu.alua.groups();
    let mut body = Vec::with_capacity(8 + g.list.len() * 12);
    for grp in &g.list {
        let pref = if grp.preferred { 0x80 } else { 0 };
        body.push(pref | grp.state.code());
        // T_SUP, U_SUP, S_SUP, AN_SUP, AO_SUP
        body.push(0x80 | 0x08 | 0x04 | 0x02 | 0x01);
        body.extend_from_slice(&grp.id.to_be_bytes());
        body.push(0);
        body.push(if g.changed {
            STATUS_IMPLICIT
        } else {
            STATUS_NONE
        });
        body.push(0);
        body.push(u8::try_from(grp.rel_ports.len()).unwrap_or(u8::MAX));
        for &p in grp.rel_ports.iter().take(255) {
            body.extend_from_slice(&[0, 0]);
            body.extend_from_slice(&p.to_be_bytes());
        }
    }
    drop(g);
    let mut d = Vec::with_capacity(8 + body.len());
    let header = if format == 1 { 8 } else { 4 };
    let len = u32::try_from(body.len() + header - 4).unwrap_or(u32::MAX);
    d.extend_from_slice(&len.to_be_bytes());
    if format == 1 {
        d.push(0x10); // FORMAT TYPE 001b
        d.push(IMPLICIT_TRANSITION_SECS);
        d.extend_from_slice(&[0, 0]);
    }
    d.extend_from_slice(&body);
    Ok(Action::data(truncate(d, alloc)))
}

/// SET TARGET PORT GROUPS (SPC-4 6.31): a 4-byte header, then 4-byte descriptors
/// (ASYMMETRIC ACCESS STATE in bits 3-0 of byte 0, TARGET PORT GROUP in bytes 2-3). Each
/// group must exist and each state be one a group can be set to (active/optimized,
/// active/non-optimized, standby, unavailable); otherwise INVALID FIELD IN PARAMETER LIST.
pub(crate) fn set_target_port_groups(
    lu: &LogicalUnit,
    cdb: &[u8],
    req: &Req<'_>,
) -> Result<Action, Sense> {
    if !lu.explicit_alua() {
        return Err(Sense::invalid_opcode());
    }
    let len = be32(cdb, 6) as usize;
    if len == 0 {
        return Ok(Action::good());
    }
    let list = req
        .data_out
        .get(..len)
        .ok_or_else(Sense::param_list_length_error)?;
    if len < 4 || (len - 4) % 4 != 0 {
        return Err(Sense::param_list_length_error());
    }
    let groups = lu.alua.groups();
    let mut asks = Vec::with_capacity((len - 4) / 4);
    for (k, d) in list[4..].chunks_exact(4).enumerate() {
        let at = 4 + 4 * k;
        let state = match d[0] & 0x0F {
            0x0 => AccessState::ActiveOptimized,
            0x1 => AccessState::ActiveNonOptimized,
            0x2 => AccessState::Standby,
            0x3 => AccessState::Unavailable,
            _ => return Err(Sense::invalid_field_in_param_list(at, Some(3))),
        };
        let id = u16::from_be_bytes([d[2], d[3]]);
        if !groups.list.iter().any(|g| g.id == id) {
            return Err(Sense::invalid_field_in_param_list(at + 2, Some(7)));
        }
        asks.push((id, state));
    }
    Ok(Action::SetTargetPortGroups(asks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    const RTPG: [u8; 12] = [0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];

    fn two_groups(lu: &LogicalUnit, mine: AccessState, other: AccessState) -> bool {
        let own = lu.params().tpg;
        lu.set_port_groups(vec![
            PortGroup {
                id: own,
                state: mine,
                rel_ports: vec![1],
                preferred: false,
            },
            PortGroup {
                id: own + 1,
                state: other,
                rel_ports: vec![2],
                preferred: false,
            },
        ])
        .expect("valid groups")
    }

    #[test]
    fn inquiry_reports_implicit_alua() {
        let lu = lu();
        let d = complete(&lu, &[0x12, 0, 0, 0, 96, 0]).data;
        assert_eq!(d[5] & 0x30, 0x10, "TPGS = 01b");
    }

    #[test]
    fn default_is_one_active_optimized_group() {
        let lu = lu();
        let c = complete(&lu, &RTPG);
        assert_eq!(c.status, 0);
        let tpg = lu.params().tpg.to_be_bytes();
        let port = lu.params().rel_port_id.to_be_bytes();
        assert_eq!(
            c.data,
            vec![
                0, 0, 0, 12, 0x00, 0x8F, tpg[0], tpg[1], 0, 0, 0, 1, 0, 0, port[0], port[1]
            ]
        );
    }

    #[test]
    fn extended_header_and_allocation_length() {
        let lu = lu();
        two_groups(
            &lu,
            AccessState::ActiveNonOptimized,
            AccessState::ActiveOptimized,
        );
        let mut cdb = RTPG;
        cdb[1] |= 0x20;
        let d = complete(&lu, &cdb).data;
        assert_eq!(be32(&d, 0) as usize, d.len() - 4);
        assert_eq!((d[4], d[5]), (0x10, IMPLICIT_TRANSITION_SECS));
        assert_eq!(d[8] & 0x0F, 0x1, "own group is active/non-optimized");
        assert_eq!(d[13], STATUS_IMPLICIT);
        assert_eq!(d[20] & 0x0F, 0x0, "other group is active/optimized");
        cdb[9] = 6;
        cdb[8] = 0;
        assert_eq!(complete(&lu, &cdb).data.len(), 6);
        cdb[1] = 0x0A | 0x40;
        assert_eq!(complete(&lu, &cdb).status, 2, "format 010b is reserved");
    }

    #[test]
    fn state_change_raises_unit_attention_once() {
        let lu = lu();
        // the nexus `complete` uses, announced so that it gets unit attentions
        let n = crate::Nexus::iscsi(
            crate::NexusId(1),
            "iqn.2026-11.test:unit",
            1,
            &lu.params().target_name,
            1,
        );
        lu.nexus_added(&n);
        let tur = [0x00, 0, 0, 0, 0, 0];
        assert_eq!(check(&complete(&lu, &tur)), (0x6, 0x29, 0x00));
        assert!(two_groups(
            &lu,
            AccessState::ActiveOptimized,
            AccessState::ActiveNonOptimized
        ));
        assert_eq!(check(&complete(&lu, &tur)), (0x6, 0x2A, 0x06));
        assert_eq!(complete(&lu, &tur).status, 0);
        // the same states again: no new condition
        assert!(!two_groups(
            &lu,
            AccessState::ActiveOptimized,
            AccessState::ActiveNonOptimized
        ));
        assert_eq!(complete(&lu, &tur).status, 0);
    }

    #[test]
    fn standby_allows_only_the_listed_commands() {
        let lu = lu();
        two_groups(&lu, AccessState::Standby, AccessState::ActiveOptimized);
        let tur = complete(&lu, &[0x00, 0, 0, 0, 0, 0]);
        assert_eq!(check(&tur), (0x2, 0x04, 0x0B));
        let read = complete(&lu, &[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
        assert_eq!(check(&read), (0x2, 0x04, 0x0B));
        assert_eq!(complete(&lu, &[0x12, 0, 0, 0, 96, 0]).status, 0);
        assert_eq!(complete(&lu, &RTPG).status, 0);
        assert_eq!(complete(&lu, &[0x1A, 0, 0x3F, 0, 255, 0]).status, 0);
        // READ CAPACITY (10) and (16): the size a Linux initiator probes at login
        assert_eq!(complete(&lu, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]).status, 0);
        let rc16 = complete(
            &lu,
            &[0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0],
        );
        assert_eq!(rc16.status, 0);
        // other SERVICE ACTION IN (16) actions stay refused (GET LBA STATUS)
        let lba = complete(
            &lu,
            &[0x9E, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0],
        );
        assert_eq!(check(&lba), (0x2, 0x04, 0x0B));
        // REQUEST SENSE reports the standby condition as data
        let rs = complete(&lu, &[0x03, 0, 0, 0, 18, 0]);
        assert_eq!(
            (rs.data[2] & 0x0F, rs.data[12], rs.data[13]),
            (0x2, 0x04, 0x0B)
        );
    }

    #[test]
    fn unavailable_and_transitioning() {
        let lu = lu();
        two_groups(&lu, AccessState::Unavailable, AccessState::ActiveOptimized);
        let ms = complete(&lu, &[0x1A, 0, 0x3F, 0, 255, 0]);
        assert_eq!(check(&ms), (0x2, 0x04, 0x0C));
        two_groups(
            &lu,
            AccessState::Transitioning,
            AccessState::ActiveOptimized,
        );
        let tur = complete(&lu, &[0x00, 0, 0, 0, 0, 0]);
        assert_eq!(check(&tur), (0x2, 0x04, 0x0A));
        assert_eq!(complete(&lu, &RTPG).status, 0);
        two_groups(
            &lu,
            AccessState::ActiveNonOptimized,
            AccessState::ActiveOptimized,
        );
        assert_eq!(complete(&lu, &[0x00, 0, 0, 0, 0, 0]).status, 0);
    }

    #[test]
    fn bad_group_lists_are_refused() {
        let lu = lu();
        let g = |id, port| PortGroup {
            id,
            state: AccessState::ActiveOptimized,
            rel_ports: vec![port],
            preferred: false,
        };
        let own = lu.params().tpg;
        assert_eq!(
            lu.set_port_groups(vec![g(own + 5, 1)]),
            Err(PortGroupError::OwnGroupMissing(own))
        );
        assert_eq!(
            lu.set_port_groups(vec![g(own, 1), g(own, 2)]),
            Err(PortGroupError::DuplicateGroup(own))
        );
        assert_eq!(
            lu.set_port_groups(vec![g(own, 1), g(own + 1, 1)]),
            Err(PortGroupError::DuplicatePort(1))
        );
        assert_eq!(
            lu.set_port_groups(vec![g(own, 0)]),
            Err(PortGroupError::PortZero)
        );
        assert_eq!(lu.access_state(), AccessState::ActiveOptimized);
    }

    fn stpg(descs: &[(u8, u16)]) -> (Vec<u8>, Vec<u8>) {
        let mut list = vec![0u8; 4];
        for &(state, group) in descs {
            list.extend_from_slice(&[state, 0]);
            list.extend_from_slice(&group.to_be_bytes());
        }
        let l = (list.len() as u32).to_be_bytes();
        let cdb = vec![0xA4, 0x0A, 0, 0, 0, 0, l[0], l[1], l[2], l[3], 0, 0];
        (cdb, list)
    }

    #[test]
    fn set_target_port_groups_only_when_explicit() {
        let lu = lu();
        let own = lu.params().tpg;
        let (cdb, list) = stpg(&[(0, own)]);
        assert_eq!(check(&complete_out(&lu, &cdb, &list)), (5, 0x20, 0));
        lu.set_explicit_alua(true);
        let d = complete(&lu, &[0x12, 0, 0, 0, 96, 0]).data;
        assert_eq!(d[5] & 0x30, 0x30, "TPGS = 11b");
        two_groups(&lu, AccessState::Standby, AccessState::ActiveOptimized);
        match exec(&lu, &cdb, &list) {
            Action::SetTargetPortGroups(v) => {
                assert_eq!(v, vec![(own, AccessState::ActiveOptimized)]);
            }
            other => panic!("expected SetTargetPortGroups, got {other:?}"),
        }
        // an unknown group, a state nobody can set, a ragged list
        let (cdb, list) = stpg(&[(0, 999)]);
        assert_eq!(check(&complete_out(&lu, &cdb, &list)), (5, 0x26, 0));
        let (cdb, list) = stpg(&[(0xF, own)]);
        assert_eq!(check(&complete_out(&lu, &cdb, &list)), (5, 0x26, 0));
        let (mut cdb, mut list) = stpg(&[(0, own)]);
        list.push(0);
        cdb[9] += 1;
        assert_eq!(check(&complete_out(&lu, &cdb, &list)).0, 5);
    }

    #[test]
    fn state_names_round_trip() {
        for s in [
            AccessState::ActiveOptimized,
            AccessState::ActiveNonOptimized,
            AccessState::Standby,
            AccessState::Unavailable,
            AccessState::Transitioning,
        ] {
            assert_eq!(AccessState::parse(s.name()), Some(s));
            assert_eq!(AccessState::from_code(s.code()), s);
        }
        assert_eq!(AccessState::parse("bogus"), None);
    }
}
