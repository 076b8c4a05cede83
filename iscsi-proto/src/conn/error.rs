//! Why a connection closes: [`ConnError`], and for protocol violations the typed
//! [`ProtocolError`]. Each has a `Display` for logs and a stable `kind()` label for
//! counting them by cause.

use crate::pdu::PduError;

/// Why a connection must be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    #[error("login failed (status {class:#04x}/{detail:#04x}): {reason}")]
    LoginFailed {
        class: u8,
        detail: u8,
        /// Why, in words (never a secret).
        reason: String,
        /// For authentication failures: the reason and CHAP user, to count and log.
        auth: Option<crate::login::AuthFailure>,
    },
    #[error("login did not complete in time")]
    LoginTimeout,
    #[error("protocol error: {0}")]
    Protocol(ProtocolError),
    #[error("header digest error")]
    HeaderDigest,
    #[error("data digest error on a PDU carrying task data")]
    DataDigest,
    #[error("{0} NOP-In pings unanswered")]
    NopTimeout(u32),
}

impl ConnError {
    /// Stable snake_case label of the cause (for metrics); a protocol error gives its own
    /// [`ProtocolError::kind`]. No two causes share a label.
    pub fn kind(&self) -> &'static str {
        match self {
            ConnError::LoginFailed { .. } => "login_failed",
            ConnError::LoginTimeout => "login_timeout",
            ConnError::Protocol(p) => p.kind(),
            ConnError::HeaderDigest => "header_digest",
            ConnError::DataDigest => "data_digest",
            ConnError::NopTimeout(_) => "nop_timeout",
        }
    }
}

impl From<ProtocolError> for ConnError {
    fn from(e: ProtocolError) -> Self {
        ConnError::Protocol(e)
    }
}

/// A protocol violation by the initiator that ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A data segment longer than the MaxRecvDataSegmentLength we declared.
    #[error("data segment of {len} bytes exceeds MaxRecvDataSegmentLength {max}")]
    DataSegmentTooLong { len: u32, max: u32 },
    /// A PDU that cannot be framed (e.g. a malformed AHS) before all of it arrived.
    #[error("{0}")]
    MalformedPdu(PduError),
    #[error("unknown opcode during login")]
    UnknownOpcodeDuringLogin,
    /// A known opcode other than Login Request before the login completed.
    #[error("opcode {0:#04x} during login")]
    OpcodeDuringLogin(u8),
    #[error("login request in full feature phase")]
    LoginInFullFeature,
    /// A Data-Out for a task not expecting one, or at the wrong buffer offset.
    #[error("Data-Out out of order or unexpected")]
    DataOutUnexpected,
    #[error("Data-Out beyond expected transfer length")]
    DataOutBeyondLength,
    /// Unsolicited Data-Out past FirstBurstLength, out of DataSN order or after the burst.
    #[error("bad unsolicited Data-Out")]
    BadUnsolicitedDataOut,
    #[error("Data-Out with unknown TTT")]
    DataOutUnknownTtt,
    /// Solicited Data-Out not matching its R2T (DataSN, offset or length).
    #[error("bad solicited Data-Out")]
    BadSolicitedDataOut,
    /// RDMA transport: a Send whose length does not match the PDU its BHS describes.
    #[error("RDMA Send of {got} bytes for a PDU of {expected}")]
    PduSizeMismatch { got: usize, expected: usize },
    /// RDMA datamover: data to move for a task that announced no buffer for it.
    #[error("no RDMA {} buffer announced for ITT {itt:#x}", if *.write { "write" } else { "read" })]
    RdmaBufferMissing { itt: u32, write: bool },
}

impl ProtocolError {
    /// Stable snake_case label (for metrics).
    pub fn kind(&self) -> &'static str {
        match self {
            ProtocolError::DataSegmentTooLong { .. } => "data_segment_too_long",
            ProtocolError::MalformedPdu(_) => "malformed_pdu",
            ProtocolError::UnknownOpcodeDuringLogin => "unknown_opcode_during_login",
            ProtocolError::OpcodeDuringLogin(_) => "opcode_during_login",
            ProtocolError::LoginInFullFeature => "login_in_full_feature",
            ProtocolError::DataOutUnexpected => "data_out_unexpected",
            ProtocolError::DataOutBeyondLength => "data_out_beyond_length",
            ProtocolError::BadUnsolicitedDataOut => "bad_unsolicited_data_out",
            ProtocolError::DataOutUnknownTtt => "data_out_unknown_ttt",
            ProtocolError::BadSolicitedDataOut => "bad_solicited_data_out",
            ProtocolError::PduSizeMismatch { .. } => "pdu_size_mismatch",
            ProtocolError::RdmaBufferMissing { .. } => "rdma_buffer_missing",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_text_and_distinct_kinds() {
        let all = [
            ConnError::LoginFailed {
                class: 2,
                detail: 1,
                reason: "x".into(),
                auth: None,
            },
            ConnError::LoginTimeout,
            ConnError::HeaderDigest,
            ConnError::DataDigest,
            ConnError::NopTimeout(3),
            ProtocolError::DataSegmentTooLong {
                len: 9000,
                max: 8192,
            }
            .into(),
            ProtocolError::MalformedPdu(PduError::BadAhs).into(),
            ProtocolError::UnknownOpcodeDuringLogin.into(),
            ProtocolError::OpcodeDuringLogin(0x01).into(),
            ProtocolError::LoginInFullFeature.into(),
            ProtocolError::DataOutUnexpected.into(),
            ProtocolError::DataOutBeyondLength.into(),
            ProtocolError::BadUnsolicitedDataOut.into(),
            ProtocolError::DataOutUnknownTtt.into(),
            ProtocolError::BadSolicitedDataOut.into(),
        ];
        let mut kinds = std::collections::HashSet::new();
        for e in &all {
            assert!(kinds.insert(e.kind()), "{e:?}");
            assert!(
                e.kind()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_')
            );
        }
        let text: Vec<String> = all[5..].iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "protocol error: data segment of 9000 bytes exceeds MaxRecvDataSegmentLength 8192",
                "protocol error: malformed additional header segment",
                "protocol error: unknown opcode during login",
                "protocol error: opcode 0x01 during login",
                "protocol error: login request in full feature phase",
                "protocol error: Data-Out out of order or unexpected",
                "protocol error: Data-Out beyond expected transfer length",
                "protocol error: bad unsolicited Data-Out",
                "protocol error: Data-Out with unknown TTT",
                "protocol error: bad solicited Data-Out",
            ]
        );
    }
}
