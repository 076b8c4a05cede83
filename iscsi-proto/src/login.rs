//! The login phase (RFC 7143 §6, §11.12–11.13): security and operational stages,
//! CSG/NSG transitions with the T bit, C-bit continuation, mandatory keys, discovery vs
//! normal sessions, target lookup/ACL/TSIH through the [`Directory`], status classes and
//! details, and a bound on the number of login PDUs. [`LoginMachine`] (`machine`) runs
//! the checks every PDU needs and reassembles the text; `stages` holds one type per
//! stage (identifying, security, operational) with what that stage knows.
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
mod machine;
mod stages;

pub use auth::{
    AuthFailure, AuthFailureReason, AuthPolicy, ChapCredential, ChapIdentity, ChapPolicy,
    ChapSecret, RandomSource, RandomUnavailable,
};
pub use chap::ChapAlgorithm;
pub use machine::LoginMachine;

use crate::pdu::LoginResponse;
use crate::text::negotiate::{Offer, SessionParams};
// the login tests (here and in chap_tests) build requests and read texts
#[cfg(test)]
use crate::{pdu::LoginRequest, text::kv};
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

/// What kind of failure a Login Response with a non-zero status reports, for counting
/// failed logins ([`crate::Event::LoginFailed`]). Derived from the status class and detail
/// (RFC 7143 §11.13.5) by [`LoginFailure::from_status`]:
///
/// | status | failure |
/// |---|---|
/// | 0201 authentication failure | `AuthFailure` |
/// | 0202 authorization failure (e.g. the ACL) | `NotAuthorized` |
/// | 0203 not found, 0204 target removed | `NotFound` |
/// | 0205 unsupported version, 0206 too many connections, 020a session does not exist, 0301 service unavailable, 0302 out of resources (e.g. too many sessions, an existing session cannot be joined), other 03xx details | `Refused` |
/// | 0200, 0207 missing parameter, 0208 cannot include in session, 0209 session type not supported, 020b invalid during login, other 02xx details, 0300 target error | `Error` |
///
/// `Refused` means a well-formed request the target declines for capacity or capability
/// reasons (the initiator may retry later or elsewhere); `Error` is a malformed or
/// out-of-order login, or the target failing internally. Class 0 (success) and class 1
/// (redirection) are not failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LoginFailure {
    /// Authentication (CHAP) failed: status 0201.
    AuthFailure,
    /// The initiator may not access the target (e.g. the target's ACL): status 0202.
    NotAuthorized,
    /// No such target, or it was removed: status 0203 / 0204.
    NotFound,
    /// The target declines for capacity or capability reasons (see the table above).
    Refused,
    /// Any other initiator or target error.
    Error,
}

impl LoginFailure {
    /// Every kind, in declaration order.
    pub const ALL: [LoginFailure; 5] = [
        LoginFailure::AuthFailure,
        LoginFailure::NotAuthorized,
        LoginFailure::NotFound,
        LoginFailure::Refused,
        LoginFailure::Error,
    ];

    /// The failure a Login Response status reports; `None` for success (class 0) and
    /// redirection (class 1).
    pub const fn from_status(class: u8, detail: u8) -> Option<LoginFailure> {
        Some(match (class, detail) {
            (0 | 1, _) => return None,
            (2, 0x01) => LoginFailure::AuthFailure,
            (2, 0x02) => LoginFailure::NotAuthorized,
            (2, 0x03 | 0x04) => LoginFailure::NotFound,
            (2, 0x05 | 0x06 | 0x0a) => LoginFailure::Refused,
            (3, 0x00) => LoginFailure::Error,
            (3, _) => LoginFailure::Refused,
            _ => LoginFailure::Error,
        })
    }

    /// Stable snake_case label (for metrics: `numatgt_logins_total{result}`).
    pub const fn label(self) -> &'static str {
        match self {
            LoginFailure::AuthFailure => "auth_failure",
            LoginFailure::NotAuthorized => "not_authorized",
            LoginFailure::NotFound => "not_found",
            LoginFailure::Refused => "refused",
            LoginFailure::Error => "error",
        }
    }
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
                // the target's own limits
                Some("iqn.t:cfg") => Ok(LoginGrant {
                    config: Some(crate::conn::ConnConfig {
                        max_queued_commands: 7,
                        ..Default::default()
                    }),
                    tsih: 3,
                    target_portal_group_tag: 2,
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

    /// Found by the `multi_conn` fuzz target: a login begun for a new session (TSIH 0)
    /// whose next PDU named session 2 completed as a new session, answering the request
    /// to join session 2 with another TSIH. A changed ISID or TSIH is refused.
    #[test]
    fn isid_and_tsih_stay_the_same_during_login() {
        let sec =
            text("InitiatorName=iqn.i;SessionType=Normal;TargetName=iqn.t:ok;AuthMethod=None;");
        let op = text("HeaderDigest=None;DataDigest=None;");
        for change in [
            (|r: &mut LoginRequest| r.tsih = 2) as fn(&mut LoginRequest),
            |r| r.isid[5] ^= 0x80,
        ] {
            let mut m = machine();
            assert!(matches!(
                m.handle(&req(0, 1, true), &sec, &Dir, addr(), addr()),
                LoginStep::Continue(..)
            ));
            let mut r = req(1, 3, true);
            change(&mut r);
            match m.handle(&r, &op, &Dir, addr(), addr()) {
                LoginStep::Fail(x, ..) => {
                    assert_eq!((x.status_class, x.status_detail), status::INITIATOR_ERROR)
                }
                other => panic!("{other:?}"),
            }
        }
        // unchanged, the same login completes
        let mut m = machine();
        m.handle(&req(0, 1, true), &sec, &Dir, addr(), addr());
        assert!(matches!(
            m.handle(&req(1, 3, true), &op, &Dir, addr(), addr()),
            LoginStep::Complete(..)
        ));
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

    /// Every status the login phase can send maps to the documented kind of failure;
    /// labels are distinct snake_case words.
    #[test]
    fn login_failure_from_status_and_labels() {
        use LoginFailure as F;
        let table = [
            (status::SUCCESS, None),
            ((1, 0x01), None),
            (status::INITIATOR_ERROR, Some(F::Error)),
            (status::AUTH_FAILED, Some(F::AuthFailure)),
            (status::NOT_AUTHORIZED, Some(F::NotAuthorized)),
            (status::NOT_FOUND, Some(F::NotFound)),
            (status::TARGET_REMOVED, Some(F::NotFound)),
            (status::UNSUPPORTED_VERSION, Some(F::Refused)),
            (status::TOO_MANY_CONNECTIONS, Some(F::Refused)),
            (status::MISSING_PARAMETER, Some(F::Error)),
            (status::SESSION_TYPE_UNSUPPORTED, Some(F::Error)),
            (status::SESSION_NOT_FOUND, Some(F::Refused)),
            (status::INVALID_DURING_LOGIN, Some(F::Error)),
            (status::TARGET_ERROR, Some(F::Error)),
            (status::SERVICE_UNAVAILABLE, Some(F::Refused)),
            (status::OUT_OF_RESOURCES, Some(F::Refused)),
            ((2, 0x7f), Some(F::Error)),
            ((3, 0x7f), Some(F::Refused)),
            ((0x7f, 0), Some(F::Error)),
        ];
        for ((class, detail), want) in table {
            assert_eq!(
                LoginFailure::from_status(class, detail),
                want,
                "{class:#04x}/{detail:#04x}"
            );
        }
        let labels: Vec<&str> = LoginFailure::ALL.iter().map(|f| f.label()).collect();
        assert_eq!(
            labels,
            [
                "auth_failure",
                "not_authorized",
                "not_found",
                "refused",
                "error"
            ]
        );
    }

    /// The login machine names the target only once the Directory recognised it.
    #[test]
    fn target_name_only_when_the_directory_knows_it() {
        let cases = [
            ("InitiatorName=iqn.i;TargetName=iqn.t:nope;", None),
            (
                "InitiatorName=iqn.i;TargetName=iqn.t:acl;",
                Some("iqn.t:acl"),
            ),
            // refused before the Directory was asked
            (
                "InitiatorName=iqn.i;TargetName=iqn.t:ok;SessionType=X;",
                None,
            ),
            (
                "InitiatorName=iqn.i;TargetName=iqn.t:ok;AuthMethod=CHAP;",
                Some("iqn.t:ok"),
            ),
            ("InitiatorName=iqn.i;SessionType=Discovery;Foo", None),
        ];
        for (t, want) in cases {
            let mut m = machine();
            let step = m.handle(&req(0, 1, true), &text(t), &Dir, addr(), addr());
            assert!(matches!(step, LoginStep::Fail(..)), "{t}: {step:?}");
            assert_eq!(m.target_name(), want, "{t}");
        }
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

    #[test]
    fn grant_outlives_a_failed_login_and_nothing_follows_the_end() {
        let mut m = machine();
        assert!(!m.started());
        let d = text("InitiatorName=iqn.i;TargetName=iqn.t:cfg;AuthMethod=None;");
        let step = m.handle(&req(0, 1, false), &d, &Dir, addr(), addr());
        assert!(matches!(step, LoginStep::Continue(..)), "{step:?}");
        assert!(m.started());
        assert_eq!(m.granted_config().map(|c| c.max_queued_commands), Some(7));
        // a duplicate key fails the login; the connection still sizes the last
        // response's window from the grant
        let d = text("MaxBurstLength=512;MaxBurstLength=512;");
        let step = m.handle(&req(0, 1, false), &d, &Dir, addr(), addr());
        assert!(matches!(step, LoginStep::Fail(..)), "{step:?}");
        assert_eq!(m.granted_config().map(|c| c.max_queued_commands), Some(7));
        let step = m.handle(&req(1, 3, true), &[], &Dir, addr(), addr());
        assert!(matches!(step, LoginStep::Fail(..)), "{step:?}");
    }
}
