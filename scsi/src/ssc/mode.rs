//! A tape drive's mode parameters (SSC-3 8.3): the header's device-specific parameter (WP,
//! BUFFERED MODE 1), the block descriptor (density code, block length: 0 = variable-block
//! mode; both set by MODE SELECT), the Data Compression (0Fh) and Device Configuration
//! (10h) pages, and SPC's Control and Informational Exceptions pages.

use std::sync::atomic::Ordering;

use super::MAX_BLOCK;
use crate::cdb::{be16, be24, truncate};
use crate::mode::{
    Pc, SenseRequest, check_page, page_bytes, parameter_data, parameter_list, sense_request,
};
use crate::ops::opcode::MODE_SELECT_10;
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

const DATA_COMPRESSION: u8 = 0x0F;
const DEVICE_CONFIGURATION: u8 = 0x10;
const CONTROL: u8 = 0x0A;
const INFO_EXCEPTIONS: u8 = 0x1C;
const PAGES: [u8; 4] = [
    CONTROL,
    DATA_COMPRESSION,
    DEVICE_CONFIGURATION,
    INFO_EXCEPTIONS,
];

/// Data compression page: DCE (byte 2 bit 7), DCC (bit 6), DDE (byte 3 bit 7).
const DCE: u8 = 0x80;
const DCC: u8 = 0x40;
const DDE: u8 = 0x80;

fn page(lu: &LogicalUnit, code: u8, pc: Pc) -> Option<Vec<u8>> {
    let t = &lu.tape;
    match code {
        DATA_COMPRESSION => {
            let mut p = vec![0u8; 16];
            p[0] = DATA_COMPRESSION;
            p[1] = 14;
            let on = match pc {
                Pc::Current => t.compression.load(Ordering::Relaxed),
                Pc::Default => false,
                Pc::Changeable => true,
            };
            if pc == Pc::Changeable {
                p[2] = DCE;
            } else {
                p[2] = DCC | if on { DCE } else { 0 };
                p[3] = DDE;
                // compression / decompression algorithm: ALDC (03h) when compressing
                p[7] = if on { 0x03 } else { 0 };
                p[11] = 0x03;
            }
            Some(p)
        }
        DEVICE_CONFIGURATION => {
            let mut p = vec![0u8; 16];
            p[0] = DEVICE_CONFIGURATION;
            p[1] = 14;
            if pc != Pc::Changeable {
                p[10] = 0x18; // EEG: end of data generated; SEW: synchronise at early warning
                p[14] = u8::from(t.compression.load(Ordering::Relaxed));
            }
            Some(p)
        }
        CONTROL | INFO_EXCEPTIONS => page_bytes(lu, code, pc),
        _ => None,
    }
}

/// MODE SENSE(6) and MODE SENSE(10) of a tape drive.
pub(crate) fn mode_sense(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let dbd = cdb[1] & 0x08 != 0;
    // page 0: the header and block descriptor alone (Linux's st asks so)
    let SenseRequest {
        ten,
        pc,
        codes,
        alloc,
    } = sense_request(cdb, &PAGES, true)?;
    let t = &lu.tape;
    let mut bd = Vec::new();
    if !dbd {
        bd = vec![0u8; 8];
        if pc != Pc::Changeable {
            bd[0] = t.density.load(Ordering::Relaxed);
            bd[5..8].copy_from_slice(&t.block_len().to_be_bytes()[1..]);
        } else {
            bd[0] = 0xFF;
            bd[5..8].copy_from_slice(&[0xFF; 3]);
        }
    }
    let protected = lu.write_protected() || t.tape_protected.load(Ordering::Relaxed);
    // WP; BUFFERED MODE 1: writes complete once their data is in the drive's buffer
    let dev_specific = if protected { 0x80 } else { 0 } | 0x10;
    let pages = codes.iter().filter_map(|&c| page(lu, c, pc));
    let out = parameter_data(ten, dev_specific, false, &bd, pages);
    Ok(Action::data(truncate(out, alloc)))
}

/// MODE SELECT(6) and MODE SELECT(10) of a tape drive: the block descriptor sets the
/// density code and the block length; the pages change what they allow. Everything is
/// checked before anything changes.
pub(crate) fn mode_select(lu: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    let ten = cdb[0] == MODE_SELECT_10;
    let Some(data) = parameter_list(cdb, ctx.data_out)? else {
        return Ok(Action::good());
    };
    let hdr = if ten { 8 } else { 4 };
    let bd_len = if ten {
        usize::from(be16(data, 6))
    } else {
        usize::from(data[3])
    };
    if bd_len != 0 && bd_len != 8 {
        return Err(Sense::invalid_field_in_param_list(
            if ten { 6 } else { 3 },
            Some(7),
        ));
    }
    if data.len() < hdr + bd_len {
        return Err(Sense::param_list_length_error());
    }
    let t = &lu.tape;
    let mut block = None;
    if bd_len == 8 {
        let bd = &data[hdr..hdr + 8];
        let bl = be24(bd, 5);
        if bl > MAX_BLOCK {
            return Err(Sense::invalid_field_in_param_list(hdr + 5, Some(7)));
        }
        block = Some((bd[0], bl));
    }
    let mut pages: Vec<(u8, u8, u8)> = Vec::new();
    let mut off = hdr + bd_len;
    while off < data.len() {
        if data.len() - off < 2 {
            return Err(Sense::param_list_length_error());
        }
        let code = data[off] & 0x3F;
        if data[off] & 0x40 != 0 {
            return Err(Sense::invalid_field_in_param_list(off, Some(6)));
        }
        let plen = usize::from(data[off + 1]);
        if data.len() - off - 2 < plen {
            return Err(Sense::param_list_length_error());
        }
        let (Some(cur), Some(mask)) = (page(lu, code, Pc::Current), page(lu, code, Pc::Changeable))
        else {
            return Err(Sense::invalid_field_in_param_list(off, Some(5)));
        };
        let new = &data[off..off + 2 + plen];
        // the device configuration page is taken as it comes (its length checked): its
        // fields describe the drive's buffering, which a file does not have
        if code == DEVICE_CONFIGURATION {
            check_page(new, &cur, &vec![0xFF; cur.len()], off)?;
        } else {
            check_page(new, &cur, &mask, off)?;
        }
        pages.push((code, new[2], new[4]));
        off += 2 + plen;
    }
    let _guard = lu
        .state()
        .select_lock
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((density, bl)) = block {
        t.density.store(density, Ordering::Relaxed);
        t.block_len.store(bl, Ordering::Relaxed);
    }
    for (code, b2, b4) in pages {
        match code {
            DATA_COMPRESSION => t.compression.store(b2 & DCE != 0, Ordering::Relaxed),
            CONTROL | INFO_EXCEPTIONS => crate::mode::apply(lu, code, b2, b4),
            _ => {}
        }
    }
    Ok(Action::good())
}
