//! Small SCSI helpers for raw-session tests: 10-byte READ/WRITE/SYNCHRONIZE CACHE CDBs,
//! sense data decoded to (key, ASC, ASCQ), and a daemon's resident memory.

/// A 10-byte CDB: operation `op` (0x28 READ, 0x2a WRITE) at `lba` for `blocks`.
pub fn cdb10(op: u8, lba: u64, blocks: u16) -> [u8; 10] {
    let l = (lba as u32).to_be_bytes();
    let n = blocks.to_be_bytes();
    [op, 0, l[0], l[1], l[2], l[3], 0, n[0], n[1], 0]
}

/// SYNCHRONIZE CACHE (10) of the whole LUN.
pub const SYNC10: [u8; 10] = [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// (sense key, ASC, ASCQ) of fixed or descriptor sense data.
pub fn sense_of(s: &[u8]) -> Option<(u8, u8, u8)> {
    match s.first()? & 0x7f {
        0x70 | 0x71 => Some((s.get(2)? & 0x0f, *s.get(12)?, *s.get(13)?)),
        0x72 | 0x73 => Some((s.get(1)? & 0x0f, *s.get(2)?, *s.get(3)?)),
        _ => None,
    }
}

/// VmRSS of process `pid` in KiB (0 when it cannot be read).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
