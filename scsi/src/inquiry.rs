//! INQUIRY (SPC-4 6.6): standard inquiry data and the vital product data pages this LU
//! supports: 00h supported pages, 80h unit serial number, 83h device identification,
//! 8Fh third-party copy (`tpc_vpd`), B0h block limits, B1h block device characteristics,
//! B2h logical block provisioning.

use crate::cdb::{be16, truncate};
use crate::sense::Sense;
use crate::{Action, LogicalUnit, OPTIMAL_GRANULARITY_BYTES, OPTIMAL_TRANSFER_BYTES, Req};

/// Peripheral device type: direct-access block device.
pub(crate) const PDT_DISK: u8 = 0x00;
/// SPC-4.
pub(crate) const VERSION_SPC4: u8 = 0x06;
/// Length of the standard inquiry data returned.
pub(crate) const STANDARD_LEN: usize = 96;

/// Version descriptors (SPC-4 table 146 values): SAM-5, iSCSI, SPC-4, SBC-3.
const VERSION_DESCRIPTORS: [u16; 4] = [0x00A0, 0x0960, 0x0460, 0x04C0];
/// MMC-6 (no version claimed), a CD/DVD drive's command set standard.
const VERSION_MMC6: u16 = 0x04E0;
/// SSC-3 (no version claimed).
const VERSION_SSC3: u16 = 0x0340;
/// SMC-3 (no version claimed).
const VERSION_SMC3: u16 = 0x0480;

/// VPD page codes.
pub(crate) mod page {
    pub const SUPPORTED: u8 = 0x00;
    pub const UNIT_SERIAL: u8 = 0x80;
    pub const DEVICE_ID: u8 = 0x83;
    pub const BLOCK_LIMITS: u8 = 0xB0;
    pub const BLOCK_CHARACTERISTICS: u8 = 0xB1;
    pub const PROVISIONING: u8 = 0xB2;
}

/// The VPD pages of a CD/DVD drive: identity only (no block limits or provisioning).
const CD_PAGES: [u8; 3] = [page::SUPPORTED, page::UNIT_SERIAL, page::DEVICE_ID];

const SUPPORTED_PAGES: [u8; 7] = [
    page::SUPPORTED,
    page::UNIT_SERIAL,
    page::DEVICE_ID,
    crate::tpc_vpd::PAGE_CODE,
    page::BLOCK_LIMITS,
    page::BLOCK_CHARACTERISTICS,
    page::PROVISIONING,
];

/// IEEE company ID used in the NAA-6 designator. Placeholder from the locally assigned
/// (CID, X bit set) space until the project has an OUI.
pub const NAA_COMPANY_ID: u32 = 0x02_6E_74;

/// Designator codes (SPC-4 7.8.6).
mod desig {
    pub const CODE_BINARY: u8 = 1;
    pub const CODE_ASCII: u8 = 2;
    pub const CODE_UTF8: u8 = 3;
    pub const ASSOC_LU: u8 = 0;
    pub const ASSOC_PORT: u8 = 1;
    pub const ASSOC_TARGET: u8 = 2;
    pub const TYPE_T10: u8 = 1;
    pub const TYPE_NAA: u8 = 3;
    pub const TYPE_REL_PORT: u8 = 4;
    pub const TYPE_TPG: u8 = 5;
    pub const TYPE_SCSI_NAME: u8 = 8;
    pub const PROTO_ISCSI: u8 = 5;
}

/// `s` as printable ASCII, space padded or truncated to `len` bytes (SPC-4 4.4.1).
pub(crate) fn ascii_field(s: &str, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = s
        .chars()
        .map(|c| {
            if (' '..='~').contains(&c) {
                c as u8
            } else {
                b'?'
            }
        })
        .take(len)
        .collect();
    v.resize(len, b' ');
    v
}

/// Standard inquiry data with the given peripheral qualifier / device type byte.
pub(crate) fn standard_data(pq_pdt: u8, vendor: &str, product: &str, rev: &str) -> Vec<u8> {
    let mut d = vec![0u8; STANDARD_LEN];
    d[0] = pq_pdt;
    d[2] = VERSION_SPC4;
    d[3] = 0x10 | 0x02; // HISUP, response data format 2
    d[4] = (STANDARD_LEN - 5) as u8;
    d[7] = 0x02; // CMDQUE
    d[8..16].copy_from_slice(&ascii_field(vendor, 8));
    d[16..32].copy_from_slice(&ascii_field(product, 16));
    d[32..36].copy_from_slice(&ascii_field(rev, 4));
    for (i, v) in VERSION_DESCRIPTORS.iter().enumerate() {
        d[58 + 2 * i..60 + 2 * i].copy_from_slice(&v.to_be_bytes());
    }
    // a CD/DVD drive claims MMC-6 where a disk claims SBC-3
    if pq_pdt & 0x1F == crate::DeviceType::Cd.pdt() {
        d[64..66].copy_from_slice(&VERSION_MMC6.to_be_bytes());
    }
    // a tape drive SSC-3, a changer SMC-3
    if pq_pdt & 0x1F == crate::DeviceType::Tape.pdt() {
        d[64..66].copy_from_slice(&VERSION_SSC3.to_be_bytes());
    }
    if pq_pdt & 0x1F == crate::DeviceType::Changer.pdt() {
        d[64..66].copy_from_slice(&VERSION_SMC3.to_be_bytes());
    }
    d
}

/// A VPD page: 4-byte header then `body`.
pub(crate) fn vpd_page(pq_pdt: u8, code: u8, body: &[u8]) -> Vec<u8> {
    let len = u16::try_from(body.len()).unwrap_or(u16::MAX);
    let mut d = Vec::with_capacity(4 + body.len());
    d.push(pq_pdt);
    d.push(code);
    d.extend_from_slice(&len.to_be_bytes());
    d.extend_from_slice(&body[..usize::from(len)]);
    d
}

/// Decoded INQUIRY CDB: (EVPD, page code, allocation length). CmdDt is rejected by the
/// usage map.
pub(crate) fn decode(cdb: &[u8]) -> Result<(bool, u8, usize), Sense> {
    let evpd = cdb[1] & 0x01 != 0;
    let page = cdb[2];
    if !evpd && page != 0 {
        return Err(Sense::invalid_field_in_cdb(2, Some(7)));
    }
    Ok((evpd, page, usize::from(be16(cdb, 3))))
}

/// INQUIRY on a logical unit.
pub(crate) fn inquiry(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let (evpd, code, alloc) = decode(cdb)?;
    let p = lu.params();
    let pdt = p.device_type.pdt();
    let disk = p.device_type == crate::DeviceType::Disk;
    let data = if !evpd {
        let mut d = standard_data(pdt, &p.vendor_id, &p.product_id, &p.product_rev);
        if disk {
            d[5] |= 0x08; // 3PC: EXTENDED COPY / RECEIVE COPY RESULTS (xcopy)
            // TPGS: 01b implicit asymmetric access, 11b implicit and explicit (alua)
            d[5] |= if lu.explicit_alua() { 0x30 } else { 0x10 };
        }
        if lu.removable() {
            d[1] |= 0x80; // RMB
        }
        d
    } else {
        let body = match code {
            page::SUPPORTED if !disk => CD_PAGES.to_vec(),
            page::SUPPORTED => SUPPORTED_PAGES.to_vec(),
            page::UNIT_SERIAL => serial_body(lu),
            page::DEVICE_ID => device_id_body(lu),
            _ if !disk => return Err(Sense::invalid_field_in_cdb(2, Some(7))),
            crate::tpc_vpd::PAGE_CODE => crate::tpc_vpd::body(lu),
            page::BLOCK_LIMITS => block_limits_body(lu),
            page::BLOCK_CHARACTERISTICS => block_characteristics_body(lu),
            page::PROVISIONING => crate::thin::provisioning_body(lu),
            _ => return Err(Sense::invalid_field_in_cdb(2, Some(7))),
        };
        vpd_page(pdt, code, &body)
    };
    Ok(Action::data(truncate(data, alloc)))
}

fn serial_body(lu: &LogicalUnit) -> Vec<u8> {
    let s = &lu.params().serial;
    let n = s.chars().count().min(252);
    ascii_field(s, n)
}

fn designator(out: &mut Vec<u8>, proto: Option<u8>, code_set: u8, assoc: u8, ty: u8, d: &[u8]) {
    let b0 = proto.map_or(0, |p| p << 4) | code_set;
    let piv = if proto.is_some() { 0x80 } else { 0 };
    out.push(b0);
    out.push(piv | (assoc << 4) | ty);
    out.push(0);
    out.push(d.len() as u8);
    out.extend_from_slice(d);
}

/// The NAA IEEE Registered Extended (NAA 6) designator value for `naa_id`.
pub fn naa6(naa_id: u64) -> [u8; 16] {
    // NAA (4 bits) | IEEE company ID (24) | vendor specific identifier (36) | extension (64)
    let hi: u64 = (0x6u64 << 60) | (u64::from(NAA_COMPANY_ID) << 36) | (naa_id >> 28);
    let lo: u64 = naa_id;
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&hi.to_be_bytes());
    v[8..].copy_from_slice(&lo.to_be_bytes());
    v
}

fn device_id_body(lu: &LogicalUnit) -> Vec<u8> {
    use desig::*;
    let p = lu.params();
    let mut b = Vec::with_capacity(128);
    designator(
        &mut b,
        None,
        CODE_BINARY,
        ASSOC_LU,
        TYPE_NAA,
        &naa6(p.naa_id),
    );
    let mut t10 = ascii_field(&p.vendor_id, 8);
    let serial = if p.serial.is_empty() {
        format!("{:016x}", p.naa_id)
    } else {
        p.serial.clone()
    };
    t10.extend(ascii_field(&serial, serial.chars().count().min(200)));
    designator(&mut b, None, CODE_ASCII, ASSOC_LU, TYPE_T10, &t10);
    let mut port = [0u8; 4];
    port[2..].copy_from_slice(&p.rel_port_id.to_be_bytes());
    designator(
        &mut b,
        Some(PROTO_ISCSI),
        CODE_BINARY,
        ASSOC_PORT,
        TYPE_REL_PORT,
        &port,
    );
    let mut tpg = [0u8; 4];
    tpg[2..].copy_from_slice(&p.tpg.to_be_bytes());
    designator(
        &mut b,
        Some(PROTO_ISCSI),
        CODE_BINARY,
        ASSOC_PORT,
        TYPE_TPG,
        &tpg,
    );
    // SCSI name string: UTF-8, null terminated, padded to a multiple of 4, at most 252.
    let mut name: Vec<u8> = p.target_name.as_bytes().iter().copied().take(251).collect();
    name.push(0);
    name.resize(name.len().div_ceil(4) * 4, 0);
    designator(
        &mut b,
        Some(PROTO_ISCSI),
        CODE_UTF8,
        ASSOC_TARGET,
        TYPE_SCSI_NAME,
        &name,
    );
    b
}

fn block_limits_body(lu: &LogicalUnit) -> Vec<u8> {
    let bs = lu.params().block_size.max(1);
    let mut b = vec![0u8; 0x3C];
    let gran = u16::try_from((OPTIMAL_GRANULARITY_BYTES / bs).max(1)).unwrap_or(u16::MAX);
    b[2..4].copy_from_slice(&gran.to_be_bytes()); // byte 6: optimal transfer length granularity
    b[4..8].copy_from_slice(&lu.max_transfer_blocks().to_be_bytes()); // byte 8
    let opt = (OPTIMAL_TRANSFER_BYTES / bs).max(1);
    b[8..12].copy_from_slice(&opt.to_be_bytes()); // byte 12
    crate::thin::block_limits(lu, &mut b); // WSNZ, unmap limits, MAXIMUM WRITE SAME LENGTH
    crate::caw::atomic_limits(lu, &mut b); // WRITE ATOMIC(16)
    b
}

fn block_characteristics_body(lu: &LogicalUnit) -> Vec<u8> {
    let mut b = vec![0u8; 0x3C];
    b[0..2].copy_from_slice(&1u16.to_be_bytes()); // non-rotating medium
    b[3] = crate::sanitize::bdc_byte7(lu); // WABEREQ, WACEREQ
    b
}

#[cfg(test)]
mod tests {
    use crate::sense::parse_key_asc;
    use crate::test_util::*;

    #[test]
    fn standard_inquiry() {
        let lu = lu();
        let c = complete(&lu, &[0x12, 0, 0, 0, 255, 0]);
        assert_eq!(c.status, 0);
        let d = c.data;
        assert_eq!(d.len(), 96);
        assert_eq!(d[0], 0);
        assert_eq!(d[2], 6);
        assert_eq!(d[3], 0x12);
        assert_eq!(usize::from(d[4]) + 5, d.len());
        assert_eq!(&d[8..16], b"NUMATGT ");
        assert_eq!(&d[16..32], b"VIRTUAL-DISK    ");
        assert_eq!(&d[32..36], b"0001");
        assert_eq!(
            &d[58..66],
            &[0x00, 0xA0, 0x09, 0x60, 0x04, 0x60, 0x04, 0xC0]
        );
    }

    #[test]
    fn allocation_length_truncates() {
        let lu = lu();
        assert_eq!(complete(&lu, &[0x12, 0, 0, 0, 36, 0]).data.len(), 36);
        assert_eq!(complete(&lu, &[0x12, 0, 0, 0, 5, 0]).data.len(), 5);
        let c = complete(&lu, &[0x12, 0, 0, 0, 0, 0]);
        assert_eq!((c.status, c.data.len()), (0, 0));
        assert_eq!(complete(&lu, &[0x12, 0, 0, 0x10, 0, 0]).data.len(), 96);
        assert_eq!(complete(&lu, &[0x12, 1, 0x83, 0, 10, 0]).data.len(), 10);
    }

    #[test]
    fn bad_fields() {
        let lu = lu();
        // CmdDt
        let c = complete(&lu, &[0x12, 2, 0, 0, 96, 0]);
        assert_eq!(parse_key_asc(&c.sense), Some((5, 0x24, 0)));
        assert_eq!(&c.sense[15..18], &[0xC9, 0, 1]);
        // page code without EVPD
        let c = complete(&lu, &[0x12, 0, 0x80, 0, 96, 0]);
        assert_eq!(parse_key_asc(&c.sense), Some((5, 0x24, 0)));
        // unsupported VPD page
        let c = complete(&lu, &[0x12, 1, 0x87, 0, 96, 0]);
        assert_eq!(parse_key_asc(&c.sense), Some((5, 0x24, 0)));
        assert_eq!(&c.sense[15..18], &[0xCF, 0, 2]);
        // NACA in control byte
        let c = complete(&lu, &[0x12, 0, 0, 0, 96, 4]);
        assert_eq!(&c.sense[15..18], &[0xCA, 0, 5]);
        // short CDB
        let c = complete(&lu, &[0x12, 0, 0]);
        assert_eq!(parse_key_asc(&c.sense), Some((5, 0x24, 0)));
    }

    #[test]
    fn vpd_pages() {
        let lu = lu();
        let d = complete(&lu, &[0x12, 1, 0, 0, 255, 0]).data;
        assert_eq!(
            d,
            vec![0, 0, 0, 7, 0x00, 0x80, 0x83, 0x8F, 0xB0, 0xB1, 0xB2]
        );
        let d = complete(&lu, &[0x12, 1, 0x80, 0, 255, 0]).data;
        assert_eq!(&d[..4], &[0, 0x80, 0, 8]);
        assert_eq!(&d[4..], b"SER12345");
        let d = complete(&lu, &[0x12, 1, 0xB0, 0, 255, 0]).data;
        assert_eq!(d.len(), 64);
        assert_eq!(&d[..4], &[0, 0xB0, 0, 0x3C]);
        assert_eq!(u16::from_be_bytes([d[6], d[7]]), 8); // 4096 / 512
        assert_eq!(u32::from_be_bytes([d[8], d[9], d[10], d[11]]), 16384);
        assert_eq!(u32::from_be_bytes([d[12], d[13], d[14], d[15]]), 2048);
        let d = complete(&lu, &[0x12, 1, 0xB1, 0, 255, 0]).data;
        assert_eq!(&d[..6], &[0, 0xB1, 0, 0x3C, 0, 1]);
        let d = complete(&lu, &[0x12, 1, 0xB2, 0, 255, 0]).data;
        assert_eq!(d, vec![0, 0xB2, 0, 4, 0, 0, 0, 0]);
    }

    #[test]
    fn device_identification() {
        let lu = lu();
        let d = complete(&lu, &[0x12, 1, 0x83, 0x01, 0, 0]).data;
        assert_eq!(&d[..2], &[0, 0x83]);
        assert_eq!(usize::from(u16::from_be_bytes([d[2], d[3]])) + 4, d.len());
        let mut descs = Vec::new();
        let mut off = 4;
        while off < d.len() {
            let len = usize::from(d[off + 3]);
            descs.push((d[off], d[off + 1], d[off + 4..off + 4 + len].to_vec()));
            off += 4 + len;
        }
        assert_eq!(off, d.len());
        assert_eq!(descs.len(), 5);
        // NAA 6, binary, LU
        assert_eq!((descs[0].0, descs[0].1), (0x01, 0x03));
        assert_eq!(descs[0].2.len(), 16);
        assert_eq!(descs[0].2[0] >> 4, 6);
        assert_eq!(&descs[0].2[8..], &0x1234_5678_9abc_def0u64.to_be_bytes());
        // T10 vendor id
        assert_eq!((descs[1].0, descs[1].1), (0x02, 0x01));
        assert_eq!(&descs[1].2[..8], b"NUMATGT ");
        // relative target port
        assert_eq!((descs[2].0, descs[2].1), (0x51, 0x94));
        assert_eq!(descs[2].2, vec![0, 0, 0, 1]);
        // target port group
        assert_eq!((descs[3].0, descs[3].1), (0x51, 0x95));
        assert_eq!(descs[3].2, vec![0, 0, 0, 7]);
        // SCSI target name
        assert_eq!((descs[4].0, descs[4].1), (0x53, 0xA8));
        assert_eq!(descs[4].2.len() % 4, 0);
        assert!(descs[4].2.starts_with(b"iqn.2026-11.org.numatgt:t1\0"));
    }
}
