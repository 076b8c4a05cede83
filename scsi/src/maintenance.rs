//! MAINTENANCE IN service actions (SPC-4 6.35, 6.36): REPORT SUPPORTED OPERATION CODES,
//! generated from the opcode table (so it reports exactly what `execute` accepts, with each
//! command's CDB usage map), and REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS.

use crate::cdb::{be16, be32, truncate};
use crate::ops::OpInfo;
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

/// REPORT SUPPORTED OPERATION CODES byte 2: return command timeouts descriptors.
const RCTD: u8 = 0x80;

/// REPORTING OPTIONS (SPC-4 table 244).
mod options {
    /// All commands, all_commands parameter data.
    pub const ALL: u8 = 0b000;
    /// One operation code without service actions.
    pub const OPCODE: u8 = 0b001;
    /// One operation code with a service action.
    pub const OPCODE_SA: u8 = 0b010;
    /// One operation code, with the service action if the operation code has them.
    pub const OPCODE_EITHER: u8 = 0b011;
}

/// SUPPORT field of the one_command parameter data (SPC-4 table 248).
mod support {
    /// The device server does not support the requested command.
    pub const NOT_SUPPORTED: u8 = 0b001;
    /// Supported in conformance with a SCSI standard.
    pub const STANDARD: u8 = 0b011;
}

/// Command descriptor byte 5 / one_command byte 1 flags.
const SERVACTV: u8 = 0x01;
const CTDP_DESCRIPTOR: u8 = 0x02;
const CTDP_ONE_COMMAND: u8 = 0x80;

/// Length of a command timeouts descriptor (SPC-4 table 250), DESCRIPTOR LENGTH included.
const TIMEOUTS_LEN: usize = 12;

/// The command timeouts descriptor of `op`: nominal command processing timeout 0 (not
/// specified: it depends on the backing store), recommended command timeout from the table.
fn timeouts_descriptor(op: &OpInfo) -> [u8; TIMEOUTS_LEN] {
    let mut d = [0u8; TIMEOUTS_LEN];
    d[..2].copy_from_slice(&((TIMEOUTS_LEN - 2) as u16).to_be_bytes());
    // byte 3 COMMAND SPECIFIC: none of our commands defines it; bytes 4-7 nominal: 0
    d[8..12].copy_from_slice(&op.timeout.to_be_bytes());
    d
}

/// The CDB USAGE DATA of `op` (SPC-4 6.35.3): byte 0 the operation code, the service action
/// (if any) in the SERVICE ACTION field, every other bit from the usage map.
fn usage_data(op: &OpInfo) -> Vec<u8> {
    let mut u = op.usage.to_vec();
    if let Some(b) = u.first_mut() {
        *b = op.opcode;
    }
    if let Some(sa) = op.service_action
        && let Some(b) = u.get_mut(1)
    {
        *b = (*b & !0x1F) | (sa & 0x1F);
    }
    u
}

fn cdb_len(op: &OpInfo) -> [u8; 2] {
    u16::try_from(op.usage.len())
        .unwrap_or(u16::MAX)
        .to_be_bytes()
}

/// The all_commands parameter data (SPC-4 6.35.2): one command descriptor (8 bytes, 20 with
/// a command timeouts descriptor) per table entry, in table order.
fn all_commands(lu: &LogicalUnit, rctd: bool) -> Vec<u8> {
    let per = if rctd { 8 + TIMEOUTS_LEN } else { 8 };
    let table = lu.op_table();
    let mut d = Vec::with_capacity(4 + table.len() * per);
    d.extend_from_slice(&[0; 4]);
    for op in table.iter().filter(|e| offered(lu, e)) {
        d.push(op.opcode);
        d.push(0);
        d.extend_from_slice(&u16::from(op.service_action.unwrap_or(0)).to_be_bytes());
        d.push(0);
        let mut flags = 0;
        if op.service_action.is_some() {
            flags |= SERVACTV;
        }
        if rctd {
            flags |= CTDP_DESCRIPTOR;
        }
        d.push(flags);
        d.extend_from_slice(&cdb_len(op));
        if rctd {
            d.extend_from_slice(&timeouts_descriptor(op));
        }
    }
    let len = u32::try_from(d.len() - 4).unwrap_or(u32::MAX);
    d[..4].copy_from_slice(&len.to_be_bytes());
    d
}

/// The one_command parameter data (SPC-4 6.35.3) for `op` (None: not supported).
fn one_command(op: Option<&OpInfo>, rctd: bool) -> Vec<u8> {
    let Some(op) = op else {
        // SUPPORT 001b: the rest is undefined; report an empty CDB usage data field.
        return vec![0, support::NOT_SUPPORTED, 0, 0];
    };
    let usage = usage_data(op);
    let mut d = Vec::with_capacity(4 + usage.len() + TIMEOUTS_LEN);
    d.push(0);
    d.push(support::STANDARD | if rctd { CTDP_ONE_COMMAND } else { 0 });
    d.extend_from_slice(&cdb_len(op));
    d.extend_from_slice(&usage);
    if rctd {
        d.extend_from_slice(&timeouts_descriptor(op));
    }
    d
}

/// REPORT SUPPORTED OPERATION CODES (MAINTENANCE IN, service action 0Ch).
///
/// Reporting options 000b (all commands), 001b (operation code without service actions),
/// 010b (operation code and service action) and 011b (operation code, plus the service
/// action when it has them). An operation code the table does not know is reported as not
/// supported. 001b for an operation code with service actions and 010b for one without are
/// INVALID FIELD IN CDB pointing at REQUESTED OPERATION CODE; reserved options point at
/// REPORTING OPTIONS.
pub(crate) fn report_supported_opcodes(
    lu: &LogicalUnit,
    cdb: &[u8],
    _: &Req<'_>,
) -> Result<Action, Sense> {
    let rctd = cdb[2] & RCTD != 0;
    let opt = cdb[2] & 0x07;
    let req_op = cdb[3];
    let req_sa = be16(cdb, 4);
    let alloc = be32(cdb, 6) as usize;

    // The table gives an operation code service actions in all its entries or in none.
    let table = lu.op_table();
    let first = table.iter().find(|e| e.opcode == req_op && offered(lu, e));
    let has_sa = first.is_some_and(|e| e.service_action.is_some());
    let without_sa = || first.filter(|e| e.service_action.is_none());
    let with_sa = || {
        table.iter().find(|e| {
            e.opcode == req_op && e.service_action.map(u16::from) == Some(req_sa) && offered(lu, e)
        })
    };
    let bad_opcode = || Sense::invalid_field_in_cdb(3, Some(7));

    let data = match opt {
        options::ALL => all_commands(lu, rctd),
        options::OPCODE if has_sa => return Err(bad_opcode()),
        options::OPCODE => one_command(without_sa(), rctd),
        options::OPCODE_SA if first.is_some() && !has_sa => return Err(bad_opcode()),
        options::OPCODE_SA => one_command(with_sa(), rctd),
        options::OPCODE_EITHER if has_sa => one_command(with_sa(), rctd),
        options::OPCODE_EITHER => one_command(without_sa(), rctd),
        _ => return Err(Sense::invalid_field_in_cdb(2, Some(2))),
    };
    Ok(Action::data(truncate(data, alloc)))
}

/// Whether this LU offers table entry `e` (UNMAP and SANITIZE BLOCK ERASE only on thin
/// LUs).
pub(crate) fn offered(lu: &LogicalUnit, e: &OpInfo) -> bool {
    (e.opcode != crate::ops::opcode::UNMAP || lu.thin_provisioning())
        && (e.opcode != crate::ops::opcode::MAINTENANCE_OUT || lu.explicit_alua())
        && crate::sanitize::offered(lu, e)
}

/// REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS byte 2: return extended parameter data.
const REPD: u8 = 0x80;

/// REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (MAINTENANCE IN, service action 0Dh): the task
/// management functions the target performs, from the table `task_mgmt` plans requests
/// with (ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET and, as TRS, TARGET
/// WARM RESET). With REPD = 1 the 16-byte extended format, with TMFTMOV = 0: no TMF
/// timeouts are reported.
pub(crate) fn report_supported_tmfs(
    _: &LogicalUnit,
    cdb: &[u8],
    _: &Req<'_>,
) -> Result<Action, Sense> {
    let alloc = be32(cdb, 6) as usize;
    let [b0, b1, b2] = crate::task_mgmt::supported_bits();
    let mut d = vec![b0, b1, b2, 0];
    if cdb[2] & REPD != 0 {
        d[3] = 0x0C; // ADDITIONAL DATA LENGTH
        // byte 4 TMFTMOV = 0, bytes 6-7 timeout-selected bits and 8-15 timeouts: zero
        d.extend_from_slice(&[0; 12]);
    }
    Ok(Action::data(truncate(d, alloc)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::TABLE;
    use crate::ops::opcode::*;
    use crate::test_util::*;

    fn rsoc(rctd: bool, opt: u8, op: u8, sa: u16, alloc: u32) -> Vec<u8> {
        let mut c = vec![0xA3, 0x0C, opt, op, 0, 0, 0, 0, 0, 0, 0, 0];
        if rctd {
            c[2] |= 0x80;
        }
        c[4..6].copy_from_slice(&sa.to_be_bytes());
        c[6..10].copy_from_slice(&alloc.to_be_bytes());
        c
    }

    /// (opcode, service action, SERVACTV, CTDP, CDB length, timeouts) of each descriptor.
    type Desc = (u8, u16, bool, bool, u16, Option<Vec<u8>>);

    fn parse_all(d: &[u8]) -> Vec<Desc> {
        let len = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
        assert_eq!(len + 4, d.len());
        let mut out = Vec::new();
        let mut off = 4;
        while off < d.len() {
            let x = &d[off..];
            assert_eq!((x[1], x[4], x[5] & 0xFC), (0, 0, 0));
            let ctdp = x[5] & 0x02 != 0;
            let to = ctdp.then(|| x[8..20].to_vec());
            out.push((
                x[0],
                u16::from_be_bytes([x[2], x[3]]),
                x[5] & 0x01 != 0,
                ctdp,
                u16::from_be_bytes([x[6], x[7]]),
                to,
            ));
            off += if ctdp { 20 } else { 8 };
        }
        assert_eq!(off, d.len());
        out
    }

    #[test]
    fn all_commands_layout() {
        let lu = lu();
        lu.set_thin_provisioning(true); // every table entry offered
        lu.set_explicit_alua(true);
        let d = complete(&lu, &rsoc(false, 0, 0, 0, 65535)).data;
        let all = parse_all(&d);
        assert_eq!(all.len(), TABLE.len());
        assert_eq!(d.len(), 4 + 8 * TABLE.len());
        for (desc, e) in all.iter().zip(TABLE) {
            assert_eq!(desc.0, e.opcode);
            assert_eq!(desc.1, u16::from(e.service_action.unwrap_or(0)));
            assert_eq!(desc.2, e.service_action.is_some());
            assert!(!desc.3);
            assert_eq!(usize::from(desc.4), e.usage.len());
        }
        let has = |op: u8, sa: u16, servactv: bool, len: u16| {
            all.iter()
                .any(|x| (x.0, x.1, x.2, x.4) == (op, sa, servactv, len))
        };
        assert!(has(MAINTENANCE_IN, 0x0C, true, 12));
        assert!(has(MAINTENANCE_IN, 0x0D, true, 12));
        assert!(has(SERVICE_ACTION_IN_16, 0x10, true, 16));
        assert!(has(WRITE_AND_VERIFY_10, 0, false, 10));
        assert!(has(WRITE_AND_VERIFY_12, 0, false, 12));
        assert!(has(WRITE_AND_VERIFY_16, 0, false, 16));
        assert!(has(READ_10, 0, false, 10));
        assert!(has(TEST_UNIT_READY, 0, false, 6));
        // first descriptor: TEST UNIT READY
        assert_eq!(&d[4..12], &[0, 0, 0, 0, 0, 0, 0, 6]);
        // requested opcode / service action are ignored with option 000b
        assert_eq!(complete(&lu, &rsoc(false, 0, 0x28, 7, 65535)).data, d);
    }

    #[test]
    fn all_commands_with_timeouts() {
        let lu = lu();
        lu.set_thin_provisioning(true); // every table entry offered
        lu.set_explicit_alua(true);
        let d = complete(&lu, &rsoc(true, 0, 0, 0, 65535)).data;
        assert_eq!(d.len(), 4 + 20 * TABLE.len());
        let all = parse_all(&d);
        for (desc, e) in all.iter().zip(TABLE) {
            assert!(desc.3, "CTDP for {}", e.name);
            let to = desc.5.as_ref().expect("timeouts descriptor");
            assert_eq!(&to[..4], &[0, 0x0A, 0, 0]);
            assert_eq!(&to[4..8], &[0; 4], "nominal: not specified");
            let rec = u32::from_be_bytes([to[8], to[9], to[10], to[11]]);
            assert!((1..=600).contains(&rec), "{}: {rec}", e.name);
        }
        let sync = all.iter().find(|x| x.0 == SYNCHRONIZE_CACHE_10).unwrap();
        assert_eq!(sync.5.as_ref().unwrap()[8..12], 60u32.to_be_bytes());
        // TEST UNIT READY descriptor with CTDP and its timeouts descriptor
        assert_eq!(
            &d[4..24],
            &[
                0, 0, 0, 0, 0, 0x02, 0, 6, 0, 0x0A, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10
            ]
        );
    }

    #[test]
    fn one_command_supported() {
        let lu = lu();
        lu.set_thin_provisioning(true); // every table entry offered
        lu.set_explicit_alua(true);
        // WRITE(10): usage map with DPO and FUA, byte 0 the opcode
        let d = complete(&lu, &rsoc(false, 1, 0x2A, 0, 65535)).data;
        assert_eq!(
            d,
            vec![
                0, 0x03, 0, 10, 0x2A, 0xFA, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, 0xC0
            ]
        );
        // the requested service action is ignored with 001b
        assert_eq!(complete(&lu, &rsoc(false, 1, 0x2A, 9, 65535)).data, d);
        // 011b for an opcode without service actions: same answer, service action ignored
        assert_eq!(complete(&lu, &rsoc(false, 3, 0x2A, 9, 65535)).data, d);
        // WRITE AND VERIFY(10): DPO and BYTCHK, no FUA
        let d = complete(&lu, &rsoc(false, 1, 0x2E, 0, 65535)).data;
        assert_eq!(&d[..6], &[0, 0x03, 0, 10, 0x2E, 0xF2]);
        // READ CAPACITY(16) with 010b: service action in byte 1
        let d = complete(&lu, &rsoc(false, 2, 0x9E, 0x10, 65535)).data;
        assert_eq!(&d[..6], &[0, 0x03, 0, 16, 0x9E, 0x10]);
        assert_eq!(d.len(), 4 + 16);
        assert_eq!(complete(&lu, &rsoc(false, 3, 0x9E, 0x10, 65535)).data, d);
        // RSOC describing itself
        let d = complete(&lu, &rsoc(false, 2, 0xA3, 0x0C, 65535)).data;
        assert_eq!(
            d,
            vec![
                0, 0x03, 0, 12, 0xA3, 0x0C, 0x87, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0xC0
            ]
        );
        let d = complete(&lu, &rsoc(false, 2, 0xA3, 0x0D, 65535)).data;
        assert_eq!(&d[4..8], &[0xA3, 0x0D, 0x80, 0]);
        // every table entry: its usage data starts with its opcode
        for e in TABLE {
            let opt = if e.service_action.is_some() { 2 } else { 1 };
            let sa = u16::from(e.service_action.unwrap_or(0));
            let d = complete(&lu, &rsoc(false, opt, e.opcode, sa, 65535)).data;
            assert_eq!(d[1], 0x03, "{}", e.name);
            assert_eq!(usize::from(u16::from_be_bytes([d[2], d[3]])), e.usage.len());
            assert_eq!(d[4], e.opcode);
            assert_eq!(d.len(), 4 + e.usage.len());
        }
    }

    #[test]
    fn one_command_unsupported() {
        let lu = lu();
        let not = vec![0, 0x01, 0, 0];
        assert_eq!(complete(&lu, &rsoc(false, 1, 0xC0, 0, 65535)).data, not);
        assert_eq!(complete(&lu, &rsoc(false, 2, 0x7F, 9, 65535)).data, not);
        assert_eq!(complete(&lu, &rsoc(false, 3, 0xC0, 0, 65535)).data, not);
        assert_eq!(complete(&lu, &rsoc(true, 1, 0x42, 0, 65535)).data, not);
        // supported opcode, unsupported service action
        assert_eq!(complete(&lu, &rsoc(false, 2, 0x9E, 0x13, 65535)).data, not);
        assert_eq!(complete(&lu, &rsoc(false, 3, 0x9E, 0x13, 65535)).data, not);
        // UNMAP exists on thin LUs only
        lu.set_thin_provisioning(true);
        assert_ne!(complete(&lu, &rsoc(true, 1, 0x42, 0, 65535)).data, not);
        assert_eq!(complete(&lu, &rsoc(false, 2, 0xA3, 0x0B, 65535)).data, not);
        // the service action is 16 bits: 0x010C is not 0x0C
        assert_eq!(
            complete(&lu, &rsoc(false, 2, 0xA3, 0x010C, 65535)).data,
            not
        );
    }

    #[test]
    fn one_command_with_timeouts() {
        let lu = lu();
        let d = complete(&lu, &rsoc(true, 1, 0x28, 0, 65535)).data;
        assert_eq!(d.len(), 4 + 10 + 12);
        assert_eq!(d[1], 0x83); // CTDP, SUPPORT 011b
        assert_eq!(&d[14..], &[0, 0x0A, 0, 0, 0, 0, 0, 0, 0, 0, 0, 30]);
        let d = complete(&lu, &rsoc(true, 2, 0xA3, 0x0D, 65535)).data;
        assert_eq!(d[1], 0x83);
        assert_eq!(&d[16..], &[0, 0x0A, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10]);
    }

    #[test]
    fn bad_options() {
        let lu = lu();
        // 001b on an opcode with service actions
        for op in [0x9E, 0xA3] {
            let c = complete(&lu, &rsoc(false, 1, op, 0x10, 65535));
            assert_eq!(check(&c), (5, 0x24, 0));
            assert_eq!(&c.sense[15..18], &[0xCF, 0, 3]);
        }
        // 010b on an opcode without service actions
        let c = complete(&lu, &rsoc(false, 2, 0x28, 0, 65535));
        assert_eq!(check(&c), (5, 0x24, 0));
        assert_eq!(&c.sense[15..18], &[0xCF, 0, 3]);
        // reserved reporting options
        for opt in 4..8 {
            let c = complete(&lu, &rsoc(false, opt, 0x28, 0, 65535));
            assert_eq!(check(&c), (5, 0x24, 0));
            assert_eq!(&c.sense[15..18], &[0xCA, 0, 2]);
        }
        // reserved bits of byte 2 and byte 10
        let mut c = rsoc(false, 0, 0, 0, 65535);
        c[2] = 0x08;
        assert_eq!(&complete(&lu, &c).sense[15..18], &[0xCB, 0, 2]);
        let mut c = rsoc(false, 0, 0, 0, 65535);
        c[10] = 1;
        assert_eq!(&complete(&lu, &c).sense[15..18], &[0xC8, 0, 10]);
        // unknown MAINTENANCE IN service action
        let mut c = rsoc(false, 0, 0, 0, 65535);
        c[1] = 0x0B;
        let r = complete(&lu, &c);
        assert_eq!(check(&r), (5, 0x24, 0));
        assert_eq!(&r.sense[15..18], &[0xCC, 0, 1]);
        // too short a CDB
        assert_eq!(check(&complete(&lu, &[0xA3, 0x0C, 0, 0])), (5, 0x24, 0));
    }

    #[test]
    fn truncation() {
        let lu = lu();
        let full = complete(&lu, &rsoc(true, 0, 0, 0, 65535)).data;
        for alloc in [0u32, 1, 3, 4, 5, 20, 23, 100] {
            let d = complete(&lu, &rsoc(true, 0, 0, 0, alloc)).data;
            assert_eq!(d, full[..alloc as usize], "alloc {alloc}");
        }
        let one = complete(&lu, &rsoc(false, 1, 0x2A, 0, 65535)).data;
        assert_eq!(complete(&lu, &rsoc(false, 1, 0x2A, 0, 6)).data, one[..6]);
        assert!(complete(&lu, &rsoc(false, 1, 0x2A, 0, 0)).data.is_empty());
        assert_eq!(complete(&lu, &rsoc(false, 1, 0xC0, 0, 2)).data, vec![0, 1]);
    }

    #[test]
    fn list_matches_execute() {
        // an opcode is listed iff execute knows it, and every listed command executes
        // without INVALID COMMAND OPERATION CODE
        for thin in [false, true] {
            let lu = lu();
            lu.set_thin_provisioning(thin);
            for op in 0..=255u8 {
                let listed = TABLE.iter().any(|e| e.opcode == op && offered(&lu, e));
                let mut cdb = [0u8; 16];
                cdb[0] = op;
                if let Some(sa) = TABLE
                    .iter()
                    .find(|e| e.opcode == op)
                    .and_then(|e| e.service_action)
                {
                    cdb[1] = sa;
                }
                let invalid_opcode = match exec(&lu, &cdb, &[]) {
                    Action::Complete(c) if c.status != 0 => {
                        crate::sense::parse_key_asc(&c.sense) == Some((5, 0x20, 0))
                    }
                    _ => false,
                };
                assert_eq!(listed, !invalid_opcode, "opcode {op:#04x} (thin: {thin})");
            }
        }
    }

    fn rstmf(repd: bool, alloc: u32) -> Vec<u8> {
        let mut c = vec![0xA3, 0x0D, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        if repd {
            c[2] = 0x80;
        }
        c[6..10].copy_from_slice(&alloc.to_be_bytes());
        c
    }

    #[test]
    fn task_management_functions() {
        let lu = lu();
        let d = complete(&lu, &rstmf(false, 255)).data;
        // ATS, ATSS, CTSS, LURS, TRS; no CLEAR ACA, QUERY TASK, I_T NEXUS RESET
        assert_eq!(d, vec![0xDA, 0, 0, 0]);
        let d = complete(&lu, &rstmf(true, 255)).data;
        assert_eq!(d.len(), 16);
        assert_eq!(&d[..4], &[0xDA, 0, 0, 0x0C]);
        assert_eq!(&d[4..], &[0; 12]);
        assert_eq!(complete(&lu, &rstmf(true, 2)).data, vec![0xDA, 0]);
        assert!(complete(&lu, &rstmf(false, 0)).data.is_empty());
        let mut c = rstmf(false, 255);
        c[2] = 0x40;
        let r = complete(&lu, &c);
        assert_eq!(check(&r), (5, 0x24, 0));
        assert_eq!(&r.sense[15..18], &[0xCE, 0, 2]);
        let mut c = rstmf(false, 255);
        c[4] = 1;
        assert_eq!(check(&complete(&lu, &c)), (5, 0x24, 0));
    }
}
