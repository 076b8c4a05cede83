//! What a PERSISTENT RESERVE OUT did to I_T nexuses other than its own, as bytes: the unit
//! attentions it established and the nexuses whose tasks it aborted, by nexus identity.
//! When several gateways share one logical unit's reservations, the gateway that ran the
//! command sends these to the others, which apply them to the nexuses they carry
//! ([`crate::LogicalUnit::apply_peer_pr_events`]). Decoding never panics; anything it does
//! not understand is refused whole.
//!
//! The same channel carries the resets task management made through one gateway (LOGICAL
//! UNIT RESET, a target reset): every gateway resets its copy of the logical unit (unit
//! attentions for its nexuses, SPC-2 reservation released) and ends its tasks of it.
//!
//! Layout (big-endian): `"NTPE"`, u16 version (1), u32 count, then per event a u8 kind
//! (0 abort tasks, 1 RESERVATIONS PREEMPTED, 2 RESERVATIONS RELEASED, 3 REGISTRATIONS
//! PREEMPTED: each followed by the nexus, as in the state format; 4 logical unit reset,
//! 5 target reset: nothing follows).

use super::persist::{PrStateError, Reader, put_pair};
use crate::nexus::PortPair;
use crate::ua::UnitAttention;

const MAGIC: &[u8; 4] = b"NTPE";
const VERSION: u16 = 1;
/// Most events one command yields: a UA and an abort for each registration.
const MAX_EVENTS: usize = 2 * super::state::MAX_REGISTRATIONS;

/// One effect on another I_T nexus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PeerEvent {
    Abort(PortPair),
    Attention(PortPair, UnitAttention),
    /// LOGICAL UNIT RESET (`false`) or a target reset (`true`) through another gateway.
    Reset {
        target: bool,
    },
}

fn ua_code(ua: UnitAttention) -> Option<u8> {
    match ua {
        UnitAttention::ReservationsPreempted => Some(1),
        UnitAttention::ReservationsReleased => Some(2),
        UnitAttention::RegistrationsPreempted => Some(3),
        _ => None,
    }
}

/// The events as bytes (unit attentions other than the three a PR OUT makes are left out).
pub(crate) fn encode(events: &[PeerEvent]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut n = 0u32;
    for e in events {
        let (kind, p) = match e {
            PeerEvent::Abort(p) => (0, p),
            PeerEvent::Attention(p, ua) => match ua_code(*ua) {
                Some(k) => (k, p),
                None => continue,
            },
            PeerEvent::Reset { target } => {
                body.push(if *target { 5 } else { 4 });
                n += 1;
                continue;
            }
        };
        body.push(kind);
        put_pair(&mut body, p);
        n += 1;
    }
    let mut out = Vec::with_capacity(10 + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&n.to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The events `b` holds.
pub(crate) fn decode(b: &[u8]) -> Result<Vec<PeerEvent>, PrStateError> {
    if b.len() < 4 {
        return Err(PrStateError::Truncated);
    }
    if &b[..4] != MAGIC {
        return Err(PrStateError::BadMagic);
    }
    let mut r = Reader::new(b, 4, 2);
    let version = r.u16()?;
    if version != VERSION {
        return Err(PrStateError::UnsupportedVersion(version));
    }
    let n = usize::try_from(r.u32()?).map_err(|_| PrStateError::Invalid("count"))?;
    if n > MAX_EVENTS {
        return Err(PrStateError::Invalid("event count"));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let [kind] = r.array()?;
        if kind == 4 || kind == 5 {
            out.push(PeerEvent::Reset { target: kind == 5 });
            continue;
        }
        let p = r.pair()?;
        out.push(match kind {
            0 => PeerEvent::Abort(p),
            1 => PeerEvent::Attention(p, UnitAttention::ReservationsPreempted),
            2 => PeerEvent::Attention(p, UnitAttention::ReservationsReleased),
            3 => PeerEvent::Attention(p, UnitAttention::RegistrationsPreempted),
            _ => return Err(PrStateError::Invalid("event kind")),
        });
    }
    if !r.at_end() {
        return Err(PrStateError::Invalid("length"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pp(i: &str, rp: u16) -> PortPair {
        PortPair {
            initiator: i.into(),
            target: "iqn.t,t,0x0001".into(),
            rel_port: rp,
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let ev = vec![
            PeerEvent::Attention(pp("iqn.a,i,0x1", 2), UnitAttention::RegistrationsPreempted),
            PeerEvent::Abort(pp("iqn.a,i,0x1", 2)),
            PeerEvent::Attention(pp("iqn.b,i,0x2", 1), UnitAttention::ReservationsReleased),
            PeerEvent::Reset { target: false },
            PeerEvent::Reset { target: true },
        ];
        let b = encode(&ev);
        assert_eq!(decode(&b), Ok(ev));
        assert_eq!(decode(&encode(&[])), Ok(vec![]));
        // every truncation and a stray byte are refused, never a panic
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode(&long), Err(PrStateError::Invalid("length")));
        let mut bad = b.clone();
        bad[10] = 9;
        assert_eq!(decode(&bad), Err(PrStateError::Invalid("event kind")));
        assert_eq!(decode(b"NTPX"), Err(PrStateError::BadMagic));
        // other unit attentions are not carried
        let only = encode(&[PeerEvent::Attention(pp("x", 0), UnitAttention::LunsChanged)]);
        assert_eq!(decode(&only), Ok(vec![]));
    }
}
