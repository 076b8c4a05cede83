//! [`LoginMachine`]: what every login PDU goes through whatever the stage (the PDU bound,
//! version, CSG/NSG and T/C checks, C-bit text reassembly), then the current stage
//! (`stages`) handles the complete text. Also the response and failure builders.

use super::stages::State;
use super::{AuthFailure, AuthFailureReason, Directory, LoginConfig, LoginGrant, LoginStep};
use super::{RandomSource, status};
use crate::conn::{RdmaLimits, TransportKeys};
use crate::pdu::{LoginRequest, LoginResponse};
use crate::text::kv::{self, Accumulator};
use crate::text::negotiate::Negotiator;
use std::net::SocketAddr;

/// What the stages share: the limits and offers in force, the negotiation so far, and
/// what the first PDU and the Directory said.
pub(super) struct Context {
    pub cfg: LoginConfig,
    pub neg: Negotiator,
    pub rng: Option<Box<dyn RandomSource>>,
    pub isid: [u8; 6],
    pub tsih: u16,
    /// The Directory's answer. Kept past the end of the login, failed or not: the
    /// connection applies its configuration before sending the last response.
    pub grant: Option<LoginGrant>,
    /// The TargetName of a normal session once the Directory recognised it (see
    /// [`LoginMachine::target_name`]).
    pub target_name: Option<String>,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// The transport's own login keys (iSER), asked before the iSCSI negotiation.
    pub transport: Option<Box<dyn TransportKeys>>,
    /// What `TransportKeys::finish` gave when the login completed.
    pub transport_limits: Option<RdmaLimits>,
}

impl Context {
    /// `AuthMethod=None` is among the offered methods.
    pub fn allows_no_auth(&self) -> bool {
        self.cfg.offer.auth_methods.iter().any(|m| m == "None")
    }
}

/// The login state machine of one connection.
pub struct LoginMachine {
    cx: Context,
    state: State,
    pdus: u32,
    acc: Accumulator,
    /// CmdSN of the first login request (initial CmdSN of the session).
    pub initial_cmd_sn: u32,
    /// ExpStatSN of the first login request (we start StatSN there).
    pub initial_exp_stat_sn: u32,
}

impl std::fmt::Debug for LoginMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginMachine")
            .field("state", &self.state)
            .field("pdus", &self.pdus)
            .finish_non_exhaustive()
    }
}

impl LoginMachine {
    /// A fresh login.
    pub fn new(cfg: LoginConfig) -> Self {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        LoginMachine {
            cx: Context {
                neg: Negotiator::new(cfg.offer.clone()),
                cfg,
                rng: None,
                isid: [0; 6],
                tsih: 0,
                grant: None,
                target_name: None,
                peer: unspecified,
                local: unspecified,
                transport: None,
                transport_limits: None,
            },
            state: State::Start,
            pdus: 0,
            acc: Accumulator::new(64 * 1024),
            initial_cmd_sn: 0,
            initial_exp_stat_sn: 0,
        }
    }

    /// The source of CHAP identifiers and challenges (required for CHAP logins: without
    /// one they fail with a target error).
    pub fn set_random_source(&mut self, rng: Box<dyn RandomSource>) {
        self.cx.rng = Some(rng);
    }

    /// Lets `keys` answer the transport's own login keys (iSER) and negotiates no
    /// digests (an RDMA transport has none).
    pub fn set_transport_keys(&mut self, keys: Box<dyn TransportKeys>) {
        self.cx.transport = Some(keys);
        self.cx.cfg.offer.header_digest = vec![crate::Digest::None];
        self.cx.cfg.offer.data_digest = vec![crate::Digest::None];
        self.cx.neg.offer.header_digest = vec![crate::Digest::None];
        self.cx.neg.offer.data_digest = vec![crate::Digest::None];
    }

    /// The transport's datamover limits, once a login with transport keys completed.
    pub fn transport_limits(&self) -> Option<RdmaLimits> {
        self.cx.transport_limits
    }

    /// True once the first login request has been seen.
    pub fn started(&self) -> bool {
        !matches!(self.state, State::Start)
    }

    /// The per-target configuration granted at login, if the server gave one.
    pub fn granted_config(&self) -> Option<&crate::conn::ConnConfig> {
        self.cx.grant.as_ref().and_then(|g| g.config.as_ref())
    }

    /// The target this login is for, as the initiator named it, once the Directory
    /// recognised the name: its `login` accepted the login or refused it for a reason
    /// other than [`super::LoginReject::TargetNotFound`] / `TargetRemoved`. `None` for
    /// discovery sessions, unknown targets and logins that failed before the Directory
    /// was asked. (With a Directory that answers `TargetNotFound` for names it does not
    /// know, an initiator cannot make up the names that come from here: safe as a metric
    /// label.)
    pub fn target_name(&self) -> Option<&str> {
        self.cx.target_name.as_deref()
    }

    /// Processes one login request PDU and its data segment.
    pub fn handle(
        &mut self,
        req: &LoginRequest,
        data: &[u8],
        dir: &dyn Directory,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> LoginStep {
        self.cx.peer = peer;
        self.cx.local = local;
        self.pdus += 1;
        if self.pdus > self.cx.cfg.max_login_pdus {
            return fail(req, status::INITIATOR_ERROR, "too many login PDUs");
        }
        if let State::Start = self.state {
            if req.version_min > 0 {
                return fail(
                    req,
                    status::UNSUPPORTED_VERSION,
                    "unsupported iSCSI version",
                );
            }
            self.cx.isid = req.isid;
            self.cx.tsih = req.tsih;
            self.initial_cmd_sn = req.cmd_sn;
            self.initial_exp_stat_sn = req.exp_stat_sn;
        } else if req.isid != self.cx.isid || req.tsih != self.cx.tsih {
            // ISID and TSIH say which session the login is for (a new one, or the one to
            // join): the first PDU decided it, so a later PDU naming another session is
            // refused rather than answered as if it named the first one (Linux's LIO
            // refuses a changed ISID the same way)
            return fail(
                req,
                status::INITIATOR_ERROR,
                "ISID or TSIH changed during the login",
            );
        }
        if let Err(why) = self.check_stage(req) {
            return fail(req, status::INITIATOR_ERROR, why);
        }
        if let State::Start = self.state {
            self.state = State::identifying(req.csg);
        }
        let text = match self.acc.push(data, req.cont) {
            Ok(Some(t)) => t,
            // Acknowledge a partial text with an empty response (RFC 7143 §6.1).
            Ok(None) => return LoginStep::Continue(response(req), Vec::new()),
            Err(e) => return fail(req, status::INITIATOR_ERROR, e.to_string()),
        };
        let pairs = match kv::parse(&text) {
            Ok(p) => p,
            Err(e) => return fail(req, status::INITIATOR_ERROR, e.to_string()),
        };
        let state = std::mem::replace(&mut self.state, State::Ended);
        let (next, step) = state.text(&mut self.cx, req, &pairs, dir);
        self.state = next;
        step
    }

    /// The CSG, NSG and T/C bits of `req` fit the current stage.
    fn check_stage(&self, req: &LoginRequest) -> Result<(), &'static str> {
        if req.csg > 1 {
            return Err("invalid CSG in login request");
        }
        if self.state.csg().is_some_and(|st| st != req.csg) {
            return Err("login CSG does not match stage");
        }
        if req.transit && (req.nsg <= req.csg || req.nsg == 2) {
            return Err("invalid NSG in login request");
        }
        if req.transit && req.cont {
            return Err("login request with both T and C");
        }
        Ok(())
    }
}

/// A response to `req` in its stage, no transit, success.
pub(super) fn response(req: &LoginRequest) -> LoginResponse {
    LoginResponse {
        transit: false,
        cont: false,
        csg: req.csg,
        nsg: 0,
        version_max: 0,
        version_active: 0,
        isid: req.isid,
        tsih: 0,
        itt: req.itt,
        stat_sn: 0,
        exp_cmd_sn: 0,
        max_cmd_sn: 0,
        status_class: 0,
        status_detail: 0,
    }
}

/// Why a login ends: status, words for the log, the authentication failure if that is
/// the cause, and text to send (e.g. `CHAP_A=Reject`).
#[derive(Debug)]
pub(super) struct Refusal {
    status: (u8, u8),
    why: String,
    auth: Option<AuthFailure>,
    text: Vec<u8>,
}

impl Refusal {
    /// Ends the login with status `st`.
    pub fn new(st: (u8, u8), why: impl Into<String>) -> Refusal {
        Refusal {
            status: st,
            why: why.into(),
            auth: None,
            text: Vec::new(),
        }
    }

    /// An authentication failure (a target error when no random source was available),
    /// sending `text`.
    pub fn auth(f: AuthFailure, text: Vec<u8>) -> Refusal {
        let status = if f.reason == AuthFailureReason::RandomUnavailable {
            status::TARGET_ERROR
        } else {
            status::AUTH_FAILED
        };
        Refusal {
            status,
            why: f.to_string(),
            auth: Some(f),
            text,
        }
    }

    /// The failure response to `req`.
    pub fn into_step(self, req: &LoginRequest) -> LoginStep {
        let mut r = response(req);
        r.status_class = self.status.0;
        r.status_detail = self.status.1;
        LoginStep::Fail(r, self.text, self.why, self.auth)
    }
}

/// The login ends with status `st`; `why` is for the log.
pub(super) fn fail(req: &LoginRequest, st: (u8, u8), why: impl Into<String>) -> LoginStep {
    Refusal::new(st, why).into_step(req)
}
