//! iSER (RFC 7145, iSCSI over RDMA) behind the transport seam. Its portals are RDMA CM
//! listeners ([`IserListener`]); a connect request ([`Incoming`]) is served by an event
//! thread of its RDMA device's NUMA node; a connection ([`IserLink`]) polls two sources, its
//! completion channel (receives to the protocol connection, finished RDMA READs, freed send
//! buffers) and its CM event channel; a closed link is kept until its flushed requests and
//! the CM's TIMEWAIT_EXIT are back ([`DRAIN_LIMIT`] at most).
//!
//! Split: `listen` (RDMA listeners and connect requests), `link` (one connection's RDMA side:
//! set-up, completions, posting, teardown), `ops` (send-queue requests in flight, buffer
//! slots), `share` (what the connections of one event thread on one device share: the
//! shared receive queue, staging chunks), `device` (what the connections on one RDMA device
//! share), `error`.

mod device;
mod error;
mod landings;
mod link;
mod listen;
mod ops;
mod share;

pub use error::IserError;
pub use listen::IserListener;

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use iscsi_proto::Connection;
use mio::unix::SourceFd;
use mio::{Interest, Token};

use super::{Accepted, Adopted, Feed, Input, Link, LinkError, Listener, Placement, Ready, Sources};
use crate::backend::landing::Landing;
use crate::backend::payload::Payload;
use link::IserLink;
use listen::Incoming;

/// Longest wait for a closed link's flushed requests and TIMEWAIT_EXIT before its
/// resources are destroyed anyway (destroying the queue pair first is safe; the wait only
/// spares the device work on freed memory).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// The link's poll sources: the completion channels of its receive and send sides and its
/// CM event channel.
const COMPLETIONS: usize = 0;
const CM_EVENTS: usize = 1;
const SEND_COMPLETIONS: usize = 2;

impl Listener for IserListener {
    fn driver(&self) -> config::Driver {
        config::Driver::Iser
    }

    fn addr(&self) -> SocketAddr {
        IserListener::addr(self)
    }

    fn register(&mut self, registry: &mio::Registry, token: Token) -> io::Result<()> {
        registry.register(&mut SourceFd(&self.as_raw_fd()), token, Interest::READABLE)
    }

    fn deregister(&mut self, registry: &mio::Registry) {
        let _ = registry.deregister(&mut SourceFd(&self.as_raw_fd()));
    }

    fn accept(&mut self, out: &mut dyn FnMut(Box<dyn Accepted>)) {
        for inc in self.accept_all() {
            out(Box::new(inc));
        }
    }

    fn on_tick(&mut self) {
        self.revive();
    }
}

impl Accepted for Incoming {
    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn placement(&self, topology: &cache::Topology) -> Placement {
        Placement::Node(self.node.and_then(|n| topology.index_of_os_node(n)))
    }

    fn adopt(
        self: Box<Self>,
        cache: Option<&Arc<cache::BlockCache>>,
    ) -> Result<Adopted, LinkError> {
        let local = self.local;
        let (link, keys) = IserLink::accept(*self, cache)?;
        tracing::debug!(device = link.device(), "iSER connection accepted");
        Ok(Adopted {
            link: Box::new(link),
            local,
            login_keys: Some(Box::new(keys)),
        })
    }
}

impl Link for IserLink {
    fn driver(&self) -> config::Driver {
        config::Driver::Iser
    }

    fn register(&mut self, sources: &Sources<'_>) -> io::Result<()> {
        sources.register(
            COMPLETIONS,
            &mut SourceFd(&self.cq_fd()),
            Interest::READABLE,
        )?;
        sources.register(
            SEND_COMPLETIONS,
            &mut SourceFd(&self.scq_fd()),
            Interest::READABLE,
        )?;
        sources.register(CM_EVENTS, &mut SourceFd(&self.cm_fd()), Interest::READABLE)
    }

    fn on_ready(&mut self, source: usize, _ready: Ready, feed: Feed<'_>) -> Input {
        match source {
            // completions are taken even while the connection finishes: its last Sends are
            // among them
            COMPLETIONS => match self.complete(feed.conn, feed.dir, feed.now_ms) {
                Ok(()) => Input::Drained,
                Err(e) => Input::Ended(e.into()),
            },
            SEND_COMPLETIONS => match self.complete_send(feed.conn) {
                Ok(()) => Input::Drained,
                Err(e) => Input::Ended(e.into()),
            },
            CM_EVENTS => match self.cm_events() {
                Ok(()) => Input::Idle,
                Err(e) => Input::Ended(e.into()),
            },
            _ => Input::Idle,
        }
    }

    fn flush(&mut self, conn: &mut Connection<Payload>) -> Result<(), LinkError> {
        self.pump(conn).map_err(LinkError::from)
    }

    fn sends_from_blocks(&self) -> bool {
        IserLink::sends_from_blocks(self)
    }

    fn land(&mut self, itt: u32, landing: Landing) -> Option<Landing> {
        IserLink::land(self, itt, landing)
    }

    fn take_landing(&mut self, itt: u32) -> Option<Landing> {
        IserLink::take_landing(self, itt)
    }

    /// Once everything it sent has completed: a Send still on the queue would be flushed
    /// by the disconnect.
    fn may_close(&mut self, _conn: &Connection<Payload>) -> bool {
        IserLink::may_close(self)
    }

    fn on_tick(&mut self, now_ms: u64) -> Result<(), LinkError> {
        self.watchdog(now_ms).map_err(LinkError::from)
    }

    fn retire(&mut self, registry: &mio::Registry) {
        let _ = registry.deregister(&mut SourceFd(&self.cq_fd()));
        let _ = registry.deregister(&mut SourceFd(&self.scq_fd()));
        let _ = registry.deregister(&mut SourceFd(&self.cm_fd()));
        self.disconnect();
    }

    fn drained(&mut self) -> bool {
        if self.drain() {
            return true;
        }
        if self
            .disconnected_since()
            .is_none_or(|since| since.elapsed() > DRAIN_LIMIT)
        {
            tracing::warn!(
                device = self.device(),
                "iSER connection teardown incomplete after {DRAIN_LIMIT:?}: destroying it"
            );
            return true;
        }
        false
    }
}
