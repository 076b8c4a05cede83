//! The Third-party Copy VPD page (SPC-4 7.8.17, page code 8Fh): what the copy manager of
//! this logical unit supports, stated consistently with RECEIVE COPY RESULTS OPERATING
//! PARAMETERS (`xcopy`): the Supported Commands descriptor (EXTENDED COPY LID1 and the
//! RECEIVE COPY RESULTS service actions implemented), Parameter Data (the descriptor
//! limits), Supported Descriptors (block → block segments, identification CSCDs), Supported
//! CSCD Descriptor IDs (none beyond the CSCD list indexes) and General Copy Operations.
//! Every third-party copy descriptor is a 2-byte type, a 2-byte length and that many bytes,
//! padded to a multiple of four.

use crate::LogicalUnit;
use crate::xcopy::{
    IMPLEMENTED_DESCRIPTORS, MAX_CONCURRENT_COPIES, MAX_CSCD_DESCRIPTORS, MAX_DESCRIPTOR_LIST_LEN,
    MAX_SEGMENT_BYTES, MAX_SEGMENT_DESCRIPTORS, SA_COPY_STATUS, SA_FAILED_SEGMENT_DETAILS,
    SA_OPERATING_PARAMETERS, SA_RECEIVE_DATA,
};

/// VPD page code.
pub const PAGE_CODE: u8 = 0x8F;

/// Third-party copy descriptor types (SPC-4 table 7.8.17).
pub const DESC_SUPPORTED_COMMANDS: u16 = 0x0001;
pub const DESC_PARAMETER_DATA: u16 = 0x0004;
pub const DESC_SUPPORTED_DESCRIPTORS: u16 = 0x0008;
pub const DESC_SUPPORTED_CSCD_IDS: u16 = 0x000C;
pub const DESC_GENERAL_COPY_OPERATIONS: u16 = 0x8001;

/// The copy commands and service actions the copy manager processes: EXTENDED COPY (LID1,
/// service action 00h) and RECEIVE COPY RESULTS COPY STATUS, RECEIVE DATA, OPERATING
/// PARAMETERS, FAILED SEGMENT DETAILS.
pub const SUPPORTED_COMMANDS: [(u8, &[u8]); 2] = [
    (0x83, &[0x00]),
    (
        0x84,
        &[
            SA_COPY_STATUS,
            SA_RECEIVE_DATA,
            SA_OPERATING_PARAMETERS,
            SA_FAILED_SEGMENT_DETAILS,
        ],
    ),
];

/// One third-party copy descriptor: type, length, `body` padded to a multiple of four.
fn descriptor(ty: u16, body: &[u8]) -> Vec<u8> {
    let padded = body.len().next_multiple_of(4);
    let mut d = Vec::with_capacity(4 + padded);
    d.extend_from_slice(&ty.to_be_bytes());
    d.extend_from_slice(&u16::try_from(padded).unwrap_or(u16::MAX).to_be_bytes());
    d.extend_from_slice(body);
    d.resize(4 + padded, 0);
    d
}

fn supported_commands() -> Vec<u8> {
    let mut list = Vec::new();
    for (op, sas) in SUPPORTED_COMMANDS {
        list.push(op);
        list.push(sas.len() as u8);
        list.extend_from_slice(sas);
    }
    let mut body = vec![list.len() as u8];
    body.extend(list);
    descriptor(DESC_SUPPORTED_COMMANDS, &body)
}

fn parameter_data() -> Vec<u8> {
    let mut b = vec![0u8; 28];
    b[4..6].copy_from_slice(&MAX_CSCD_DESCRIPTORS.to_be_bytes());
    b[6..8].copy_from_slice(&MAX_SEGMENT_DESCRIPTORS.to_be_bytes());
    b[8..12].copy_from_slice(&MAX_DESCRIPTOR_LIST_LEN.to_be_bytes());
    // MAXIMUM INLINE DATA LENGTH (bytes 12..16): 0, no inline data
    descriptor(DESC_PARAMETER_DATA, &b)
}

fn supported_descriptors() -> Vec<u8> {
    let mut b = vec![IMPLEMENTED_DESCRIPTORS.len() as u8];
    b.extend_from_slice(&IMPLEMENTED_DESCRIPTORS);
    descriptor(DESC_SUPPORTED_DESCRIPTORS, &b)
}

fn supported_cscd_ids() -> Vec<u8> {
    // CSCD descriptor IDs are only indexes into the CSCD list (no FFFFh, no vendor IDs)
    descriptor(DESC_SUPPORTED_CSCD_IDS, &[0, 0])
}

fn general_copy_operations(lu: &LogicalUnit) -> Vec<u8> {
    let mut b = vec![0u8; 32];
    b[0..4].copy_from_slice(&u32::from(MAX_CONCURRENT_COPIES).to_be_bytes());
    b[4..8].copy_from_slice(&u32::from(MAX_CONCURRENT_COPIES).to_be_bytes());
    b[8..12].copy_from_slice(&MAX_SEGMENT_BYTES.to_be_bytes());
    // DATA SEGMENT GRANULARITY: log2 of the logical block length, as OPERATING PARAMETERS
    b[12] = lu.params().block_size.max(1).trailing_zeros() as u8;
    // INLINE DATA GRANULARITY: 0, no inline data
    descriptor(DESC_GENERAL_COPY_OPERATIONS, &b)
}

/// The page body (after the 4-byte VPD header).
pub(crate) fn body(lu: &LogicalUnit) -> Vec<u8> {
    let mut d = supported_commands();
    d.extend(parameter_data());
    d.extend(supported_descriptors());
    d.extend(supported_cscd_ids());
    d.extend(general_copy_operations(lu));
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdb::{be16, be32};
    use crate::test_util::*;

    /// The descriptors of a page: (type, body without padding bytes checked separately).
    fn descriptors(page: &[u8]) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 4;
        while at < page.len() {
            let ty = be16(page, at);
            let len = usize::from(be16(page, at + 2));
            assert_eq!(
                len % 4,
                0,
                "descriptor {ty:04x} length {len} not a multiple of 4"
            );
            out.push((ty, page[at + 4..at + 4 + len].to_vec()));
            at += 4 + len;
        }
        assert_eq!(at, page.len());
        out
    }

    #[test]
    fn page_is_listed_and_encoded() {
        let lu = lu();
        let sup = complete(&lu, &[0x12, 1, 0x00, 0, 255, 0]).data;
        assert!(sup[4..].contains(&PAGE_CODE));
        let mut sorted = sup[4..].to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, sup[4..], "supported pages ascend");

        let page = complete(&lu, &[0x12, 1, PAGE_CODE, 0x04, 0, 0]).data;
        assert_eq!(&page[..2], &[0x00, PAGE_CODE]);
        assert_eq!(usize::from(be16(&page, 2)), page.len() - 4);
        let descs = descriptors(&page);
        let types: Vec<u16> = descs.iter().map(|d| d.0).collect();
        assert_eq!(
            types,
            vec![
                DESC_SUPPORTED_COMMANDS,
                DESC_PARAMETER_DATA,
                DESC_SUPPORTED_DESCRIPTORS,
                DESC_SUPPORTED_CSCD_IDS,
                DESC_GENERAL_COPY_OPERATIONS
            ]
        );

        // Supported Commands: 83h/00h and 84h/00,01,03,04h
        let sc = &descs[0].1;
        assert_eq!(sc[0], 9);
        assert_eq!(
            &sc[1..10],
            &[0x83, 1, 0x00, 0x84, 4, 0x00, 0x01, 0x03, 0x04]
        );
        assert_eq!(sc.len(), 12);
        assert!(sc[10..].iter().all(|&b| b == 0));

        // Parameter Data: the limits OPERATING PARAMETERS reports
        let op = complete(&lu, &[0x84, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]).data;
        let pd = &descs[1].1;
        assert_eq!(pd.len(), 0x1C);
        assert_eq!(be16(pd, 4), be16(&op, 8));
        assert_eq!(be16(pd, 6), be16(&op, 10));
        assert_eq!(be32(pd, 8), be32(&op, 12));
        assert_eq!(be32(pd, 12), be32(&op, 20)); // MAXIMUM INLINE DATA LENGTH
        assert!(pd[..4].iter().chain(&pd[16..]).all(|&b| b == 0));

        // Supported Descriptors: the IMPLEMENTED DESCRIPTOR TYPE CODES of OPERATING PARAMETERS
        let sd = &descs[2].1;
        let n = usize::from(op[43]);
        assert_eq!(usize::from(sd[0]), n);
        assert_eq!(&sd[1..=n], &op[44..44 + n]);
        assert_eq!(&sd[1..3], &[0x02, 0xE4]);

        // Supported CSCD Descriptor IDs: an empty list
        assert_eq!(descs[3].1, vec![0, 0, 0, 0]);

        // General Copy Operations
        let gco = &descs[4].1;
        assert_eq!(gco.len(), 0x20);
        assert_eq!(be32(gco, 0), u32::from(be16(&op, 34)));
        assert_eq!(be32(gco, 4), u32::from(op[36]));
        assert_eq!(be32(gco, 8), be32(&op, 16));
        assert_eq!(gco[12], op[37]);

        // allocation length truncates
        assert_eq!(
            complete(&lu, &[0x12, 1, PAGE_CODE, 0, 10, 0]).data.len(),
            10
        );
    }

    #[test]
    fn granularity_follows_the_block_length() {
        let lu = lu_with(|p| p.block_size = 4096);
        let page = complete(&lu, &[0x12, 1, PAGE_CODE, 0x04, 0, 0]).data;
        let descs = descriptors(&page);
        assert_eq!(descs[4].1[12], 12);
    }
}
