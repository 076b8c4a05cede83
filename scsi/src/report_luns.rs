//! REPORT LUNS (SPC-4 6.33) and the SAM-5 LUN encoding it uses: peripheral device
//! addressing for LUNs below 256, flat space addressing below 16384, extended flat space
//! (24-bit) above. Works on every LUN, mapped or not.

use crate::cdb::{be32, truncate};
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// The 8-byte SAM-5 encoding of `lun`, or None if it exceeds 24 bits.
pub fn encode_lun(lun: u64) -> Option<[u8; 8]> {
    let mut out = [0u8; 8];
    if lun < 256 {
        out[1] = lun as u8; // peripheral device addressing, bus 0
    } else if lun < 0x4000 {
        out[0] = 0x40 | (lun >> 8) as u8; // flat space addressing
        out[1] = lun as u8;
    } else if lun < 0x100_0000 {
        out[0] = 0xD2; // extended logical unit addressing, 4 bytes, extended flat space
        out[1..4].copy_from_slice(&(lun as u32).to_be_bytes()[1..]);
    } else {
        return None;
    }
    Some(out)
}

/// The REPORT LUNS response for `cdb` (already usage-checked).
pub(crate) fn report(cdb: &[u8], luns: &[u64]) -> Result<Vec<u8>, Sense> {
    let alloc = be32(cdb, 6) as usize;
    if alloc < 16 {
        return Err(Sense::invalid_field_in_cdb(6, Some(7)));
    }
    let mut list: Vec<u64> = match cdb[2] {
        0x00 | 0x02 => luns.to_vec(),
        0x01 => Vec::new(), // no well-known logical units
        _ => return Err(Sense::invalid_field_in_cdb(2, Some(7))),
    };
    list.sort_unstable();
    list.dedup();
    let encoded: Vec<[u8; 8]> = list.into_iter().filter_map(encode_lun).collect();
    let list_len = u32::try_from(encoded.len() * 8).unwrap_or(u32::MAX);
    let mut d = Vec::with_capacity(8 + encoded.len().min(alloc / 8) * 8);
    d.extend_from_slice(&list_len.to_be_bytes());
    d.extend_from_slice(&[0; 4]);
    for e in encoded.iter().take(alloc / 8) {
        d.extend_from_slice(e);
    }
    Ok(truncate(d, alloc))
}

pub(crate) fn report_luns(_: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    report(cdb, ctx.luns).map(Action::data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    fn cdb(select: u8, alloc: u32) -> Vec<u8> {
        let mut c = vec![0xA0, 0, select, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        c[6..10].copy_from_slice(&alloc.to_be_bytes());
        c
    }

    #[test]
    fn encoding() {
        assert_eq!(encode_lun(0), Some([0; 8]));
        assert_eq!(encode_lun(5), Some([0, 5, 0, 0, 0, 0, 0, 0]));
        assert_eq!(encode_lun(300), Some([0x41, 0x2C, 0, 0, 0, 0, 0, 0]));
        assert_eq!(encode_lun(16383), Some([0x7F, 0xFF, 0, 0, 0, 0, 0, 0]));
        assert_eq!(encode_lun(16384), Some([0xD2, 0, 0x40, 0, 0, 0, 0, 0]));
        assert_eq!(encode_lun(1 << 24), None);
    }

    #[test]
    fn report() {
        let lu = lu();
        let d = complete(&lu, &cdb(0, 4096)).data;
        assert_eq!(
            d,
            vec![
                0, 0, 0, 24, 0, 0, 0, 0, //
                0, 0, 0, 0, 0, 0, 0, 0, //
                0, 1, 0, 0, 0, 0, 0, 0, //
                0x41, 0x2C, 0, 0, 0, 0, 0, 0
            ]
        );
        assert_eq!(complete(&lu, &cdb(2, 4096)).data, d);
        assert_eq!(complete(&lu, &cdb(1, 4096)).data, vec![0; 8]);
        // truncated: list length still the full 24
        let t = complete(&lu, &cdb(0, 20)).data;
        assert_eq!(t, d[..20].to_vec());
        let c = complete(&lu, &cdb(0, 15));
        assert_eq!(check(&c), (5, 0x24, 0));
        assert_eq!(&c.sense[15..18], &[0xCF, 0, 6]);
        assert_eq!(check(&complete(&lu, &cdb(0x10, 4096))), (5, 0x24, 0));
    }
}
