//! Negotiation rules for the login and operational keys of RFC 7143 §13, as the
//! responder (target): list selection, numerical min/max, boolean AND/OR, declarative
//! keys, `Irrelevant` / `NotUnderstood` / `Reject` answers, duplicate detection and
//! range checks. The result is a [`SessionParams`].
//!
//! Authentication keys (AuthMethod) are selected here from the offered method list; the
//! method-specific exchange (e.g. CHAP_A/CHAP_N/...) belongs to the login module's
//! authenticator so that CHAP can be added without touching these rules.

use crate::Digest;
use crate::limits::{self, KeyRange};
use std::collections::HashSet;

/// Negotiated (or declared) session and connection parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionParams {
    pub header_digest: Digest,
    pub data_digest: Digest,
    pub max_connections: u16,
    pub initial_r2t: bool,
    pub immediate_data: bool,
    /// What the initiator may send us in one PDU (declared by the target).
    pub target_max_recv_data_segment_length: u32,
    /// What we may send in one PDU (declared by the initiator).
    pub initiator_max_recv_data_segment_length: u32,
    pub max_burst_length: u32,
    pub first_burst_length: u32,
    pub default_time2wait: u16,
    pub default_time2retain: u16,
    pub max_outstanding_r2t: u32,
    pub data_pdu_in_order: bool,
    pub data_sequence_in_order: bool,
    pub error_recovery_level: u8,
    pub initiator_alias: Option<String>,
    pub target_alias: Option<String>,
    pub target_portal_group_tag: u16,
}

impl Default for SessionParams {
    /// RFC 7143 defaults.
    fn default() -> Self {
        SessionParams {
            header_digest: Digest::None,
            data_digest: Digest::None,
            max_connections: limits::MAX_CONNECTIONS.rfc_default as u16,
            initial_r2t: true,
            immediate_data: true,
            target_max_recv_data_segment_length: limits::MAX_RECV_DATA_SEGMENT_LENGTH.rfc_default,
            initiator_max_recv_data_segment_length: limits::MAX_RECV_DATA_SEGMENT_LENGTH
                .rfc_default,
            max_burst_length: limits::MAX_BURST_LENGTH.rfc_default,
            first_burst_length: limits::FIRST_BURST_LENGTH.rfc_default,
            default_time2wait: limits::DEFAULT_TIME2WAIT.rfc_default as u16,
            default_time2retain: limits::DEFAULT_TIME2RETAIN.rfc_default as u16,
            max_outstanding_r2t: limits::MAX_OUTSTANDING_R2T.rfc_default,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            error_recovery_level: limits::ERROR_RECOVERY_LEVEL.rfc_default as u8,
            initiator_alias: None,
            target_alias: None,
            target_portal_group_tag: 1,
        }
    }
}

/// The target's side of every negotiation: its limits and preferences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    pub header_digest: Vec<Digest>,
    pub data_digest: Vec<Digest>,
    pub auth_methods: Vec<String>,
    pub max_connections: u16,
    pub initial_r2t: bool,
    pub immediate_data: bool,
    pub max_recv_data_segment_length: u32,
    pub max_burst_length: u32,
    pub first_burst_length: u32,
    pub default_time2wait: u16,
    pub default_time2retain: u16,
    pub max_outstanding_r2t: u32,
    pub data_pdu_in_order: bool,
    pub data_sequence_in_order: bool,
    pub error_recovery_level: u8,
}

impl Default for Offer {
    fn default() -> Self {
        Offer {
            header_digest: vec![Digest::None, Digest::Crc32c],
            data_digest: vec![Digest::None, Digest::Crc32c],
            auth_methods: vec!["None".to_string()],
            max_connections: limits::MAX_CONNECTIONS.target_default as u16,
            initial_r2t: true,
            immediate_data: true,
            max_recv_data_segment_length: limits::MAX_RECV_DATA_SEGMENT_LENGTH.target_default,
            max_burst_length: limits::MAX_BURST_LENGTH.target_default,
            first_burst_length: limits::FIRST_BURST_LENGTH.target_default,
            default_time2wait: limits::DEFAULT_TIME2WAIT.target_default as u16,
            default_time2retain: limits::DEFAULT_TIME2RETAIN.target_default as u16,
            max_outstanding_r2t: limits::MAX_OUTSTANDING_R2T.target_default,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            error_recovery_level: limits::ERROR_RECOVERY_LEVEL.target_default as u8,
        }
    }
}

/// Where a key is being negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Login, security stage (CSG=0).
    Security,
    /// Login, operational stage (CSG=1).
    Operational,
    /// A Text request in full feature phase.
    FullFeature,
}

/// Negotiation failures that end the login (or answer a Text request with Reject).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NegError {
    #[error("key {0} negotiated twice")]
    Duplicate(String),
}

/// Special answer values.
pub const NOT_UNDERSTOOD: &str = "NotUnderstood";
pub const IRRELEVANT: &str = "Irrelevant";
pub const REJECT: &str = "Reject";

/// Answer for one key: `Some(value)` is sent back as `key=value`, `None` means no answer
/// (declarative keys, or keys consumed by the login itself).
pub type Answer = Option<String>;

/// Parses a numerical value (decimal or 0x-hex, RFC 7143 §6.1).
pub fn parse_num(v: &str) -> Option<u64> {
    if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        if h.is_empty() || h.len() > 16 {
            return None;
        }
        u64::from_str_radix(h, 16).ok()
    } else {
        if v.is_empty() || v.len() > 20 || !v.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        v.parse().ok()
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

fn yes_no(b: bool) -> String {
    if b { "Yes" } else { "No" }.to_string()
}

/// Keys that may only be negotiated during login (LO / IO keys).
fn login_only(key: &str) -> bool {
    matches!(
        key,
        "HeaderDigest"
            | "DataDigest"
            | "MaxConnections"
            | "InitialR2T"
            | "ImmediateData"
            | "MaxBurstLength"
            | "FirstBurstLength"
            | "DefaultTime2Wait"
            | "DefaultTime2Retain"
            | "MaxOutstandingR2T"
            | "DataPDUInOrder"
            | "DataSequenceInOrder"
            | "ErrorRecoveryLevel"
            | "AuthMethod"
            | "SessionType"
            | "InitiatorName"
            | "TargetName"
            | "TaskReporting"
            | "iSCSIProtocolLevel"
    )
}

/// Session-wide keys that RFC 7143 marks irrelevant for discovery sessions.
fn irrelevant_in_discovery(key: &str) -> bool {
    matches!(
        key,
        "MaxConnections"
            | "InitialR2T"
            | "ImmediateData"
            | "MaxBurstLength"
            | "FirstBurstLength"
            | "MaxOutstandingR2T"
            | "DataPDUInOrder"
            | "DataSequenceInOrder"
    )
}

/// The responder side of one negotiation (a whole login, or one Text exchange).
#[derive(Debug, Clone)]
pub struct Negotiator {
    pub offer: Offer,
    pub params: SessionParams,
    seen: HashSet<String>,
    pub discovery: bool,
}

impl Negotiator {
    /// Starts from the RFC defaults.
    pub fn new(offer: Offer) -> Self {
        Negotiator {
            offer,
            params: SessionParams::default(),
            seen: HashSet::new(),
            discovery: false,
        }
    }

    /// Forgets which keys were seen (a new Text exchange in full feature phase).
    pub fn begin_exchange(&mut self) {
        self.seen.clear();
    }

    /// Answers one `key=value` offered by the initiator.
    pub fn respond(&mut self, key: &str, value: &str, phase: Phase) -> Result<Answer, NegError> {
        if key.starts_with("X-") || key.starts_with("X#") {
            return Ok(Some(NOT_UNDERSTOOD.into()));
        }
        if !self.seen.insert(key.to_string()) {
            return Err(NegError::Duplicate(key.to_string()));
        }
        if phase == Phase::FullFeature && login_only(key) {
            return Ok(Some(REJECT.into()));
        }
        if self.discovery && irrelevant_in_discovery(key) {
            return Ok(Some(IRRELEVANT.into()));
        }
        let o = &self.offer;
        let p = &mut self.params;
        let ans = match key {
            "HeaderDigest" | "DataDigest" => {
                let allowed = if key == "HeaderDigest" {
                    &o.header_digest
                } else {
                    &o.data_digest
                };
                let pick = value
                    .split(',')
                    .filter_map(Digest::parse)
                    .find(|d| allowed.contains(d));
                match pick {
                    Some(d) => {
                        if key == "HeaderDigest" {
                            p.header_digest = d;
                        } else {
                            p.data_digest = d;
                        }
                        Some(d.as_str().to_string())
                    }
                    None => Some(REJECT.into()),
                }
            }
            "AuthMethod" => {
                if phase != Phase::Security {
                    Some(IRRELEVANT.into())
                } else {
                    let pick = value
                        .split(',')
                        .find(|m| o.auth_methods.iter().any(|a| a == m));
                    Some(pick.map(str::to_string).unwrap_or_else(|| REJECT.into()))
                }
            }
            "MaxConnections" => num_min(value, &limits::MAX_CONNECTIONS, o.max_connections, |v| {
                p.max_connections = v as u16
            }),
            "InitialR2T" => boolean(value, |v| {
                let r = v || o.initial_r2t;
                p.initial_r2t = r;
                r
            }),
            "ImmediateData" => boolean(value, |v| {
                let r = v && o.immediate_data;
                p.immediate_data = r;
                r
            }),
            // RFC 7143 §13.18/§13.19: result function is OR.
            "DataPDUInOrder" => boolean(value, |v| {
                let r = v || o.data_pdu_in_order;
                p.data_pdu_in_order = r;
                r
            }),
            "DataSequenceInOrder" => boolean(value, |v| {
                let r = v || o.data_sequence_in_order;
                p.data_sequence_in_order = r;
                r
            }),
            "MaxBurstLength" => {
                num_min(value, &limits::MAX_BURST_LENGTH, o.max_burst_length, |v| {
                    p.max_burst_length = v as u32
                })
            }
            "FirstBurstLength" => num_min(
                value,
                &limits::FIRST_BURST_LENGTH,
                o.first_burst_length,
                |v| p.first_burst_length = v as u32,
            ),
            "MaxOutstandingR2T" => num_min(
                value,
                &limits::MAX_OUTSTANDING_R2T,
                o.max_outstanding_r2t,
                |v| p.max_outstanding_r2t = v as u32,
            ),
            "DefaultTime2Retain" => num_min(
                value,
                &limits::DEFAULT_TIME2RETAIN,
                o.default_time2retain,
                |v| p.default_time2retain = v as u16,
            ),
            "DefaultTime2Wait" => match parse_num(value) {
                Some(v) if limits::DEFAULT_TIME2WAIT.contains(v) => {
                    let r = v.max(u64::from(o.default_time2wait));
                    p.default_time2wait = r as u16;
                    Some(r.to_string())
                }
                _ => Some(REJECT.into()),
            },
            "ErrorRecoveryLevel" => num_min(
                value,
                &limits::ERROR_RECOVERY_LEVEL,
                o.error_recovery_level,
                |v| p.error_recovery_level = v as u8,
            ),
            "MaxRecvDataSegmentLength" => match parse_num(value) {
                Some(v) if limits::MAX_RECV_DATA_SEGMENT_LENGTH.contains(v) => {
                    p.initiator_max_recv_data_segment_length = v as u32;
                    None
                }
                _ => Some(REJECT.into()),
            },
            "InitiatorAlias" => {
                p.initiator_alias = Some(value.to_string());
                None
            }
            // Consumed by the login state machine / declared by the target only.
            "InitiatorName" | "TargetName" | "SessionType" => None,
            "TargetAlias" | "TargetAddress" | "TargetPortalGroupTag" => Some(REJECT.into()),
            "SendTargets" => Some(IRRELEVANT.into()),
            "TaskReporting" => {
                if value.split(',').any(|v| v == "RFC3720") {
                    Some("RFC3720".into())
                } else {
                    Some(REJECT.into())
                }
            }
            "iSCSIProtocolLevel" => num_min(
                value,
                &limits::ISCSI_PROTOCOL_LEVEL,
                limits::ISCSI_PROTOCOL_LEVEL.target_default,
                |_| {},
            ),
            "IFMarker" | "OFMarker" => Some("No".into()),
            "IFMarkInt" | "OFMarkInt" => Some(REJECT.into()),
            _ => Some(NOT_UNDERSTOOD.into()),
        };
        Ok(ans)
    }

    /// Applies cross-key constraints at the end of login (FirstBurstLength ≤
    /// MaxBurstLength) and returns the parameters.
    pub fn finish(&mut self) -> SessionParams {
        if self.params.first_burst_length > self.params.max_burst_length {
            self.params.first_burst_length = self.params.max_burst_length;
        }
        self.params.clone()
    }
}

/// The minimum of a numerical key in `range` and `ours` (out of range: Reject).
fn num_min(value: &str, range: &KeyRange, ours: impl Into<u64>, set: impl FnOnce(u64)) -> Answer {
    match parse_num(value) {
        Some(v) if range.contains(v) => {
            let r = v.min(ours.into());
            set(r);
            Some(r.to_string())
        }
        _ => Some(REJECT.into()),
    }
}

fn boolean(value: &str, f: impl FnOnce(bool) -> bool) -> Answer {
    match parse_bool(value) {
        Some(v) => Some(yes_no(f(v))),
        None => Some(REJECT.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn neg() -> Negotiator {
        Negotiator::new(Offer::default())
    }
    fn ans(n: &mut Negotiator, k: &str, v: &str) -> Option<String> {
        n.respond(k, v, Phase::Operational).unwrap()
    }

    #[test]
    fn list_keys() {
        let mut n = neg();
        assert_eq!(
            ans(&mut n, "HeaderDigest", "CRC32C,None").as_deref(),
            Some("CRC32C")
        );
        assert_eq!(n.params.header_digest, Digest::Crc32c);
        assert_eq!(ans(&mut n, "DataDigest", "Foo").as_deref(), Some("Reject"));
        let mut n = neg();
        assert_eq!(
            n.respond("AuthMethod", "CHAP,None", Phase::Security)
                .unwrap()
                .as_deref(),
            Some("None")
        );
        let mut n = neg();
        assert_eq!(
            n.respond("AuthMethod", "CHAP", Phase::Security)
                .unwrap()
                .as_deref(),
            Some("Reject")
        );
    }

    #[test]
    fn numeric_and_boolean_rules() {
        let mut n = neg();
        assert_eq!(
            ans(&mut n, "MaxBurstLength", "16776192").as_deref(),
            Some("262144")
        );
        assert_eq!(
            ans(&mut n, "FirstBurstLength", "4096").as_deref(),
            Some("4096")
        );
        assert_eq!(ans(&mut n, "DefaultTime2Wait", "0").as_deref(), Some("2"));
        assert_eq!(ans(&mut n, "DefaultTime2Retain", "0").as_deref(), Some("0"));
        assert_eq!(
            ans(&mut n, "MaxOutstandingR2T", "0").as_deref(),
            Some("Reject")
        );
        assert_eq!(ans(&mut n, "InitialR2T", "No").as_deref(), Some("Yes"));
        assert_eq!(ans(&mut n, "ImmediateData", "Yes").as_deref(), Some("Yes"));
        assert_eq!(ans(&mut n, "DataPDUInOrder", "No").as_deref(), Some("Yes"));
        assert_eq!(ans(&mut n, "ErrorRecoveryLevel", "2").as_deref(), Some("0"));
        assert_eq!(ans(&mut n, "MaxConnections", "8").as_deref(), Some("1"));
        assert_eq!(ans(&mut n, "MaxRecvDataSegmentLength", "65536"), None);
        assert_eq!(n.params.initiator_max_recv_data_segment_length, 65536);
        assert_eq!(
            ans(&mut n, "X-com.example.foo", "1").as_deref(),
            Some("NotUnderstood")
        );
        assert_eq!(ans(&mut n, "X#foo", "1").as_deref(), Some("NotUnderstood"));
        assert_eq!(ans(&mut n, "Bogus", "1").as_deref(), Some("NotUnderstood"));
        assert_eq!(
            ans(&mut n, "DataSequenceInOrder", "maybe").as_deref(),
            Some("Reject")
        );
        assert_eq!(
            n.respond("MaxBurstLength", "512", Phase::Operational),
            Err(NegError::Duplicate("MaxBurstLength".into()))
        );
        assert_eq!(ans(&mut n, "IFMarker", "No").as_deref(), Some("No"));
        assert_eq!(
            ans(&mut n, "OFMarkInt", "2048~8192").as_deref(),
            Some("Reject")
        );
    }

    #[test]
    fn full_feature_and_discovery() {
        let mut n = neg();
        assert_eq!(
            n.respond("MaxBurstLength", "512", Phase::FullFeature)
                .unwrap()
                .as_deref(),
            Some("Reject")
        );
        let mut n = neg();
        n.discovery = true;
        assert_eq!(
            ans(&mut n, "ImmediateData", "Yes").as_deref(),
            Some("Irrelevant")
        );
        assert_eq!(ans(&mut n, "HeaderDigest", "None").as_deref(), Some("None"));
    }

    /// Every numeric key of the table is accepted exactly in its range, and the defaults
    /// come from the table.
    #[test]
    fn bounds_equal_the_limits_table() {
        for k in limits::NUMERIC_KEYS {
            let answer = |v: u64| {
                let mut n = neg();
                n.respond(k.name, &v.to_string(), Phase::Operational)
                    .unwrap()
            };
            let reject = Some(REJECT.to_string());
            assert_ne!(answer(k.min.into()), reject, "{} min", k.name);
            assert_ne!(answer(k.max.into()), reject, "{} max", k.name);
            assert_eq!(answer(u64::from(k.max) + 1), reject, "{} max+1", k.name);
            if k.min > 0 {
                assert_eq!(answer(u64::from(k.min) - 1), reject, "{} min-1", k.name);
            }
        }
        let (p, o) = (SessionParams::default(), Offer::default());
        let rfc = |k: KeyRange| u64::from(k.rfc_default);
        let ours = |k: KeyRange| u64::from(k.target_default);
        let table: [(u64, u64); 6] = [
            (p.max_connections.into(), rfc(limits::MAX_CONNECTIONS)),
            (
                p.initiator_max_recv_data_segment_length.into(),
                rfc(limits::MAX_RECV_DATA_SEGMENT_LENGTH),
            ),
            (p.default_time2wait.into(), rfc(limits::DEFAULT_TIME2WAIT)),
            (o.max_connections.into(), ours(limits::MAX_CONNECTIONS)),
            (
                o.max_recv_data_segment_length.into(),
                ours(limits::MAX_RECV_DATA_SEGMENT_LENGTH),
            ),
            (
                o.error_recovery_level.into(),
                ours(limits::ERROR_RECOVERY_LEVEL),
            ),
        ];
        for (got, want) in table {
            assert_eq!(got, want);
        }
        assert_eq!(o, crate::ConnConfig::default().offer());
    }

    #[test]
    fn first_burst_clamped() {
        let mut n = neg();
        ans(&mut n, "MaxBurstLength", "4096");
        ans(&mut n, "FirstBurstLength", "65536");
        assert_eq!(n.finish().first_burst_length, 4096);
    }

    proptest! {
        #[test]
        fn min_rule(v in 0u64..0x0200_0000) {
            let mut n = neg();
            let a = ans(&mut n, "MaxBurstLength", &v.to_string()).unwrap();
            if (512..=0xff_ffff).contains(&v) {
                prop_assert_eq!(a, v.min(262_144).to_string());
                prop_assert!(u64::from(n.params.max_burst_length) <= v);
            } else {
                prop_assert_eq!(a, "Reject");
            }
        }

        #[test]
        fn max_rule(v in 0u64..5000) {
            let mut n = neg();
            let a = ans(&mut n, "DefaultTime2Wait", &v.to_string()).unwrap();
            if v <= 3600 { prop_assert_eq!(a, v.max(2).to_string()); } else { prop_assert_eq!(a, "Reject"); }
        }

        #[test]
        fn bool_rules(i in any::<bool>(), ours_ir in any::<bool>(), ours_id in any::<bool>()) {
            let offer = Offer { initial_r2t: ours_ir, immediate_data: ours_id, ..Offer::default() };
            let mut n = Negotiator::new(offer);
            let yn = if i { "Yes" } else { "No" };
            let a = ans(&mut n, "InitialR2T", yn).unwrap();
            prop_assert_eq!(a == "Yes", i || ours_ir);
            let a = ans(&mut n, "ImmediateData", yn).unwrap();
            prop_assert_eq!(a == "Yes", i && ours_id);
        }

        #[test]
        fn any_text_never_panics(k in "[ -~]{0,70}", v in "[ -~]{0,70}") {
            let mut n = neg();
            let _ = n.respond(&k, &v, Phase::Operational);
            let _ = n.respond(&k, &v, Phase::Security);
        }
    }
}
