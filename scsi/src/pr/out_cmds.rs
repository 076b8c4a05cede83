//! PERSISTENT RESERVE OUT (SPC-4 6.16 and 5.9.6-5.9.11): REGISTER, REGISTER AND IGNORE
//! EXISTING KEY, RESERVE, RELEASE, CLEAR, PREEMPT, PREEMPT AND ABORT and REGISTER AND MOVE
//! applied to a [`PrState`]. The result names, by I_T nexus identity, the unit attention
//! conditions to establish and (PREEMPT AND ABORT) whose tasks to abort; the logical unit
//! maps those to the nexuses the server has.
//!
//! ALL_TG_PT is supported (REPORT CAPABILITIES reports ATP_C = 1): a REGISTER of an
//! unregistered I_T nexus with it registers the key for the initiator port through every
//! target port the caller names (each gateway of a target several gateways serve is one
//! target port), each as an I_T nexus of its own. SPEC_I_PT is not (SIP_C = 0): a parameter
//! list that sets it is INVALID FIELD IN PARAMETER LIST. APTPL is supported.

use super::state::{MAX_REGISTRATIONS, PrState, PrType, Registration, Reservation};
use crate::nexus::{PortPair, TransportIdError, parse_transport_id};
use crate::sense::{Sense, key};
use crate::ua::UnitAttention;

/// Service actions.
pub const REGISTER: u8 = 0x00;
pub const RESERVE: u8 = 0x01;
pub const RELEASE: u8 = 0x02;
pub const CLEAR: u8 = 0x03;
pub const PREEMPT: u8 = 0x04;
pub const PREEMPT_AND_ABORT: u8 = 0x05;
pub const REGISTER_AND_IGNORE: u8 = 0x06;
pub const REGISTER_AND_MOVE: u8 = 0x07;

/// Length of the basic PERSISTENT RESERVE OUT parameter list.
const BASIC_LEN: usize = 24;

/// Side effects of a PERSISTENT RESERVE OUT that succeeded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OutEffects {
    /// Unit attention conditions to establish, per I_T nexus identity.
    pub ua: Vec<(PortPair, UnitAttention)>,
    /// I_T nexuses whose tasks are aborted (PREEMPT AND ABORT).
    pub abort: Vec<PortPair>,
    /// The state changed.
    pub changed: bool,
}

/// Why a PERSISTENT RESERVE OUT failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutError {
    /// RESERVATION CONFLICT status.
    Conflict,
    /// CHECK CONDITION with this sense.
    Check(Sense),
}

impl From<Sense> for OutError {
    fn from(s: Sense) -> Self {
        OutError::Check(s)
    }
}

/// ILLEGAL REQUEST / INVALID RELEASE OF PERSISTENT RESERVATION (26h/04h).
pub(crate) const fn invalid_release() -> Sense {
    Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x04)
}

/// ILLEGAL REQUEST / INSUFFICIENT REGISTRATION RESOURCES (55h/04h).
pub(crate) const fn insufficient_registration_resources() -> Sense {
    Sense::new(key::ILLEGAL_REQUEST, 0x55, 0x04)
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0; 8];
    if let Some(s) = b.get(..8) {
        a.copy_from_slice(s);
    }
    u64::from_be_bytes(a)
}

/// Applies the PERSISTENT RESERVE OUT `cdb` (10 bytes, usage-checked) with parameter list
/// `data` from the I_T nexus `me` to `s`; `all_ports` are the I_T nexuses of `me`'s
/// initiator port through every target port (ALL_TG_PT; `me` among them). On error `s` is
/// unchanged.
pub(crate) fn execute(
    s: &mut PrState,
    me: &PortPair,
    all_ports: &[PortPair],
    cdb: &[u8],
    data: &[u8],
    rel_port_id: u16,
) -> Result<OutEffects, OutError> {
    let sa = cdb[1] & 0x1F;
    let plen =
        usize::try_from(u32::from_be_bytes([cdb[5], cdb[6], cdb[7], cdb[8]])).unwrap_or(usize::MAX);
    if plen < BASIC_LEN || data.len() < BASIC_LEN {
        return Err(Sense::param_list_length_error().into());
    }
    let p = &data[..plen.min(data.len())];
    if sa == REGISTER_AND_MOVE {
        return register_and_move(s, me, cdb, p, rel_port_id);
    }
    let flags = p[20];
    if flags & 0x08 != 0 {
        return Err(Sense::invalid_field_in_param_list(20, Some(3)).into());
    }
    if plen != BASIC_LEN {
        return Err(Sense::param_list_length_error().into());
    }
    let rk = be64(&p[0..8]);
    let sark = be64(&p[8..16]);
    let aptpl = flags & 0x01 != 0;
    let cur = s.key_of(me);
    if sa == REGISTER || sa == REGISTER_AND_IGNORE {
        if sa == REGISTER && cur.unwrap_or(0) != rk {
            return Err(OutError::Conflict);
        }
        if flags & 0x04 != 0 && cur.is_none() && sark != 0 {
            return register_all_ports(s, me, all_ports, sark, aptpl);
        }
        return register(s, me, cur, sark, aptpl);
    }
    if cur != Some(rk) {
        return Err(OutError::Conflict);
    }
    match sa {
        RESERVE => reserve(s, me, cdb),
        RELEASE => release(s, me, cdb),
        CLEAR => {
            let ua = others(s, me, UnitAttention::ReservationsPreempted);
            s.regs.clear();
            s.res = None;
            s.generation = s.generation.wrapping_add(1);
            Ok(OutEffects {
                ua,
                abort: Vec::new(),
                changed: true,
            })
        }
        PREEMPT | PREEMPT_AND_ABORT => preempt(s, me, cdb, sark, sa == PREEMPT_AND_ABORT),
        _ => Err(Sense::invalid_field_in_cdb(1, Some(4)).into()),
    }
}

/// UA `ua` for every registrant other than `me`.
fn others(s: &PrState, me: &PortPair, ua: UnitAttention) -> Vec<(PortPair, UnitAttention)> {
    s.regs
        .iter()
        .filter(|r| r.nexus != *me)
        .map(|r| (r.nexus.clone(), ua))
        .collect()
}

/// The type in CDB byte 2 (scope must be LU_SCOPE).
fn scope_type(cdb: &[u8]) -> Result<PrType, Sense> {
    if cdb[2] >> 4 != 0 {
        return Err(Sense::invalid_field_in_cdb(2, Some(7)));
    }
    PrType::from_code(cdb[2] & 0x0F).ok_or_else(|| Sense::invalid_field_in_cdb(2, Some(3)))
}

fn register(
    s: &mut PrState,
    me: &PortPair,
    cur: Option<u64>,
    sark: u64,
    aptpl: bool,
) -> Result<OutEffects, OutError> {
    let mut fx = OutEffects {
        changed: true,
        ..OutEffects::default()
    };
    match (cur, sark) {
        (None, 0) => return Ok(OutEffects::default()),
        (None, _) => {
            if s.regs.len() >= MAX_REGISTRATIONS {
                return Err(insufficient_registration_resources().into());
            }
            s.regs.push(Registration {
                nexus: me.clone(),
                key: sark,
            });
        }
        (Some(_), 0) => {
            if let Some(ty) = s.unregister(me) {
                if ty.registrants_only() {
                    fx.ua = others(s, me, UnitAttention::ReservationsReleased);
                }
            }
        }
        (Some(_), _) => {
            for r in s.regs.iter_mut().filter(|r| r.nexus == *me) {
                r.key = sark;
            }
        }
    }
    s.aptpl = aptpl;
    s.generation = s.generation.wrapping_add(1);
    Ok(fx)
}

/// REGISTER with ALL_TG_PT of an unregistered nexus: key `sark` for `me` and for the
/// initiator port's other nexuses in `all_ports` that are not registered yet.
fn register_all_ports(
    s: &mut PrState,
    me: &PortPair,
    all_ports: &[PortPair],
    sark: u64,
    aptpl: bool,
) -> Result<OutEffects, OutError> {
    let mut new: Vec<&PortPair> = all_ports
        .iter()
        .filter(|p| p.initiator == me.initiator && s.key_of(*p).is_none())
        .collect();
    if !new.contains(&me) {
        new.push(me);
    }
    new.dedup();
    if s.regs.len() + new.len() > MAX_REGISTRATIONS {
        return Err(insufficient_registration_resources().into());
    }
    for p in new {
        s.regs.push(Registration {
            nexus: p.clone(),
            key: sark,
        });
    }
    s.aptpl = aptpl;
    s.generation = s.generation.wrapping_add(1);
    Ok(OutEffects {
        changed: true,
        ..OutEffects::default()
    })
}

fn reserve(s: &mut PrState, me: &PortPair, cdb: &[u8]) -> Result<OutEffects, OutError> {
    let ty = scope_type(cdb)?;
    match &s.res {
        None => {
            s.res = Some(Reservation {
                ty,
                holder: me.clone(),
            });
            Ok(OutEffects {
                changed: true,
                ..OutEffects::default()
            })
        }
        Some(r) if r.ty == ty && s.is_holder(me) => Ok(OutEffects::default()),
        Some(_) => Err(OutError::Conflict),
    }
}

fn release(s: &mut PrState, me: &PortPair, cdb: &[u8]) -> Result<OutEffects, OutError> {
    let Some(r) = &s.res else {
        return Ok(OutEffects::default());
    };
    if !s.is_holder(me) {
        return Ok(OutEffects::default());
    }
    if cdb[2] >> 4 != 0 || cdb[2] & 0x0F != r.ty.code() {
        return Err(invalid_release().into());
    }
    let ty = r.ty;
    s.res = None;
    let ua = if ty.registrants_only() || ty.all_registrants() {
        others(s, me, UnitAttention::ReservationsReleased)
    } else {
        Vec::new()
    };
    Ok(OutEffects {
        ua,
        abort: Vec::new(),
        changed: true,
    })
}

/// Removes every registration with key `sark` except `me`'s; returns the removed nexuses.
fn remove_key(s: &mut PrState, me: &PortPair, sark: u64) -> Vec<PortPair> {
    let removed: Vec<PortPair> = s
        .regs
        .iter()
        .filter(|r| r.key == sark && r.nexus != *me)
        .map(|r| r.nexus.clone())
        .collect();
    s.regs.retain(|r| r.key != sark || r.nexus == *me);
    removed
}

fn preempt(
    s: &mut PrState,
    me: &PortPair,
    cdb: &[u8],
    sark: u64,
    abort: bool,
) -> Result<OutEffects, OutError> {
    let mut fx = OutEffects {
        changed: true,
        ..OutEffects::default()
    };
    let removed = match s.res.clone() {
        Some(r) if r.ty.all_registrants() && sark == 0 => {
            // preempt every other registrant and take the reservation
            let ty = scope_type(cdb)?;
            let removed: Vec<PortPair> = s
                .regs
                .iter()
                .filter(|x| x.nexus != *me)
                .map(|x| x.nexus.clone())
                .collect();
            s.regs.retain(|x| x.nexus == *me);
            s.res = Some(Reservation {
                ty,
                holder: me.clone(),
            });
            removed
        }
        Some(r) if !r.ty.all_registrants() && s.key_of(&r.holder) == Some(sark) => {
            // preempt the holder: new reservation for `me`
            let ty = scope_type(cdb)?;
            let removed = remove_key(s, me, sark);
            s.res = Some(Reservation {
                ty,
                holder: me.clone(),
            });
            if ty != r.ty {
                fx.ua = s
                    .regs
                    .iter()
                    .filter(|x| x.nexus != *me)
                    .map(|x| (x.nexus.clone(), UnitAttention::ReservationsReleased))
                    .collect();
            }
            removed
        }
        _ => {
            // remove registrations only; the reservation (if any) stays
            if sark == 0 {
                return Err(Sense::invalid_field_in_param_list(8, None).into());
            }
            if !s.regs.iter().any(|x| x.key == sark && x.nexus != *me) {
                return Err(OutError::Conflict);
            }
            remove_key(s, me, sark)
        }
    };
    fx.ua.extend(
        removed
            .iter()
            .map(|n| (n.clone(), UnitAttention::RegistrationsPreempted)),
    );
    if abort {
        fx.abort = removed;
    }
    s.generation = s.generation.wrapping_add(1);
    Ok(fx)
}

fn register_and_move(
    s: &mut PrState,
    me: &PortPair,
    cdb: &[u8],
    p: &[u8],
    rel_port_id: u16,
) -> Result<OutEffects, OutError> {
    let tid_len =
        usize::try_from(u32::from_be_bytes([p[20], p[21], p[22], p[23]])).unwrap_or(usize::MAX);
    if tid_len > p.len() - BASIC_LEN {
        return Err(Sense::param_list_length_error().into());
    }
    let rk = be64(&p[0..8]);
    let sark = be64(&p[8..16]);
    let unreg = p[17] & 0x02 != 0;
    let aptpl = p[17] & 0x01 != 0;
    if s.key_of(me) != Some(rk) {
        return Err(OutError::Conflict);
    }
    match &s.res {
        Some(r) if !r.ty.all_registrants() && r.holder == *me => {}
        _ => return Err(OutError::Conflict),
    }
    let ty = scope_type(cdb)?;
    if sark == 0 {
        return Err(Sense::invalid_field_in_param_list(8, None).into());
    }
    if u16::from_be_bytes([p[18], p[19]]) != me.rel_port_or(rel_port_id) {
        return Err(Sense::invalid_field_in_param_list(18, None).into());
    }
    let (name, _) =
        parse_transport_id(&p[BASIC_LEN..BASIC_LEN + tid_len]).map_err(|e| match e {
            TransportIdError::Truncated => Sense::param_list_length_error(),
            TransportIdError::Invalid(at) => {
                Sense::invalid_field_in_param_list(BASIC_LEN + at, None)
            }
        })?;
    let dest = PortPair {
        initiator: name,
        target: me.target.clone(),
        rel_port: me.rel_port,
    };
    if dest == *me {
        return Err(Sense::invalid_field_in_param_list(BASIC_LEN, None).into());
    }
    match s.regs.iter_mut().find(|r| r.nexus == dest) {
        Some(r) => r.key = sark,
        None => {
            if s.regs.len() >= MAX_REGISTRATIONS {
                return Err(insufficient_registration_resources().into());
            }
            s.regs.push(Registration {
                nexus: dest.clone(),
                key: sark,
            });
        }
    }
    s.res = Some(Reservation { ty, holder: dest });
    if unreg {
        s.regs.retain(|r| r.nexus != *me);
    }
    s.aptpl = aptpl;
    s.generation = s.generation.wrapping_add(1);
    Ok(OutEffects {
        changed: true,
        ..OutEffects::default()
    })
}
