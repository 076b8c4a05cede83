//! The iSER login keys (RFC 7145 §6) and the target's side of their negotiation:
//! `RDMAExtensions` (must end Yes on an iSER connection), `InitiatorRecvDataSegmentLength`
//! and `TargetRecvDataSegmentLength` (512..2^24-1, default 8192, the smaller value wins),
//! `MaxOutstandingUnexpectedPDUs` (0 = no limit, else 2..2^32-1, the smaller limit wins)
//! and `iSERHelloRequired` (Yes/No, default No, AND).
//!
//! RFC 7145 describes the length and unexpected-PDU keys as each side declaring what it can
//! receive; tgt and libiscsi treat them as negotiations whose smaller value wins. The
//! target answers with the smaller of the offer and its own limit, which is safe under
//! both readings: neither side is ever told it may send more than the other can take.
//!
//! Only these keys are handled here. Every other key goes, untouched and in order, to the
//! iSCSI negotiation of `iscsi-proto` (`text::negotiate`); `key=value` parsing, numbers and
//! the shared range type come from there too. Linux ib_iser sends only the first three
//! keys (never Hello, `MaxOutstandingUnexpectedPDUs` or `iSERHelloRequired`).

use iscsi_proto::limits::KeyRange;
use iscsi_proto::text::kv::{self, TextError};
use iscsi_proto::text::negotiate::parse_num;

/// `RDMAExtensions` (RFC 7145 §6.2).
pub const RDMA_EXTENSIONS: &str = "RDMAExtensions";
/// `iSERHelloRequired` (RFC 7145 §6.6).
pub const ISER_HELLO_REQUIRED: &str = "iSERHelloRequired";

/// `InitiatorRecvDataSegmentLength` (RFC 7145 §6.4): what the initiator can receive in
/// one control-type PDU, i.e. what the target may send.
pub const INITIATOR_RECV_DATA_SEGMENT_LENGTH: KeyRange = KeyRange {
    name: "InitiatorRecvDataSegmentLength",
    min: 512,
    max: 0xff_ffff,
    rfc_default: 8192,
    target_default: 8192,
    section: "RFC 7145 §6.4",
};

/// `TargetRecvDataSegmentLength` (RFC 7145 §6.3): what the target can receive in one
/// control-type PDU (the size of its posted receive buffers minus the headers).
pub const TARGET_RECV_DATA_SEGMENT_LENGTH: KeyRange = KeyRange {
    name: "TargetRecvDataSegmentLength",
    min: 512,
    max: 0xff_ffff,
    rfc_default: 8192,
    target_default: 8192,
    section: "RFC 7145 §6.3",
};

/// `MaxOutstandingUnexpectedPDUs` (RFC 7145 §6.5). Its legal values are 0 (no limit) and
/// `min..=max`; 1 is illegal.
pub const MAX_OUTSTANDING_UNEXPECTED_PDUS: KeyRange = KeyRange {
    name: "MaxOutstandingUnexpectedPDUs",
    min: 2,
    max: u32::MAX,
    rfc_default: 0,
    target_default: 0,
    section: "RFC 7145 §6.5",
};

/// Data bytes a Linux ib_iser initiator can take in one control-type PDU in full feature
/// phase, whatever it declared at login: its full-feature receive buffers hold the iSER
/// header, the BHS and 128 bytes (enough for sense data; NOP-In carries none).
pub const LINUX_FULL_FEATURE_RECV_DATA: u32 = 128;

/// True for the keys this module negotiates.
pub fn is_iser_key(key: &str) -> bool {
    key == RDMA_EXTENSIONS
        || key == ISER_HELLO_REQUIRED
        || key == INITIATOR_RECV_DATA_SEGMENT_LENGTH.name
        || key == TARGET_RECV_DATA_SEGMENT_LENGTH.name
        || key == MAX_OUTSTANDING_UNEXPECTED_PDUS.name
}

/// The target's limits and preferences for the iSER keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IserLimits {
    /// Largest data segment the target can receive in a control-type PDU (its receive
    /// buffers). Clamped to 512..2^24-1.
    pub target_recv_data_segment_length: u32,
    /// Largest data segment the target is willing to send in a control-type PDU.
    /// Clamped to 512..2^24-1.
    pub initiator_recv_data_segment_length: u32,
    /// Most unexpected PDUs the target can take at once (0 = no limit). 1 counts as 2.
    pub max_outstanding_unexpected_pdus: u32,
    /// The target can run the iSER Hello exchange.
    pub hello: bool,
}

impl Default for IserLimits {
    fn default() -> Self {
        IserLimits {
            target_recv_data_segment_length: TARGET_RECV_DATA_SEGMENT_LENGTH.target_default,
            initiator_recv_data_segment_length: INITIATOR_RECV_DATA_SEGMENT_LENGTH.target_default,
            max_outstanding_unexpected_pdus: MAX_OUTSTANDING_UNEXPECTED_PDUS.target_default,
            hello: false,
        }
    }
}

/// The negotiated iSER parameters of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IserParams {
    /// `RDMAExtensions` ended Yes.
    pub rdma_extensions: bool,
    /// Largest data segment the target may send in a control-type PDU.
    pub initiator_recv_data_segment_length: u32,
    /// Largest data segment the initiator may send in a control-type PDU.
    pub target_recv_data_segment_length: u32,
    /// Limit on outstanding unexpected PDUs (0 = none).
    pub max_outstanding_unexpected_pdus: u32,
    /// The initiator will send an iSER Hello before full feature phase.
    pub hello_required: bool,
}

impl Default for IserParams {
    /// The RFC 7145 defaults (before any key is negotiated).
    fn default() -> Self {
        IserParams {
            rdma_extensions: false,
            initiator_recv_data_segment_length: INITIATOR_RECV_DATA_SEGMENT_LENGTH.rfc_default,
            target_recv_data_segment_length: TARGET_RECV_DATA_SEGMENT_LENGTH.rfc_default,
            max_outstanding_unexpected_pdus: MAX_OUTSTANDING_UNEXPECTED_PDUS.rfc_default,
            hello_required: false,
        }
    }
}

impl IserParams {
    /// Size of each receive buffer the target posts: iSER header, BHS and the largest data
    /// segment the initiator may send.
    pub fn target_recv_buffer_len(&self) -> usize {
        super::header::ISER_HEADERS_LEN + self.target_recv_data_segment_length as usize
    }

    /// Most data bytes the target puts in one control-type PDU it sends. During login the
    /// negotiated `InitiatorRecvDataSegmentLength` holds (Linux posts 8 KiB login
    /// buffers); in full feature phase it is further capped at
    /// [`LINUX_FULL_FEATURE_RECV_DATA`], because Linux declares more than its buffers hold.
    /// Longer Text responses are split with the C bit; sense data fits.
    pub fn max_send_data_segment(&self, full_feature: bool) -> u32 {
        if full_feature {
            self.initiator_recv_data_segment_length
                .min(LINUX_FULL_FEATURE_RECV_DATA)
        } else {
            self.initiator_recv_data_segment_length
        }
    }
}

/// A login the target must refuse because of an iSER key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IserKeyError {
    /// A value outside the key's legal range or spelling.
    #[error("{key}={value} is not legal ({expected})")]
    BadValue {
        /// The key.
        key: String,
        /// The offered value.
        value: String,
        /// What the key accepts.
        expected: &'static str,
    },
    /// The same iSER key twice in one login.
    #[error("key {0} negotiated twice")]
    Duplicate(String),
    /// `RDMAExtensions=No` on an RDMA connection: there is no TCP to fall back to.
    #[error("RDMAExtensions=No offered on an iSER connection")]
    RdmaExtensionsRefused,
    /// The login ended without `RDMAExtensions=Yes`.
    #[error("login on an iSER connection ended without RDMAExtensions=Yes")]
    RdmaExtensionsMissing,
    /// The login text itself is malformed.
    #[error("login text: {0}")]
    Text(#[from] TextError),
}

/// The target's side of the iSER keys over a whole login (possibly several Login
/// Requests): answer each key with [`IserNegotiator::respond`], then [`finish`].
///
/// [`finish`]: IserNegotiator::finish
#[derive(Debug, Clone)]
pub struct IserNegotiator {
    limits: IserLimits,
    params: IserParams,
    seen: Vec<&'static str>,
}

fn bad(key: &str, value: &str, expected: &'static str) -> IserKeyError {
    IserKeyError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        expected,
    }
}

fn yes_no(key: &str, value: &str) -> Result<bool, IserKeyError> {
    match value {
        "Yes" => Ok(true),
        "No" => Ok(false),
        _ => Err(bad(key, value, "Yes or No")),
    }
}

fn length(range: &KeyRange, value: &str) -> Result<u32, IserKeyError> {
    match parse_num(value) {
        Some(v) if range.contains(v) => Ok(v as u32),
        _ => Err(bad(range.name, value, "a number from 512 to 16777215")),
    }
}

/// The smaller of two limits where 0 means "no limit".
fn min_limit(a: u32, b: u32) -> u32 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

impl IserNegotiator {
    /// A negotiation from the RFC defaults against `limits` (brought into legal ranges).
    pub fn new(limits: IserLimits) -> Self {
        let mut limits = limits;
        limits.target_recv_data_segment_length =
            TARGET_RECV_DATA_SEGMENT_LENGTH.clamp(limits.target_recv_data_segment_length);
        limits.initiator_recv_data_segment_length =
            INITIATOR_RECV_DATA_SEGMENT_LENGTH.clamp(limits.initiator_recv_data_segment_length);
        if limits.max_outstanding_unexpected_pdus == 1 {
            limits.max_outstanding_unexpected_pdus = 2;
        }
        IserNegotiator {
            limits,
            params: IserParams::default(),
            seen: Vec::new(),
        }
    }

    /// Answers one iSER key offered by the initiator: `Ok(Some(value))` is sent back as
    /// `key=value`. Keys for which [`is_iser_key`] is false are not this negotiator's and
    /// get `Ok(None)` (hand them to the iSCSI negotiation). Illegal values are errors: the
    /// login fails with an initiator error.
    pub fn respond(&mut self, key: &str, value: &str) -> Result<Option<String>, IserKeyError> {
        let name: &'static str = match key {
            RDMA_EXTENSIONS => RDMA_EXTENSIONS,
            ISER_HELLO_REQUIRED => ISER_HELLO_REQUIRED,
            k if k == INITIATOR_RECV_DATA_SEGMENT_LENGTH.name => {
                INITIATOR_RECV_DATA_SEGMENT_LENGTH.name
            }
            k if k == TARGET_RECV_DATA_SEGMENT_LENGTH.name => TARGET_RECV_DATA_SEGMENT_LENGTH.name,
            k if k == MAX_OUTSTANDING_UNEXPECTED_PDUS.name => MAX_OUTSTANDING_UNEXPECTED_PDUS.name,
            _ => return Ok(None),
        };
        if self.seen.contains(&name) {
            return Err(IserKeyError::Duplicate(name.to_string()));
        }
        let l = self.limits;
        let p = &mut self.params;
        let answer = match name {
            RDMA_EXTENSIONS => {
                if !yes_no(key, value)? {
                    return Err(IserKeyError::RdmaExtensionsRefused);
                }
                p.rdma_extensions = true;
                "Yes".to_string()
            }
            ISER_HELLO_REQUIRED => {
                p.hello_required = yes_no(key, value)? && l.hello;
                if p.hello_required { "Yes" } else { "No" }.to_string()
            }
            _ if name == INITIATOR_RECV_DATA_SEGMENT_LENGTH.name => {
                let v = length(&INITIATOR_RECV_DATA_SEGMENT_LENGTH, value)?;
                p.initiator_recv_data_segment_length = v.min(l.initiator_recv_data_segment_length);
                p.initiator_recv_data_segment_length.to_string()
            }
            _ if name == TARGET_RECV_DATA_SEGMENT_LENGTH.name => {
                let v = length(&TARGET_RECV_DATA_SEGMENT_LENGTH, value)?;
                p.target_recv_data_segment_length = v.min(l.target_recv_data_segment_length);
                p.target_recv_data_segment_length.to_string()
            }
            _ => {
                let v = match parse_num(value) {
                    Some(0) => 0,
                    Some(v) if MAX_OUTSTANDING_UNEXPECTED_PDUS.contains(v) => v as u32,
                    _ => return Err(bad(key, value, "0 or a number from 2 to 4294967295")),
                };
                p.max_outstanding_unexpected_pdus = min_limit(v, l.max_outstanding_unexpected_pdus);
                p.max_outstanding_unexpected_pdus.to_string()
            }
        };
        self.seen.push(name);
        Ok(Some(answer))
    }

    /// Keys the target must declare itself before the login ends because the initiator
    /// did not offer them and the default does not fit the target:
    /// `TargetRecvDataSegmentLength` when the target receives less than the default 8192.
    /// Marks them as negotiated.
    pub fn declarations(&mut self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let trdsl = TARGET_RECV_DATA_SEGMENT_LENGTH.name;
        if !self.seen.contains(&trdsl)
            && self.limits.target_recv_data_segment_length
                < self.params.target_recv_data_segment_length
        {
            self.params.target_recv_data_segment_length =
                self.limits.target_recv_data_segment_length;
            self.seen.push(trdsl);
            out.push((
                trdsl.to_string(),
                self.params.target_recv_data_segment_length.to_string(),
            ));
        }
        out
    }

    /// The parameters so far (RFC defaults for keys not negotiated).
    pub fn params(&self) -> IserParams {
        self.params
    }

    /// Ends the login: the parameters, or an error when `RDMAExtensions=Yes` was never
    /// negotiated.
    pub fn finish(&self) -> Result<IserParams, IserKeyError> {
        if !self.params.rdma_extensions {
            return Err(IserKeyError::RdmaExtensionsMissing);
        }
        Ok(self.params)
    }
}

/// The outcome of [`negotiate`]: the target's answers to the iSER keys, the keys left for
/// the iSCSI negotiation, and the iSER parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IserNegotiation {
    /// `key=value` answers (and declarations) for the iSER keys, in offer order.
    pub answers: Vec<(String, String)>,
    /// The offered pairs that are not iSER keys, in order, for `iscsi-proto`.
    pub others: Vec<(String, String)>,
    /// The negotiated iSER parameters.
    pub params: IserParams,
}

/// Negotiates a complete login's offered pairs in one go (the whole login text, e.g. from
/// `iscsi_proto::text::kv::parse`). Fails on illegal values, duplicates and a missing or
/// refused `RDMAExtensions=Yes`.
pub fn negotiate(
    offered: &[(String, String)],
    limits: IserLimits,
) -> Result<IserNegotiation, IserKeyError> {
    let mut n = IserNegotiator::new(limits);
    let mut answers = Vec::new();
    let mut others = Vec::new();
    for (k, v) in offered {
        match n.respond(k, v)? {
            Some(a) => answers.push((k.clone(), a)),
            None => others.push((k.clone(), v.clone())),
        }
    }
    answers.extend(n.declarations());
    let params = n.finish()?;
    Ok(IserNegotiation {
        answers,
        others,
        params,
    })
}

/// [`negotiate`] on raw `key=value\0` login data, parsed by `iscsi-proto`.
pub fn negotiate_text(data: &[u8], limits: IserLimits) -> Result<IserNegotiation, IserKeyError> {
    negotiate(&kv::parse(data)?, limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn linux_login() {
        let text = b"InitiatorName=iqn.x\0RDMAExtensions=Yes\0\
            InitiatorRecvDataSegmentLength=262144\0TargetRecvDataSegmentLength=262144\0\
            MaxRecvDataSegmentLength=262144\0";
        let n = negotiate_text(text, IserLimits::default()).unwrap();
        assert_eq!(
            n.answers,
            pairs(&[
                ("RDMAExtensions", "Yes"),
                ("InitiatorRecvDataSegmentLength", "8192"),
                ("TargetRecvDataSegmentLength", "8192"),
            ])
        );
        assert_eq!(
            n.others,
            pairs(&[
                ("InitiatorName", "iqn.x"),
                ("MaxRecvDataSegmentLength", "262144")
            ])
        );
        assert_eq!(
            n.params,
            IserParams {
                rdma_extensions: true,
                initiator_recv_data_segment_length: 8192,
                target_recv_data_segment_length: 8192,
                max_outstanding_unexpected_pdus: 0,
                hello_required: false,
            }
        );
    }

    #[test]
    fn smaller_offers_win() {
        let limits = IserLimits {
            target_recv_data_segment_length: 65536,
            initiator_recv_data_segment_length: 65536,
            max_outstanding_unexpected_pdus: 8,
            hello: true,
        };
        let n = negotiate(
            &pairs(&[
                ("RDMAExtensions", "Yes"),
                ("InitiatorRecvDataSegmentLength", "4096"),
                ("TargetRecvDataSegmentLength", "0x1000"),
                ("MaxOutstandingUnexpectedPDUs", "0"),
                ("iSERHelloRequired", "Yes"),
            ]),
            limits,
        )
        .unwrap();
        assert_eq!(n.params.initiator_recv_data_segment_length, 4096);
        assert_eq!(n.params.target_recv_data_segment_length, 4096);
        assert_eq!(n.params.max_outstanding_unexpected_pdus, 8);
        assert!(n.params.hello_required);
        assert_eq!(
            n.answers[3],
            ("MaxOutstandingUnexpectedPDUs".into(), "8".into())
        );
        assert_eq!(n.answers[4], ("iSERHelloRequired".into(), "Yes".into()));
        // Without Hello support the target answers No.
        let n = negotiate(
            &pairs(&[("RDMAExtensions", "Yes"), ("iSERHelloRequired", "Yes")]),
            IserLimits::default(),
        )
        .unwrap();
        assert!(!n.params.hello_required);
        assert_eq!(n.answers[1].1, "No");
    }

    #[test]
    fn declaration_when_target_receives_less_than_default() {
        let limits = IserLimits {
            target_recv_data_segment_length: 4096,
            ..IserLimits::default()
        };
        let n = negotiate(&pairs(&[("RDMAExtensions", "Yes")]), limits).unwrap();
        assert_eq!(
            n.answers[1],
            ("TargetRecvDataSegmentLength".into(), "4096".into())
        );
        assert_eq!(n.params.target_recv_data_segment_length, 4096);
        let n = negotiate(&pairs(&[("RDMAExtensions", "Yes")]), IserLimits::default()).unwrap();
        assert_eq!(n.answers.len(), 1);
    }

    #[test]
    fn refusals() {
        let l = IserLimits::default();
        let e = |p: &[(&str, &str)]| negotiate(&pairs(p), l).unwrap_err();
        assert_eq!(
            e(&[("RDMAExtensions", "No")]),
            IserKeyError::RdmaExtensionsRefused
        );
        assert_eq!(
            e(&[("InitiatorName", "x")]),
            IserKeyError::RdmaExtensionsMissing
        );
        assert!(matches!(
            e(&[("RDMAExtensions", "yes")]),
            IserKeyError::BadValue { .. }
        ));
        assert_eq!(
            e(&[("RDMAExtensions", "Yes"), ("RDMAExtensions", "Yes")]),
            IserKeyError::Duplicate("RDMAExtensions".into())
        );
        for bad in ["511", "16777216", "", "x", "-1", "0x"] {
            assert!(matches!(
                e(&[("TargetRecvDataSegmentLength", bad)]),
                IserKeyError::BadValue { .. }
            ));
            assert!(matches!(
                e(&[("InitiatorRecvDataSegmentLength", bad)]),
                IserKeyError::BadValue { .. }
            ));
        }
        for bad in ["1", "4294967296", "many"] {
            let err = e(&[("MaxOutstandingUnexpectedPDUs", bad)]);
            assert!(err.to_string().contains("0 or a number"), "{err}");
        }
        assert!(matches!(
            e(&[("iSERHelloRequired", "maybe")]),
            IserKeyError::BadValue { .. }
        ));
        assert!(matches!(
            negotiate_text(b"NoEquals\0", l),
            Err(IserKeyError::Text(TextError::NoEquals))
        ));
    }

    #[test]
    fn buffer_sizes() {
        let p = IserParams::default();
        assert_eq!(p.target_recv_buffer_len(), 76 + 8192);
        assert_eq!(p.max_send_data_segment(false), 8192);
        assert_eq!(p.max_send_data_segment(true), 128);
        let small = IserParams {
            initiator_recv_data_segment_length: 512,
            ..p
        };
        assert_eq!(small.max_send_data_segment(true), 128);
    }

    #[test]
    fn limits_are_brought_into_range() {
        let n = IserNegotiator::new(IserLimits {
            target_recv_data_segment_length: 1,
            initiator_recv_data_segment_length: u32::MAX,
            max_outstanding_unexpected_pdus: 1,
            hello: false,
        });
        assert_eq!(n.limits.target_recv_data_segment_length, 512);
        assert_eq!(n.limits.initiator_recv_data_segment_length, 0xff_ffff);
        assert_eq!(n.limits.max_outstanding_unexpected_pdus, 2);
        assert!(!is_iser_key("MaxRecvDataSegmentLength"));
    }

    proptest! {
        #[test]
        fn any_value_is_answered_or_refused(
            key in prop::sample::select(vec![
                RDMA_EXTENSIONS,
                ISER_HELLO_REQUIRED,
                "InitiatorRecvDataSegmentLength",
                "TargetRecvDataSegmentLength",
                "MaxOutstandingUnexpectedPDUs",
                "HeaderDigest",
            ]),
            value in "[ -~]{0,24}",
        ) {
            let mut n = IserNegotiator::new(IserLimits::default());
            match n.respond(key, &value) {
                Ok(Some(answer)) => {
                    prop_assert!(is_iser_key(key));
                    // Whatever was accepted is answered with a legal value of the key.
                    let again = IserNegotiator::new(IserLimits::default()).respond(key, &answer);
                    prop_assert!(again.is_ok(), "{key}={answer}");
                }
                Ok(None) => prop_assert!(!is_iser_key(key)),
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn lengths_never_exceed_either_side(offer in 512u32..=0xff_ffff, ours in 0u32..=0x0200_0000, unexpected: u32, our_unexpected: u32) {
            let limits = IserLimits {
                target_recv_data_segment_length: ours,
                initiator_recv_data_segment_length: ours,
                max_outstanding_unexpected_pdus: our_unexpected,
                hello: false,
            };
            let o = offer.to_string();
            let u = unexpected.to_string();
            let r = negotiate(&pairs(&[
                ("RDMAExtensions", "Yes"),
                ("TargetRecvDataSegmentLength", &o),
                ("InitiatorRecvDataSegmentLength", &o),
                ("MaxOutstandingUnexpectedPDUs", &u),
            ]), limits);
            if unexpected == 1 {
                prop_assert!(r.is_err());
                return Ok(());
            }
            let p = r.unwrap().params;
            for v in [p.target_recv_data_segment_length, p.initiator_recv_data_segment_length] {
                prop_assert!(v <= offer);
                prop_assert!(v <= ours.max(512));
                prop_assert!(TARGET_RECV_DATA_SEGMENT_LENGTH.contains(v.into()));
            }
            let m = p.max_outstanding_unexpected_pdus;
            if unexpected != 0 { prop_assert!(m != 0 && m <= unexpected); }
            if our_unexpected > 1 { prop_assert!(m != 0 && m <= our_unexpected); }
            prop_assert!(m != 1);
        }
    }
}
