//! PERSISTENT RESERVE IN (SPC-4 6.15): READ KEYS, READ RESERVATION, REPORT CAPABILITIES and
//! READ FULL STATUS parameter data, cut to the allocation length (the ADDITIONAL LENGTH
//! fields still describe the whole data, as SPC-4 requires).

use super::state::PrState;
use crate::nexus::transport_id;

/// Service actions.
pub const READ_KEYS: u8 = 0x00;
pub const READ_RESERVATION: u8 = 0x01;
pub const REPORT_CAPABILITIES: u8 = 0x02;
pub const READ_FULL_STATUS: u8 = 0x03;

/// Parameter data of service action `sa` (one of the four above; anything else yields an
/// empty vector, the opcode table rejects it earlier), before truncation.
pub(crate) fn data(s: &PrState, sa: u8, rel_port_id: u16) -> Vec<u8> {
    match sa {
        READ_KEYS => read_keys(s),
        READ_RESERVATION => read_reservation(s),
        REPORT_CAPABILITIES => report_capabilities(s),
        READ_FULL_STATUS => read_full_status(s, rel_port_id),
        _ => Vec::new(),
    }
}

fn header(s: &PrState, additional: usize) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + additional);
    d.extend_from_slice(&s.generation.to_be_bytes());
    d.extend_from_slice(&u32::try_from(additional).unwrap_or(u32::MAX).to_be_bytes());
    d
}

fn read_keys(s: &PrState) -> Vec<u8> {
    let mut d = header(s, s.regs.len() * 8);
    for r in &s.regs {
        d.extend_from_slice(&r.key.to_be_bytes());
    }
    d
}

/// The key READ RESERVATION / READ FULL STATUS report for the reservation: the holder's,
/// or zero for all-registrants types (SPC-4 6.15.3.3).
fn reservation_key(s: &PrState) -> u64 {
    match &s.res {
        Some(r) if !r.ty.all_registrants() => s.key_of(&r.holder).unwrap_or(0),
        _ => 0,
    }
}

fn read_reservation(s: &PrState) -> Vec<u8> {
    let Some(r) = &s.res else {
        return header(s, 0);
    };
    let mut d = header(s, 16);
    d.extend_from_slice(&reservation_key(s).to_be_bytes());
    d.extend_from_slice(&[0; 4]); // obsolete scope-specific address
    d.push(0);
    d.push(r.ty.code()); // SCOPE 0h (logical unit) | TYPE
    d.extend_from_slice(&[0; 2]);
    d
}

/// REPORT CAPABILITIES (SPC-4 6.15.4): CRH 0 (while registrations exist every RESERVE and
/// RELEASE conflicts, the SPC-3 rule, rather than the holder's completing with GOOD), no
/// SPEC_I_PT, ALL_TG_PT (ATP_C), PTPL_C; TMV with ALLOW COMMANDS 001b (TEST UNIT READY
/// passes Write Exclusive and Exclusive Access reservations); PTPL_A; all six types.
/// ATP_C: REGISTER with ALL_TG_PT registers every target port's nexus.
fn report_capabilities(s: &PrState) -> Vec<u8> {
    let ptpl_a = u8::from(s.aptpl);
    vec![
        0x00,
        0x08,
        0x04 | 0x01,          // ATP_C, PTPL_C
        0x80 | 0x10 | ptpl_a, // TMV, ALLOW COMMANDS 001b, PTPL_A
        0xEA,                 // WR_EX_AR, EX_AC_RO, WR_EX_RO, EX_AC, WR_EX
        0x01,                 // EX_AC_AR
        0x00,
        0x00,
    ]
}

fn read_full_status(s: &PrState, rel_port_id: u16) -> Vec<u8> {
    let mut body = Vec::new();
    for r in &s.regs {
        let holder = s.is_holder(&r.nexus);
        let tid = transport_id(&r.nexus.initiator);
        body.extend_from_slice(&r.key.to_be_bytes());
        body.extend_from_slice(&[0; 4]);
        body.push(u8::from(holder)); // ALL_TG_PT 0, R_HOLDER
        body.push(match (&s.res, holder) {
            (Some(res), true) => res.ty.code(),
            _ => 0,
        });
        body.extend_from_slice(&[0; 4]);
        body.extend_from_slice(&r.nexus.rel_port_or(rel_port_id).to_be_bytes());
        body.extend_from_slice(&u32::try_from(tid.len()).unwrap_or(0).to_be_bytes());
        body.extend_from_slice(&tid);
    }
    let mut d = header(s, body.len());
    d.extend_from_slice(&body);
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nexus::PortPair;
    use crate::pr::state::{PrType, Registration, Reservation};

    fn state() -> PrState {
        let a = PortPair {
            initiator: "iqn.a,i,0x000000000001".into(),
            target: "iqn.t,t,0x0001".into(),
            rel_port: 0,
        };
        PrState {
            generation: 3,
            aptpl: false,
            regs: vec![
                Registration {
                    nexus: a.clone(),
                    key: 0x1122,
                },
                Registration {
                    nexus: PortPair {
                        initiator: "iqn.b,i,0x000000000002".into(),
                        target: "iqn.t,t,0x0001".into(),
                        rel_port: 0,
                    },
                    key: 0x3344,
                },
            ],
            res: Some(Reservation {
                ty: PrType::WriteExclusive,
                holder: a,
            }),
            spc2: None,
        }
    }

    #[test]
    fn keys_and_reservation() {
        let s = state();
        let k = data(&s, READ_KEYS, 1);
        assert_eq!(&k[..8], &[0, 0, 0, 3, 0, 0, 0, 16]);
        assert_eq!(&k[8..16], &0x1122u64.to_be_bytes());
        let r = data(&s, READ_RESERVATION, 1);
        assert_eq!(r.len(), 24);
        assert_eq!(&r[8..16], &0x1122u64.to_be_bytes());
        assert_eq!(r[21], 1);
        let mut ar = state();
        if let Some(x) = ar.res.as_mut() {
            x.ty = PrType::ExclusiveAccessAllRegistrants;
        }
        let r = data(&ar, READ_RESERVATION, 1);
        assert_eq!(&r[8..16], &[0; 8]);
        assert_eq!(r[21], 8);
    }

    #[test]
    fn capabilities() {
        let c = data(&PrState::default(), REPORT_CAPABILITIES, 1);
        assert_eq!(c.len(), 8);
        assert_eq!(u16::from_be_bytes([c[0], c[1]]), 8);
        assert_eq!((c[3] >> 4) & 7, 1);
        assert_eq!(c[2] & 0x0C, 0x04); // no SIP_C; ATP_C
    }

    #[test]
    fn full_status() {
        let s = state();
        let f = data(&s, READ_FULL_STATUS, 9);
        let add = u32::from_be_bytes([f[4], f[5], f[6], f[7]]) as usize;
        assert_eq!(add + 8, f.len());
        // first descriptor: holder
        assert_eq!(&f[8..16], &0x1122u64.to_be_bytes());
        assert_eq!(f[8 + 12], 1);
        assert_eq!(f[8 + 13], 1);
        assert_eq!(u16::from_be_bytes([f[8 + 18], f[8 + 19]]), 9);
        let tlen = u32::from_be_bytes([f[28], f[29], f[30], f[31]]) as usize;
        assert_eq!(f[32], 0x45);
        // second descriptor follows
        let second = 32 + tlen;
        assert_eq!(&f[second..second + 8], &0x3344u64.to_be_bytes());
        assert_eq!(f[second + 12], 0);
    }
}
