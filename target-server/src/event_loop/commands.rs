//! What a connection's protocol events become, one step each: a completed login (the
//! session's target and I_T nexus), SCSI commands handed to `dispatch` (answered now or
//! later through the backend's reply), task management requests planned by `scsi` and
//! carried out by `dispatch`, logouts, protocol errors, failed logins (counted), and the
//! commands dropped outside the CmdSN window (counted and logged once per burst).

use std::sync::Arc;

use iscsi_proto::{ConnError, Event, ScsiCommand, SessionInfo, SessionType, TmfRequest};

use super::EventThread;
use super::shared::Shared;
use super::slot::{NormalSession, Session, Slot};
use crate::backend::StorageCtx;
use crate::backend::landing::Landing;
use crate::backend::reply::{Answer, CompletionSink, ReplyTo, TasksEnded, completed};
use crate::conn_id::ConnId;
use crate::dispatch;
use crate::io_stats::{IoKind, IoTag, NO_STATS};

/// What the steps need besides the connection.
struct Env<'a> {
    shared: &'a Shared,
    storage: StorageCtx<'a>,
    sink: &'a Arc<dyn CompletionSink>,
    id: ConnId,
    node: usize,
    /// This loop turn's wake-up on `io_stats::now_ns`'s clock: when its commands arrived.
    turn_ns: u64,
}

impl<'a> Env<'a> {
    fn of(
        shared: &'a Arc<Shared>,
        sink: &'a Arc<dyn CompletionSink>,
        (node, turn_ns): (usize, u64),
        id: ConnId,
        sends_from_blocks: bool,
    ) -> Self {
        Env {
            shared,
            storage: StorageCtx {
                workers: &shared.workers,
                node,
                cache: shared.cache.as_ref(),
                router: shared.router.as_ref(),
                sends_from_blocks,
                state_dir: shared.registry.state_dir(),
                tasks: Some(&**shared),
                registry: Some(&shared.registry),
            },
            sink,
            id,
            node,
            turn_ns,
        }
    }
}

impl EventThread {
    /// Works through connection `s`'s held commands whose time came (as if they had just
    /// arrived, their limits already charged), then its protocol events.
    pub(super) fn process_events(&mut self, s: usize) {
        let Some(id) = self.id(s) else { return };
        self.current = Some(s);
        let shared = Arc::clone(&self.shared);
        let sends = self
            .slots
            .get(s)
            .and_then(|o| o.as_ref())
            .is_some_and(|sl| sl.link.sends_from_blocks());
        let env = Env::of(&shared, &self.sink, (self.node, self.turn_ns), id, sends);
        let Some(slot) = self.slots.get_mut(s).and_then(|o| o.as_mut()) else {
            return;
        };
        for cmd in std::mem::take(&mut slot.released) {
            slot.run(&env, cmd);
        }
        let mut task_management = false;
        while let Some(ev) = slot.conn.poll_event() {
            // the connection's log context for everything but the per-command path (entering
            // a span costs a lock in the log filter: not once per command)
            let _in_conn = (!matches!(ev, Event::Command(_))).then(|| slot.span.clone().entered());
            match ev {
                Event::LoggedIn(info) => slot.logged_in(&env, &info),
                Event::Resumed(info) => slot.resumed(&env, &info),
                Event::Command(cmd) => slot.command(&env, cmd),
                Event::DataFetch { itt } => slot.data_fetch(&env, itt),
                Event::TaskMgmt(req) => {
                    task_management = true;
                    slot.task_management(&env, &req);
                }
                Event::LogoutRequested => slot.logout_requested(&env),
                Event::LoggedOut => {
                    tracing::info!("logout");
                    slot.finish();
                }
                Event::Close(err) => slot.protocol_error(&env, &err),
                Event::LoginFailed {
                    target_name,
                    failure,
                } => {
                    // only configured targets get a series of their own
                    let known = target_name
                        .as_deref()
                        .and_then(|n| shared.registry.target(n))
                        .map(|t| t.iqn.clone())
                        .unwrap_or_default();
                    shared.proto_stats.target(&known).login(failure.label());
                    tracing::info!(result = failure.label(), "login failed");
                }
                Event::Rejected(reason) => slot.events.rejected(reason.label()),
                Event::DigestError { header } => {
                    slot.events.digest_error();
                    tracing::warn!("{} digest error", if header { "header" } else { "data" });
                }
            }
        }
        slot.count_window_drops(&env);
        if slot.conn.is_closing() {
            // the protocol connection is done (logged out or closed): so is the slot
            slot.finish();
        }
        // commands over their LUN's limits wait on this thread
        for (due, cmd, qos) in slot.to_hold.drain(..) {
            self.throttle.hold(due, env.turn_ns, id, cmd, qos);
            slot.held_back += 1;
        }
        if task_management && !self.throttle.is_empty() {
            self.end_unwanted_held();
        }
    }
}

/// The I_T nexus of a normal session of `t` (a fresh identity).
fn session_nexus(shared: &Shared, info: &SessionInfo, t: &crate::registry::Target) -> scsi::Nexus {
    let isid = info.isid;
    let isid = u64::from_be_bytes([0, 0, isid[0], isid[1], isid[2], isid[3], isid[4], isid[5]]);
    let nexus = scsi::Nexus::iscsi(
        shared.registry.next_nexus_id(),
        &info.initiator_name,
        isid,
        &t.iqn,
        t.portal_group_tag(),
    );
    // several gateways as one target: the nexus carries this gateway's relative port, so
    // that every gateway reports where a registration came through
    let alua = t.alua();
    if alua.peers.is_empty() {
        nexus
    } else {
        nexus.at_relative_port(alua.relative_port)
    }
}

/// A session moved from the previous numatgtd could not go on (its socket failed before
/// it was adopted): its I_T nexus is lost, as if it had been added and removed, so that
/// its initiator's next login sees I_T NEXUS LOSS OCCURRED.
pub fn lose_moved_nexus(shared: &Shared, info: &SessionInfo) {
    let Some(t) = info
        .target_name
        .as_deref()
        .and_then(|n| shared.registry.target(n))
    else {
        return;
    };
    let nexus = session_nexus(shared, info, &t);
    for l in t.lun_set().map.values() {
        l.scsi.nexus_added(&nexus);
        l.scsi.nexus_removed(nexus.id);
    }
}

impl Slot {
    /// The login completed: a normal session binds its target and I_T nexus; the
    /// connection's counters and log context get the names.
    fn logged_in(&mut self, env: &Env<'_>, info: &SessionInfo) {
        self.bind_session(env, info);
        self.events.login("success");
        tracing::info!(tsih = info.tsih, node = env.node, "login complete");
    }

    /// A session moved from the previous numatgtd (live upgrade) goes on here: bound as
    /// at login, entered in the registry's session table; closed if its target is gone.
    fn resumed(&mut self, env: &Env<'_>, info: &SessionInfo) {
        self.bind_session(env, info);
        let Some(n) = self.session.normal() else {
            tracing::warn!("moved session's target is gone: closing it");
            self.finish();
            return;
        };
        env.shared.registry.adopt_session(
            env.id,
            info,
            &n.target.iqn,
            self.peer,
            self.link.driver(),
        );
        tracing::info!(
            tsih = info.tsih,
            node = env.node,
            "session moved from the previous numatgtd"
        );
    }

    /// The session's target and I_T nexus, counters and log context, for a login or a move.
    fn bind_session(&mut self, env: &Env<'_>, info: &SessionInfo) {
        if let (SessionType::Normal, Some(name)) = (&info.session_type, &info.target_name)
            && let Some(t) = env.shared.registry.target(name)
        {
            let nexus = session_nexus(env.shared, info, &t);
            // a Logout is answered once the shared reservations its nexus held are
            // released where the other gateways read them
            if !t.alua().peers.is_empty() {
                self.conn.hold_logouts(true);
            }
            self.session = Session::Normal(NormalSession::start(t, nexus));
        }
        self.io.set_session(info.tsih);
        self.events = env
            .shared
            .proto_stats
            .target(self.session.normal().map_or("", |n| n.target.iqn.as_str()));
        self.span.record("initiator", info.initiator_name.as_str());
        self.span.record(
            "target",
            info.target_name.as_deref().unwrap_or("(discovery)"),
        );
    }

    /// A SCSI command: held back when its LUN's limits say it may not start yet (see
    /// `throttle`), else run.
    fn command(&mut self, env: &Env<'_>, cmd: ScsiCommand) {
        if let Session::Normal(session) = &mut self.session {
            session.refresh_luns();
            let limited = (session.luns.1.map.get(&cmd.lun))
                .filter(|l| l.qos.is_limited())
                .map(|l| Arc::clone(&l.qos));
            if let Some(qos) = limited
                && let Some((dir, bytes)) = super::throttle::charged_as(&cmd)
            {
                // each initiator's own limits, within the LUN's
                let initiator =
                    (qos.per_initiator()).then(|| session.initiator_qos(&qos, env.turn_ns));
                let due = qos.charge(dir, bytes, env.turn_ns, initiator);
                if due > env.turn_ns {
                    // the initiator keeps the rest: fewer commands in flight while held
                    self.conn
                        .narrow_window(Some(super::throttle::NARROWED_WINDOW));
                    self.narrowed_since_ns = Some(env.turn_ns);
                    self.to_hold.push((due, cmd, qos));
                    return;
                }
            }
        }
        self.run(env, cmd);
    }

    /// A SCSI command executed by `dispatch`, answered now or when the backend is done.
    fn run(&mut self, env: &Env<'_>, mut cmd: ScsiCommand) {
        let itt = cmd.itt;
        let Session::Normal(session) = &mut self.session else {
            // not reachable: the protocol layer refuses commands in discovery sessions
            let result = completed(scsi::execute_unmapped(&cmd.cdb, &[], false));
            return self.complete(itt, &IoTag::NONE, result, Vec::new());
        };
        let mut reply = ReplyTo::new(Arc::clone(env.sink), env.id, itt);
        session.refresh_luns();
        let session = &*session;
        let luns = &session.luns.1;
        let mut tag = IoTag {
            // the turn's wake-up: when the command was seen (no clock read per command)
            started_ns: env.turn_ns,
            kind: IoKind::OTHER,
            stats: luns
                .map
                .get(&cmd.lun)
                .map_or(NO_STATS, |l| self.io.index_for(&l.stats)),
        };
        reply.set_tag(tag);
        // a landing the link was given for this command: its data, when it landed there
        let landing = if cmd.write {
            self.link.take_landing(itt).filter(|_| cmd.landed > 0)
        } else {
            None
        };
        let (answer, kind) = dispatch::execute(
            &mut cmd,
            landing,
            &session.target,
            luns,
            Some(&session.nexus),
            &env.storage,
            reply,
        );
        tag.kind = kind;
        self.io.submitted(&tag);
        // the write buffer serves the connection's next commands
        let buffer = std::mem::take(&mut cmd.data_out);
        match answer {
            Answer::Now(result) => self.complete(itt, &tag, result, buffer),
            Answer::Later(_) => {
                self.conn.recycle_buffer(buffer);
                self.inflight += 1;
            }
        }
    }

    /// The connection is about to fetch a command's write data (RDMA): when it is a plain
    /// WRITE, the link is given fresh cache slots for it to land in (kept as the cached
    /// copy, or written to the backing store from there: `backend::landing`).
    fn data_fetch(&mut self, env: &Env<'_>, itt: u32) {
        let Session::Normal(session) = &self.session else {
            return;
        };
        let Some(cmd) = self.conn.fetching_write(itt) else {
            return;
        };
        let Some(lun) = session.luns.1.map.get(&cmd.lun) else {
            return;
        };
        if let Some(landing) = Landing::reserve(lun, cmd, &env.storage) {
            // a landing the link cannot use is dropped here (its slots freed)
            drop(self.link.land(itt, landing));
        }
    }

    /// A task management request. The connection has marked this session's affected tasks
    /// aborted: their results will be dropped, and it answers once they have ended (backing
    /// store jobs run to completion; RFC 7143 11.6.1 b). `scsi` decides the response and the
    /// effects; `dispatch` performs the logical units' side.
    fn task_management(&mut self, env: &Env<'_>, req: &TmfRequest) {
        self.events.task_management(req.function.label());
        let target = self.session.normal().map(|n| &*n.target);
        // the response waits for the work of the tasks it ends on other connections (and
        // for the other gateways of shared LUNs): `ended` sends it once they are done
        let inbox = env.shared.inbox(env.id.thread).cloned();
        let answer = Arc::new(std::sync::OnceLock::new());
        let ended = inbox.map(|inbox| {
            let (conn, itt, answer) = (env.id, req.itt, Arc::clone(&answer));
            TasksEnded::new(1, move || {
                if let Some(&resp) = answer.get() {
                    inbox.send(super::Msg::TmfDone { conn, itt, resp });
                }
            })
        });
        let plan = dispatch::task_management(req, target, env.shared, env.id, ended.as_ref());
        let shared_resets = dispatch::shared_resets(req, target, &plan);
        if plan.close_connections {
            self.close_after_tmf();
        }
        let resp = dispatch::tmf_response(&plan);
        let _ = answer.set(resp);
        // long server-side jobs of the ended tasks: an EXTENDED COPY stops between chunks, a
        // SANITIZE's task ends now (the operation goes on)
        let conn = &self.conn;
        crate::backend::task_watch::tasks_ended(env.id, |itt| conn.task_wanted(itt));
        if let Some(ended) = ended.filter(|e| e.left() > 1 || shared_resets.is_some()) {
            match shared_resets {
                // a reset of LUNs other gateways serve too: they reset theirs first
                Some((luns, target_reset)) => env.storage.run(move || {
                    crate::backend::pr_cluster::spread_reset(&luns, target_reset);
                    ended.one_done();
                }),
                None => ended.one_done(),
            }
            return;
        }
        self.conn.complete_tmf(req.itt, resp);
        self.tmf_answered();
    }

    /// A Logout of a session whose target several gateways serve is ready to be answered:
    /// the SPC-2 reservations its I_T nexus holds on shared LUNs are released in the cluster
    /// first (on an I/O worker), so that no initiator learns of the logout while another
    /// gateway still refuses it. Answered at once when it holds none.
    fn logout_requested(&mut self, env: &Env<'_>) {
        let held = self.session.normal().and_then(|n| {
            let held: Vec<_> = (n.target.lun_set().map.values())
                .filter(|l| l.shared_pr.is_some() && l.scsi.spc2_held_by(&n.nexus))
                .cloned()
                .collect();
            (!held.is_empty()).then(|| (held, n.nexus.clone()))
        });
        let inbox = env.shared.inbox(env.id.thread).cloned();
        let (Some((held, nexus)), Some(inbox)) = (held, inbox) else {
            self.conn.confirm_logout();
            return;
        };
        let conn = env.id;
        env.storage.run(move || {
            for lun in &held {
                crate::backend::pr_cluster::release_spc2(lun, scsi::Spc2Holder::Nexus(&nexus), &[]);
            }
            inbox.send(super::Msg::LogoutDone(conn));
        });
    }

    /// The protocol connection closes on an error: logged (the limits' refusals counted and
    /// logged once per burst: a slow-loris flood must not write a line per connection).
    fn protocol_error(&mut self, env: &Env<'_>, err: &ConnError) {
        use crate::limits::Limit;
        use iscsi_proto::ProtocolError;
        let limit = match err {
            ConnError::LoginTimeout => Some(Limit::LoginTimeout),
            ConnError::Protocol(ProtocolError::DataSegmentTooLong { .. }) => Some(Limit::PduSize),
            _ => None,
        };
        match limit {
            Some(l) => env.shared.registry.limits.refuse(
                l,
                Some(self.peer),
                format_args!("closing connection: {err}"),
            ),
            None => tracing::warn!("closing connection: {err}"),
        }
        self.finish();
    }

    /// Commands beyond the CmdSN window (MaxQueueCmd outstanding, the session's command
    /// limit) or stale are dropped silently on the wire (RFC 7143 4.2.2.1), but counted and
    /// logged once per burst here.
    fn count_window_drops(&mut self, env: &Env<'_>) {
        let dropped = self.conn.stats().dropped_out_of_window;
        if dropped > self.window_drops {
            let why = self.conn.take_drop_reason().unwrap_or_default();
            for _ in self.window_drops..dropped {
                env.shared.registry.limits.refuse(
                    crate::limits::Limit::CommandWindow,
                    Some(self.peer),
                    format_args!("command dropped: {why}"),
                );
            }
            self.window_drops = dropped;
        }
    }
}
