//! The iSER header (RFC 7145 §9.2, the layout Linux ib_iser uses): 28 bytes that precede
//! the 48-byte iSCSI BHS in every Send — flags (opcode in the high nibble, WSV 0x08, RSV
//! 0x04), three reserved bytes, write STag (u32 BE), write base VA (u64 BE), read STag
//! (u32 BE), read base VA (u64 BE). Also the Hello / HelloReply messages (RFC 7145 §9.3),
//! which reuse the first word of the header and leave the rest reserved.
//!
//! Reserved bits and bytes are sent as zero and ignored on receipt.

/// Length of the iSER header.
pub const ISER_HDR_LEN: usize = 28;
/// Length of the iSCSI Basic Header Segment that follows it.
pub const BHS_LEN: usize = 48;
/// iSER header + BHS: the smallest iSCSI control-type Send.
pub const ISER_HEADERS_LEN: usize = ISER_HDR_LEN + BHS_LEN;

/// Opcode (high nibble of byte 0): iSCSI control-type PDU.
pub const OP_ISCSI_CTRL: u8 = 0x1;
/// Opcode: iSER Hello (initiator → target).
pub const OP_HELLO: u8 = 0x2;
/// Opcode: iSER HelloReply (target → initiator).
pub const OP_HELLO_REPLY: u8 = 0x3;
/// Flag: the write STag / base VA are valid (the initiator has data for the target).
pub const FLAG_WSV: u8 = 0x08;
/// Flag: the read STag / base VA are valid (the initiator expects data from the target).
pub const FLAG_RSV: u8 = 0x04;
/// HelloReply flag: the target rejects the connection.
pub const FLAG_REJECT: u8 = 0x01;
/// The iSER protocol version of RFC 7145 (MaxVer / MinVer / CurVer fields).
pub const ISER_VERSION: u8 = 10;

/// An advertised initiator buffer: its STag (rkey) and base virtual address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteBuf {
    /// The STag (remote key) that RDMA READ / WRITE requests must carry.
    pub stag: u32,
    /// The base virtual address (or offset, with zero-based VA) of the buffer.
    pub va: u64,
}

/// The iSER header of an iSCSI control-type PDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControlHeader {
    /// The initiator buffer holding SCSI WRITE data (WSV set), read by RDMA READ.
    pub write: Option<RemoteBuf>,
    /// The initiator buffer for SCSI READ data (RSV set), filled by RDMA WRITE.
    pub read: Option<RemoteBuf>,
}

/// iSER Hello (RFC 7145 §9.3): the initiator's version range and its inbound RDMA READ
/// depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Highest iSER version the initiator supports (4 bits).
    pub max_ver: u8,
    /// Lowest iSER version the initiator supports (4 bits).
    pub min_ver: u8,
    /// iSER-IRD: RDMA READ requests the initiator can serve at once.
    pub ird: u16,
}

/// iSER HelloReply (RFC 7145 §9.4): the target's answer to a Hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloReply {
    /// The target refuses the connection (no common version, or resources).
    pub reject: bool,
    /// Highest iSER version the target supports (4 bits).
    pub max_ver: u8,
    /// The version in use on this connection (4 bits).
    pub cur_ver: u8,
    /// iSER-ORD: RDMA READ requests the target will have outstanding at once.
    pub ord: u16,
}

/// One decoded iSER header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IserMessage {
    /// An iSCSI control-type PDU follows (the BHS starts at [`ISER_HDR_LEN`]).
    Control(ControlHeader),
    /// An iSER Hello message.
    Hello(Hello),
    /// An iSER HelloReply message.
    HelloReply(HelloReply),
}

/// Why a received iSER header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer bytes than the message needs.
    #[error("iSER message too short: {got} bytes, need {need}")]
    Short {
        /// Bytes received.
        got: usize,
        /// Bytes required.
        need: usize,
    },
    /// The opcode nibble is not iSCSI control, Hello or HelloReply.
    #[error("unknown iSER opcode {0:#x}")]
    UnknownOpcode(u8),
    /// A 4-bit version field was given a value above 15.
    #[error("iSER version {0} does not fit in 4 bits")]
    VersionTooLarge(u8),
}

/// Minimum bytes of a Hello / HelloReply that carry information (the first word).
const HELLO_MIN_LEN: usize = 4;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

fn versions(hi: u8, lo: u8) -> Result<u8, HeaderError> {
    for v in [hi, lo] {
        if v > 0xf {
            return Err(HeaderError::VersionTooLarge(v));
        }
    }
    Ok((hi << 4) | lo)
}

impl ControlHeader {
    /// The header of a control-type PDU that advertises no buffers (what the target sends
    /// in front of every response: targets never advertise STags).
    pub const NONE: ControlHeader = ControlHeader {
        write: None,
        read: None,
    };

    /// The 28 wire bytes.
    pub fn encode(&self) -> [u8; ISER_HDR_LEN] {
        let mut b = [0u8; ISER_HDR_LEN];
        b[0] = OP_ISCSI_CTRL << 4;
        if let Some(w) = self.write {
            b[0] |= FLAG_WSV;
            b[4..8].copy_from_slice(&w.stag.to_be_bytes());
            b[8..16].copy_from_slice(&w.va.to_be_bytes());
        }
        if let Some(r) = self.read {
            b[0] |= FLAG_RSV;
            b[16..20].copy_from_slice(&r.stag.to_be_bytes());
            b[20..28].copy_from_slice(&r.va.to_be_bytes());
        }
        b
    }
}

impl Hello {
    /// The wire bytes: a full iSER header whose first word carries the Hello.
    pub fn encode(&self) -> Result<[u8; ISER_HDR_LEN], HeaderError> {
        let mut b = [0u8; ISER_HDR_LEN];
        b[0] = OP_HELLO << 4;
        b[1] = versions(self.max_ver, self.min_ver)?;
        b[2..4].copy_from_slice(&self.ird.to_be_bytes());
        Ok(b)
    }
}

impl HelloReply {
    /// The wire bytes: a full iSER header whose first word carries the HelloReply.
    pub fn encode(&self) -> Result<[u8; ISER_HDR_LEN], HeaderError> {
        let mut b = [0u8; ISER_HDR_LEN];
        b[0] = OP_HELLO_REPLY << 4;
        if self.reject {
            b[0] |= FLAG_REJECT;
        }
        b[1] = versions(self.max_ver, self.cur_ver)?;
        b[2..4].copy_from_slice(&self.ord.to_be_bytes());
        Ok(b)
    }

    /// The target's answer to `hello`: version [`ISER_VERSION`] when the initiator's range
    /// holds it (else a reject), and an ORD no larger than the initiator's IRD.
    pub fn answer(hello: &Hello, target_ord: u16) -> HelloReply {
        let ok = hello.min_ver <= ISER_VERSION && ISER_VERSION <= hello.max_ver;
        HelloReply {
            reject: !ok,
            max_ver: ISER_VERSION,
            cur_ver: ISER_VERSION,
            ord: target_ord.min(hello.ird),
        }
    }
}

impl IserMessage {
    /// Decodes the iSER header at the start of a received Send. For a control-type PDU
    /// the iSCSI PDU starts at [`ISER_HDR_LEN`]; use [`IserMessage::split`] to get it.
    pub fn decode(b: &[u8]) -> Result<IserMessage, HeaderError> {
        let Some(&flags) = b.first() else {
            return Err(HeaderError::Short {
                got: 0,
                need: HELLO_MIN_LEN,
            });
        };
        let need = |need: usize| {
            if b.len() < need {
                Err(HeaderError::Short { got: b.len(), need })
            } else {
                Ok(())
            }
        };
        match flags >> 4 {
            OP_ISCSI_CTRL => {
                need(ISER_HDR_LEN)?;
                let write = (flags & FLAG_WSV != 0).then(|| RemoteBuf {
                    stag: be32(b, 4),
                    va: be64(b, 8),
                });
                let read = (flags & FLAG_RSV != 0).then(|| RemoteBuf {
                    stag: be32(b, 16),
                    va: be64(b, 20),
                });
                Ok(IserMessage::Control(ControlHeader { write, read }))
            }
            OP_HELLO => {
                need(HELLO_MIN_LEN)?;
                Ok(IserMessage::Hello(Hello {
                    max_ver: b[1] >> 4,
                    min_ver: b[1] & 0xf,
                    ird: u16::from_be_bytes([b[2], b[3]]),
                }))
            }
            OP_HELLO_REPLY => {
                need(HELLO_MIN_LEN)?;
                Ok(IserMessage::HelloReply(HelloReply {
                    reject: flags & FLAG_REJECT != 0,
                    max_ver: b[1] >> 4,
                    cur_ver: b[1] & 0xf,
                    ord: u16::from_be_bytes([b[2], b[3]]),
                }))
            }
            op => Err(HeaderError::UnknownOpcode(op)),
        }
    }

    /// Decodes the header of a received Send and returns it with the bytes after it (the
    /// BHS and data segment of a control-type PDU; the reserved rest of a Hello). A
    /// control-type PDU must carry at least a whole BHS.
    pub fn split(b: &[u8]) -> Result<(IserMessage, &[u8]), HeaderError> {
        let msg = IserMessage::decode(b)?;
        match msg {
            IserMessage::Control(_) => {
                if b.len() < ISER_HEADERS_LEN {
                    return Err(HeaderError::Short {
                        got: b.len(),
                        need: ISER_HEADERS_LEN,
                    });
                }
                Ok((msg, &b[ISER_HDR_LEN..]))
            }
            _ => Ok((msg, &b[b.len().min(ISER_HDR_LEN)..])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn control_layout() {
        let h = ControlHeader {
            write: Some(RemoteBuf {
                stag: 0x0102_0304,
                va: 0x1112_1314_1516_1718,
            }),
            read: Some(RemoteBuf {
                stag: 0x2122_2324,
                va: 0x3132_3334_3536_3738,
            }),
        };
        let b = h.encode();
        assert_eq!(b[0], 0x10 | FLAG_WSV | FLAG_RSV);
        assert_eq!(&b[1..4], &[0, 0, 0]);
        assert_eq!(&b[4..8], &[1, 2, 3, 4]);
        assert_eq!(&b[8..16], &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
        assert_eq!(&b[16..20], &[0x21, 0x22, 0x23, 0x24]);
        assert_eq!(
            &b[20..28],
            &[0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38]
        );
        assert_eq!(IserMessage::decode(&b), Ok(IserMessage::Control(h)));
        assert_eq!(ControlHeader::NONE.encode()[0], 0x10);
    }

    #[test]
    fn invalid_fields_are_ignored_when_flags_say_so() {
        let mut b = [0xffu8; ISER_HDR_LEN];
        b[0] = 0x10;
        assert_eq!(
            IserMessage::decode(&b),
            Ok(IserMessage::Control(ControlHeader::NONE))
        );
    }

    #[test]
    fn refusals() {
        assert_eq!(
            IserMessage::decode(&[]),
            Err(HeaderError::Short { got: 0, need: 4 })
        );
        assert_eq!(
            IserMessage::decode(&[0x10; 27]),
            Err(HeaderError::Short { got: 27, need: 28 })
        );
        assert_eq!(
            IserMessage::decode(&[0x40; 28]),
            Err(HeaderError::UnknownOpcode(4))
        );
        assert_eq!(
            IserMessage::decode(&[0x00; 28]),
            Err(HeaderError::UnknownOpcode(0))
        );
        assert_eq!(
            IserMessage::split(&[0x10; 75]),
            Err(HeaderError::Short { got: 75, need: 76 })
        );
        let bad = Hello {
            max_ver: 16,
            min_ver: 0,
            ird: 0,
        };
        assert_eq!(bad.encode(), Err(HeaderError::VersionTooLarge(16)));
    }

    #[test]
    fn split_returns_the_bhs() {
        let mut send = ControlHeader::NONE.encode().to_vec();
        send.extend_from_slice(&[0x01; BHS_LEN]);
        send.extend_from_slice(b"data");
        let (m, rest) = IserMessage::split(&send).unwrap();
        assert_eq!(m, IserMessage::Control(ControlHeader::NONE));
        assert_eq!(rest.len(), BHS_LEN + 4);
        assert_eq!(rest[0], 0x01);
    }

    #[test]
    fn hello_exchange() {
        let hello = Hello {
            max_ver: ISER_VERSION,
            min_ver: ISER_VERSION,
            ird: 16,
        };
        let b = hello.encode().unwrap();
        assert_eq!(&b[..4], &[0x20, 0xaa, 0, 16]);
        assert_eq!(IserMessage::decode(&b[..4]), Ok(IserMessage::Hello(hello)));
        let reply = HelloReply::answer(&hello, 32);
        assert_eq!(
            reply,
            HelloReply {
                reject: false,
                max_ver: 10,
                cur_ver: 10,
                ord: 16
            }
        );
        let rb = reply.encode().unwrap();
        assert_eq!(&rb[..4], &[0x30, 0xaa, 0, 16]);
        let old = Hello {
            max_ver: 1,
            min_ver: 1,
            ird: 4,
        };
        let r = HelloReply::answer(&old, 8);
        assert!(r.reject);
        assert_eq!(r.encode().unwrap()[0], 0x31);
        assert_eq!(
            IserMessage::decode(&r.encode().unwrap()),
            Ok(IserMessage::HelloReply(r))
        );
    }

    fn remote() -> impl Strategy<Value = Option<RemoteBuf>> {
        proptest::option::of(
            (any::<u32>(), any::<u64>()).prop_map(|(stag, va)| RemoteBuf { stag, va }),
        )
    }

    proptest! {
        #[test]
        fn control_roundtrip(write in remote(), read in remote()) {
            let h = ControlHeader { write, read };
            prop_assert_eq!(IserMessage::decode(&h.encode()), Ok(IserMessage::Control(h)));
        }

        #[test]
        fn hello_roundtrip(max_ver in 0u8..16, min_ver in 0u8..16, ird: u16, reject: bool) {
            let h = Hello { max_ver, min_ver, ird };
            prop_assert_eq!(IserMessage::decode(&h.encode().unwrap()), Ok(IserMessage::Hello(h)));
            let r = HelloReply { reject, max_ver, cur_ver: min_ver, ord: ird };
            prop_assert_eq!(IserMessage::decode(&r.encode().unwrap()), Ok(IserMessage::HelloReply(r)));
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = IserMessage::split(&b);
        }
    }
}
