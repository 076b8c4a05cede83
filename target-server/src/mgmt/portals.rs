//! Portals bound at run time (`tgtadm --mode portal --op new/delete`): their listeners live
//! on one small acceptor thread of their own (mio), which hands each accepted connection to
//! an event thread exactly as the startup listeners do (`Msg::NewConn` to the thread of the
//! connection's node). Portals from the configuration stay with event thread 0.

use std::io;
use std::net::SocketAddr;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::event_loop::{MAX_CONNECTIONS, Msg, Shared};
use crate::registry::Portal;

const WAKER: Token = Token(usize::MAX);

enum Cmd {
    Add(TcpListener, SocketAddr),
    Remove(SocketAddr, Sender<bool>),
}

/// Handle to the acceptor thread.
pub struct PortalAcceptor {
    tx: Mutex<Sender<Cmd>>,
    waker: Waker,
    shared: Arc<Shared>,
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
        }))
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
        reg.add_portal(Portal {
            addr: local,
            nop_interval: None,
            nop_count: None,
        });
        self.send(Cmd::Add(TcpListener::from_std(std_l), local));
        tracing::info!("numatgtd: listening on {local} (portal added by tgtadm)");
        Ok(())
    }

    /// Stop accepting on `addr` (a portal added at run time).
    pub fn remove(&self, addr: SocketAddr) -> Result<(), PortalError> {
        if !self
            .shared
            .registry
            .portals()
            .iter()
            .any(|p| p.addr == addr)
        {
            return Err(PortalError::NotFound);
        }
        let (tx, rx) = channel();
        self.send(Cmd::Remove(addr, tx));
        match rx.recv_timeout(std::time::Duration::from_secs(5)) {
            Ok(true) => {
                self.shared.registry.remove_portal(addr);
                tracing::info!("portal {addr} removed by tgtadm");
                Ok(())
            }
            _ => Err(PortalError::Fixed),
        }
    }
}

fn run(mut poll: Poll, rx: Receiver<Cmd>, shared: Arc<Shared>) {
    let mut listeners: Vec<Option<(TcpListener, SocketAddr)>> = Vec::new();
    let mut events = Events::with_capacity(64);
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            tracing::error!("portal acceptor poll failed: {e}");
            return;
        }
        for ev in events.iter() {
            match ev.token() {
                WAKER => {
                    while let Ok(cmd) = rx.try_recv() {
                        match cmd {
                            Cmd::Add(mut l, addr) => {
                                let i = listeners.len();
                                if let Err(e) =
                                    poll.registry()
                                        .register(&mut l, Token(i), Interest::READABLE)
                                {
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
                                        let _ = poll.registry().deregister(&mut l);
                                    }
                                }
                                let _ = done.send(pos.is_some());
                            }
                        }
                    }
                }
                Token(i) => {
                    if let Some(Some((l, _))) = listeners.get(i) {
                        accept_all(l, &shared);
                    }
                }
            }
        }
    }
}

fn accept_all(l: &TcpListener, shared: &Shared) {
    loop {
        match l.accept() {
            Ok((sock, peer)) => {
                use std::sync::atomic::Ordering;
                if shared.connections.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                    tracing::warn!(%peer, limit = MAX_CONNECTIONS, "connection refused: too many connections");
                    continue;
                }
                let t = match sock.local_addr() {
                    Ok(local) => shared.thread_for(local.ip()),
                    Err(_) => 0,
                };
                if let Some(inbox) = shared.inbox(t) {
                    inbox.send(Msg::NewConn(sock, peer));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                return;
            }
        }
    }
}
