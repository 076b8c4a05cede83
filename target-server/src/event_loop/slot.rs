//! One connection as its event thread holds it ([`Slot`]): its transport link, the protocol
//! connection, what it is logged in to ([`Session`]), where it is in its life ([`Phase`]),
//! its counters; and the one path every command's answer takes to the initiator
//! ([`Slot::complete`]), answered at once or later by the backend.

use std::net::SocketAddr;
use std::sync::Arc;

use iscsi_proto::{CommandResult, Connection};

use crate::backend::payload::Payload;
use crate::io_stats::{ConnIo, IoTag};
use crate::registry::{LunSet, Target};
use crate::transport::Link;

/// A connection owned by an event thread.
pub(super) struct Slot {
    pub link: Box<dyn Link>,
    pub conn: Connection<Payload>,
    pub generation: u64,
    pub peer: SocketAddr,
    pub session: Session,
    pub phase: Phase,
    /// Commands handed to the I/O pool and not completed yet.
    pub inflight: usize,
    /// The link had more input than one pass reads, on this source: it is asked again at the
    /// end of the loop turn.
    pub more_input: Option<usize>,
    /// Commands dropped for a CmdSN outside the window, as counted so far.
    pub window_drops: u64,
    /// The connection's I/O counters, one block per LUN it used.
    pub io: ConnIo,
    /// Its target's protocol event counters (those of target `""` until logged in).
    pub events: Arc<crate::proto_stats::TargetEvents>,
    /// Held for a move to the next numatgtd (live upgrade): moved once quiet.
    pub moving: bool,
    /// Commands over their LUN's QoS limits, to be held by the event thread (moved there
    /// once its events are worked through): when each may start, the command, its limits.
    pub to_hold: Vec<(u64, iscsi_proto::ScsiCommand, Arc<crate::qos::LunQos>)>,
    /// This connection's commands the event thread holds back now.
    pub held_back: usize,
    /// Held commands whose time came, run before the connection's next events.
    pub released: Vec<iscsi_proto::ScsiCommand>,
    /// The command window was narrowed for held commands, last at this time
    /// (`io_stats::now_ns`'s clock): widened again once none was held for a while.
    pub narrowed_since_ns: Option<u64>,
    /// The log context of everything about this connection (`conn{id peer initiator
    /// target}`; initiator and target once logged in).
    pub span: tracing::Span,
}

/// What a connection is logged in to.
pub(super) enum Session {
    /// Nothing with logical units: still logging in, a discovery session, or a normal
    /// session whose target was deleted before the login completed.
    NoTarget,
    /// A normal session of a target.
    Normal(NormalSession),
}

/// A normal session's side of the event loop.
pub(super) struct NormalSession {
    pub target: Arc<Target>,
    /// The session's I_T nexus, for reservations and unit attentions.
    pub nexus: scsi::Nexus,
    /// The target's LUN table as last seen, with its generation.
    pub luns: (u64, Arc<LunSet>),
    /// This nexus's per-initiator QoS limits of the LUNs that have them, by the LUN's
    /// limits (looked up at the session's first command to the LUN).
    pub qos: Vec<(Arc<crate::qos::LunQos>, Arc<crate::qos::Buckets>)>,
}

impl Session {
    /// The normal session, if the connection has one.
    pub fn normal(&self) -> Option<&NormalSession> {
        match self {
            Session::Normal(n) => Some(n),
            Session::NoTarget => None,
        }
    }
}

impl NormalSession {
    /// A session of `target` through `nexus`, announced to the target's logical units.
    pub fn start(target: Arc<Target>, nexus: scsi::Nexus) -> NormalSession {
        let generation = target.luns_generation();
        let set = target.lun_set();
        for l in set.map.values() {
            l.scsi.nexus_added(&nexus);
        }
        NormalSession {
            target,
            nexus,
            luns: (generation, set),
            qos: Vec::new(),
        }
    }

    /// This nexus's per-initiator limits of the LUN whose limits are `lun`: found in the
    /// session's list, else made and kept there.
    pub fn initiator_qos(
        &mut self,
        lun: &Arc<crate::qos::LunQos>,
        now_ns: u64,
    ) -> &crate::qos::Buckets {
        let i = match self.qos.iter().position(|(q, _)| Arc::ptr_eq(q, lun)) {
            Some(i) => i,
            None => {
                self.qos
                    .push((Arc::clone(lun), lun.initiator(self.nexus.id, now_ns)));
                self.qos.len() - 1
            }
        };
        &self.qos[i].1
    }

    /// Takes the target's LUN table again if it has changed since it was last seen (or
    /// first command).
    pub fn refresh_luns(&mut self) {
        let generation = self.target.luns_generation();
        if self.luns.0 != generation {
            self.luns = (generation, self.target.lun_set());
        }
    }

    /// The session ends: its nexus leaves the target's logical units. Returns the LUNs
    /// whose reservations several gateways share on which the nexus held the SPC-2
    /// reservation: released here, the release is still to be written to the cluster.
    pub fn end(&self) -> Vec<Arc<crate::registry::Lun>> {
        let mut shared = Vec::new();
        for l in self.target.lun_set().map.values() {
            if l.scsi.nexus_removed(self.nexus.id) && l.shared_pr.is_some() {
                shared.push(Arc::clone(l));
            }
        }
        for (q, _) in &self.qos {
            q.forget_initiator(self.nexus.id);
        }
        shared
    }
}

/// Where a connection is in its life, as the event loop sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Open,
    /// A TARGET COLD RESET was received: the connection finishes once every task management
    /// response is out (RFC 7143 11.5.1: the target drops its connections after answering).
    CloseAfterTmf,
    /// Logged out, failed, reset or refused: no more input is read; what is queued goes
    /// out, then the connection closes (when its link allows: [`Link::may_close`]).
    Finishing,
}

impl Slot {
    /// A new connection: open, not logged in, nothing in flight.
    pub fn new(
        link: Box<dyn Link>,
        conn: Connection<Payload>,
        generation: u64,
        peer: SocketAddr,
        events: Arc<crate::proto_stats::TargetEvents>,
        span: tracing::Span,
    ) -> Slot {
        Slot {
            link,
            conn,
            generation,
            peer,
            session: Session::NoTarget,
            phase: Phase::Open,
            inflight: 0,
            more_input: None,
            window_drops: 0,
            moving: false,
            to_hold: Vec::new(),
            held_back: 0,
            released: Vec::new(),
            narrowed_since_ns: None,
            io: Default::default(),
            events,
            span,
        }
    }

    /// The connection is finishing.
    pub fn finishing(&self) -> bool {
        self.phase == Phase::Finishing
    }

    /// Finish the connection (from any phase).
    pub fn finish(&mut self) {
        self.phase = Phase::Finishing;
    }

    /// A TARGET COLD RESET: close once it (and every other task management request) has
    /// been answered ([`Slot::tmf_answered`]).
    pub fn close_after_tmf(&mut self) {
        if self.phase == Phase::Open {
            self.phase = Phase::CloseAfterTmf;
        }
    }

    /// A task management response may have gone out: the cold reset's close goes ahead once
    /// none is pending.
    pub fn tmf_answered(&mut self) {
        if self.phase == Phase::CloseAfterTmf && self.conn.tmfs_pending() == 0 {
            self.phase = Phase::Finishing;
        }
    }

    /// A command's answer, given at once or later by the backend: the command's write
    /// buffer back to the connection (empty if none), the answer counted and queued for the
    /// initiator. Answering a command may release a task management response that waited
    /// for it, so a pending close after a cold reset is checked again.
    pub fn complete(
        &mut self,
        itt: u32,
        tag: &IoTag,
        result: CommandResult<Payload>,
        buffer: Vec<u8>,
    ) {
        self.conn.recycle_buffer(buffer);
        self.io.completed(tag, result.status, &result.sense);
        self.conn.complete_command(itt, result);
        self.tmf_answered();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{Feed, Input, LinkError, Ready, Sources};

    /// A link that carries nothing.
    struct NoLink;

    impl Link for NoLink {
        fn driver(&self) -> config::Driver {
            config::Driver::Iscsi
        }
        fn register(&mut self, _: &Sources<'_>) -> std::io::Result<()> {
            Ok(())
        }
        fn on_ready(&mut self, _: usize, _: Ready, _: Feed<'_>) -> Input {
            Input::Idle
        }
        fn flush(&mut self, _: &mut Connection<Payload>) -> Result<(), LinkError> {
            Ok(())
        }
        fn may_close(&mut self, _: &Connection<Payload>) -> bool {
            true
        }
        fn retire(&mut self, _: &mio::Registry) {}
    }

    fn slot() -> Slot {
        let addr = SocketAddr::from(([127, 0, 0, 1], 3260));
        let conn = Connection::new(Default::default(), addr, addr);
        let events = crate::proto_stats::ProtoStats::default().target("");
        Slot::new(
            Box::new(NoLink),
            conn,
            1,
            addr,
            events,
            tracing::Span::none(),
        )
    }

    fn good() -> CommandResult<Payload> {
        CommandResult {
            status: 0,
            sense: Vec::new(),
            data: None,
            write_transfer_len: None,
        }
    }

    #[test]
    fn cold_reset_closes_once_answered() {
        let mut s = slot();
        s.close_after_tmf();
        assert_eq!(s.phase, Phase::CloseAfterTmf);
        assert!(!s.finishing());
        s.tmf_answered();
        assert!(s.finishing());
    }

    #[test]
    fn an_answer_completes_a_pending_cold_reset_close() {
        // immediate and deferred answers take the same path: either may be the last one a
        // task management response waited for
        let mut s = slot();
        s.complete(7, &IoTag::NONE, good(), Vec::new());
        assert_eq!(s.phase, Phase::Open, "no close without a cold reset");
        s.phase = Phase::CloseAfterTmf;
        s.complete(8, &IoTag::NONE, good(), Vec::new());
        assert!(s.finishing());
    }

    #[test]
    fn finishing_is_final() {
        let mut s = slot();
        s.finish();
        s.close_after_tmf();
        assert!(s.finishing());
        s.tmf_answered();
        assert!(s.finishing());
    }
}
