//! REQUEST SENSE (SPC-4 6.39): reports and clears the next unit attention condition of
//! the I_T nexus (else the current condition: NOT READY, MEDIUM NOT PRESENT with the
//! removable medium out, otherwise NO SENSE) as parameter data, in descriptor format when DESC = 1,
//! else fixed; status GOOD. There are no deferred errors.

use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// Parameter data for REQUEST SENSE reporting `pending` (CDB already usage-checked).
pub(crate) fn response(cdb: &[u8], pending: &Sense) -> Vec<u8> {
    let desc = cdb[1] & 0x01 != 0;
    let mut d = pending.encode(desc);
    d.truncate(usize::from(cdb[4]));
    d
}

pub(crate) fn request_sense(lu: &LogicalUnit, cdb: &[u8], req: &Req<'_>) -> Result<Action, Sense> {
    let pending = lu
        .shared()
        .take_ua(req.nexus)
        .map_or_else(|| lu.current_condition(), |ua| ua.sense());
    Ok(Action::data(response(cdb, &pending)))
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;

    #[test]
    fn no_sense_fixed_and_descriptor() {
        let lu = lu();
        let c = complete(&lu, &[0x03, 0, 0, 0, 252, 0]);
        assert_eq!(c.status, 0);
        assert_eq!(c.data.len(), 18);
        assert_eq!(c.data[0], 0x70);
        assert_eq!((c.data[2], c.data[12], c.data[13]), (0, 0, 0));
        let c = complete(&lu, &[0x03, 1, 0, 0, 252, 0]);
        assert_eq!(c.data, vec![0x72, 0, 0, 0, 0, 0, 0, 0]);
        let c = complete(&lu, &[0x03, 0, 0, 0, 8, 0]);
        assert_eq!(c.data.len(), 8);
        assert_eq!(check(&complete(&lu, &[0x03, 0, 1, 0, 8, 0])), (5, 0x24, 0));
    }
}
