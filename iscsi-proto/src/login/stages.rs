//! The login stages as types: [`State`] is waiting for the first PDU, reading the first
//! login text ([`Identifying`]), the security stage ([`Security`]) or the operational
//! stage ([`Operational`]), each with what it knows; a complete login text moves it on.
//! The identity keys and the Directory's verdict come first, then the keys of the text
//! are negotiated, then the stage's own work (authentication, or the security stage
//! being skipped), then the response, with a stage transition when the T bit allows one.

use super::machine::{Context, Refusal, response};
use super::{
    AuthFailure, AuthFailureReason, AuthPolicy, AuthStatus, Authenticator, ChapPolicy, Directory,
    LoginGrant, LoginReject, LoginRequestInfo, LoginStep, NoAuth, SessionInfo, SessionType, chap,
    status,
};
use crate::pdu::LoginRequest;
use crate::text::kv;
use crate::text::negotiate::{Negotiator, Phase, REJECT};

/// Where a login is.
#[derive(Debug)]
pub(super) enum State {
    /// No login PDU yet.
    Start,
    /// In a stage whose first login text is still arriving (C bit).
    Identifying(Identifying),
    /// Security negotiation (CSG 0).
    Security(Box<Security>),
    /// Operational negotiation (CSG 1): authenticated.
    Operational(Box<Operational>),
    /// Complete or failed: the connection is done with this machine.
    Ended,
}

/// The first login text has not been read yet.
#[derive(Debug)]
pub(super) struct Identifying {
    csg: u8,
}

/// Who logs in to what: named by the first login text and accepted by the Directory.
#[derive(Debug)]
struct Party {
    initiator_name: String,
    /// `None` for discovery sessions.
    target_name: Option<String>,
    session_type: SessionType,
}

/// The authentication of this login: what the Directory asked for and the method agreed.
struct Auth {
    /// The method `AuthMethod` selected (`None`: not negotiated).
    method: Option<Box<dyn Authenticator>>,
    /// The Directory asked for CHAP (only CHAP is offered then).
    chap_required: bool,
    /// The CHAP accounts, until CHAP is selected.
    chap_policy: Option<ChapPolicy>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("method", &self.method.as_ref().map(|m| m.method()))
            .field("chap_required", &self.chap_required)
            .finish_non_exhaustive()
    }
}

/// The security stage.
#[derive(Debug)]
pub(super) struct Security {
    party: Party,
    auth: Auth,
    /// Authentication is done and the Directory was told.
    authenticated: bool,
}

/// The operational stage (authentication is done).
#[derive(Debug)]
pub(super) struct Operational {
    party: Party,
    auth: Auth,
    /// Our MaxRecvDataSegmentLength was declared.
    mrdsl_declared: bool,
}

/// One complete login text and the request that ended it.
struct Turn<'a> {
    req: &'a LoginRequest,
    pairs: &'a [(String, String)],
    dir: &'a dyn Directory,
    /// The text that named the parties (the first of the login).
    first: bool,
}

/// The keys of one login text, negotiated.
struct Negotiated {
    /// Answers so far.
    out: Vec<u8>,
    /// Method-specific keys (CHAP_*) for the authenticator.
    auth_keys: Vec<(String, String)>,
    /// `AuthMethod` had no acceptable value.
    method_rejected: bool,
}

impl State {
    pub(super) fn identifying(csg: u8) -> State {
        State::Identifying(Identifying { csg })
    }

    /// The stage (CSG) login PDUs must be in; `None` before the first.
    pub(super) fn csg(&self) -> Option<u8> {
        match self {
            State::Start => None,
            State::Identifying(i) => Some(i.csg),
            State::Security(_) => Some(0),
            State::Operational(_) | State::Ended => Some(1),
        }
    }

    /// Handles one complete login text: the next state and what to send (a refusal
    /// ends the login).
    pub(super) fn text(
        self,
        cx: &mut Context,
        req: &LoginRequest,
        pairs: &[(String, String)],
        dir: &dyn Directory,
    ) -> (State, LoginStep) {
        let mut t = Turn {
            req,
            pairs,
            dir,
            first: false,
        };
        let next = match self {
            State::Identifying(_) => {
                t.first = true;
                Self::first_text(cx, &t)
            }
            State::Security(s) => s.text(cx, &t, Vec::new()),
            State::Operational(o) => o.text(cx, &t, Vec::new()),
            State::Start | State::Ended => {
                Err(Refusal::new(status::INITIATOR_ERROR, "login already ended"))
            }
        };
        next.unwrap_or_else(|r| (State::Ended, r.into_step(req)))
    }

    /// The text that names the parties enters the stage the initiator is in: security,
    /// or operational when it skips authentication.
    fn first_text(cx: &mut Context, t: &Turn<'_>) -> Result<(State, LoginStep), Refusal> {
        let mut out = Vec::new();
        let (party, auth) = identify(cx, t.pairs, t.dir, &mut out)?;
        if t.req.csg == 0 {
            let s = Security {
                party,
                auth,
                authenticated: false,
            };
            Box::new(s).text(cx, t, out)
        } else {
            let o = Operational {
                party,
                auth,
                mrdsl_declared: false,
            };
            Box::new(o).text(cx, t, out)
        }
    }
}

/// The first login text: the identity keys come first, since the target they name decides
/// which limits the rest of the negotiation uses; then the Directory's verdict.
fn identify(
    cx: &mut Context,
    pairs: &[(String, String)],
    dir: &dyn Directory,
    out: &mut Vec<u8>,
) -> Result<(Party, Auth), Refusal> {
    let mut initiator_name = None;
    let mut target_name = None;
    let mut session_type = SessionType::Normal;
    for (k, v) in pairs {
        match k.as_str() {
            "InitiatorName" => {
                if initiator_name.is_some() {
                    return Err(Refusal::new(
                        status::INITIATOR_ERROR,
                        "InitiatorName repeated",
                    ));
                }
                initiator_name = Some(v.clone());
            }
            "TargetName" => {
                if target_name.is_some() {
                    return Err(Refusal::new(status::INITIATOR_ERROR, "TargetName repeated"));
                }
                target_name = Some(v.clone());
            }
            "SessionType" => {
                session_type = match v.as_str() {
                    "Normal" => SessionType::Normal,
                    "Discovery" => SessionType::Discovery,
                    _ => {
                        return Err(Refusal::new(
                            status::SESSION_TYPE_UNSUPPORTED,
                            "unknown SessionType",
                        ));
                    }
                };
                cx.neg.discovery = session_type == SessionType::Discovery;
            }
            "InitiatorAlias" => cx.neg.params.initiator_alias = Some(v.clone()),
            _ => {}
        }
    }
    let Some(initiator_name) = initiator_name else {
        return Err(Refusal::new(
            status::MISSING_PARAMETER,
            "InitiatorName missing",
        ));
    };
    let target_name = match session_type {
        SessionType::Normal if target_name.is_none() => {
            return Err(Refusal::new(
                status::MISSING_PARAMETER,
                "TargetName missing",
            ));
        }
        SessionType::Normal => target_name,
        SessionType::Discovery => None,
    };
    let party = Party {
        initiator_name,
        target_name,
        session_type,
    };
    let info = request_info(cx, &party);
    let verdict = dir.login(&info);
    if !matches!(
        verdict,
        Err(LoginReject::TargetNotFound | LoginReject::TargetRemoved)
    ) {
        cx.target_name.clone_from(&party.target_name);
    }
    let (grant, policy) = match verdict {
        Ok(g) => {
            let policy = dir.auth_policy(&request_info(cx, &party));
            (g, policy)
        }
        Err(r) => return Err(refused(r)),
    };
    accept_grant(cx, &party, &grant, out);
    let mut auth = Auth {
        method: None,
        chap_required: false,
        chap_policy: None,
    };
    if let AuthPolicy::Chap(p) = policy {
        let only_chap = vec!["CHAP".to_string()];
        cx.neg.offer.auth_methods = only_chap.clone();
        cx.cfg.offer.auth_methods = only_chap;
        auth.chap_required = true;
        auth.chap_policy = Some(p);
    }
    cx.grant = Some(grant);
    Ok((party, auth))
}

/// The Directory accepted: announce the portal group (and alias) of a normal session and
/// negotiate with the target's own limits from here on.
fn accept_grant(cx: &mut Context, party: &Party, g: &LoginGrant, out: &mut Vec<u8>) {
    if party.session_type == SessionType::Normal {
        kv::push(
            out,
            "TargetPortalGroupTag",
            &g.target_portal_group_tag.to_string(),
        );
        if let Some(a) = &g.target_alias {
            kv::push(out, "TargetAlias", a);
        }
    }
    cx.neg.params.target_portal_group_tag = g.target_portal_group_tag;
    cx.neg.params.target_alias = g.target_alias.clone();
    if let Some(c) = &g.config {
        let offer = c.offer();
        let params = cx.neg.params.clone();
        let discovery = cx.neg.discovery;
        let mut offer = offer;
        if cx.transport.is_some() {
            // an RDMA transport has no digests
            offer.header_digest = vec![crate::Digest::None];
            offer.data_digest = vec![crate::Digest::None];
        }
        cx.neg = Negotiator::new(offer.clone());
        cx.neg.params = params;
        cx.neg.discovery = discovery;
        cx.cfg.offer = offer;
        cx.cfg.max_login_pdus = c.max_login_pdus.max(1);
    }
}

fn request_info<'a>(cx: &'a Context, party: &'a Party) -> LoginRequestInfo<'a> {
    LoginRequestInfo {
        initiator_name: &party.initiator_name,
        initiator_alias: cx.neg.params.initiator_alias.as_deref(),
        target_name: party.target_name.as_deref(),
        session_type: party.session_type,
        isid: cx.isid,
        tsih: cx.tsih,
        peer: cx.peer,
        local: cx.local,
    }
}

fn refused(r: LoginReject) -> Refusal {
    let st = match r {
        LoginReject::TargetNotFound => status::NOT_FOUND,
        LoginReject::NotAuthorized => status::NOT_AUTHORIZED,
        LoginReject::TooManySessions => status::OUT_OF_RESOURCES,
        LoginReject::ServiceUnavailable => status::SERVICE_UNAVAILABLE,
        LoginReject::TargetRemoved => status::TARGET_REMOVED,
    };
    Refusal::new(st, format!("login refused: {r:?}"))
}

/// Authentication is complete: tell the Directory (`Err` ends the login).
fn authenticated(
    cx: &Context,
    party: &Party,
    auth: &Auth,
    dir: &dyn Directory,
) -> Result<(), Refusal> {
    let chap = auth.method.as_ref().and_then(|a| a.chap_identity());
    dir.authenticated(&request_info(cx, party), chap.as_ref())
        .map_err(refused)
}

/// Negotiates the keys of one login text, selecting the authentication method when `AuthMethod` is answered in the
/// security stage and setting method-specific keys aside.
fn negotiate(
    cx: &mut Context,
    t: &Turn<'_>,
    auth: &mut Auth,
    out: Vec<u8>,
) -> Result<Negotiated, Refusal> {
    let (req, first) = (t.req, t.first);
    let phase = if req.csg == 0 {
        Phase::Security
    } else {
        Phase::Operational
    };
    let mut n = Negotiated {
        out,
        auth_keys: Vec::new(),
        method_rejected: false,
    };
    for (k, v) in t.pairs {
        match k.as_str() {
            "InitiatorName" | "TargetName" if !first => {
                return Err(Refusal::new(
                    status::INITIATOR_ERROR,
                    format!("{k} repeated"),
                ));
            }
            "SessionType" if !first => {
                return Err(Refusal::new(
                    status::INITIATOR_ERROR,
                    "SessionType too late",
                ));
            }
            "CHAP_A" | "CHAP_I" | "CHAP_C" | "CHAP_N" | "CHAP_R" if auth.chap_required => {
                n.auth_keys.push((k.clone(), v.clone()));
                continue;
            }
            // no CHAP for this login: ignored once AuthMethod=None was agreed
            _ if k.starts_with("CHAP_") && auth.method.is_some() => continue,
            _ => {}
        }
        if let Some(keys) = cx.transport.as_mut() {
            match keys.respond(k, v) {
                Ok(Some(a)) => {
                    kv::push(&mut n.out, k, &a);
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Err(Refusal::new(status::INITIATOR_ERROR, e)),
            }
        }
        match cx.neg.respond(k, v, phase) {
            Ok(Some(a)) => {
                if k == "AuthMethod" && phase == Phase::Security {
                    if a == REJECT {
                        n.method_rejected = true;
                    } else if auth.method.is_none() {
                        // (a repeat is a negotiation error, answered by `respond`)
                        select_method(cx, auth, &a);
                    }
                }
                kv::push(&mut n.out, k, &a);
            }
            Ok(None) => {}
            Err(e) => return Err(Refusal::new(status::INITIATOR_ERROR, e.to_string())),
        }
    }
    if n.method_rejected {
        let f = AuthFailure::new(AuthFailureReason::MethodRejected);
        return Err(Refusal::auth(f, Vec::new()));
    }
    let chap_selected = auth.method.as_ref().is_some_and(|a| a.method() == "CHAP");
    if let Some((k, _)) = n.auth_keys.first()
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
        return Err(Refusal::auth(f, Vec::new()));
    }
    Ok(n)
}

/// The authenticator for the agreed `AuthMethod` value.
fn select_method(cx: &mut Context, auth: &mut Auth, method: &str) {
    if method == "None" {
        auth.method = Some(Box::new(NoAuth));
    } else if method == "CHAP" {
        let policy = auth
            .chap_policy
            .take()
            .unwrap_or_else(|| ChapPolicy::new(Vec::new(), None));
        auth.method = Some(Box::new(chap::ChapAuthenticator::new(
            policy,
            cx.rng.take(),
        )));
    }
}

impl Security {
    fn text(
        mut self: Box<Self>,
        cx: &mut Context,
        t: &Turn<'_>,
        out: Vec<u8>,
    ) -> Result<(State, LoginStep), Refusal> {
        let req = t.req;
        let mut n = negotiate(cx, t, &mut self.auth, out)?;
        let mut auth_out = Vec::new();
        self.authenticate(cx, t, &n.auth_keys, &mut auth_out)?;
        n.out.append(&mut auth_out);
        let resp = respond(req, &n.out)?;
        if !(req.transit && self.authenticated) {
            return Ok((State::Security(self), LoginStep::Continue(resp, n.out)));
        }
        let Security { party, auth, .. } = *self;
        let next = Box::new(Operational {
            party,
            auth,
            mrdsl_declared: false,
        });
        Ok(next.transit(cx, req, resp, n.out))
    }

    /// Runs the agreed authenticator on this text's keys (`AuthMethod=None` completes at
    /// once); tells the Directory once it is done.
    fn authenticate(
        &mut self,
        cx: &Context,
        t: &Turn<'_>,
        keys: &[(String, String)],
        out: &mut Vec<u8>,
    ) -> Result<(), Refusal> {
        let done = match self.auth.method.as_mut() {
            Some(a) => match a.step(keys, out) {
                AuthStatus::Done => true,
                AuthStatus::Continue => false,
                AuthStatus::Failed(f) => return Err(Refusal::auth(f, std::mem::take(out))),
            },
            // No AuthMethod offered: acceptable only when we allow None.
            None if cx.allows_no_auth() => true,
            None if t.req.transit => {
                let f = AuthFailure::new(AuthFailureReason::NotAuthenticated);
                return Err(Refusal::auth(f, Vec::new()));
            }
            None => false,
        };
        if done && !self.authenticated {
            self.authenticated = true;
            authenticated(cx, &self.party, &self.auth, t.dir)?;
        }
        Ok(())
    }
}

impl Operational {
    /// A first text here means the login skips the security stage.
    fn text(
        mut self: Box<Self>,
        cx: &mut Context,
        t: &Turn<'_>,
        out: Vec<u8>,
    ) -> Result<(State, LoginStep), Refusal> {
        let req = t.req;
        let mut n = negotiate(cx, t, &mut self.auth, out)?;
        if t.first {
            // Skipped the security stage: allowed when no authentication is required.
            if !cx.allows_no_auth() {
                let f = AuthFailure::new(AuthFailureReason::NotAuthenticated);
                return Err(Refusal::auth(f, Vec::new()));
            }
            authenticated(cx, &self.party, &self.auth, t.dir)?;
        }
        if !self.mrdsl_declared {
            self.mrdsl_declared = true;
            let m = cx.cfg.offer.max_recv_data_segment_length;
            cx.neg.params.target_max_recv_data_segment_length = m;
            kv::push(&mut n.out, "MaxRecvDataSegmentLength", &m.to_string());
        }
        let resp = respond(req, &n.out)?;
        Ok(if req.transit {
            self.transit(cx, req, resp, n.out)
        } else {
            (State::Operational(self), LoginStep::Continue(resp, n.out))
        })
    }

    /// The initiator asked to leave its stage and may: to the operational stage, or to
    /// full feature phase (the login is complete).
    fn transit(
        self: Box<Self>,
        cx: &mut Context,
        req: &LoginRequest,
        mut resp: crate::pdu::LoginResponse,
        mut out: Vec<u8>,
    ) -> (State, LoginStep) {
        resp.transit = true;
        resp.nsg = req.nsg;
        if req.nsg != 3 {
            return (State::Operational(self), LoginStep::Continue(resp, out));
        }
        if let Some(keys) = cx.transport.as_mut() {
            for (k, v) in keys.declarations() {
                kv::push(&mut out, &k, &v);
            }
            let discovery = self.party.session_type == SessionType::Discovery;
            match keys.finish(discovery) {
                Ok(l) => cx.transport_limits = Some(l),
                Err(why) => {
                    let step = super::machine::fail(req, status::INITIATOR_ERROR, why);
                    return (State::Ended, step);
                }
            }
        }
        let params = cx.neg.finish();
        let tsih = cx.grant.as_ref().map_or(0, |g| g.tsih);
        resp.tsih = tsih;
        let Operational { party, auth, .. } = *self;
        let info = SessionInfo {
            session_type: party.session_type,
            initiator_name: party.initiator_name,
            target_name: party.target_name,
            isid: cx.isid,
            tsih,
            params,
            chap: auth.method.as_ref().and_then(|a| a.chap_identity()),
        };
        (State::Ended, LoginStep::Complete(resp, out, info))
    }
}

/// The response to `req` for answers `out`, unless they do not fit one login response.
fn respond(req: &LoginRequest, out: &[u8]) -> Result<crate::pdu::LoginResponse, Refusal> {
    if out.len() > 8192 {
        return Err(Refusal::new(
            status::TARGET_ERROR,
            "login response too long",
        ));
    }
    Ok(response(req))
}
