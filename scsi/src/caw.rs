//! The read-modify-write commands, which the server performs atomically against every
//! other writer of the same blocks. COMPARE AND WRITE (SBC-3 5.2): the Data-Out buffer
//! holds NUMBER OF LOGICAL BLOCKS blocks to compare with the medium, then as many to write
//! ([`Action::CompareAndWrite`]; MISCOMPARE carries the offset of the first differing byte,
//! [`crate::Sense::miscompare`]). ORWRITE(16) (SBC-3 5.8): the blocks become their bitwise
//! OR with the Data-Out buffer ([`Action::OrWrite`]). WRITE ATOMIC(16) (SBC-4 5.48): the
//! blocks are replaced as one unit, never interleaved with another writer of the same
//! blocks ([`Action::AtomicWrite`]; limits in the Block Limits VPD page, [`atomic_limits`]).

use crate::cdb::{be16, be32, be64};
use crate::rw::check_range;
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// MAXIMUM COMPARE AND WRITE LENGTH (Block Limits VPD page), in blocks: the most the
/// one-byte NUMBER OF LOGICAL BLOCKS field can ask for.
pub const MAX_CAW_BLOCKS: u8 = 255;

pub(crate) fn compare_and_write(
    lu: &LogicalUnit,
    cdb: &[u8],
    ctx: &Req<'_>,
) -> Result<Action, Sense> {
    if cdb[1] & 0xE0 != 0 {
        return Err(Sense::invalid_field_in_cdb(1, Some(7))); // WRPROTECT: no protection info
    }
    lu.check_writable()?;
    let lba = be64(cdb, 2);
    let blocks = cdb[13];
    check_range(lu, lba, u64::from(blocks))?;
    if blocks == 0 {
        // no transfer (SBC-3): fine without data; Data-Out for it means the CDB does not say
        // what the initiator meant (e.g. 256 blocks wrapped to 0 in the one-byte field)
        if ctx.data_out.is_empty() {
            return Ok(Action::good());
        }
        return Err(Sense::invalid_field_in_cdb(13, Some(7)));
    }
    // exactly the compare half and the write half: with more data the halves are ambiguous
    let need = 2 * usize::from(blocks) * lu.params().block_size as usize;
    if ctx.data_out.len() != need {
        return Err(Sense::invalid_field_in_information_unit());
    }
    Ok(Action::CompareAndWrite {
        lba,
        blocks: u32::from(blocks),
        durable: lu.durable_writes(cdb[1] & 0x08 != 0),
    })
}

/// The data rule of COMPARE AND WRITE, applied by the server to the medium it read with the
/// range held: `data_out` is the compare half then the write half, `len` bytes each. The
/// write half when the medium matches the compare half; MISCOMPARE DURING VERIFY OPERATION
/// at the first differing byte otherwise; INVALID FIELD IN INFORMATION UNIT when the buffer
/// does not hold both halves or the medium is shorter than them.
pub fn compare_and_write_data<'d>(
    medium: &[u8],
    data_out: &'d [u8],
    len: usize,
) -> Result<&'d [u8], Sense> {
    let (Some(expected), Some(new), Some(medium)) = (
        data_out.get(..len),
        data_out.get(len..len.saturating_mul(2)),
        medium.get(..len),
    ) else {
        return Err(Sense::invalid_field_in_information_unit());
    };
    match medium.iter().zip(expected).position(|(a, b)| a != b) {
        Some(at) => Err(Sense::miscompare(at as u64)),
        None => Ok(new),
    }
}

/// The data rule of ORWRITE: the blocks become their bitwise OR with the Data-Out buffer
/// (`data_out` shorter than the medium: INVALID FIELD IN INFORMATION UNIT).
pub fn or_write_data(medium: &[u8], data_out: &[u8]) -> Result<Vec<u8>, Sense> {
    if data_out.len() < medium.len() {
        return Err(Sense::invalid_field_in_information_unit());
    }
    Ok(medium.iter().zip(data_out).map(|(a, b)| a | b).collect())
}

/// MAXIMUM ATOMIC TRANSFER LENGTH, in bytes (the Block Limits VPD page gives it in blocks).
pub const MAX_ATOMIC_BYTES: u32 = 1 << 20;

/// The atomic write fields of the Block Limits VPD page, written into the page body (page
/// byte N is body byte N - 4): MAXIMUM ATOMIC TRANSFER LENGTH, ATOMIC ALIGNMENT 1,
/// ATOMIC TRANSFER LENGTH GRANULARITY 1; no atomic boundaries (both boundary fields 0).
pub(crate) fn atomic_limits(lu: &LogicalUnit, body: &mut [u8]) {
    let max = max_atomic_blocks(lu);
    body[40..44].copy_from_slice(&max.to_be_bytes());
    body[44..48].copy_from_slice(&1u32.to_be_bytes());
    body[48..52].copy_from_slice(&1u32.to_be_bytes());
}

fn max_atomic_blocks(lu: &LogicalUnit) -> u32 {
    (MAX_ATOMIC_BYTES / lu.params().block_size.max(1))
        .max(1)
        .min(lu.max_transfer_blocks())
}

/// WRITE ATOMIC(16): WRPROTECT must be 0 (no protection information), ATOMIC BOUNDARY 0
/// (MAXIMUM ATOMIC BOUNDARY SIZE is 0), TRANSFER LENGTH at most MAXIMUM ATOMIC TRANSFER
/// LENGTH; all of the data must be there (a partial atomic write is no atomic write).
pub(crate) fn write_atomic(lu: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    if cdb[1] & 0xE0 != 0 {
        return Err(Sense::invalid_field_in_cdb(1, Some(7))); // WRPROTECT: no protection info
    }
    if be16(cdb, 10) != 0 {
        return Err(Sense::invalid_field_in_cdb(10, Some(7))); // ATOMIC BOUNDARY
    }
    let lba = be64(cdb, 2);
    let blocks = u32::from(be16(cdb, 12));
    if blocks > max_atomic_blocks(lu) {
        return Err(Sense::invalid_field_in_cdb(12, Some(7)));
    }
    lu.check_writable()?;
    check_range(lu, lba, u64::from(blocks))?;
    if blocks == 0 {
        return Ok(Action::good());
    }
    if (ctx.data_out.len() as u64) < u64::from(blocks) * u64::from(lu.params().block_size) {
        return Err(Sense::invalid_field_in_information_unit());
    }
    Ok(Action::AtomicWrite {
        lba,
        blocks,
        durable: lu.durable_writes(cdb[1] & 0x08 != 0),
    })
}

/// ORWRITE(16).
pub(crate) fn orwrite(lu: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    if cdb[1] & 0xE0 != 0 {
        return Err(Sense::invalid_field_in_cdb(1, Some(7))); // ORPROTECT: no protection info
    }
    lu.check_writable()?;
    let lba = be64(cdb, 2);
    let blocks = be32(cdb, 10);
    if blocks > lu.max_transfer_blocks() {
        return Err(Sense::invalid_field_in_cdb(10, Some(7)));
    }
    check_range(lu, lba, u64::from(blocks))?;
    if blocks == 0 {
        return Ok(Action::good());
    }
    if (ctx.data_out.len() as u64) < u64::from(blocks) * u64::from(lu.params().block_size) {
        return Err(Sense::invalid_field_in_information_unit());
    }
    Ok(Action::OrWrite {
        lba,
        blocks,
        durable: lu.durable_writes(cdb[1] & 0x08 != 0),
    })
}

#[cfg(test)]
mod tests {
    use crate::Action;
    use crate::test_util::*;

    fn caw(lba: u64, blocks: u8, flags: u8) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[0] = 0x89;
        c[1] = flags;
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[13] = blocks;
        c
    }

    #[test]
    fn compare_and_write_data_rule() {
        use super::compare_and_write_data as rule;
        let medium = [1u8, 2, 3, 4];
        let mut data = vec![1u8, 2, 3, 4, 9, 9, 9, 9];
        assert_eq!(rule(&medium, &data, 4), Ok(&[9u8, 9, 9, 9][..]));
        data[2] = 7; // differs at byte 2 of the compare half
        let miss = rule(&medium, &data, 4).expect_err("miscompare");
        assert_eq!(miss, crate::Sense::miscompare(2));
        // half a buffer, or a short medium: no guessing
        assert!(rule(&medium, &data[..6], 4).is_err());
        assert!(rule(&medium[..3], &data, 4).is_err());
    }

    #[test]
    fn or_write_data_rule() {
        use super::or_write_data as rule;
        assert_eq!(rule(&[0x0f, 0x10], &[0xf0, 0x01]), Ok(vec![0xff, 0x11]));
        assert!(rule(&[0, 0], &[1]).is_err());
    }

    #[test]
    fn decodes_and_checks() {
        let lu = lu();
        let data = vec![0u8; 2 * 512];
        assert_eq!(
            exec(&lu, &caw(7, 1, 0x08), &data),
            Action::CompareAndWrite {
                lba: 7,
                blocks: 1,
                durable: true
            }
        );
        assert_eq!(complete(&lu, &caw(7, 0, 0)).status, 0);
        assert_eq!(
            check(&complete_out(&lu, &caw(7, 0, 0), &data)),
            (5, 0x24, 0)
        );
        assert_eq!(
            check(&complete_out(&lu, &caw(2048, 1, 0), &data)),
            (5, 0x21, 0)
        );
        assert_eq!(
            check(&complete_out(&lu, &caw(0, 1, 0x20), &data)),
            (5, 0x24, 0)
        );
        // only the compare half arrived; more than both halves
        assert_eq!(
            check(&complete_out(&lu, &caw(0, 1, 0), &data[..512])),
            (5, 0x0E, 3)
        );
        assert_eq!(
            check(&complete_out(&lu, &caw(0, 1, 0), &[0u8; 4 * 512])),
            (5, 0x0E, 3)
        );
        let ro = lu_with(|p| p.readonly = true);
        assert_eq!(
            check(&complete_out(&ro, &caw(0, 1, 0), &data)),
            (7, 0x27, 0)
        );
    }

    #[test]
    fn orwrite_decodes_and_checks() {
        let lu = lu();
        let mut c = [0u8; 16];
        c[0] = 0x8B;
        c[1] = 0x08;
        c[9] = 3;
        c[13] = 2;
        let data = vec![0u8; 1024];
        assert_eq!(
            exec(&lu, &c, &data),
            Action::OrWrite {
                lba: 3,
                blocks: 2,
                durable: true
            }
        );
        assert_eq!(check(&complete_out(&lu, &c, &data[..512])), (5, 0x0E, 3));
        c[1] = 0x20;
        assert_eq!(check(&complete_out(&lu, &c, &data)), (5, 0x24, 0));
        c[1] = 0;
        c[2..10].copy_from_slice(&2047u64.to_be_bytes());
        assert_eq!(check(&complete_out(&lu, &c, &data)), (5, 0x21, 0));
        c[13] = 0;
        c[2..10].copy_from_slice(&0u64.to_be_bytes());
        assert_eq!(complete(&lu, &c).status, 0);
    }

    fn wa16(lba: u64, blocks: u16, flags: u8, boundary: u16) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[0] = 0x9C;
        c[1] = flags;
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[10..12].copy_from_slice(&boundary.to_be_bytes());
        c[12..14].copy_from_slice(&blocks.to_be_bytes());
        c
    }

    #[test]
    fn write_atomic_decodes_checks_and_advertises() {
        let lu = lu();
        let data = vec![0u8; 4 * 512];
        assert_eq!(
            exec(&lu, &wa16(10, 4, 0x18, 0), &data),
            Action::AtomicWrite {
                lba: 10,
                blocks: 4,
                durable: true
            }
        );
        // 0 blocks: nothing to do, but still range checked
        assert_eq!(complete(&lu, &wa16(0, 0, 0, 0)).status, 0);
        assert_eq!(check(&complete(&lu, &wa16(2049, 0, 0, 0))), (5, 0x21, 0));
        assert_eq!(
            check(&complete_out(&lu, &wa16(2046, 4, 0, 0), &data)),
            (5, 0x21, 0)
        );
        // WRPROTECT, a boundary, more than MAXIMUM ATOMIC TRANSFER LENGTH, short data
        assert_eq!(
            check(&complete_out(&lu, &wa16(0, 4, 0x20, 0), &data)),
            (5, 0x24, 0)
        );
        assert_eq!(
            check(&complete_out(&lu, &wa16(0, 4, 0, 2), &data)),
            (5, 0x24, 0)
        );
        let too_many = (super::MAX_ATOMIC_BYTES / 512 + 1) as u16;
        assert_eq!(
            check(&complete(&lu, &wa16(0, too_many, 0, 0))),
            (5, 0x24, 0)
        );
        assert_eq!(
            check(&complete_out(&lu, &wa16(0, 4, 0, 0), &data[..1024])),
            (5, 0x0E, 3)
        );
        let ro = lu_with(|p| p.readonly = true);
        assert_eq!(
            check(&complete_out(&ro, &wa16(0, 4, 0, 0), &data)),
            (7, 0x27, 0)
        );
        // Block Limits VPD: MAXIMUM ATOMIC TRANSFER LENGTH ≤ MAXIMUM TRANSFER LENGTH,
        // alignment and granularity 1, no boundaries
        let b0 = complete(&lu, &[0x12, 1, 0xB0, 0, 255, 0]).data;
        let be32 = |at: usize| u32::from_be_bytes([b0[at], b0[at + 1], b0[at + 2], b0[at + 3]]);
        assert_eq!(be32(44), super::MAX_ATOMIC_BYTES / 512);
        assert!(be32(44) <= be32(8));
        assert_eq!((be32(48), be32(52), be32(56), be32(60)), (1, 1, 0, 0));
    }
}
