//! The login phase (RFC 7143 §6, §11.12–11.13): security and operational stages,
//! CSG/NSG transitions with the T bit, C-bit continuation, mandatory keys, discovery vs
//! normal sessions, target lookup/ACL/TSIH through the [`Directory`], status classes and
//! details, and a bound on the number of login PDUs.
//!
//! Authentication: after the identity keys of the first login text, the server's
//! [`Directory::auth_policy`] says whether this login needs CHAP ([`AuthPolicy`]). With
//! CHAP the target offers only `AuthMethod=CHAP` and runs [`chap::ChapAuthenticator`]
//! (one-way or mutual, RFC 7143 §12.1.3; challenges from the [`RandomSource`] given with
//! [`LoginMachine::set_random_source`]); without, only `AuthMethod=None`. Every refusal
//! carries a secret-free [`AuthFailure`] for logs and metrics; a successful CHAP login
//! reports the account in [`SessionInfo::chap`]. Other methods plug in through
//! [`Authenticator`].

pub mod auth;
pub mod chap;
#[cfg(test)]
mod chap_tests;

pub use auth::{
    AuthFailure, AuthFailureReason, AuthPolicy, ChapCredential, ChapIdentity, ChapPolicy,
    ChapSecret, RandomSource, RandomUnavailable,
};
pub use chap::ChapAlgorithm;

use crate::pdu::{LoginRequest, LoginResponse};
use crate::text::kv::{self, Accumulator};
use crate::text::negotiate::{Negotiator, Offer, Phase, SessionParams};
use std::net::SocketAddr;

/// Discovery or normal session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionType {
    Discovery,
    Normal,
}

/// What the server needs to decide on a login.
#[derive(Debug, Clone)]
pub struct LoginRequestInfo<'a> {
    pub initiator_name: &'a str,
    pub initiator_alias: Option<&'a str>,
    /// `None` for discovery sessions.
    pub target_name: Option<&'a str>,
    pub session_type: SessionType,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

/// The server accepted the login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginGrant {
    pub tsih: u16,
    pub target_portal_group_tag: u16,
    pub target_alias: Option<String>,
    /// The target's own limits and offers (per-target iSCSI parameters), replacing the
    /// connection's defaults from this login on. `None`: keep the defaults.
    pub config: Option<crate::conn::ConnConfig>,
}

/// Why the server refused a login.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginReject {
    TargetNotFound,
    /// ACL refused the initiator.
    NotAuthorized,
    TooManySessions,
    ServiceUnavailable,
    TargetRemoved,
}

/// One target for SendTargets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetRecord {
    pub name: String,
    /// "127.0.0.1:3260,1" (address:port,tpgt).
    pub addresses: Vec<String>,
}

/// Implemented by the server; the connection consults it during login and Text requests.
pub trait Directory {
    /// Target lookup, ACL and TSIH allocation. Session reinstatement (same initiator name
    /// and ISID as a live session) is the server's business here: it closes the old one.
    fn login(&self, req: &LoginRequestInfo<'_>) -> Result<LoginGrant, LoginReject>;
    /// `SendTargets=All` (scope None) or `SendTargets=<name>`: targets this initiator may see.
    fn send_targets(
        &self,
        initiator_name: &str,
        peer: SocketAddr,
        local: SocketAddr,
        scope: Option<&str>,
    ) -> Vec<TargetRecord>;

    /// The authentication this login needs, asked once right after `login` accepted it
    /// (same request). Discovery sessions come with `target_name == None` (tgtd's
    /// discovery accounts). Default: [`AuthPolicy::None`].
    fn auth_policy(&self, req: &LoginRequestInfo<'_>) -> AuthPolicy {
        let _ = req;
        AuthPolicy::None
    }

    /// The initiator passed the security stage (or needed none): `chap` names the CHAP
    /// account it proved. Called once per login, before any operational key is answered;
    /// the place for work that must not happen for unauthenticated peers (session
    /// reinstatement, binding a CHAP user to initiator names). An `Err` ends the login.
    fn authenticated(
        &self,
        req: &LoginRequestInfo<'_>,
        chap: Option<&ChapIdentity>,
    ) -> Result<(), LoginReject> {
        let _ = (req, chap);
        Ok(())
    }
}

/// The outcome of a successful login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub session_type: SessionType,
    pub initiator_name: String,
    pub target_name: Option<String>,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub params: SessionParams,
    /// The CHAP account the initiator authenticated with (`None`: no authentication).
    pub chap: Option<ChapIdentity>,
}

/// Login status class/detail pairs (RFC 7143 §11.13.5).
pub mod status {
    pub const SUCCESS: (u8, u8) = (0, 0);
    pub const INITIATOR_ERROR: (u8, u8) = (2, 0x00);
    pub const AUTH_FAILED: (u8, u8) = (2, 0x01);
    pub const NOT_AUTHORIZED: (u8, u8) = (2, 0x02);
    pub const NOT_FOUND: (u8, u8) = (2, 0x03);
    pub const TARGET_REMOVED: (u8, u8) = (2, 0x04);
    pub const UNSUPPORTED_VERSION: (u8, u8) = (2, 0x05);
    pub const TOO_MANY_CONNECTIONS: (u8, u8) = (2, 0x06);
    pub const MISSING_PARAMETER: (u8, u8) = (2, 0x07);
    pub const SESSION_TYPE_UNSUPPORTED: (u8, u8) = (2, 0x09);
    pub const SESSION_NOT_FOUND: (u8, u8) = (2, 0x0a);
    pub const INVALID_DURING_LOGIN: (u8, u8) = (2, 0x0b);
    pub const TARGET_ERROR: (u8, u8) = (3, 0x00);
    pub const SERVICE_UNAVAILABLE: (u8, u8) = (3, 0x01);
    pub const OUT_OF_RESOURCES: (u8, u8) = (3, 0x02);
}

/// Result of one authentication step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthStatus {
    Done,
    Continue,
    Failed(AuthFailure),
}

/// An authentication method run during the security stage (CHAP plugs in here).
pub trait Authenticator: Send {
    /// The AuthMethod value this authenticator implements (e.g. "None", "CHAP").
    fn method(&self) -> &'static str;
    /// Consumes method-specific keys of one login PDU, appends answers to `out`.
    fn step(&mut self, keys: &[(String, String)], out: &mut Vec<u8>) -> AuthStatus;
    /// The CHAP account proved, once done (CHAP only).
    fn chap_identity(&self) -> Option<ChapIdentity> {
        None
    }
}

/// `AuthMethod=None`.
#[derive(Debug, Default)]
pub struct NoAuth;

impl Authenticator for NoAuth {
    fn method(&self) -> &'static str {
        "None"
    }
    fn step(&mut self, _keys: &[(String, String)], _out: &mut Vec<u8>) -> AuthStatus {
        AuthStatus::Done
    }
}

/// What the connection must do with one login request.
#[derive(Debug)]
pub enum LoginStep {
    /// Send this response and keep logging in.
    Continue(LoginResponse, Vec<u8>),
    /// Send this response; the connection is now in full feature phase.
    Complete(LoginResponse, Vec<u8>, SessionInfo),
    /// Send this (failure) response and its text (usually none; `CHAP_A=Reject` when no
    /// CHAP algorithm is acceptable), then close; the string says why (no secrets), and
    /// an authentication failure says so in detail.
    Fail(LoginResponse, Vec<u8>, String, Option<AuthFailure>),
}

/// Limits for the login state machine.
#[derive(Debug, Clone)]
pub struct LoginConfig {
    pub offer: Offer,
    pub max_login_pdus: u32,
}

/// The login state machine of one connection.
pub struct LoginMachine {
    cfg: LoginConfig,
    neg: Negotiator,
    stage: Option<u8>,
    pdus: u32,
    acc: Accumulator,
    initiator_name: Option<String>,
    target_name: Option<String>,
    session_type: SessionType,
    isid: [u8; 6],
    tsih: u16,
    grant: Option<LoginGrant>,
    auth: Option<Box<dyn Authenticator>>,
    auth_done: bool,
    /// The Directory asked for CHAP (only CHAP is offered then).
    chap_required: bool,
    chap_policy: Option<ChapPolicy>,
    rng: Option<Box<dyn RandomSource>>,
    mrdsl_declared: bool,
    /// The first complete login text has been processed.
    text_seen: bool,
    /// CmdSN of the first login request (initial CmdSN of the session).
    pub initial_cmd_sn: u32,
    /// ExpStatSN of the first login request (we start StatSN there).
    pub initial_exp_stat_sn: u32,
}

impl std::fmt::Debug for LoginMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginMachine")
            .field("stage", &self.stage)
            .field("pdus", &self.pdus)
            .field("initiator_name", &self.initiator_name)
            .finish_non_exhaustive()
    }
}

fn reject_status(r: LoginReject) -> (u8, u8) {
    match r {
        LoginReject::TargetNotFound => status::NOT_FOUND,
        LoginReject::NotAuthorized => status::NOT_AUTHORIZED,
        LoginReject::TooManySessions => status::OUT_OF_RESOURCES,
        LoginReject::ServiceUnavailable => status::SERVICE_UNAVAILABLE,
        LoginReject::TargetRemoved => status::TARGET_REMOVED,
    }
}

impl LoginMachine {
    /// A fresh login.
    pub fn new(cfg: LoginConfig) -> Self {
        LoginMachine {
            neg: Negotiator::new(cfg.offer.clone()),
            cfg,
            stage: None,
            pdus: 0,
            acc: Accumulator::new(64 * 1024),
            initiator_name: None,
            target_name: None,
            session_type: SessionType::Normal,
            isid: [0; 6],
            tsih: 0,
            grant: None,
            auth: None,
            auth_done: false,
            chap_required: false,
            chap_policy: None,
            rng: None,
            mrdsl_declared: false,
            text_seen: false,
            initial_cmd_sn: 0,
            initial_exp_stat_sn: 0,
        }
    }

    /// The source of CHAP identifiers and challenges (required for CHAP logins: without
    /// one they fail with a target error).
    pub fn set_random_source(&mut self, rng: Box<dyn RandomSource>) {
        self.rng = Some(rng);
    }

    /// True once the first login request has been seen.
    pub fn started(&self) -> bool {
        self.stage.is_some()
    }

    fn response(&self, req: &LoginRequest) -> LoginResponse {
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

    fn fail(&self, req: &LoginRequest, st: (u8, u8), why: impl Into<String>) -> LoginStep {
        let mut r = self.response(req);
        r.nsg = 0;
        r.status_class = st.0;
        r.status_detail = st.1;
        LoginStep::Fail(r, Vec::new(), why.into(), None)
    }

    fn fail_auth(&self, req: &LoginRequest, f: AuthFailure) -> LoginStep {
        self.fail_auth_with(req, f, Vec::new())
    }

    fn fail_auth_with(&self, req: &LoginRequest, f: AuthFailure, text: Vec<u8>) -> LoginStep {
        let st = if f.reason == AuthFailureReason::RandomUnavailable {
            status::TARGET_ERROR
        } else {
            status::AUTH_FAILED
        };
        let mut r = self.response(req);
        r.status_class = st.0;
        r.status_detail = st.1;
        LoginStep::Fail(r, text, f.to_string(), Some(f))
    }

    fn allows_no_auth(&self) -> bool {
        self.cfg.offer.auth_methods.iter().any(|m| m == "None")
    }

    /// Authentication is complete: tell the Directory (`Some(step)` ends the login).
    fn authenticated(
        &mut self,
        req: &LoginRequest,
        dir: &dyn Directory,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Option<LoginStep> {
        self.auth_done = true;
        let iname = self.initiator_name.clone().unwrap_or_default();
        let info = LoginRequestInfo {
            initiator_name: &iname,
            initiator_alias: self.neg.params.initiator_alias.as_deref(),
            target_name: match self.session_type {
                SessionType::Normal => self.target_name.as_deref(),
                SessionType::Discovery => None,
            },
            session_type: self.session_type,
            isid: self.isid,
            tsih: self.tsih,
            peer,
            local,
        };
        let chap = self.auth.as_ref().and_then(|a| a.chap_identity());
        match dir.authenticated(&info, chap.as_ref()) {
            Ok(()) => None,
            Err(r) => Some(self.fail(req, reject_status(r), format!("login refused: {r:?}"))),
        }
    }

    /// Processes one login request PDU and its data segment.
    /// First login text: ask the server whether this initiator may log in to the named
    /// target (and with which limits). `Some(step)` ends the login.
    fn ask_directory(
        &mut self,
        req: &LoginRequest,
        out: &mut Vec<u8>,
        dir: &dyn Directory,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Option<LoginStep> {
        let Some(iname) = self.initiator_name.clone() else {
            return Some(self.fail(req, status::MISSING_PARAMETER, "InitiatorName missing"));
        };
        if self.session_type == SessionType::Normal && self.target_name.is_none() {
            return Some(self.fail(req, status::MISSING_PARAMETER, "TargetName missing"));
        }
        let tname = match self.session_type {
            SessionType::Normal => self.target_name.as_deref(),
            SessionType::Discovery => None,
        };
        let info = LoginRequestInfo {
            initiator_name: &iname,
            initiator_alias: self.neg.params.initiator_alias.as_deref(),
            target_name: tname,
            session_type: self.session_type,
            isid: self.isid,
            tsih: self.tsih,
            peer,
            local,
        };
        match dir.login(&info) {
            Ok(g) => {
                let policy = dir.auth_policy(&info);
                if self.session_type == SessionType::Normal {
                    kv::push(
                        out,
                        "TargetPortalGroupTag",
                        &g.target_portal_group_tag.to_string(),
                    );
                    if let Some(a) = &g.target_alias {
                        kv::push(out, "TargetAlias", a);
                    }
                }
                self.neg.params.target_portal_group_tag = g.target_portal_group_tag;
                self.neg.params.target_alias = g.target_alias.clone();
                if let Some(c) = &g.config {
                    // the target's own limits: negotiate with them from here on
                    let offer = c.offer();
                    let params = self.neg.params.clone();
                    let discovery = self.neg.discovery;
                    self.neg = Negotiator::new(offer.clone());
                    self.neg.params = params;
                    self.neg.discovery = discovery;
                    self.cfg.offer = offer;
                    self.cfg.max_login_pdus = c.max_login_pdus.max(1);
                }
                if let AuthPolicy::Chap(p) = policy {
                    let only_chap = vec!["CHAP".to_string()];
                    self.neg.offer.auth_methods = only_chap.clone();
                    self.cfg.offer.auth_methods = only_chap;
                    self.chap_required = true;
                    self.chap_policy = Some(p);
                }
                self.grant = Some(g);
            }
            Err(r) => {
                return Some(self.fail(req, reject_status(r), format!("login refused: {r:?}")));
            }
        }
        None
    }

    /// The per-target configuration granted at login, if the server gave one.
    pub fn granted_config(&self) -> Option<&crate::conn::ConnConfig> {
        self.grant.as_ref().and_then(|g| g.config.as_ref())
    }

    pub fn handle(
        &mut self,
        req: &LoginRequest,
        data: &[u8],
        dir: &dyn Directory,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> LoginStep {
        self.pdus += 1;
        if self.pdus > self.cfg.max_login_pdus {
            return self.fail(req, status::INITIATOR_ERROR, "too many login PDUs");
        }
        let first = self.stage.is_none();
        if first {
            if req.version_min > 0 {
                return self.fail(
                    req,
                    status::UNSUPPORTED_VERSION,
                    "unsupported iSCSI version",
                );
            }
            self.isid = req.isid;
            self.tsih = req.tsih;
            self.initial_cmd_sn = req.cmd_sn;
            self.initial_exp_stat_sn = req.exp_stat_sn;
        }
        if req.csg > 1 {
            return self.fail(req, status::INITIATOR_ERROR, "invalid CSG in login request");
        }
        if let Some(st) = self.stage
            && st != req.csg
        {
            return self.fail(
                req,
                status::INITIATOR_ERROR,
                "login CSG does not match stage",
            );
        }
        if req.transit && (req.nsg <= req.csg || req.nsg == 2) {
            return self.fail(req, status::INITIATOR_ERROR, "invalid NSG in login request");
        }
        if req.transit && req.cont {
            return self.fail(
                req,
                status::INITIATOR_ERROR,
                "login request with both T and C",
            );
        }
        self.stage = Some(req.csg);
        let text = match self.acc.push(data, req.cont) {
            Ok(Some(t)) => t,
            Ok(None) => {
                // Acknowledge a partial text with an empty response (RFC 7143 §6.1).
                return LoginStep::Continue(self.response(req), Vec::new());
            }
            Err(e) => return self.fail(req, status::INITIATOR_ERROR, e.to_string()),
        };
        let pairs = match kv::parse(&text) {
            Ok(p) => p,
            Err(e) => return self.fail(req, status::INITIATOR_ERROR, e.to_string()),
        };
        let phase = if req.csg == 0 {
            Phase::Security
        } else {
            Phase::Operational
        };
        let first = !self.text_seen;
        self.text_seen = true;
        let mut out = Vec::new();
        let mut auth_keys = Vec::new();
        let mut auth_failed = false;
        if first {
            // The identity keys come first: the target they name decides which limits the
            // rest of the negotiation uses.
            for (k, v) in &pairs {
                match k.as_str() {
                    "InitiatorName" => {
                        if self.initiator_name.is_some() {
                            return self.fail(
                                req,
                                status::INITIATOR_ERROR,
                                "InitiatorName repeated",
                            );
                        }
                        self.initiator_name = Some(v.clone());
                    }
                    "TargetName" => {
                        if self.target_name.is_some() {
                            return self.fail(req, status::INITIATOR_ERROR, "TargetName repeated");
                        }
                        self.target_name = Some(v.clone());
                    }
                    "SessionType" => {
                        self.session_type = match v.as_str() {
                            "Normal" => SessionType::Normal,
                            "Discovery" => SessionType::Discovery,
                            _ => {
                                return self.fail(
                                    req,
                                    status::SESSION_TYPE_UNSUPPORTED,
                                    "unknown SessionType",
                                );
                            }
                        };
                        self.neg.discovery = self.session_type == SessionType::Discovery;
                    }
                    "InitiatorAlias" => self.neg.params.initiator_alias = Some(v.clone()),
                    _ => {}
                }
            }
            if let Some(step) = self.ask_directory(req, &mut out, dir, peer, local) {
                return step;
            }
        }
        for (k, v) in &pairs {
            match k.as_str() {
                "InitiatorName" | "TargetName" if !first => {
                    return self.fail(req, status::INITIATOR_ERROR, format!("{k} repeated"));
                }
                "SessionType" if !first => {
                    return self.fail(req, status::INITIATOR_ERROR, "SessionType too late");
                }
                "CHAP_A" | "CHAP_I" | "CHAP_C" | "CHAP_N" | "CHAP_R" if self.chap_required => {
                    auth_keys.push((k.clone(), v.clone()));
                    continue;
                }
                // no CHAP for this login: ignored once AuthMethod=None was agreed
                _ if k.starts_with("CHAP_") && self.auth.is_some() => continue,
                _ => {}
            }
            match self.neg.respond(k, v, phase) {
                Ok(Some(a)) => {
                    if k == "AuthMethod" && phase == Phase::Security {
                        if a == crate::text::negotiate::REJECT {
                            auth_failed = true;
                        } else if self.auth.is_some() {
                            // answered once already (a repeat is a negotiation error)
                        } else if a == "None" {
                            self.auth = Some(Box::new(NoAuth));
                        } else if a == "CHAP" {
                            let policy = self
                                .chap_policy
                                .take()
                                .unwrap_or_else(|| auth::ChapPolicy::new(Vec::new(), None));
                            self.auth = Some(Box::new(chap::ChapAuthenticator::new(
                                policy,
                                self.rng.take(),
                            )));
                        }
                    }
                    kv::push(&mut out, k, &a);
                }
                Ok(None) => {}
                Err(e) => return self.fail(req, status::INITIATOR_ERROR, e.to_string()),
            }
        }
        if auth_failed {
            return self.fail_auth(req, AuthFailure::new(AuthFailureReason::MethodRejected));
        }
        let chap_selected = self.auth.as_ref().is_some_and(|a| a.method() == "CHAP");
        if let Some((k, _)) = auth_keys.first()
            && (req.csg != 0 || !chap_selected)
        {
            // CHAP keys before CHAP was selected, or outside the security stage
            let key = ["CHAP_A", "CHAP_I", "CHAP_C", "CHAP_N", "CHAP_R"]
                .into_iter()
                .find(|c| c == k);
            let f = AuthFailure {
                key,
                ..AuthFailure::new(AuthFailureReason::UnexpectedKey)
            };
            return self.fail_auth(req, f);
        }
        // Security stage: run the authenticator (None completes at once).
        let mut auth_out = Vec::new();
        if req.csg == 0 {
            match self.auth.as_mut() {
                Some(a) => match a.step(&auth_keys, &mut auth_out) {
                    AuthStatus::Done => {
                        if !self.auth_done
                            && let Some(step) = self.authenticated(req, dir, peer, local)
                        {
                            return step;
                        }
                    }
                    AuthStatus::Continue => {}
                    AuthStatus::Failed(f) => return self.fail_auth_with(req, f, auth_out),
                },
                None => {
                    // No AuthMethod offered: acceptable only when we allow None.
                    if self.allows_no_auth() {
                        if !self.auth_done
                            && let Some(step) = self.authenticated(req, dir, peer, local)
                        {
                            return step;
                        }
                    } else if req.transit {
                        return self
                            .fail_auth(req, AuthFailure::new(AuthFailureReason::NotAuthenticated));
                    }
                }
            }
        } else if !self.auth_done {
            // Skipped the security stage: allowed when no authentication is required.
            if !self.allows_no_auth() {
                return self.fail_auth(req, AuthFailure::new(AuthFailureReason::NotAuthenticated));
            }
            if let Some(step) = self.authenticated(req, dir, peer, local) {
                return step;
            }
        }
        out.append(&mut auth_out);
        if req.csg == 1 && !self.mrdsl_declared {
            self.mrdsl_declared = true;
            let m = self.cfg.offer.max_recv_data_segment_length;
            self.neg.params.target_max_recv_data_segment_length = m;
            kv::push(&mut out, "MaxRecvDataSegmentLength", &m.to_string());
        }
        let mut resp = self.response(req);
        if out.len() > 8192 {
            return self.fail(req, status::TARGET_ERROR, "login response too long");
        }
        if req.transit && self.auth_done {
            resp.transit = true;
            resp.nsg = req.nsg;
            if req.nsg == 3 {
                let params = self.neg.finish();
                let g = self.grant.clone().unwrap_or(LoginGrant {
                    tsih: 0,
                    target_portal_group_tag: 1,
                    target_alias: None,
                    config: None,
                });
                resp.tsih = g.tsih;
                let info = SessionInfo {
                    session_type: self.session_type,
                    initiator_name: self.initiator_name.clone().unwrap_or_default(),
                    target_name: match self.session_type {
                        SessionType::Normal => self.target_name.clone(),
                        SessionType::Discovery => None,
                    },
                    isid: self.isid,
                    tsih: g.tsih,
                    params,
                    chap: self.auth.as_ref().and_then(|a| a.chap_identity()),
                };
                return LoginStep::Complete(resp, out, info);
            }
            self.stage = Some(req.nsg);
        }
        LoginStep::Continue(resp, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) struct Dir;
    impl Directory for Dir {
        fn login(&self, req: &LoginRequestInfo<'_>) -> Result<LoginGrant, LoginReject> {
            match req.target_name {
                Some("iqn.t:ok") | None => Ok(LoginGrant {
                    config: None,
                    tsih: 7,
                    target_portal_group_tag: 1,
                    target_alias: None,
                }),
                Some("iqn.t:acl") => Err(LoginReject::NotAuthorized),
                _ => Err(LoginReject::TargetNotFound),
            }
        }
        fn send_targets(
            &self,
            _: &str,
            _: SocketAddr,
            _: SocketAddr,
            _: Option<&str>,
        ) -> Vec<TargetRecord> {
            vec![]
        }
    }

    fn addr() -> SocketAddr {
        "127.0.0.1:3260".parse().unwrap()
    }
    fn req(csg: u8, nsg: u8, t: bool) -> LoginRequest {
        LoginRequest {
            transit: t,
            cont: false,
            csg,
            nsg,
            version_max: 0,
            version_min: 0,
            isid: [0x80, 0, 0, 0, 0, 1],
            tsih: 0,
            itt: 1,
            cid: 0,
            cmd_sn: 5,
            exp_stat_sn: 9,
        }
    }
    fn machine() -> LoginMachine {
        LoginMachine::new(LoginConfig {
            offer: Offer::default(),
            max_login_pdus: 8,
        })
    }
    fn text(s: &str) -> Vec<u8> {
        s.replace(';', "\0").into_bytes()
    }

    #[test]
    fn two_stage_login() {
        let mut m = machine();
        let d = text("InitiatorName=iqn.i;SessionType=Normal;TargetName=iqn.t:ok;AuthMethod=None;");
        let LoginStep::Continue(r, out) = m.handle(&req(0, 1, true), &d, &Dir, addr(), addr())
        else {
            panic!()
        };
        assert!(r.transit && r.nsg == 1);
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("AuthMethod=None\0"));
        assert!(s.contains("TargetPortalGroupTag=1\0"));
        let d = text("HeaderDigest=None;MaxRecvDataSegmentLength=65536;ImmediateData=Yes;");
        let LoginStep::Complete(r, out, info) =
            m.handle(&req(1, 3, true), &d, &Dir, addr(), addr())
        else {
            panic!()
        };
        assert_eq!(r.tsih, 7);
        assert!(
            String::from_utf8(out)
                .unwrap()
                .contains("MaxRecvDataSegmentLength=262144")
        );
        assert_eq!(info.params.initiator_max_recv_data_segment_length, 65536);
        assert_eq!(info.params.target_max_recv_data_segment_length, 262144);
    }

    #[test]
    fn failures() {
        let cases = [
            (
                "SessionType=Normal;TargetName=iqn.t:ok;",
                status::MISSING_PARAMETER,
            ),
            (
                "InitiatorName=iqn.i;SessionType=Normal;",
                status::MISSING_PARAMETER,
            ),
            (
                "InitiatorName=iqn.i;TargetName=iqn.t:nope;",
                status::NOT_FOUND,
            ),
            (
                "InitiatorName=iqn.i;TargetName=iqn.t:acl;",
                status::NOT_AUTHORIZED,
            ),
            (
                "InitiatorName=iqn.i;TargetName=iqn.t:ok;AuthMethod=CHAP;",
                status::AUTH_FAILED,
            ),
            (
                "InitiatorName=iqn.i;TargetName=iqn.t:ok;Foo",
                status::INITIATOR_ERROR,
            ),
            (
                "InitiatorName=iqn.i;TargetName=iqn.t:ok;MaxBurstLength=512;MaxBurstLength=512;",
                status::INITIATOR_ERROR,
            ),
        ];
        for (t, st) in cases {
            let mut m = machine();
            match m.handle(&req(0, 1, true), &text(t), &Dir, addr(), addr()) {
                LoginStep::Fail(r, ..) => assert_eq!((r.status_class, r.status_detail), st, "{t}"),
                other => panic!("{t}: {other:?}"),
            }
        }
        let mut m = machine();
        let mut r = req(0, 1, true);
        r.version_min = 1;
        assert!(matches!(
            m.handle(&r, &text("InitiatorName=i;"), &Dir, addr(), addr()),
            LoginStep::Fail(x, ..) if (x.status_class, x.status_detail) == status::UNSUPPORTED_VERSION
        ));
    }

    #[test]
    fn discovery_and_continuation_and_bound() {
        let mut m = machine();
        let mut r = req(1, 3, false);
        r.cont = true;
        let LoginStep::Continue(resp, out) =
            m.handle(&r, b"InitiatorName=iq", &Dir, addr(), addr())
        else {
            panic!()
        };
        assert!(!resp.transit && out.is_empty());
        let LoginStep::Complete(_, _, info) = m.handle(
            &req(1, 3, true),
            &text("n.i;SessionType=Discovery;"),
            &Dir,
            addr(),
            addr(),
        ) else {
            panic!()
        };
        assert_eq!(info.session_type, SessionType::Discovery);
        assert_eq!(info.initiator_name, "iqn.i");

        let mut m = machine();
        let d = text("InitiatorName=iqn.i;TargetName=iqn.t:ok;");
        assert!(matches!(
            m.handle(&req(1, 0, false), &d, &Dir, addr(), addr()),
            LoginStep::Continue(..)
        ));
        let mut last = None;
        for _ in 0..10 {
            last = Some(m.handle(&req(1, 0, false), &[], &Dir, addr(), addr()));
        }
        assert!(matches!(last, Some(LoginStep::Fail(..))));
    }

    #[test]
    fn stage_errors() {
        let mut m = machine();
        let d = text("InitiatorName=iqn.i;TargetName=iqn.t:ok;");
        assert!(matches!(
            m.handle(&req(1, 0, true), &d, &Dir, addr(), addr()),
            LoginStep::Fail(..)
        ));
        let mut m = machine();
        assert!(matches!(
            m.handle(&req(1, 3, false), &d, &Dir, addr(), addr()),
            LoginStep::Continue(..)
        ));
        assert!(matches!(
            m.handle(&req(0, 1, true), &[], &Dir, addr(), addr()),
            LoginStep::Fail(..)
        ));
    }
}
