//! Third-party copy (SPC-4 6.4 EXTENDED COPY (LID1), 6.18 RECEIVE COPY RESULTS): parsing and
//! checking the EXTENDED COPY parameter list (header, identification CSCD descriptors E4h,
//! block → block segment descriptors 02h) into a [`CopyJob`] the server runs, the limits the
//! copy manager reports (OPERATING PARAMETERS), and the per-I_T-nexus, per-list-identifier
//! copy status that RECEIVE COPY RESULTS (COPY STATUS, RECEIVE DATA, FAILED SEGMENT DETAILS)
//! reports (LU ID TYPE and NUL, obsolete in SPC-4, are ignored). No I/O: the server resolves CSCD designators to logical units, moves the data
//! and reports the outcome with [`LogicalUnit::copy_finished`].

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::cdb::{be16, be32, be64, truncate};
use crate::nexus::{Nexus, NexusId};
use crate::sense::{FieldPointer, Sense, key};
use crate::{Action, Completion, LogicalUnit, Req};

/// Largest number of CSCD descriptors in one parameter list.
pub const MAX_CSCD_DESCRIPTORS: u16 = 8;
/// Largest number of segment descriptors in one parameter list.
pub const MAX_SEGMENT_DESCRIPTORS: u16 = 16;
/// Length of an identification CSCD descriptor and of a block → block segment descriptor.
pub const CSCD_LEN: usize = 32;
pub const B2B_SEGMENT_LEN: usize = 28;
/// Largest CSCD + segment descriptor list length (room for the maximum counts).
pub const MAX_DESCRIPTOR_LIST_LEN: u32 =
    MAX_CSCD_DESCRIPTORS as u32 * CSCD_LEN as u32 + MAX_SEGMENT_DESCRIPTORS as u32 * 28;
/// Largest number of bytes one segment descriptor may copy.
pub const MAX_SEGMENT_BYTES: u32 = 256 << 20;
/// Copy operations (running or with status held) remembered per logical unit.
pub const MAX_HELD_COPIES: usize = 64;
/// Copy operations that may run at once on one logical unit.
pub const MAX_CONCURRENT_COPIES: u8 = 16;

/// Descriptor type codes.
pub const SEG_BLOCK_TO_BLOCK: u8 = 0x02;
pub const CSCD_IDENTIFICATION: u8 = 0xE4;
/// The descriptor type codes this copy manager implements (OPERATING PARAMETERS).
pub const IMPLEMENTED_DESCRIPTORS: [u8; 2] = [SEG_BLOCK_TO_BLOCK, CSCD_IDENTIFICATION];

/// RECEIVE COPY RESULTS service actions.
pub const SA_COPY_STATUS: u8 = 0x00;
pub const SA_RECEIVE_DATA: u8 = 0x01;
pub const SA_OPERATING_PARAMETERS: u8 = 0x03;
pub const SA_FAILED_SEGMENT_DETAILS: u8 = 0x04;

/// Sense key COPY ABORTED.
pub const COPY_ABORTED: u8 = 0x0A;

const HEADER_LEN: usize = 16;

/// COPY ABORTED / COPY TARGET DEVICE NOT REACHABLE (0Dh/02h): a CSCD that names no
/// logical unit of this target system, or a null device where data must move.
pub const fn copy_target_not_reachable() -> Sense {
    Sense::new(COPY_ABORTED, 0x0D, 0x02)
}

/// COPY ABORTED / INCORRECT COPY TARGET DEVICE TYPE (0Dh/03h): the CSCD's disk block length
/// is not the logical unit's.
pub const fn incorrect_copy_target_type() -> Sense {
    Sense::new(COPY_ABORTED, 0x0D, 0x03)
}

/// COPY ABORTED / THIRD PARTY DEVICE FAILURE (0Dh/01h): reading or writing a copy target
/// failed.
pub const fn third_party_device_failure() -> Sense {
    Sense::new(COPY_ABORTED, 0x0D, 0x01)
}

/// COPY ABORTED / NO ADDITIONAL SENSE INFORMATION: a segment reaches beyond the capacity of
/// its source or destination (the copy target would answer LBA OUT OF RANGE).
pub const fn copy_range_beyond_capacity() -> Sense {
    Sense::new(COPY_ABORTED, 0x00, 0x00)
}

/// COPY ABORTED / UNEXPECTED INEXACT SEGMENT (26h/0Ah): the segment's bytes are not a whole
/// number of destination (or source) blocks.
pub const fn unexpected_inexact_segment() -> Sense {
    Sense::new(COPY_ABORTED, 0x26, 0x0A)
}

fn param_err(byte: usize, bit: Option<u8>) -> Sense {
    Sense::invalid_field_in_param_list(byte, bit)
}

fn with_param_field(s: Sense, byte: usize) -> Sense {
    s.with_field(FieldPointer {
        in_cdb: false,
        byte: u16::try_from(byte).unwrap_or(u16::MAX),
        bit: None,
    })
}

/// A designation descriptor (SPC-4 7.8.6.1) naming a logical unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Designator {
    pub code_set: u8,
    pub association: u8,
    pub designator_type: u8,
    pub value: Vec<u8>,
}

impl Designator {
    /// Designator type NAA.
    pub const TYPE_NAA: u8 = 3;

    /// The NAA designator of a logical unit whose `LuParams::naa_id` is `naa_id` (the one
    /// VPD page 83h reports)?
    pub fn names_naa_id(&self, naa_id: u64) -> bool {
        self.designator_type == Self::TYPE_NAA
            && self.association == 0
            && self.value == crate::naa6(naa_id)
    }
}

/// One identification CSCD descriptor (E4h) for a block device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cscd {
    pub designator: Designator,
    /// DISK BLOCK LENGTH: must be the logical unit's block length.
    pub block_len: u32,
}

/// One block → block segment descriptor (02h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub src: u16,
    pub dst: u16,
    /// DC: `blocks` counts destination blocks (else source blocks).
    pub dc: bool,
    pub blocks: u16,
    pub src_lba: u64,
    pub dst_lba: u64,
}

impl Segment {
    /// Bytes this segment moves, given the source and destination block lengths; `Err` with
    /// UNEXPECTED INEXACT SEGMENT when that is not whole blocks on both sides.
    pub fn bytes(&self, src_bs: u32, dst_bs: u32) -> Result<u64, Sense> {
        let unit = if self.dc { dst_bs } else { src_bs };
        let n = u64::from(self.blocks) * u64::from(unit);
        if src_bs == 0 || dst_bs == 0 || n % u64::from(src_bs) != 0 || n % u64::from(dst_bs) != 0 {
            return Err(unexpected_inexact_segment());
        }
        Ok(n)
    }
}

/// A checked EXTENDED COPY parameter list: what the server must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyJob {
    /// The I_T nexus the command came from (copy status is kept per nexus).
    pub nexus: NexusId,
    /// Its identity: the copy manager reads and writes on its behalf
    /// ([`LogicalUnit::copy_access`]).
    pub issuer: Nexus,
    pub list_id: u8,
    /// Copy status is held for RECEIVE COPY RESULTS (LIST ID USAGE 00b or 10b).
    pub held: bool,
    pub cscds: Vec<Cscd>,
    pub segments: Vec<Segment>,
}

/// The parameter list header and descriptors, checked in the order SPC-4 lists the errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamList {
    pub list_id: u8,
    /// LIST ID USAGE (byte 1 bits 4-3).
    pub list_id_usage: u8,
    pub cscds: Vec<Cscd>,
    pub segments: Vec<Segment>,
}

/// Parses an EXTENDED COPY (LID1) parameter list (`data`: the Data-Out bytes, at most the
/// CDB's PARAMETER LIST LENGTH of them, at least one byte). Never panics.
pub fn parse_param_list(data: &[u8]) -> Result<ParamList, Sense> {
    if data.len() < HEADER_LEN {
        return Err(Sense::param_list_length_error());
    }
    let list_id = data[0];
    if data[1] & 0xC0 != 0 {
        return Err(param_err(1, Some(7)));
    }
    let list_id_usage = (data[1] >> 3) & 0x03;
    match list_id_usage {
        0b01 => return Err(param_err(1, Some(4))),
        0b11 if list_id != 0 => return Err(param_err(0, Some(7))),
        _ => {}
    }
    let cscd_len = usize::from(be16(data, 2));
    if data[4..8].iter().any(|&b| b != 0) {
        return Err(param_err(4, Some(7)));
    }
    let seg_len = be32(data, 8) as usize;
    let inline_len = be32(data, 12) as usize;
    let total = HEADER_LEN as u64 + cscd_len as u64 + seg_len as u64 + inline_len as u64;
    if total > data.len() as u64 {
        return Err(Sense::param_list_length_error());
    }
    if cscd_len as u64 + seg_len as u64 > u64::from(MAX_DESCRIPTOR_LIST_LEN) {
        return Err(Sense::param_list_length_error());
    }
    if inline_len != 0 {
        // no supported segment descriptor uses inline data (MAXIMUM INLINE DATA LENGTH 0)
        return Err(param_err(12, Some(7)));
    }
    let cscd_area = &data[HEADER_LEN..HEADER_LEN + cscd_len];
    let seg_base = HEADER_LEN + cscd_len;
    let seg_area = &data[seg_base..seg_base + seg_len];
    let cscds = parse_cscds(cscd_area)?;
    let segments = parse_segments(seg_area, seg_base, cscds.len())?;
    Ok(ParamList {
        list_id,
        list_id_usage,
        cscds,
        segments,
    })
}

/// Length of a CSCD descriptor with type code `code` (SPC-4 table 110: 64 bytes for the
/// IPv6 and IP copy service descriptors, 32 for all others).
fn cscd_desc_len(code: u8) -> usize {
    match code {
        0xEA | 0xEB => 64,
        _ => CSCD_LEN,
    }
}

fn parse_cscds(area: &[u8]) -> Result<Vec<Cscd>, Sense> {
    // count first: TOO MANY TARGET DESCRIPTORS comes before anything about their contents
    let mut offsets = Vec::new();
    let mut at = 0usize;
    while at < area.len() {
        if offsets.len() >= usize::from(MAX_CSCD_DESCRIPTORS) {
            return Err(Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x06));
        }
        offsets.push(at);
        at += cscd_desc_len(area[at]);
    }
    if at != area.len() {
        // the last descriptor runs past the CSCD descriptor list
        return Err(Sense::param_list_length_error());
    }
    offsets
        .into_iter()
        .map(|o| parse_cscd(&area[o..o + CSCD_LEN], HEADER_LEN + o))
        .collect()
}

fn parse_cscd(d: &[u8], base: usize) -> Result<Cscd, Sense> {
    if d[0] != CSCD_IDENTIFICATION {
        return Err(with_param_field(
            Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x07),
            base,
        ));
    }
    // byte 1 bits 7-5: LU ID TYPE and NUL of SPC-3, obsolete in SPC-4: ignored
    if d[1] & 0x1F != crate::inquiry::PDT_DISK {
        // only block devices can be copy targets here
        return Err(with_param_field(
            Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x07),
            base + 1,
        ));
    }
    let code_set = d[4] & 0x0F;
    let association = (d[5] >> 4) & 0x03;
    let designator_type = d[5] & 0x0F;
    let len = usize::from(d[7]);
    if len > 16 {
        return Err(param_err(base + 7, Some(7)));
    }
    let value = d[8..8 + len].to_vec();
    // device type specific parameters (block): PAD (byte 28 bit 2), DISK BLOCK LENGTH
    let block_len = u32::from(d[29]) << 16 | u32::from(d[30]) << 8 | u32::from(d[31]);
    Ok(Cscd {
        designator: Designator {
            code_set,
            association,
            designator_type,
            value,
        },
        block_len,
    })
}

fn parse_segments(area: &[u8], base: usize, cscds: usize) -> Result<Vec<Segment>, Sense> {
    let mut offsets = Vec::new();
    let mut at = 0usize;
    while at < area.len() {
        if offsets.len() >= usize::from(MAX_SEGMENT_DESCRIPTORS) {
            return Err(Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x08));
        }
        if at + 4 > area.len() {
            return Err(Sense::param_list_length_error());
        }
        offsets.push(at);
        at += 4 + usize::from(be16(area, at + 2));
    }
    if at != area.len() {
        return Err(Sense::param_list_length_error());
    }
    let mut segments = Vec::with_capacity(offsets.len());
    for o in offsets {
        let d = &area[o..];
        let b = base + o;
        if d[0] != SEG_BLOCK_TO_BLOCK {
            return Err(with_param_field(
                Sense::new(key::ILLEGAL_REQUEST, 0x26, 0x09),
                b,
            ));
        }
        if usize::from(be16(d, 2)) != B2B_SEGMENT_LEN - 4 {
            return Err(param_err(b + 2, Some(7)));
        }
        if d[1] & 0xFC != 0 {
            return Err(param_err(b + 1, Some(7)));
        }
        let seg = Segment {
            src: be16(d, 4),
            dst: be16(d, 6),
            dc: d[1] & 0x02 != 0,
            blocks: be16(d, 10),
            src_lba: be64(d, 12),
            dst_lba: be64(d, 20),
        };
        if usize::from(seg.src) >= cscds || usize::from(seg.dst) >= cscds {
            // the index names no CSCD descriptor of the list
            return Err(copy_target_not_reachable());
        }
        segments.push(seg);
    }
    Ok(segments)
}

/// What happened to one copy operation, as COPY STATUS reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum CopyState {
    Running,
    Done {
        segments: u16,
        bytes: u64,
        failure: Option<Sense>,
    },
}

#[derive(Clone, Debug)]
struct Held {
    nexus: NexusId,
    list_id: u8,
    state: CopyState,
}

/// The copy operations of one logical unit (running, or finished with status held),
/// oldest first, at most [`MAX_HELD_COPIES`].
#[derive(Debug, Default)]
pub(crate) struct CopyTable {
    ops: Mutex<VecDeque<Held>>,
}

impl CopyTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Held>> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new running copy; `Err` when one with the same list identifier runs for
    /// this nexus (OPERATION IN PROGRESS) or too many run (INSUFFICIENT RESOURCES).
    fn start(&self, nexus: NexusId, list_id: u8) -> Result<(), Sense> {
        let mut t = self.lock();
        let running = t.iter().filter(|h| h.state == CopyState::Running).count();
        if t.iter()
            .any(|h| h.nexus == nexus && h.list_id == list_id && h.state == CopyState::Running)
        {
            return Err(Sense::new(key::ILLEGAL_REQUEST, 0x00, 0x16));
        }
        if running >= usize::from(MAX_CONCURRENT_COPIES) {
            return Err(Sense::new(key::ILLEGAL_REQUEST, 0x55, 0x03));
        }
        t.retain(|h| !(h.nexus == nexus && h.list_id == list_id));
        while t.len() >= MAX_HELD_COPIES {
            // the oldest finished status goes first (running ones are fewer than the room)
            match t.iter().position(|h| h.state != CopyState::Running) {
                Some(i) => {
                    t.remove(i);
                }
                None => break,
            }
        }
        t.push_back(Held {
            nexus,
            list_id,
            state: CopyState::Running,
        });
        Ok(())
    }

    fn finish(&self, nexus: NexusId, list_id: u8, state: CopyState) {
        let mut t = self.lock();
        if let Some(h) = t
            .iter_mut()
            .find(|h| h.nexus == nexus && h.list_id == list_id && h.state == CopyState::Running)
        {
            h.state = state;
        }
    }

    fn get(&self, nexus: NexusId, list_id: u8) -> Option<CopyState> {
        self.lock()
            .iter()
            .find(|h| h.nexus == nexus && h.list_id == list_id)
            .map(|h| h.state.clone())
    }

    /// The nexus is gone: its held copy status goes with it (running copies finish).
    pub(crate) fn nexus_removed(&self, nexus: NexusId) {
        self.lock()
            .retain(|h| h.nexus != nexus || h.state == CopyState::Running);
    }
}

/// EXTENDED COPY (LID1).
pub(crate) fn extended_copy(lu: &LogicalUnit, cdb: &[u8], req: &Req<'_>) -> Result<Action, Sense> {
    let len = be32(cdb, 10) as usize;
    if len == 0 {
        return Ok(Action::good());
    }
    let data = &req.data_out[..len.min(req.data_out.len())];
    let list = parse_param_list(data)?;
    if let Some(conflict) = crate::copy_access::check_receiving_lu(lu, req.nexus, &list)? {
        return Ok(conflict);
    }
    let held = list.list_id_usage != 0b11;
    if held {
        lu.copies.start(req.nexus.id, list.list_id)?;
    }
    Ok(Action::ExtendedCopy(Box::new(CopyJob {
        nexus: req.nexus.id,
        issuer: req.nexus.clone(),
        list_id: list.list_id,
        held,
        cscds: list.cscds,
        segments: list.segments,
    })))
}

impl LogicalUnit {
    /// The server finished (or could not start) the copy of `job`: `segments` segment
    /// descriptors were processed completely and `bytes` bytes written; `failure` is the
    /// sense data that ended it. Records the copy status and returns the completion.
    pub fn copy_finished(
        &self,
        job: &CopyJob,
        segments: u16,
        bytes: u64,
        failure: Option<Sense>,
    ) -> Completion {
        if job.held {
            self.copies.finish(
                job.nexus,
                job.list_id,
                CopyState::Done {
                    segments,
                    bytes,
                    failure,
                },
            );
        }
        match failure {
            None => Completion::good(),
            Some(s) => self.check_condition(&s),
        }
    }
}

/// RECEIVE COPY RESULTS (LID1 service actions).
pub(crate) fn receive_copy_results(
    lu: &LogicalUnit,
    cdb: &[u8],
    req: &Req<'_>,
) -> Result<Action, Sense> {
    let sa = cdb[1] & 0x1F;
    let list_id = cdb[2];
    let alloc = be32(cdb, 10) as usize;
    let data = match sa {
        SA_OPERATING_PARAMETERS => operating_parameters(lu),
        _ => {
            let Some(state) = lu.copies.get(req.nexus.id, list_id) else {
                // no copy operation with this list identifier from this nexus
                return Err(Sense::invalid_field_in_cdb(2, Some(7)));
            };
            match sa {
                SA_COPY_STATUS => copy_status(&state),
                SA_FAILED_SEGMENT_DETAILS => failed_segment_details(&state),
                // no held data: only an AVAILABLE DATA of zero
                _ => vec![0u8; 4],
            }
        }
    };
    Ok(Action::data(truncate(data, alloc)))
}

fn copy_status(state: &CopyState) -> Vec<u8> {
    let mut d = vec![0u8; 12];
    d[3] = 8;
    match state {
        CopyState::Running => d[4] = 0x00,
        CopyState::Done {
            segments,
            bytes,
            failure,
        } => {
            d[4] = if failure.is_some() { 0x02 } else { 0x01 };
            d[5..7].copy_from_slice(&segments.to_be_bytes());
            // TRANSFER COUNT UNITS: the smallest power of 1024 the count fits in
            let mut units = 0u8;
            let mut count = *bytes;
            while count > u64::from(u32::MAX) {
                count >>= 10;
                units += 1;
            }
            d[7] = units;
            d[8..12].copy_from_slice(&(count as u32).to_be_bytes());
        }
    }
    d
}

fn failed_segment_details(state: &CopyState) -> Vec<u8> {
    let CopyState::Done {
        failure: Some(s), ..
    } = state
    else {
        return vec![0u8; 4];
    };
    let sense = s.encode_fixed();
    let mut d = vec![0u8; 60];
    d.extend_from_slice(&sense);
    let avail = u32::try_from(d.len() - 4).unwrap_or(0);
    d[0..4].copy_from_slice(&avail.to_be_bytes());
    d[56] = 0x02; // COPY COMMAND STATUS: CHECK CONDITION
    d[58..60].copy_from_slice(&(sense.len() as u16).to_be_bytes());
    d
}

fn operating_parameters(lu: &LogicalUnit) -> Vec<u8> {
    let mut d = vec![0u8; 44];
    d[4] = 0x01; // SNLID: LIST ID USAGE 11b supported
    d[8..10].copy_from_slice(&MAX_CSCD_DESCRIPTORS.to_be_bytes());
    d[10..12].copy_from_slice(&MAX_SEGMENT_DESCRIPTORS.to_be_bytes());
    d[12..16].copy_from_slice(&MAX_DESCRIPTOR_LIST_LEN.to_be_bytes());
    d[16..20].copy_from_slice(&MAX_SEGMENT_BYTES.to_be_bytes());
    // MAXIMUM INLINE DATA LENGTH, HELD DATA LIMIT, MAXIMUM STREAM DEVICE TRANSFER SIZE: 0
    d[34..36].copy_from_slice(&u16::from(MAX_CONCURRENT_COPIES).to_be_bytes());
    d[36] = MAX_CONCURRENT_COPIES;
    // DATA SEGMENT GRANULARITY: log2 of the logical block length
    d[37] = lu.params().block_size.max(1).trailing_zeros() as u8;
    d[43] = IMPLEMENTED_DESCRIPTORS.len() as u8;
    d.extend_from_slice(&IMPLEMENTED_DESCRIPTORS);
    let avail = u32::try_from(d.len() - 4).unwrap_or(0);
    d[0..4].copy_from_slice(&avail.to_be_bytes());
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sense::parse_key_asc;
    use crate::test_util::*;

    const NAA_ID: u64 = 0x1234_5678_9abc_def0;

    fn cscd(naa_id: u64, byte1: u8, block_len: u32) -> Vec<u8> {
        let mut d = vec![0u8; 32];
        d[0] = CSCD_IDENTIFICATION;
        d[1] = byte1;
        d[4] = 0x01; // binary
        d[5] = 0x03; // LU association, NAA
        d[7] = 16;
        d[8..24].copy_from_slice(&crate::naa6(naa_id));
        d[29..32].copy_from_slice(&block_len.to_be_bytes()[1..]);
        d
    }

    fn b2b(src: u16, dst: u16, blocks: u16, src_lba: u64, dst_lba: u64) -> Vec<u8> {
        let mut d = vec![0u8; 28];
        d[0] = SEG_BLOCK_TO_BLOCK;
        d[3] = 0x18;
        d[4..6].copy_from_slice(&src.to_be_bytes());
        d[6..8].copy_from_slice(&dst.to_be_bytes());
        d[10..12].copy_from_slice(&blocks.to_be_bytes());
        d[12..20].copy_from_slice(&src_lba.to_be_bytes());
        d[20..28].copy_from_slice(&dst_lba.to_be_bytes());
        d
    }

    fn list(list_id: u8, usage: u8, cscds: &[Vec<u8>], segs: &[Vec<u8>]) -> Vec<u8> {
        let c: Vec<u8> = cscds.concat();
        let s: Vec<u8> = segs.concat();
        let mut d = vec![0u8; 16];
        d[0] = list_id;
        d[1] = usage << 3;
        d[2..4].copy_from_slice(&(c.len() as u16).to_be_bytes());
        d[8..12].copy_from_slice(&(s.len() as u32).to_be_bytes());
        d.extend(c);
        d.extend(s);
        d
    }

    fn xcopy_cdb(len: usize) -> Vec<u8> {
        let mut c = vec![0u8; 16];
        c[0] = 0x83;
        c[10..14].copy_from_slice(&(len as u32).to_be_bytes());
        c
    }

    fn rcr_cdb(sa: u8, list_id: u8) -> Vec<u8> {
        let mut c = vec![0u8; 16];
        c[0] = 0x84;
        c[1] = sa;
        c[2] = list_id;
        c[10..14].copy_from_slice(&1024u32.to_be_bytes());
        c
    }

    fn sense_of(lu: &LogicalUnit, cdb: &[u8], data: &[u8]) -> (u8, u8, u8) {
        let c = complete_out(lu, cdb, data);
        assert_eq!(c.status, crate::status::CHECK_CONDITION, "{c:?}");
        parse_key_asc(&c.sense).expect("sense")
    }

    #[test]
    fn simple_list_becomes_a_job_and_status_is_held() {
        let lu = lu();
        let p = list(1, 0, &[cscd(NAA_ID, 0, 512)], &[b2b(0, 0, 16, 0, 100)]);
        let Action::ExtendedCopy(job) = exec(&lu, &xcopy_cdb(p.len()), &p) else {
            panic!("not a copy job");
        };
        assert_eq!(job.list_id, 1);
        assert!(job.held);
        assert!(job.cscds[0].designator.names_naa_id(NAA_ID));
        assert!(!job.cscds[0].designator.names_naa_id(NAA_ID + 1));
        assert_eq!(job.cscds[0].block_len, 512);
        assert_eq!(
            job.segments,
            vec![Segment {
                src: 0,
                dst: 0,
                dc: false,
                blocks: 16,
                src_lba: 0,
                dst_lba: 100
            }]
        );
        // running: a second copy with the same list identifier is refused, status says 00h
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x00, 0x16)
        );
        let st = complete(&lu, &rcr_cdb(SA_COPY_STATUS, 1));
        assert_eq!(st.data.len(), 12);
        assert_eq!(st.data[4], 0x00);
        let c = lu.copy_finished(&job, 1, 16 * 512, None);
        assert_eq!(c.status, 0);
        let st = complete(&lu, &rcr_cdb(SA_COPY_STATUS, 1));
        assert_eq!(&st.data[..12], &[0, 0, 0, 8, 1, 0, 1, 0, 0, 0, 0x20, 0]);
        assert_eq!(
            complete(&lu, &rcr_cdb(SA_FAILED_SEGMENT_DETAILS, 1)).data,
            vec![0; 4]
        );
        assert_eq!(complete(&lu, &rcr_cdb(SA_RECEIVE_DATA, 1)).data, vec![0; 4]);
        // another list identifier: nothing known
        assert_eq!(
            sense_of(&lu, &rcr_cdb(SA_COPY_STATUS, 2), &[]),
            (key::ILLEGAL_REQUEST, 0x24, 0x00)
        );
        // a failed copy: status 02h and the sense in FAILED SEGMENT DETAILS
        let Action::ExtendedCopy(job) = exec(&lu, &xcopy_cdb(p.len()), &p) else {
            panic!("not a copy job");
        };
        let c = lu.copy_finished(&job, 0, 0, Some(copy_target_not_reachable()));
        assert_eq!(parse_key_asc(&c.sense), Some((COPY_ABORTED, 0x0D, 0x02)));
        assert_eq!(complete(&lu, &rcr_cdb(SA_COPY_STATUS, 1)).data[4], 0x02);
        let f = complete(&lu, &rcr_cdb(SA_FAILED_SEGMENT_DETAILS, 1)).data;
        assert_eq!(f[56], 0x02);
        assert_eq!(parse_key_asc(&f[60..]), Some((COPY_ABORTED, 0x0D, 0x02)));
    }

    #[test]
    fn list_id_usage_11_holds_nothing() {
        let lu = lu();
        let p = list(0, 3, &[cscd(NAA_ID, 0, 512)], &[b2b(0, 0, 1, 0, 1)]);
        let Action::ExtendedCopy(job) = exec(&lu, &xcopy_cdb(p.len()), &p) else {
            panic!("not a copy job");
        };
        assert!(!job.held);
        let p = list(5, 3, &[cscd(NAA_ID, 0, 512)], &[b2b(0, 0, 1, 0, 1)]);
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x26, 0x00)
        );
    }

    #[test]
    fn header_and_length_errors() {
        let lu = lu();
        let p = list(1, 0, &[cscd(NAA_ID, 0, 512)], &[b2b(0, 0, 16, 0, 100)]);
        // zero length: nothing to do
        assert_eq!(complete(&lu, &xcopy_cdb(0)).status, 0);
        for cut in [1, 15, 16 + 31, p.len() - 1] {
            assert_eq!(
                sense_of(&lu, &xcopy_cdb(cut), &p[..cut]),
                (key::ILLEGAL_REQUEST, 0x1A, 0x00),
                "cut at {cut}"
            );
        }
        let mut bad = p.clone();
        bad[5] = 1;
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(bad.len()), &bad),
            (key::ILLEGAL_REQUEST, 0x26, 0x00)
        );
        // inline data is not supported
        let mut inl = p.clone();
        inl[15] = 4;
        inl.extend([0; 4]);
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(inl.len()), &inl),
            (key::ILLEGAL_REQUEST, 0x26, 0x00)
        );
        // LID4 service action is not supported
        let mut c = xcopy_cdb(p.len());
        c[1] = 1;
        assert_eq!(sense_of(&lu, &c, &p), (key::ILLEGAL_REQUEST, 0x24, 0x00));
    }

    #[test]
    fn descriptor_limits_and_types() {
        let lu = lu();
        let one = cscd(NAA_ID, 0, 512);
        let seg = b2b(0, 0, 1, 0, 1);
        let n = usize::from(MAX_CSCD_DESCRIPTORS);
        let p = list(1, 0, &vec![one.clone(); n + 1], std::slice::from_ref(&seg));
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x26, 0x06)
        );
        let m = usize::from(MAX_SEGMENT_DESCRIPTORS);
        let p = list(2, 0, std::slice::from_ref(&one), &vec![seg.clone(); m + 1]);
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x26, 0x08)
        );
        let p = list(3, 0, &vec![one.clone(); n + 1], &vec![seg.clone(); m + 1]);
        assert!(p.len() - 16 > MAX_DESCRIPTOR_LIST_LEN as usize);
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x1A, 0x00)
        );
        // the maximum counts are accepted
        let p = list(4, 0, &vec![one.clone(); n], &vec![seg.clone(); m]);
        assert!(matches!(
            exec(&lu, &xcopy_cdb(p.len()), &p),
            Action::ExtendedCopy(_)
        ));
        // FC N_Port_Name CSCD; stream → stream segment
        let mut fc = one.clone();
        fc[0] = 0xE0;
        let p = list(5, 0, &[fc], std::slice::from_ref(&seg));
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x26, 0x07)
        );
        let mut s2s = vec![0u8; 20];
        s2s[0] = 0x03;
        s2s[3] = 0x10;
        let p = list(6, 0, std::slice::from_ref(&one), &[s2s]);
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x26, 0x09)
        );
    }

    #[test]
    fn cscd_and_segment_fields() {
        let lu = lu();
        let seg = b2b(0, 0, 1, 0, 1);
        // LU ID TYPE and NUL (obsolete in SPC-4) are ignored
        for (id, byte1) in [(10, 0xC0), (11, 0x20), (12, 0x40)] {
            let p = list(
                id,
                0,
                &[cscd(NAA_ID, byte1, 512)],
                std::slice::from_ref(&seg),
            );
            assert!(matches!(
                exec(&lu, &xcopy_cdb(p.len()), &p),
                Action::ExtendedCopy(_)
            ));
        }
        // not a block device
        let p = list(1, 0, &[cscd(NAA_ID, 0x01, 512)], std::slice::from_ref(&seg));
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x26, 0x07)
        );
        // a destination index beyond the CSCD list
        let p = list(2, 0, &[cscd(NAA_ID, 0, 512)], &[b2b(0, 1, 1, 0, 1)]);
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (COPY_ABORTED, 0x0D, 0x02)
        );
        // a designator longer than the descriptor holds
        let mut long = cscd(NAA_ID, 0, 512);
        long[7] = 17;
        let p = list(3, 0, &[long], std::slice::from_ref(&seg));
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x26, 0x00)
        );
        // a block → block descriptor with a wrong DESCRIPTOR LENGTH
        let mut s = seg.clone();
        s[3] = 0x14;
        s.truncate(24);
        let p = list(4, 0, &[cscd(NAA_ID, 0, 512)], &[s]);
        assert_eq!(
            sense_of(&lu, &xcopy_cdb(p.len()), &p),
            (key::ILLEGAL_REQUEST, 0x26, 0x00)
        );
    }

    #[test]
    fn segment_bytes_need_whole_blocks() {
        let s = Segment {
            src: 0,
            dst: 1,
            dc: false,
            blocks: 3,
            src_lba: 0,
            dst_lba: 0,
        };
        assert_eq!(s.bytes(512, 512), Ok(1536));
        assert_eq!(s.bytes(4096, 512), Ok(3 * 4096));
        assert_eq!(s.bytes(512, 4096), Err(unexpected_inexact_segment()));
        assert_eq!(Segment { dc: true, ..s }.bytes(512, 4096), Ok(3 * 4096));
    }

    #[test]
    fn operating_parameters_report_the_limits() {
        let lu = lu();
        let d = complete(&lu, &rcr_cdb(SA_OPERATING_PARAMETERS, 0)).data;
        assert_eq!(d.len(), 46);
        assert_eq!(be32(&d, 0), 42);
        assert_eq!(be16(&d, 8), MAX_CSCD_DESCRIPTORS);
        assert_eq!(be16(&d, 10), MAX_SEGMENT_DESCRIPTORS);
        assert_eq!(be32(&d, 12), MAX_DESCRIPTOR_LIST_LEN);
        assert_eq!(d[37], 9);
        assert_eq!(d[43], 2);
        assert_eq!(&d[44..], &[0x02, 0xE4]);
        let mut c = rcr_cdb(SA_OPERATING_PARAMETERS, 0);
        c[13] = 8;
        c[12] = 0;
        assert_eq!(complete(&lu, &c).data.len(), 8);
        // unknown service action
        assert_eq!(
            sense_of(&lu, &rcr_cdb(0x05, 0), &[]),
            (key::ILLEGAL_REQUEST, 0x24, 0x00)
        );
    }

    #[test]
    fn parser_never_panics_on_garbage() {
        // a cheap deterministic fuzz: random bytes with plausible headers
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 400) as usize;
            let mut d: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if len >= 16 {
                let c = (next() % 300) as u16;
                d[2..4].copy_from_slice(&c.to_be_bytes());
                d[4..8].fill(0);
                let s = (next() % 300) as u32;
                d[8..12].copy_from_slice(&s.to_be_bytes());
                if next() % 2 == 0 {
                    d[12..16].fill(0);
                }
            }
            let _ = parse_param_list(&d);
        }
    }
}
