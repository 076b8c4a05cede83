//! Framing: TotalAHSLength / DataSegmentLength, additional header segments (extended CDB
//! type 1, bidirectional expected read length type 2), padding to 4 bytes, CRC32C header
//! and data digests, and limit checks on receive.

use super::{Bhs, PduError};

/// Which digests are active on a connection (only after login completes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

/// AHS type: extended CDB.
pub const AHS_EXTENDED_CDB: u8 = 1;
/// AHS type: bidirectional read expected data transfer length.
pub const AHS_BIDI_READ_LEN: u8 = 2;

/// One additional header segment: its type and AHS-specific bytes (which include the
/// leading reserved byte for types 1 and 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ahs {
    pub ahs_type: u8,
    pub data: Vec<u8>,
}

impl Ahs {
    /// Extended CDB AHS carrying CDB bytes 16.. of a long CDB.
    pub fn extended_cdb(rest: &[u8]) -> Ahs {
        let mut data = Vec::with_capacity(rest.len() + 1);
        data.push(0);
        data.extend_from_slice(rest);
        Ahs {
            ahs_type: AHS_EXTENDED_CDB,
            data,
        }
    }
    /// Bidirectional read expected data transfer length AHS.
    pub fn bidi_read_len(len: u32) -> Ahs {
        let mut data = vec![0u8];
        data.extend_from_slice(&len.to_be_bytes());
        Ahs {
            ahs_type: AHS_BIDI_READ_LEN,
            data,
        }
    }
}

/// Rounds up to a multiple of 4.
#[inline]
pub fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// Result of a decode attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded<T> {
    /// More bytes are needed: at least this many in total.
    Incomplete(usize),
    Complete(T),
}

/// Layout of one complete PDU at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub ahs_len: usize,
    pub data_len: usize,
    pub data_off: usize,
    pub total: usize,
}

impl Frame {
    /// Computes the layout from a BHS.
    pub fn from_header(hdr: &[u8; 48], dg: Digests) -> Frame {
        let ahs_len = hdr[4] as usize * 4;
        let data_len =
            (usize::from(hdr[5]) << 16) | (usize::from(hdr[6]) << 8) | usize::from(hdr[7]);
        let data_off = 48 + ahs_len + if dg.header { 4 } else { 0 };
        let total = data_off
            + if data_len > 0 {
                pad4(data_len) + if dg.data { 4 } else { 0 }
            } else {
                0
            };
        Frame {
            ahs_len,
            data_len,
            data_off,
            total,
        }
    }
    /// The BHS bytes.
    pub fn header<'a>(&self, buf: &'a [u8]) -> &'a [u8; 48] {
        buf[..48].try_into().expect("frame buffer holds a BHS")
    }
    /// The AHS bytes.
    pub fn ahs<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[48..48 + self.ahs_len]
    }
    /// The data segment (without padding).
    pub fn data<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.data_off..self.data_off + self.data_len]
    }
}

fn rd32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Checks whether `buf` starts with a complete PDU, enforcing the data segment limit
/// (as soon as the BHS is there) and verifying the digests. A digest error is reported
/// only once the whole PDU is present, so the caller can skip exactly `Frame::total`
/// bytes (see [`Frame::from_header`]).
pub fn check_frame(buf: &[u8], max_data: u32, dg: Digests) -> Result<Decoded<Frame>, PduError> {
    if buf.len() < 48 {
        return Ok(Decoded::Incomplete(48));
    }
    let hdr: &[u8; 48] = buf[..48].try_into().map_err(|_| PduError::BadAhs)?;
    let f = Frame::from_header(hdr, dg);
    if f.data_len as u64 > u64::from(max_data) {
        return Err(PduError::DataSegmentTooLong {
            len: f.data_len as u32,
            max: max_data,
        });
    }
    if buf.len() < f.total {
        return Ok(Decoded::Incomplete(f.total));
    }
    if dg.header {
        let end = 48 + f.ahs_len;
        let computed = crc32c::crc32c(&buf[..end]);
        let got = rd32(&buf[end..end + 4]);
        if got != computed {
            return Err(PduError::HeaderDigest { got, computed });
        }
    }
    if dg.data && f.data_len > 0 {
        let end = f.data_off + pad4(f.data_len);
        let computed = crc32c::crc32c(&buf[f.data_off..end]);
        let got = rd32(&buf[end..end + 4]);
        if got != computed {
            return Err(PduError::DataDigest { got, computed });
        }
    }
    Ok(Decoded::Complete(f))
}

/// Parses the AHS area into segments. Fails on truncated or zero-length segments.
pub fn parse_ahs(mut b: &[u8]) -> Result<Vec<Ahs>, PduError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 4 {
            return Err(PduError::BadAhs);
        }
        let len = usize::from(u16::from_be_bytes([b[0], b[1]]));
        let ahs_type = b[2];
        if len == 0 {
            return Err(PduError::BadAhs);
        }
        let seg = pad4(3 + len);
        if seg > b.len() {
            return Err(PduError::BadAhs);
        }
        out.push(Ahs {
            ahs_type,
            data: b[3..3 + len].to_vec(),
        });
        b = &b[seg..];
    }
    Ok(out)
}

/// Serialises AHS segments (each padded to 4 bytes).
pub fn encode_ahs(ahs: &[Ahs], out: &mut Vec<u8>) -> Result<(), PduError> {
    for a in ahs {
        let len = u16::try_from(a.data.len()).map_err(|_| PduError::TooLarge)?;
        if len == 0 {
            return Err(PduError::BadAhs);
        }
        let start = out.len();
        out.extend_from_slice(&len.to_be_bytes());
        out.push(a.ahs_type);
        out.extend_from_slice(&a.data);
        out.resize(start + pad4(3 + a.data.len()), 0);
    }
    Ok(())
}

/// The data digest of a data segment (covering its padding).
pub fn data_digest(data: &[u8]) -> u32 {
    let pad = pad4(data.len()) - data.len();
    let c = crc32c::crc32c(data);
    if pad == 0 {
        c
    } else {
        crc32c::crc32c_append(c, &[0u8; 3][..pad])
    }
}

/// Encodes a full PDU.
pub fn encode(bhs: &Bhs, ahs: &[Ahs], data: &[u8], dg: Digests) -> Result<Vec<u8>, PduError> {
    let mut ahs_bytes = Vec::new();
    encode_ahs(ahs, &mut ahs_bytes)?;
    if ahs_bytes.len() > 255 * 4 || data.len() > 0x00ff_ffff {
        return Err(PduError::TooLarge);
    }
    let hdr = bhs.encode((ahs_bytes.len() / 4) as u8, data.len() as u32);
    let mut out = Vec::with_capacity(48 + ahs_bytes.len() + 8 + pad4(data.len()));
    out.extend_from_slice(&hdr);
    out.extend_from_slice(&ahs_bytes);
    if dg.header {
        let c = crc32c::crc32c(&out);
        out.extend_from_slice(&c.to_le_bytes());
    }
    if !data.is_empty() {
        out.extend_from_slice(data);
        out.resize(out.len() + pad4(data.len()) - data.len(), 0);
        if dg.data {
            out.extend_from_slice(&data_digest(data).to_le_bytes());
        }
    }
    Ok(out)
}
