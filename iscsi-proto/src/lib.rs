//! `iscsi-proto`: a sans-I/O implementation of the target side of iSCSI (RFC 7143).
//!
//! Bytes and events go in, bytes and events come out; this crate never touches sockets,
//! threads, clocks or files. The server feeds received bytes into a [`Connection`]
//! (`rx_space` / `rx_commit`), drains [`Event`]s (`poll_event`), answers commands
//! (`complete_command`, `complete_tmf`) and writes the bytes offered by `gather_tx`.
//!
//! Modules:
//! - [`pdu`]: encode/decode of every RFC 7143 PDU, AHS, padding, CRC32C digests, framing.
//! - [`text`]: `key=value` text encoding and the negotiation rules of RFC 7143 §13.
//! - [`limits`]: the one table of numeric key ranges and defaults (RFC 7143 §13).
//! - [`login`]: the login phase state machine (security / operational stages, CHAP
//!   authentication one-way and mutual in [`login::chap`]).
//! - [`seq`]: CmdSN window and serial-number arithmetic (RFC 1982).
//! - [`conn`]: the full connection state machine (ERL 0, one connection per session).

#![forbid(unsafe_code)]

pub mod conn;
pub mod limits;
pub mod login;
pub mod pdu;
pub mod seq;
pub mod text;

pub use conn::{
    Cdb, CommandResult, ConnConfig, ConnError, Connection, Directory, Event, LoginFailure,
    LoginGrant, LoginReject, LoginRequestInfo, MovedConn, ProtocolError, ScsiCommand, SessionInfo,
    SessionType, TargetRecord, TmfFunction, TmfRequest, TmfResponse,
};
pub use login::{
    AuthFailure, AuthFailureReason, AuthPolicy, ChapAlgorithm, ChapCredential, ChapIdentity,
    ChapPolicy, ChapSecret, RandomSource, RandomUnavailable,
};
pub use pdu::RejectReason;
pub use text::negotiate::SessionParams;

/// Data-In payload that the connection holds until it is sent: one contiguous buffer or a
/// scatter list (e.g. several pinned cache blocks). The connection holds it once for all of
/// the Data-In PDUs that carry it, sends straight from it with writev (never copying it),
/// and drops it when the last of them has been written.
pub trait DataBuf: Send + 'static {
    /// Payload length in bytes.
    fn len(&self) -> usize;
    /// True when the payload is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The contiguous bytes that start at `offset` (up to the end of that piece). Must be
    /// non-empty for every `offset < len()`.
    fn chunk(&self, offset: usize) -> &[u8];
}

macro_rules! contiguous_databuf {
    ($($t:ty),*) => {$(
        impl DataBuf for $t {
            fn len(&self) -> usize {
                let bytes: &[u8] = self;
                bytes.len()
            }
            fn chunk(&self, offset: usize) -> &[u8] {
                let bytes: &[u8] = self;
                bytes.get(offset..).unwrap_or(&[])
            }
        }
    )*};
}
contiguous_databuf!(
    std::sync::Arc<[u8]>,
    std::sync::Arc<Vec<u8>>,
    Vec<u8>,
    &'static [u8]
);

/// Calls `f` with each contiguous piece of `buf[off..off + len]`, in order.
pub fn for_each_chunk<B: DataBuf>(buf: &B, off: usize, len: usize, mut f: impl FnMut(&[u8])) {
    let end = off.saturating_add(len).min(buf.len());
    let mut at = off;
    while at < end {
        let c = buf.chunk(at);
        if c.is_empty() {
            return; // a broken DataBuf: stop rather than loop
        }
        let n = c.len().min(end - at);
        f(&c[..n]);
        at += n;
    }
}

/// A header or data digest algorithm (RFC 7143 §13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Digest {
    /// No digest.
    None,
    /// CRC32C (Castagnoli), as used by iSCSI.
    Crc32c,
}

impl Digest {
    /// The text-key spelling of this digest ("None" / "CRC32C").
    pub fn as_str(self) -> &'static str {
        match self {
            Digest::None => "None",
            Digest::Crc32c => "CRC32C",
        }
    }

    /// Parses a text-key value (case-sensitive per RFC 7143, but tolerant of case).
    pub fn parse(s: &str) -> Option<Digest> {
        if s.eq_ignore_ascii_case("None") {
            Some(Digest::None)
        } else if s.eq_ignore_ascii_case("CRC32C") {
            Some(Digest::Crc32c)
        } else {
            None
        }
    }
}
