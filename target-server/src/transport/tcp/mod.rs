//! iSCSI over TCP behind the transport seam: portals ([`TcpPortal`], opened by
//! [`bind_portal`]), accepted sockets (served on the event thread of the node of the NIC
//! they arrived on), and a connection's socket ([`link::TcpLink`]: reads into the protocol
//! connection's receive buffer, one writev of what it queued).
//!
//! Split: `portal` (opening a listening socket), `link` (one connection's socket); this
//! file owns accepting and the errors.

mod link;
mod portal;

pub use portal::bind_portal;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Token};

use super::{Accepted, Adopted, LinkError, Listener, Placement};
use link::TcpLink;

/// Why a TCP connection ended.
#[derive(Debug, thiserror::Error)]
pub enum TcpError {
    /// End of stream.
    #[error("connection closed by the initiator")]
    Closed,
    /// A read failed (a reset, mostly): the same end, seen differently.
    #[error("connection closed by the initiator")]
    Read(#[source] io::Error),
    /// A writev wrote nothing.
    #[error("socket closed for writing")]
    WriteClosed,
    #[error("write to the initiator failed")]
    Write(#[source] io::Error),
    /// The socket failed between accept and adoption.
    #[error("connection lost before adoption: {0}")]
    Lost(#[source] io::Error),
}

/// A listening TCP portal.
pub struct TcpPortal {
    listener: TcpListener,
    addr: SocketAddr,
}

impl TcpPortal {
    pub fn new(l: std::net::TcpListener) -> TcpPortal {
        let addr = l
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        TcpPortal {
            listener: TcpListener::from_std(l),
            addr,
        }
    }
}

impl Listener for TcpPortal {
    fn driver(&self) -> config::Driver {
        config::Driver::Iscsi
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn register(&mut self, registry: &mio::Registry, token: Token) -> io::Result<()> {
        registry.register(&mut self.listener, token, Interest::READABLE)
    }

    fn deregister(&mut self, registry: &mio::Registry) {
        let _ = registry.deregister(&mut self.listener);
    }

    fn accept(&mut self, out: &mut dyn FnMut(Box<dyn Accepted>)) {
        loop {
            match self.listener.accept() {
                Ok((sock, peer)) => out(Box::new(TcpAccepted { sock, peer })),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: log and retry at the next readiness event
                    tracing::warn!("accept failed: {e}");
                    return;
                }
            }
        }
    }
}

/// A connected socket from another process (live upgrade), as if accepted.
pub(super) fn moved(fd: std::os::fd::OwnedFd) -> io::Result<Box<dyn Accepted>> {
    let std = std::net::TcpStream::from(fd);
    std.set_nonblocking(true)?;
    let peer = std.peer_addr()?;
    Ok(Box::new(TcpAccepted {
        sock: TcpStream::from_std(std),
        peer,
    }))
}

/// An accepted socket.
struct TcpAccepted {
    sock: TcpStream,
    peer: SocketAddr,
}

impl Accepted for TcpAccepted {
    fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn placement(&self, _topology: &cache::Topology) -> Placement {
        match self.sock.local_addr() {
            // the NIC's node is looked up once per local address (`Shared::thread_for`)
            Ok(local) => Placement::Nic(local.ip()),
            Err(_) => Placement::Node(None),
        }
    }

    fn adopt(
        self: Box<Self>,
        _cache: Option<&Arc<cache::BlockCache>>,
    ) -> Result<Adopted, LinkError> {
        let TcpAccepted { sock, peer } = *self;
        if let Err(e) = sock.set_nodelay(true) {
            tracing::debug!(%peer, "TCP_NODELAY: {e}");
        }
        let local = sock.local_addr().map_err(TcpError::Lost)?;
        Ok(Adopted {
            link: Box::new(TcpLink::new(sock)),
            local,
            login_keys: None,
        })
    }
}
