//! Portals bound at run time (`tgtadm --mode portal --op new/delete`, TCP and, with
//! `--lld iser`, iSER): their listeners live on one small acceptor thread of their own
//! (mio), which hands each accepted connection to an event thread exactly as the startup
//! listeners do (`Shared::place`, then `Msg::Adopt` to the thread of the connection's node).
//! Portals from the configuration stay with event thread 0 and cannot be deleted. A live
//! upgrade stops this thread accepting and passes its TCP listening sockets on, and the
//! next numatgtd's acceptor takes them ([`PortalAcceptor::adopt`]): still portals added at
//! run time, deletable, and no connection refused in between.

use std::io;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use mio::{Events, Poll, Token, Waker};

use crate::event_loop::{Msg, Shared};
use crate::registry::Portal;
use crate::transport::Listener;

const WAKER: Token = Token(usize::MAX);

enum Cmd {
    Add(Box<dyn Listener>, SocketAddr),
    Remove(SocketAddr, Sender<bool>),
    /// Stop accepting on every listener (their connections wait in the backlog).
    Pause(Sender<()>),
}

/// Handle to the acceptor thread.
pub struct PortalAcceptor {
    tx: Mutex<Sender<Cmd>>,
    waker: Waker,
    shared: Arc<Shared>,
    /// A second descriptor of each TCP listener the thread holds, for a live upgrade.
    tcp: Mutex<Vec<std::net::TcpListener>>,
}

/// Why a portal could not be added or removed.
#[derive(Debug, PartialEq, Eq)]
pub enum PortalError {
    /// Already listening on that address.
    Exists,
    /// Not a portal added at run time (or not one at all).
    NotFound,
    /// A portal from the configuration: fixed until restart.
    Fixed,
    Bind(String),
}

impl PortalAcceptor {
    pub fn start(shared: Arc<Shared>) -> io::Result<Arc<PortalAcceptor>> {
        let poll = Poll::new()?;
        let waker = Waker::new(poll.registry(), WAKER)?;
        let (tx, rx) = channel();
        let sh = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("portals".into())
            .spawn(move || run(poll, rx, sh))?;
        Ok(Arc::new(PortalAcceptor {
            tx: Mutex::new(tx),
            waker,
            shared,
            tcp: Mutex::new(Vec::new()),
        }))
    }

    fn kept_tcp(&self) -> std::sync::MutexGuard<'_, Vec<std::net::TcpListener>> {
        self.tcp.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Has the thread accept on `std_l` (bound, non-blocking), a portal added at run time:
    /// the registry lists it.
    fn listen_tcp(&self, std_l: std::net::TcpListener, local: SocketAddr) {
        self.shared.registry.add_portal(Portal {
            addr: local,
            nop_interval: None,
            nop_count: None,
        });
        match std_l.try_clone() {
            Ok(k) => self.kept_tcp().push(k),
            Err(e) => tracing::warn!(
                "portal {local}: no second descriptor ({e}); an upgrade binds it again"
            ),
        }
        self.send(Cmd::Add(crate::transport::tcp_listener(std_l), local));
    }

    /// Serves `l`, a portal the previous numatgtd added at run time and passed on in a live
    /// upgrade: as if added here (tgtadm can delete it).
    pub fn adopt(&self, l: std::net::TcpListener) {
        let local = match l
            .local_addr()
            .and_then(|a| l.set_nonblocking(true).map(|()| a))
        {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("a passed-on portal cannot be used: {e}");
                return;
            }
        };
        if self
            .shared
            .registry
            .portals()
            .iter()
            .any(|p| p.addr == local)
        {
            tracing::warn!("portal {local}: passed on twice; the second is closed");
            return;
        }
        self.listen_tcp(l, local);
        tracing::info!(
            "portal {local}: listening socket (added at run time) taken over from the previous numatgtd"
        );
    }

    /// A live upgrade: the thread stops accepting (new connections wait in the listeners'
    /// backlogs for the next numatgtd); returns a descriptor of each TCP listener, for it.
    pub fn stop_accepting(&self) -> Vec<std::net::TcpListener> {
        let (tx, rx) = channel();
        self.send(Cmd::Pause(tx));
        if rx.recv_timeout(std::time::Duration::from_secs(5)).is_err() {
            tracing::warn!("the portal acceptor did not stop accepting within 5 s");
        }
        std::mem::take(&mut *self.kept_tcp())
    }

    fn send(&self, c: Cmd) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if tx.send(c).is_ok() {
            let _ = self.waker.wake();
        }
    }

    /// Bind `addr` and start accepting on it.
    pub fn add(&self, addr: SocketAddr) -> Result<(), PortalError> {
        let reg = &self.shared.registry;
        if reg.portals().iter().any(|p| p.addr == addr) {
            return Err(PortalError::Exists);
        }
        let std_l =
            std::net::TcpListener::bind(addr).map_err(|e| PortalError::Bind(e.to_string()))?;
        std_l
            .set_nonblocking(true)
            .map_err(|e| PortalError::Bind(e.to_string()))?;
        let local = std_l
            .local_addr()
            .map_err(|e| PortalError::Bind(e.to_string()))?;
        self.listen_tcp(std_l, local);
        tracing::info!("numatgtd: listening on {local} (portal added by tgtadm)");
        Ok(())
    }

    /// Listen for iSER on `addr` (RDMA CM).
    #[cfg(feature = "iser")]
    pub fn add_iser(&self, addr: SocketAddr) -> Result<(), PortalError> {
        let reg = &self.shared.registry;
        if reg.iser_portals().iter().any(|p| p.addr == addr) {
            return Err(PortalError::Exists);
        }
        let l = crate::transport::bind_iser(addr).map_err(|e| PortalError::Bind(e.to_string()))?;
        reg.add_iser_portal(Portal {
            addr,
            nop_interval: None,
            nop_count: None,
        });
        self.send(Cmd::Add(l, addr));
        tracing::info!("numatgtd: listening for iSER on {addr} (portal added by tgtadm)");
        Ok(())
    }

    /// Stop listening for iSER on `addr` (a portal added at run time); its connections go on.
    #[cfg(feature = "iser")]
    pub fn remove_iser(&self, addr: SocketAddr) -> Result<(), PortalError> {
        let reg = &self.shared.registry;
        let listed = reg.iser_portals().iter().any(|p| p.addr == addr);
        self.stop_listening(addr, listed)?;
        reg.remove_iser_portal(addr);
        tracing::info!("iSER portal {addr} removed by tgtadm");
        Ok(())
    }

    /// Stop accepting on `addr` (a portal added at run time).
    pub fn remove(&self, addr: SocketAddr) -> Result<(), PortalError> {
        let reg = &self.shared.registry;
        let listed = reg.portals().iter().any(|p| p.addr == addr);
        self.stop_listening(addr, listed)?;
        self.kept_tcp()
            .retain(|l| l.local_addr().is_ok_and(|a| a != addr));
        reg.remove_portal(addr);
        tracing::info!("portal {addr} removed by tgtadm");
        Ok(())
    }

    /// Has the acceptor thread close its listener on `addr`: `NotFound` when the registry
    /// does not list it, `Fixed` when the thread does not hold it (a configured portal).
    fn stop_listening(&self, addr: SocketAddr, listed: bool) -> Result<(), PortalError> {
        if !listed {
            return Err(PortalError::NotFound);
        }
        let (tx, rx) = channel();
        self.send(Cmd::Remove(addr, tx));
        match rx.recv_timeout(std::time::Duration::from_secs(5)) {
            Ok(true) => Ok(()),
            _ => Err(PortalError::Fixed),
        }
    }
}

fn run(mut poll: Poll, rx: Receiver<Cmd>, shared: Arc<Shared>) {
    let mut listeners: Vec<Option<(Box<dyn Listener>, SocketAddr)>> = Vec::new();
    let mut events = Events::with_capacity(64);
    // the listeners' timer (a closed iSER portal tries to listen again)
    let tick = std::time::Duration::from_secs(1);
    let mut last_tick = std::time::Instant::now();
    loop {
        if let Err(e) = poll.poll(&mut events, Some(tick)) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!("portal acceptor poll failed: {e}");
            return;
        }
        if last_tick.elapsed() >= tick {
            last_tick = std::time::Instant::now();
            for (l, _) in listeners.iter_mut().flatten() {
                l.on_tick();
            }
        }
        for ev in events.iter() {
            match ev.token() {
                WAKER => {
                    while let Ok(cmd) = rx.try_recv() {
                        match cmd {
                            Cmd::Add(mut l, addr) => {
                                let i = listeners.len();
                                if let Err(e) = l.register(poll.registry(), Token(i)) {
                                    tracing::error!("cannot poll portal {addr}: {e}");
                                    continue;
                                }
                                listeners.push(Some((l, addr)));
                            }
                            Cmd::Remove(addr, done) => {
                                let pos = listeners
                                    .iter()
                                    .position(|x| x.as_ref().is_some_and(|(_, a)| *a == addr));
                                if let Some(i) = pos {
                                    if let Some((mut l, _)) = listeners[i].take() {
                                        l.deregister(poll.registry());
                                    }
                                }
                                let _ = done.send(pos.is_some());
                            }
                            Cmd::Pause(done) => {
                                for (l, _) in listeners.iter_mut().flatten() {
                                    l.deregister(poll.registry());
                                }
                                listeners.clear();
                                let _ = done.send(());
                            }
                        }
                    }
                }
                Token(i) => {
                    if let Some(Some((l, _))) = listeners.get_mut(i) {
                        l.accept(&mut |a| {
                            // each to an event thread of its node, as the startup listeners do
                            if let Some(t) = shared.place(&*a)
                                && let Some(inbox) = shared.inbox(t)
                            {
                                inbox.send(Msg::Adopt(a));
                            }
                        });
                    }
                }
            }
        }
    }
}
