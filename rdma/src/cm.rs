//! RDMA connection manager: an event channel and a listening `rdma_cm_id` (port space TCP,
//! as iSER uses), and the events read from that channel.
//!
//! The channel's fd is non-blocking and can be registered in a mio poll set
//! (`mio::unix::SourceFd(&listener.as_raw_fd())`); on readiness, call
//! [`Listener::get_event`] until it returns `Ok(None)`. Events of the ids a listener hands out
//! (connect requests) arrive on the same channel until they are migrated elsewhere.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys as ffi;

use crate::error::{Error, LIBRDMACM, Result};

/// An `rdma_event_channel`, destroyed when the last id using it is gone.
struct Channel(NonNull<ffi::rdma_event_channel>);

// SAFETY: librdmacm's channel calls (rdma_get_cm_event, rdma_create_id on it, destroy) only
// use the channel's fd and librdmacm's own locking; the pointer is never dereferenced by Rust
// except for the immutable `fd` field.
unsafe impl Send for Channel {}
// SAFETY: as above: no Rust-side mutable state, librdmacm serialises internally.
unsafe impl Sync for Channel {}

impl Channel {
    fn new() -> Result<Channel> {
        // SAFETY: no arguments; returns a new channel or NULL with errno set.
        let ch = unsafe { ffi::rdma_create_event_channel() };
        let ch =
            NonNull::new(ch).ok_or_else(|| Error::last("rdma_create_event_channel", LIBRDMACM))?;
        let chan = Channel(ch);
        crate::cq::set_nonblocking(chan.fd(), LIBRDMACM)?;
        Ok(chan)
    }

    fn fd(&self) -> RawFd {
        // SAFETY: the channel is live while `self` is; `fd` is set at creation and constant.
        unsafe { self.0.as_ref().fd }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: every id created on the channel holds an Arc to it, so none is left; the
        // channel is destroyed once.
        unsafe { ffi::rdma_destroy_event_channel(self.0.as_ptr()) }
    }
}

/// An owned `rdma_cm_id`: destroyed (with `rdma_destroy_id`) on drop.
pub struct CmId {
    id: NonNull<ffi::rdma_cm_id>,
    _channel: Arc<Channel>,
}

// SAFETY: an rdma_cm_id may be used from any thread (librdmacm locks internally); this wrapper
// gives access through `&self` only to calls that are safe concurrently, and drop is unique.
unsafe impl Send for CmId {}

impl CmId {
    /// An opaque value naming this id: events about it carry the same [`CmEvent::id`].
    pub fn handle(&self) -> usize {
        self.id.as_ptr() as usize
    }

    /// Rejects a connect request, sending `private_data` (at most 255 bytes; the CM
    /// truncates to what the port space carries, 148 bytes for RDMA_PS_TCP over IB).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        let len = u8::try_from(private_data.len())
            .map_err(|_| Error::Invalid("CM private data longer than 255 bytes"))?;
        let ptr = if private_data.is_empty() {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: the id is live; `ptr` is NULL or points at `len` readable bytes that
        // librdmacm copies before returning.
        if unsafe { ffi::rdma_reject(self.id.as_ptr(), ptr, len) } != 0 {
            return Err(Error::last("rdma_reject", LIBRDMACM));
        }
        Ok(())
    }

    /// Moves the id to a new event channel of its own (`rdma_migrate_id`) and returns it:
    /// from now on the id's events (established, disconnected, timewait exit) arrive there,
    /// not on the listener's channel, so the thread that owns the connection polls them.
    /// Call before accepting (no event of the id is pending: every read event is acked).
    pub fn migrate_to_own_channel(&mut self) -> Result<EventChannel> {
        let channel = Arc::new(Channel::new()?);
        // SAFETY: the id and the new channel are live; the id has no unacked event (events
        // are acked as they are read), so the call does not block.
        if unsafe { ffi::rdma_migrate_id(self.id.as_ptr(), channel.0.as_ptr()) } != 0 {
            return Err(Error::last("rdma_migrate_id", LIBRDMACM));
        }
        // the old channel (the listener's) stays alive as long as the listener holds it
        self._channel = Arc::clone(&channel);
        Ok(EventChannel(channel))
    }

    /// The local and the peer address of a connected id (a connect request's id: the
    /// portal address the initiator reached, and the initiator's address).
    pub fn addresses(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        // SAFETY: the id is live; `route.addr` holds the source and destination socket
        // addresses (storage-sized unions) librdmacm filled in for the connect request;
        // only their bytes are read, as sockaddr_storage.
        unsafe {
            let a = &(*self.id.as_ptr()).route.addr;
            let src = std::ptr::addr_of!(a.src_addr_union).cast::<libc::sockaddr_storage>();
            let dst = std::ptr::addr_of!(a.dst_addr_union).cast::<libc::sockaddr_storage>();
            (socket_addr_of(&*src), socket_addr_of(&*dst))
        }
    }

    /// The raw id, for the queue-pair wrapper of this crate.
    pub(crate) fn as_ptr(&self) -> *mut ffi::rdma_cm_id {
        self.id.as_ptr()
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the id is owned by this wrapper and destroyed once; its events were acked
        // when read (get_event acks before returning), so rdma_destroy_id does not block.
        unsafe { ffi::rdma_destroy_id(self.id.as_ptr()) };
    }
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CmId({:#x})", self.handle())
    }
}

/// The kind of a CM event (`enum rdma_cm_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum CmEventKind {
    AddrResolved,
    AddrError,
    RouteResolved,
    RouteError,
    ConnectRequest,
    ConnectResponse,
    ConnectError,
    Unreachable,
    Rejected,
    Established,
    Disconnected,
    DeviceRemoval,
    MulticastJoin,
    MulticastError,
    AddrChange,
    TimewaitExit,
    /// A value this wrapper does not know.
    Other(u32),
}

impl CmEventKind {
    fn from_raw(v: ffi::rdma_cm_event_type::Type) -> CmEventKind {
        use CmEventKind::*;
        use ffi::rdma_cm_event_type::*;
        match v {
            RDMA_CM_EVENT_ADDR_RESOLVED => AddrResolved,
            RDMA_CM_EVENT_ADDR_ERROR => AddrError,
            RDMA_CM_EVENT_ROUTE_RESOLVED => RouteResolved,
            RDMA_CM_EVENT_ROUTE_ERROR => RouteError,
            RDMA_CM_EVENT_CONNECT_REQUEST => ConnectRequest,
            RDMA_CM_EVENT_CONNECT_RESPONSE => ConnectResponse,
            RDMA_CM_EVENT_CONNECT_ERROR => ConnectError,
            RDMA_CM_EVENT_UNREACHABLE => Unreachable,
            RDMA_CM_EVENT_REJECTED => Rejected,
            RDMA_CM_EVENT_ESTABLISHED => Established,
            RDMA_CM_EVENT_DISCONNECTED => Disconnected,
            RDMA_CM_EVENT_DEVICE_REMOVAL => DeviceRemoval,
            RDMA_CM_EVENT_MULTICAST_JOIN => MulticastJoin,
            RDMA_CM_EVENT_MULTICAST_ERROR => MulticastError,
            RDMA_CM_EVENT_ADDR_CHANGE => AddrChange,
            RDMA_CM_EVENT_TIMEWAIT_EXIT => TimewaitExit,
            o => Other(o),
        }
    }
}

/// One CM event, copied out of librdmacm's event (which is acked before this is returned).
#[derive(Debug)]
pub struct CmEvent {
    /// What happened.
    pub kind: CmEventKind,
    /// The event's status (0, or a negative errno / a reject reason).
    pub status: i32,
    /// The id the event is about, as [`CmId::handle`] names it (for a connect request: the
    /// new id, also in `new_id`).
    pub id: usize,
    /// The connection private data (connect request, established, rejected). For a connect
    /// request this is the whole private-data field of the port space (56 bytes for
    /// RDMA_PS_TCP on RoCE/IB), zero-padded past what the peer sent.
    pub private_data: Vec<u8>,
    /// For a connect request: the new id, now owned by the caller (accept, reject, or drop to
    /// destroy it).
    pub new_id: Option<CmId>,
    /// For a connect request: the RDMA READs the peer serves at once (its responder
    /// resources: the most this side may issue, its `initiator_depth` on accept).
    pub responder_resources: u8,
    /// For a connect request: the RDMA READs the peer issues at once.
    pub initiator_depth: u8,
}

/// An RDMA CM listener: its own event channel and a bound, listening id (until
/// [`Listener::close`]).
pub struct Listener {
    id: Option<CmId>,
    channel: Arc<Channel>,
}

impl Listener {
    /// Creates an event channel and an RDMA_PS_TCP id, binds it to `addr` (a port 0 picks
    /// one) and listens with `backlog`.
    ///
    /// On a host without rdma-core this is [`Error::LibraryMissing`]; without kernel RDMA
    /// CM support (`/dev/infiniband/rdma_cm`), [`Error::NoKernelSupport`]; when `addr` is not
    /// on an RDMA device, `rdma_bind_addr` fails (`EADDRNOTAVAIL` / `ENODEV`).
    pub fn bind(addr: SocketAddr, backlog: i32) -> Result<Listener> {
        let (id, channel) = CmId::on_new_channel()?;
        listen(&id, addr, backlog)?;
        Ok(Listener {
            id: Some(id),
            channel,
        })
    }

    /// Listens again on `addr` after [`Listener::close`] (the device came back): a new id
    /// on the same event channel, so a registered fd stays the one to poll. Does nothing
    /// while open.
    pub fn reopen(&mut self, addr: SocketAddr, backlog: i32) -> Result<()> {
        if self.id.is_some() {
            return Ok(());
        }
        let id = CmId::on_channel(&self.channel)?;
        listen(&id, addr, backlog)?;
        self.id = Some(id);
        Ok(())
    }

    /// The listening id's handle (events about the listener itself carry it); 0 once
    /// closed.
    pub fn handle(&self) -> usize {
        self.id.as_ref().map_or(0, CmId::handle)
    }

    /// Destroys the listening id (after `RDMA_CM_EVENT_DEVICE_REMOVAL` of its device, which
    /// waits until it is gone); the channel stays, so a registered fd stays valid.
    pub fn close(&mut self) {
        self.id = None;
    }

    /// Whether the id still listens (not closed).
    pub fn is_open(&self) -> bool {
        self.id.is_some()
    }

    /// Reads one event without blocking: `Ok(None)` when the channel is empty.
    pub fn get_event(&self) -> Result<Option<CmEvent>> {
        read_event(&self.channel)
    }

    /// The listener's event channel, shared (events of the ids it hands out arrive there).
    pub fn channel(&self) -> EventChannel {
        EventChannel(self.channel.clone())
    }
}

/// Binds `id` to `addr` (a port 0 picks one) and listens with `backlog`.
fn listen(id: &CmId, addr: SocketAddr, backlog: i32) -> Result<()> {
    let (mut storage, _len) = sockaddr_of(addr);
    // SAFETY: the id is live; `storage` holds a sockaddr_in or sockaddr_in6 matching its
    // family and lives across the call (librdmacm copies it).
    let rc = unsafe {
        ffi::rdma_bind_addr(
            id.as_ptr(),
            (&mut storage as *mut libc::sockaddr_storage).cast(),
        )
    };
    if rc != 0 {
        return Err(Error::last("rdma_bind_addr", LIBRDMACM));
    }
    // SAFETY: the id is live and bound.
    if unsafe { ffi::rdma_listen(id.as_ptr(), backlog) } != 0 {
        return Err(Error::last("rdma_listen", LIBRDMACM));
    }
    Ok(())
}

/// Reads one event of `channel` without blocking: `Ok(None)` when it is empty.
fn read_event(channel: &Arc<Channel>) -> Result<Option<CmEvent>> {
    let mut ev: *mut ffi::rdma_cm_event = std::ptr::null_mut();
    // SAFETY: the channel is live and non-blocking; `ev` is a valid out pointer.
    if unsafe { ffi::rdma_get_cm_event(channel.0.as_ptr(), &mut ev) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Ok(None);
        }
        return Err(Error::classify("rdma_get_cm_event", LIBRDMACM, e));
    }
    // SAFETY: rdma_get_cm_event succeeded, so `ev` points at an event that stays valid
    // until rdma_ack_cm_event below; everything needed is copied out before that.
    let out = unsafe {
        let e = &*ev;
        let kind = CmEventKind::from_raw(e.event);
        // ids of RDMA_PS_TCP are connected ids: `param.conn` is the member in use
        let conn = e.param.conn;
        let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(
                conn.private_data.cast::<u8>(),
                usize::from(conn.private_data_len),
            )
            .to_vec()
        };
        let new_id = if kind == CmEventKind::ConnectRequest {
            NonNull::new(e.id).map(|id| CmId {
                id,
                _channel: channel.clone(),
            })
        } else {
            None
        };
        CmEvent {
            kind,
            status: e.status,
            id: e.id as usize,
            private_data,
            new_id,
            responder_resources: conn.responder_resources,
            initiator_depth: conn.initiator_depth,
        }
    };
    // SAFETY: `ev` came from rdma_get_cm_event and is acked once; nothing borrowed from
    // it is used after this.
    unsafe { ffi::rdma_ack_cm_event(ev) };
    Ok(Some(out))
}

/// A shared handle on a CM event channel: a listener's (events of the ids it handed out) or a
/// client id's own. Its fd is non-blocking, for a mio poll set.
#[derive(Clone)]
pub struct EventChannel(Arc<Channel>);

impl EventChannel {
    /// Reads one event without blocking: `Ok(None)` when the channel is empty.
    pub fn get_event(&self) -> Result<Option<CmEvent>> {
        read_event(&self.0)
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd()
    }
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EventChannel(fd {})", self.0.fd())
    }
}

/// The active (client) side, as far as tests need it: an id on its own event channel, then
/// [`CmId::resolve_addr`], [`CmId::resolve_route`] and, once a queue pair exists on it,
/// `Connection::connect`. The target itself only accepts.
impl CmId {
    /// A new RDMA_PS_TCP id on a new (non-blocking) event channel of its own: the listener's
    /// and the client's first step.
    fn on_new_channel() -> Result<(CmId, Arc<Channel>)> {
        let channel = Arc::new(Channel::new()?);
        let id = CmId::on_channel(&channel)?;
        Ok((id, channel))
    }

    /// A new RDMA_PS_TCP id whose events arrive on `channel`.
    fn on_channel(channel: &Arc<Channel>) -> Result<CmId> {
        let mut raw: *mut ffi::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: the channel is live; `raw` is a valid out pointer; the context is unused.
        let rc = unsafe {
            ffi::rdma_create_id(
                channel.0.as_ptr(),
                &mut raw,
                std::ptr::null_mut(),
                ffi::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(Error::last("rdma_create_id", LIBRDMACM));
        }
        let id = NonNull::new(raw).ok_or(Error::Invalid("rdma_create_id returned no id"))?;
        Ok(CmId {
            id,
            _channel: Arc::clone(channel),
        })
    }

    /// A new RDMA_PS_TCP id on a new event channel (non-blocking), for the active side.
    pub fn create_client() -> Result<(CmId, EventChannel)> {
        let (id, channel) = CmId::on_new_channel()?;
        Ok((id, EventChannel(channel)))
    }

    /// Starts resolving `dst` to an RDMA device and port (event `AddrResolved` or
    /// `AddrError` follows on the id's channel).
    pub fn resolve_addr(&self, dst: SocketAddr, timeout_ms: i32) -> Result<()> {
        let (mut storage, _len) = sockaddr_of(dst);
        // SAFETY: the id is live; `storage` holds a sockaddr of `dst`'s family and lives
        // across the call (librdmacm copies it); a NULL source lets the CM choose.
        let rc = unsafe {
            ffi::rdma_resolve_addr(
                self.id.as_ptr(),
                std::ptr::null_mut(),
                (&mut storage as *mut libc::sockaddr_storage).cast(),
                timeout_ms,
            )
        };
        if rc != 0 {
            return Err(Error::last("rdma_resolve_addr", LIBRDMACM));
        }
        Ok(())
    }

    /// Starts resolving the route to the resolved address (event `RouteResolved` or
    /// `RouteError` follows).
    pub fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        // SAFETY: the id is live; the call only starts an asynchronous resolution.
        if unsafe { ffi::rdma_resolve_route(self.id.as_ptr(), timeout_ms) } != 0 {
            return Err(Error::last("rdma_resolve_route", LIBRDMACM));
        }
        Ok(())
    }

    /// The verbs context the id is bound to (NULL before it is bound to a device).
    pub(crate) fn verbs(&self) -> *mut ffi::ibv_context {
        // SAFETY: the id is live; `verbs` is a plain pointer field librdmacm sets when the
        // id is bound to a device (address resolution, connect request) and keeps after.
        unsafe { (*self.id.as_ptr()).verbs }
    }
}

impl AsRawFd for Listener {
    /// The event channel's fd (non-blocking), for a mio poll set.
    fn as_raw_fd(&self) -> RawFd {
        self.channel.fd()
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listener(fd {}, {:?})", self.as_raw_fd(), self.id)
    }
}

/// `addr` as a `sockaddr_storage` holding a `sockaddr_in` or `sockaddr_in6`, and its length.
/// A socket address out of a `sockaddr_storage` (IPv4 or IPv6; anything else is `None`).
fn socket_addr_of(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in (smaller, aligned).
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6 (smaller, aligned).
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn sockaddr_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_v4_layout() {
        let (s, len) = sockaddr_of("127.0.0.1:3260".parse().unwrap());
        assert_eq!(len as usize, std::mem::size_of::<libc::sockaddr_in>());
        // SAFETY: sockaddr_of wrote a sockaddr_in at the start of the storage.
        let sin: libc::sockaddr_in = unsafe { std::ptr::read(&s as *const _ as *const _) };
        assert_eq!(i32::from(sin.sin_family), libc::AF_INET);
        assert_eq!(u16::from_be(sin.sin_port), 3260);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [127, 0, 0, 1]);
    }

    #[test]
    fn sockaddr_v6_layout() {
        let (s, len) = sockaddr_of("[::1]:3260".parse().unwrap());
        assert_eq!(len as usize, std::mem::size_of::<libc::sockaddr_in6>());
        // SAFETY: sockaddr_of wrote a sockaddr_in6 at the start of the storage.
        let sin6: libc::sockaddr_in6 = unsafe { std::ptr::read(&s as *const _ as *const _) };
        assert_eq!(i32::from(sin6.sin6_family), libc::AF_INET6);
        assert_eq!(u16::from_be(sin6.sin6_port), 3260);
        assert_eq!(sin6.sin6_addr.s6_addr[15], 1);
    }

    #[test]
    fn event_kinds() {
        assert_eq!(CmEventKind::from_raw(4), CmEventKind::ConnectRequest);
        assert_eq!(CmEventKind::from_raw(15), CmEventKind::TimewaitExit);
        assert_eq!(CmEventKind::from_raw(77), CmEventKind::Other(77));
    }

    /// Without an RDMA device (this project's build host, CI) binding fails with an error
    /// that says why; with one (rxe in the VM) the listener's fd goes into a mio poll set
    /// and no event is pending.
    #[test]
    fn bind_loopback_fails_cleanly_or_polls() {
        match Listener::bind("127.0.0.1:0".parse().unwrap(), 8) {
            Err(e) => {
                eprintln!("Listener::bind(127.0.0.1:0): {e}");
                assert!(
                    matches!(
                        e,
                        Error::LibraryMissing(_)
                            | Error::NoKernelSupport { .. }
                            | Error::Call { .. }
                    ),
                    "{e:?}"
                );
            }
            Ok(l) => {
                let fd = l.as_raw_fd();
                assert!(fd >= 0);
                let mut poll = mio::Poll::new().unwrap();
                poll.registry()
                    .register(
                        &mut mio::unix::SourceFd(&fd),
                        mio::Token(0),
                        mio::Interest::READABLE,
                    )
                    .unwrap();
                let mut events = mio::Events::with_capacity(4);
                poll.poll(&mut events, Some(std::time::Duration::ZERO))
                    .unwrap();
                assert!(l.get_event().unwrap().is_none());
            }
        }
    }
}
