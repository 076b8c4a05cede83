//! Login and discovery against the registry: `iscsi_proto::Directory` for one connection
//! (target lookup, state, ACL, CHAP policy, TSIH, session reinstatement after
//! authentication, SendTargets). Every target is reachable over every portal, TCP and iSER;
//! SendTargets lists the portals of the transport the discovery session came in on.

use std::net::SocketAddr;

use iscsi_proto::{
    AuthPolicy, ChapCredential, ChapPolicy, Directory, LoginGrant, LoginReject, LoginRequestInfo,
    SessionType, TargetRecord,
};

use super::{ConnControl, PORTAL_GROUP_TAG, Registry, SessionEntry, TargetState};
use crate::conn_id::ConnId;

/// The registry as seen by one connection's login: implements `iscsi_proto::Directory`.
pub struct LoginContext<'a> {
    pub registry: &'a Registry,
    pub me: ConnId,
    pub control: &'a dyn ConnControl,
    /// The transport this connection runs over: `Iscsi` (TCP) or `Iser` (RDMA). Recorded
    /// with the session; SendTargets answers with this transport's portals.
    pub transport: config::Driver,
}

impl Directory for LoginContext<'_> {
    fn login(&self, req: &LoginRequestInfo<'_>) -> Result<LoginGrant, LoginReject> {
        let reg = self.registry;
        let target_name = match req.session_type {
            SessionType::Discovery => {
                return Ok(LoginGrant {
                    tsih: if req.tsih != 0 {
                        req.tsih
                    } else {
                        reg.alloc_tsih()
                    },
                    target_portal_group_tag: PORTAL_GROUP_TAG,
                    target_alias: None,
                    config: None,
                });
            }
            SessionType::Normal => match req.target_name {
                Some(n) => n,
                None => return Err(LoginReject::TargetNotFound),
            },
        };
        let Some(target) = reg.target(target_name) else {
            tracing::info!(initiator = req.initiator_name, target = target_name, peer = %req.peer,
                "login refused: no such target");
            return Err(LoginReject::TargetNotFound);
        };
        if reg.system().offline || target.mgmt().state == TargetState::Offline {
            tracing::info!(
                initiator = req.initiator_name,
                target = target_name,
                "login refused: target not available (offline)"
            );
            return Err(LoginReject::ServiceUnavailable);
        }
        if !target.allows(req.initiator_name, req.peer) {
            tracing::warn!(initiator = req.initiator_name, target = target_name, peer = %req.peer,
                "login refused: initiator not allowed by the target's ACL");
            return Err(LoginReject::NotAuthorized);
        }
        if req.tsih != 0 {
            // adding a connection to an existing session (MC/S) or ERL2 recovery: not supported
            tracing::info!(
                initiator = req.initiator_name,
                tsih = req.tsih,
                "login refused: joining an existing session (MaxConnections=1)"
            );
            return Err(LoginReject::TooManySessions);
        }
        // the session is registered (and an old one with the same ISID reinstated) only
        // once the initiator has authenticated: see `authenticated`; until then it is
        // pending, and counts against the session limits
        let tsih = reg.alloc_tsih();
        let key = (
            req.initiator_name.to_string(),
            req.isid,
            target.iqn.to_ascii_lowercase(),
        );
        if let Some((limit, max)) = reg.reserve_session(self.me, tsih, &key, target.max_sessions())
        {
            // RFC 7143 11.13.5: status 0x0302 "Out of resources" — "the target has
            // insufficient session, connection, or other resources" (0x0206 "too many
            // connections" is about the connections of one session, MaxConnections)
            let which = match limit {
                crate::limits::Limit::TargetSessions => "the target's max_sessions",
                _ => "limits.max_sessions",
            };
            reg.limits.refuse(
                limit,
                Some(req.peer),
                format_args!(
                    "login refused: {max} sessions ({which}); initiator {}, target {}",
                    req.initiator_name, target.iqn
                ),
            );
            return Err(LoginReject::TooManySessions);
        }
        Ok(LoginGrant {
            tsih,
            target_portal_group_tag: target.portal_group_tag(),
            target_alias: target.alias.clone(),
            config: Some(reg.config_for(Some(&target.conn_config()), req.local)),
        })
    }

    /// The initiator passed the security stage: now an older session with the same
    /// initiator name and ISID to the same target is reinstated (closed) and this one
    /// registered, so an
    /// unauthenticated peer cannot knock out a live session.
    fn authenticated(
        &self,
        req: &LoginRequestInfo<'_>,
        _chap: Option<&iscsi_proto::ChapIdentity>,
    ) -> Result<(), LoginReject> {
        let reg = self.registry;
        let Some((tsih, _)) = reg
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.me)
        else {
            return Ok(()); // discovery sessions are not registered
        };
        let Some(target) = req.target_name.and_then(|n| reg.target(n)) else {
            return Err(LoginReject::TargetRemoved);
        };
        // the I_T nexus: a login with the same initiator port to another target is another
        // session, not a reinstatement
        let key = (
            req.initiator_name.to_string(),
            req.isid,
            target.iqn.to_ascii_lowercase(),
        );
        let mut sessions = reg.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = sessions.remove(&key) {
            // session reinstatement (RFC 7143 6.3.5): the old session is closed
            tracing::info!(initiator = req.initiator_name, target = %old.target, old_tsih = old.tsih,
                "session reinstatement: closing the old session with the same ISID");
            if old.owner != self.me {
                self.control
                    .close(old.owner, "session reinstated by a new login");
            }
        }
        sessions.insert(
            key,
            SessionEntry {
                owner: self.me,
                tsih,
                target: target.iqn.clone(),
                alias: req.initiator_alias.map(str::to_string),
                peer: req.peer,
                transport: self.transport,
            },
        );
        Ok(())
    }

    /// tgtd's rule: CHAP is required when incoming accounts are bound to the target (or,
    /// for discovery sessions, to discovery); the outgoing account enables mutual CHAP.
    fn auth_policy(&self, req: &LoginRequestInfo<'_>) -> AuthPolicy {
        let target = match req.session_type {
            SessionType::Discovery => None,
            SessionType::Normal => match req.target_name {
                Some(t) => Some(t),
                None => return AuthPolicy::None,
            },
        };
        let creds = self.registry.chap_credentials(target);
        if creds.incoming.is_empty() {
            return AuthPolicy::None;
        }
        let cred = |(u, p): (String, String)| ChapCredential::new(u, p);
        AuthPolicy::Chap(ChapPolicy::new(
            creds.incoming.into_iter().map(cred).collect(),
            creds.outgoing.map(cred),
        ))
    }

    fn send_targets(
        &self,
        initiator_name: &str,
        peer: SocketAddr,
        local: SocketAddr,
        scope: Option<&str>,
    ) -> Vec<TargetRecord> {
        let reg = self.registry;
        reg.targets()
            .iter()
            .filter(|t| scope.is_none_or(|s| t.iqn.eq_ignore_ascii_case(s)))
            .filter(|t| t.allows(initiator_name, peer))
            .map(|t| TargetRecord {
                name: t.iqn.clone(),
                addresses: reg.portal_strings(local, self.transport, t.portal_group_tag()),
            })
            .collect()
    }
}
