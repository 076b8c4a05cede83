//! The transport seam: what an event thread needs of whatever carries a connection's PDUs,
//! and the one place where transports are registered. The event loop sees only this
//! module's items; TCP (`tcp`) and iSER (`iser`, RDMA, behind the `iser` feature) implement
//! them, with their internals private.
//!
//! - [`Listener`]: a portal. Accepts what is waiting and says where each connection is to
//!   be served ([`Placement`]: TCP by the node of the NIC it arrived on, iSER by the node of
//!   its RDMA device).
//! - [`Accepted`]: a connection accepted and not adopted yet; it may travel to the event
//!   thread of its node. Adopting it makes its [`Link`] (and the login keys the transport
//!   adds, [`Adopted::login_keys`]).
//! - [`Link`]: one connection's transport side, owned by its slot in the event thread: its
//!   poll sources ([`Sources`]), feeding what arrived to the protocol connection
//!   ([`Link::on_ready`]), sending what the connection queued ([`Link::flush`]), when a
//!   finishing connection may be closed ([`Link::may_close`]), and its teardown
//!   ([`Link::retire`], [`Link::drained`]). Its [`config::Driver`] names it in logs, metrics
//!   and the sessions the registry records.
//!
//! Why traits (`Box<dyn Link>`) and not an enum of transports: an enum is matched wherever a
//! transport differs, and with iSER optional each of those matches carries a
//! `cfg(feature = "iser")` arm — that is how iSER came to be woven into the TCP driver. With
//! traits the event loop has one code path and no `cfg`, and a transport is one module plus
//! its lines here ([`bind_iser`], a [`LinkError`] variant). The price is a few indirect calls
//! per wakeup of a connection (a wakeup makes up to 32 socket reads, or takes every
//! completion queued; nothing is dispatched per PDU) and a few boxes per accepted
//! connection, none per I/O.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use iscsi_proto::conn::TransportKeys;
use iscsi_proto::{Connection, Directory};
use mio::{Interest, Token};

use crate::backend::landing::Landing;
use crate::backend::payload::Payload;

#[cfg(feature = "iser")]
mod iser;
mod iser_stats;
mod tcp;

pub use iser_stats::{
    Call as IserCall, DataPath as IserDataPath, Kind as IserMemoryKind, snapshot as iser_gauges,
};
pub use tcp::bind_portal;

/// Poll sources (file descriptors) one link may register; it numbers them `0..MAX_SOURCES`.
pub const MAX_SOURCES: usize = 4;

/// A portal listening for connections of one transport.
pub trait Listener: Send {
    /// The transport it accepts.
    fn driver(&self) -> config::Driver;
    /// The address it listens on.
    fn addr(&self) -> SocketAddr;
    /// Puts it in a poll set (readable: connections to accept).
    fn register(&mut self, registry: &mio::Registry, token: Token) -> io::Result<()>;
    /// Takes it out of the poll set.
    fn deregister(&mut self, registry: &mio::Registry);
    /// Takes every connection waiting, each to `out`, without blocking. Failures are logged
    /// here (bad connect requests are refused); the next readiness event tries again.
    fn accept(&mut self, out: &mut dyn FnMut(Box<dyn Accepted>));
    /// The timer's call (every tick of the thread that polls it, about twice a second):
    /// a portal whose device went away tries to listen again (iSER). Never blocks long.
    fn on_tick(&mut self) {}
}

/// Where an accepted connection is to be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// On the NUMA node of the network device carrying this local address (TCP).
    Nic(IpAddr),
    /// On this node (the topology's dense index; iSER: its RDMA device's), or on any when
    /// it is unknown.
    Node(Option<usize>),
}

/// A connection accepted by a [`Listener`], not adopted by an event thread yet.
pub trait Accepted: Send {
    /// The initiator's address.
    fn peer(&self) -> SocketAddr;
    /// Where it is to be served, on `topology`'s nodes.
    fn placement(&self, topology: &cache::Topology) -> Placement;
    /// Sets its transport side up in the calling event thread. `Err`: refused (logged by
    /// the caller), its resources released.
    fn adopt(self: Box<Self>, cache: Option<&Arc<cache::BlockCache>>)
    -> Result<Adopted, LinkError>;
}

/// An adopted connection, ready for its slot.
pub struct Adopted {
    pub link: Box<dyn Link>,
    /// The local address it arrived on (its portal's address, for login and SendTargets).
    pub local: SocketAddr,
    /// Login keys of the transport's own (iSER's RFC 7145 keys): given to the protocol
    /// connection before its first PDU, which then runs in RDMA datamover mode.
    pub login_keys: Option<Box<dyn TransportKeys>>,
}

/// How a poll source of a link became ready.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ready {
    pub readable: bool,
    pub writable: bool,
    /// The peer closed or reset its side, or the source reports an error.
    pub hangup: bool,
}

impl Ready {
    /// Readable: how the event loop asks again of a link that had more input
    /// ([`Input::More`]).
    pub const READABLE: Ready = Ready {
        readable: true,
        writable: false,
        hangup: false,
    };
}

/// What [`Link::on_ready`] gets to work with.
pub struct Feed<'a> {
    /// The protocol connection, fed what arrived.
    pub conn: &'a mut Connection<Payload>,
    /// The login's view of the registry.
    pub dir: &'a dyn Directory,
    pub now_ms: u64,
    /// The connection is finishing: a transport that can leave input unread does (TCP
    /// stops reading; iSER still takes completions, its Sends' among them).
    pub finishing: bool,
}

/// What a link did with a readiness event.
#[derive(Debug)]
pub enum Input {
    /// Not an input event (writable only, CM events): nothing went to the protocol
    /// connection.
    Idle,
    /// What was waiting went to the protocol connection (possibly nothing, or nothing read
    /// because the connection is finishing): its events are to be processed.
    Drained,
    /// Some went, and more is waiting (the read budget ran out): the event loop asks again
    /// ([`Ready::READABLE`], same source) at the end of this turn, once the other
    /// connections had theirs.
    More,
    /// The link is over (end of stream, disconnect, failure): the connection's events are
    /// processed, then it is closed with this reason.
    Ended(LinkError),
}

/// Registers a link's poll sources under the tokens the event loop gives them.
pub struct Sources<'a> {
    registry: &'a mio::Registry,
    slot: usize,
    token: fn(usize, usize) -> Token,
}

impl<'a> Sources<'a> {
    /// Sources of the connection in `slot`; `token(slot, source)` is the poll token of each.
    pub fn new(registry: &'a mio::Registry, slot: usize, token: fn(usize, usize) -> Token) -> Self {
        Sources {
            registry,
            slot,
            token,
        }
    }

    /// Polls `s` as the link's source number `source` (below [`MAX_SOURCES`]).
    pub fn register<S>(&self, source: usize, s: &mut S, interest: Interest) -> io::Result<()>
    where
        S: mio::event::Source + ?Sized,
    {
        if source >= MAX_SOURCES {
            return Err(io::Error::other("poll source number out of range"));
        }
        self.registry
            .register(s, (self.token)(self.slot, source), interest)
    }
}

/// One connection's transport side (see the module documentation). The event loop calls it
/// from the connection's event thread only.
pub trait Link: Send {
    /// The transport, for logs, metrics and the session's record.
    fn driver(&self) -> config::Driver;
    /// Puts the link's sources in the thread's poll set. On `Err` the link is retired.
    fn register(&mut self, sources: &Sources<'_>) -> io::Result<()>;
    /// Source `source` is ready: hand what arrived to the protocol connection.
    fn on_ready(&mut self, source: usize, ready: Ready, feed: Feed<'_>) -> Input;
    /// Sends (or posts) what the connection has queued, as far as the transport can now.
    fn flush(&mut self, conn: &mut Connection<Payload>) -> Result<(), LinkError>;
    /// The connection is finishing (logged out, failed, reset): true once it may be closed
    /// without losing what it sent (TCP: nothing left to write; iSER: its last Sends have
    /// completed, or a time limit passed).
    fn may_close(&mut self, conn: &Connection<Payload>) -> bool;
    /// The connection is closed: out of the poll set, the teardown started.
    fn retire(&mut self, registry: &mio::Registry);
    /// True when READ data leaves straight from pinned cache blocks on any node (no CPU copy
    /// of the bytes: iSER once the device has the cache arenas registered). The backend then
    /// serves a cached READ on the connection's own node instead of forwarding it to the
    /// node that holds its blocks, which would gather them into a new buffer to send.
    fn sends_from_blocks(&self) -> bool {
        false
    }

    /// Takes `landing`: the place the server chose for the write data of command `itt`
    /// that the connection is about to fetch ([`iscsi_proto::Event::DataFetch`]), for a
    /// transport that fetches write data itself and can have it put there (reported with
    /// `Connection::data_landed`). Gives it back when it cannot use it — the default: a
    /// transport whose write data arrives in PDUs.
    fn land(&mut self, _itt: u32, landing: Landing) -> Option<Landing> {
        Some(landing)
    }

    /// The landing given for command `itt`, once nothing can write into it any more (its
    /// fetch is over): for the command delivered with landed bytes, or to be dropped.
    fn take_landing(&mut self, _itt: u32) -> Option<Landing> {
        None
    }
    /// True when the connection can move to another process with its socket (live
    /// upgrade, [`Link::detach`]): TCP. An RDMA connection's verbs objects belong to the
    /// process.
    fn can_move(&self) -> bool {
        false
    }

    /// Takes the link out of the poll set and gives a descriptor of its socket for another
    /// process (only when [`Link::can_move`]; `None` otherwise). The link is dropped
    /// afterwards without ending the connection: the descriptor keeps it open.
    fn detach(&mut self, _registry: &mio::Registry) -> Option<std::os::fd::OwnedFd> {
        None
    }

    /// Every timer tick (about a second) while the connection is open: `Err` ends it (iSER:
    /// nothing it sent completed for too long).
    fn on_tick(&mut self, _now_ms: u64) -> Result<(), LinkError> {
        Ok(())
    }
    /// True once a retired link may be dropped (iSER: its flushed requests are back and the
    /// CM left TIMEWAIT, or that took too long); asked again at every timer tick until then.
    fn drained(&mut self) -> bool {
        true
    }
}

/// Why a link ended: the close reason of its connection. Each transport's errors are its own
/// type; this is their sum.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(transparent)]
    Tcp(#[from] tcp::TcpError),
    #[cfg(feature = "iser")]
    #[error(transparent)]
    Iser(#[from] iser::IserError),
}

/// Why a portal could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[cfg(not(feature = "iser"))]
    #[error("this numatgtd is built without iSER (cargo feature `iser`)")]
    IserNotBuilt,
    #[cfg(feature = "iser")]
    #[error(transparent)]
    Rdma(#[from] rdma::Error),
}

/// A TCP portal from a bound, non-blocking listening socket ([`bind_portal`], or the
/// management plane's).
pub fn tcp_listener(l: std::net::TcpListener) -> Box<dyn Listener> {
    Box::new(tcp::TcpPortal::new(l))
}

/// A TCP connection moved from another process (live upgrade): its socket, to be adopted
/// like an accepted one. `Err`: not a connected TCP socket.
pub fn moved_tcp(fd: std::os::fd::OwnedFd) -> io::Result<Box<dyn Accepted>> {
    tcp::moved(fd)
}

/// An iSER portal listening on `addr` (RDMA CM).
#[cfg(feature = "iser")]
pub fn bind_iser(addr: SocketAddr) -> Result<Box<dyn Listener>, BindError> {
    Ok(Box::new(iser::IserListener::bind(addr)?))
}

/// An iSER portal: not in this build.
#[cfg(not(feature = "iser"))]
pub fn bind_iser(_addr: SocketAddr) -> Result<Box<dyn Listener>, BindError> {
    Err(BindError::IserNotBuilt)
}
