//! What the server tells the login about authentication, and what the login tells the
//! server back: the per-login [`AuthPolicy`] (none, or CHAP with its accounts), CHAP
//! secrets that never appear in `Debug` output, the injected [`RandomSource`] for
//! challenges, and the secret-free outcome of an authentication ([`ChapIdentity`] on
//! success, [`AuthFailure`] on failure) for logs and metrics.
//!
//! What a server does to require CHAP:
//!
//! ```
//! use iscsi_proto::{
//!     AuthPolicy, ChapCredential, ChapPolicy, ConnConfig, Connection, Directory, LoginGrant,
//!     LoginReject, LoginRequestInfo, RandomUnavailable, TargetRecord,
//! };
//! use std::net::SocketAddr;
//!
//! struct Registry;
//! impl Directory for Registry {
//!     fn login(&self, _req: &LoginRequestInfo<'_>) -> Result<LoginGrant, LoginReject> {
//!         Ok(LoginGrant { tsih: 1, target_portal_group_tag: 1, target_alias: None, config: None })
//!     }
//!     fn send_targets(&self, _: &str, _: SocketAddr, _: SocketAddr, _: Option<&str>)
//!         -> Vec<TargetRecord> { Vec::new() }
//!     // tgtd: the target's (or, for discovery, the global) incoming/outgoing accounts
//!     fn auth_policy(&self, req: &LoginRequestInfo<'_>) -> AuthPolicy {
//!         match req.target_name {
//!             Some(_) => AuthPolicy::Chap(ChapPolicy::new(
//!                 vec![ChapCredential::new("alice", "alice-secret-1234")],
//!                 Some(ChapCredential::new("target", "target-secret-5678")),
//!             )),
//!             None => AuthPolicy::None, // discovery without accounts
//!         }
//!     }
//! }
//!
//! let peer: SocketAddr = "127.0.0.1:50000".parse().unwrap();
//! let local: SocketAddr = "127.0.0.1:3260".parse().unwrap();
//! let mut conn: Connection<Vec<u8>> = Connection::new(ConnConfig::default(), peer, local);
//! // the server's CSPRNG (e.g. getrandom::fill); this one is only for the example
//! conn.set_random_source(Box::new(|buf: &mut [u8]| -> Result<(), RandomUnavailable> {
//!     buf.fill(0x5a);
//!     Ok(())
//! }));
//! ```

use super::chap::ChapAlgorithm;

/// A CHAP secret (tgtd's account password). `Debug` prints no byte of it; equality is
/// compared in constant time; the bytes are overwritten when it is dropped (best effort).
#[derive(Clone)]
pub struct ChapSecret(Vec<u8>);

impl ChapSecret {
    /// A secret from raw bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        ChapSecret(bytes.into())
    }
    /// The secret's bytes (for hashing only: never log them).
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
    /// Length in bytes (RFC 7143 §12.1.3 recommends at least 12, i.e. 96 bits).
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True for an empty secret.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for ChapSecret {
    fn from(s: &str) -> Self {
        ChapSecret(s.as_bytes().to_vec())
    }
}

impl From<String> for ChapSecret {
    fn from(s: String) -> Self {
        ChapSecret(s.into_bytes())
    }
}

impl std::fmt::Debug for ChapSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChapSecret(<redacted>)")
    }
}

impl PartialEq for ChapSecret {
    fn eq(&self, other: &Self) -> bool {
        super::chap::ct_eq(&self.0, &other.0)
    }
}
impl Eq for ChapSecret {}

impl Drop for ChapSecret {
    fn drop(&mut self) {
        self.0.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&self.0);
    }
}

/// One CHAP account: a user name (CHAP_N) and its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChapCredential {
    pub user: String,
    pub secret: ChapSecret,
}

impl ChapCredential {
    pub fn new(user: impl Into<String>, secret: impl Into<ChapSecret>) -> Self {
        ChapCredential {
            user: user.into(),
            secret: secret.into(),
        }
    }
}

/// CHAP requirements of one login (tgtd: a target's, or the discovery, accounts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChapPolicy {
    /// Accounts an initiator may authenticate with (tgtd `incominguser`). Empty: every
    /// CHAP attempt fails with [`AuthFailureReason::UnknownUser`].
    pub incoming: Vec<ChapCredential>,
    /// The target's own account for mutual CHAP (tgtd `outgoinguser`). `None`: an
    /// initiator that asks to authenticate the target fails with
    /// [`AuthFailureReason::MissingOutgoingAccount`].
    pub outgoing: Option<ChapCredential>,
    /// Algorithms the target accepts. Among them the initiator's order of preference
    /// (its CHAP_A list) decides.
    pub algorithms: Vec<ChapAlgorithm>,
}

impl ChapPolicy {
    /// CHAP with these accounts and every supported algorithm.
    pub fn new(incoming: Vec<ChapCredential>, outgoing: Option<ChapCredential>) -> Self {
        ChapPolicy {
            incoming,
            outgoing,
            algorithms: ChapAlgorithm::ALL.to_vec(),
        }
    }

    /// Configuration weaknesses worth a warning when the configuration is loaded
    /// (RFC 7143 §12.1.3: secrets of at least 96 bits; a secret used to authenticate
    /// initiators must not authenticate the target). Messages name users, never secrets.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        for c in self.incoming.iter().chain(self.outgoing.iter()) {
            if c.secret.len() < 12 {
                w.push(format!(
                    "CHAP secret of user {:?} is shorter than 12 bytes (96 bits)",
                    c.user
                ));
            }
        }
        if let Some(o) = &self.outgoing {
            for c in &self.incoming {
                if c.secret == o.secret {
                    w.push(format!(
                        "incoming user {:?} has the same secret as outgoing user {:?}: \
                         logins with it are refused",
                        c.user, o.user
                    ));
                }
            }
        }
        if self.algorithms.is_empty() {
            w.push("no CHAP algorithm allowed: every CHAP login fails".into());
        }
        w
    }
}

/// How one login must authenticate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AuthPolicy {
    /// No authentication: `AuthMethod=None` (the only method offered).
    #[default]
    None,
    /// CHAP is required: `AuthMethod=CHAP` is the only method offered.
    Chap(ChapPolicy),
}

/// The random source could not deliver bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("random source unavailable")]
pub struct RandomUnavailable;

/// Source of CHAP identifiers and challenges, provided by the server (e.g. `getrandom`);
/// tests inject a deterministic one. Must be cryptographically strong in production.
pub trait RandomSource: Send {
    /// Fills `buf` entirely with random bytes.
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable>;
}

impl<F> RandomSource for F
where
    F: FnMut(&mut [u8]) -> Result<(), RandomUnavailable> + Send,
{
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), RandomUnavailable> {
        self(buf)
    }
}

/// Who authenticated, after a successful CHAP exchange (no secret in it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChapIdentity {
    /// The incoming account the initiator proved (CHAP_N).
    pub user: String,
    pub algorithm: ChapAlgorithm,
    /// The target also authenticated itself (mutual CHAP).
    pub mutual: bool,
}

/// Why authentication failed (one value per metric label; see [`Self::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuthFailureReason {
    /// The initiator offered no AuthMethod the target accepts (e.g. `None` when CHAP is
    /// required).
    MethodRejected,
    /// The initiator tried to leave the security stage (or skip it) unauthenticated.
    NotAuthenticated,
    /// None of the CHAP_A algorithms offered is accepted.
    NoCommonAlgorithm,
    /// A CHAP key at the wrong step (or repeated, or outside the security stage).
    UnexpectedKey,
    /// A CHAP key required at this step is missing.
    MissingKey,
    /// A CHAP value that does not parse, is too long, or has the wrong length.
    MalformedValue,
    /// CHAP_N names no incoming account.
    UnknownUser,
    /// CHAP_R does not match (wrong secret).
    BadResponse,
    /// Mutual CHAP asked for, but the target has no outgoing account.
    MissingOutgoingAccount,
    /// The initiator's CHAP_C equals the target's own challenge (reflection attack).
    ReflectedChallenge,
    /// The initiator's secret equals the target's outgoing secret (RFC 7143 §12.1.3).
    SecretReused,
    /// The server's random source failed (target error, not the initiator's fault).
    RandomUnavailable,
}

impl AuthFailureReason {
    /// A stable snake_case name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthFailureReason::MethodRejected => "method_rejected",
            AuthFailureReason::NotAuthenticated => "not_authenticated",
            AuthFailureReason::NoCommonAlgorithm => "no_common_algorithm",
            AuthFailureReason::UnexpectedKey => "unexpected_key",
            AuthFailureReason::MissingKey => "missing_key",
            AuthFailureReason::MalformedValue => "malformed_value",
            AuthFailureReason::UnknownUser => "unknown_user",
            AuthFailureReason::BadResponse => "bad_response",
            AuthFailureReason::MissingOutgoingAccount => "missing_outgoing_account",
            AuthFailureReason::ReflectedChallenge => "reflected_challenge",
            AuthFailureReason::SecretReused => "secret_reused",
            AuthFailureReason::RandomUnavailable => "random_unavailable",
        }
    }
}

/// A failed authentication, safe to log: no secret, no challenge, no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFailure {
    pub reason: AuthFailureReason,
    /// The CHAP key concerned, if one is ("CHAP_R", ...).
    pub key: Option<&'static str>,
    /// The CHAP_N the initiator gave, once known (peer-supplied text, ≤ 512 bytes).
    pub user: Option<String>,
}

impl AuthFailure {
    pub fn new(reason: AuthFailureReason) -> Self {
        AuthFailure {
            reason,
            key: None,
            user: None,
        }
    }
    pub(crate) fn key(reason: AuthFailureReason, key: &'static str) -> Self {
        AuthFailure {
            reason,
            key: Some(key),
            user: None,
        }
    }
    pub(crate) fn user(reason: AuthFailureReason, user: &str) -> Self {
        AuthFailure {
            reason,
            key: None,
            user: Some(user.to_string()),
        }
    }
}

impl std::fmt::Display for AuthFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "authentication failed: {}", self.reason.as_str())?;
        if let Some(k) = self.key {
            write!(f, " ({k})")?;
        }
        if let Some(u) = &self.user {
            write!(f, " user {u:?}")?;
        }
        Ok(())
    }
}
