//! Commands addressed to a LUN that has no logical unit (SPC-4 / SAM-5): INQUIRY reports
//! peripheral qualifier 011b, device type 1Fh ("not capable of supporting a device on this
//! LUN"), REPORT LUNS works as on any LUN, REQUEST SENSE returns LOGICAL UNIT NOT
//! SUPPORTED as data, everything else is CHECK CONDITION / LOGICAL UNIT NOT SUPPORTED.

use crate::cdb::truncate;
use crate::inquiry::{self, standard_data, vpd_page};
use crate::ops::{self, opcode};
use crate::sense::Sense;
use crate::{Completion, report_luns, request_sense};

/// Peripheral qualifier 011b, peripheral device type 1Fh.
pub const PQ_NOT_SUPPORTED: u8 = 0x7F;

/// Vendor / product identification reported for unmapped LUNs.
const VENDOR: &str = "NUMATGT";
const PRODUCT: &str = "NO LOGICAL UNIT";
const REV: &str = "0001";

/// Executes `cdb` on a LUN with no logical unit. `descriptor_sense` selects the sense
/// format of CHECK CONDITION (there is no control mode page to consult).
pub fn execute_unmapped(cdb: &[u8], luns: &[u64], descriptor_sense: bool) -> Completion {
    match unmapped(cdb, luns) {
        Ok(data) => Completion::good_with(data),
        Err(s) => Completion::check_condition(&s, descriptor_sense),
    }
}

fn unmapped(cdb: &[u8], luns: &[u64]) -> Result<Vec<u8>, Sense> {
    match cdb.first() {
        Some(&opcode::INQUIRY) => {
            let cdb = ops::validate(cdb, ops::USAGE_INQUIRY)?;
            let (evpd, page, alloc) = inquiry::decode(cdb)?;
            let data = if evpd {
                let body: &[u8] = if page == inquiry::page::SUPPORTED {
                    &[inquiry::page::SUPPORTED]
                } else {
                    &[]
                };
                vpd_page(PQ_NOT_SUPPORTED, page, body)
            } else {
                standard_data(PQ_NOT_SUPPORTED, VENDOR, PRODUCT, REV)
            };
            Ok(truncate(data, alloc))
        }
        Some(&opcode::REPORT_LUNS) => {
            let cdb = ops::validate(cdb, ops::USAGE_REPORT_LUNS)?;
            report_luns::report(cdb, luns)
        }
        Some(&opcode::REQUEST_SENSE) => {
            let cdb = ops::validate(cdb, ops::USAGE_REQUEST_SENSE)?;
            Ok(request_sense::response(cdb, &Sense::lu_not_supported()))
        }
        _ => Err(Sense::lu_not_supported()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sense::parse_key_asc;

    #[test]
    fn inquiry_reports_pq3() {
        let c = execute_unmapped(&[0x12, 0, 0, 0, 255, 0], &[1], false);
        assert_eq!(c.status, 0);
        assert_eq!(c.data.len(), 96);
        assert_eq!(c.data[0], 0x7F);
        let c = execute_unmapped(&[0x12, 1, 0x83, 0, 255, 0], &[1], false);
        assert_eq!(c.data, vec![0x7F, 0x83, 0, 0]);
        let c = execute_unmapped(&[0x12, 1, 0, 0, 255, 0], &[1], false);
        assert_eq!(c.data, vec![0x7F, 0, 0, 1, 0]);
        let c = execute_unmapped(&[0x12, 0, 0, 0, 4, 0], &[1], false);
        assert_eq!(c.data.len(), 4);
    }

    #[test]
    fn report_luns_and_request_sense() {
        let c = execute_unmapped(&[0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[3], false);
        assert_eq!(c.data, vec![0, 0, 0, 8, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0]);
        let c = execute_unmapped(&[0x03, 0, 0, 0, 255, 0], &[], false);
        assert_eq!(c.status, 0);
        assert_eq!(parse_key_asc(&c.data), Some((5, 0x25, 0)));
        let c = execute_unmapped(&[0x03, 1, 0, 0, 255, 0], &[], false);
        assert_eq!(c.data[0], 0x72);
    }

    #[test]
    fn everything_else_fails() {
        for cdb in [
            &[0x00u8, 0, 0, 0, 0, 0][..],
            &[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0],
            &[],
        ] {
            let c = execute_unmapped(cdb, &[], false);
            assert_eq!(c.status, 2);
            assert_eq!(parse_key_asc(&c.sense), Some((5, 0x25, 0)));
        }
        let c = execute_unmapped(&[0x00, 0, 0, 0, 0, 0], &[], true);
        assert_eq!(c.sense[0], 0x72);
    }
}
