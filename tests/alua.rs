//! ALUA helpers for raw-session tests: REPORT TARGET PORT GROUPS decoded, and a command
//! retried while the LU answers "transitioning" (as an initiator's multipath layer does).

use std::time::{Duration, Instant};

use crate::cdb::sense_of;
use crate::pdu::ScsiSession;

/// `[(group, access state code, relative ports)]` from REPORT TARGET PORT GROUPS, sorted.
pub fn rtpg(s: &mut ScsiSession) -> Vec<(u16, u8, Vec<u16>)> {
    let (st, sense, d) = s.command(&[0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0], &[], 1024);
    assert_eq!(st, 0, "RTPG: sense {:?}", sense_of(&sense));
    let len = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
    assert_eq!(len + 4, d.len(), "RETURN DATA LENGTH");
    let mut out = Vec::new();
    let mut i = 4;
    while i + 8 <= d.len() {
        let n = usize::from(d[i + 7]);
        let ports = (0..n)
            .map(|k| u16::from_be_bytes([d[i + 8 + 4 * k + 2], d[i + 8 + 4 * k + 3]]))
            .collect();
        out.push((u16::from_be_bytes([d[i + 2], d[i + 3]]), d[i] & 0x0F, ports));
        i += 8 + 4 * n;
    }
    out.sort();
    out
}

/// The outcome of a command retried while it gets NOT READY / ASYMMETRIC ACCESS STATE
/// TRANSITION (02/04/0A) or ASYMMETRIC ACCESS STATE CHANGED (06/2A/06), for at most
/// `limit`: (status, sense, Data-In, time until the final answer).
pub fn command_through_transition(
    s: &mut ScsiSession,
    cdb: &[u8],
    data_out: &[u8],
    read_len: u32,
    limit: Duration,
) -> (u8, Vec<u8>, Vec<u8>, Duration) {
    let start = Instant::now();
    loop {
        let (st, sense, data) = s.command(cdb, data_out, read_len);
        let retry = matches!(
            sense_of(&sense),
            Some((2, 0x04, 0x0A)) | Some((6, 0x2A, 0x06))
        );
        if st != 2 || !retry || start.elapsed() >= limit {
            return (st, sense, data, start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SET TARGET PORT GROUPS asking for `group` to be active/optimized, as Linux's ALUA
/// handler sends it when multipath switches to that group's path (sent again after a unit
/// attention, as Linux does): (status, sense, time the answer took).
pub fn stpg_optimized(s: &mut ScsiSession, group: u16) -> (u8, Vec<u8>, Duration) {
    let g = group.to_be_bytes();
    let list = [0, 0, 0, 0, 0x00, 0, g[0], g[1]];
    let cdb = [0xA4, 0x0A, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0];
    let (st, sense, _, took) =
        command_through_transition(s, &cdb, &list, 0, Duration::from_secs(30));
    (st, sense, took)
}
