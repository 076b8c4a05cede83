//! Commands about the medium itself (SBC-3): PRE-FETCH(10/16) — a hint, answered GOOD after
//! the range check (the server's cache loads blocks on demand and reads ahead on its own;
//! GOOD rather than CONDITION MET promises nothing about residency); START STOP UNIT —
//! the medium is always spinning: START/STOP and power conditions are accepted, LOAD/EJECT
//! is refused unless the LU is removable (then `removable` loads / ejects); READ DEFECT DATA(10/12) — a virtual disk
//! has no defects: empty lists in the format asked for.

use crate::cdb::{be16, be32, be64, truncate};
use crate::rw::check_range;
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// PRE-FETCH(10) / PRE-FETCH(16).
pub(crate) fn prefetch(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let (lba, blocks) = if cdb.len() >= 16 {
        (be64(cdb, 2), u64::from(be32(cdb, 10)))
    } else {
        (u64::from(be32(cdb, 2)), u64::from(be16(cdb, 7)))
    };
    check_range(lu, lba, blocks)?;
    Ok(Action::good())
}

/// START STOP UNIT.
pub(crate) fn start_stop_unit(
    lu: &LogicalUnit,
    cdb: &[u8],
    req: &Req<'_>,
) -> Result<Action, Sense> {
    let power_condition = cdb[4] >> 4;
    let loej = cdb[4] & 0x02 != 0;
    if lu.removable() {
        // SBC-3: a POWER CONDITION other than 0h makes START and LOEJ ignored; on a removable
        // LU every value is accepted and leaves the medium where it is (libiscsi PwrCnd, tgtd)
        if power_condition == 0 && loej {
            return crate::removable::load_eject(lu, cdb[4] & 0x01 != 0, req);
        }
        return Ok(Action::good());
    }
    if loej && power_condition == 0 {
        // LOAD/EJECT: the medium is not removable (INQUIRY RMB = 0)
        return Err(Sense::invalid_field_in_cdb(4, Some(1)));
    }
    // power conditions 0 (START valid), 1 active, 2 idle, 3 standby, 7 LU control,
    // 0Ah/0Bh force idle/standby: all accepted; the rest are reserved
    match power_condition {
        0..=3 | 7 | 0x0A | 0x0B => Ok(Action::good()),
        _ => Err(Sense::invalid_field_in_cdb(4, Some(7))),
    }
}

/// READ DEFECT DATA(10) / READ DEFECT DATA(12): no defects.
pub(crate) fn read_defect_data(_: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let twelve = cdb.len() >= 12;
    // REQ_PLIST, REQ_GLIST, DEFECT LIST FORMAT: the lists asked for are valid and empty
    let flags = if twelve { cdb[1] } else { cdb[2] } & 0x1F;
    let d = if twelve {
        let alloc = be32(cdb, 6) as usize;
        truncate(vec![0, flags, 0, 0, 0, 0, 0, 0], alloc)
    } else {
        let alloc = usize::from(be16(cdb, 7));
        truncate(vec![0, flags, 0, 0], alloc)
    };
    Ok(Action::data(d))
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;

    #[test]
    fn prefetch_checks_the_range() {
        let lu = lu();
        assert_eq!(complete(&lu, &[0x34, 0, 0, 0, 0, 0, 0, 0, 8, 0]).status, 0);
        assert_eq!(
            complete(&lu, &[0x34, 0x02, 0, 0, 0x07, 0xF8, 0, 0, 8, 0]).status,
            0
        );
        let c = complete(&lu, &[0x34, 0, 0, 0, 0x07, 0xF9, 0, 0, 8, 0]);
        assert_eq!(check(&c), (5, 0x21, 0));
        let mut p16 = [0u8; 16];
        p16[0] = 0x90;
        p16[13] = 1;
        assert_eq!(complete(&lu, &p16).status, 0);
        p16[2..10].copy_from_slice(&2048u64.to_be_bytes());
        assert_eq!(check(&complete(&lu, &p16)), (5, 0x21, 0));
    }

    #[test]
    fn start_stop_and_eject() {
        let lu = lu();
        assert_eq!(complete(&lu, &[0x1B, 0, 0, 0, 1, 0]).status, 0); // start
        assert_eq!(complete(&lu, &[0x1B, 1, 0, 0, 0, 0]).status, 0); // stop, IMMED
        assert_eq!(check(&complete(&lu, &[0x1B, 1, 0, 0, 2, 0])), (5, 0x24, 0)); // eject
        assert_eq!(complete(&lu, &[0x1B, 0, 0, 0, 0x32, 0]).status, 0); // standby + LOEJ ignored
        assert_eq!(
            check(&complete(&lu, &[0x1B, 0, 0, 0, 0x50, 0])),
            (5, 0x24, 0)
        );
    }

    #[test]
    fn no_defects() {
        let lu = lu();
        let c = complete(&lu, &[0x37, 0, 0x1D, 0, 0, 0, 0, 0, 255, 0]);
        assert_eq!(c.data, vec![0, 0x1D, 0, 0]);
        let c = complete(&lu, &[0xB7, 0x0D, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0]);
        assert_eq!(c.data, vec![0, 0x0D, 0, 0, 0, 0, 0, 0]);
        let c = complete(&lu, &[0x37, 0, 0x1D, 0, 0, 0, 0, 0, 2, 0]);
        assert_eq!(c.data.len(), 2);
    }
}
