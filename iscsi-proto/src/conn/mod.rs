//! The connection state machine (ERL 0, one connection per session): the public API,
//! PDU intake, login, dispatch of full-feature PDUs and events to the server. The phases
//! and what each holds are in `state`, the transport's framing (byte stream or RDMA
//! Sends) in `framing`; SCSI command / Data-Out / Data-In handling lives in `scsi`; NOP,
//! Text, Logout, task management and rejects in `control`.

mod control;
mod error;
mod framing;
mod moved;
mod rdma;
mod scsi;
mod state;
mod tx;
mod types;

#[cfg(test)]
mod tests;

pub use crate::login::{
    Directory, LoginFailure, LoginGrant, LoginReject, LoginRequestInfo, SessionInfo, SessionType,
    TargetRecord,
};
pub use error::{ConnError, ProtocolError};
pub use moved::MovedConn;
pub use rdma::{RdmaLimits, RdmaTx, RemoteBuf, RemoteBufs, TransportKeys};
pub use types::{
    Cdb, CommandResult, ConnConfig, Event, MAX_CDB_LEN, ScsiCommand, TmfFunction, TmfRequest,
    TmfResponse,
};

use crate::DataBuf;
use crate::Digest;
use crate::login::LoginStep;
use crate::pdu::{Bhs, Decoded, Digests, Frame, PduError, RejectReason, check_frame};
use crate::seq::{CmdWindow, StatSn};
use framing::Framing;
use state::{Login, State};
use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::net::SocketAddr;
use tx::TxData;

/// How long a login may take before `on_tick` drops the connection, unless the
/// configuration says otherwise ([`ConnConfig::login_timeout_ms`]).
pub const LOGIN_TIMEOUT_MS: u64 = 30_000;
/// MaxRecvDataSegmentLength in force during login (RFC 7143 §13.12).
const LOGIN_MAX_DATA: u32 = 8192;

/// Counters of silently handled conditions (for logs/metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    pub pdus_rx: u64,
    pub dropped_out_of_window: u64,
    pub dropped_unknown_data_out: u64,
    /// Data-Out PDUs out of DataSN order (the task ended with CHECK CONDITION).
    pub data_sequence_errors: u64,
    pub rejects_sent: u64,
    /// RDMA: WRITE commands whose immediate data was left in the initiator's write buffer
    /// (a Send of the header only) and fetched by RDMA READ with the rest.
    pub immediate_data_fetched: u64,
}

/// One iSCSI connection (and its single-connection session), target side.
pub struct Connection<B: DataBuf> {
    cfg: ConnConfig,
    peer: SocketAddr,
    local: SocketAddr,
    /// The phase, holding what exists only in it.
    state: State,
    /// Byte stream or RDMA Sends: receive buffer, transmit queue, digests.
    framing: Framing<B>,
    events: VecDeque<Event>,
    stat_sn: StatSn,
    window: CmdWindow<Option<u32>>,
    /// Cap on the command window set by the transport (`set_window_limit`, in any phase),
    /// kept for the window the login starts.
    window_cap: Option<u32>,
    /// Tasks received and not completed; they outlive a close (`task_wanted`).
    tasks: HashMap<u32, scsi::Task>,
    /// Tasks whose CmdSN turn came (or immediate) and that are not completed.
    active: usize,
    next_ttt: u32,
    now: u64,
    last_drop: Option<String>,
    stats: ConnStats,
    /// Write buffers handed back by the server, for the next commands.
    spare_bufs: Vec<Vec<u8>>,
    spare_bytes: usize,
    /// R2T queues of finished tasks, for the next ones.
    spare_r2ts: Vec<VecDeque<scsi::R2tState>>,
}

impl<B: DataBuf> std::fmt::Debug for Connection<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("state", &self.state.name())
            .field("tasks", &self.tasks.len())
            .finish_non_exhaustive()
    }
}

impl<B: DataBuf> Connection<B> {
    /// A new connection in the login phase.
    pub fn new(cfg: ConnConfig, peer: SocketAddr, local: SocketAddr) -> Self {
        let depth = cfg.max_queued_commands.max(1);
        Connection {
            state: State::Login(Box::new(Login::new(&cfg))),
            cfg,
            peer,
            local,
            framing: Framing::stream(),
            events: VecDeque::new(),
            stat_sn: StatSn::new(0),
            window: CmdWindow::new(0, depth),
            window_cap: None,
            tasks: HashMap::new(),
            active: 0,
            next_ttt: 1,
            now: 0,
            last_drop: None,
            stats: ConnStats::default(),
            spare_bufs: Vec::new(),
            spare_bytes: 0,
            spare_r2ts: Vec::new(),
        }
    }

    /// Spare room to read socket bytes into (at least 48 bytes; grows to the PDU being
    /// received). Empty for an RDMA transport, whose PDUs come with [`Self::rx_pdu`].
    pub fn rx_space(&mut self) -> &mut [u8] {
        match &mut self.framing {
            Framing::Stream(s) => s.rx.space(),
            Framing::Rdma(_) => &mut [],
        }
    }

    /// The source of CHAP identifiers and challenges for this connection's login (e.g.
    /// `getrandom`). Without one, a login that the [`Directory`] subjects to CHAP fails
    /// with a target error. No effect after the login phase.
    pub fn set_random_source(&mut self, rng: Box<dyn crate::login::RandomSource>) {
        if let State::Login(login) = &mut self.state {
            login.machine.set_random_source(rng);
        }
    }

    /// `n` bytes were read into `rx_space()`: parse and process every complete PDU.
    pub fn rx_commit(&mut self, n: usize, dir: &dyn Directory, now_ms: u64) {
        self.now = now_ms;
        self.start_login_clock(now_ms);
        let Framing::Stream(s) = &mut self.framing else {
            return;
        };
        // out of the connection while its PDUs are dispatched (nothing else reads it)
        let mut rx = std::mem::take(&mut s.rx);
        rx.end = (rx.end + n).min(rx.buf.len());
        while self.state.takes_input() && rx.start < rx.end {
            let buf = &rx.buf[rx.start..rx.end];
            let max = self.max_rx_data();
            let dg = self.framing.digests();
            match check_frame(buf, max, dg) {
                Ok(Decoded::Incomplete(need)) => {
                    rx.need = need;
                    break;
                }
                Ok(Decoded::Complete(f)) => {
                    rx.need = 48;
                    rx.start += f.total;
                    self.stats.pdus_rx += 1;
                    self.dispatch(&f, buf, dir);
                }
                Err(e) => {
                    let hdr = frame_header(buf);
                    let f = Frame::from_header(&hdr, dg);
                    self.frame_error(e, &hdr, f, buf.len());
                    if self.state.takes_input() {
                        rx.start += f.total.min(buf.len());
                    }
                }
            }
        }
        if !self.state.takes_input() || rx.start >= rx.end {
            rx.start = 0;
            rx.end = 0;
        }
        if let Framing::Stream(s) = &mut self.framing {
            s.rx = rx;
        }
    }

    /// Next event for the server.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Bytes ready to send, as slices for one writev (at most `max` slices).
    pub fn gather_tx<'a>(&'a self, out: &mut Vec<IoSlice<'a>>, max: usize) {
        if let Framing::Stream(s) = &self.framing {
            s.tx.gather(out, max);
        }
    }

    /// `n` bytes from `gather_tx` were written.
    pub fn tx_consumed(&mut self, n: usize) {
        if let Framing::Stream(s) = &mut self.framing {
            s.tx.consumed(n);
        }
    }

    /// True when bytes (or, for an RDMA transport, Sends and RDMA operations) are waiting
    /// to be sent.
    pub fn has_tx(&self) -> bool {
        self.framing.has_tx()
    }

    /// NOP-In pings, NOP timeout and login timeout.
    pub fn on_tick(&mut self, now_ms: u64) {
        self.now = now_ms;
        match &mut self.state {
            State::Login(login) => {
                if now_ms >= login.start_clock(now_ms, &self.cfg) {
                    self.close(ConnError::LoginTimeout);
                }
            }
            State::FullFeature(_) => self.nop_tick(now_ms),
            State::LoggedOut(_) | State::Closed(_) => {}
        }
    }

    /// When `on_tick` should be called next.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        match &self.state {
            State::Login(login) => login.deadline,
            State::FullFeature(ff) => ff.pings.next_at(),
            State::LoggedOut(_) | State::Closed(_) => None,
        }
    }

    /// The session, once logged in (also after a logout or close).
    pub fn session(&self) -> Option<&SessionInfo> {
        self.state.session().map(|s| &s.info)
    }

    /// Tasks received and not yet completed (including ones waiting for data or turn).
    pub fn tasks_in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// True after a Close or logout: no more input is processed.
    pub fn is_closing(&self) -> bool {
        self.state.is_ended()
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

    /// Starts the login timeout at the first input (or tick).
    fn start_login_clock(&mut self, now_ms: u64) {
        if let State::Login(login) = &mut self.state {
            login.start_clock(now_ms, &self.cfg);
        }
    }

    /// Most data bytes in one received PDU.
    fn max_rx_data(&self) -> u32 {
        match &self.state {
            State::FullFeature(ff) => ff.max_recv_data(),
            // no input is processed after the full feature phase
            State::Login(_) | State::LoggedOut(_) | State::Closed(_) => LOGIN_MAX_DATA,
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
        self.framing.push(bhs, data);
    }

    /// Ends the connection (`Event::Close`), unless it has ended already.
    pub(crate) fn close(&mut self, e: ConnError) {
        if self.state.is_ended() {
            return;
        }
        self.state.step(State::closed);
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
                if matches!(self.state, State::FullFeature(_)) {
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
        let login = matches!(self.state, State::Login(_));
        let bhs = match Bhs::decode(hdr) {
            Ok(b) => b,
            Err(_) => {
                if login {
                    self.close(ProtocolError::UnknownOpcodeDuringLogin.into());
                } else {
                    self.reject(RejectReason::CommandNotSupported, hdr);
                }
                return;
            }
        };
        if login {
            match bhs {
                Bhs::LoginRequest(req) => self.handle_login(&req, data, dir),
                _ => self.close(ProtocolError::OpcodeDuringLogin(bhs.opcode()).into()),
            }
            return;
        }
        let discovery = match &self.state {
            State::FullFeature(ff) => ff.discovery(),
            _ => false,
        };
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
        let State::Login(login) = &mut self.state else {
            return;
        };
        let first = !login.machine.started();
        let step = login.machine.handle(req, data, dir, self.peer, self.local);
        if first {
            self.stat_sn = StatSn::new(login.machine.initial_exp_stat_sn);
            self.window = CmdWindow::new(
                login.machine.initial_cmd_sn,
                self.cfg.max_queued_commands.max(1),
            )
            .with_cap(self.window_cap);
            login.cid = req.cid;
        }
        if let Some(c) = login.machine.granted_config() {
            // the target's own limits from now on (window depth, NOP-In pings, offers)
            self.window = CmdWindow::new(self.window.exp_cmd_sn(), c.max_queued_commands.max(1))
                .with_cap(self.window_cap);
            self.cfg = c.clone();
        }
        let target_name = match &step {
            LoginStep::Fail(..) => login.machine.target_name().map(str::to_owned),
            LoginStep::Continue(..) | LoginStep::Complete(..) => None,
        };
        let fill = |me: &mut Self, r: &mut crate::pdu::LoginResponse| {
            r.stat_sn = me.stat_sn.advance();
            r.exp_cmd_sn = me.window.exp_cmd_sn();
            r.max_cmd_sn = me.window.max_cmd_sn();
        };
        match step {
            LoginStep::Continue(mut r, out) => {
                fill(self, &mut r);
                self.push(&Bhs::LoginResponse(r), owned(out));
            }
            LoginStep::Complete(mut r, out, info) => {
                fill(self, &mut r);
                self.push(&Bhs::LoginResponse(r), owned(out));
                self.enter_full_feature(info.clone());
                self.events.push_back(Event::LoggedIn(info));
            }
            LoginStep::Fail(mut r, text, why, auth) => {
                fill(self, &mut r);
                let (class, detail) = (r.status_class, r.status_detail);
                self.push(&Bhs::LoginResponse(r), owned(text));
                // the login machine is dropped here: one failed response, one event
                if let Some(failure) = crate::login::LoginFailure::from_status(class, detail) {
                    self.events.push_back(Event::LoginFailed {
                        target_name,
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

    /// The login completed: the login machine gives way to the full feature phase, with
    /// the negotiated digests (byte stream) or the RDMA datamover's limits.
    fn enter_full_feature(&mut self, info: SessionInfo) {
        let (cfg, now, framing) = (&self.cfg, self.now, &mut self.framing);
        self.state.step(|state| match state {
            State::Login(login) => {
                let rdma = match framing {
                    Framing::Stream(s) => {
                        s.dg = Digests {
                            header: info.params.header_digest == Digest::Crc32c,
                            data: info.params.data_digest == Digest::Crc32c,
                        };
                        None
                    }
                    Framing::Rdma(_) => login.machine.transport_limits(),
                };
                State::FullFeature(Box::new(login.complete(info, rdma, cfg, now)))
            }
            other => other,
        });
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
