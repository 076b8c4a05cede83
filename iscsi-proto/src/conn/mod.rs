//! The connection state machine (ERL 0, one connection per session): receive buffer and
//! PDU framing, login, dispatch of full-feature PDUs, events to the server, and the
//! transmit queue. SCSI command / Data-Out / Data-In handling lives in `scsi`;
//! NOP, Text, Logout, task management and rejects in `control`.

mod control;
mod error;
mod rdma;
mod scsi;
mod tx;
mod types;

#[cfg(test)]
mod tests;

pub use crate::login::{
    Directory, LoginFailure, LoginGrant, LoginReject, LoginRequestInfo, SessionInfo, SessionType,
    TargetRecord,
};
pub use error::{ConnError, ProtocolError};
pub use rdma::{RdmaLimits, RdmaTx, RemoteBuf, RemoteBufs, TransportKeys};
pub use types::{
    Cdb, CommandResult, ConnConfig, Event, MAX_CDB_LEN, ScsiCommand, TmfFunction, TmfRequest,
    TmfResponse,
};

use crate::DataBuf;
use crate::Digest;
use crate::login::{LoginConfig, LoginMachine, LoginStep};
use crate::pdu::{Bhs, Decoded, Digests, Frame, PduError, RejectReason, check_frame};
use crate::seq::{CmdWindow, StatSn};
use crate::text::kv::Accumulator;
use crate::text::negotiate::{Negotiator, SessionParams};
use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::net::SocketAddr;
use tx::{TxData, TxQueue};

/// How long a login may take before `on_tick` drops the connection, unless the
/// configuration says otherwise ([`ConnConfig::login_timeout_ms`]).
pub const LOGIN_TIMEOUT_MS: u64 = 30_000;
/// Receive buffer size to start with (grows up to one maximum-size PDU).
const RX_INITIAL: usize = 64 * 1024;
/// MaxRecvDataSegmentLength in force during login (RFC 7143 §13.12).
const LOGIN_MAX_DATA: u32 = 8192;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Login,
    FullFeature,
    LoggedOut,
    Closed,
}

/// Counters of silently handled conditions (for logs/metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    pub pdus_rx: u64,
    pub dropped_out_of_window: u64,
    pub dropped_unknown_data_out: u64,
    /// Data-Out PDUs out of DataSN order (the task ended with CHECK CONDITION).
    pub data_sequence_errors: u64,
    pub rejects_sent: u64,
}

/// One iSCSI connection (and its single-connection session), target side.
pub struct Connection<B: DataBuf> {
    cfg: ConnConfig,
    peer: SocketAddr,
    local: SocketAddr,
    state: State,
    login: Option<LoginMachine>,
    cid: u16,
    session: Option<SessionInfo>,
    params: SessionParams,
    dg: Digests,
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    rx_need: usize,
    events: VecDeque<Event>,
    tx: TxQueue<B>,
    stat_sn: StatSn,
    window: CmdWindow<Option<u32>>,
    tasks: HashMap<u32, scsi::Task>,
    /// Tasks whose CmdSN turn came (or immediate) and that are not completed.
    active: usize,
    next_ttt: u32,
    now: u64,
    login_deadline: Option<u64>,
    next_ping_at: Option<u64>,
    ping_ttt: Option<u32>,
    missed_pings: u32,
    logout_itt: Option<u32>,
    text_acc: Accumulator,
    text_pending: Option<control::PendingText>,
    text_neg: Option<Negotiator>,
    tmfs: HashMap<u32, control::PendingTmf>,
    last_drop: Option<String>,
    stats: ConnStats,
    /// Write buffers handed back by the server, for the next commands.
    spare_bufs: Vec<Vec<u8>>,
    spare_bytes: usize,
    /// R2T queues of finished tasks, for the next ones.
    spare_r2ts: Vec<VecDeque<scsi::R2tState>>,
    /// Set for an RDMA transport (iSER): PDU-at-a-time framing and, once logged in, the
    /// RDMA datamover.
    rdma: Option<rdma::RdmaState<B>>,
    /// Cap on the command window set by the transport (`set_window_limit`).
    window_cap: Option<u32>,
}

impl<B: DataBuf> std::fmt::Debug for Connection<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("state", &self.state)
            .field("tasks", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl<B: DataBuf> Connection<B> {
    /// A new connection in the login phase.
    pub fn new(cfg: ConnConfig, peer: SocketAddr, local: SocketAddr) -> Self {
        let login = LoginMachine::new(LoginConfig {
            offer: cfg.offer(),
            max_login_pdus: cfg.max_login_pdus.max(1),
        });
        let depth = cfg.max_queued_commands.max(1);
        Connection {
            cfg,
            peer,
            local,
            state: State::Login,
            login: Some(login),
            cid: 0,
            session: None,
            params: SessionParams::default(),
            dg: Digests::default(),
            rx: vec![0; RX_INITIAL],
            rx_start: 0,
            rx_end: 0,
            rx_need: 48,
            events: VecDeque::new(),
            tx: TxQueue::new(),
            stat_sn: StatSn::new(0),
            window: CmdWindow::new(0, depth),
            tasks: HashMap::new(),
            active: 0,
            next_ttt: 1,
            now: 0,
            login_deadline: None,
            next_ping_at: None,
            ping_ttt: None,
            missed_pings: 0,
            logout_itt: None,
            text_acc: Accumulator::new(64 * 1024),
            text_pending: None,
            text_neg: None,
            tmfs: HashMap::new(),
            last_drop: None,
            stats: ConnStats::default(),
            spare_bufs: Vec::new(),
            spare_bytes: 0,
            spare_r2ts: Vec::new(),
            rdma: None,
            window_cap: None,
        }
    }

    /// Spare room to read socket bytes into (at least 48 bytes; grows to the PDU being
    /// received).
    pub fn rx_space(&mut self) -> &mut [u8] {
        if self.rx_start == self.rx_end {
            self.rx_start = 0;
            self.rx_end = 0;
        }
        let need = self.rx_need.max(48);
        if self.rx.len() - self.rx_start < need || self.rx.len() - self.rx_end < 48 {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
            if self.rx.len() < need {
                self.rx.resize(need, 0);
            }
            if self.rx.len() - self.rx_end < 48 {
                let l = self.rx.len();
                self.rx.resize(l + 48, 0);
            }
        }
        &mut self.rx[self.rx_end..]
    }

    /// The source of CHAP identifiers and challenges for this connection's login (e.g.
    /// `getrandom`). Without one, a login that the [`Directory`] subjects to CHAP fails
    /// with a target error. No effect after the login phase.
    pub fn set_random_source(&mut self, rng: Box<dyn crate::login::RandomSource>) {
        if let Some(lm) = self.login.as_mut() {
            lm.set_random_source(rng);
        }
    }

    /// `n` bytes were read into `rx_space()`: parse and process every complete PDU.
    pub fn rx_commit(&mut self, n: usize, dir: &dyn Directory, now_ms: u64) {
        self.now = now_ms;
        if self.login_deadline.is_none() && self.state == State::Login {
            self.login_deadline = Some(now_ms.saturating_add(self.cfg.login_timeout_ms));
        }
        self.rx_end = (self.rx_end + n).min(self.rx.len());
        let rx = std::mem::take(&mut self.rx);
        while self.accepting() {
            let buf = &rx[self.rx_start..self.rx_end];
            let max = self.max_rx_data();
            match check_frame(buf, max, self.dg) {
                Ok(Decoded::Incomplete(need)) => {
                    self.rx_need = need;
                    break;
                }
                Ok(Decoded::Complete(f)) => {
                    self.rx_need = 48;
                    self.rx_start += f.total;
                    self.stats.pdus_rx += 1;
                    self.dispatch(&f, buf, dir);
                }
                Err(e) => {
                    let hdr = frame_header(buf);
                    let f = Frame::from_header(&hdr, self.dg);
                    self.frame_error(e, &hdr, f, buf.len());
                    if self.accepting() {
                        self.rx_start += f.total.min(buf.len());
                    }
                }
            }
        }
        if !self.accepting() {
            self.rx_start = 0;
            self.rx_end = 0;
        }
        self.rx = rx;
    }

    /// Next event for the server.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Bytes ready to send, as slices for one writev (at most `max` slices).
    pub fn gather_tx<'a>(&'a self, out: &mut Vec<IoSlice<'a>>, max: usize) {
        self.tx.gather(out, max);
    }

    /// `n` bytes from `gather_tx` were written.
    pub fn tx_consumed(&mut self, n: usize) {
        self.tx.consumed(n);
    }

    /// True when bytes are waiting to be sent.
    pub fn has_tx(&self) -> bool {
        !self.tx.is_empty() || self.rdma.as_ref().is_some_and(|r| !r.tx.is_empty())
    }

    /// NOP-In pings, NOP timeout and login timeout.
    pub fn on_tick(&mut self, now_ms: u64) {
        self.now = now_ms;
        match self.state {
            State::Login => {
                let dl = *self
                    .login_deadline
                    .get_or_insert(now_ms.saturating_add(self.cfg.login_timeout_ms));
                if now_ms >= dl {
                    self.close(ConnError::LoginTimeout);
                }
            }
            State::FullFeature => self.nop_tick(now_ms),
            _ => {}
        }
    }

    /// When `on_tick` should be called next.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        match self.state {
            State::Login => self.login_deadline,
            State::FullFeature => self.next_ping_at,
            _ => None,
        }
    }

    /// The session, once logged in.
    pub fn session(&self) -> Option<&SessionInfo> {
        self.session.as_ref()
    }

    /// Tasks received and not yet completed (including ones waiting for data or turn).
    pub fn tasks_in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// True after a Close or logout: no more input is processed.
    pub fn is_closing(&self) -> bool {
        matches!(self.state, State::Closed | State::LoggedOut)
    }

    /// Counters of silently handled conditions.
    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    /// Why the last PDU was silently dropped (out-of-window CmdSN etc.), for logging.
    pub fn take_drop_reason(&mut self) -> Option<String> {
        self.last_drop.take()
    }

    // ---- internals ----

    fn accepting(&self) -> bool {
        matches!(self.state, State::Login | State::FullFeature) && self.rx_start < self.rx_end
    }

    fn max_rx_data(&self) -> u32 {
        match self.state {
            State::Login => LOGIN_MAX_DATA,
            _ => match self.rdma_limits() {
                Some(l) => l.max_recv_data,
                None => self.params.target_max_recv_data_segment_length,
            },
        }
    }

    fn alloc_ttt(&mut self) -> u32 {
        let t = self.next_ttt;
        self.next_ttt = self.next_ttt.wrapping_add(1);
        if self.next_ttt == crate::pdu::RESERVED_TAG {
            self.next_ttt = 1;
        }
        t
    }

    pub(crate) fn push(&mut self, bhs: &Bhs, data: TxData) {
        if let Some(r) = self.rdma.as_mut() {
            // one whole PDU per Send; payloads here are small and owned (no Data-In)
            let data = match data {
                TxData::Owned(v) => v,
                TxData::None | TxData::Shared { .. } => Vec::new(),
            };
            let bhs = bhs.encode(0, data.len() as u32);
            r.tx.push_back(rdma::RdmaTx::Pdu { bhs, data });
            return;
        }
        self.tx.push(bhs, data, self.dg);
    }

    pub(crate) fn close(&mut self, e: ConnError) {
        if matches!(self.state, State::Closed | State::LoggedOut) {
            return;
        }
        self.state = State::Closed;
        self.events.push_back(Event::Close(e));
    }

    fn frame_error(&mut self, e: PduError, hdr: &[u8; 48], f: Frame, have: usize) {
        match e {
            PduError::HeaderDigest { .. } => {
                self.events.push_back(Event::DigestError { header: true });
                self.close(ConnError::HeaderDigest);
            }
            PduError::DataDigest { .. } => {
                self.events.push_back(Event::DigestError { header: false });
                self.reject(RejectReason::DataDigest, hdr);
                let op = hdr[0] & 0x3f;
                if op == crate::pdu::op::SCSI_CMD || op == crate::pdu::op::DATA_OUT {
                    // ERL 0 cannot recover the task's data: drop the connection.
                    self.close(ConnError::DataDigest);
                }
            }
            PduError::DataSegmentTooLong { len, max } => {
                if self.state == State::FullFeature {
                    self.reject(RejectReason::ProtocolError, hdr);
                }
                self.close(ProtocolError::DataSegmentTooLong { len, max }.into());
            }
            other => {
                if have < f.total {
                    self.close(ProtocolError::MalformedPdu(other).into());
                } else {
                    self.reject(RejectReason::InvalidPduField, hdr);
                }
            }
        }
    }

    fn dispatch(&mut self, f: &Frame, buf: &[u8], dir: &dyn Directory) {
        let hdr = f.header(buf);
        let data = f.data(buf);
        let bhs = match Bhs::decode(hdr) {
            Ok(b) => b,
            Err(_) => {
                if self.state == State::Login {
                    self.close(ProtocolError::UnknownOpcodeDuringLogin.into());
                } else {
                    self.reject(RejectReason::CommandNotSupported, hdr);
                }
                return;
            }
        };
        if self.state == State::Login {
            match bhs {
                Bhs::LoginRequest(req) => self.handle_login(&req, data, dir),
                _ => self.close(ProtocolError::OpcodeDuringLogin(bhs.opcode()).into()),
            }
            return;
        }
        let discovery = self
            .session
            .as_ref()
            .is_some_and(|s| s.session_type == SessionType::Discovery);
        if discovery
            && matches!(
                bhs,
                Bhs::ScsiCommand(_) | Bhs::TaskMgmtRequest(_) | Bhs::DataOut(_)
            )
        {
            // Discovery sessions carry only Text, NOP and Logout (RFC 7143 §4.3).
            self.reject(RejectReason::ProtocolError, hdr);
            return;
        }
        match bhs {
            Bhs::ScsiCommand(c) => self.handle_command(&c, hdr, f.ahs(buf), data),
            Bhs::DataOut(d) => self.handle_data_out(&d, hdr, data),
            Bhs::NopOut(n) => self.handle_nop_out(&n, data),
            Bhs::TextRequest(t) => self.handle_text(&t, hdr, data, dir),
            Bhs::LogoutRequest(l) => self.handle_logout(&l),
            Bhs::TaskMgmtRequest(t) => self.handle_tmf(&t),
            Bhs::Snack(_) => self.reject(RejectReason::ProtocolError, hdr),
            Bhs::LoginRequest(_) => {
                self.reject(RejectReason::ProtocolError, hdr);
                self.close(ProtocolError::LoginInFullFeature.into());
            }
            _ => self.reject(RejectReason::CommandNotSupported, hdr),
        }
    }

    fn handle_login(&mut self, req: &crate::pdu::LoginRequest, data: &[u8], dir: &dyn Directory) {
        let Some(mut lm) = self.login.take() else {
            return;
        };
        let first = !lm.started();
        let step = lm.handle(req, data, dir, self.peer, self.local);
        if first {
            self.stat_sn = StatSn::new(lm.initial_exp_stat_sn);
            self.window = CmdWindow::new(lm.initial_cmd_sn, self.cfg.max_queued_commands.max(1))
                .with_cap(self.window_cap);
            self.cid = req.cid;
        }
        if let Some(c) = lm.granted_config() {
            // the target's own limits from now on (window depth, NOP-In pings, offers)
            self.window = CmdWindow::new(self.window.exp_cmd_sn(), c.max_queued_commands.max(1))
                .with_cap(self.window_cap);
            self.cfg = c.clone();
        }
        let fill = |me: &mut Self, r: &mut crate::pdu::LoginResponse| {
            r.stat_sn = me.stat_sn.advance();
            r.exp_cmd_sn = me.window.exp_cmd_sn();
            r.max_cmd_sn = me.window.max_cmd_sn();
        };
        match step {
            LoginStep::Continue(mut r, out) => {
                fill(self, &mut r);
                self.push(&Bhs::LoginResponse(r), owned(out));
                self.login = Some(lm);
            }
            LoginStep::Complete(mut r, out, info) => {
                fill(self, &mut r);
                self.push(&Bhs::LoginResponse(r), owned(out));
                self.params = info.params.clone();
                self.dg = Digests {
                    header: info.params.header_digest == Digest::Crc32c,
                    data: info.params.data_digest == Digest::Crc32c,
                };
                let mut neg = Negotiator::new(self.cfg.offer());
                neg.params = info.params.clone();
                neg.discovery = info.session_type == SessionType::Discovery;
                self.text_neg = Some(neg);
                if let Some(r) = self.rdma.as_mut() {
                    r.limits = lm.transport_limits();
                    self.dg = Digests::default();
                }
                self.session = Some(info.clone());
                self.state = State::FullFeature;
                if self.cfg.nop_interval_ms > 0 {
                    self.next_ping_at = Some(self.now.saturating_add(self.cfg.nop_interval_ms));
                }
                self.events.push_back(Event::LoggedIn(info));
            }
            LoginStep::Fail(mut r, text, why, auth) => {
                fill(self, &mut r);
                let (class, detail) = (r.status_class, r.status_detail);
                self.push(&Bhs::LoginResponse(r), owned(text));
                // the login machine is dropped here: one failed response, one event
                if let Some(failure) = crate::login::LoginFailure::from_status(class, detail) {
                    self.events.push_back(Event::LoginFailed {
                        target_name: lm.target_name().map(str::to_owned),
                        failure,
                    });
                }
                self.close(ConnError::LoginFailed {
                    class,
                    detail,
                    reason: why,
                    auth,
                });
            }
        }
    }

    /// Checks a non-immediate CmdSN and records it. Returns false (after noting the
    /// reason) when the PDU must be dropped silently.
    pub(crate) fn accept_cmd_sn(
        &mut self,
        cmd_sn: u32,
        immediate: bool,
        item: Option<u32>,
    ) -> bool {
        if immediate {
            return true;
        }
        match self.window.arrive(cmd_sn, item) {
            Ok(()) => true,
            Err(r) => {
                self.stats.dropped_out_of_window += 1;
                self.last_drop = Some(r.to_string());
                false
            }
        }
    }

    /// Releases commands whose CmdSN turn came and recomputes MaxCmdSN.
    pub(crate) fn pump_window(&mut self) {
        while let Some(item) = self.window.pop_ready() {
            if let Some(itt) = item
                && let Some(t) = self.tasks.get_mut(&itt)
            {
                t.ordered = true;
                self.active += 1;
                self.try_deliver(itt);
            }
        }
        self.window.update_max(self.active);
    }
}

fn owned(v: Vec<u8>) -> TxData {
    if v.is_empty() {
        TxData::None
    } else {
        TxData::Owned(v)
    }
}

fn frame_header(buf: &[u8]) -> [u8; 48] {
    let mut h = [0u8; 48];
    let n = buf.len().min(48);
    h[..n].copy_from_slice(&buf[..n]);
    h
}
