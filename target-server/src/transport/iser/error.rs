//! Why an iSER link failed or ended ([`IserError`]): the close reason of its connection, or
//! why a connect request was refused.

use iser::proto::{CreditError, HeaderError};
use rdma::{CmEventKind, WcStatus};

/// Why an iSER link failed or ended.
#[derive(Debug, thiserror::Error)]
pub enum IserError {
    /// A verbs or CM call failed (`what` says which step).
    #[error("{what}: {source}")]
    Rdma {
        what: &'static str,
        #[source]
        source: rdma::Error,
    },
    /// Registering a buffer of the connection failed (mostly the locked-memory limit).
    #[error("registering {len} bytes: {source} (RLIMIT_MEMLOCK / CAP_IPC_LOCK?)")]
    Register {
        len: usize,
        #[source]
        source: rdma::Error,
    },
    /// The receive credits were configured or counted wrong (a bug).
    #[error("receive credits: {0}")]
    Credits(#[from] CreditError),
    /// A received message's iSER header is malformed.
    #[error("iSER: {0}")]
    Header(#[from] HeaderError),
    /// The initiator sent a Hello message, which only iSERHelloRequired=Yes allows.
    #[error("iSER Hello without iSERHelloRequired=Yes")]
    Hello,
    /// The CM reported DISCONNECTED (or TIMEWAIT_EXIT) while the connection was open.
    #[error("disconnected by the initiator")]
    Disconnected,
    #[error("RDMA device removed")]
    DeviceRemoved,
    /// Requests on the send queue and none completed for this long: the initiator posts no
    /// receives (its Sends are retried for ever on Receiver-Not-Ready) or is gone.
    #[error("nothing sent completed for {secs} s (the initiator posts no receives?)")]
    SendStalled { secs: u64 },
    /// The CM reported a connection error.
    #[error("connection failed ({kind:?}, {status})")]
    ConnectFailed { kind: CmEventKind, status: i32 },
    #[error("receive failed: {0}")]
    ReceiveFailed(WcStatus),
    /// A Send, RDMA WRITE or RDMA READ completed in error.
    #[error("{op} failed: {status} (vendor error {vendor_err:#x})")]
    RequestFailed {
        op: &'static str,
        status: WcStatus,
        vendor_err: u32,
    },
    #[error("completion of unknown request {0}")]
    UnknownRequest(u64),
    #[error("receive of {len} bytes in a {cap}-byte buffer")]
    ReceiveTooLong { len: usize, cap: usize },
    #[error("PDU of {0} bytes exceeds a send buffer")]
    PduTooLong(usize),
    #[error("READ data shorter than announced")]
    ShortData,
    /// A buffer offset outside its registered region (a bug).
    #[error("{0} out of range")]
    OutOfRange(&'static str),
    /// A READ's payload was handed to an earlier request (a bug).
    #[error("payload already handed over")]
    PayloadGone,
    /// An RDMA READ's completion polled where its data cannot be delivered (a bug).
    #[error("an RDMA READ completed where its data cannot be delivered")]
    ReadUndeliverable,
}

impl IserError {
    /// The error of the verbs or CM step `what`.
    pub(super) fn rdma(what: &'static str) -> impl FnOnce(rdma::Error) -> IserError {
        move |source| IserError::Rdma { what, source }
    }
}
