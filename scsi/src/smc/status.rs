//! READ ELEMENT STATUS (SMC-3 6.10) and the changer's mode pages (SMC-3 7.3): Element
//! Address Assignment (1Dh), Transport Geometry Parameters (1Eh), Device Capabilities
//! (1Fh), with SPC's Control (0Ah) and Informational Exceptions (1Ch).

use super::{Kind, Library};
use crate::cdb::{be16, be24, truncate};
use crate::mode::{Pc, SenseRequest, page_bytes, parameter_data, sense_request};
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// Bytes of a volume tag: 32 of identifier, 2 reserved, 2 of volume sequence number.
const VOLTAG_LEN: usize = 36;
/// The element descriptor without volume tag: 12 bytes, then the device identifier's
/// 4-byte header (an identifier of length 0).
const BASE_LEN: usize = 16;

fn descriptor(lib: &Library, address: u16, voltag: bool) -> Vec<u8> {
    let Some(e) = lib.elements.get(&address) else {
        return Vec::new();
    };
    let mut d = vec![0u8; BASE_LEN + if voltag { VOLTAG_LEN } else { 0 }];
    d[0..2].copy_from_slice(&address.to_be_bytes());
    let full = u8::from(e.cartridge.is_some());
    d[2] = match e.kind {
        Kind::Transport => full,
        // ACCESS: the picker can reach it
        Kind::Storage | Kind::Drive => full | 0x08,
        // ACCESS, EXENAB, INENAB; IMPEXP 0: put there by the operator
        Kind::ImportExport => full | 0x08 | 0x10 | 0x20,
    };
    if let Some(src) = e.source {
        d[9] = 0x80; // SVALID
        d[10..12].copy_from_slice(&src.to_be_bytes());
    }
    if voltag {
        let tag = &mut d[12..12 + VOLTAG_LEN];
        tag[..32].fill(b' ');
        if let Some(b) = &e.cartridge {
            let n = b.len().min(32);
            tag[..n].copy_from_slice(&b.as_bytes()[..n]);
        }
        tag[32..].fill(0);
    }
    d
}

/// READ ELEMENT STATUS: one element status page per element type asked for (all types,
/// in address-assignment order, for type code 0), of the elements from the starting
/// address on, at most NUMBER OF ELEMENTS of them.
pub(super) fn read_element_status(lib: &Library, cdb: &[u8]) -> Result<Vec<u8>, Sense> {
    let voltag = cdb[1] & 0x10 != 0;
    let kinds: Vec<Kind> = match cdb[1] & 0x0F {
        0 => Kind::ALL.to_vec(),
        c => vec![Kind::from_code(c).ok_or_else(|| Sense::invalid_field_in_cdb(1, Some(3)))?],
    };
    let start = be16(cdb, 2);
    let max = usize::from(be16(cdb, 4));
    let alloc = be24(cdb, 7) as usize;
    let desc_len = BASE_LEN + if voltag { VOLTAG_LEN } else { 0 };
    let mut out = vec![0u8; 8];
    let mut reported = 0usize;
    let mut first = None;
    for kind in kinds {
        let addrs: Vec<u16> = lib
            .elements
            .range(start..)
            .filter(|(_, e)| e.kind == kind)
            .map(|(&a, _)| a)
            .take(max.saturating_sub(reported))
            .collect();
        if addrs.is_empty() {
            continue;
        }
        first.get_or_insert(addrs[0]);
        reported += addrs.len();
        let bytes = (addrs.len() * desc_len) as u32;
        let mut page = vec![kind.code(), if voltag { 0x80 } else { 0 }];
        page.extend_from_slice(&(desc_len as u16).to_be_bytes());
        page.push(0);
        page.extend_from_slice(&bytes.to_be_bytes()[1..]);
        out.extend_from_slice(&page);
        for a in addrs {
            out.extend_from_slice(&descriptor(lib, a, voltag));
        }
    }
    out[0..2].copy_from_slice(&first.unwrap_or(start).to_be_bytes());
    out[2..4].copy_from_slice(&u16::try_from(reported).unwrap_or(u16::MAX).to_be_bytes());
    let avail = u32::try_from(out.len() - 8)
        .unwrap_or(u32::MAX)
        .min(0xFF_FFFF);
    out[5..8].copy_from_slice(&avail.to_be_bytes()[1..]);
    Ok(truncate(out, alloc))
}

const ELEMENT_ADDRESS_ASSIGNMENT: u8 = 0x1D;
const TRANSPORT_GEOMETRY: u8 = 0x1E;
const DEVICE_CAPABILITIES: u8 = 0x1F;
const CONTROL: u8 = 0x0A;
const INFO_EXCEPTIONS: u8 = 0x1C;
const PAGES: [u8; 5] = [
    CONTROL,
    INFO_EXCEPTIONS,
    ELEMENT_ADDRESS_ASSIGNMENT,
    TRANSPORT_GEOMETRY,
    DEVICE_CAPABILITIES,
];

fn page(lu: &LogicalUnit, code: u8, pc: Pc) -> Option<Vec<u8>> {
    let changeable = pc == Pc::Changeable;
    match code {
        ELEMENT_ADDRESS_ASSIGNMENT => {
            let lib = lu.changer.lib();
            let mut p = vec![0u8; 20];
            p[0] = ELEMENT_ADDRESS_ASSIGNMENT;
            p[1] = 18;
            if !changeable {
                for (i, k) in Kind::ALL.iter().enumerate() {
                    let (first, n) = lib.span(*k);
                    p[2 + 4 * i..4 + 4 * i].copy_from_slice(&first.to_be_bytes());
                    p[4 + 4 * i..6 + 4 * i].copy_from_slice(&n.to_be_bytes());
                }
            }
            Some(p)
        }
        TRANSPORT_GEOMETRY => {
            let mut p = vec![TRANSPORT_GEOMETRY, 2, 0, 0];
            if !changeable && lu.changer.lib().rotate {
                p[2] = 0x01; // ROTATE
            }
            Some(p)
        }
        DEVICE_CAPABILITIES => {
            let mut p = vec![0u8; 20];
            p[0] = DEVICE_CAPABILITIES;
            p[1] = 18;
            if !changeable {
                // StorDT, StorI/E, StorST, StorMT: every element type can hold a cartridge
                p[2] = 0x0F;
                // moves from each type (MT, ST, I/E, DT) to any of ST, I/E, DT
                p[4..8].fill(0x0E);
            }
            Some(p)
        }
        CONTROL | INFO_EXCEPTIONS => page_bytes(lu, code, pc),
        _ => None,
    }
}

/// MODE SENSE(6) and (10) of a changer: no block descriptors.
pub(super) fn mode_sense(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let SenseRequest {
        ten,
        pc,
        codes,
        alloc,
    } = sense_request(cdb, &PAGES, false)?;
    let pages = codes.iter().filter_map(|&c| page(lu, c, pc));
    let out = parameter_data(ten, 0, false, &[], pages);
    Ok(Action::data(truncate(out, alloc)))
}
