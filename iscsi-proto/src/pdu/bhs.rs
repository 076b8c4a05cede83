//! The typed Basic Header Segment of every RFC 7143 PDU (§11): one struct per opcode and
//! the [`Bhs`] enum with `decode` / `encode`. TotalAHSLength and DataSegmentLength are
//! framing fields and live in [`super::frame`], not here. Reserved fields are written as
//! zero and ignored on receive.

use super::PduError;
use super::fields::{get16, get32, get64, put16, put32, put64};

/// Opcodes (byte 0, low 6 bits).
pub mod op {
    pub const NOP_OUT: u8 = 0x00;
    pub const SCSI_CMD: u8 = 0x01;
    pub const TMF_REQ: u8 = 0x02;
    pub const LOGIN_REQ: u8 = 0x03;
    pub const TEXT_REQ: u8 = 0x04;
    pub const DATA_OUT: u8 = 0x05;
    pub const LOGOUT_REQ: u8 = 0x06;
    pub const SNACK: u8 = 0x10;
    pub const NOP_IN: u8 = 0x20;
    pub const SCSI_RESP: u8 = 0x21;
    pub const TMF_RESP: u8 = 0x22;
    pub const LOGIN_RESP: u8 = 0x23;
    pub const TEXT_RESP: u8 = 0x24;
    pub const DATA_IN: u8 = 0x25;
    pub const LOGOUT_RESP: u8 = 0x26;
    pub const R2T: u8 = 0x31;
    pub const ASYNC: u8 = 0x32;
    pub const REJECT: u8 = 0x3f;
}

/// Reject reason codes (RFC 7143 §11.17.1), from [`super::RejectReason`].
pub mod reason {
    use super::super::RejectReason as R;
    pub const DATA_DIGEST: u8 = R::DataDigest.code();
    pub const SNACK_REJECT: u8 = R::SnackReject.code();
    pub const PROTOCOL_ERROR: u8 = R::ProtocolError.code();
    pub const NOT_SUPPORTED: u8 = R::CommandNotSupported.code();
    pub const IMMEDIATE_REJECT: u8 = R::ImmediateCommandReject.code();
    pub const TASK_IN_PROGRESS: u8 = R::TaskInProgress.code();
    pub const INVALID_DATA_ACK: u8 = R::InvalidDataAck.code();
    pub const INVALID_FIELD: u8 = R::InvalidPduField.code();
    pub const OUT_OF_RESOURCES: u8 = R::OutOfResources.code();
    pub const WAITING_FOR_LOGOUT: u8 = R::WaitingForLogout.code();
}

/// The reserved "no tag" value of ITT / TTT.
pub const RESERVED_TAG: u32 = 0xffff_ffff;

const I_BIT: u8 = 0x40;
const F_BIT: u8 = 0x80;
const C_BIT: u8 = 0x40;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NopOut {
    pub immediate: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScsiCommandHdr {
    pub immediate: bool,
    pub final_: bool,
    pub read: bool,
    pub write: bool,
    pub attr: u8,
    pub lun: u64,
    pub itt: u32,
    pub edtl: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub cdb: [u8; 16],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskMgmtRequest {
    pub immediate: bool,
    pub function: u8,
    pub lun: u64,
    pub itt: u32,
    pub rtt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub ref_cmd_sn: u32,
    pub exp_data_sn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginRequest {
    pub transit: bool,
    pub cont: bool,
    pub csg: u8,
    pub nsg: u8,
    pub version_max: u8,
    pub version_min: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextRequest {
    pub immediate: bool,
    pub final_: bool,
    pub cont: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataOut {
    pub final_: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub exp_stat_sn: u32,
    pub data_sn: u32,
    pub buffer_offset: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogoutRequest {
    pub immediate: bool,
    pub reason: u8,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snack {
    pub snack_type: u8,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub exp_stat_sn: u32,
    pub beg_run: u32,
    pub run_length: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NopIn {
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScsiResponse {
    pub bidi_overflow: bool,
    pub bidi_underflow: bool,
    pub overflow: bool,
    pub underflow: bool,
    pub response: u8,
    pub status: u8,
    pub itt: u32,
    pub snack_tag: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub exp_data_sn: u32,
    pub bidi_residual: u32,
    pub residual: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskMgmtResponse {
    pub response: u8,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginResponse {
    pub transit: bool,
    pub cont: bool,
    pub csg: u8,
    pub nsg: u8,
    pub version_max: u8,
    pub version_active: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub status_class: u8,
    pub status_detail: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextResponse {
    pub final_: bool,
    pub cont: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataIn {
    pub final_: bool,
    pub ack: bool,
    pub overflow: bool,
    pub underflow: bool,
    /// `Some(status)` when the S bit is set (phase collapse).
    pub status: Option<u8>,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
    pub buffer_offset: u32,
    pub residual: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogoutResponse {
    pub response: u8,
    pub itt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub time2wait: u16,
    pub time2retain: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct R2t {
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub r2t_sn: u32,
    pub buffer_offset: u32,
    pub desired_len: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncMessage {
    pub lun: u64,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub event: u8,
    pub vcode: u8,
    pub param1: u16,
    pub param2: u16,
    pub param3: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    pub reason: u8,
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
    pub data_sn: u32,
}

/// A decoded Basic Header Segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bhs {
    NopOut(NopOut),
    ScsiCommand(ScsiCommandHdr),
    TaskMgmtRequest(TaskMgmtRequest),
    LoginRequest(LoginRequest),
    TextRequest(TextRequest),
    DataOut(DataOut),
    LogoutRequest(LogoutRequest),
    Snack(Snack),
    NopIn(NopIn),
    ScsiResponse(ScsiResponse),
    TaskMgmtResponse(TaskMgmtResponse),
    LoginResponse(LoginResponse),
    TextResponse(TextResponse),
    DataIn(DataIn),
    LogoutResponse(LogoutResponse),
    R2t(R2t),
    AsyncMessage(AsyncMessage),
    Reject(Reject),
}

fn isid_get(b: &[u8; 48]) -> [u8; 6] {
    let mut i = [0u8; 6];
    i.copy_from_slice(&b[8..14]);
    i
}

impl Bhs {
    /// The opcode of this header.
    pub fn opcode(&self) -> u8 {
        match self {
            Bhs::NopOut(_) => op::NOP_OUT,
            Bhs::ScsiCommand(_) => op::SCSI_CMD,
            Bhs::TaskMgmtRequest(_) => op::TMF_REQ,
            Bhs::LoginRequest(_) => op::LOGIN_REQ,
            Bhs::TextRequest(_) => op::TEXT_REQ,
            Bhs::DataOut(_) => op::DATA_OUT,
            Bhs::LogoutRequest(_) => op::LOGOUT_REQ,
            Bhs::Snack(_) => op::SNACK,
            Bhs::NopIn(_) => op::NOP_IN,
            Bhs::ScsiResponse(_) => op::SCSI_RESP,
            Bhs::TaskMgmtResponse(_) => op::TMF_RESP,
            Bhs::LoginResponse(_) => op::LOGIN_RESP,
            Bhs::TextResponse(_) => op::TEXT_RESP,
            Bhs::DataIn(_) => op::DATA_IN,
            Bhs::LogoutResponse(_) => op::LOGOUT_RESP,
            Bhs::R2t(_) => op::R2T,
            Bhs::AsyncMessage(_) => op::ASYNC,
            Bhs::Reject(_) => op::REJECT,
        }
    }

    /// Decodes a BHS. Only the opcode can make this fail.
    pub fn decode(b: &[u8; 48]) -> Result<Bhs, PduError> {
        let opcode = b[0] & 0x3f;
        let imm = b[0] & I_BIT != 0;
        let b1 = b[1];
        let f = b1 & F_BIT != 0;
        Ok(match opcode {
            op::NOP_OUT => Bhs::NopOut(NopOut {
                immediate: imm,
                lun: get64(b, 8),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            op::SCSI_CMD => {
                let mut cdb = [0u8; 16];
                cdb.copy_from_slice(&b[32..48]);
                Bhs::ScsiCommand(ScsiCommandHdr {
                    immediate: imm,
                    final_: f,
                    read: b1 & 0x40 != 0,
                    write: b1 & 0x20 != 0,
                    attr: b1 & 0x07,
                    lun: get64(b, 8),
                    itt: get32(b, 16),
                    edtl: get32(b, 20),
                    cmd_sn: get32(b, 24),
                    exp_stat_sn: get32(b, 28),
                    cdb,
                })
            }
            op::TMF_REQ => Bhs::TaskMgmtRequest(TaskMgmtRequest {
                immediate: imm,
                function: b1 & 0x7f,
                lun: get64(b, 8),
                itt: get32(b, 16),
                rtt: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
                ref_cmd_sn: get32(b, 32),
                exp_data_sn: get32(b, 36),
            }),
            op::LOGIN_REQ => Bhs::LoginRequest(LoginRequest {
                transit: f,
                cont: b1 & C_BIT != 0,
                csg: (b1 >> 2) & 3,
                nsg: b1 & 3,
                version_max: b[2],
                version_min: b[3],
                isid: isid_get(b),
                tsih: get16(b, 14),
                itt: get32(b, 16),
                cid: get16(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            op::TEXT_REQ => Bhs::TextRequest(TextRequest {
                immediate: imm,
                final_: f,
                cont: b1 & C_BIT != 0,
                lun: get64(b, 8),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            op::DATA_OUT => Bhs::DataOut(DataOut {
                final_: f,
                lun: get64(b, 8),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                exp_stat_sn: get32(b, 28),
                data_sn: get32(b, 36),
                buffer_offset: get32(b, 40),
            }),
            op::LOGOUT_REQ => Bhs::LogoutRequest(LogoutRequest {
                immediate: imm,
                reason: b1 & 0x7f,
                itt: get32(b, 16),
                cid: get16(b, 20),
                cmd_sn: get32(b, 24),
                exp_stat_sn: get32(b, 28),
            }),
            op::SNACK => Bhs::Snack(Snack {
                snack_type: b1 & 0x0f,
                lun: get64(b, 8),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                exp_stat_sn: get32(b, 28),
                beg_run: get32(b, 40),
                run_length: get32(b, 44),
            }),
            op::NOP_IN => Bhs::NopIn(NopIn {
                lun: get64(b, 8),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
            }),
            op::SCSI_RESP => Bhs::ScsiResponse(ScsiResponse {
                bidi_overflow: b1 & 0x10 != 0,
                bidi_underflow: b1 & 0x08 != 0,
                overflow: b1 & 0x04 != 0,
                underflow: b1 & 0x02 != 0,
                response: b[2],
                status: b[3],
                itt: get32(b, 16),
                snack_tag: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                exp_data_sn: get32(b, 36),
                bidi_residual: get32(b, 40),
                residual: get32(b, 44),
            }),
            op::TMF_RESP => Bhs::TaskMgmtResponse(TaskMgmtResponse {
                response: b[2],
                itt: get32(b, 16),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
            }),
            op::LOGIN_RESP => Bhs::LoginResponse(LoginResponse {
                transit: f,
                cont: b1 & C_BIT != 0,
                csg: (b1 >> 2) & 3,
                nsg: b1 & 3,
                version_max: b[2],
                version_active: b[3],
                isid: isid_get(b),
                tsih: get16(b, 14),
                itt: get32(b, 16),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                status_class: b[36],
                status_detail: b[37],
            }),
            op::TEXT_RESP => Bhs::TextResponse(TextResponse {
                final_: f,
                cont: b1 & C_BIT != 0,
                lun: get64(b, 8),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
            }),
            op::DATA_IN => Bhs::DataIn(DataIn {
                final_: f,
                ack: b1 & 0x40 != 0,
                overflow: b1 & 0x04 != 0,
                underflow: b1 & 0x02 != 0,
                status: if b1 & 0x01 != 0 { Some(b[3]) } else { None },
                lun: get64(b, 8),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                data_sn: get32(b, 36),
                buffer_offset: get32(b, 40),
                residual: get32(b, 44),
            }),
            op::LOGOUT_RESP => Bhs::LogoutResponse(LogoutResponse {
                response: b[2],
                itt: get32(b, 16),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                time2wait: get16(b, 40),
                time2retain: get16(b, 42),
            }),
            op::R2T => Bhs::R2t(R2t {
                lun: get64(b, 8),
                itt: get32(b, 16),
                ttt: get32(b, 20),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                r2t_sn: get32(b, 36),
                buffer_offset: get32(b, 40),
                desired_len: get32(b, 44),
            }),
            op::ASYNC => Bhs::AsyncMessage(AsyncMessage {
                lun: get64(b, 8),
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                event: b[36],
                vcode: b[37],
                param1: get16(b, 38),
                param2: get16(b, 40),
                param3: get16(b, 42),
            }),
            op::REJECT => Bhs::Reject(Reject {
                reason: b[2],
                stat_sn: get32(b, 24),
                exp_cmd_sn: get32(b, 28),
                max_cmd_sn: get32(b, 32),
                data_sn: get32(b, 36),
            }),
            other => return Err(PduError::UnknownOpcode(other)),
        })
    }

    /// Encodes this header with the given framing fields (TotalAHSLength in 4-byte
    /// words, DataSegmentLength in bytes, at most 2^24-1).
    pub fn encode(&self, total_ahs_words: u8, data_len: u32) -> [u8; 48] {
        let mut b = [0u8; 48];
        b[0] = self.opcode();
        b[4] = total_ahs_words;
        let dl = data_len.min(0x00ff_ffff).to_be_bytes();
        b[5..8].copy_from_slice(&dl[1..4]);
        let imm = |b: &mut [u8; 48], i: bool| {
            if i {
                b[0] |= I_BIT
            }
        };
        let fl = |f: bool| if f { F_BIT } else { 0 };
        let cl = |c: bool| if c { C_BIT } else { 0 };
        match self {
            Bhs::NopOut(p) => {
                imm(&mut b, p.immediate);
                b[1] = F_BIT;
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.ttt);
                put32(&mut b, 24, p.cmd_sn);
                put32(&mut b, 28, p.exp_stat_sn);
            }
            Bhs::ScsiCommand(p) => {
                imm(&mut b, p.immediate);
                b[1] = fl(p.final_)
                    | if p.read { 0x40 } else { 0 }
                    | if p.write { 0x20 } else { 0 }
                    | (p.attr & 7);
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.edtl);
                put32(&mut b, 24, p.cmd_sn);
                put32(&mut b, 28, p.exp_stat_sn);
                b[32..48].copy_from_slice(&p.cdb);
            }
            Bhs::TaskMgmtRequest(p) => {
                imm(&mut b, p.immediate);
                b[1] = F_BIT | (p.function & 0x7f);
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.rtt);
                put32(&mut b, 24, p.cmd_sn);
                put32(&mut b, 28, p.exp_stat_sn);
                put32(&mut b, 32, p.ref_cmd_sn);
                put32(&mut b, 36, p.exp_data_sn);
            }
            Bhs::LoginRequest(p) => {
                b[0] |= I_BIT;
                b[1] = fl(p.transit) | cl(p.cont) | ((p.csg & 3) << 2) | (p.nsg & 3);
                b[2] = p.version_max;
                b[3] = p.version_min;
                b[8..14].copy_from_slice(&p.isid);
                put16(&mut b, 14, p.tsih);
                put32(&mut b, 16, p.itt);
                put16(&mut b, 20, p.cid);
                put32(&mut b, 24, p.cmd_sn);
                put32(&mut b, 28, p.exp_stat_sn);
            }
            Bhs::TextRequest(p) => {
                imm(&mut b, p.immediate);
                b[1] = fl(p.final_) | cl(p.cont);
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.ttt);
                put32(&mut b, 24, p.cmd_sn);
                put32(&mut b, 28, p.exp_stat_sn);
            }
            Bhs::DataOut(p) => {
                b[1] = fl(p.final_);
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.ttt);
                put32(&mut b, 28, p.exp_stat_sn);
                put32(&mut b, 36, p.data_sn);
                put32(&mut b, 40, p.buffer_offset);
            }
            Bhs::LogoutRequest(p) => {
                imm(&mut b, p.immediate);
                b[1] = F_BIT | (p.reason & 0x7f);
                put32(&mut b, 16, p.itt);
                put16(&mut b, 20, p.cid);
                put32(&mut b, 24, p.cmd_sn);
                put32(&mut b, 28, p.exp_stat_sn);
            }
            Bhs::Snack(p) => {
                b[1] = F_BIT | (p.snack_type & 0x0f);
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.ttt);
                put32(&mut b, 28, p.exp_stat_sn);
                put32(&mut b, 40, p.beg_run);
                put32(&mut b, 44, p.run_length);
            }
            Bhs::NopIn(p) => {
                b[1] = F_BIT;
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.ttt);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
            }
            Bhs::ScsiResponse(p) => {
                b[1] = F_BIT
                    | if p.bidi_overflow { 0x10 } else { 0 }
                    | if p.bidi_underflow { 0x08 } else { 0 }
                    | if p.overflow { 0x04 } else { 0 }
                    | if p.underflow { 0x02 } else { 0 };
                b[2] = p.response;
                b[3] = p.status;
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.snack_tag);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
                put32(&mut b, 36, p.exp_data_sn);
                put32(&mut b, 40, p.bidi_residual);
                put32(&mut b, 44, p.residual);
            }
            Bhs::TaskMgmtResponse(p) => {
                b[1] = F_BIT;
                b[2] = p.response;
                put32(&mut b, 16, p.itt);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
            }
            Bhs::LoginResponse(p) => {
                b[1] = fl(p.transit) | cl(p.cont) | ((p.csg & 3) << 2) | (p.nsg & 3);
                b[2] = p.version_max;
                b[3] = p.version_active;
                b[8..14].copy_from_slice(&p.isid);
                put16(&mut b, 14, p.tsih);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
                b[36] = p.status_class;
                b[37] = p.status_detail;
            }
            Bhs::TextResponse(p) => {
                b[1] = fl(p.final_) | cl(p.cont);
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.ttt);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
            }
            Bhs::DataIn(p) => {
                b[1] = fl(p.final_)
                    | if p.ack { 0x40 } else { 0 }
                    | if p.overflow { 0x04 } else { 0 }
                    | if p.underflow { 0x02 } else { 0 }
                    | if p.status.is_some() { 0x01 } else { 0 };
                b[3] = p.status.unwrap_or(0);
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.ttt);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
                put32(&mut b, 36, p.data_sn);
                put32(&mut b, 40, p.buffer_offset);
                put32(&mut b, 44, p.residual);
            }
            Bhs::LogoutResponse(p) => {
                b[1] = F_BIT;
                b[2] = p.response;
                put32(&mut b, 16, p.itt);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
                put16(&mut b, 40, p.time2wait);
                put16(&mut b, 42, p.time2retain);
            }
            Bhs::R2t(p) => {
                b[1] = F_BIT;
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, p.itt);
                put32(&mut b, 20, p.ttt);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
                put32(&mut b, 36, p.r2t_sn);
                put32(&mut b, 40, p.buffer_offset);
                put32(&mut b, 44, p.desired_len);
            }
            Bhs::AsyncMessage(p) => {
                b[1] = F_BIT;
                put64(&mut b, 8, p.lun);
                put32(&mut b, 16, RESERVED_TAG);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
                b[36] = p.event;
                b[37] = p.vcode;
                put16(&mut b, 38, p.param1);
                put16(&mut b, 40, p.param2);
                put16(&mut b, 42, p.param3);
            }
            Bhs::Reject(p) => {
                b[1] = F_BIT;
                b[2] = p.reason;
                put32(&mut b, 16, RESERVED_TAG);
                put32(&mut b, 24, p.stat_sn);
                put32(&mut b, 28, p.exp_cmd_sn);
                put32(&mut b, 32, p.max_cmd_sn);
                put32(&mut b, 36, p.data_sn);
            }
        }
        b
    }
}
