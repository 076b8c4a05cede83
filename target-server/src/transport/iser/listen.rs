//! iSER portals: an RDMA CM listener per portal ([`IserListener`], its event channel in an
//! event thread's poll set) and the connect requests it takes ([`Incoming`]): the iSER
//! private data checked, the new id moved to an event channel of its own, the NUMA node of
//! its RDMA device found, so that the event thread of that node adopts it. A portal closed by
//! the removal of its device listens again when a device has its address once more.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use iser::proto::CmRequest;
use rdma::{CmEvent, CmEventKind, CmId, Context, EventChannel, Listener};

/// A connect request ready to be adopted by an event thread.
pub struct Incoming {
    pub(super) id: CmId,
    pub(super) channel: EventChannel,
    pub(super) request: CmRequest,
    /// RDMA READs the initiator serves at once (our initiator depth, at most).
    pub(super) initiator_depth: u8,
    pub peer: SocketAddr,
    pub local: SocketAddr,
    /// NUMA node of the RDMA device (None: not reported).
    pub node: Option<usize>,
}

/// A listening iSER portal.
pub struct IserListener {
    listener: Listener,
    addr: SocketAddr,
    /// Closed by a device removal: since when, and when listening was last tried again.
    closed: Option<Closed>,
}

/// A portal closed by the removal of its device.
struct Closed {
    since: Instant,
    tried: Instant,
}

/// Connect requests queued on a portal (rdma_listen's backlog).
const BACKLOG: i32 = 128;
/// How often a closed portal tries to listen again.
const RETRY: Duration = Duration::from_secs(2);

impl IserListener {
    /// Listens for iSER connections on `addr` (RDMA CM, port space TCP).
    pub fn bind(addr: SocketAddr) -> Result<IserListener, rdma::Error> {
        Ok(IserListener {
            listener: Listener::bind(addr, BACKLOG)?,
            addr,
            closed: None,
        })
    }

    /// The portal address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connect requests waiting, each checked and prepared; bad ones are rejected and
    /// logged. Never blocks. When the portal's RDMA device is removed, the listening id is
    /// destroyed (the removal waits for it) and the portal takes no more connections.
    pub fn accept_all(&mut self) -> Vec<Incoming> {
        let mut out = Vec::new();
        loop {
            match self.listener.get_event() {
                Ok(Some(ev)) if ev.kind == CmEventKind::ConnectRequest => {
                    if let Some(inc) = self.prepare(ev) {
                        out.push(inc);
                    }
                }
                Ok(Some(ev))
                    if ev.kind == CmEventKind::DeviceRemoval
                        && ev.id == self.listener.handle()
                        && self.listener.is_open() =>
                {
                    tracing::warn!(portal = %self.addr,
                        "RDMA device removed: the iSER portal is closed until an RDMA device has its address again");
                    self.listener.close();
                    let now = Instant::now();
                    self.closed = Some(Closed {
                        since: now,
                        tried: now,
                    });
                    super::device::watch_removal();
                }
                Ok(Some(ev)) => {
                    tracing::debug!(portal = %self.addr, kind = ?ev.kind, "CM event on the listener")
                }
                Ok(None) => return out,
                Err(e) => {
                    tracing::warn!(portal = %self.addr, "reading iSER connect requests: {e}");
                    return out;
                }
            }
        }
    }

    /// A portal closed by a device removal listens again once an RDMA device has its
    /// address (the device came back, or the address moved to another one): tried every
    /// [`RETRY`], on the same event channel (the registered fd stays valid).
    pub fn revive(&mut self) {
        let Some(c) = &mut self.closed else {
            return;
        };
        if c.tried.elapsed() < RETRY {
            return;
        }
        c.tried = Instant::now();
        match self.listener.reopen(self.addr, BACKLOG) {
            Ok(()) => {
                tracing::info!(portal = %self.addr, closed_secs = c.since.elapsed().as_secs(),
                    "the iSER portal listens again: an RDMA device has its address");
                self.closed = None;
            }
            Err(e) => {
                tracing::debug!(portal = %self.addr, "the iSER portal cannot listen yet: {e}")
            }
        }
    }

    fn prepare(&self, mut ev: CmEvent) -> Option<Incoming> {
        let mut id = ev.new_id.take()?;
        let (local, peer) = id.addresses();
        let peer = peer.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let local = local.unwrap_or(self.addr);
        let request = match CmRequest::parse(&ev.private_data) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%peer, portal = %self.addr, "iSER connect request refused: {e}");
                let _ = id.reject(&[]);
                return None;
            }
        };
        let channel = match id.migrate_to_own_channel() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%peer, "iSER connect request refused: {e}");
                let _ = id.reject(&[]);
                return None;
            }
        };
        let node = Context::of_id(&id).ok().and_then(|ctx| {
            let name = ctx.device_name();
            rdma::devices()
                .ok()?
                .into_iter()
                .find(|d| d.name == name)?
                .numa_node
                .map(|n| n as usize)
        });
        tracing::debug!(%peer, %local, ?node, "iSER connect request");
        Some(Incoming {
            id,
            channel,
            request,
            initiator_depth: ev.responder_resources,
            peer,
            local,
            node,
        })
    }
}

impl AsRawFd for IserListener {
    fn as_raw_fd(&self) -> RawFd {
        self.listener.as_raw_fd()
    }
}
