//! The persistent reservation state as bytes, for APTPL (SPC-4 5.9.5): a small versioned
//! format with a CRC-32C trailer that the server writes atomically to a file and hands back
//! at start-up. Decoding never panics and refuses truncated, corrupt, oversized or
//! inconsistent input with a [`PrStateError`].
//!
//! Layout (big-endian), version 3 (version 2, written while no SPC-2 reservation is held so
//! that older gateways keep reading the state, lacks it; version 1, still read, lacks the
//! relative port ids too):
//! ```text
//! "NTPR"  magic
//! u16     version (3, or 2)
//! u16     flags: bit 0 APTPL, bit 1 a reservation follows, bit 2 (version 3) an SPC-2
//!         reservation's holder follows
//! u32     PRgeneration
//! u64     sequence number of this snapshot
//! u32     number of registrations, then for each:
//!           u64 reservation key, nexus
//! [u8 type, nexus of the holder]   when flags bit 1
//! [nexus of the SPC-2 holder]      when flags bit 2
//! u32     CRC-32C (Castagnoli) of all preceding bytes
//! str = u16 length + UTF-8 bytes (at most 512)
//! nexus = str initiator port name, str target port name, u16 relative target port id
//!         (0: the logical unit's own port)
//! ```

use std::fmt;

use super::state::{MAX_REGISTRATIONS, PrState, PrType, Registration, Reservation};
use crate::nexus::PortPair;

const MAGIC: &[u8; 4] = b"NTPR";
const VERSION: u16 = 3;
/// What a state without an SPC-2 reservation is written as.
const VERSION_NO_SPC2: u16 = 2;
const FLAG_APTPL: u16 = 1;
const FLAG_RES: u16 = 2;
const FLAG_SPC2: u16 = 4;
const MAX_STR: usize = 512;

/// Why saved persistent reservation state was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrStateError {
    /// The bytes end before the state does.
    Truncated,
    /// Not a numatgt persistent reservation state.
    BadMagic,
    /// Written by a newer version of this format.
    UnsupportedVersion(u16),
    /// The checksum does not match: the bytes were damaged.
    Checksum,
    /// Well-formed but inconsistent (the field named).
    Invalid(&'static str),
}

impl fmt::Display for PrStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrStateError::Truncated => write!(f, "persistent reservation state is truncated"),
            PrStateError::BadMagic => write!(f, "not a persistent reservation state file"),
            PrStateError::UnsupportedVersion(v) => {
                write!(
                    f,
                    "persistent reservation state version {v} is not supported"
                )
            }
            PrStateError::Checksum => write!(f, "persistent reservation state checksum mismatch"),
            PrStateError::Invalid(what) => {
                write!(f, "persistent reservation state has an invalid {what}")
            }
        }
    }
}

impl std::error::Error for PrStateError {}

/// CRC-32C (Castagnoli, reflected polynomial 82F63B78h), bitwise: the state is small.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(MAX_STR)];
    out.extend_from_slice(&(b.len() as u16).to_be_bytes());
    out.extend_from_slice(b);
}

pub(crate) fn put_pair(out: &mut Vec<u8>, p: &PortPair) {
    put_str(out, &p.initiator);
    put_str(out, &p.target);
    out.extend_from_slice(&p.rel_port.to_be_bytes());
}

/// Encodes `s` as snapshot number `seq`.
pub(crate) fn encode(s: &PrState, seq: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + s.regs.len() * 80);
    out.extend_from_slice(MAGIC);
    let version = if s.spc2.is_some() {
        VERSION
    } else {
        VERSION_NO_SPC2
    };
    out.extend_from_slice(&version.to_be_bytes());
    let mut flags = 0;
    if s.aptpl {
        flags |= FLAG_APTPL;
    }
    if s.res.is_some() {
        flags |= FLAG_RES;
    }
    if s.spc2.is_some() {
        flags |= FLAG_SPC2;
    }
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&s.generation.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&(s.regs.len() as u32).to_be_bytes());
    for r in &s.regs {
        out.extend_from_slice(&r.key.to_be_bytes());
        put_pair(&mut out, &r.nexus);
    }
    if let Some(r) = &s.res {
        out.push(r.ty.code());
        put_pair(&mut out, &r.holder);
    }
    if let Some(p) = &s.spc2 {
        put_pair(&mut out, p);
    }
    let crc = crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

pub(crate) struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    version: u16,
}

impl<'a> Reader<'a> {
    /// Reads `b` from offset `at`, nexuses as in state format `version`.
    pub(crate) fn new(b: &'a [u8], at: usize, version: u16) -> Self {
        Reader { b, at, version }
    }

    pub(crate) fn at_end(&self) -> bool {
        self.at == self.b.len()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], PrStateError> {
        let end = self.at.checked_add(n).ok_or(PrStateError::Truncated)?;
        let s = self.b.get(self.at..end).ok_or(PrStateError::Truncated)?;
        self.at = end;
        Ok(s)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], PrStateError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(super) fn u16(&mut self) -> Result<u16, PrStateError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, PrStateError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, PrStateError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    fn string(&mut self) -> Result<String, PrStateError> {
        let n = usize::from(self.u16()?);
        if n > MAX_STR {
            return Err(PrStateError::Invalid("name length"));
        }
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| PrStateError::Invalid("name"))
    }

    pub(crate) fn pair(&mut self) -> Result<PortPair, PrStateError> {
        Ok(PortPair {
            initiator: self.string()?,
            target: self.string()?,
            rel_port: if self.version >= 2 { self.u16()? } else { 0 },
        })
    }
}

/// Decodes a snapshot: the state and its sequence number.
pub(crate) fn decode(b: &[u8]) -> Result<(PrState, u64), PrStateError> {
    if b.len() < 4 {
        return Err(PrStateError::Truncated);
    }
    if &b[..4] != MAGIC {
        return Err(PrStateError::BadMagic);
    }
    if b.len() < 6 {
        return Err(PrStateError::Truncated);
    }
    let version = u16::from_be_bytes([b[4], b[5]]);
    if !(1..=VERSION).contains(&version) {
        return Err(PrStateError::UnsupportedVersion(version));
    }
    let body_len = b.len().checked_sub(4).ok_or(PrStateError::Truncated)?;
    if body_len < 24 {
        return Err(PrStateError::Truncated);
    }
    let (body, trailer) = b.split_at(body_len);
    let mut crc = [0; 4];
    crc.copy_from_slice(trailer);
    if crc32c(body) != u32::from_be_bytes(crc) {
        return Err(PrStateError::Checksum);
    }
    let mut r = Reader {
        b: body,
        at: 6,
        version,
    };
    let flags = r.u16()?;
    let known = if version >= 3 {
        FLAG_APTPL | FLAG_RES | FLAG_SPC2
    } else {
        FLAG_APTPL | FLAG_RES
    };
    if flags & !known != 0 {
        return Err(PrStateError::Invalid("flags"));
    }
    let generation = r.u32()?;
    let seq = r.u64()?;
    let n = usize::try_from(r.u32()?).map_err(|_| PrStateError::Invalid("count"))?;
    if n > MAX_REGISTRATIONS {
        return Err(PrStateError::Invalid("registration count"));
    }
    let mut regs: Vec<Registration> = Vec::with_capacity(n);
    for _ in 0..n {
        let key = r.u64()?;
        let nexus = r.pair()?;
        if key == 0 {
            return Err(PrStateError::Invalid("reservation key"));
        }
        if regs.iter().any(|x| x.nexus == nexus) {
            return Err(PrStateError::Invalid("duplicate registration"));
        }
        regs.push(Registration { nexus, key });
    }
    let res = if flags & FLAG_RES != 0 {
        let [code] = r.array()?;
        let ty = PrType::from_code(code).ok_or(PrStateError::Invalid("reservation type"))?;
        let holder = r.pair()?;
        if !regs.iter().any(|x| x.nexus == holder) {
            return Err(PrStateError::Invalid("reservation holder"));
        }
        Some(Reservation { ty, holder })
    } else {
        None
    };
    let spc2 = if flags & FLAG_SPC2 != 0 {
        // SPC-4 5.9.3: RESERVE conflicts while any registration exists
        if !regs.is_empty() {
            return Err(PrStateError::Invalid(
                "SPC-2 reservation beside registrations",
            ));
        }
        Some(r.pair()?)
    } else {
        None
    };
    if r.at != body.len() {
        return Err(PrStateError::Invalid("length"));
    }
    Ok((
        PrState {
            generation,
            aptpl: flags & FLAG_APTPL != 0,
            regs,
            res,
            spc2,
        },
        seq,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pp(i: &str) -> PortPair {
        PortPair {
            initiator: i.into(),
            target: "iqn.t,t,0x0001".into(),
            rel_port: 0,
        }
    }

    fn sample() -> PrState {
        PrState {
            generation: 7,
            aptpl: true,
            regs: vec![
                Registration {
                    nexus: pp("iqn.a,i,0x000000000001"),
                    key: 0xAB,
                },
                Registration {
                    nexus: pp("iqn.b,i,0x000000000002"),
                    key: 0xCD,
                },
            ],
            res: Some(Reservation {
                ty: PrType::ExclusiveAccessRegistrantsOnly,
                holder: pp("iqn.b,i,0x000000000002"),
            }),
            spc2: None,
        }
    }

    fn spc2_held() -> PrState {
        PrState {
            generation: 3,
            spc2: Some(PortPair {
                initiator: "iqn.c,i,0x000000000003".into(),
                target: "iqn.t,t,0x0002".into(),
                rel_port: 2,
            }),
            ..PrState::default()
        }
    }

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn round_trip() {
        let s = sample();
        let b = encode(&s, 42);
        assert_eq!(decode(&b), Ok((s, 42)));
        let empty = PrState::default();
        assert_eq!(decode(&encode(&empty, 1)), Ok((empty, 1)));
        let held = spc2_held();
        let b = encode(&held, 9);
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), 3);
        assert_eq!(decode(&b), Ok((held, 9)));
    }

    #[test]
    fn version_2_is_written_while_no_spc2_reservation_is_held() {
        let b = encode(&sample(), 4);
        assert_eq!(u16::from_be_bytes([b[4], b[5]]), 2);
    }

    #[test]
    fn spc2_flag_refused_in_version_2_and_beside_registrations() {
        let mut b = encode(&sample(), 1);
        // version 2 with the SPC-2 flag set (and the CRC made right)
        b[7] |= 4;
        let n = b.len() - 4;
        let crc = crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(decode(&b), Err(PrStateError::Invalid("flags")));
        let mut both = sample();
        both.spc2 = spc2_held().spc2;
        assert_eq!(
            decode(&encode(&both, 1)),
            Err(PrStateError::Invalid(
                "SPC-2 reservation beside registrations"
            ))
        );
    }

    #[test]
    fn corrupt_and_truncated_rejected() {
        for b in [encode(&sample(), 1), encode(&spc2_held(), 2)] {
            for n in 0..b.len() {
                assert!(decode(&b[..n]).is_err(), "prefix {n}");
            }
            for i in 0..b.len() {
                let mut c = b.clone();
                c[i] ^= 0x10;
                assert!(decode(&c).is_err(), "flip at {i}");
            }
        }
        let b = encode(&sample(), 1);
        assert_eq!(decode(b"XXXX0000"), Err(PrStateError::BadMagic));
        let mut v = b.clone();
        v[5] = 9;
        assert_eq!(decode(&v), Err(PrStateError::UnsupportedVersion(9)));
        assert_eq!(decode(&b[..b.len() - 1]), Err(PrStateError::Checksum));
    }

    #[test]
    fn inconsistent_rejected() {
        let mut s = sample();
        if let Some(r) = s.res.as_mut() {
            r.holder = pp("nobody");
        }
        assert_eq!(
            decode(&encode(&s, 1)),
            Err(PrStateError::Invalid("reservation holder"))
        );
    }
}
