//! READ CAPACITY(10) and READ CAPACITY(16) (SBC-3 5.15, 5.16): last LBA and block length.

use crate::cdb::{be32, be64, truncate};
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

fn last_lba(lu: &LogicalUnit) -> u64 {
    lu.num_blocks().saturating_sub(1)
}

/// READ CAPACITY(10): returned LBA FFFFFFFFh when the capacity needs READ CAPACITY(16).
pub(crate) fn read_capacity_10(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    // PMI (obsolete) = 0 requires LBA (obsolete) = 0.
    if cdb[8] & 0x01 == 0 && be32(cdb, 2) != 0 {
        return Err(Sense::invalid_field_in_cdb(2, Some(7)));
    }
    let lba = u32::try_from(last_lba(lu)).unwrap_or(u32::MAX);
    let mut d = Vec::with_capacity(8);
    d.extend_from_slice(&lba.to_be_bytes());
    d.extend_from_slice(&lu.params().block_size.to_be_bytes());
    Ok(Action::data(d))
}

/// READ CAPACITY(16): 32 bytes, no protection, LBPME / LBPRZ for thin LUs, the logical
/// blocks per physical block exponent, lowest aligned LBA 0.
pub(crate) fn read_capacity_16(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    if cdb[14] & 0x01 == 0 && be64(cdb, 2) != 0 {
        return Err(Sense::invalid_field_in_cdb(2, Some(7)));
    }
    let alloc = be32(cdb, 10) as usize;
    let mut d = vec![0u8; 32];
    d[0..8].copy_from_slice(&last_lba(lu).to_be_bytes());
    d[8..12].copy_from_slice(&lu.params().block_size.to_be_bytes());
    d[13] = lu.physical_block_exponent();
    d[14] = crate::thin::capacity_flags(lu);
    Ok(Action::data(truncate(d, alloc)))
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;

    #[test]
    fn capacity_10() {
        let lu = lu();
        let c = complete(&lu, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(c.data, vec![0, 0, 0x07, 0xFF, 0, 0, 2, 0]);
        let big = lu_with(|p| p.num_blocks = 1 << 33);
        let c = complete(&big, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&c.data[..4], &[0xFF; 4]);
        let edge = lu_with(|p| p.num_blocks = 1 << 32);
        let c = complete(&edge, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&c.data[..4], &[0xFF; 4]);
        let fits = lu_with(|p| p.num_blocks = u64::from(u32::MAX));
        let c = complete(&fits, &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&c.data[..4], &[0xFF, 0xFF, 0xFF, 0xFE]);
        // LBA without PMI
        let c = complete(&lu, &[0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(check(&c), (5, 0x24, 0));
    }

    #[test]
    fn capacity_16() {
        let lu = lu_with(|p| {
            p.num_blocks = 1 << 33;
            p.block_size = 4096;
        });
        let cdb = [0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0];
        let c = complete(&lu, &cdb);
        assert_eq!(c.data.len(), 32);
        assert_eq!(&c.data[..8], &((1u64 << 33) - 1).to_be_bytes());
        assert_eq!(&c.data[8..12], &4096u32.to_be_bytes());
        assert!(c.data[12..].iter().all(|&b| b == 0));
        // configured logical blocks per physical block exponent (tgtd's lbppbe)
        lu.set_physical_block_exponent(3);
        assert_eq!(complete(&lu, &cdb).data[13], 3);
        lu.set_physical_block_exponent(0);
        let mut short = cdb;
        short[13] = 12;
        assert_eq!(complete(&lu, &short).data.len(), 12);
        // unknown service action of 9Eh
        let mut bad = cdb;
        bad[1] = 0x11;
        let c = complete(&lu, &bad);
        assert_eq!(check(&c), (5, 0x24, 0));
        assert_eq!(&c.sense[15..18], &[0xCC, 0, 1]);
    }

    #[test]
    fn online_resize_changes_capacity_and_tells_every_nexus() {
        use crate::{Action, CmdCtx, Nexus, NexusId, Outcome};
        let lu = lu();
        let n = Nexus::iscsi(NexusId(1), "iqn.2026-11.org.numatgt:i", 1, "iqn.t", 1);
        lu.nexus_added(&n);
        let run = |cdb: &[u8]| match lu.execute_nexus(
            &n,
            &CmdCtx {
                cdb,
                data_out: &[],
                landed: 0,
                luns: &[1],
            },
        ) {
            Outcome::Action(Action::Complete(c)) => c,
            other => panic!("{other:?}"),
        };
        let _ = run(&[0; 6]); // the power-on unit attention
        assert_eq!(run(&[0; 6]).status, 0);
        lu.set_capacity(4096);
        assert_eq!(check(&run(&[0; 6])), (6, 0x2A, 0x09));
        assert_eq!(run(&[0; 6]).status, 0);
        let c = run(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(c.data, vec![0, 0, 0x0F, 0xFF, 0, 0, 2, 0]);
        // the same capacity again: no new unit attention
        lu.set_capacity(4096);
        assert_eq!(run(&[0; 6]).status, 0);
    }
}
