//! Data-transfer commands (SBC-3 5.x): READ and WRITE (6/10/12/16), WRITE AND VERIFY
//! (10/12/16), VERIFY (10/12/16) and SYNCHRONIZE CACHE (10/16). They only validate and
//! range-check; the block I/O itself is returned as `Action::Read / Write / Verify / Sync`
//! for the server to perform.

use crate::cdb::{be16, be24, be32, be64};
use crate::ops::opcode::*;
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// A decoded READ / WRITE / WRITE AND VERIFY CDB.
struct Rw {
    write: bool,
    /// WRITE AND VERIFY: the write is forced unit access.
    verify: bool,
    lba: u64,
    blocks: u32,
    /// Byte offset of the TRANSFER LENGTH field (for the field pointer).
    len_at: usize,
    flags: u8,
}

fn decode(cdb: &[u8]) -> Rw {
    let op = cdb[0];
    let verify = matches!(
        op,
        WRITE_AND_VERIFY_10 | WRITE_AND_VERIFY_12 | WRITE_AND_VERIFY_16
    );
    let write = verify || matches!(op, WRITE_6 | WRITE_10 | WRITE_12 | WRITE_16);
    match op {
        READ_6 | WRITE_6 => Rw {
            write,
            verify,
            lba: u64::from(be24(cdb, 1) & 0x1F_FFFF),
            blocks: match cdb[4] {
                0 => 256,
                n => u32::from(n),
            },
            len_at: 4,
            flags: 0,
        },
        READ_10 | WRITE_10 | WRITE_AND_VERIFY_10 => Rw {
            write,
            verify,
            lba: u64::from(be32(cdb, 2)),
            blocks: u32::from(be16(cdb, 7)),
            len_at: 7,
            flags: cdb[1],
        },
        READ_12 | WRITE_12 | WRITE_AND_VERIFY_12 => Rw {
            write,
            verify,
            lba: u64::from(be32(cdb, 2)),
            blocks: be32(cdb, 6),
            len_at: 6,
            flags: cdb[1],
        },
        _ => Rw {
            write,
            verify,
            lba: be64(cdb, 2),
            blocks: be32(cdb, 10),
            len_at: 10,
            flags: cdb[1],
        },
    }
}

/// Where a plain WRITE puts its data, read from the CDB alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteExtent {
    pub lba: u64,
    pub blocks: u32,
    /// FUA: the write must be durable before GOOD.
    pub fua: bool,
}

/// The extent of a WRITE(6/10/12/16) without protection information (WRPROTECT 0), from
/// its CDB; `None` for any other command or a short CDB. For a transport that places the
/// data before the command runs: nothing is checked here (range, reservations, the
/// logical unit's state) — the command is executed in full when its data is in.
pub fn write_extent(cdb: &[u8]) -> Option<WriteExtent> {
    let need = match *cdb.first()? {
        WRITE_6 => 6,
        WRITE_10 => 10,
        WRITE_12 => 12,
        WRITE_16 => 16,
        _ => return None,
    };
    if cdb.len() < need {
        return None;
    }
    let rw = decode(cdb);
    if rw.flags >> 5 != 0 {
        return None;
    }
    Some(WriteExtent {
        lba: rw.lba,
        blocks: rw.blocks,
        fua: rw.flags & 0x08 != 0,
    })
}

/// LOGICAL BLOCK ADDRESS OUT OF RANGE unless `lba .. lba + blocks` lies within the medium.
pub(crate) fn check_range(lu: &LogicalUnit, lba: u64, blocks: u64) -> Result<(), Sense> {
    let cap = lu.num_blocks();
    match lba.checked_add(blocks) {
        Some(end) if lba <= cap && end <= cap => Ok(()),
        _ => Err(Sense::lba_out_of_range()),
    }
}

/// READ(6/10/12/16), WRITE(6/10/12/16) and WRITE AND VERIFY(10/12/16).
///
/// WRITE AND VERIFY (SBC-3): BYTCHK 0 (verify the medium) and 1 (compare with the Data-Out
/// buffer) are both accepted; the data is written with forced unit access, so GOOD means
/// it reached stable storage — the server's durability guarantee is the verification (the
/// data read back would be the data just written). WRPROTECT ≠ 0 is INVALID FIELD IN CDB as
/// for WRITE, and a short Data-Out buffer is handled as for WRITE.
pub(crate) fn read_write(lu: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    let rw = decode(cdb);
    if rw.flags & 0xE0 != 0 {
        // RDPROTECT / WRPROTECT: no protection information on this LU.
        return Err(Sense::invalid_field_in_cdb(1, Some(7)));
    }
    if rw.blocks > lu.max_transfer_blocks() {
        return Err(Sense::invalid_field_in_cdb(rw.len_at, Some(7)));
    }
    if rw.write {
        lu.check_writable()?;
    }
    check_range(lu, rw.lba, u64::from(rw.blocks))?;
    if rw.blocks == 0 {
        return Ok(Action::good());
    }
    let fua = rw.verify || rw.flags & 0x08 != 0;
    if rw.write {
        let need = u64::from(rw.blocks) * u64::from(lu.params().block_size);
        let mut blocks = rw.blocks;
        let got = ctx.data_out.len() as u64 + ctx.landed;
        if got < need {
            // The initiator's expected transfer length is below the CDB's (residual overflow,
            // reported by the transport). As FCP-4 allows: process the command for the whole
            // blocks that did arrive; a partial block is refused without writing anything.
            let bs = u64::from(lu.params().block_size);
            if got % bs != 0 {
                return Err(Sense::invalid_field_in_information_unit());
            }
            blocks = (got / bs) as u32;
            if blocks == 0 {
                return Ok(Action::good());
            }
        }
        Ok(Action::Write {
            lba: rw.lba,
            blocks,
            durable: lu.durable_writes(fua),
            data_offset: 0,
        })
    } else {
        Ok(Action::Read {
            lba: rw.lba,
            blocks: rw.blocks,
            fua,
        })
    }
}

/// VERIFY(10/12/16). BYTCHK 00b: medium verification, nothing to transfer (GOOD after the
/// range check); 01b: compare the Data-Out buffer with the blocks; 11b: compare one block of
/// Data-Out with every block. The comparison itself is I/O: the server does it.
pub(crate) fn verify(lu: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    if cdb[1] & 0xE0 != 0 {
        return Err(Sense::invalid_field_in_cdb(1, Some(7)));
    }
    let bytchk = (cdb[1] >> 1) & 0x03;
    if bytchk == 0b10 {
        return Err(Sense::invalid_field_in_cdb(1, Some(2)));
    }
    let (lba, blocks) = match cdb[0] {
        VERIFY_10 => (u64::from(be32(cdb, 2)), u64::from(be16(cdb, 7))),
        VERIFY_12 => (u64::from(be32(cdb, 2)), u64::from(be32(cdb, 6))),
        _ => (be64(cdb, 2), u64::from(be32(cdb, 10))),
    };
    let len_at = match cdb[0] {
        VERIFY_10 => 7,
        VERIFY_12 => 6,
        _ => 10,
    };
    let bs = u64::from(lu.params().block_size);
    if blocks * bs > u64::from(crate::MAX_TRANSFER_BYTES) {
        return Err(Sense::invalid_field_in_cdb(len_at, Some(7)));
    }
    check_range(lu, lba, blocks)?;
    if bytchk == 0 || blocks == 0 {
        return Ok(Action::good());
    }
    let need = if bytchk == 0b11 { bs } else { blocks * bs };
    if (ctx.data_out.len() as u64) < need {
        return Err(Sense::invalid_field_in_information_unit());
    }
    Ok(Action::Verify {
        lba,
        blocks: blocks as u32,
        same_block: bytchk == 0b11,
    })
}

/// Compare `medium` (the blocks read) with the verify data; `None` when equal, else the
/// MISCOMPARE sense with the offset of the first differing Data-Out byte.
pub fn verify_compare(
    medium: &[u8],
    data_out: &[u8],
    block_size: usize,
    same_block: bool,
) -> Option<Sense> {
    if same_block {
        let pattern = data_out.get(..block_size)?;
        medium.chunks(block_size).find_map(|chunk| {
            let j = chunk.iter().zip(pattern).position(|(a, b)| a != b)?;
            Some(Sense::miscompare(j as u64))
        })
    } else {
        medium
            .iter()
            .zip(data_out)
            .position(|(a, b)| a != b)
            .map(|j| Sense::miscompare(j as u64))
    }
}

/// The number of Data-Out bytes a CDB asks for (the SCSI layer's transfer length, SPDTL),
/// for the transport's write residuals: WRITE(6/10/12/16), WRITE AND VERIFY(10/12/16), VERIFY
/// with a byte check and MODE SELECT(6/10). `None` for commands that take no Data-Out or that this crate does not
/// know; a CDB too short for its opcode also gives `None`.
pub fn data_out_len(cdb: &[u8], block_size: u32) -> Option<u64> {
    let bs = u64::from(block_size);
    let op = *cdb.first()?;
    let need = match op {
        WRITE_6 | MODE_SELECT_6 => 6,
        WRITE_10
        | WRITE_AND_VERIFY_10
        | VERIFY_10
        | MODE_SELECT_10
        | WRITE_SAME_10
        | UNMAP
        | PERSISTENT_RESERVE_OUT => 10,
        WRITE_12 | WRITE_AND_VERIFY_12 | VERIFY_12 => 12,
        WRITE_16 | WRITE_AND_VERIFY_16 | VERIFY_16 | WRITE_SAME_16 | COMPARE_AND_WRITE
        | ORWRITE_16 | WRITE_ATOMIC_16 => 16,
        _ => return None,
    };
    if cdb.len() < need {
        return None;
    }
    Some(match op {
        WRITE_6 => {
            let n = u64::from(cdb[4]);
            if n == 0 { 256 * bs } else { n * bs }
        }
        WRITE_10 | WRITE_AND_VERIFY_10 => u64::from(be16(cdb, 7)) * bs,
        WRITE_12 | WRITE_AND_VERIFY_12 => u64::from(be32(cdb, 6)) * bs,
        WRITE_16 | WRITE_AND_VERIFY_16 | ORWRITE_16 => u64::from(be32(cdb, 10)) * bs,
        WRITE_ATOMIC_16 => u64::from(be16(cdb, 12)) * bs,
        VERIFY_10 | VERIFY_12 | VERIFY_16 => {
            let blocks = match op {
                VERIFY_10 => u64::from(be16(cdb, 7)),
                VERIFY_12 => u64::from(be32(cdb, 6)),
                _ => u64::from(be32(cdb, 10)),
            };
            match (cdb[1] >> 1) & 0x03 {
                0b01 => blocks * bs,
                0b11 if blocks > 0 => bs,
                _ => 0,
            }
        }
        // the blocks to compare, then the blocks to write
        COMPARE_AND_WRITE => 2 * u64::from(cdb[13]) * bs,
        // one block, or none with NDOB
        WRITE_SAME_10 => bs,
        WRITE_SAME_16 if cdb[1] & 0x01 != 0 => 0,
        WRITE_SAME_16 => bs,
        MODE_SELECT_6 => u64::from(cdb[4]),
        PERSISTENT_RESERVE_OUT => u64::from(be32(cdb, 5)),
        _ => u64::from(be16(cdb, 7)),
    })
}

/// SYNCHRONIZE CACHE(10/16). IMMED is accepted; the server may answer before or after
/// the flush.
pub(crate) fn synchronize_cache(
    lu: &LogicalUnit,
    cdb: &[u8],
    _: &Req<'_>,
) -> Result<Action, Sense> {
    let (lba, blocks) = if cdb[0] == SYNCHRONIZE_CACHE_10 {
        (u64::from(be32(cdb, 2)), u32::from(be16(cdb, 7)))
    } else {
        (be64(cdb, 2), be32(cdb, 10))
    };
    check_range(lu, lba, u64::from(blocks))?;
    Ok(Action::Sync { lba, blocks })
}

#[cfg(test)]
mod tests {
    use super::verify_compare;
    use crate::test_util::*;
    use crate::{Action, CmdCtx};

    fn r10(lba: u32, len: u16) -> Vec<u8> {
        let mut c = vec![0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        c[2..6].copy_from_slice(&lba.to_be_bytes());
        c[7..9].copy_from_slice(&len.to_be_bytes());
        c
    }

    /// WRITE(10) of one block at LBA 0, FUA as given.
    fn w10(fua: bool) -> [u8; 10] {
        [0x2A, if fua { 0x08 } else { 0 }, 0, 0, 0, 0, 0, 0, 1, 0]
    }

    #[test]
    fn write_extent_reads_plain_writes_only() {
        use super::{WriteExtent, write_extent};
        assert_eq!(
            write_extent(&w10(true)),
            Some(WriteExtent {
                lba: 0,
                blocks: 1,
                fua: true
            })
        );
        let mut w16 = [0u8; 16];
        w16[0] = 0x8A;
        w16[2..10].copy_from_slice(&0x1_0000_0000u64.to_be_bytes());
        w16[10..14].copy_from_slice(&256u32.to_be_bytes());
        assert_eq!(
            write_extent(&w16),
            Some(WriteExtent {
                lba: 0x1_0000_0000,
                blocks: 256,
                fua: false
            })
        );
        // WRITE(6) of 0 blocks means 256
        assert_eq!(
            write_extent(&[0x0A, 0, 0, 8, 0, 0]).map(|e| e.blocks),
            Some(256)
        );
        // protection information, other opcodes, short CDBs: no
        let mut prot = w10(false);
        prot[1] = 0x20;
        assert_eq!(write_extent(&prot), None);
        assert_eq!(write_extent(&r10(0, 1)), None);
        assert_eq!(write_extent(&[0x2E, 0, 0, 0, 0, 0, 0, 0, 1, 0]), None);
        assert_eq!(write_extent(&w16[..10]), None);
        assert_eq!(write_extent(&[]), None);
    }

    fn durable_of(a: Action) -> bool {
        match a {
            Action::Write { durable, .. } => durable,
            other => panic!("not a write: {other:?}"),
        }
    }

    #[test]
    fn durability_is_decided_once_from_fua_wce_and_write_through() {
        let block = [0u8; 512];
        // WCE=1: only FUA makes a write durable
        let lu = lu();
        assert!(!durable_of(exec(&lu, &w10(false), &block)));
        assert!(durable_of(exec(&lu, &w10(true), &block)));
        assert!(!lu.durable_writes(false));
        // WCE=0: every write
        let lu = lu_with(|p| p.write_cache = false);
        assert!(durable_of(exec(&lu, &w10(false), &block)));
        assert!(lu.durable_writes(false));
        // write-through LU (tgt's `sync`): every write, whatever WCE says
        let lu = lu_with(|p| p.write_through = true);
        assert!(lu.write_cache_enabled());
        assert!(durable_of(exec(&lu, &w10(false), &block)));
        // COMPARE AND WRITE follows the same rule
        let mut caw = [0u8; 16];
        caw[0] = 0x89;
        caw[13] = 1;
        match exec(&lu, &caw, &[0u8; 1024]) {
            Action::CompareAndWrite { durable, .. } => assert!(durable),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn read6_zero_means_256() {
        let lu = lu();
        assert_eq!(
            exec(&lu, &[0x08, 0, 0, 5, 0, 0], &[]),
            Action::Read {
                lba: 5,
                blocks: 256,
                fua: false
            }
        );
        assert_eq!(
            exec(&lu, &[0x08, 0x1F, 0xFF, 0xFF, 1, 0], &[]),
            Action::Complete(lu.check_condition(&crate::Sense::lba_out_of_range()))
        );
        // WRITE(6) with 0 = 256 blocks needs 256 * 512 bytes
        let data = vec![0u8; 256 * 512];
        assert_eq!(
            exec(&lu, &[0x0A, 0, 0, 0, 0, 0], &data),
            Action::Write {
                lba: 0,
                blocks: 256,
                durable: false,
                data_offset: 0
            }
        );
    }

    #[test]
    fn all_sizes_decode() {
        let lu = lu();
        let mut c12 = vec![0xA8, 0x08, 0, 0, 0, 9, 0, 0, 0, 3, 0, 0];
        assert_eq!(
            exec(&lu, &c12, &[]),
            Action::Read {
                lba: 9,
                blocks: 3,
                fua: true
            }
        );
        c12[0] = 0xAA;
        assert_eq!(
            exec(&lu, &c12, &[0; 1536]),
            Action::Write {
                lba: 9,
                blocks: 3,
                durable: true,
                data_offset: 0
            }
        );
        let mut c16 = vec![0x88, 0x10, 0, 0, 0, 0, 0, 0, 0x07, 0xFF, 0, 0, 0, 1, 0, 0];
        assert_eq!(
            exec(&lu, &c16, &[]),
            Action::Read {
                lba: 2047,
                blocks: 1,
                fua: false
            }
        );
        c16[0] = 0x8A;
        assert!(matches!(exec(&lu, &c16, &[0; 512]), Action::Write { .. }));
        c16[13] = 2;
        assert_eq!(check(&complete(&lu, &c16)), (5, 0x21, 0));
    }

    #[test]
    fn zero_length_and_range() {
        let lu = lu();
        assert_eq!(complete(&lu, &r10(0, 0)).status, 0);
        assert_eq!(complete(&lu, &r10(2048, 0)).status, 0);
        assert_eq!(check(&complete(&lu, &r10(2049, 0))), (5, 0x21, 0));
        assert_eq!(check(&complete(&lu, &r10(2047, 2))), (5, 0x21, 0));
        assert_eq!(check(&complete(&lu, &r10(u32::MAX, 1))), (5, 0x21, 0));
        let mut c16 = vec![
            0x88, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 2, 0, 0,
        ];
        assert_eq!(check(&complete(&lu, &c16)), (5, 0x21, 0));
        c16[1] = 0x20; // RDPROTECT
        let c = complete(&lu, &c16);
        assert_eq!(check(&c), (5, 0x24, 0));
        assert_eq!(&c.sense[15..18], &[0xCF, 0, 1]);
    }

    #[test]
    fn data_out_lengths() {
        use super::data_out_len;
        assert_eq!(data_out_len(&[0x0A, 0, 0, 0, 0, 0], 512), Some(256 * 512));
        assert_eq!(data_out_len(&r10_op(0x2A, 2), 4096), Some(8192));
        let mut v = r10_op(0x2F, 3);
        assert_eq!(data_out_len(&v, 512), Some(0));
        v[1] = 0x02;
        assert_eq!(data_out_len(&v, 512), Some(1536));
        v[1] = 0x06;
        assert_eq!(data_out_len(&v, 512), Some(512));
        assert_eq!(data_out_len(&[0x15, 0x10, 0, 0, 28, 0], 512), Some(28));
        assert_eq!(data_out_len(&r10_op(0x28, 2), 512), None);
        assert_eq!(data_out_len(&[0x2A, 0], 512), None);
        assert_eq!(
            data_out_len(&[0x5F, 0, 0, 0, 0, 0, 0, 0, 24, 0], 512),
            Some(24)
        );
        // WRITE AND VERIFY: the write data, whatever BYTCHK
        let mut wv = r10_op(0x2E, 3);
        assert_eq!(data_out_len(&wv, 512), Some(1536));
        wv[1] = 0x02;
        assert_eq!(data_out_len(&wv, 4096), Some(3 * 4096));
        let mut wv12 = vec![0xAE, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0];
        assert_eq!(data_out_len(&wv12, 512), Some(2560));
        wv12.truncate(11);
        assert_eq!(data_out_len(&wv12, 512), None);
        let wv16 = [0x8E, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
        assert_eq!(data_out_len(&wv16, 512), Some(256 * 512));
        assert_eq!(data_out_len(&[], 512), None);
    }

    fn r10_op(op: u8, len: u16) -> Vec<u8> {
        let mut c = r10(0, len);
        c[0] = op;
        c
    }

    #[test]
    fn verify_byte_check() {
        let lu = lu();
        let mut v = r10(4, 2);
        v[0] = 0x2F;
        // BYTCHK=0: nothing to compare
        assert_eq!(
            lu.execute(&CmdCtx {
                cdb: &v,
                data_out: &[],
                landed: 0,
                luns: &[]
            }),
            Action::good()
        );
        v[1] = 0x02; // BYTCHK=01b
        let data = vec![7u8; 1024];
        assert_eq!(
            lu.execute(&CmdCtx {
                cdb: &v,
                data_out: &data,
                landed: 0,
                luns: &[]
            }),
            Action::Verify {
                lba: 4,
                blocks: 2,
                same_block: false
            }
        );
        assert_eq!(check(&complete_out(&lu, &v, &data[..100])), (5, 0x0E, 0x03));
        v[1] = 0x06; // BYTCHK=11b: one block of data
        assert_eq!(
            lu.execute(&CmdCtx {
                cdb: &v,
                data_out: &data[..512],
                landed: 0,
                luns: &[]
            }),
            Action::Verify {
                lba: 4,
                blocks: 2,
                same_block: true
            }
        );
        v[1] = 0x04; // reserved BYTCHK=10b
        assert_eq!(check(&complete_out(&lu, &v, &data)), (5, 0x24, 0));
        let medium = vec![7u8; 1024];
        assert!(verify_compare(&medium, &data, 512, false).is_none());
        let mut other = data.clone();
        other[600] = 1;
        let s = verify_compare(&medium, &other, 512, false).expect("miscompare");
        assert_eq!((s.key, s.asc, s.ascq, s.info), (0x0E, 0x1D, 0, Some(600)));
        let s = verify_compare(&medium, &other[512..], 512, true).expect("same-block miscompare");
        assert_eq!(s.info, Some(88));
    }

    #[test]
    fn landed_write_data_counts_as_write_data() {
        let lu = lu();
        let mut w = r10(8, 4);
        w[0] = 0x2A;
        // one block came with the command, three landed elsewhere: a write of all four
        let a = lu.execute(&CmdCtx {
            cdb: &w,
            data_out: &[0; 512],
            landed: 3 * 512,
            luns: &[],
        });
        assert!(
            matches!(
                a,
                Action::Write {
                    lba: 8,
                    blocks: 4,
                    ..
                }
            ),
            "{a:?}"
        );
        // still short of the CDB: the whole blocks in, as without landing
        let a = lu.execute(&CmdCtx {
            cdb: &w,
            data_out: &[0; 512],
            landed: 512,
            luns: &[],
        });
        assert!(
            matches!(
                a,
                Action::Write {
                    lba: 8,
                    blocks: 2,
                    ..
                }
            ),
            "{a:?}"
        );
    }

    #[test]
    fn too_long_and_short_data() {
        let lu = lu();
        let c = complete(&lu, &r10(0, 16385));
        assert_eq!(check(&c), (5, 0x24, 0));
        let mut w = r10(0, 2);
        w[0] = 0x2A;
        assert_eq!(check(&complete_out(&lu, &w, &[0; 600])), (5, 0x0E, 0x03));
        // fewer whole blocks than the CDB asks for: only those are written
        assert_eq!(
            exec(&lu, &w, &[0; 512]),
            Action::Write {
                lba: 0,
                blocks: 1,
                durable: false,
                data_offset: 0
            }
        );
        assert_eq!(exec(&lu, &w, &[]), Action::good());
    }

    #[test]
    fn write_and_verify() {
        let lu = lu();
        let data = vec![0u8; 4096];
        let mut c10 = r10(7, 2);
        c10[0] = 0x2E;
        let want = Action::Write {
            lba: 7,
            blocks: 2,
            durable: true,
            data_offset: 0,
        };
        // BYTCHK 0 and 1, with and without DPO: a forced-unit-access write
        for b1 in [0x00, 0x02, 0x10, 0x12] {
            c10[1] = b1;
            assert_eq!(exec(&lu, &c10, &data), want, "byte 1 {b1:#04x}");
        }
        let c12 = [0xAE, 0x02, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0];
        assert_eq!(exec(&lu, &c12, &data), want);
        let mut c16 = [0x8E, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0];
        assert_eq!(exec(&lu, &c16, &data), want);
        // WRPROTECT ≠ 0
        for b1 in [0x20, 0x40, 0x80, 0xE2] {
            c10[1] = b1;
            let c = complete_out(&lu, &c10, &data);
            assert_eq!(check(&c), (5, 0x24, 0));
            assert_eq!(&c.sense[15..18], &[0xCF, 0, 1]);
        }
        // reserved bits (no FUA in WRITE AND VERIFY, no BYTCHK 1xb)
        for (b1, bit) in [(0x08u8, 0xCBu8), (0x04, 0xCA), (0x01, 0xC8)] {
            c10[1] = b1;
            let c = complete_out(&lu, &c10, &data);
            assert_eq!(check(&c), (5, 0x24, 0));
            assert_eq!(&c.sense[15..18], &[bit, 0, 1]);
        }
        c10[1] = 0;
        // zero blocks: nothing to do
        c10[7..9].copy_from_slice(&[0, 0]);
        assert_eq!(complete(&lu, &c10).status, 0);
        // range and length
        c16[13] = 0;
        c16[9] = 0;
        c16[2] = 1;
        c16[13] = 1;
        assert_eq!(check(&complete_out(&lu, &c16, &data)), (5, 0x21, 0));
        let mut big = r10(0, 16385);
        big[0] = 0x2E;
        assert_eq!(check(&complete_out(&lu, &big, &data)), (5, 0x24, 0));
        // a short Data-Out buffer: whole blocks written, a partial block refused
        let mut w = r10(0, 4);
        w[0] = 0x2E;
        assert_eq!(
            exec(&lu, &w, &data[..1024]),
            Action::Write {
                lba: 0,
                blocks: 2,
                durable: true,
                data_offset: 0
            }
        );
        assert_eq!(check(&complete_out(&lu, &w, &data[..700])), (5, 0x0E, 0x03));
        assert_eq!(exec(&lu, &w, &[]), Action::good());
        // write protected medium
        let ro = lu_with(|p| p.readonly = true);
        assert_eq!(check(&complete_out(&ro, &c12, &data)), (7, 0x27, 0));
    }

    #[test]
    fn readonly_rejects_writes() {
        let lu = lu_with(|p| p.readonly = true);
        let mut w = r10(0, 1);
        w[0] = 0x2A;
        assert_eq!(check(&complete_out(&lu, &w, &[0; 512])), (7, 0x27, 0));
        assert_eq!(
            check(&complete_out(&lu, &[0x0A, 0, 0, 0, 1, 0], &[0; 512])),
            (7, 0x27, 0)
        );
        assert!(matches!(exec(&lu, &r10(0, 1), &[]), Action::Read { .. }));
    }

    #[test]
    fn verify_and_sync() {
        let lu = lu();
        let v = [0x2F, 0, 0, 0, 0, 0, 0, 0, 8, 0];
        assert_eq!(complete(&lu, &v).status, 0);
        let mut v2 = v;
        v2[1] = 0x02; // BYTCHK=01b without the data to compare
        assert_eq!(check(&complete(&lu, &v2)), (5, 0x0E, 0x03));
        let mut v3 = v;
        v3[5] = 0xFF;
        v3[4] = 0x07;
        assert_eq!(check(&complete(&lu, &v3)), (5, 0x21, 0));
        let v16 = [0x8F, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0];
        assert_eq!(complete(&lu, &v16).status, 0);

        let s = [0x35, 0x02, 0, 0, 0, 8, 0, 0, 4, 0];
        assert_eq!(exec(&lu, &s, &[]), Action::Sync { lba: 8, blocks: 4 });
        let s16 = [0x91, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(exec(&lu, &s16, &[]), Action::Sync { lba: 0, blocks: 0 });
        let bad = [0x35, 0, 0, 0, 0x08, 0, 0, 0, 1, 0];
        assert_eq!(check(&complete(&lu, &bad)), (5, 0x21, 0));
    }
}
