//! Public types exchanged between a [`super::Connection`] and the server: configuration,
//! commands, results, task management and events (errors are in `error`).

use crate::DataBuf;
use crate::Digest;
use crate::limits;
use crate::text::negotiate::Offer;

/// Target-side values and limits used in negotiation and for bounding resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnConfig {
    /// What we accept per PDU (declared to the initiator).
    pub max_recv_data_segment_length: u32,
    pub max_burst_length: u32,
    pub first_burst_length: u32,
    pub immediate_data: bool,
    pub initial_r2t: bool,
    pub max_outstanding_r2t: u32,
    /// Allowed digests in preference order.
    pub header_digest: Vec<Digest>,
    pub data_digest: Vec<Digest>,
    /// CmdSN window / task limit per session.
    pub max_queued_commands: u32,
    /// 0 = no NOP-In pings.
    pub nop_interval_ms: u64,
    /// Missed pings before the connection is dropped (0 = never drop).
    pub nop_count: u32,
    pub default_time2wait: u16,
    pub default_time2retain: u16,
    /// Bound on the number of login PDUs.
    pub max_login_pdus: u32,
    /// How long a connection may take from its first byte (or first tick) to full-feature
    /// phase before `on_tick` drops it (default [`super::LOGIN_TIMEOUT_MS`]).
    pub login_timeout_ms: u64,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            max_recv_data_segment_length: limits::MAX_RECV_DATA_SEGMENT_LENGTH.target_default,
            max_burst_length: limits::MAX_BURST_LENGTH.target_default,
            first_burst_length: limits::FIRST_BURST_LENGTH.target_default,
            immediate_data: true,
            initial_r2t: true,
            max_outstanding_r2t: limits::MAX_OUTSTANDING_R2T.target_default,
            header_digest: vec![Digest::None, Digest::Crc32c],
            data_digest: vec![Digest::None, Digest::Crc32c],
            max_queued_commands: 128,
            nop_interval_ms: 0,
            nop_count: 0,
            default_time2wait: limits::DEFAULT_TIME2WAIT.target_default as u16,
            default_time2retain: limits::DEFAULT_TIME2RETAIN.target_default as u16,
            max_login_pdus: 16,
            login_timeout_ms: super::LOGIN_TIMEOUT_MS,
        }
    }
}

impl ConnConfig {
    /// The negotiation offer derived from this configuration (values clamped to the
    /// ranges of [`limits`]).
    pub fn offer(&self) -> Offer {
        let time2 = |k: limits::KeyRange, v: u16| k.clamp(v.into()) as u16;
        Offer {
            header_digest: self.header_digest.clone(),
            data_digest: self.data_digest.clone(),
            auth_methods: vec!["None".to_string()],
            max_connections: limits::MAX_CONNECTIONS.target_default as u16,
            initial_r2t: self.initial_r2t,
            immediate_data: self.immediate_data,
            max_recv_data_segment_length: limits::MAX_RECV_DATA_SEGMENT_LENGTH
                .clamp(self.max_recv_data_segment_length),
            max_burst_length: limits::MAX_BURST_LENGTH.clamp(self.max_burst_length),
            first_burst_length: limits::FIRST_BURST_LENGTH.clamp(self.first_burst_length),
            default_time2wait: time2(limits::DEFAULT_TIME2WAIT, self.default_time2wait),
            default_time2retain: time2(limits::DEFAULT_TIME2RETAIN, self.default_time2retain),
            max_outstanding_r2t: limits::MAX_OUTSTANDING_R2T.clamp(self.max_outstanding_r2t),
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            error_recovery_level: limits::ERROR_RECOVERY_LEVEL.target_default as u8,
        }
    }
}

/// Longest CDB accepted: SPC-4's variable-length CDBs stop at 260 bytes (16 in the BHS plus
/// an extended CDB AHS).
pub const MAX_CDB_LEN: usize = 260;

/// A CDB held inline (no heap allocation per command); dereferences to its bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Cdb {
    bytes: [u8; MAX_CDB_LEN],
    len: u16,
}

impl Cdb {
    /// A CDB from its bytes; `None` when longer than [`MAX_CDB_LEN`].
    pub fn new(bytes: &[u8]) -> Option<Cdb> {
        let mut c = Cdb {
            bytes: [0; MAX_CDB_LEN],
            len: 0,
        };
        c.extend(bytes).then_some(c)
    }

    /// Appends `more` (an extended CDB); false (and unchanged) when it would not fit.
    pub fn extend(&mut self, more: &[u8]) -> bool {
        let at = usize::from(self.len);
        let Some(dst) = self.bytes.get_mut(at..at + more.len()) else {
            return false;
        };
        dst.copy_from_slice(more);
        self.len += more.len() as u16;
        true
    }
}

impl std::ops::Deref for Cdb {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::fmt::Debug for Cdb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cdb({:02x?})", &**self)
    }
}

/// A SCSI command, delivered with all of its write data collected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiCommand {
    pub itt: u32,
    /// Decoded LUN number (peripheral / flat addressing).
    pub lun: u64,
    /// CDB including the extended CDB AHS.
    pub cdb: Cdb,
    /// Task attribute (0 untagged, 1 simple, 2 ordered, 3 head of queue, 4 ACA).
    pub attr: u8,
    pub read: bool,
    pub write: bool,
    /// EDTL for reads, or the bidirectional read length AHS.
    pub expected_read_len: u32,
    pub expected_write_len: u32,
    /// Write payload received (immediate + Data-Out); equals `expected_write_len`. The buffer
    /// comes from the connection's pool: hand it back with `Connection::recycle_buffer` once
    /// used, and the next write reuses it instead of allocating.
    pub data_out: Vec<u8>,
    /// Write data bytes the transport put elsewhere instead of into `data_out` (an RDMA
    /// READ into a place the server gave it, see [`Event::DataFetch`]); they follow
    /// `data_out`'s bytes: `data_out.len() + landed` is the write length. 0 otherwise.
    pub landed: u32,
    pub immediate: bool,
}

/// The server's answer to a command.
#[derive(Debug, Clone)]
pub struct CommandResult<B: DataBuf> {
    /// SCSI status (0 GOOD, 2 CHECK CONDITION, 0x18 RESERVATION CONFLICT, ...).
    pub status: u8,
    /// Raw sense bytes (the connection adds the 2-byte SenseLength).
    pub sense: Vec<u8>,
    /// Data-In payload (bytes the command produced).
    pub data: Option<B>,
    /// For commands with a write part: the number of bytes the SCSI command itself describes
    /// (SPDTL, e.g. WRITE's transfer length in bytes). The connection compares it with the
    /// initiator's Expected Data Transfer Length and reports residual overflow / underflow
    /// (RFC 7143 11.4.5). `None`: no write residual.
    pub write_transfer_len: Option<u32>,
}

impl<B: DataBuf> CommandResult<B> {
    /// GOOD status, no data.
    pub fn good() -> Self {
        CommandResult {
            status: 0,
            sense: Vec::new(),
            data: None,
            write_transfer_len: None,
        }
    }
}

/// Task management function (RFC 7143 §11.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TmfFunction {
    AbortTask,
    AbortTaskSet,
    ClearAca,
    ClearTaskSet,
    LogicalUnitReset,
    TargetWarmReset,
    TargetColdReset,
    TaskReassign,
    /// Any other (reserved / vendor) function code.
    Other(u8),
}

impl TmfFunction {
    /// From the 7-bit function code.
    pub fn from_code(c: u8) -> Self {
        match c {
            1 => TmfFunction::AbortTask,
            2 => TmfFunction::AbortTaskSet,
            3 => TmfFunction::ClearAca,
            4 => TmfFunction::ClearTaskSet,
            5 => TmfFunction::LogicalUnitReset,
            6 => TmfFunction::TargetWarmReset,
            7 => TmfFunction::TargetColdReset,
            8 => TmfFunction::TaskReassign,
            n => TmfFunction::Other(n),
        }
    }
    /// The 7-bit function code.
    pub fn code(self) -> u8 {
        match self {
            TmfFunction::AbortTask => 1,
            TmfFunction::AbortTaskSet => 2,
            TmfFunction::ClearAca => 3,
            TmfFunction::ClearTaskSet => 4,
            TmfFunction::LogicalUnitReset => 5,
            TmfFunction::TargetWarmReset => 6,
            TmfFunction::TargetColdReset => 7,
            TmfFunction::TaskReassign => 8,
            TmfFunction::Other(n) => n,
        }
    }

    /// Stable snake_case label (for metrics: `numatgt_task_management_total{function}`);
    /// every reserved or vendor code is `other`.
    pub const fn label(self) -> &'static str {
        match self {
            TmfFunction::AbortTask => "abort_task",
            TmfFunction::AbortTaskSet => "abort_task_set",
            TmfFunction::ClearAca => "clear_aca",
            TmfFunction::ClearTaskSet => "clear_task_set",
            TmfFunction::LogicalUnitReset => "lun_reset",
            TmfFunction::TargetWarmReset => "target_warm_reset",
            TmfFunction::TargetColdReset => "target_cold_reset",
            TmfFunction::TaskReassign => "task_reassign",
            TmfFunction::Other(_) => "other",
        }
    }
}

/// A task management request for the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmfRequest {
    pub itt: u32,
    pub function: TmfFunction,
    pub lun: u64,
    pub referenced_itt: u32,
    pub ref_cmd_sn: u32,
}

/// The server's answer to a task management request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmfResponse {
    Complete,
    TaskNotExist,
    LunNotExist,
    TaskStillAllegiant,
    /// TASK REASSIGN refused: task allegiance reassignment needs ErrorRecoveryLevel 2.
    ReassignNotSupported,
    NotSupported,
    AuthFailed,
    Rejected,
}

impl TmfResponse {
    /// The Response field code (RFC 7143 §11.6.1).
    pub fn code(self) -> u8 {
        match self {
            TmfResponse::Complete => 0,
            TmfResponse::TaskNotExist => 1,
            TmfResponse::LunNotExist => 2,
            TmfResponse::TaskStillAllegiant => 3,
            TmfResponse::ReassignNotSupported => 4,
            TmfResponse::NotSupported => 5,
            TmfResponse::AuthFailed => 6,
            TmfResponse::Rejected => 255,
        }
    }
}

/// What the connection asks of the server, and what it reports for counting.
///
/// `LoginFailed`, `Rejected` and `DigestError` need no answer: they say what the connection
/// did (for metrics and logs). They come before the `Close` they may lead to. Only
/// `LoginFailed` carries heap data; the events of the full feature phase allocate nothing.
#[derive(Debug)]
pub enum Event {
    /// Entered full feature phase.
    LoggedIn(crate::login::SessionInfo),
    /// Went on in full feature phase after a move from another process
    /// ([`Connection::resume`](super::Connection::resume)): the session of this
    /// `SessionInfo`, no login.
    Resumed(crate::login::SessionInfo),
    Command(ScsiCommand),
    /// RDMA transport: the connection queued an [`RdmaTx::Get`](super::RdmaTx) for command
    /// `itt`'s write data (the bytes after those already in its `data_out`). The server may
    /// look at the command ([`Connection::fetching_write`](super::Connection::fetching_write))
    /// and give the transport a place for the data to land in, so it need not be copied;
    /// the transport then reports it with `data_landed` instead of `data_arrived`. The
    /// `Command` event follows once all of it is in, as ever.
    DataFetch {
        itt: u32,
    },
    /// The server answers with `complete_tmf`.
    TaskMgmt(TmfRequest),
    /// A Logout is ready to be answered, in a session whose server holds logouts
    /// ([`Connection::hold_logouts`](super::Connection::hold_logouts)): the response waits
    /// for [`Connection::confirm_logout`](super::Connection::confirm_logout).
    LogoutRequested,
    /// Logout response queued; close after output drains.
    LoggedOut,
    /// Protocol error: flush output (e.g. a Reject) then close; log the reason.
    Close(super::ConnError),
    /// A Login Response with a non-zero status class was queued: the login failed (once
    /// per failed login; a `Close(ConnError::LoginFailed)` with the details follows).
    LoginFailed {
        /// The target the login was for, once the Directory recognised its name
        /// ([`crate::login::LoginMachine::target_name`]): `None` for discovery sessions,
        /// unknown targets and logins that failed before naming one.
        target_name: Option<String>,
        /// The kind of failure, from the response's status.
        failure: crate::login::LoginFailure,
    },
    /// A Reject PDU was queued, for this reason.
    Rejected(crate::pdu::RejectReason),
    /// A header (`header: true`) or data digest did not match. The connection closes
    /// (header digest, or data digest of a PDU carrying task data) or rejects the PDU and
    /// goes on; the `Rejected` / `Close` event follows.
    DigestError {
        header: bool,
    },
}
