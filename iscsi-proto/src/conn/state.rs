//! The phases of a connection and what each one holds: `Login` (the login machine, its
//! deadline), `FullFeature` (the session, its live parameters, NOP-In pings, the Text
//! exchange, a Logout waiting for tasks, task management requests), and the two ends,
//! `LoggedOut` and `Closed`, which keep only what the login established. Transitions take
//! the old state by value. What lives across phases (framing, StatSN, the command window,
//! tasks, counters, spare buffers) stays on the `Connection`.

use super::ConnConfig;
use super::control::{Pings, TextExchange, TmfTable};
use super::rdma::RdmaLimits;
use crate::login::{LoginMachine, SessionInfo, SessionType};
use crate::text::negotiate::{Negotiator, SessionParams};

pub(super) enum State {
    /// Login phase (RFC 7143 §6.3): login requests only.
    Login(Box<Login>),
    /// Full feature phase: every PDU of the session.
    FullFeature(Box<FullFeature>),
    /// The Logout Response is queued: the output drains, no more input is processed.
    LoggedOut(Box<Session>),
    /// `Event::Close` is queued: the output drains, no more input is processed. The session
    /// is kept when the login had completed.
    Closed(Option<Box<Session>>),
}

/// The login phase.
pub(super) struct Login {
    pub(super) machine: LoginMachine,
    /// When `on_tick` drops the login: set by the first input or tick
    /// (`ConnConfig::login_timeout_ms` later).
    pub(super) deadline: Option<u64>,
    /// The CID of the first login request.
    pub(super) cid: u16,
}

/// What a completed login established; kept until the connection is dropped.
pub(super) struct Session {
    pub(super) info: SessionInfo,
    /// The RDMA datamover's limits, for a connection of an RDMA transport (iSER): no
    /// Data-In or R2T, Put and Get instead.
    pub(super) rdma: Option<RdmaLimits>,
}

/// The full feature phase.
pub(super) struct FullFeature {
    pub(super) session: Box<Session>,
    /// The parameters in force: the login's, with the declarative
    /// MaxRecvDataSegmentLength of later Text exchanges.
    pub(super) params: SessionParams,
    /// The connection's CID (from the first login request).
    pub(super) cid: u16,
    pub(super) pings: Pings,
    pub(super) text: TextExchange,
    /// The ITT of a Logout request waiting for the tasks to end (commands are refused
    /// meanwhile).
    pub(super) logout: Option<u32>,
    /// Whether the server confirms a Logout before its response, and how far it got.
    pub(super) logout_gate: LogoutGate,
    /// The target asked for the logout (`request_logout`): its response says Time2Wait 0,
    /// the initiator may log in again at once.
    pub(super) logout_asked: bool,
    pub(super) tmfs: TmfTable,
}

/// A Logout's confirmation by the server ([`super::Connection::hold_logouts`]): `Off`, the
/// response goes out once the tasks have ended; `Armed`, the server is asked first
/// ([`crate::Event::LogoutRequested`]), `Asked` until it answers with
/// [`super::Connection::confirm_logout`], which makes it `Confirmed`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum LogoutGate {
    #[default]
    Off,
    Armed,
    Asked,
    Confirmed,
}

impl Login {
    pub(super) fn new(cfg: &ConnConfig) -> Self {
        Login {
            machine: LoginMachine::new(crate::login::LoginConfig {
                offer: cfg.offer(),
                max_login_pdus: cfg.max_login_pdus.max(1),
            }),
            deadline: None,
            cid: 0,
        }
    }

    /// Starts the login clock, once.
    pub(super) fn start_clock(&mut self, now: u64, cfg: &ConnConfig) -> u64 {
        *self
            .deadline
            .get_or_insert(now.saturating_add(cfg.login_timeout_ms))
    }

    /// The full feature phase this login leads to, with `cfg` (the granted configuration)
    /// in force from `now`.
    pub(super) fn complete(
        self,
        info: SessionInfo,
        rdma: Option<RdmaLimits>,
        cfg: &ConnConfig,
        now: u64,
    ) -> FullFeature {
        let params = info.params.clone();
        FullFeature::with(Box::new(Session { info, rdma }), params, self.cid, cfg, now)
    }
}

impl FullFeature {
    fn with(
        session: Box<Session>,
        params: SessionParams,
        cid: u16,
        cfg: &ConnConfig,
        now: u64,
    ) -> FullFeature {
        let mut neg = Negotiator::new(cfg.offer());
        neg.params = params.clone();
        neg.discovery = session.info.session_type == SessionType::Discovery;
        FullFeature {
            params,
            session,
            cid,
            pings: Pings::start(cfg.nop_interval_ms, now),
            text: TextExchange::new(neg),
            logout: None,
            logout_gate: LogoutGate::Off,
            logout_asked: false,
            tmfs: TmfTable::default(),
        }
    }

    /// The full feature phase of a byte-stream connection moved from another process
    /// (`Connection::resume`), with `params` in force.
    pub(super) fn resumed(
        info: SessionInfo,
        params: SessionParams,
        cid: u16,
        cfg: &ConnConfig,
        now: u64,
    ) -> FullFeature {
        FullFeature::with(
            Box::new(Session { info, rdma: None }),
            params,
            cid,
            cfg,
            now,
        )
    }

    /// A discovery session (Text, NOP and Logout only).
    pub(super) fn discovery(&self) -> bool {
        self.session.info.session_type == SessionType::Discovery
    }

    /// Most data bytes in one PDU the target sends.
    pub(super) fn max_send_data(&self) -> usize {
        let p = self.params.initiator_max_recv_data_segment_length.max(512);
        match self.session.rdma {
            Some(l) => p.min(l.max_send_data) as usize,
            None => p as usize,
        }
    }

    /// Most data bytes in one PDU the initiator may send.
    pub(super) fn max_recv_data(&self) -> u32 {
        match self.session.rdma {
            Some(l) => l.max_recv_data,
            None => self.params.target_max_recv_data_segment_length,
        }
    }
}

impl State {
    /// Moves the state through `f`, which takes it by value (the placeholder in between
    /// is never seen).
    pub(super) fn step(&mut self, f: impl FnOnce(State) -> State) {
        let old = std::mem::replace(self, State::Closed(None));
        *self = f(old);
    }

    /// What the login established (full feature phase and after).
    pub(super) fn session(&self) -> Option<&Session> {
        match self {
            State::Login(_) => None,
            State::FullFeature(ff) => Some(&ff.session),
            State::LoggedOut(s) => Some(s),
            State::Closed(s) => s.as_deref(),
        }
    }

    /// Input is processed (login or full feature phase).
    pub(super) fn takes_input(&self) -> bool {
        matches!(self, State::Login(_) | State::FullFeature(_))
    }

    /// Logged out or closed.
    pub(super) fn is_ended(&self) -> bool {
        matches!(self, State::LoggedOut(_) | State::Closed(_))
    }

    /// The full feature phase ends with the Logout Response; any other state is kept.
    pub(super) fn logged_out(self) -> State {
        match self {
            State::FullFeature(ff) => State::LoggedOut(ff.session),
            other => other,
        }
    }

    /// Closed, keeping the session if there is one; an ended state is kept.
    pub(super) fn closed(self) -> State {
        match self {
            State::Login(_) => State::Closed(None),
            State::FullFeature(ff) => State::Closed(Some(ff.session)),
            ended @ (State::LoggedOut(_) | State::Closed(_)) => ended,
        }
    }

    /// The phase's name (for `Debug`).
    pub(super) fn name(&self) -> &'static str {
        match self {
            State::Login(_) => "Login",
            State::FullFeature(_) => "FullFeature",
            State::LoggedOut(_) => "LoggedOut",
            State::Closed(_) => "Closed",
        }
    }
}
