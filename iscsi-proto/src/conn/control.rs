//! Non-SCSI full-feature PDUs: NOP-Out/NOP-In (echo and target pings with timeout),
//! Text requests (SendTargets, negotiation, long answers split with the C bit), Logout
//! (after pending tasks finish), task management (with cleanup of tasks still waiting
//! for Data-Out), and Reject generation.

use super::tx::TxData;
use super::{
    ConnError, Connection, Directory, Event, SessionType, State, TmfFunction, TmfRequest,
    TmfResponse,
};
use crate::DataBuf;
use crate::pdu::fields::lun_decode;
use crate::pdu::{
    Bhs, LogoutRequest, LogoutResponse, NopIn, NopOut, RESERVED_TAG, Reject, TaskMgmtRequest,
    TaskMgmtResponse, TextRequest, TextResponse,
};
use crate::text::kv;
use crate::text::negotiate::{Phase, REJECT};

use crate::pdu::RejectReason;

/// Bound on task management requests waiting for the server.
const MAX_PENDING_TMFS: usize = 64;

/// A long Text answer still being sent.
#[derive(Debug)]
pub(crate) struct PendingText {
    ttt: u32,
    rest: Vec<u8>,
}

/// A task management request waiting for the server's verdict and for the tasks it aborted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingTmf {
    /// The connection already removed an undelivered task this request aimed at.
    cleaned: bool,
    /// Aborted tasks the server is still running: the response waits for them.
    waiting: usize,
    /// The server's answer, once given.
    verdict: Option<TmfResponse>,
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
        if n.itt == RESERVED_TAG {
            // Answer to our ping (or a ping that wants no answer).
            if n.ttt != RESERVED_TAG && self.ping_ttt == Some(n.ttt) {
                self.ping_ttt = None;
                self.missed_pings = 0;
            }
            return;
        }
        if !self.accept_cmd_sn(n.cmd_sn, n.immediate, None) {
            return;
        }
        self.pump_window();
        let max = self.max_send_data();
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
        let interval = self.cfg.nop_interval_ms;
        if interval == 0 {
            return;
        }
        let Some(at) = self.next_ping_at else {
            self.next_ping_at = Some(now.saturating_add(interval));
            return;
        };
        if now < at {
            return;
        }
        if self.ping_ttt.is_some() {
            self.missed_pings += 1;
            if self.cfg.nop_count > 0 && self.missed_pings >= self.cfg.nop_count {
                self.close(ConnError::NopTimeout(self.missed_pings));
                return;
            }
        }
        let ttt = self.alloc_ttt();
        self.ping_ttt = Some(ttt);
        let p = NopIn {
            lun: 0,
            itt: RESERVED_TAG,
            ttt,
            stat_sn: self.stat_sn.current(),
            exp_cmd_sn: self.window.exp_cmd_sn(),
            max_cmd_sn: self.window.max_cmd_sn(),
        };
        self.push(&Bhs::NopIn(p), TxData::None);
        self.next_ping_at = Some(now.saturating_add(interval));
    }

    fn send_text_chunk(&mut self, itt: u32, lun: u64, mut text: Vec<u8>) {
        let max = self.max_send_data();
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
        self.text_pending = pending;
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
        if t.ttt != RESERVED_TAG {
            // Continuation of a long answer of ours.
            match self.text_pending.take() {
                Some(p) if p.ttt == t.ttt => self.send_text_chunk(t.itt, t.lun, p.rest),
                _ => self.reject(RejectReason::InvalidPduField, hdr),
            }
            return;
        }
        self.text_pending = None;
        let text = match self.text_acc.push(data, t.cont) {
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
        if let Some(n) = self.text_neg.as_mut() {
            n.begin_exchange();
        }
        for (k, v) in &pairs {
            if k == "SendTargets" {
                self.send_targets(v, dir, &mut out);
                continue;
            }
            let ans = match self.text_neg.as_mut() {
                Some(n) => n.respond(k, v, Phase::FullFeature),
                None => Ok(Some(REJECT.to_string())),
            };
            match ans {
                Ok(Some(a)) => kv::push(&mut out, k, &a),
                Ok(None) => {}
                Err(_) => {
                    self.reject(RejectReason::ProtocolError, hdr);
                    return;
                }
            }
        }
        if let Some(n) = self.text_neg.as_ref() {
            // Declarative MaxRecvDataSegmentLength may change in full feature phase.
            self.params.initiator_max_recv_data_segment_length =
                n.params.initiator_max_recv_data_segment_length;
        }
        self.send_text_chunk(t.itt, t.lun, out);
    }

    fn send_targets(&mut self, value: &str, dir: &dyn Directory, out: &mut Vec<u8>) {
        let Some(s) = self.session.as_ref() else {
            return;
        };
        let scope = match (s.session_type, value) {
            (SessionType::Discovery, "All") => None,
            (SessionType::Discovery, "") => {
                kv::push(out, "SendTargets", REJECT);
                return;
            }
            (SessionType::Normal, "" | "All") => s.target_name.clone(),
            (_, name) => Some(name.to_string()),
        };
        let recs = dir.send_targets(&s.initiator_name, self.peer, self.local, scope.as_deref());
        for r in recs {
            kv::push(out, "TargetName", &r.name);
            for a in &r.addresses {
                kv::push(out, "TargetAddress", a);
            }
        }
    }

    pub(crate) fn handle_logout(&mut self, l: &LogoutRequest) {
        if !self.accept_cmd_sn(l.cmd_sn, l.immediate, None) {
            return;
        }
        self.pump_window();
        let code = match l.reason {
            0 => None,
            1 if l.cid == self.cid => None,
            1 => Some(1), // CID not found
            2 => Some(2), // connection recovery not supported at ERL 0
            _ => Some(3),
        };
        if let Some(code) = code {
            self.send_logout_response(l.itt, code);
            return;
        }
        self.logout_itt = Some(l.itt);
        self.maybe_finish_logout();
    }

    fn send_logout_response(&mut self, itt: u32, response: u8) {
        let r = LogoutResponse {
            response,
            itt,
            stat_sn: self.stat_sn.advance(),
            exp_cmd_sn: self.window.exp_cmd_sn(),
            max_cmd_sn: self.window.max_cmd_sn(),
            time2wait: self.params.default_time2wait,
            time2retain: self.params.default_time2retain,
        };
        self.push(&Bhs::LogoutResponse(r), TxData::None);
    }

    /// Sends the logout response once every task is done.
    pub(crate) fn maybe_finish_logout(&mut self) {
        if self.state != State::FullFeature || !self.tasks.is_empty() {
            return;
        }
        if let Some(itt) = self.logout_itt.take() {
            self.send_logout_response(itt, 0);
            self.state = State::LoggedOut;
            self.events.push_back(Event::LoggedOut);
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
        if self.tmfs.len() >= MAX_PENDING_TMFS {
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
        self.tmfs.insert(
            t.itt,
            PendingTmf {
                cleaned,
                waiting,
                verdict: None,
            },
        );
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
        if self.state != State::FullFeature {
            return;
        }
        let Some(p) = self.tmfs.get_mut(&itt) else {
            return;
        };
        p.verdict = Some(resp);
        self.try_finish_tmf(itt);
    }

    /// An aborted task finished in the server: its TMF may be answered now.
    pub(crate) fn aborted_task_done(&mut self, tmf_itt: u32) {
        if let Some(p) = self.tmfs.get_mut(&tmf_itt) {
            p.waiting = p.waiting.saturating_sub(1);
            self.try_finish_tmf(tmf_itt);
        }
    }

    fn try_finish_tmf(&mut self, itt: u32) {
        let ready = self
            .tmfs
            .get(&itt)
            .is_some_and(|p| p.waiting == 0 && p.verdict.is_some());
        if !ready {
            return;
        }
        let Some(p) = self.tmfs.remove(&itt) else {
            return;
        };
        let resp = match p.verdict {
            Some(TmfResponse::TaskNotExist) if p.cleaned => TmfResponse::Complete,
            Some(r) => r,
            None => TmfResponse::Complete,
        };
        self.send_tmf_response(itt, resp.code());
        self.maybe_finish_logout();
    }

    /// Whether task `itt` is still wanted: received, handed to the server and not ended by
    /// task management (a long server-side job, e.g. EXTENDED COPY, stops when it is not).
    pub fn task_wanted(&self, itt: u32) -> bool {
        self.tasks.get(&itt).is_some_and(|t| t.aborted_by.is_none())
    }

    /// Task management requests not answered yet.
    pub fn tmfs_pending(&self) -> usize {
        self.tmfs.len()
    }

    /// Tasks of this session ended by another I_T nexus's task management (LOGICAL UNIT
    /// RESET, CLEAR TASK SET, TARGET RESET) or by a PREEMPT AND ABORT: the tasks on `lun`
    /// (all LUNs with `None`) end without status (SAM-5, TAS = 0). Tasks still waiting for
    /// data or their CmdSN turn are removed now; running ones are marked so that their
    /// completion sends nothing. Returns how many tasks were ended.
    pub fn abort_tasks(&mut self, lun: Option<u64>) -> usize {
        if self.state != State::FullFeature {
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
