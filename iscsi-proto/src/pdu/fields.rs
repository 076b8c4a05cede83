//! Big-endian field accessors for the 48-byte Basic Header Segment, and LUN encoding
//! (SAM-5 peripheral / flat addressing).

/// Reads a big-endian u16 at `o`.
#[inline]
pub fn get16(b: &[u8; 48], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}
/// Reads a big-endian u32 at `o`.
#[inline]
pub fn get32(b: &[u8; 48], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
/// Reads a big-endian u64 at `o`.
#[inline]
pub fn get64(b: &[u8; 48], o: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(x)
}
/// Writes a big-endian u16 at `o`.
#[inline]
pub fn put16(b: &mut [u8; 48], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_be_bytes());
}
/// Writes a big-endian u32 at `o`.
#[inline]
pub fn put32(b: &mut [u8; 48], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_be_bytes());
}
/// Writes a big-endian u64 at `o`.
#[inline]
pub fn put64(b: &mut [u8; 48], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_be_bytes());
}

/// Decodes the 8-byte LUN field (as a big-endian u64) into a LUN number.
/// Peripheral (00b) and flat (01b) addressing give 0..16383; other address methods
/// are returned unchanged (raw) so that a lookup simply fails.
pub fn lun_decode(raw: u64) -> u64 {
    let b0 = (raw >> 56) as u8;
    let b1 = (raw >> 48) as u8;
    let rest = raw & 0x0000_ffff_ffff_ffff;
    match b0 >> 6 {
        0 if rest == 0 => ((u64::from(b0) & 0x3f) << 8) | u64::from(b1),
        1 if rest == 0 => ((u64::from(b0) & 0x3f) << 8) | u64::from(b1),
        _ => raw,
    }
}

/// Encodes a LUN number (0..16383) as the 8-byte LUN field: peripheral addressing
/// below 256, flat addressing above (as Linux does).
pub fn lun_encode(lun: u64) -> u64 {
    if lun < 256 {
        lun << 48
    } else if lun < 16384 {
        (0x4000 | lun) << 48
    } else {
        lun
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn lun_roundtrip() {
        for l in [0u64, 1, 255, 256, 1000, 16383] {
            assert_eq!(lun_decode(lun_encode(l)), l);
        }
        assert_eq!(lun_decode(0x0001_0000_0000_0000), 1);
        assert_eq!(lun_decode(0x4101_0000_0000_0000), 257);
    }
}
