//! The tgtadm wire protocol (tgt's `struct tgtadm_req` / `tgtadm_rsp`, x86-64 layout): the
//! 120-byte request header, the comma-joined `key=value` payload, the response header, and
//! tgtd's error codes with their messages. Pure bytes in, values out: never panics on input.
//!
//! Sans-I/O: the management socket of `numatgtd` and the `numatgtadm` client read and write
//! the bytes; this crate only encodes and decodes them.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;

/// Size of the request header.
pub const REQ_HEADER_LEN: usize = 120;
/// Size of the response header (`err`, `len`).
pub const RSP_HEADER_LEN: usize = 8;
/// Largest request (header + payload) accepted, as tgtd's `MAX_MGT_BUFSIZE`.
pub const MAX_REQUEST_LEN: usize = 8192;
/// `tid` of discovery (global) accounts: `~0`.
pub const GLOBAL_TID: i32 = -1;
/// `lun` when none was given.
pub const NO_LUN: u64 = u64::MAX;
/// `tid` when none was given.
pub const NO_TID: i32 = -1;

/// What the request manages (`enum tgtadm_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `sys`: the daemon itself (state, debug, shutdown).
    System,
    /// `target`: targets, their ACLs and parameters.
    Target,
    /// `logicalunit`: LUNs of a target.
    Device,
    /// `portal`: listening addresses.
    Portal,
    /// `lld`: low-level drivers (iscsi, iser).
    Lld,
    /// `session`: iSCSI sessions of a target.
    Session,
    /// `conn`: connections of a session.
    Connection,
    /// `account`: CHAP accounts.
    Account,
}

impl Mode {
    /// The mode with wire number `v`, or `None` for an unknown number.
    pub fn from_u32(v: u32) -> Option<Mode> {
        Some(match v {
            0 => Mode::System,
            1 => Mode::Target,
            2 => Mode::Device,
            3 => Mode::Portal,
            4 => Mode::Lld,
            5 => Mode::Session,
            6 => Mode::Connection,
            7 => Mode::Account,
            _ => return None,
        })
    }
    /// The mode's wire number.
    pub fn as_u32(self) -> u32 {
        self as u32
    }
}

/// What to do (`enum tgtadm_op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `new`: create.
    New,
    /// `delete`: remove.
    Delete,
    /// `show`: list.
    Show,
    /// `bind`: add an ACL rule or an account to a target.
    Bind,
    /// `unbind`: remove an ACL rule or an account from a target.
    Unbind,
    /// `update`: change parameters.
    Update,
    /// `stats`: counters.
    Stats,
    /// `start`: start a driver.
    Start,
    /// `stop`: stop a driver.
    Stop,
}

impl Op {
    /// The operation with wire number `v`, or `None` for an unknown number.
    pub fn from_u32(v: u32) -> Option<Op> {
        Some(match v {
            0 => Op::New,
            1 => Op::Delete,
            2 => Op::Show,
            3 => Op::Bind,
            4 => Op::Unbind,
            5 => Op::Update,
            6 => Op::Stats,
            7 => Op::Start,
            8 => Op::Stop,
            _ => return None,
        })
    }
    /// The operation's wire number.
    pub fn as_u32(self) -> u32 {
        self as u32
    }
}

/// tgtd's management error codes (`enum tgtadm_errno`), in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrCode {
    /// The request succeeded.
    Success = 0,
    /// An error with no better code.
    UnknownErr,
    /// Out of memory.
    NoMem,
    /// No such low-level driver.
    NoDriver,
    /// No such target.
    NoTarget,
    /// No such logical unit.
    NoLun,
    /// No such session.
    NoSession,
    /// No such connection.
    NoConnection,
    /// No such binding.
    NoBinding,
    /// The target already exists.
    TargetExist,
    /// The logical unit number already exists.
    LunExist,
    /// The binding already exists.
    BindingExist,
    /// The access control rule already exists.
    AclExist,
    /// The access control rule does not exist.
    AclNoExist,
    /// The account already exists.
    UserExist,
    /// No such account.
    NoUser,
    /// Too many accounts.
    TooManyUser,
    /// The request is malformed or not allowed.
    InvalidRequest,
    /// The target already has an outgoing account.
    OutAccountExist,
    /// The target still has sessions.
    TargetActive,
    /// The logical unit is still in use.
    LunActive,
    /// The driver is busy.
    DriverActive,
    /// The operation is not supported.
    UnsupportedOperation,
    /// A parameter is not known.
    UnknownParam,
    /// The device has Prevent Removal set.
    PreventRemoval,
}

const ALL_CODES: [ErrCode; 25] = [
    ErrCode::Success,
    ErrCode::UnknownErr,
    ErrCode::NoMem,
    ErrCode::NoDriver,
    ErrCode::NoTarget,
    ErrCode::NoLun,
    ErrCode::NoSession,
    ErrCode::NoConnection,
    ErrCode::NoBinding,
    ErrCode::TargetExist,
    ErrCode::LunExist,
    ErrCode::BindingExist,
    ErrCode::AclExist,
    ErrCode::AclNoExist,
    ErrCode::UserExist,
    ErrCode::NoUser,
    ErrCode::TooManyUser,
    ErrCode::InvalidRequest,
    ErrCode::OutAccountExist,
    ErrCode::TargetActive,
    ErrCode::LunActive,
    ErrCode::DriverActive,
    ErrCode::UnsupportedOperation,
    ErrCode::UnknownParam,
    ErrCode::PreventRemoval,
];

impl ErrCode {
    /// The code with wire number `v`, or `None` for an unknown number.
    pub fn from_u32(v: u32) -> Option<ErrCode> {
        ALL_CODES.get(v as usize).copied()
    }
    /// The code's wire number.
    pub fn as_u32(self) -> u32 {
        self as u32
    }
    /// tgtadm's text for the code (`tgtadm_strerror`).
    pub fn message(self) -> &'static str {
        match self {
            ErrCode::Success => "success",
            ErrCode::UnknownErr => "unknown error",
            ErrCode::NoMem => "out of memory",
            ErrCode::NoDriver => "can't find the driver",
            ErrCode::NoTarget => "can't find the target",
            ErrCode::NoLun => "can't find the logical unit",
            ErrCode::NoSession => "can't find the session",
            ErrCode::NoConnection => "can't find the connection",
            ErrCode::NoBinding => "can't find the binding",
            ErrCode::TargetExist => "this target already exists",
            ErrCode::LunExist => "this logical unit number already exists",
            ErrCode::BindingExist => "this binding already exists",
            ErrCode::AclExist => "this access control rule already exists",
            ErrCode::AclNoExist => "this access control rule does not exist",
            ErrCode::UserExist => "this account already exists",
            ErrCode::NoUser => "can't find the account",
            ErrCode::TooManyUser => "too many accounts",
            ErrCode::InvalidRequest => "invalid request",
            ErrCode::OutAccountExist => "this target already has an outgoing account",
            ErrCode::TargetActive => "this target is still active",
            ErrCode::LunActive => "this logical unit is still active",
            ErrCode::DriverActive => "this driver is busy",
            ErrCode::UnsupportedOperation => "this operation isn't supported",
            ErrCode::UnknownParam => "unknown parameter",
            ErrCode::PreventRemoval => "this device has Prevent Removal set",
        }
    }
}

impl fmt::Display for ErrCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// A decoded request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqHeader {
    /// [`Mode`] number (kept raw: an unknown mode is answered, not a decode error).
    pub mode: u32,
    /// [`Op`] number (kept raw, as `mode`).
    pub op: u32,
    /// Low-level driver name (`iscsi`, `iser`), NUL-terminated in 64 bytes on the wire.
    pub lld: String,
    /// Length of the whole request, header included.
    pub len: u32,
    /// Target id ([`NO_TID`] when none was given, [`GLOBAL_TID`] for discovery accounts).
    pub tid: i32,
    /// Session id.
    pub sid: u64,
    /// Logical unit number ([`NO_LUN`] when none was given).
    pub lun: u64,
    /// Connection id.
    pub cid: u32,
    /// SCSI host number.
    pub host_no: u32,
    /// Device type of a new LUN (`--device-type`).
    pub device_type: u32,
    /// Account direction: 1 for an outgoing account (`--outgoing`).
    pub ac_dir: u32,
    /// tgtadm's `pack` field (sent as 0, not used by numatgtd).
    pub pack: u32,
    /// `--force`.
    pub force: u32,
}

impl Default for ReqHeader {
    fn default() -> Self {
        ReqHeader {
            mode: 0,
            op: 0,
            lld: String::new(),
            len: REQ_HEADER_LEN as u32,
            tid: NO_TID,
            sid: 0,
            lun: NO_LUN,
            cid: 0,
            host_no: 0,
            device_type: 0,
            ac_dir: 0,
            pack: 0,
            force: 0,
        }
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// Why a request could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// Fewer than [`REQ_HEADER_LEN`] bytes.
    Short,
    /// The header's `len` is smaller than the header.
    BadLength(u32),
    /// The header's `len` is larger than [`MAX_REQUEST_LEN`].
    TooLong(u32),
    /// The driver name has no NUL or is not UTF-8.
    BadLld,
    /// The payload is not UTF-8.
    BadPayload,
}

impl ReqHeader {
    /// Decode the first 120 bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<ReqHeader, WireError> {
        if b.len() < REQ_HEADER_LEN {
            return Err(WireError::Short);
        }
        let lld_raw = &b[8..72];
        let end = lld_raw
            .iter()
            .position(|&c| c == 0)
            .ok_or(WireError::BadLld)?;
        let lld = std::str::from_utf8(&lld_raw[..end])
            .map_err(|_| WireError::BadLld)?
            .to_string();
        let len = u32_at(b, 72);
        if (len as usize) < REQ_HEADER_LEN {
            return Err(WireError::BadLength(len));
        }
        if len as usize > MAX_REQUEST_LEN {
            return Err(WireError::TooLong(len));
        }
        Ok(ReqHeader {
            mode: u32_at(b, 0),
            op: u32_at(b, 4),
            lld,
            len,
            tid: u32_at(b, 76) as i32,
            sid: u64_at(b, 80),
            lun: u64_at(b, 88),
            cid: u32_at(b, 96),
            host_no: u32_at(b, 100),
            device_type: u32_at(b, 104),
            ac_dir: u32_at(b, 108),
            pack: u32_at(b, 112),
            force: u32_at(b, 116),
        })
    }

    /// Encode with `payload` (a NUL is appended when the payload is not empty), fixing `len`.
    pub fn encode(&self, payload: &str) -> Vec<u8> {
        let mut out = vec![0u8; REQ_HEADER_LEN];
        out[0..4].copy_from_slice(&self.mode.to_le_bytes());
        out[4..8].copy_from_slice(&self.op.to_le_bytes());
        let lld = self.lld.as_bytes();
        let n = lld.len().min(63);
        out[8..8 + n].copy_from_slice(&lld[..n]);
        out[76..80].copy_from_slice(&self.tid.to_le_bytes());
        out[80..88].copy_from_slice(&self.sid.to_le_bytes());
        out[88..96].copy_from_slice(&self.lun.to_le_bytes());
        out[96..100].copy_from_slice(&self.cid.to_le_bytes());
        out[100..104].copy_from_slice(&self.host_no.to_le_bytes());
        out[104..108].copy_from_slice(&self.device_type.to_le_bytes());
        out[108..112].copy_from_slice(&self.ac_dir.to_le_bytes());
        out[112..116].copy_from_slice(&self.pack.to_le_bytes());
        out[116..120].copy_from_slice(&self.force.to_le_bytes());
        if !payload.is_empty() {
            out.extend_from_slice(payload.as_bytes());
            out.push(0);
        }
        let len = out.len() as u32;
        out[72..76].copy_from_slice(&len.to_le_bytes());
        out
    }
}

/// The request payload: `key=value` pairs in order, with tgtadm's `targetOps `/`portalOps `
/// prefixes recognised (their pairs are returned with `ops = true`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Payload {
    /// The plain `key=value` pairs, in order.
    pub pairs: Vec<(String, String)>,
    /// The pairs that came from `--params` (after `targetOps`/`portalOps`).
    pub params: Vec<(String, String)>,
}

impl Payload {
    /// Parse the bytes after the header (up to the first NUL).
    pub fn parse(b: &[u8]) -> Result<Payload, WireError> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let text = std::str::from_utf8(&b[..end]).map_err(|_| WireError::BadPayload)?;
        let mut p = Payload::default();
        // `targetOps a=1,b=2,` / `portalOps portal=..,`: everything after it is --params
        let (plain, ops) = match text.find("targetOps ").or_else(|| text.find("portalOps ")) {
            Some(i) => (&text[..i], Some(&text[i + "targetOps ".len()..])),
            None => (text, None),
        };
        for part in plain.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            p.pairs.push((k.to_string(), v.to_string()));
        }
        if let Some(ops) = ops {
            for part in ops.split(',').filter(|s| !s.is_empty()) {
                let (k, v) = part.split_once('=').unwrap_or((part, ""));
                p.params.push((k.trim().to_string(), v.to_string()));
            }
        }
        Ok(p)
    }

    /// The value of the first plain pair named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Encode a response: header (`err`, `len` including the header) and text. As tgtd, a
/// non-empty text carries its terminating NUL (counted in `len`): tgtadm prints the buffer
/// as a C string and would print whatever follows it otherwise.
pub fn encode_response(err: ErrCode, text: &str) -> Vec<u8> {
    let body = if text.is_empty() { 0 } else { text.len() + 1 };
    let mut out = Vec::with_capacity(RSP_HEADER_LEN + body);
    out.extend_from_slice(&err.as_u32().to_le_bytes());
    let len = (RSP_HEADER_LEN + body) as u32;
    out.extend_from_slice(&len.to_le_bytes());
    if body > 0 {
        out.extend_from_slice(text.as_bytes());
        out.push(0);
    }
    out
}

/// Decode a response header: (`err`, `len`).
pub fn decode_response_header(b: &[u8; RSP_HEADER_LEN]) -> (u32, u32) {
    (u32_at(b, 0), u32_at(b, 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_layout() {
        let h = ReqHeader {
            mode: Mode::Device.as_u32(),
            op: Op::New.as_u32(),
            lld: "iscsi".into(),
            tid: 1,
            lun: 2,
            sid: 0x1122_3344_5566_7788,
            cid: 7,
            force: 1,
            ac_dir: 1,
            ..ReqHeader::default()
        };
        let b = h.encode("path=/tmp/f,blocksize=4096");
        assert_eq!(b.len(), 120 + 26 + 1);
        assert_eq!(&b[0..4], &2u32.to_le_bytes());
        assert_eq!(&b[8..13], b"iscsi");
        assert_eq!(u32_at(&b, 72), b.len() as u32);
        assert_eq!(u32_at(&b, 76), 1);
        assert_eq!(u64_at(&b, 88), 2);
        assert_eq!(u32_at(&b, 108), 1);
        assert_eq!(u32_at(&b, 116), 1);
        let d = ReqHeader::decode(&b).expect("decode");
        assert_eq!(d.len as usize, b.len());
        assert_eq!(ReqHeader { len: d.len, ..h }, d);
        let p = Payload::parse(&b[120..]).expect("payload");
        assert_eq!(p.get("path"), Some("/tmp/f"));
        assert_eq!(p.get("blocksize"), Some("4096"));
    }

    #[test]
    fn params_prefixes() {
        let p = Payload::parse(b"targetOps a=1,b=2,\0").expect("parse");
        assert!(p.pairs.is_empty());
        assert_eq!(
            p.params,
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        let p = Payload::parse(b"portalOps portal=1.2.3.4:5,\0").expect("parse");
        assert_eq!(p.params, vec![("portal".into(), "1.2.3.4:5".into())]);
        let p = Payload::parse(b"initiator-address=ALL,initiator-name=iqn.z\0").expect("p");
        assert_eq!(p.get("initiator-name"), Some("iqn.z"));
        assert_eq!(Payload::parse(b"").expect("empty"), Payload::default());
    }

    #[test]
    fn malformed_inputs_are_errors_not_panics() {
        assert_eq!(ReqHeader::decode(&[0u8; 10]), Err(WireError::Short));
        let mut b = ReqHeader::default().encode("");
        b[72..76].copy_from_slice(&10u32.to_le_bytes());
        assert_eq!(ReqHeader::decode(&b), Err(WireError::BadLength(10)));
        b[72..76].copy_from_slice(&100_000u32.to_le_bytes());
        assert_eq!(ReqHeader::decode(&b), Err(WireError::TooLong(100_000)));
        let mut c = ReqHeader::default().encode("");
        c[8..72].fill(b'x');
        assert_eq!(ReqHeader::decode(&c), Err(WireError::BadLld));
        assert_eq!(Payload::parse(&[0xff, 0xfe, 0]), Err(WireError::BadPayload));
        // arbitrary bytes never panic
        for seed in 0u32..2000 {
            let v: Vec<u8> = (0..(seed % 200))
                .map(|i| (seed.wrapping_mul(31).wrapping_add(i * 7)) as u8)
                .collect();
            let _ = ReqHeader::decode(&v);
            let _ = Payload::parse(&v);
        }
    }

    #[test]
    fn error_codes_and_response() {
        assert_eq!(ErrCode::from_u32(0), Some(ErrCode::Success));
        assert_eq!(ErrCode::from_u32(17), Some(ErrCode::InvalidRequest));
        assert_eq!(ErrCode::from_u32(24), Some(ErrCode::PreventRemoval));
        assert_eq!(ErrCode::from_u32(25), None);
        assert_eq!(
            ErrCode::TargetActive.message(),
            "this target is still active"
        );
        let r = encode_response(ErrCode::Success, "x\n");
        assert_eq!(&r[0..4], &0u32.to_le_bytes());
        assert_eq!(&r[4..8], &11u32.to_le_bytes());
        assert_eq!(&r[8..], b"x\n\0");
        let mut h = [0u8; 8];
        h.copy_from_slice(&r[..8]);
        assert_eq!(decode_response_header(&h), (0, 11));
        assert_eq!(
            encode_response(ErrCode::NoTarget, ""),
            [4, 0, 0, 0, 8, 0, 0, 0]
        );
    }
}
