//! Reject reasons (RFC 7143 §11.17.1) as a type: the code a Reject PDU carries, the RFC's
//! words for logs and a stable label for counting them.

/// Why the target rejects a PDU (RFC 7143 §11.17.1). The Reject PDU itself keeps the raw
/// code ([`crate::pdu::Reject::reason`]) so that any value decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectReason {
    DataDigest,
    SnackReject,
    ProtocolError,
    CommandNotSupported,
    ImmediateCommandReject,
    TaskInProgress,
    InvalidDataAck,
    InvalidPduField,
    OutOfResources,
    WaitingForLogout,
}

impl RejectReason {
    /// Every reason, in code order.
    pub const ALL: [RejectReason; 10] = [
        RejectReason::DataDigest,
        RejectReason::SnackReject,
        RejectReason::ProtocolError,
        RejectReason::CommandNotSupported,
        RejectReason::ImmediateCommandReject,
        RejectReason::TaskInProgress,
        RejectReason::InvalidDataAck,
        RejectReason::InvalidPduField,
        RejectReason::OutOfResources,
        RejectReason::WaitingForLogout,
    ];

    /// The Reason field code.
    pub const fn code(self) -> u8 {
        match self {
            RejectReason::DataDigest => 0x02,
            RejectReason::SnackReject => 0x03,
            RejectReason::ProtocolError => 0x04,
            RejectReason::CommandNotSupported => 0x05,
            RejectReason::ImmediateCommandReject => 0x06,
            RejectReason::TaskInProgress => 0x07,
            RejectReason::InvalidDataAck => 0x08,
            RejectReason::InvalidPduField => 0x09,
            RejectReason::OutOfResources => 0x0a,
            RejectReason::WaitingForLogout => 0x0c,
        }
    }

    /// The reason of a Reason field code (`None`: reserved or obsolete codes).
    pub fn from_code(code: u8) -> Option<RejectReason> {
        RejectReason::ALL.into_iter().find(|r| r.code() == code)
    }

    /// Stable snake_case label (for metrics: `numatgt_pdus_rejected_total{reason}`).
    pub const fn label(self) -> &'static str {
        match self {
            RejectReason::DataDigest => "data_digest",
            RejectReason::SnackReject => "snack_reject",
            RejectReason::ProtocolError => "protocol_error",
            RejectReason::CommandNotSupported => "command_not_supported",
            RejectReason::ImmediateCommandReject => "immediate_command_reject",
            RejectReason::TaskInProgress => "task_in_progress",
            RejectReason::InvalidDataAck => "invalid_data_ack",
            RejectReason::InvalidPduField => "invalid_pdu_field",
            RejectReason::OutOfResources => "out_of_resources",
            RejectReason::WaitingForLogout => "waiting_for_logout",
        }
    }
}

impl std::fmt::Display for RejectReason {
    /// The RFC's name of the reason and its code.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let words = match self {
            RejectReason::DataDigest => "data (payload) digest error",
            RejectReason::SnackReject => "SNACK reject",
            RejectReason::ProtocolError => "protocol error",
            RejectReason::CommandNotSupported => "command not supported",
            RejectReason::ImmediateCommandReject => "immediate command reject",
            RejectReason::TaskInProgress => "task in progress",
            RejectReason::InvalidDataAck => "invalid data ack",
            RejectReason::InvalidPduField => "invalid PDU field",
            RejectReason::OutOfResources => "long operation reject / out of resources",
            RejectReason::WaitingForLogout => "waiting for logout",
        };
        write!(f, "{words} ({:#04x})", self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_labels() {
        let mut kinds = std::collections::HashSet::new();
        for r in RejectReason::ALL {
            assert_eq!(RejectReason::from_code(r.code()), Some(r));
            assert!(kinds.insert(r.label()), "{r:?}");
            assert!(
                r.label()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_')
            );
        }
        for code in [0x00, 0x01, 0x0b, 0x0d, 0xff] {
            assert_eq!(RejectReason::from_code(code), None);
        }
        assert_eq!(
            RejectReason::InvalidPduField.to_string(),
            "invalid PDU field (0x09)"
        );
    }
}
