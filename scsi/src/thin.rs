//! Logical block provisioning (SBC-3 4.7) and WRITE SAME: UNMAP, WRITE SAME(10/16) with the
//! UNMAP and NDOB bits, GET LBA STATUS, and what thin LUs report (LBPME/LBPRZ in READ
//! CAPACITY(16), the unmap limits of the Block Limits page, the Logical Block Provisioning
//! page). A thin LU's unmapped blocks read as zeros (LBPRZ = 1). Commands are decoded and
//! checked here; deallocating, the repeated write and the mapping query are the server's
//! I/O ([`Action::Unmap`], [`Action::WriteSame`], [`Action::GetLbaStatus`], answered with
//! [`lba_status_completion`]).

use crate::cdb::{be16, be32, be64, truncate};
use crate::rw::check_range;
use crate::sense::Sense;
use crate::{Action, Completion, LogicalUnit, Req};

/// Most block descriptors in one UNMAP parameter list.
pub const MAX_UNMAP_DESCRIPTORS: u32 = 256;
/// Most bytes one UNMAP descriptor may cover (and at most 2^20 blocks: initiators check
/// the reported limit for sanity).
pub const MAX_UNMAP_BYTES: u64 = 512 << 20;
const MAX_UNMAP_BLOCKS: u64 = 1 << 20;
/// Unmap granularity reported: the usual file system block.
pub const UNMAP_GRANULARITY_BYTES: u32 = 4096;
/// Most LBA status descriptors GET LBA STATUS returns.
pub const MAX_LBA_STATUS_DESCRIPTORS: usize = 1024;

/// One range a GET LBA STATUS answer describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LbaExtent {
    pub lba: u64,
    pub blocks: u64,
    /// Deallocated (reads return zeros); else mapped.
    pub deallocated: bool,
}

pub(crate) fn max_unmap_blocks(lu: &LogicalUnit) -> u32 {
    let blocks = (MAX_UNMAP_BYTES / u64::from(lu.params().block_size.max(1))).min(MAX_UNMAP_BLOCKS);
    u32::try_from(blocks).unwrap_or(u32::MAX)
}

/// MAXIMUM WRITE SAME LENGTH: the maximum transfer length, so that an initiator may treat
/// a WRITE SAME range as it would a WRITE of the same blocks.
pub(crate) fn max_write_same_blocks(lu: &LogicalUnit) -> u64 {
    u64::from(lu.max_transfer_blocks())
}

/// UNMAP (SBC-3 5.28). Supported on thin LUs only (LBPU): elsewhere the opcode is invalid.
pub(crate) fn unmap(lu: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    if !lu.thin_provisioning() {
        return Err(Sense::invalid_opcode());
    }
    if cdb[1] & 0x01 != 0 {
        // ANCHOR: anchored LBAs are not supported (ANC_SUP = 0)
        return Err(Sense::invalid_field_in_cdb(1, Some(0)));
    }
    if lu.write_protected() {
        return Err(Sense::write_protected());
    }
    let list_len = usize::from(be16(cdb, 7));
    if list_len == 0 {
        return Ok(Action::good());
    }
    if list_len < 8 {
        return Err(Sense::param_list_length_error());
    }
    let list = &ctx.data_out[..ctx.data_out.len().min(list_len)];
    if list.len() < 8 {
        return Err(Sense::param_list_length_error());
    }
    let desc_len = usize::from(be16(list, 2)).min(list.len() - 8);
    let count = desc_len / 16;
    if count > MAX_UNMAP_DESCRIPTORS as usize {
        return Err(Sense::invalid_field_in_param_list(2, Some(7)));
    }
    let max = u64::from(max_unmap_blocks(lu));
    let mut ranges = Vec::with_capacity(count);
    for i in 0..count {
        let at = 8 + i * 16;
        let lba = be64(list, at);
        let blocks = u64::from(be32(list, at + 8));
        if blocks > max {
            return Err(Sense::invalid_field_in_param_list(at + 8, Some(7)));
        }
        check_range(lu, lba, blocks)?;
        if blocks > 0 {
            ranges.push((lba, blocks));
        }
    }
    if ranges.is_empty() {
        return Ok(Action::good());
    }
    Ok(Action::Unmap { ranges })
}

/// WRITE SAME(10/16) (SBC-3 5.42/5.43): the first Data-Out block (zeros with NDOB) written
/// to every block of the range; with UNMAP on a thin LU the server may deallocate instead
/// when that block is all zeros (LBPRZ = 1 makes the result identical); UNMAP on a fully
/// provisioned LU is INVALID FIELD IN CDB (LBPWS = 0). NUMBER OF LOGICAL BLOCKS 0 is refused
/// (WSNZ = 1).
pub(crate) fn write_same(lu: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    let sixteen = cdb.len() >= 16;
    let (lba, blocks, count_at) = if sixteen {
        (be64(cdb, 2), u64::from(be32(cdb, 10)), 10)
    } else {
        (u64::from(be32(cdb, 2)), u64::from(be16(cdb, 7)), 7)
    };
    let flags = cdb[1];
    if flags & 0xE0 != 0 {
        return Err(Sense::invalid_field_in_cdb(1, Some(7))); // WRPROTECT: no protection info
    }
    if flags & 0x10 != 0 {
        return Err(Sense::invalid_field_in_cdb(1, Some(4))); // ANCHOR (ANC_SUP = 0)
    }
    let unmap = flags & 0x08 != 0;
    if unmap && !lu.thin_provisioning() {
        // LBPWS/LBPWS10 = 0: unmapping through WRITE SAME is not supported here
        return Err(Sense::invalid_field_in_cdb(1, Some(3)));
    }
    let ndob = sixteen && flags & 0x01 != 0;
    if lu.write_protected() {
        return Err(Sense::write_protected());
    }
    check_range(lu, lba, blocks)?;
    if blocks == 0 {
        return Err(Sense::invalid_field_in_cdb(count_at, Some(7))); // WSNZ
    }
    if blocks > max_write_same_blocks(lu) {
        return Err(Sense::invalid_field_in_cdb(count_at, Some(7)));
    }
    let bs = lu.params().block_size as usize;
    if !ndob && ctx.data_out.len() < bs {
        return Err(Sense::invalid_field_in_information_unit());
    }
    Ok(Action::WriteSame {
        lba,
        blocks,
        ndob,
        unmap,
    })
}

/// GET LBA STATUS (SBC-3 5.6): the server looks the mapping up from `lba`.
pub(crate) fn get_lba_status(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let lba = be64(cdb, 2);
    let alloc_len = be32(cdb, 10);
    if lba >= lu.num_blocks() {
        return Err(Sense::lba_out_of_range());
    }
    if alloc_len == 0 {
        return Ok(Action::good());
    }
    Ok(Action::GetLbaStatus { lba, alloc_len })
}

/// The GET LBA STATUS answer for `extents` (in LBA order, the first starting at the
/// requested LBA; at most [`MAX_LBA_STATUS_DESCRIPTORS`] are sent), cut to `alloc_len`.
pub fn lba_status_completion(extents: &[LbaExtent], alloc_len: u32) -> Completion {
    let n = extents.len().min(MAX_LBA_STATUS_DESCRIPTORS);
    let mut d = Vec::with_capacity(8 + 16 * n);
    d.extend_from_slice(&((4 + 16 * n) as u32).to_be_bytes());
    d.extend_from_slice(&[0; 4]);
    for e in &extents[..n] {
        d.extend_from_slice(&e.lba.to_be_bytes());
        d.extend_from_slice(&u32::try_from(e.blocks).unwrap_or(u32::MAX).to_be_bytes());
        d.push(u8::from(e.deallocated));
        d.extend_from_slice(&[0; 3]);
    }
    Completion::good_with(truncate(d, alloc_len as usize))
}

/// Byte 14 of READ CAPACITY(16): LBPME and LBPRZ for a thin LU.
pub(crate) fn capacity_flags(lu: &LogicalUnit) -> u8 {
    if lu.thin_provisioning() { 0xC0 } else { 0 }
}

/// The Block Limits VPD page fields this module owns, written into the page body (page
/// byte N is body byte N - 4): WSNZ, the unmap limits (thin LUs), MAXIMUM WRITE SAME LENGTH.
pub(crate) fn block_limits(lu: &LogicalUnit, body: &mut [u8]) {
    if body.len() < 40 {
        return;
    }
    body[0] |= 0x01; // WSNZ
    body[1] = crate::caw::MAX_CAW_BLOCKS; // MAXIMUM COMPARE AND WRITE LENGTH
    if lu.thin_provisioning() {
        let bs = lu.params().block_size.max(1);
        body[16..20].copy_from_slice(&max_unmap_blocks(lu).to_be_bytes());
        body[20..24].copy_from_slice(&MAX_UNMAP_DESCRIPTORS.to_be_bytes());
        body[24..28].copy_from_slice(&(UNMAP_GRANULARITY_BYTES / bs).max(1).to_be_bytes());
    }
    body[32..40].copy_from_slice(&max_write_same_blocks(lu).to_be_bytes());
}

/// The Logical Block Provisioning VPD page body (page bytes 4..8).
pub(crate) fn provisioning_body(lu: &LogicalUnit) -> Vec<u8> {
    if lu.thin_provisioning() {
        // LBPU, LBPWS, LBPWS10, LBPRZ; provisioning type 010b: thin
        vec![0, 0xE4, 0x02, 0]
    } else {
        vec![0; 4]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    fn thin() -> LogicalUnit {
        let lu = lu();
        lu.set_thin_provisioning(true);
        lu
    }

    fn unmap_list(descs: &[(u64, u32)]) -> Vec<u8> {
        let mut v = vec![0u8; 8];
        v[0..2].copy_from_slice(&((6 + 16 * descs.len()) as u16).to_be_bytes());
        v[2..4].copy_from_slice(&((16 * descs.len()) as u16).to_be_bytes());
        for &(lba, n) in descs {
            v.extend_from_slice(&lba.to_be_bytes());
            v.extend_from_slice(&n.to_be_bytes());
            v.extend_from_slice(&[0; 4]);
        }
        v
    }

    fn unmap_cdb(len: usize) -> [u8; 10] {
        let mut c = [0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        c[7..9].copy_from_slice(&(len as u16).to_be_bytes());
        c
    }

    #[test]
    fn unmap_ranges_and_errors() {
        let lu = thin();
        let list = unmap_list(&[(0, 8), (100, 0), (2040, 8)]);
        match exec(&lu, &unmap_cdb(list.len()), &list) {
            Action::Unmap { ranges } => assert_eq!(ranges, vec![(0, 8), (2040, 8)]),
            other => panic!("{other:?}"),
        }
        // beyond the end
        let list = unmap_list(&[(2041, 8)]);
        assert_eq!(
            check(&complete_out(&lu, &unmap_cdb(list.len()), &list)),
            (5, 0x21, 0)
        );
        // empty list, short list
        assert_eq!(complete(&lu, &unmap_cdb(0)).status, 0);
        assert_eq!(
            check(&complete_out(&lu, &unmap_cdb(4), &[0; 4])),
            (5, 0x1A, 0)
        );
        // ANCHOR
        let mut c = unmap_cdb(24);
        c[1] = 1;
        assert_eq!(
            check(&complete_out(&lu, &c, &unmap_list(&[(0, 1)]))),
            (5, 0x24, 0)
        );
        // a thick LU does not have UNMAP
        let list = unmap_list(&[(0, 8)]);
        assert_eq!(
            check(&complete_out(
                &super::super::test_util::lu(),
                &unmap_cdb(list.len()),
                &list
            )),
            (5, 0x20, 0)
        );
        // too many descriptors
        let many: Vec<(u64, u32)> = (0..MAX_UNMAP_DESCRIPTORS as u64 + 1)
            .map(|i| (i, 1))
            .collect();
        let list = unmap_list(&many);
        assert_eq!(
            check(&complete_out(&lu, &unmap_cdb(list.len().min(65535)), &list)),
            (5, 0x26, 0)
        );
    }

    #[test]
    fn write_same_decodes() {
        let lu = thin();
        let block = vec![0u8; 512];
        let ws10 = [0x41, 0x08, 0, 0, 0, 10, 0, 0, 4, 0];
        assert_eq!(
            exec(&lu, &ws10, &block),
            Action::WriteSame {
                lba: 10,
                blocks: 4,
                ndob: false,
                unmap: true
            }
        );
        // NDOB (16 only) needs no data
        let mut ws16 = [0u8; 16];
        ws16[0] = 0x93;
        ws16[1] = 0x01;
        ws16[9] = 5;
        ws16[13] = 2;
        assert_eq!(
            exec(&lu, &ws16, &[]),
            Action::WriteSame {
                lba: 5,
                blocks: 2,
                ndob: true,
                unmap: false
            }
        );
        // 0 blocks (WSNZ), beyond the end, missing data, UNMAP on a thick LU
        assert_eq!(
            check(&complete_out(
                &lu,
                &[0x41, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                &block
            )),
            (5, 0x24, 0)
        );
        assert_eq!(
            check(&complete_out(
                &lu,
                &[0x41, 0, 0, 0, 0x08, 0x01, 0, 0, 0, 0],
                &block
            )),
            (5, 0x21, 0)
        );
        assert_eq!(
            check(&complete_out(&lu, &[0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0], &[])),
            (5, 0x0E, 3)
        );
        let thick = super::super::test_util::lu();
        assert_eq!(check(&complete_out(&thick, &ws10, &block)), (5, 0x24, 0));
        let plain = [0x41, 0, 0, 0, 0, 10, 0, 0, 4, 0];
        assert_eq!(
            exec(&thick, &plain, &block),
            Action::WriteSame {
                lba: 10,
                blocks: 4,
                ndob: false,
                unmap: false
            }
        );
    }

    #[test]
    fn lba_status_encoding_and_capacity_bits() {
        let c = lba_status_completion(
            &[
                LbaExtent {
                    lba: 0,
                    blocks: 8,
                    deallocated: false,
                },
                LbaExtent {
                    lba: 8,
                    blocks: 100,
                    deallocated: true,
                },
            ],
            1000,
        );
        assert_eq!(c.data.len(), 40);
        assert_eq!(&c.data[0..4], &36u32.to_be_bytes());
        assert_eq!(c.data[8 + 12], 0);
        assert_eq!(&c.data[24..32], &8u64.to_be_bytes());
        assert_eq!(c.data[24 + 12], 1);
        assert_eq!(lba_status_completion(&[], 4).data.len(), 4);
        let lu = thin();
        let cdb = [0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0];
        assert_eq!(complete(&lu, &cdb).data[14], 0xC0);
        let mut gls = [0u8; 16];
        gls[0] = 0x9E;
        gls[1] = 0x12;
        gls[9] = 3;
        gls[13] = 64;
        assert_eq!(
            exec(&lu, &gls, &[]),
            Action::GetLbaStatus {
                lba: 3,
                alloc_len: 64
            }
        );
        gls[2..10].copy_from_slice(&2048u64.to_be_bytes());
        assert_eq!(check(&complete(&lu, &gls)), (5, 0x21, 0));
        // VPD pages
        let b2 = complete(&lu, &[0x12, 1, 0xB2, 0, 255, 0]).data;
        assert_eq!(&b2[4..7], &[0, 0xE4, 0x02]);
        let b0 = complete(&lu, &[0x12, 1, 0xB0, 0, 255, 0]).data;
        assert_eq!(b0[4] & 1, 1);
        assert_eq!(&b0[24..28], &MAX_UNMAP_DESCRIPTORS.to_be_bytes());
    }
}
