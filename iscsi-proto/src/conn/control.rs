//! Non-SCSI full-feature PDUs: NOP-Out/NOP-In (echo and target pings with timeout),
//! Text requests (SendTargets, negotiation, long answers split with the C bit), Logout
//! (after pending tasks finish), task management (with cleanup of tasks still waiting
//! for Data-Out), and Reject generation.

use super::state::{LogoutGate, State};
use super::tx::TxData;
use super::{
    ConnError, Connection, Directory, Event, SessionInfo, SessionType, TmfFunction, TmfRequest,
    TmfResponse,
};
use crate::DataBuf;
use crate::pdu::fields::lun_decode;
use crate::pdu::{
    AsyncMessage, Bhs, LogoutRequest, LogoutResponse, NopIn, NopOut, RESERVED_TAG, Reject,
    TaskMgmtRequest, TaskMgmtResponse, TextRequest, TextResponse,
};
use crate::text::kv::{self, Accumulator};
use crate::text::negotiate::{Negotiator, Phase, REJECT};
use std::collections::HashMap;
use std::net::SocketAddr;

use crate::pdu::RejectReason;

/// Bound on task management requests waiting for the server.
const MAX_PENDING_TMFS: usize = 64;
/// Bound on the text of one Text request (all its PDUs).
const MAX_TEXT: usize = 64 * 1024;

/// NOP-In pings of the full feature phase (`ConnConfig::nop_interval_ms`, `nop_count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pings {
    /// No pings (`nop_interval_ms` 0).
    Off,
    /// The next ping goes out at `next_at`; every earlier one was answered.
    Idle { next_at: u64 },
    /// Ping `ttt` is unanswered, and `missed` pings before it were not answered either;
    /// the next goes out at `next_at`.
    Waiting { ttt: u32, missed: u32, next_at: u64 },
}

impl Pings {
    /// Pings every `interval` ms from `now` (none for 0).
    pub(crate) fn start(interval: u64, now: u64) -> Self {
        if interval == 0 {
            Pings::Off
        } else {
            Pings::Idle {
                next_at: now.saturating_add(interval),
            }
        }
    }

    /// When the next ping is due.
    pub(crate) fn next_at(&self) -> Option<u64> {
        match *self {
            Pings::Off => None,
            Pings::Idle { next_at } | Pings::Waiting { next_at, .. } => Some(next_at),
        }
    }

    /// A ping is due at `now`: how many before it went unanswered.
    fn due(&self, now: u64) -> Option<u32> {
        match *self {
            Pings::Off => None,
            Pings::Idle { next_at } => (now >= next_at).then_some(0),
            Pings::Waiting {
                missed, next_at, ..
            } => (now >= next_at).then_some(missed.saturating_add(1)),
        }
    }

    /// A NOP-Out with `ttt` came: it answers the ping waiting for it.
    fn answered(&mut self, ttt: u32) {
        if let Pings::Waiting {
            ttt: t, next_at, ..
        } = *self
            && ttt != RESERVED_TAG
            && ttt == t
        {
            *self = Pings::Idle { next_at };
        }
    }
}

/// Text requests of the full feature phase: the negotiation of the keys allowed there, the
/// initiator's text being reassembled, and our long answer being sent.
pub(crate) struct TextExchange {
    neg: Negotiator,
    acc: Accumulator,
    pending: Option<PendingText>,
}

impl TextExchange {
    pub(crate) fn new(neg: Negotiator) -> Self {
        TextExchange {
            neg,
            acc: Accumulator::new(MAX_TEXT),
            pending: None,
        }
    }

    /// No exchange under way (no continued request or response).
    pub(crate) fn idle(&self) -> bool {
        self.pending.is_none() && !self.acc.pending()
    }
}

/// A long Text answer still being sent.
#[derive(Debug)]
pub(crate) struct PendingText {
    ttt: u32,
    rest: Vec<u8>,
}

/// Task management requests waiting for the server's verdict or for the tasks they aborted,
/// by ITT.
#[derive(Debug, Default)]
pub(crate) struct TmfTable(HashMap<u32, PendingTmf>);

/// A task management request waiting for the server's verdict and for the tasks it aborted.
#[derive(Debug, Clone, Copy)]
struct PendingTmf {
    /// The connection already removed an undelivered task this request aimed at.
    cleaned: bool,
    /// Aborted tasks the server is still running: the response waits for them.
    waiting: usize,
    /// The server's answer, once given.
    verdict: Option<TmfResponse>,
}

impl TmfTable {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Request `itt` waits for the server and for `waiting` aborted tasks; `cleaned`: it
    /// already removed a task the server never saw.
    fn wait(&mut self, itt: u32, cleaned: bool, waiting: usize) {
        let pending = PendingTmf {
            cleaned,
            waiting,
            verdict: None,
        };
        self.0.insert(itt, pending);
    }

    /// The server's verdict on request `itt`: the response to send, once its aborted tasks
    /// have ended.
    fn verdict(&mut self, itt: u32, resp: TmfResponse) -> Option<TmfResponse> {
        self.0.get_mut(&itt)?.verdict = Some(resp);
        self.answer(itt)
    }

    /// A task aborted by request `itt` ended: the response to send, if that was the last
    /// one and the verdict came.
    fn task_ended(&mut self, itt: u32) -> Option<TmfResponse> {
        let p = self.0.get_mut(&itt)?;
        p.waiting = p.waiting.saturating_sub(1);
        self.answer(itt)
    }

    /// Removes request `itt` when it can be answered, with its response.
    fn answer(&mut self, itt: u32) -> Option<TmfResponse> {
        let p = self.0.get(&itt)?;
        let verdict = p.verdict.filter(|_| p.waiting == 0)?;
        let cleaned = p.cleaned;
        self.0.remove(&itt);
        Some(match verdict {
            // the task was never handed to the server: this request ended it
            TmfResponse::TaskNotExist if cleaned => TmfResponse::Complete,
            r => r,
        })
    }
}

impl<B: DataBuf> Connection<B> {
    /// Queues a Reject carrying the offending header (and tells the server: `Event::Rejected`).
    pub(crate) fn reject(&mut self, reason: RejectReason, hdr: &[u8; 48]) {
        self.stats.rejects_sent += 1;
        let r = Reject {
            reason: reason.code(),
            stat_sn: self.stat_sn.advance(),
            exp_cmd_sn: self.window.exp_cmd_sn(),
            max_cmd_sn: self.window.max_cmd_sn(),
            data_sn: 0,
        };
        self.push(&Bhs::Reject(r), TxData::Owned(hdr.to_vec()));
        self.events.push_back(Event::Rejected(reason));
    }

    pub(crate) fn handle_nop_out(&mut self, n: &NopOut, data: &[u8]) {
        let State::FullFeature(ff) = &mut self.state else {
            return;
        };
        if n.itt == RESERVED_TAG {
            // Answer to our ping (or a ping that wants no answer).
            ff.pings.answered(n.ttt);
            return;
        }
        let max = ff.max_send_data();
        if !self.accept_cmd_sn(n.cmd_sn, n.immediate, None) {
            return;
        }
        self.pump_window();
        let echo = &data[..data.len().min(max)];
        let r = NopIn {
            lun: n.lun,
            itt: n.itt,
            ttt: RESERVED_TAG,
            stat_sn: self.stat_sn.advance(),
            exp_cmd_sn: self.window.exp_cmd_sn(),
            max_cmd_sn: self.window.max_cmd_sn(),
        };
        let d = if echo.is_empty() {
            TxData::None
        } else {
            TxData::Owned(echo.to_vec())
        };
        self.push(&Bhs::NopIn(r), d);
    }

    pub(crate) fn nop_tick(&mut self, now: u64) {
        let State::FullFeature(ff) = &self.state else {
            return;
        };
        let Some(missed) = ff.pings.due(now) else {
            return;
        };
        if missed > 0 && self.cfg.nop_count > 0 && missed >= self.cfg.nop_count {
            self.close(ConnError::NopTimeout(missed));
            return;
        }
        let ttt = self.alloc_ttt();
        let p = NopIn {
            lun: 0,
            itt: RESERVED_TAG,
            ttt,
            stat_sn: self.stat_sn.current(),
            exp_cmd_sn: self.window.exp_cmd_sn(),
            max_cmd_sn: self.window.max_cmd_sn(),
        };
        self.push(&Bhs::NopIn(p), TxData::None);
        let next_at = now.saturating_add(self.cfg.nop_interval_ms);
        if let State::FullFeature(ff) = &mut self.state {
            ff.pings = Pings::Waiting {
                ttt,
                missed,
                next_at,
            };
        }
    }

    fn send_text_chunk(&mut self, itt: u32, lun: u64, mut text: Vec<u8>) {
        let State::FullFeature(ff) = &self.state else {
            return;
        };
        let max = ff.max_send_data();
        let (chunk, pending) = if text.len() > max {
            let rest = text.split_off(max);
            let ttt = self.alloc_ttt();
            (text, Some(PendingText { ttt, rest }))
        } else {
            (text, None)
        };
        let r = TextResponse {
            final_: pending.is_none(),
            cont: pending.is_some(),
            lun,
            itt,
            ttt: pending.as_ref().map_or(RESERVED_TAG, |p| p.ttt),
            stat_sn: self.stat_sn.advance(),
            exp_cmd_sn: self.window.exp_cmd_sn(),
            max_cmd_sn: self.window.max_cmd_sn(),
        };
        if let State::FullFeature(ff) = &mut self.state {
            ff.text.pending = pending;
        }
        let d = if chunk.is_empty() {
            TxData::None
        } else {
            TxData::Owned(chunk)
        };
        self.push(&Bhs::TextResponse(r), d);
    }

    pub(crate) fn handle_text(
        &mut self,
        t: &TextRequest,
        hdr: &[u8; 48],
        data: &[u8],
        dir: &dyn Directory,
    ) {
        if !self.accept_cmd_sn(t.cmd_sn, t.immediate, None) {
            return;
        }
        self.pump_window();
        let State::FullFeature(ff) = &mut self.state else {
            return;
        };
        if t.ttt != RESERVED_TAG {
            // Continuation of a long answer of ours.
            match ff.text.pending.take() {
                Some(p) if p.ttt == t.ttt => self.send_text_chunk(t.itt, t.lun, p.rest),
                _ => self.reject(RejectReason::InvalidPduField, hdr),
            }
            return;
        }
        ff.text.pending = None;
        let text = match ff.text.acc.push(data, t.cont) {
            Ok(Some(x)) => x,
            Ok(None) => {
                // Ask for the rest of the initiator's text.
                let ttt = self.alloc_ttt();
                let r = TextResponse {
                    final_: false,
                    cont: false,
                    lun: t.lun,
                    itt: t.itt,
                    ttt,
                    stat_sn: self.stat_sn.advance(),
                    exp_cmd_sn: self.window.exp_cmd_sn(),
                    max_cmd_sn: self.window.max_cmd_sn(),
                };
                self.push(&Bhs::TextResponse(r), TxData::None);
                return;
            }
            Err(_) => {
                self.reject(RejectReason::ProtocolError, hdr);
                return;
            }
        };
        let Ok(pairs) = kv::parse(&text) else {
            self.reject(RejectReason::ProtocolError, hdr);
            return;
        };
        let mut out = Vec::new();
        ff.text.neg.begin_exchange();
        for (k, v) in &pairs {
            if k == "SendTargets" {
                send_targets(&ff.session.info, self.peer, self.local, v, dir, &mut out);
                continue;
            }
            match ff.text.neg.respond(k, v, Phase::FullFeature) {
                Ok(Some(a)) => kv::push(&mut out, k, &a),
                Ok(None) => {}
                Err(_) => {
                    self.reject(RejectReason::ProtocolError, hdr);
                    return;
                }
            }
        }
        // Declarative MaxRecvDataSegmentLength may change in full feature phase.
        ff.params.initiator_max_recv_data_segment_length =
            ff.text.neg.params.initiator_max_recv_data_segment_length;
        self.send_text_chunk(t.itt, t.lun, out);
    }

    /// Asks the initiator to log this connection out (Asynchronous Message, AsyncEvent 1,
    /// RFC 7143 §11.9.1) within `within_secs` seconds (Parameter3), announced by
    /// AsyncEvent 2 (the connection will be dropped; Time2Wait 0): the way to move a
    /// session elsewhere without an error, as initiators log out, wait the Logout
    /// Response's Time2Wait (0 after this request) and log in again (open-iscsi,
    /// libiscsi). Only a normal session
    /// in full feature phase is asked (returns whether it was); a discovery session has
    /// nothing to lose and is closed by the caller. A connection already logging out is
    /// left to finish (and counts as asked).
    pub fn request_logout(&mut self, within_secs: u16) -> bool {
        let State::FullFeature(ff) = &mut self.state else {
            return false;
        };
        if ff.logout.is_some() {
            return true; // the initiator is logging out already
        }
        if ff.session.info.session_type == SessionType::Discovery {
            return false;
        }
        ff.logout_asked = true;
        let (cid, time2retain) = (ff.cid, ff.params.default_time2retain);
        // first "this connection will be dropped" with Time2Wait 0: open-iscsi takes its
        // wait before the next login from this (a Logout Response's Time2Wait of 0 leaves
        // the negotiated DefaultTime2Wait in force there); then the logout request
        for (event, param1, param2, param3) in [(2, cid, 0, time2retain), (1, 0, 0, within_secs)] {
            let m = AsyncMessage {
                lun: 0,
                stat_sn: self.stat_sn.advance(),
                exp_cmd_sn: self.window.exp_cmd_sn(),
                max_cmd_sn: self.window.max_cmd_sn(),
                event,
                vcode: 0,
                param1,
                param2,
                param3,
            };
            self.push(&Bhs::AsyncMessage(m), TxData::None);
        }
        true
    }

    pub(crate) fn handle_logout(&mut self, l: &LogoutRequest) {
        if !self.accept_cmd_sn(l.cmd_sn, l.immediate, None) {
            return;
        }
        self.pump_window();
        let State::FullFeature(ff) = &mut self.state else {
            return;
        };
        let code = match l.reason {
            0 => None,
            1 if l.cid == ff.cid => None,
            1 => Some(1), // CID not found
            2 => Some(2), // connection recovery not supported at ERL 0
            _ => Some(3),
        };
        if let Some(code) = code {
            self.send_logout_response(l.itt, code);
            return;
        }
        ff.logout = Some(l.itt);
        self.maybe_finish_logout();
    }

    fn send_logout_response(&mut self, itt: u32, response: u8) {
        let State::FullFeature(ff) = &self.state else {
            return;
        };
        // asked for by the target (a handover): nothing to wait for before the next login
        let time2wait = if ff.logout_asked {
            0
        } else {
            ff.params.default_time2wait
        };
        let time2retain = ff.params.default_time2retain;
        let r = LogoutResponse {
            response,
            itt,
            stat_sn: self.stat_sn.advance(),
            exp_cmd_sn: self.window.exp_cmd_sn(),
            max_cmd_sn: self.window.max_cmd_sn(),
            time2wait,
            time2retain,
        };
        self.push(&Bhs::LogoutResponse(r), TxData::None);
    }

    /// Sends the logout response once every task is done (and the server confirmed it,
    /// when it asked to: [`Connection::hold_logouts`]).
    pub(crate) fn maybe_finish_logout(&mut self) {
        if !self.tasks.is_empty() {
            return;
        }
        let State::FullFeature(ff) = &mut self.state else {
            return;
        };
        if ff.logout.is_none() {
            return;
        }
        match ff.logout_gate {
            LogoutGate::Off | LogoutGate::Confirmed => {}
            LogoutGate::Armed => {
                ff.logout_gate = LogoutGate::Asked;
                self.events.push_back(Event::LogoutRequested);
                return;
            }
            LogoutGate::Asked => return,
        }
        if let Some(itt) = ff.logout.take() {
            self.send_logout_response(itt, 0);
            self.state.step(State::logged_out);
            self.events.push_back(Event::LoggedOut);
        }
    }

    /// The server confirms every Logout of this session before its response goes out
    /// (`on`), or no longer: once the session's tasks have ended the connection reports
    /// [`Event::LogoutRequested`] and waits for [`Connection::confirm_logout`]. For what must
    /// be done before the initiator learns that its I_T nexus is gone (a server that
    /// shares the nexus's reservations with other gateways writes their release first).
    /// Call it in full feature phase; elsewhere it does nothing.
    pub fn hold_logouts(&mut self, on: bool) {
        if let State::FullFeature(ff) = &mut self.state {
            ff.logout_gate = if on {
                LogoutGate::Armed
            } else {
                LogoutGate::Off
            };
        }
    }

    /// The server has done what a Logout needed ([`Event::LogoutRequested`]): the Logout
    /// Response goes out, and [`Event::LoggedOut`] follows.
    pub fn confirm_logout(&mut self) {
        if let State::FullFeature(ff) = &mut self.state
            && ff.logout_gate == LogoutGate::Asked
        {
            ff.logout_gate = LogoutGate::Confirmed;
            self.maybe_finish_logout();
        }
    }

    pub(crate) fn handle_tmf(&mut self, t: &TaskMgmtRequest) {
        if !self.accept_cmd_sn(t.cmd_sn, t.immediate, None) {
            return;
        }
        self.pump_window();
        let req = TmfRequest {
            itt: t.itt,
            function: TmfFunction::from_code(t.function),
            lun: lun_decode(t.lun),
            referenced_itt: t.rtt,
            ref_cmd_sn: t.ref_cmd_sn,
        };
        let State::FullFeature(ff) = &mut self.state else {
            return;
        };
        if ff.tmfs.len() >= MAX_PENDING_TMFS {
            self.send_tmf_response(t.itt, TmfResponse::Rejected.code());
            return;
        }
        if req.function == TmfFunction::TaskReassign {
            // the one iSCSI-only function: connection recovery (ERL 2) is not offered; every
            // other function is planned by the server (scsi::task_mgmt)
            self.send_tmf_response(t.itt, TmfResponse::ReassignNotSupported.code());
            return;
        }
        if req.function == TmfFunction::AbortTask && !self.tasks.contains_key(&req.referenced_itt) {
            // RFC 7143 11.5.1: a task never received whose CmdSN is still inside the window
            // (and older than this request) counts as received and aborted; otherwise it does
            // not exist (it completed, or never was).
            let r = req.ref_cmd_sn;
            let never_received =
                self.window.check(r).is_ok() && (t.immediate || crate::seq::sn_lt(r, t.cmd_sn));
            let resp = if never_received && self.window.arrive(r, None).is_ok() {
                self.pump_window();
                TmfResponse::Complete
            } else {
                TmfResponse::TaskNotExist
            };
            self.send_tmf_response(t.itt, resp.code());
            return;
        }
        // Tasks the server never saw (still waiting for Data-Out or their turn) are removed
        // here; tasks it is running are marked aborted: their responses are never sent, and
        // this request is answered once they have all finished (SAM-5: an aborted task ends
        // without status; the TMF response follows its end).
        let mut victims: Vec<u32> = Vec::new();
        let mut waiting = 0usize;
        for (itt, task) in self.tasks.iter_mut() {
            if !tmf_hits(&req, *itt, task.lun) {
                continue;
            }
            if !task.delivered {
                victims.push(*itt);
            } else if task.aborted_by.is_none() {
                task.aborted_by = Some(t.itt);
                waiting += 1;
            }
        }
        let cleaned = !victims.is_empty();
        for v in victims {
            self.drop_task(v);
        }
        if cleaned {
            self.window.update_max(self.active);
        }
        let State::FullFeature(ff) = &mut self.state else {
            return;
        };
        ff.tmfs.wait(t.itt, cleaned, waiting);
        self.events.push_back(Event::TaskMgmt(req));
    }

    fn send_tmf_response(&mut self, itt: u32, response: u8) {
        let r = TaskMgmtResponse {
            response,
            itt,
            stat_sn: self.stat_sn.advance(),
            exp_cmd_sn: self.window.exp_cmd_sn(),
            max_cmd_sn: self.window.max_cmd_sn(),
        };
        self.push(&Bhs::TaskMgmtResponse(r), TxData::None);
    }

    /// The server's answer to a task management request (its own part done: unit
    /// attentions, other sessions' tasks…). The response is sent once every task of this
    /// connection the request aborted has also finished; those tasks' own completions are
    /// swallowed by `complete_command`, so an initiator never sees status for an aborted
    /// task and may reuse its tag as soon as it has the TMF response.
    pub fn complete_tmf(&mut self, itt: u32, resp: TmfResponse) {
        let State::FullFeature(ff) = &mut self.state else {
            return;
        };
        if let Some(resp) = ff.tmfs.verdict(itt, resp) {
            self.answer_tmf(itt, resp);
        }
    }

    /// An aborted task finished in the server: its TMF may be answered now.
    pub(crate) fn aborted_task_done(&mut self, tmf_itt: u32) {
        let State::FullFeature(ff) = &mut self.state else {
            return;
        };
        if let Some(resp) = ff.tmfs.task_ended(tmf_itt) {
            self.answer_tmf(tmf_itt, resp);
        }
    }

    fn answer_tmf(&mut self, itt: u32, resp: TmfResponse) {
        self.send_tmf_response(itt, resp.code());
        self.maybe_finish_logout();
    }

    /// Lets the initiator have at most `n` commands in flight and sendable together (`None`:
    /// the session's depth alone): a server that holds this session's commands back (QoS)
    /// narrows the window instead of holding more. MaxCmdSN never moves back: the window
    /// narrows as commands end, and widens again on the next PDU sent once lifted.
    pub fn narrow_window(&mut self, n: Option<u32>) {
        self.window.narrow(n);
        self.window.update_max(self.active);
    }

    /// Whether task `itt` is still wanted: received, handed to the server and not ended by
    /// task management (a long server-side job, e.g. EXTENDED COPY, stops when it is not).
    pub fn task_wanted(&self, itt: u32) -> bool {
        self.tasks.get(&itt).is_some_and(|t| t.aborted_by.is_none())
    }

    /// Task management requests not answered yet.
    pub fn tmfs_pending(&self) -> usize {
        match &self.state {
            State::FullFeature(ff) => ff.tmfs.len(),
            // none is answered once the full feature phase is over
            State::Login(_) | State::LoggedOut(_) | State::Closed(_) => 0,
        }
    }

    /// Tasks of this session ended by another I_T nexus's task management (LOGICAL UNIT
    /// RESET, CLEAR TASK SET, TARGET RESET) or by a PREEMPT AND ABORT: the tasks on `lun`
    /// (all LUNs with `None`) end without status (SAM-5, TAS = 0). Tasks still waiting for
    /// data or their CmdSN turn are removed now; running ones are marked so that their
    /// completion sends nothing, and their ITTs added to `running` (the server's work for
    /// them is still going on: a task management response may wait for it). Returns how
    /// many tasks were ended.
    pub fn abort_tasks(&mut self, lun: Option<u64>, running: &mut Vec<u32>) -> usize {
        if !matches!(self.state, State::FullFeature(_)) {
            return 0;
        }
        let mut victims: Vec<u32> = Vec::new();
        let mut marked = 0usize;
        for (itt, task) in self.tasks.iter_mut() {
            if lun.is_some_and(|l| l != task.lun) {
                continue;
            }
            if !task.delivered {
                victims.push(*itt);
            } else if task.aborted_by.is_none() {
                // no task management request of this session waits for it
                task.aborted_by = Some(RESERVED_TAG);
                running.push(*itt);
                marked += 1;
            }
        }
        let n = victims.len();
        for v in victims {
            self.drop_task(v);
        }
        if n > 0 {
            self.window.update_max(self.active);
            self.maybe_finish_logout();
        }
        n + marked
    }
}

/// Does task management request `r` affect task `itt` on `lun`?
fn tmf_hits(r: &TmfRequest, itt: u32, lun: u64) -> bool {
    use TmfFunction as F;
    match r.function {
        F::AbortTask => itt == r.referenced_itt,
        F::AbortTaskSet | F::ClearTaskSet | F::LogicalUnitReset => lun == r.lun,
        F::TargetWarmReset | F::TargetColdReset => true,
        _ => false,
    }
}

/// The answer to `SendTargets=value` in session `s` (RFC 7143 Appendix C).
fn send_targets(
    s: &SessionInfo,
    peer: SocketAddr,
    local: SocketAddr,
    value: &str,
    dir: &dyn Directory,
    out: &mut Vec<u8>,
) {
    let scope = match (s.session_type, value) {
        (SessionType::Discovery, "All") => None,
        (SessionType::Discovery, "") => {
            kv::push(out, "SendTargets", REJECT);
            return;
        }
        (SessionType::Normal, "" | "All") => s.target_name.clone(),
        (_, name) => Some(name.to_string()),
    };
    let recs = dir.send_targets(&s.initiator_name, peer, local, scope.as_deref());
    for r in recs {
        kv::push(out, "TargetName", &r.name);
        for a in &r.addresses {
            kv::push(out, "TargetAddress", a);
        }
    }
}
