//! Mode parameters (SPC-4 7.5, SBC-3 6.4): MODE SENSE(6/10) and MODE SELECT(6/10) over the
//! Caching (08h), Control (0Ah) and Informational Exceptions Control (1Ch) pages. Only WCE
//! (caching page), D_SENSE and SWP (control page) are changeable; they live in the LU's
//! atomics. SWP = 1 write-protects the medium (DATA PROTECT / WRITE PROTECTED, WP set in
//! the mode parameter header) until cleared or a reset.
//! Saving is not supported (no PS bit, PC = saved and SP = 1 are rejected).

use std::sync::atomic::Ordering;

use crate::cdb::{be16, be24, be32, be64, top_bit, truncate};
use crate::ops::opcode::{MODE_SELECT_10, MODE_SENSE_10};
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// Page codes.
pub(crate) mod page {
    pub const CACHING: u8 = 0x08;
    pub const CONTROL: u8 = 0x0A;
    pub const INFO_EXCEPTIONS: u8 = 0x1C;
    pub const ALL: u8 = 0x3F;
}

const PAGES: [u8; 3] = [page::CACHING, page::CONTROL, page::INFO_EXCEPTIONS];

/// Device-specific parameter bits (SBC-3 6.4.2).
const WP: u8 = 0x80;
const DPOFUA: u8 = 0x10;

/// Page control field of MODE SENSE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pc {
    Current,
    Changeable,
    Default,
}

/// Caching mode page WCE bit (byte 2).
const WCE: u8 = 0x04;
/// Control mode page D_SENSE bit (byte 2).
const D_SENSE: u8 = 0x04;
/// Control mode page SWP bit (byte 4): software write protect.
const SWP: u8 = 0x08;

/// The page_0 format bytes of `code` for `pc`, or None if unsupported.
pub(crate) fn page_bytes(lu: &LogicalUnit, code: u8, pc: Pc) -> Option<Vec<u8>> {
    let st = lu.state();
    let flag = |cur: bool, default: bool, bit: u8| match pc {
        Pc::Current if cur => bit,
        Pc::Default if default => bit,
        Pc::Changeable => bit,
        _ => 0,
    };
    let changeable = pc == Pc::Changeable;
    Some(match code {
        page::CACHING => {
            let mut p = vec![0u8; 20];
            p[0] = page::CACHING;
            p[1] = 0x12;
            p[2] = flag(st.wce.load(Ordering::Relaxed), lu.params().write_cache, WCE); // RCD = 0
            p
        }
        page::CONTROL => {
            let mut p = vec![0u8; 12];
            p[0] = page::CONTROL;
            p[1] = 0x0A;
            p[2] = flag(st.d_sense.load(Ordering::Relaxed), false, D_SENSE);
            p[4] = flag(st.swp.load(Ordering::Relaxed), false, SWP);
            if !changeable {
                p[2] |= 0x02; // GLTSD: no log parameters saved; TST = 000b
                p[3] = 0x10; // queue algorithm modifier 1 (unrestricted reordering), QERR 00b
            }
            p
        }
        page::INFO_EXCEPTIONS => {
            let mut p = vec![0u8; 12];
            p[0] = page::INFO_EXCEPTIONS;
            p[1] = 0x0A;
            if !changeable {
                p[2] = 0x08; // DEXCPT: informational exceptions disabled; MRIE 0
            }
            p
        }
        _ => return None,
    })
}

/// MODE SENSE(6) and MODE SENSE(10).
pub(crate) fn mode_sense(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let dbd = cdb[1] & 0x08 != 0;
    let SenseRequest {
        ten,
        pc,
        codes,
        alloc,
    } = sense_request(cdb, &PAGES, false)?;
    let llbaa = ten && cdb[1] & 0x10 != 0;

    let p = lu.params();
    let bd: Vec<u8> = if dbd {
        Vec::new()
    } else if llbaa {
        let mut d = vec![0u8; 16];
        if pc != Pc::Changeable {
            d[0..8].copy_from_slice(&lu.num_blocks().to_be_bytes());
            d[12..16].copy_from_slice(&p.block_size.to_be_bytes());
        }
        d
    } else {
        let mut d = vec![0u8; 8];
        if pc != Pc::Changeable {
            let n = u32::try_from(lu.num_blocks()).unwrap_or(u32::MAX);
            d[0..4].copy_from_slice(&n.to_be_bytes());
            d[5..8].copy_from_slice(&p.block_size.to_be_bytes()[1..]);
        }
        d
    };
    let dev_specific = DPOFUA | if lu.write_protected() { WP } else { 0 };
    let pages = codes.iter().filter_map(|&c| page_bytes(lu, c, pc));
    let out = parameter_data(ten, dev_specific, llbaa && !dbd, &bd, pages);
    Ok(Action::data(truncate(out, alloc)))
}

/// A MODE SENSE(6)/(10) request of a device with the page list `pages` (its own page set,
/// `0x3F` for all of them; page 0, when `page_zero`, for the header and block descriptor
/// alone): (ten-byte form, page control, the pages asked for, allocation length). Subpage
/// 00h and FFh only; saved values are not supported.
pub(crate) struct SenseRequest<'p> {
    pub ten: bool,
    pub pc: Pc,
    pub codes: &'p [u8],
    pub alloc: usize,
}

pub(crate) fn sense_request<'p>(
    cdb: &[u8],
    pages: &'p [u8],
    page_zero: bool,
) -> Result<SenseRequest<'p>, Sense> {
    let ten = cdb[0] == MODE_SENSE_10;
    let pc = match cdb[2] >> 6 {
        0 => Pc::Current,
        1 => Pc::Changeable,
        2 => Pc::Default,
        _ => return Err(Sense::saving_parameters_not_supported()),
    };
    let alloc = if ten {
        usize::from(be16(cdb, 7))
    } else {
        usize::from(cdb[4])
    };
    let codes: &[u8] = match cdb[2] & 0x3F {
        page::ALL => pages,
        0 if page_zero => &[],
        c => match pages.iter().position(|&p| p == c) {
            Some(i) => &pages[i..=i],
            None => return Err(Sense::invalid_field_in_cdb(2, Some(5))),
        },
    };
    // no subpages: subpage 00h is page_0 format, FFh "all subpages" is the same set
    if cdb[3] != 0 && cdb[3] != 0xFF {
        return Err(Sense::invalid_field_in_cdb(3, Some(7)));
    }
    Ok(SenseRequest {
        ten,
        pc,
        codes,
        alloc,
    })
}

/// MODE SENSE parameter data: the (6) or (10) header with its device-specific parameter
/// (and LONGLBA), the block descriptor `bd`, the pages, the MODE DATA LENGTH.
pub(crate) fn parameter_data(
    ten: bool,
    dev_specific: u8,
    long_lba: bool,
    bd: &[u8],
    pages: impl Iterator<Item = Vec<u8>>,
) -> Vec<u8> {
    let mut out = if ten {
        let mut h = vec![0u8; 8];
        h[3] = dev_specific;
        h[4] = u8::from(long_lba);
        h[6..8].copy_from_slice(&(bd.len() as u16).to_be_bytes());
        h
    } else {
        vec![0, 0, dev_specific, bd.len() as u8]
    };
    out.extend_from_slice(bd);
    for pg in pages {
        out.extend_from_slice(&pg);
    }
    if ten {
        let n = u16::try_from(out.len() - 2).unwrap_or(u16::MAX);
        out[0..2].copy_from_slice(&n.to_be_bytes());
    } else {
        out[0] = u8::try_from(out.len() - 1).unwrap_or(u8::MAX);
    }
    out
}

/// The parameter list of MODE SELECT(6)/(10) `cdb` (`None`: PARAMETER LIST LENGTH 0), at
/// least its header long.
pub(crate) fn parameter_list<'a>(
    cdb: &[u8],
    data_out: &'a [u8],
) -> Result<Option<&'a [u8]>, Sense> {
    let ten = cdb[0] == MODE_SELECT_10;
    let len = if ten {
        usize::from(be16(cdb, 7))
    } else {
        usize::from(cdb[4])
    };
    if len == 0 {
        return Ok(None);
    }
    let data = data_out
        .get(..len)
        .ok_or_else(Sense::param_list_length_error)?;
    if data.len() < if ten { 8 } else { 4 } {
        return Err(Sense::param_list_length_error());
    }
    Ok(Some(data))
}

/// MODE SELECT(6) and MODE SELECT(10) with PF = 1. The whole parameter list is validated
/// before anything changes.
pub(crate) fn mode_select(lu: &LogicalUnit, cdb: &[u8], ctx: &Req<'_>) -> Result<Action, Sense> {
    let ten = cdb[0] == MODE_SELECT_10;
    if cdb[1] & 0x10 == 0 {
        // PF = 0: vendor-specific (SCSI-1) page format, not supported.
        return Err(Sense::invalid_field_in_cdb(1, Some(4)));
    }
    let Some(data) = parameter_list(cdb, ctx.data_out)? else {
        return Ok(Action::good());
    };
    let hdr = if ten { 8 } else { 4 };
    let (medium_at, bd_len, long) = if ten {
        (2, usize::from(be16(data, 6)), data[4] & 0x01 != 0)
    } else {
        (1, usize::from(data[3]), false)
    };
    if data[medium_at] != 0 {
        return Err(Sense::invalid_field_in_param_list(medium_at, Some(7)));
    }
    if ten && data[4] & 0xFE != 0 {
        return Err(Sense::invalid_field_in_param_list(
            4,
            Some(top_bit(data[4] & 0xFE)),
        ));
    }
    let bd_at = if ten { 6 } else { 3 };
    match (bd_len, long) {
        (0, _) | (8, false) | (16, true) => {}
        _ => return Err(Sense::invalid_field_in_param_list(bd_at, Some(7))),
    }
    if data.len() < hdr + bd_len {
        return Err(Sense::param_list_length_error());
    }
    if bd_len > 0 {
        check_block_descriptor(lu, &data[hdr..hdr + bd_len], hdr)?;
    }

    let mut changes: Vec<(u8, u8, u8)> = Vec::new(); // (page code, new byte 2, new byte 4)
    let mut off = hdr + bd_len;
    while off < data.len() {
        if data.len() - off < 2 {
            return Err(Sense::param_list_length_error());
        }
        let b0 = data[off];
        if b0 & 0x40 != 0 {
            return Err(Sense::invalid_field_in_param_list(off, Some(6))); // SPF: no subpages
        }
        let code = b0 & 0x3F;
        let plen = usize::from(data[off + 1]);
        if data.len() - off - 2 < plen {
            return Err(Sense::param_list_length_error());
        }
        let (Some(cur), Some(mask)) = (
            page_bytes(lu, code, Pc::Current),
            page_bytes(lu, code, Pc::Changeable),
        ) else {
            return Err(Sense::invalid_field_in_param_list(off, Some(5)));
        };
        let new = &data[off..off + 2 + plen];
        check_page(new, &cur, &mask, off)?;
        changes.push((code, new[2], new[4]));
        off += 2 + plen;
    }

    let st = lu.state();
    let _guard = st.select_lock.lock().unwrap_or_else(|e| e.into_inner());
    for (code, b2, b4) in changes {
        apply(lu, code, b2, b4);
    }
    Ok(Action::good())
}

/// Applies the changeable bits of a validated page (its bytes 2 and 4).
pub(crate) fn apply(lu: &LogicalUnit, code: u8, b2: u8, b4: u8) {
    let st = lu.state();
    match code {
        page::CACHING => st.wce.store(b2 & WCE != 0, Ordering::Relaxed),
        page::CONTROL => {
            st.d_sense.store(b2 & D_SENSE != 0, Ordering::Relaxed);
            st.swp.store(b4 & SWP != 0, Ordering::Relaxed);
        }
        _ => {}
    }
}

/// Checks a page of a MODE SELECT parameter list at `off` against the current values and
/// what may change (`cur`, `mask`: [`page_bytes`] current and changeable).
pub(crate) fn check_page(new: &[u8], cur: &[u8], mask: &[u8], off: usize) -> Result<(), Sense> {
    if new.len() != cur.len() {
        return Err(Sense::invalid_field_in_param_list(off + 1, Some(7)));
    }
    for i in 2..cur.len() {
        let bad = (new[i] ^ cur[i]) & !mask[i];
        if bad != 0 {
            return Err(Sense::invalid_field_in_param_list(
                off + i,
                Some(top_bit(bad)),
            ));
        }
    }
    Ok(())
}

/// A block descriptor may restate the LU's geometry (or leave the block count 0) but not
/// change it.
fn check_block_descriptor(lu: &LogicalUnit, bd: &[u8], at: usize) -> Result<(), Sense> {
    let p = lu.params();
    let (count, count_ok, len_at, len) = if bd.len() == 16 {
        let n = be64(bd, 0);
        (n, n == lu.num_blocks(), 12, be32(bd, 12))
    } else {
        let n = u64::from(be32(bd, 0));
        let cur = lu.num_blocks().min(u64::from(u32::MAX));
        if bd[4] != 0 {
            return Err(Sense::invalid_field_in_param_list(at + 4, Some(7))); // density code
        }
        (n, n == cur, 5, be24(bd, 5))
    };
    if count != 0 && !count_ok {
        return Err(Sense::invalid_field_in_param_list(at, Some(7)));
    }
    if len != p.block_size {
        return Err(Sense::invalid_field_in_param_list(at + len_at, Some(7)));
    }
    if bd.len() == 16 && be32(bd, 8) != 0 {
        return Err(Sense::invalid_field_in_param_list(at + 8, Some(7)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;

    fn sense6(page: u8, sub: u8, alloc: u8) -> [u8; 6] {
        [0x1A, 0, page, sub, alloc, 0]
    }

    #[test]
    fn software_write_protect() {
        let lu = lu();
        // changeable mask shows SWP (control page byte 4 bit 3)
        let d = complete(&lu, &sense6(0x0A, 0, 255)).data;
        let ch = complete(&lu, &[0x1A, 0, 0x4A, 0, 255, 0]).data;
        let bd = usize::from(d[3]);
        assert_eq!(ch[4 + bd + 4] & 0x08, 0x08);
        assert_eq!(d[4 + bd + 4] & 0x08, 0);
        // MODE SELECT(6) with SWP = 1
        let mut page = d[4 + bd..].to_vec();
        page[4] |= 0x08;
        let mut list = vec![0, 0, 0, 0];
        list.extend_from_slice(&page);
        let c = complete_out(&lu, &[0x15, 0x10, 0, 0, list.len() as u8, 0], &list);
        assert_eq!(c.status, 0, "{c:?}");
        assert!(lu.write_protected());
        assert_eq!(
            complete(&lu, &sense6(0x08, 0, 255)).data[2] & 0x80,
            0x80,
            "WP"
        );
        let w = complete_out(&lu, &[0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0], &[0; 512]);
        assert_eq!(check(&w), (7, 0x27, 0));
        // a reset restores the default (not protected)
        lu.logical_unit_reset();
        assert!(!lu.write_protected());
    }

    #[test]
    fn caching_page_reflects_wce() {
        let lu = lu();
        let d = complete(&lu, &sense6(0x08, 0, 255)).data;
        assert_eq!(d[0] as usize, d.len() - 1);
        assert_eq!(d[2], 0x10); // DPOFUA, not WP
        assert_eq!(d[3], 8);
        assert_eq!(&d[4..8], &2048u32.to_be_bytes());
        assert_eq!(&d[9..12], &[0, 2, 0]);
        assert_eq!(&d[12..14], &[0x08, 0x12]);
        assert_eq!(d[14] & 0x04, 0x04);
        assert_eq!(d.len(), 4 + 8 + 20);
        let off = lu_with(|p| p.write_cache = false);
        let d = complete(&off, &[0x1A, 0x08, 0x08, 0, 255, 0]).data;
        assert_eq!(d[3], 0);
        assert_eq!(d[6] & 0x04, 0);
    }

    #[test]
    fn page_control_values() {
        let lu = lu_with(|p| p.write_cache = false);
        // changeable
        let d = complete(&lu, &[0x1A, 0x08, 0x48, 0, 255, 0]).data;
        assert_eq!(d[6], 0x04);
        let d = complete(&lu, &[0x1A, 0x08, 0x4A, 0, 255, 0]).data;
        assert_eq!(&d[4..8], &[0x0A, 0x0A, 0x04, 0]);
        // default
        let d = complete(&lu, &[0x1A, 0x08, 0x88, 0, 255, 0]).data;
        assert_eq!(d[6], 0);
        // saved
        assert_eq!(
            check(&complete(&lu, &[0x1A, 0x08, 0xC8, 0, 255, 0])),
            (5, 0x39, 0)
        );
    }

    #[test]
    fn all_pages_and_subpages() {
        let lu = lu();
        let all = complete(&lu, &sense6(0x3F, 0, 255)).data;
        assert_eq!(all.len(), 4 + 8 + 20 + 12 + 12);
        assert_eq!(complete(&lu, &sense6(0x3F, 0xFF, 255)).data, all);
        assert_eq!(
            complete(&lu, &sense6(0x0A, 0xFF, 255)).data.len(),
            4 + 8 + 12
        );
        let c = complete(&lu, &sense6(0x08, 0x01, 255));
        assert_eq!(check(&c), (5, 0x24, 0));
        assert_eq!(&c.sense[15..18], &[0xCF, 0, 3]);
        let c = complete(&lu, &sense6(0x19, 0, 255));
        assert_eq!(check(&c), (5, 0x24, 0));
        assert_eq!(&c.sense[15..18], &[0xCD, 0, 2]);
        // truncation keeps the full mode data length
        let d = complete(&lu, &sense6(0x3F, 0, 3)).data;
        assert_eq!(d, vec![55, 0, 0x10]);
    }

    #[test]
    fn mode_sense_10_long_lba_and_wp() {
        let lu = lu_with(|p| p.readonly = true);
        let d = complete(&lu, &[0x5A, 0x10, 0x1C, 0, 0, 0, 0, 0, 255, 0]).data;
        assert_eq!(u16::from_be_bytes([d[0], d[1]]) as usize, d.len() - 2);
        assert_eq!(d[3], 0x90);
        assert_eq!(d[4], 1);
        assert_eq!(&d[6..8], &[0, 16]);
        assert_eq!(&d[8..16], &2048u64.to_be_bytes());
        assert_eq!(&d[20..24], &512u32.to_be_bytes());
        assert_eq!(&d[24..28], &[0x1C, 0x0A, 0x08, 0]);
        let d = complete(&lu, &[0x5A, 0x08, 0x3F, 0, 0, 0, 0, 0, 255, 0]).data;
        assert_eq!(d.len(), 8 + 20 + 12 + 12);
        assert_eq!(&d[6..8], &[0, 0]);
    }

    fn select6(params: &[u8]) -> [u8; 6] {
        [0x15, 0x10, 0, 0, params.len() as u8, 0]
    }

    #[test]
    fn mode_select_changes_wce_and_dsense() {
        let lu = lu();
        assert!(lu.write_cache_enabled());
        let mut caching = complete(&lu, &[0x1A, 0x08, 0x08, 0, 255, 0]).data;
        caching[0] = 0;
        caching[2] = 0;
        caching[6] &= !0x04;
        assert_eq!(complete_out(&lu, &select6(&caching), &caching).status, 0);
        assert!(!lu.write_cache_enabled());
        let d = complete(&lu, &sense6(0x08, 0, 255)).data;
        assert_eq!(d[14] & 0x04, 0);

        // D_SENSE via MODE SELECT(10) with a block descriptor
        let mut p = vec![0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 2, 0];
        p.extend_from_slice(&[0x0A, 0x0A, 0x06, 0x10, 0, 0, 0, 0, 0, 0, 0, 0]);
        let cdb = [0x55, 0x10, 0, 0, 0, 0, 0, 0, p.len() as u8, 0];
        assert_eq!(complete_out(&lu, &cdb, &p).status, 0);
        assert!(lu.descriptor_sense());
        // now errors use descriptor sense
        let c = complete(&lu, &[0x12, 2, 0, 0, 96, 0]);
        assert_eq!(c.sense[0], 0x72);
        assert_eq!(check(&c), (5, 0x24, 0));
    }

    #[test]
    fn mode_select_rejects() {
        let lu = lu();
        let caching = {
            let mut d = complete(&lu, &[0x1A, 0x08, 0x08, 0, 255, 0]).data;
            d[0] = 0;
            d[2] = 0;
            d
        };
        // SP = 1
        let mut cdb = select6(&caching);
        cdb[1] = 0x11;
        let c = complete_out(&lu, &cdb, &caching);
        assert_eq!(check(&c), (5, 0x24, 0));
        assert_eq!(&c.sense[15..18], &[0xC8, 0, 1]);
        // PF = 0
        cdb[1] = 0;
        assert_eq!(check(&complete_out(&lu, &cdb, &caching)), (5, 0x24, 0));
        // RCD is not changeable
        let mut p = caching.clone();
        p[6] |= 0x01;
        let c = complete_out(&lu, &select6(&p), &p);
        assert_eq!(check(&c), (5, 0x26, 0));
        assert_eq!(&c.sense[15..18], &[0x88, 0, 6]);
        // wrong page length
        let mut p = caching.clone();
        p[5] = 0x10;
        assert_eq!(check(&complete_out(&lu, &select6(&p), &p)), (5, 0x26, 0));
        // truncated page
        let p = &caching[..20];
        assert_eq!(check(&complete_out(&lu, &select6(p), p)), (5, 0x1A, 0));
        // data_out shorter than the parameter list length
        assert_eq!(
            check(&complete_out(&lu, &select6(&caching), &caching[..10])),
            (5, 0x1A, 0)
        );
        // block size change in a block descriptor
        let mut p = vec![0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x10, 0];
        p.extend_from_slice(&caching[4..]);
        assert_eq!(check(&complete_out(&lu, &select6(&p), &p)), (5, 0x26, 0));
        // unsupported page
        let p = [0, 0, 0, 0, 0x19, 2, 0, 0];
        assert_eq!(check(&complete_out(&lu, &select6(&p), &p)), (5, 0x26, 0));
        // a rejected list changes nothing, even if an earlier page was fine
        let mut p = caching.clone();
        p[6] &= !0x04;
        p.extend_from_slice(&[0x0A, 0x0A, 0x04, 0x11, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(check(&complete_out(&lu, &select6(&p), &p)), (5, 0x26, 0));
        assert!(lu.write_cache_enabled());
        // zero-length list is fine
        assert_eq!(complete(&lu, &[0x15, 0x10, 0, 0, 0, 0]).status, 0);
    }
}
