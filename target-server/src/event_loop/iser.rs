//! iSER connections in an event thread: accepting on the iSER portals (each connection goes
//! to a thread of its RDMA device's NUMA node), adopting a connection (its completion
//! channel and CM channel in this thread's poll set), completions and CM events, posting
//! what the protocol queued, and the teardown that waits for flushed requests and the CM's
//! TIMEWAIT_EXIT before the link's memory is freed. The protocol side (`commands`) is the
//! same as for TCP.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Token};

use super::{EventThread, ISER_CM_BASE, ISER_LISTENER_BASE, Link, Msg};
use crate::iser_link::{Incoming, IserLink, IserListener};
use crate::registry::LoginContext;

/// Longest wait for a closed link's flushed requests and TIMEWAIT_EXIT before its
/// resources are destroyed anyway (destroying the queue pair first is safe; the wait only
/// spares the device work on freed memory).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

impl EventThread {
    /// Gives this thread the iSER portals to listen on (before `run`).
    pub fn set_iser_listeners(&mut self, listeners: Vec<IserListener>) {
        self.iser_listeners = listeners;
    }

    pub(super) fn register_iser_listeners(&mut self) {
        for (i, l) in self.iser_listeners.iter().enumerate() {
            let fd: RawFd = std::os::fd::AsRawFd::as_raw_fd(l);
            if let Err(e) = self.poll.registry().register(
                &mut SourceFd(&fd),
                Token(ISER_LISTENER_BASE + i),
                Interest::READABLE,
            ) {
                tracing::error!(portal = %l.addr(), "cannot poll iSER listener: {e}");
            }
        }
    }

    pub(super) fn is_iser(&self, s: usize) -> bool {
        matches!(
            self.slots
                .get(s)
                .and_then(|o| o.as_ref())
                .map(|sl| &sl.link),
            Some(Link::Iser(_))
        )
    }

    pub(super) fn accept_iser(&mut self, i: usize) {
        let Some(l) = self.iser_listeners.get(i) else {
            return;
        };
        for inc in l.accept_all() {
            if self.stopping {
                continue; // dropped: the request is refused
            }
            if !self.shared.admit(inc.peer) {
                continue;
            }
            let node = inc
                .node
                .and_then(|n| self.shared.topology.index_of_os_node(n));
            let t = self.shared.thread_on_node(node);
            if t == self.index {
                self.adopt_iser(inc);
            } else if let Some(inbox) = self.shared.inbox(t) {
                inbox.send(Msg::NewIser(Box::new(inc)));
            }
        }
    }

    pub(super) fn adopt_iser(&mut self, inc: Incoming) {
        let (peer, local) = (inc.peer, inc.local);
        let (link, keys) = match IserLink::accept(inc, self.shared.cache.as_ref()) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(%peer, "iSER connection refused: {e}");
                return;
            }
        };
        let s = self.alloc_slot();
        let (cq, cm) = (link.cq_fd(), link.cm_fd());
        let reg = self.poll.registry();
        let r = reg
            .register(&mut SourceFd(&cq), Token(s), Interest::READABLE)
            .and_then(|()| {
                reg.register(
                    &mut SourceFd(&cm),
                    Token(ISER_CM_BASE + s),
                    Interest::READABLE,
                )
            });
        if let Err(e) = r {
            tracing::error!(%peer, "cannot poll iSER connection: {e}");
            let _ = reg.deregister(&mut SourceFd(&cq));
            self.free.push(s);
            let mut link = Box::new(link);
            link.disconnect();
            self.draining.push((link, Instant::now()));
            return;
        }
        tracing::debug!(%peer, device = link.device(), thread = self.index, node = self.node,
            "iSER connection accepted");
        self.install(s, Link::Iser(Box::new(link)), peer, local, |conn| {
            conn.set_rdma_transport(Box::new(keys))
        });
    }

    /// Completions of connection `s`: received PDUs to the protocol, then its events, then
    /// what it has to send.
    pub(super) fn on_completions(&mut self, s: usize) {
        let Some(id) = self.id(s) else { return };
        self.current = Some(s);
        let now = self.now_ms();
        let shared = Arc::clone(&self.shared);
        let Some(slot) = self.slots.get_mut(s).and_then(|o| o.as_mut()) else {
            return;
        };
        let Link::Iser(link) = &mut slot.link else {
            return;
        };
        let ctx = LoginContext {
            registry: &shared.registry,
            me: id,
            control: &*shared,
            transport: config::Driver::Iser,
        };
        let r = link.complete(&mut slot.conn, &ctx, now);
        self.process_events(s);
        match r {
            Ok(()) => self.flush(s),
            Err(e) => self.close(s, &e),
        }
    }

    /// CM events of connection `s`.
    pub(super) fn on_cm(&mut self, s: usize) {
        self.current = Some(s);
        let Some(Link::Iser(link)) = self
            .slots
            .get_mut(s)
            .and_then(|o| o.as_mut())
            .map(|sl| &mut sl.link)
        else {
            return;
        };
        match link.cm_events() {
            Ok(()) => self.flush(s),
            Err(e) => self.close(s, &e),
        }
    }

    /// Posts what connection `s` has queued; closes it once it is finished and everything
    /// it sent has completed (a Send still on the queue would be flushed by the disconnect).
    pub(super) fn flush_iser(&mut self, s: usize) {
        let Some(slot) = self.slots.get_mut(s).and_then(|o| o.as_mut()) else {
            return;
        };
        let Link::Iser(link) = &mut slot.link else {
            return;
        };
        if let Err(e) = link.pump(&mut slot.conn) {
            return self.close(s, &e);
        }
        let finished = slot.closing || slot.conn.is_closing();
        if finished && link.may_close() {
            self.close(s, "connection finished");
        }
    }

    /// A closed connection's link: disconnected, out of the poll set, kept until drained.
    pub(super) fn retire_iser(&mut self, mut link: Box<IserLink>) {
        let reg = self.poll.registry();
        let _ = reg.deregister(&mut SourceFd(&link.cq_fd()));
        let _ = reg.deregister(&mut SourceFd(&link.cm_fd()));
        link.disconnect();
        if !link.drain() {
            self.draining.push((link, Instant::now()));
        }
    }

    /// Frees the links whose teardown has completed (or timed out).
    pub(super) fn drain_iser(&mut self) {
        self.draining.retain_mut(|(link, since)| {
            if link.drain() {
                return false;
            }
            if since.elapsed() > DRAIN_LIMIT {
                tracing::warn!(
                    device = link.device(),
                    "iSER connection teardown incomplete after {DRAIN_LIMIT:?}: destroying it"
                );
                return false;
            }
            true
        });
    }
}
