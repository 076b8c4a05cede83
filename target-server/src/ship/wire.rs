//! The gateway-to-gateway link's messages and their bytes, sans I/O: a non-owner gateway
//! ships a decoded media action of an RBD LUN to the gateway that owns the LUN and gets the
//! command's status, sense and Data-In back.
//!
//! Every message is a frame: a 4-byte big-endian length of what follows, a 1-byte kind, the
//! body. The link starts with [`Hello`] (client → server: magic, version, the server's
//! token as published in the cluster) answered by a `HelloOk` frame; then any number of
//! [`Request`]s and [`Response`]s, matched by their id. Decoding never panics: anything
//! malformed, truncated or too large is an [`WireError`], and the link is closed.

/// The magic at the start of a hello.
pub const MAGIC: [u8; 4] = *b"NTGS";
/// The link's version.
pub const VERSION: u8 = 1;
/// The token's length (random bytes the server publishes beside the LUN).
pub const TOKEN_LEN: usize = 16;
/// The largest frame accepted (a command's whole write data, with room for its header).
pub const MAX_FRAME: usize = (128 << 20) + 4096;
/// The length prefix.
pub const LEN_PREFIX: usize = 4;

const KIND_HELLO: u8 = 1;
const KIND_HELLO_OK: u8 = 2;
const KIND_REQUEST: u8 = 3;
const KIND_RESPONSE: u8 = 4;

/// Why a frame is not understood.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("frame of {0} bytes is larger than the link allows")]
    TooLarge(usize),
    #[error("frame truncated")]
    Truncated,
    #[error("unknown frame kind {0}")]
    Kind(u8),
    #[error("unknown action {0}")]
    Action(u8),
    #[error("not a numatgt gateway link (bad magic)")]
    Magic,
    #[error("link version {0} is not supported (this gateway speaks {VERSION})")]
    Version(u8),
    #[error("a name is not UTF-8")]
    Utf8,
    #[error("{0} bytes left over after the message")]
    Trailing(usize),
}

/// The opening of a link: who the client is, and the server's token as proof that the
/// client read it from the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u8,
    pub token: [u8; TOKEN_LEN],
}

/// A media action shipped to the owner: the subset of `scsi::Action` that touches the
/// medium and can run on any gateway of the LUN. (EXTENDED COPY, SANITIZE and the self-test
/// are not shipped: the LUN moves for them, as before.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shipped {
    Read {
        lba: u64,
        blocks: u32,
        fua: bool,
    },
    Write {
        lba: u64,
        blocks: u32,
        durable: bool,
        data_offset: u32,
    },
    Sync {
        lba: u64,
        blocks: u32,
    },
    Verify {
        lba: u64,
        blocks: u32,
        same_block: bool,
    },
    CompareAndWrite {
        lba: u64,
        blocks: u32,
        durable: bool,
    },
    OrWrite {
        lba: u64,
        blocks: u32,
        durable: bool,
    },
    AtomicWrite {
        lba: u64,
        blocks: u32,
        durable: bool,
    },
    Unmap {
        ranges: Vec<(u64, u64)>,
    },
    WriteSame {
        lba: u64,
        blocks: u64,
        ndob: bool,
        unmap: bool,
    },
    GetLbaStatus {
        lba: u64,
        alloc_len: u32,
    },
}

impl Shipped {
    /// The shippable part of `a` (`None`: answered where it arrived, or moves the LUN).
    pub fn from_action(a: &scsi::Action) -> Option<Shipped> {
        use scsi::Action as A;
        Some(match a {
            A::Tape(_) | A::Changer(_) | A::Passthrough(_) => return None,
            &A::Read { lba, blocks, fua } => Shipped::Read { lba, blocks, fua },
            &A::Write {
                lba,
                blocks,
                durable,
                data_offset,
            } => Shipped::Write {
                lba,
                blocks,
                durable,
                data_offset: u32::try_from(data_offset).ok()?,
            },
            &A::Sync { lba, blocks } => Shipped::Sync { lba, blocks },
            &A::Verify {
                lba,
                blocks,
                same_block,
            } => Shipped::Verify {
                lba,
                blocks,
                same_block,
            },
            &A::CompareAndWrite {
                lba,
                blocks,
                durable,
            } => Shipped::CompareAndWrite {
                lba,
                blocks,
                durable,
            },
            &A::OrWrite {
                lba,
                blocks,
                durable,
            } => Shipped::OrWrite {
                lba,
                blocks,
                durable,
            },
            &A::AtomicWrite {
                lba,
                blocks,
                durable,
            } => Shipped::AtomicWrite {
                lba,
                blocks,
                durable,
            },
            A::Unmap { ranges } => Shipped::Unmap {
                ranges: ranges.clone(),
            },
            &A::WriteSame {
                lba,
                blocks,
                ndob,
                unmap,
            } => Shipped::WriteSame {
                lba,
                blocks,
                ndob,
                unmap,
            },
            &A::GetLbaStatus { lba, alloc_len } => Shipped::GetLbaStatus { lba, alloc_len },
            A::Complete(_)
            | A::ExtendedCopy(_)
            | A::SelfTest { .. }
            | A::Sanitize(_)
            | A::SetTargetPortGroups(_) => return None,
        })
    }

    /// The action the owner runs.
    pub fn into_action(self) -> scsi::Action {
        use scsi::Action as A;
        match self {
            Shipped::Read { lba, blocks, fua } => A::Read { lba, blocks, fua },
            Shipped::Write {
                lba,
                blocks,
                durable,
                data_offset,
            } => A::Write {
                lba,
                blocks,
                durable,
                data_offset: data_offset as usize,
            },
            Shipped::Sync { lba, blocks } => A::Sync { lba, blocks },
            Shipped::Verify {
                lba,
                blocks,
                same_block,
            } => A::Verify {
                lba,
                blocks,
                same_block,
            },
            Shipped::CompareAndWrite {
                lba,
                blocks,
                durable,
            } => A::CompareAndWrite {
                lba,
                blocks,
                durable,
            },
            Shipped::OrWrite {
                lba,
                blocks,
                durable,
            } => A::OrWrite {
                lba,
                blocks,
                durable,
            },
            Shipped::AtomicWrite {
                lba,
                blocks,
                durable,
            } => A::AtomicWrite {
                lba,
                blocks,
                durable,
            },
            Shipped::Unmap { ranges } => A::Unmap { ranges },
            Shipped::WriteSame {
                lba,
                blocks,
                ndob,
                unmap,
            } => A::WriteSame {
                lba,
                blocks,
                ndob,
                unmap,
            },
            Shipped::GetLbaStatus { lba, alloc_len } => A::GetLbaStatus { lba, alloc_len },
        }
    }

    /// Whether the action carries write data (the request's data is then the command's).
    pub fn has_data(&self) -> bool {
        matches!(
            self,
            Shipped::Write { .. }
                | Shipped::Verify { .. }
                | Shipped::CompareAndWrite { .. }
                | Shipped::OrWrite { .. }
                | Shipped::AtomicWrite { .. }
                | Shipped::WriteSame { ndob: false, .. }
        )
    }
}

/// One shipped command: which LUN (the target's name, the LUN number, and the name of the
/// LUN's ownership record, which names its image: the owner checks that it is the same
/// LUN), the action, and its write data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub id: u32,
    pub target: String,
    pub lun: u64,
    pub record: String,
    pub action: Shipped,
    pub data: Vec<u8>,
}

/// The owner's answer to request `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub id: u32,
    pub status: u8,
    pub sense: Vec<u8>,
    pub data: Vec<u8>,
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello(Hello),
    HelloOk { version: u8 },
    Request(Request),
    Response(Response),
}

/// The length of the frame whose prefix is `prefix`: checked against [`MAX_FRAME`].
pub fn frame_len(prefix: [u8; LEN_PREFIX]) -> Result<usize, WireError> {
    let n = u32::from_be_bytes(prefix) as usize;
    if n > MAX_FRAME {
        return Err(WireError::TooLarge(n));
    }
    if n == 0 {
        return Err(WireError::Truncated);
    }
    Ok(n)
}

/// Builds one frame: the length prefix is filled in by [`Out::finish`].
struct Out(Vec<u8>);

impl Out {
    fn new(kind: u8, room: usize) -> Out {
        let mut v = Vec::with_capacity(LEN_PREFIX + 1 + room);
        v.extend_from_slice(&[0; LEN_PREFIX]);
        v.push(kind);
        Out(v)
    }
    fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    fn u16(&mut self, x: u16) {
        self.0.extend_from_slice(&x.to_be_bytes());
    }
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_be_bytes());
    }
    fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_be_bytes());
    }
    fn bytes16(&mut self, b: &[u8]) {
        let n = b.len().min(u16::MAX as usize);
        self.u16(n as u16);
        self.0.extend_from_slice(&b[..n]);
    }
    /// The frame, its length prefix set (`extra` bytes follow it separately: data written
    /// from its own buffer).
    fn finish(mut self, extra: usize) -> Vec<u8> {
        let n = (self.0.len() - LEN_PREFIX + extra) as u32;
        self.0[..LEN_PREFIX].copy_from_slice(&n.to_be_bytes());
        self.0
    }
}

/// A frame's body being read.
struct In<'a>(&'a [u8]);

impl<'a> In<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Truncated);
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn bool(&mut self) -> Result<bool, WireError> {
        Ok(self.u8()? != 0)
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    fn bytes16(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u16()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Result<String, WireError> {
        std::str::from_utf8(self.bytes16()?)
            .map(str::to_owned)
            .map_err(|_| WireError::Utf8)
    }
    /// The rest of the frame: exactly the `u32` length before it.
    fn data(mut self) -> Result<Vec<u8>, WireError> {
        let n = self.u32()? as usize;
        match self.0.len() {
            len if len < n => Err(WireError::Truncated),
            len if len > n => Err(WireError::Trailing(len - n)),
            _ => Ok(self.0.to_vec()),
        }
    }
    fn end(self) -> Result<(), WireError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

/// A hello frame.
pub fn encode_hello(h: &Hello) -> Vec<u8> {
    let mut o = Out::new(KIND_HELLO, 4 + 1 + TOKEN_LEN);
    o.0.extend_from_slice(&MAGIC);
    o.u8(h.version);
    o.0.extend_from_slice(&h.token);
    o.finish(0)
}

/// The server's answer to a hello it accepts.
pub fn encode_hello_ok() -> Vec<u8> {
    let mut o = Out::new(KIND_HELLO_OK, 1);
    o.u8(VERSION);
    o.finish(0)
}

/// Which LUN a request is for: the target's name, the LUN number, the name of the LUN's
/// ownership record.
#[derive(Debug, Clone, Copy)]
pub struct LunRef<'a> {
    pub target: &'a str,
    pub lun: u64,
    pub record: &'a str,
}

/// A request's frame without its data (`data_len` bytes, written right after it: the
/// length prefix counts them).
pub fn encode_request_head(id: u32, to: LunRef<'_>, action: &Shipped, data_len: usize) -> Vec<u8> {
    let mut o = Out::new(KIND_REQUEST, 64 + to.target.len() + to.record.len());
    o.u32(id);
    o.bytes16(to.target.as_bytes());
    o.u64(to.lun);
    o.bytes16(to.record.as_bytes());
    encode_action(&mut o, action);
    o.u32(data_len as u32);
    o.finish(data_len)
}

fn encode_action(o: &mut Out, a: &Shipped) {
    let lba_blocks = |o: &mut Out, tag: u8, lba: u64, blocks: u32, flag: bool| {
        o.u8(tag);
        o.u64(lba);
        o.u32(blocks);
        o.u8(u8::from(flag));
    };
    match a {
        &Shipped::Read { lba, blocks, fua } => lba_blocks(o, 1, lba, blocks, fua),
        &Shipped::Write {
            lba,
            blocks,
            durable,
            data_offset,
        } => {
            lba_blocks(o, 2, lba, blocks, durable);
            o.u32(data_offset);
        }
        &Shipped::Sync { lba, blocks } => lba_blocks(o, 3, lba, blocks, false),
        &Shipped::Verify {
            lba,
            blocks,
            same_block,
        } => lba_blocks(o, 4, lba, blocks, same_block),
        &Shipped::CompareAndWrite {
            lba,
            blocks,
            durable,
        } => lba_blocks(o, 5, lba, blocks, durable),
        &Shipped::OrWrite {
            lba,
            blocks,
            durable,
        } => lba_blocks(o, 6, lba, blocks, durable),
        &Shipped::AtomicWrite {
            lba,
            blocks,
            durable,
        } => lba_blocks(o, 7, lba, blocks, durable),
        Shipped::Unmap { ranges } => {
            o.u8(8);
            o.u32(ranges.len() as u32);
            for &(lba, n) in ranges {
                o.u64(lba);
                o.u64(n);
            }
        }
        &Shipped::WriteSame {
            lba,
            blocks,
            ndob,
            unmap,
        } => {
            o.u8(9);
            o.u64(lba);
            o.u64(blocks);
            o.u8(u8::from(ndob) | u8::from(unmap) << 1);
        }
        &Shipped::GetLbaStatus { lba, alloc_len } => {
            o.u8(10);
            o.u64(lba);
            o.u32(alloc_len);
        }
    }
}

fn decode_action(i: &mut In<'_>) -> Result<Shipped, WireError> {
    let tag = i.u8()?;
    if (1..=7).contains(&tag) {
        let (lba, blocks, flag) = (i.u64()?, i.u32()?, i.bool()?);
        return Ok(match tag {
            1 => Shipped::Read {
                lba,
                blocks,
                fua: flag,
            },
            2 => Shipped::Write {
                lba,
                blocks,
                durable: flag,
                data_offset: i.u32()?,
            },
            3 => Shipped::Sync { lba, blocks },
            4 => Shipped::Verify {
                lba,
                blocks,
                same_block: flag,
            },
            5 => Shipped::CompareAndWrite {
                lba,
                blocks,
                durable: flag,
            },
            6 => Shipped::OrWrite {
                lba,
                blocks,
                durable: flag,
            },
            _ => Shipped::AtomicWrite {
                lba,
                blocks,
                durable: flag,
            },
        });
    }
    match tag {
        8 => {
            let n = i.u32()? as usize;
            // each range is 16 bytes: a count larger than the frame is a lie
            if n > i.0.len() / 16 {
                return Err(WireError::Truncated);
            }
            let mut ranges = Vec::with_capacity(n);
            for _ in 0..n {
                ranges.push((i.u64()?, i.u64()?));
            }
            Ok(Shipped::Unmap { ranges })
        }
        9 => {
            let (lba, blocks, flags) = (i.u64()?, i.u64()?, i.u8()?);
            Ok(Shipped::WriteSame {
                lba,
                blocks,
                ndob: flags & 1 != 0,
                unmap: flags & 2 != 0,
            })
        }
        10 => Ok(Shipped::GetLbaStatus {
            lba: i.u64()?,
            alloc_len: i.u32()?,
        }),
        t => Err(WireError::Action(t)),
    }
}

/// A response's frame without its data: write `data` right after it.
pub fn encode_response_head(id: u32, status: u8, sense: &[u8], data_len: usize) -> Vec<u8> {
    let mut o = Out::new(KIND_RESPONSE, 12 + sense.len());
    o.u32(id);
    o.u8(status);
    o.bytes16(sense);
    o.u32(data_len as u32);
    o.finish(data_len)
}

/// Decodes one frame's body (everything after the length prefix).
pub fn decode(body: &[u8]) -> Result<Frame, WireError> {
    let mut i = In(body);
    let kind = i.u8()?;
    match kind {
        KIND_HELLO => {
            if i.take(4)? != MAGIC {
                return Err(WireError::Magic);
            }
            let version = i.u8()?;
            if version != VERSION {
                return Err(WireError::Version(version));
            }
            let mut token = [0; TOKEN_LEN];
            token.copy_from_slice(i.take(TOKEN_LEN)?);
            i.end()?;
            Ok(Frame::Hello(Hello { version, token }))
        }
        KIND_HELLO_OK => {
            let version = i.u8()?;
            i.end()?;
            if version != VERSION {
                return Err(WireError::Version(version));
            }
            Ok(Frame::HelloOk { version })
        }
        KIND_REQUEST => {
            let id = i.u32()?;
            let target = i.string()?;
            let lun = i.u64()?;
            let record = i.string()?;
            let action = decode_action(&mut i)?;
            Ok(Frame::Request(Request {
                id,
                target,
                lun,
                record,
                action,
                data: i.data()?,
            }))
        }
        KIND_RESPONSE => {
            let id = i.u32()?;
            let status = i.u8()?;
            let sense = i.bytes16()?.to_vec();
            Ok(Frame::Response(Response {
                id,
                status,
                sense,
                data: i.data()?,
            }))
        }
        k => Err(WireError::Kind(k)),
    }
}

/// Compares two tokens in time that does not depend on where they differ.
pub fn same_token(a: &[u8; TOKEN_LEN], b: &[u8; TOKEN_LEN]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A token's text form (as published in the cluster).
pub fn token_hex(t: &[u8; TOKEN_LEN]) -> String {
    t.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses [`token_hex`].
pub fn parse_token(s: &str) -> Option<[u8; TOKEN_LEN]> {
    let s = s.trim();
    if s.len() != TOKEN_LEN * 2 || !s.is_ascii() {
        return None;
    }
    let mut t = [0; TOKEN_LEN];
    for (i, b) in t.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(frame: &[u8]) -> &[u8] {
        let n = frame_len(frame[..4].try_into().unwrap()).unwrap();
        assert_eq!(n, frame.len() - 4, "the prefix counts the rest");
        &frame[4..]
    }

    fn head_of(r: &Request) -> Vec<u8> {
        let to = LunRef {
            target: &r.target,
            lun: r.lun,
            record: &r.record,
        };
        encode_request_head(r.id, to, &r.action, r.data.len())
    }

    fn whole(head: Vec<u8>, data: &[u8]) -> Vec<u8> {
        let mut v = head;
        v.extend_from_slice(data);
        v
    }

    /// (lba, blocks, flag)
    fn lbf() -> impl Strategy<Value = (u64, u32, bool)> {
        (any::<u64>(), any::<u32>(), any::<bool>())
    }

    fn action() -> impl Strategy<Value = Shipped> {
        prop_oneof![
            lbf().prop_map(|(lba, blocks, fua)| Shipped::Read { lba, blocks, fua }),
            (any::<u64>(), any::<u32>(), any::<bool>(), any::<u32>()).prop_map(
                |(lba, blocks, durable, data_offset)| Shipped::Write {
                    lba,
                    blocks,
                    durable,
                    data_offset
                }
            ),
            (any::<u64>(), any::<u32>()).prop_map(|(lba, blocks)| Shipped::Sync { lba, blocks }),
            lbf().prop_map(|(lba, blocks, same_block)| {
                Shipped::Verify {
                    lba,
                    blocks,
                    same_block,
                }
            }),
            lbf().prop_map(|(lba, blocks, durable)| {
                Shipped::CompareAndWrite {
                    lba,
                    blocks,
                    durable,
                }
            }),
            lbf().prop_map(|(lba, blocks, durable)| {
                Shipped::OrWrite {
                    lba,
                    blocks,
                    durable,
                }
            }),
            lbf().prop_map(|(lba, blocks, durable)| {
                Shipped::AtomicWrite {
                    lba,
                    blocks,
                    durable,
                }
            }),
            proptest::collection::vec((any::<u64>(), any::<u64>()), 0..8)
                .prop_map(|ranges| Shipped::Unmap { ranges }),
            (any::<u64>(), any::<u64>(), any::<bool>(), any::<bool>()).prop_map(
                |(lba, blocks, ndob, unmap)| Shipped::WriteSame {
                    lba,
                    blocks,
                    ndob,
                    unmap
                }
            ),
            (any::<u64>(), any::<u32>())
                .prop_map(|(lba, alloc_len)| Shipped::GetLbaStatus { lba, alloc_len }),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip(
            id in any::<u32>(),
            target in "[a-z0-9.:-]{0,40}",
            lun in any::<u64>(),
            record in "[a-z0-9._]{0,40}",
            action in action(),
            data in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let r = Request { id, target, lun, record, action, data };
            let f = whole(head_of(&r), &r.data);
            prop_assert_eq!(decode(body(&f)), Ok(Frame::Request(r)));
        }

        #[test]
        fn responses_round_trip(
            id in any::<u32>(),
            status in any::<u8>(),
            sense in proptest::collection::vec(any::<u8>(), 0..60),
            data in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let f = whole(encode_response_head(id, status, &sense, data.len()), &data);
            prop_assert_eq!(
                decode(body(&f)),
                Ok(Frame::Response(Response { id, status, sense, data }))
            );
        }

        #[test]
        fn garbage_is_an_error_never_a_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&b);
        }

        #[test]
        fn every_cut_of_a_request_is_refused(action in action(), cut in 0usize..100) {
            let r = Request {
                id: 7,
                target: "iqn.x".into(),
                lun: 1,
                record: "numatgt.alua.disk".into(),
                action,
                data: vec![1; 20],
            };
            let f = whole(head_of(&r), &r.data);
            let b = body(&f);
            let cut = cut.min(b.len() - 1);
            prop_assert!(decode(&b[..cut]).is_err());
        }
    }

    #[test]
    fn hello_checks_magic_version_and_length() {
        let h = Hello {
            version: VERSION,
            token: [7; TOKEN_LEN],
        };
        let f = encode_hello(&h);
        assert_eq!(decode(body(&f)), Ok(Frame::Hello(h)));
        let mut bad = f.clone();
        bad[5] = b'X';
        assert_eq!(decode(&bad[4..]), Err(WireError::Magic));
        let mut v2 = f.clone();
        v2[9] = 2;
        assert_eq!(decode(&v2[4..]), Err(WireError::Version(2)));
        let ok = encode_hello_ok();
        assert_eq!(decode(body(&ok)), Ok(Frame::HelloOk { version: VERSION }));
        assert_eq!(decode(&[99]), Err(WireError::Kind(99)));
    }

    #[test]
    fn frame_lengths_are_bounded() {
        assert_eq!(
            frame_len(((MAX_FRAME + 1) as u32).to_be_bytes()),
            Err(WireError::TooLarge(MAX_FRAME + 1))
        );
        assert_eq!(frame_len([0; 4]), Err(WireError::Truncated));
        assert_eq!(frame_len(5u32.to_be_bytes()), Ok(5));
    }

    #[test]
    fn an_unmap_count_larger_than_its_frame_is_refused() {
        let mut o = Out::new(KIND_REQUEST, 0);
        o.u32(1);
        o.bytes16(b"t");
        o.u64(0);
        o.bytes16(b"r");
        o.u8(8);
        o.u32(u32::MAX);
        let f = o.finish(0);
        assert_eq!(decode(&f[4..]), Err(WireError::Truncated));
    }

    #[test]
    fn tokens_in_text_and_compared() {
        let t = [0xab; TOKEN_LEN];
        assert_eq!(parse_token(&token_hex(&t)), Some(t));
        assert_eq!(parse_token("zz"), None);
        assert_eq!(parse_token(&"é".repeat(16)), None);
        assert!(same_token(&t, &t));
        let mut u = t;
        u[15] = 0;
        assert!(!same_token(&t, &u));
    }

    #[test]
    fn actions_map_both_ways() {
        let a = scsi::Action::Write {
            lba: 9,
            blocks: 2,
            durable: true,
            data_offset: 0,
        };
        let s = Shipped::from_action(&a).unwrap();
        assert!(s.has_data());
        assert!(matches!(
            s.into_action(),
            scsi::Action::Write {
                lba: 9,
                blocks: 2,
                durable: true,
                data_offset: 0
            }
        ));
        assert!(Shipped::from_action(&scsi::Action::Complete(scsi::Completion::good())).is_none());
    }
}
