//! REQUEST SENSE (SPC-4 6.39): returns the pending sense (none yet: deferred errors and
//! unit attentions arrive with issue 5) as parameter data, in descriptor format when
//! DESC = 1, else fixed; status GOOD.

use crate::sense::Sense;
use crate::{Action, CmdCtx, LogicalUnit};

/// Parameter data for REQUEST SENSE reporting `pending` (CDB already usage-checked).
pub(crate) fn response(cdb: &[u8], pending: &Sense) -> Vec<u8> {
    let desc = cdb[1] & 0x01 != 0;
    let mut d = pending.encode(desc);
    d.truncate(usize::from(cdb[4]));
    d
}

pub(crate) fn request_sense(_: &LogicalUnit, cdb: &[u8], _: &CmdCtx<'_>) -> Result<Action, Sense> {
    Ok(Action::data(response(cdb, &Sense::no_sense())))
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
