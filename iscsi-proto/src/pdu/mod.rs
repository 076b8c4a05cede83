//! PDU encoding and decoding (RFC 7143 §11): the typed BHS ([`bhs`]), framing with AHS,
//! padding and CRC32C digests ([`frame`]), field helpers ([`fields`]), Reject reasons
//! ([`RejectReason`]), which requests take a command-window slot ([`in_command_window`]), and
//! the owned [`Pdu`] used by tests and slow paths. The connection's hot path uses
//! [`frame::check_frame`] and [`Bhs::decode`] directly on its receive buffer.

pub mod bhs;
pub mod fields;
pub mod frame;
mod reject;
mod window;

pub use bhs::*;
pub use frame::{Ahs, Decoded, Digests, Frame, check_frame, pad4};
pub use reject::RejectReason;
pub use window::{in_command_window, opcode_in_window};

/// Errors found while decoding a PDU. None of them panics; the connection maps them to a
/// Reject or a connection close.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PduError {
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("data segment of {len} bytes exceeds the limit of {max}")]
    DataSegmentTooLong { len: u32, max: u32 },
    #[error("malformed additional header segment")]
    BadAhs,
    #[error("header digest mismatch (got {got:#010x}, computed {computed:#010x})")]
    HeaderDigest { got: u32, computed: u32 },
    #[error("data digest mismatch (got {got:#010x}, computed {computed:#010x})")]
    DataDigest { got: u32, computed: u32 },
    #[error("PDU too large to encode")]
    TooLarge,
}

/// An owned PDU: header, additional header segments and data segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdu {
    pub bhs: Bhs,
    pub ahs: Vec<Ahs>,
    pub data: Vec<u8>,
}

impl Pdu {
    /// A PDU without AHS.
    pub fn new(bhs: Bhs, data: Vec<u8>) -> Self {
        Pdu {
            bhs,
            ahs: Vec::new(),
            data,
        }
    }

    /// Encodes to wire bytes with the given digests.
    pub fn encode(&self, dg: Digests) -> Result<Vec<u8>, PduError> {
        frame::encode(&self.bhs, &self.ahs, &self.data, dg)
    }

    /// Decodes one PDU from the front of `buf`, enforcing `max_data` (the
    /// MaxRecvDataSegmentLength we declared). `Ok(Decoded::Incomplete(n))` asks for at
    /// least `n` bytes in total.
    pub fn decode(buf: &[u8], max_data: u32, dg: Digests) -> Result<Decoded<Pdu>, PduError> {
        let f = match check_frame(buf, max_data, dg)? {
            Decoded::Incomplete(n) => return Ok(Decoded::Incomplete(n)),
            Decoded::Complete(f) => f,
        };
        let hdr = f.header(buf);
        let bhs = Bhs::decode(hdr)?;
        let ahs = frame::parse_ahs(f.ahs(buf))?;
        let data = f.data(buf).to_vec();
        Ok(Decoded::Complete(Pdu { bhs, ahs, data }))
    }
}

#[cfg(test)]
mod tests;
