//! The read-modify-write commands, which the server performs atomically against every
//! other writer of the same blocks. COMPARE AND WRITE (SBC-3 5.2): the Data-Out buffer
//! holds NUMBER OF LOGICAL BLOCKS blocks to compare with the medium, then as many to write
//! ([`Action::CompareAndWrite`]; MISCOMPARE carries the offset of the first differing byte,
//! [`crate::Sense::miscompare`]). ORWRITE(16) (SBC-3 5.8): the blocks become their bitwise
//! OR with the Data-Out buffer ([`Action::OrWrite`]).

use crate::cdb::{be32, be64};
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
    if lu.write_protected() {
        return Err(Sense::write_protected());
    }
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
    let need = 2 * usize::from(blocks) * lu.params().block_size as usize;
    if ctx.data_out.len() < need {
        return Err(Sense::invalid_field_in_information_unit());
    }
    Ok(Action::CompareAndWrite {
        lba,
        blocks: u32::from(blocks),
        fua: cdb[1] & 0x08 != 0,
    })
}

/// ORWRITE(16).
pub(crate) fn orwrite(lu: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    if cdb[1] & 0xE0 != 0 {
        return Err(Sense::invalid_field_in_cdb(1, Some(7))); // ORPROTECT: no protection info
    }
    if lu.write_protected() {
        return Err(Sense::write_protected());
    }
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
        fua: cdb[1] & 0x08 != 0,
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
    fn decodes_and_checks() {
        let lu = lu();
        let data = vec![0u8; 2 * 512];
        assert_eq!(
            exec(&lu, &caw(7, 1, 0x08), &data),
            Action::CompareAndWrite {
                lba: 7,
                blocks: 1,
                fua: true
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
        // only the compare half arrived
        assert_eq!(
            check(&complete_out(&lu, &caw(0, 1, 0), &data[..512])),
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
                fua: true
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
}
