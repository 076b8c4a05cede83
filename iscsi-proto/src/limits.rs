//! The one table of numeric iSCSI keys (RFC 7143 §13): each key's legal range, its RFC
//! default and the value numatgt offers unless configured otherwise. Negotiation
//! (`text::negotiate`), [`crate::ConnConfig`], the configuration file checks and the
//! management interface all take their bounds from here, and the cross-key rule
//! FirstBurstLength ≤ MaxBurstLength is [`check_bursts`].

/// One numeric key: its range, defaults and where RFC 7143 defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRange {
    /// The key as written on the wire.
    pub name: &'static str,
    pub min: u32,
    pub max: u32,
    /// The value in force when the key is not negotiated (RFC 7143).
    pub rfc_default: u32,
    /// What numatgt offers when nothing is configured.
    pub target_default: u32,
    /// Where RFC 7143 defines the key, e.g. "§13.13".
    pub section: &'static str,
}

impl KeyRange {
    /// True when `v` is in `min..=max`.
    pub const fn contains(&self, v: u64) -> bool {
        v >= self.min as u64 && v <= self.max as u64
    }

    /// `v` brought into `min..=max`.
    pub const fn clamp(&self, v: u32) -> u32 {
        if v < self.min {
            self.min
        } else if v > self.max {
            self.max
        } else {
            v
        }
    }

    /// `(min, max)` widened, for range checks on parsed numbers.
    pub const fn bounds(&self) -> (u64, u64) {
        (self.min as u64, self.max as u64)
    }
}

const fn key(
    name: &'static str,
    (min, max): (u32, u32),
    rfc_default: u32,
    target_default: u32,
    section: &'static str,
) -> KeyRange {
    KeyRange {
        name,
        min,
        max,
        rfc_default,
        target_default,
        section,
    }
}

/// Largest data length a 24-bit field holds (2^24 - 1).
const LEN24: (u32, u32) = (512, 0xff_ffff);

pub const MAX_CONNECTIONS: KeyRange = key("MaxConnections", (1, 65_535), 1, 1, "§13.2");
pub const MAX_RECV_DATA_SEGMENT_LENGTH: KeyRange =
    key("MaxRecvDataSegmentLength", LEN24, 8192, 262_144, "§13.12");
pub const MAX_BURST_LENGTH: KeyRange = key("MaxBurstLength", LEN24, 262_144, 262_144, "§13.13");
pub const FIRST_BURST_LENGTH: KeyRange = key("FirstBurstLength", LEN24, 65_536, 65_536, "§13.14");
pub const DEFAULT_TIME2WAIT: KeyRange = key("DefaultTime2Wait", (0, 3600), 2, 2, "§13.15");
pub const DEFAULT_TIME2RETAIN: KeyRange = key("DefaultTime2Retain", (0, 3600), 20, 20, "§13.16");
pub const MAX_OUTSTANDING_R2T: KeyRange = key("MaxOutstandingR2T", (1, 65_535), 1, 1, "§13.17");
pub const ERROR_RECOVERY_LEVEL: KeyRange = key("ErrorRecoveryLevel", (0, 2), 0, 0, "§13.20");
pub const ISCSI_PROTOCOL_LEVEL: KeyRange = key("iSCSIProtocolLevel", (0, 31), 1, 1, "§13.24");

/// Every numeric key, in RFC order.
pub const NUMERIC_KEYS: [KeyRange; 9] = [
    MAX_CONNECTIONS,
    MAX_RECV_DATA_SEGMENT_LENGTH,
    MAX_BURST_LENGTH,
    FIRST_BURST_LENGTH,
    DEFAULT_TIME2WAIT,
    DEFAULT_TIME2RETAIN,
    MAX_OUTSTANDING_R2T,
    ERROR_RECOVERY_LEVEL,
    ISCSI_PROTOCOL_LEVEL,
];

/// The table entry of a key, by name (case-insensitive, as tgtadm users type them).
pub fn find(name: &str) -> Option<&'static KeyRange> {
    NUMERIC_KEYS
        .iter()
        .find(|k| k.name.eq_ignore_ascii_case(name))
}

/// FirstBurstLength ≤ MaxBurstLength (RFC 7143 §13.14), or the words that say why not.
pub fn check_bursts(first_burst_length: u32, max_burst_length: u32) -> Result<(), String> {
    if first_burst_length <= max_burst_length {
        Ok(())
    } else {
        Err(format!(
            "FirstBurstLength ({first_burst_length}) must not exceed MaxBurstLength \
             ({max_burst_length})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for k in NUMERIC_KEYS {
            assert!(k.min <= k.max, "{}", k.name);
            assert!(k.contains(k.rfc_default.into()), "{}", k.name);
            assert!(k.contains(k.target_default.into()), "{}", k.name);
            assert_eq!(find(&k.name.to_ascii_lowercase()), Some(&k));
            assert_eq!(k.clamp(0), k.min);
            assert_eq!(k.clamp(u32::MAX), k.max);
        }
        assert_eq!(find("Bogus"), None);
        assert!(check_bursts(512, 512).is_ok());
        assert_eq!(
            check_bursts(65_536, 4096),
            Err("FirstBurstLength (65536) must not exceed MaxBurstLength (4096)".into())
        );
    }
}
