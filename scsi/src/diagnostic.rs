//! SEND DIAGNOSTIC (1Dh) and RECEIVE DIAGNOSTIC RESULTS (1Ch), SPC-4 6.32 / 6.29.
//!
//! SEND DIAGNOSTIC: SELFTEST = 1 runs the default self-test — the server reads the first
//! blocks of the medium ([`Action::SelfTest`]) and answers GOOD, or HARDWARE ERROR / LOGICAL
//! UNIT FAILED SELF-TEST ([`self_test_failed`]) when they cannot be read; the SELF-TEST
//! CODE must then be 000b. With SELFTEST = 0 the SELF-TEST CODE selects: 101b / 110b
//! foreground short / extended (the same read, its result as the command's status), 001b /
//! 010b background short / extended (accepted; they complete at once and there is no
//! self-test results log to report into), 100b abort background (no background self-test is
//! ever in progress: INVALID FIELD IN CDB), 011b / 111b reserved; a non-zero code with a
//! parameter list is INVALID FIELD IN CDB. SELF-TEST CODE 000b with a parameter list sends a
//! diagnostic page: PF must be 1 (no vendor-specific format) and the only page is Supported
//! Diagnostic Pages (00h); a zero-length list is a no-op. DEVOFFL / UNITOFFL are accepted
//! (nothing here takes the LU offline).
//!
//! RECEIVE DIAGNOSTIC RESULTS returns the Supported Diagnostic Pages page (listing 00h): with
//! PCV = 1 for page code 00h only, with PCV = 0 as the result of the last page sent.

use crate::cdb::{be16, truncate};
use crate::sense::{Sense, key};
use crate::{Action, Completion, LogicalUnit, Req};

/// How many blocks from LBA 0 the self-test reads.
pub(crate) const SELF_TEST_BLOCKS: u64 = 8;

/// Supported Diagnostic Pages page code.
const PAGE_SUPPORTED: u8 = 0x00;

/// 04h/3Eh/03h HARDWARE ERROR, LOGICAL UNIT FAILED SELF-TEST.
const SELF_TEST_FAILED: Sense = Sense::new(key::HARDWARE_ERROR, 0x3E, 0x03);

/// The completion of a self-test ([`Action::SelfTest`]) whose read failed.
pub fn self_test_failed(lu: &LogicalUnit) -> Completion {
    lu.check_condition(&SELF_TEST_FAILED)
}

/// The medium read of a self-test, or GOOD when there is nothing to read (medium out,
/// empty LU).
fn self_test(lu: &LogicalUnit) -> Action {
    let blocks = lu.num_blocks().min(SELF_TEST_BLOCKS);
    if lu.medium_ejected() || blocks == 0 {
        return Action::good();
    }
    Action::SelfTest {
        lba: 0,
        blocks: blocks as u32,
    }
}

/// SEND DIAGNOSTIC.
pub(crate) fn send_diagnostic(
    lu: &LogicalUnit,
    cdb: &[u8],
    req: &Req<'_>,
) -> Result<Action, Sense> {
    let code = cdb[1] >> 5;
    let pf = cdb[1] & 0x10 != 0;
    let selftest = cdb[1] & 0x04 != 0;
    let list_len = usize::from(be16(cdb, 3));
    if selftest {
        if code != 0 {
            return Err(Sense::invalid_field_in_cdb(1, Some(7)));
        }
        return Ok(self_test(lu));
    }
    if code != 0 && list_len != 0 {
        return Err(Sense::invalid_field_in_cdb(3, Some(7)));
    }
    match code {
        0b000 => {}
        // background short / extended: done at once
        0b001 | 0b010 => return Ok(Action::good()),
        // foreground short / extended
        0b101 | 0b110 => return Ok(self_test(lu)),
        // abort background (none in progress), reserved
        _ => return Err(Sense::invalid_field_in_cdb(1, Some(7))),
    }
    if list_len == 0 {
        return Ok(Action::good());
    }
    if !pf {
        // vendor-specific parameter list format: none
        return Err(Sense::invalid_field_in_cdb(1, Some(4)));
    }
    let list = &req.data_out[..req.data_out.len().min(list_len)];
    if list.len() < 4 {
        return Err(Sense::param_list_length_error());
    }
    if list[0] != PAGE_SUPPORTED {
        return Err(Sense::invalid_field_in_param_list(0, Some(7)));
    }
    if usize::from(be16(list, 2)) + 4 > list.len() {
        return Err(Sense::param_list_length_error());
    }
    Ok(Action::good())
}

/// RECEIVE DIAGNOSTIC RESULTS.
pub(crate) fn receive_diagnostic_results(
    _: &LogicalUnit,
    cdb: &[u8],
    _: &Req<'_>,
) -> Result<Action, Sense> {
    let pcv = cdb[1] & 0x01 != 0;
    if pcv && cdb[2] != PAGE_SUPPORTED {
        return Err(Sense::invalid_field_in_cdb(2, Some(7)));
    }
    let alloc = usize::from(be16(cdb, 3));
    let page = vec![PAGE_SUPPORTED, 0, 0, 1, PAGE_SUPPORTED];
    Ok(Action::data(truncate(page, alloc)))
}

#[cfg(test)]
mod tests {
    use super::SELF_TEST_BLOCKS;
    use crate::Action;
    use crate::test_util::*;

    fn sd(b1: u8, len: u16) -> [u8; 6] {
        let [hi, lo] = len.to_be_bytes();
        [0x1D, b1, 0, hi, lo, 0]
    }

    #[test]
    fn default_self_test_reads_the_medium() {
        let lu = lu();
        let a = exec(&lu, &sd(0x04, 0), &[]);
        assert_eq!(
            a,
            Action::SelfTest {
                lba: 0,
                blocks: SELF_TEST_BLOCKS as u32
            }
        );
        // PF, DEVOFFL, UNITOFFL are accepted with it
        assert!(matches!(
            exec(&lu, &sd(0x17, 0), &[]),
            Action::SelfTest { .. }
        ));
        // a self-test code with SELFTEST = 1
        assert_eq!(check(&complete(&lu, &sd(0x24, 0))), (5, 0x24, 0));
        let c = super::self_test_failed(&lu);
        assert_eq!(check(&c), (4, 0x3E, 0x03));
    }

    #[test]
    fn self_test_codes() {
        let lu = lu();
        assert_eq!(complete(&lu, &sd(0x20, 0)).status, 0); // background short
        assert_eq!(complete(&lu, &sd(0x40, 0)).status, 0); // background extended
        assert!(matches!(
            exec(&lu, &sd(0xA0, 0), &[]),
            Action::SelfTest { .. }
        ));
        assert!(matches!(
            exec(&lu, &sd(0xC0, 0), &[]),
            Action::SelfTest { .. }
        ));
        for b1 in [0x60, 0x80, 0xE0] {
            // reserved, abort background without one running
            assert_eq!(check(&complete(&lu, &sd(b1, 0))), (5, 0x24, 0), "{b1:x}");
        }
        // a self-test code with a parameter list
        assert_eq!(check(&complete(&lu, &sd(0x30, 4))), (5, 0x24, 0));
        // the reserved bit
        assert_eq!(check(&complete(&lu, &sd(0x08, 0))), (5, 0x24, 0));
    }

    #[test]
    fn diagnostic_pages() {
        let lu = lu();
        assert_eq!(complete(&lu, &sd(0x00, 0)).status, 0);
        assert_eq!(complete(&lu, &sd(0x10, 0)).status, 0);
        let page0 = [0u8, 0, 0, 0];
        assert_eq!(complete_out(&lu, &sd(0x10, 4), &page0).status, 0);
        // PF = 0: vendor-specific list
        assert_eq!(
            check(&complete_out(&lu, &sd(0x00, 4), &page0)),
            (5, 0x24, 0)
        );
        // an unsupported page
        assert_eq!(
            check(&complete_out(&lu, &sd(0x10, 4), &[0x40, 0, 0, 0])),
            (5, 0x26, 0)
        );
        // too short
        assert_eq!(
            check(&complete_out(&lu, &sd(0x10, 2), &[0, 0])),
            (5, 0x1A, 0)
        );
        assert_eq!(
            check(&complete_out(&lu, &sd(0x10, 4), &[0, 0, 0, 4])),
            (5, 0x1A, 0)
        );
        // RECEIVE DIAGNOSTIC RESULTS
        let c = complete(&lu, &[0x1C, 1, 0, 0, 255, 0]);
        assert_eq!(c.data, vec![0, 0, 0, 1, 0]);
        let c = complete(&lu, &[0x1C, 0, 0, 0, 255, 0]);
        assert_eq!(c.data, vec![0, 0, 0, 1, 0]);
        assert_eq!(complete(&lu, &[0x1C, 1, 0, 0, 3, 0]).data.len(), 3);
        assert_eq!(
            check(&complete(&lu, &[0x1C, 1, 0x80, 0, 255, 0])),
            (5, 0x24, 0)
        );
    }

    #[test]
    fn self_test_without_medium_is_good() {
        let lu = lu();
        lu.set_removable(true);
        assert_eq!(complete(&lu, &[0x1B, 0, 0, 0, 2, 0]).status, 0);
        assert_eq!(complete(&lu, &sd(0x04, 0)).status, 0);
    }
}
