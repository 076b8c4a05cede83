//! CDB field access and generic validation: big-endian field readers that never panic, the
//! allocation-length truncation helper, and the check of a CDB against its opcode's
//! CDB usage map (SPC-4 6.35.3: a bit that is clear in the usage map is reserved or
//! unsupported, so a set bit there is INVALID FIELD IN CDB with a field pointer).

use crate::sense::Sense;

/// Reads `N` bytes at `at`, zero-filled past the end (callers validate lengths first; this
/// only guarantees the absence of panics).
fn bytes<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = at
            .checked_add(i)
            .and_then(|j| b.get(j))
            .copied()
            .unwrap_or(0);
    }
    out
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(bytes::<2>(b, at))
}

pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    let [x, y, z] = bytes::<3>(b, at);
    u32::from_be_bytes([0, x, y, z])
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes::<4>(b, at))
}

pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(bytes::<8>(b, at))
}

/// Index of the most significant set bit of a non-zero byte.
pub(crate) fn top_bit(v: u8) -> u8 {
    7 - v.leading_zeros().min(7) as u8
}

/// Truncates `data` to the allocation length (SPC-4 4.2.5.6: never more than asked for).
pub(crate) fn truncate(mut data: Vec<u8>, alloc_len: usize) -> Vec<u8> {
    data.truncate(alloc_len);
    data
}

/// Checks `cdb` (already cut to the opcode's length) against `usage`: any bit set where the
/// usage map is clear is INVALID FIELD IN CDB, pointing at that byte and its highest bad
/// bit. The control byte's NACA bit is not in any usage map (NACA is not supported).
pub(crate) fn check_usage(cdb: &[u8], usage: &[u8]) -> Result<(), Sense> {
    for (i, (&c, &u)) in cdb.iter().zip(usage.iter()).enumerate() {
        let bad = c & !u;
        if bad != 0 {
            return Err(Sense::invalid_field_in_cdb(i, Some(top_bit(bad))));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_do_not_panic_past_end() {
        let b = [1u8, 2, 3];
        assert_eq!(be16(&b, 1), 0x0203);
        assert_eq!(be16(&b, 2), 0x0300);
        assert_eq!(be32(&b, usize::MAX), 0);
        assert_eq!(be24(&b, 0), 0x010203);
        assert_eq!(be64(&b, 0), 0x0102_0300_0000_0000);
    }

    #[test]
    fn usage_check_points_at_bad_bit() {
        let e = check_usage(
            &[0x12, 0x02, 0, 0, 0, 0],
            &[0xFF, 0x01, 0xFF, 0xFF, 0xFF, 0xC0],
        )
        .unwrap_err();
        let f = e.field.unwrap();
        assert_eq!((f.byte, f.bit, f.in_cdb), (1, Some(1), true));
        assert_eq!(top_bit(0x80), 7);
        assert_eq!(top_bit(0x01), 0);
    }
}
