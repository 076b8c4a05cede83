//! What a connection's protocol events become: SCSI commands handed to `dispatch` (answered
//! now or later through the backend's reply), task management requests planned by `scsi`
//! and carried out by `dispatch`, logouts and protocol errors.

use std::sync::Arc;

use iscsi_proto::{Event, SessionType};

use super::EventThread;
use crate::backend::StorageCtx;
use crate::backend::reply::{Answer, ReplyTo, completed};
use crate::dispatch;
use crate::io_stats::{IoKind, IoTag, NO_STATS, now_ns};

impl EventThread {
    pub(super) fn process_events(&mut self, s: usize) {
        let Some(id) = self.id(s) else { return };
        self.current = Some(s);
        let shared = Arc::clone(&self.shared);
        let ctx = StorageCtx {
            workers: &shared.workers,
            node: self.node,
            cache: shared.cache.as_ref(),
            router: shared.router.as_ref(),
            state_dir: shared.registry.state_dir(),
            tasks: Some(&*shared),
            registry: Some(&shared.registry),
        };
        let Some(slot) = self.slots.get_mut(s).and_then(|o| o.as_mut()) else {
            return;
        };
        while let Some(ev) = slot.conn.poll_event() {
            // the connection's log context for everything but the per-command path (entering
            // a span costs a lock in the log filter: not once per command)
            let _in_conn = (!matches!(ev, Event::Command(_))).then(|| slot.span.clone().entered());
            match ev {
                Event::LoggedIn(info) => {
                    if let (SessionType::Normal, Some(name)) =
                        (&info.session_type, &info.target_name)
                    {
                        slot.target = shared.registry.target(name);
                        if let Some(t) = &slot.target {
                            let isid = info.isid;
                            let isid = u64::from_be_bytes([
                                0, 0, isid[0], isid[1], isid[2], isid[3], isid[4], isid[5],
                            ]);
                            let n = scsi::Nexus::iscsi(
                                shared.registry.next_nexus_id(),
                                &info.initiator_name,
                                isid,
                                &t.iqn,
                                t.portal_group_tag(),
                            );
                            for l in t.lun_set().map.values() {
                                l.scsi.nexus_added(&n);
                            }
                            slot.nexus = Some(n);
                        }
                    }
                    slot.io.set_session(info.tsih);
                    slot.events = shared
                        .proto_stats
                        .target(slot.target.as_ref().map_or("", |t| t.iqn.as_str()));
                    slot.events.login("success");
                    slot.span.record("initiator", info.initiator_name.as_str());
                    slot.span.record(
                        "target",
                        info.target_name.as_deref().unwrap_or("(discovery)"),
                    );
                    tracing::info!(tsih = info.tsih, node = self.node, "login complete");
                }
                Event::Command(mut cmd) => {
                    let itt = cmd.itt;
                    let Some(target) = slot.target.as_ref() else {
                        // not reachable: the protocol layer refuses commands in discovery sessions
                        slot.conn.complete_command(
                            itt,
                            completed(scsi::execute_unmapped(&cmd.cdb, &[], false)),
                        );
                        continue;
                    };
                    let mut reply = ReplyTo::new(Arc::clone(&self.sink), id, itt);
                    let generation = target.luns_generation();
                    if slot.luns.as_ref().is_none_or(|(g, _)| *g != generation) {
                        // the table changed (or first command): take the new one
                        slot.luns = Some((generation, target.lun_set()));
                    }
                    let Some((_, luns)) = slot.luns.as_ref() else {
                        continue;
                    };
                    let mut tag = IoTag {
                        started_ns: now_ns(),
                        kind: IoKind::OTHER,
                        stats: luns
                            .map
                            .get(&cmd.lun)
                            .map_or(NO_STATS, |l| slot.io.index_for(&l.stats)),
                    };
                    reply.set_tag(tag);
                    let (answer, kind) =
                        dispatch::execute(&mut cmd, target, luns, slot.nexus.as_ref(), &ctx, reply);
                    tag.kind = kind;
                    slot.io.submitted(&tag);
                    // the write buffer serves the connection's next commands
                    slot.conn.recycle_buffer(std::mem::take(&mut cmd.data_out));
                    match answer {
                        Answer::Now(result) => {
                            slot.io.completed(&tag, result.status, &result.sense);
                            slot.conn.complete_command(itt, result)
                        }
                        Answer::Later(_) => slot.inflight += 1,
                    }
                }
                Event::TaskMgmt(req) => {
                    slot.events.task_management(req.function.label());
                    // The connection has marked this session's affected tasks aborted: their
                    // results will be dropped, and it answers once they have ended (backing
                    // store jobs run to completion; RFC 7143 11.6.1 b). `scsi` decides the
                    // response and the effects; `dispatch` performs the logical units' side.
                    let plan =
                        dispatch::task_management(&req, slot.target.as_deref(), &*shared, id);
                    if plan.close_connections {
                        // RFC 7143 11.5.1: the target drops its connections after answering
                        slot.close_after_tmf = true;
                    }
                    let resp = dispatch::tmf_response(&plan);
                    // long server-side jobs of the ended tasks: an EXTENDED COPY stops between
                    // chunks, a SANITIZE's task ends now (the operation goes on)
                    crate::backend::task_watch::tasks_ended(id, |itt| slot.conn.task_wanted(itt));
                    slot.conn.complete_tmf(req.itt, resp);
                    if slot.close_after_tmf && slot.conn.tmfs_pending() == 0 {
                        slot.closing = true;
                    }
                }
                Event::LoggedOut => {
                    tracing::info!("logout");
                    slot.closing = true;
                }
                Event::Close(err) => {
                    use crate::limits::Limit;
                    use iscsi_proto::{ConnError, ProtocolError};
                    // the limits' refusals are counted and logged once per burst (a
                    // slow-loris flood must not write a line per connection)
                    let limit = match &err {
                        ConnError::LoginTimeout => Some(Limit::LoginTimeout),
                        ConnError::Protocol(ProtocolError::DataSegmentTooLong { .. }) => {
                            Some(Limit::PduSize)
                        }
                        _ => None,
                    };
                    match limit {
                        Some(l) => shared.registry.limits.refuse(
                            l,
                            Some(slot.peer),
                            format_args!("closing connection: {err}"),
                        ),
                        None => tracing::warn!("closing connection: {err}"),
                    }
                    slot.closing = true;
                }
                // reported for counting (issue 12): the metrics wiring comes with the endpoint
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
        // Commands beyond the CmdSN window (MaxQueueCmd outstanding, the session's command
        // limit) or stale are dropped silently on the wire (RFC 7143 4.2.2.1), but counted
        // and logged once per burst here.
        let dropped = slot.conn.stats().dropped_out_of_window;
        if dropped > slot.window_drops {
            let why = slot.conn.take_drop_reason().unwrap_or_default();
            for _ in slot.window_drops..dropped {
                shared.registry.limits.refuse(
                    crate::limits::Limit::CommandWindow,
                    Some(slot.peer),
                    format_args!("command dropped: {why}"),
                );
            }
            slot.window_drops = dropped;
        }
    }
}
