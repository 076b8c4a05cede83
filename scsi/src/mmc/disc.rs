//! The MMC-6 commands about a CD/DVD drive and its disc: GET CONFIGURATION (the DVD-ROM
//! profile and its features), READ TOC/PMA/ATIP (one data track), READ DISC INFORMATION (a
//! finalized single-session disc), GET EVENT STATUS NOTIFICATION (polled media events),
//! MECHANISM STATUS and MODE SENSE(10) with the MM Capabilities and Mechanical Status page.
//! The disc is whatever the logical unit holds: present unless ejected, its capacity the
//! LU's.

use crate::cdb::{be16, truncate};
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// Profile numbers (MMC-6 5.3.1).
const PROFILE_NONE: u16 = 0x0000;
const PROFILE_CD_ROM: u16 = 0x0008;
const PROFILE_DVD_ROM: u16 = 0x0010;

/// Media event codes (GET EVENT STATUS NOTIFICATION, class 4).
pub(crate) const EVENT_NEW_MEDIA: u8 = 2;
pub(crate) const EVENT_MEDIA_REMOVAL: u8 = 3;

/// ADR 1 (Q sub-channel position), CONTROL 4 (data track, recorded uninterrupted).
const ADR_CONTROL_DATA: u8 = 0x14;
/// The lead-out's track number.
const LEAD_OUT: u8 = 0xAA;

fn disc_present(lu: &LogicalUnit) -> bool {
    !lu.medium_ejected()
}

/// LBA as MSF (minute, second, frame) with the 2-second (150-frame) lead-in offset, in the
/// 4-byte address field: 0, M, S, F.
fn msf(lba: u64) -> [u8; 4] {
    let f = lba + 150;
    let m = (f / (60 * 75)).min(255) as u8;
    [0, m, ((f / 75) % 60) as u8, (f % 75) as u8]
}

fn address(lba: u64, as_msf: bool) -> [u8; 4] {
    if as_msf {
        msf(lba)
    } else {
        u32::try_from(lba).unwrap_or(u32::MAX).to_be_bytes()
    }
}

/// READ TOC/PMA/ATIP: format 0 (the TOC: track 1 and the lead-out) and 1 (session
/// information: one session starting at track 1), in LBA or MSF form.
pub(crate) fn read_toc(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let as_msf = cdb[1] & 0x02 != 0;
    let format = cdb[2] & 0x0F;
    let track = cdb[6];
    let alloc = usize::from(be16(cdb, 7));
    let mut d = vec![0u8, 0, 1, 1]; // length (below), first and last track / session
    match format {
        0 => {
            let mut descriptor = |number: u8, lba: u64| {
                d.extend_from_slice(&[0, ADR_CONTROL_DATA, number, 0]);
                d.extend_from_slice(&address(lba, as_msf));
            };
            match track {
                0 | 1 => {
                    descriptor(1, 0);
                    descriptor(LEAD_OUT, lu.num_blocks());
                }
                LEAD_OUT => descriptor(LEAD_OUT, lu.num_blocks()),
                _ => return Err(Sense::invalid_field_in_cdb(6, Some(7))),
            }
        }
        1 => {
            d.extend_from_slice(&[0, ADR_CONTROL_DATA, 1, 0]);
            d.extend_from_slice(&address(0, as_msf));
        }
        _ => return Err(Sense::invalid_field_in_cdb(2, Some(3))),
    }
    let len = (d.len() - 2) as u16;
    d[0..2].copy_from_slice(&len.to_be_bytes());
    Ok(Action::data(truncate(d, alloc)))
}

/// One feature descriptor: code, version, persistent, current, data.
fn feature(
    out: &mut Vec<u8>,
    code: u16,
    version: u8,
    persistent: bool,
    current: bool,
    data: &[u8],
) {
    out.extend_from_slice(&code.to_be_bytes());
    out.push((version << 2) | (u8::from(persistent) << 1) | u8::from(current));
    out.push(data.len() as u8);
    out.extend_from_slice(data);
}

/// GET CONFIGURATION: the DVD-ROM profile (current while a disc is in) and the features of
/// a read-only drive with a tray: Profile List, Core, Morphing, Removable Medium, Random
/// Readable, DVD Read. RT 00b: every feature from the starting number; 01b: the current
/// ones; 10b: the starting one alone.
pub(crate) fn get_configuration(
    lu: &LogicalUnit,
    cdb: &[u8],
    _: &Req<'_>,
) -> Result<Action, Sense> {
    let rt = cdb[1] & 0x03;
    let start = be16(cdb, 2);
    let alloc = usize::from(be16(cdb, 7));
    if rt == 0b11 {
        return Err(Sense::invalid_field_in_cdb(1, Some(1)));
    }
    let disc = disc_present(lu);
    let current_profile = if disc { PROFILE_DVD_ROM } else { PROFILE_NONE };
    let mut profiles = Vec::new();
    for (p, cur) in [(PROFILE_DVD_ROM, disc), (PROFILE_CD_ROM, false)] {
        profiles.extend_from_slice(&p.to_be_bytes());
        profiles.extend_from_slice(&[u8::from(cur), 0]);
    }
    let lock = if lu.medium_removal_prevented() {
        0x02
    } else {
        0
    };
    let block = lu.params().block_size.to_be_bytes();
    // (code, version, persistent, current, data)
    let features: [(u16, u8, bool, bool, Vec<u8>); 6] = [
        (0x0000, 0, true, true, profiles),
        // Core: physical interface 1 (SCSI family), DBE
        (0x0001, 2, true, true, vec![0, 0, 0, 1, 0x01, 0, 0, 0]),
        // Morphing: no asynchronous events, no operational change events
        (0x0002, 1, true, true, vec![0, 0, 0, 0]),
        // Removable Medium: tray (001b), eject, lock; the lock state
        (
            0x0003,
            0,
            true,
            true,
            vec![0x20 | 0x08 | 0x01 | lock, 0, 0, 0],
        ),
        // Random Readable: block length, blocking 16 (a DVD ECC block), no page present
        (
            0x0010,
            0,
            false,
            disc,
            vec![block[0], block[1], block[2], block[3], 0, 16, 0, 0],
        ),
        // DVD Read
        (0x001F, 0, false, disc, Vec::new()),
    ];
    let mut d = vec![0u8; 8];
    d[6..8].copy_from_slice(&current_profile.to_be_bytes());
    for (code, version, persistent, current, data) in &features {
        let wanted = match rt {
            0b00 => *code >= start,
            0b01 => *code >= start && (*current || *persistent),
            _ => *code == start,
        };
        if wanted {
            feature(&mut d, *code, *version, *persistent, *current, data);
        }
    }
    let len = (d.len() - 4) as u32;
    d[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(Action::data(truncate(d, alloc)))
}

/// GET EVENT STATUS NOTIFICATION, polled only (asynchronous notification is not
/// supported): the media class — the last load or eject not reported yet (reported once),
/// whether a disc is in and the tray open. Any other class asked for: "no event available".
pub(crate) fn get_event_status(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    if cdb[1] & 0x01 == 0 {
        return Err(Sense::invalid_field_in_cdb(1, Some(0)));
    }
    let classes = cdb[4];
    let alloc = usize::from(be16(cdb, 7));
    const MEDIA_CLASS: u8 = 0x10;
    let d = if classes & MEDIA_CLASS != 0 {
        let event = lu.take_media_event();
        let disc = disc_present(lu);
        let status = (u8::from(disc) << 1) | u8::from(!disc);
        vec![0, 6, 4, MEDIA_CLASS, event, status, 0, 0]
    } else {
        vec![0, 2, 0x80, MEDIA_CLASS]
    };
    Ok(Action::data(truncate(d, alloc)))
}

/// READ DISC INFORMATION, standard data (type 000b): a finalized disc of one complete
/// session with one track.
pub(crate) fn read_disc_information(
    _: &LogicalUnit,
    cdb: &[u8],
    _: &Req<'_>,
) -> Result<Action, Sense> {
    if cdb[1] & 0x07 != 0 {
        return Err(Sense::invalid_field_in_cdb(1, Some(2)));
    }
    let alloc = usize::from(be16(cdb, 7));
    let mut d = vec![0u8; 34];
    d[0..2].copy_from_slice(&32u16.to_be_bytes());
    d[2] = 0x0E; // not erasable; last session complete (11b); disc finalized (10b)
    d[3] = 1; // first track on the disc
    d[4] = 1; // sessions
    d[5] = 1; // first track in the last session
    d[6] = 1; // last track in the last session
    d[16..24].fill(0xFF); // no lead-in / lead-out start to report: finalized
    Ok(Action::data(truncate(d, alloc)))
}

/// MECHANISM STATUS: no changer, the mechanism idle, the tray open while no disc is in.
pub(crate) fn mechanism_status(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let alloc = usize::from(be16(cdb, 8));
    let open = if disc_present(lu) { 0 } else { 0x10 };
    let d = vec![0, open, 0, 0, 0, 0, 0, 0];
    Ok(Action::data(truncate(d, alloc)))
}

/// The MM Capabilities and Mechanical Status page (2Ah): reads DVD-ROM, writes nothing, a
/// tray that ejects and locks, the lock's state.
fn capabilities_page(lu: &LogicalUnit, changeable: bool) -> Vec<u8> {
    let mut p = vec![0u8; 22];
    p[0] = 0x2A;
    p[1] = 20;
    if changeable {
        return p;
    }
    p[2] = 0x08; // DVD-ROM read
    let lock = if lu.medium_removal_prevented() {
        0x02
    } else {
        0
    };
    p[6] = 0x20 | 0x08 | 0x01 | lock; // tray, eject, lock, lock state
    // maximum and current read speed (kB/s, obsolete but read by Linux's sr): 40x CD
    p[8..10].copy_from_slice(&7056u16.to_be_bytes());
    p[14..16].copy_from_slice(&7056u16.to_be_bytes());
    p
}

/// MODE SENSE(10) of a CD/DVD drive, and MODE SENSE(6), which MMC does not define but
/// Linux's sr driver asks first for the capabilities page (with no fallback to the 10-byte
/// form, it would take the drive for a "scsi-1" one without DVD, eject or lock): the MM
/// Capabilities page (2Ah, or all pages 3Fh), current, changeable (nothing) or default
/// values; no block descriptors (MMC has none).
pub(crate) fn mode_sense(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let six = cdb[0] == crate::ops::opcode::MODE_SENSE_6;
    let pc = cdb[2] >> 6;
    if pc == 3 {
        return Err(Sense::saving_parameters_not_supported());
    }
    let code = cdb[2] & 0x3F;
    if code != 0x2A && code != 0x3F {
        return Err(Sense::invalid_field_in_cdb(2, Some(5)));
    }
    if cdb[3] != 0 && cdb[3] != 0xFF {
        return Err(Sense::invalid_field_in_cdb(3, Some(7)));
    }
    let page = capabilities_page(lu, pc == 1);
    let (alloc, d) = if six {
        let mut d = vec![(3 + page.len()) as u8, 0, 0, 0];
        d.extend_from_slice(&page);
        (usize::from(cdb[4]), d)
    } else {
        let mut d = vec![0u8; 8];
        d[0..2].copy_from_slice(&((6 + page.len()) as u16).to_be_bytes());
        d.extend_from_slice(&page);
        (usize::from(be16(cdb, 7)), d)
    };
    Ok(Action::data(truncate(d, alloc)))
}
