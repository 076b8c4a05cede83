//! One event thread: a mio poll loop, bound to its NUMA node's CPUs, that owns a set of TCP
//! connections for their whole life. Each wakeup reads every PDU that has arrived, hands
//! SCSI commands to `dispatch`, and sends everything ready on a connection with one writev.
//! Backing-store results come back through the thread's [`Inbox`] (a queue whose memory is
//! reused, and a coalesced waker). With `busy_poll` set, the thread keeps polling (epoll
//! with a zero timeout) for that long after its last event before it sleeps again, so a
//! command arriving soon after a response finds it awake. Split: `inbox` (messages and the mailbox), `shared`
//! (state of all threads), `commands` (protocol events to `dispatch`); this file owns the
//! poll loop, accepting, reading, writing and closing.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use iscsi_proto::Connection;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use crate::backend::payload::Payload;
use crate::backend::reply::CompletionSink;
use crate::conn_id::ConnId;
use crate::registry::{LoginContext, Target};

mod commands;
mod inbox;
#[cfg(feature = "iser")]
mod iser;
mod shared;

pub use inbox::{EventThreadSetup, Inbox, Msg};
pub use shared::{Shared, ThreadStats};

pub(super) const WAKER: Token = Token(usize::MAX);
/// The eventfds of the thread's io_uring read ring and librbd ring (completions arrived).
const RING: Token = Token(usize::MAX - 1);
/// Tokens: a connection's socket (TCP) or completion channel (iSER) is `Token(slot)`; an
/// iSER connection's CM channel is `ISER_CM_BASE + slot`; TCP listeners count from
/// `LISTENER_BASE`, iSER listeners from `ISER_LISTENER_BASE`.
#[cfg_attr(not(feature = "iser"), allow(dead_code))]
const ISER_CM_BASE: usize = usize::MAX / 4;
const LISTENER_BASE: usize = usize::MAX / 2;
#[cfg_attr(not(feature = "iser"), allow(dead_code))]
const ISER_LISTENER_BASE: usize = usize::MAX / 2 + (1 << 40);
/// Reads per connection per wakeup before other connections get their turn.
const READS_PER_WAKEUP: usize = 32;
/// Slices per writev.
const IOV_MAX: usize = 64;
const TICK: Duration = Duration::from_millis(500);

/// How a connection's PDUs travel.
enum Link {
    Tcp(TcpStream),
    #[cfg(feature = "iser")]
    Iser(Box<crate::iser_link::IserLink>),
}

struct Slot {
    link: Link,
    conn: Connection<Payload>,
    generation: u64,
    peer: SocketAddr,
    target: Option<Arc<Target>>,
    /// The session's I_T nexus (normal sessions), for reservations and unit attentions.
    nexus: Option<scsi::Nexus>,
    /// The target's LUN table as last seen, with its generation.
    luns: Option<(u64, Arc<crate::registry::LunSet>)>,
    /// Commands handed to the I/O pool and not completed yet.
    inflight: usize,
    /// Close once the output has drained.
    closing: bool,
    /// A TARGET COLD RESET was received: close once it has been answered.
    close_after_tmf: bool,
    /// More input may be waiting (read budget ran out).
    more_input: bool,
    /// The peer closed or reset the connection (an event said so): read until the socket
    /// reports it, a short read is no proof of an empty socket then.
    hangup: bool,
    /// Commands dropped for a CmdSN outside the window, as counted so far.
    window_drops: u64,
    /// The connection's I/O counters, one block per LUN it used.
    io: crate::io_stats::ConnIo,
    /// Its target's protocol event counters (those of target `""` until logged in).
    events: Arc<crate::proto_stats::TargetEvents>,
    /// The log context of everything about this connection (`conn{id peer initiator
    /// target}`; initiator and target once logged in).
    span: tracing::Span,
}
pub struct EventThread {
    index: usize,
    node: usize,
    poll: Poll,
    inbox: Arc<Inbox>,
    /// The inbox as the backend's completion sink.
    sink: Arc<dyn CompletionSink>,
    /// The inbox batch being worked through (swapped with the inbox's queue).
    batch: VecDeque<Msg>,
    shared: Arc<Shared>,
    listeners: Vec<TcpListener>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    next_generation: u64,
    stopping: bool,
    /// The connection being worked on (closed if that work panics).
    current: Option<usize>,
    /// The writev iovec array, kept between flushes (empty, capacity IOV_MAX).
    iov_spare: Vec<IoSlice<'static>>,
    /// Connections with completions in this inbox batch (kept to reuse its memory).
    touched: Vec<usize>,
    /// iSER portals this thread listens on.
    #[cfg(feature = "iser")]
    iser_listeners: Vec<crate::iser_link::IserListener>,
    /// Closed iSER links waiting for their flushed requests and TIMEWAIT_EXIT, with when
    /// they closed.
    #[cfg(feature = "iser")]
    draining: Vec<(Box<crate::iser_link::IserLink>, Instant)>,
}

/// Empty an iovec array and give its allocation back for the next flush (an in-place
/// collect of an empty vector keeps the buffer; no slice outlives the call).
fn recycle(mut iov: Vec<IoSlice<'_>>) -> Vec<IoSlice<'static>> {
    iov.clear();
    iov.into_iter().map(|_| IoSlice::new(&[])).collect()
}

impl Link {
    fn name(&self) -> &'static str {
        match self {
            Link::Tcp(_) => "iscsi",
            #[cfg(feature = "iser")]
            Link::Iser(_) => "iser",
        }
    }
}

impl EventThread {
    pub fn new(
        index: usize,
        node: usize,
        setup: EventThreadSetup,
        shared: Arc<Shared>,
        listeners: Vec<TcpListener>,
    ) -> Self {
        EventThread {
            index,
            node,
            poll: setup.poll,
            sink: Arc::clone(&setup.inbox) as Arc<dyn CompletionSink>,
            inbox: setup.inbox,
            batch: VecDeque::with_capacity(256),
            shared,
            listeners,
            slots: Vec::new(),
            free: Vec::new(),
            next_generation: 1,
            stopping: false,
            current: None,
            iov_spare: Vec::with_capacity(IOV_MAX),
            touched: Vec::new(),
            #[cfg(feature = "iser")]
            iser_listeners: Vec::new(),
            #[cfg(feature = "iser")]
            draining: Vec::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.shared.started.elapsed().as_millis() as u64
    }

    pub fn run(mut self) {
        crate::alloc_count::mark_event_thread();
        for (i, l) in self.listeners.iter_mut().enumerate() {
            if let Err(e) =
                self.poll
                    .registry()
                    .register(l, Token(LISTENER_BASE + i), Interest::READABLE)
            {
                tracing::error!("cannot poll listener: {e}");
            }
        }
        #[cfg(feature = "iser")]
        self.register_iser_listeners();
        use crate::backend::workers::{stop_thread_aio, stop_thread_ring};
        let rings = [
            (
                self.shared.workers.start_thread_ring(self.node),
                "read ring",
                stop_thread_ring as fn(),
            ),
            (
                self.shared.workers.start_thread_aio(self.node),
                "librbd ring",
                stop_thread_aio,
            ),
        ];
        for (fd, what, stop) in rings {
            if let Some(fd) = fd
                && let Err(e) = self.poll.registry().register(
                    &mut mio::unix::SourceFd(&fd),
                    RING,
                    Interest::READABLE,
                )
            {
                // without its eventfd the ring's completions would wait for the next event
                tracing::error!("cannot poll the {what}, its reads use the I/O threads: {e}");
                stop();
            }
        }
        let mut events = Events::with_capacity(256);
        let mut last_tick = Instant::now();
        let mut busy: Vec<usize> = Vec::new();
        // busy polling: until this instant the thread polls without sleeping
        let spin = self.shared.busy_poll;
        let mut spin_until: Option<Instant> = None;
        loop {
            let spinning = spin_until.is_some_and(|t| Instant::now() < t);
            let timeout = if busy.is_empty() && !spinning {
                TICK
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("poll failed: {e}");
                }
            }
            let woke = Instant::now();
            if !spin.is_zero() && !events.is_empty() {
                spin_until = Some(woke + spin);
            }
            busy.clear();
            // messages first: they were sent before what the sockets hold now (another
            // thread's LOGICAL UNIT RESET must end this thread's tasks before their late
            // Data-Out is read — its initiator may send it once the reset has completed)
            if self.inbox.wake_pending.load(Ordering::Acquire) {
                self.guarded("inbox", Self::drain_inbox);
            }
            for ev in events.iter() {
                match ev.token() {
                    WAKER | RING => {}
                    #[cfg(feature = "iser")]
                    Token(t) if t >= ISER_LISTENER_BASE => {
                        self.guarded("accept", |me| me.accept_iser(t - ISER_LISTENER_BASE))
                    }
                    Token(t) if t >= LISTENER_BASE => {
                        self.guarded("accept", |me| me.accept(t - LISTENER_BASE))
                    }
                    #[cfg(feature = "iser")]
                    Token(t) if t >= ISER_CM_BASE => {
                        self.guarded("connection manager", |me| me.on_cm(t - ISER_CM_BASE))
                    }
                    #[cfg(feature = "iser")]
                    Token(s) if self.is_iser(s) => {
                        self.guarded("completions", |me| me.on_completions(s))
                    }
                    Token(s) => {
                        if (ev.is_read_closed() || ev.is_error())
                            && let Some(sl) = self.slots.get_mut(s).and_then(|o| o.as_mut())
                        {
                            // data and the close can arrive in one edge: the data is read
                            // first, and a short read must not end the pass before the
                            // end of the stream is seen (there will be no further edge)
                            sl.hangup = true;
                        }
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.guarded("receive", |me| me.on_readable(s));
                        }
                        if ev.is_writable() {
                            self.guarded("send", |me| me.flush(s));
                        }
                    }
                }
            }
            // reads of this thread's ring that completed (their answers go through the
            // inbox, drained right after)
            self.guarded("read ring", |_| crate::backend::workers::reap_thread_ring());
            self.guarded("inbox", Self::drain_inbox);
            for s in 0..self.slots.len() {
                if self.slots[s].as_ref().is_some_and(|sl| sl.more_input) {
                    self.guarded("receive", |me| me.on_readable(s));
                    if self.slots[s].as_ref().is_some_and(|sl| sl.more_input) {
                        busy.push(s);
                    }
                }
            }
            if last_tick.elapsed() >= TICK {
                last_tick = Instant::now();
                self.guarded("timers", Self::tick);
            }
            if let Some(t) = self.shared.thread_stats.get(self.index) {
                let ns = woke.elapsed().as_nanos() as u64;
                // this thread is the only writer
                t.busy_ns.store(
                    t.busy_ns.load(Ordering::Relaxed).wrapping_add(ns),
                    Ordering::Relaxed,
                );
            }
            if self.stopping && self.slots.iter().all(Option::is_none) {
                break;
            }
            // what this turn's commands queued in the read ring goes to the kernel at once
            crate::backend::workers::submit_thread_ring();
        }
        // reads still in the kernel or in librbd write into cache blocks: wait for them
        stop_thread_ring();
        stop_thread_aio();
        self.inbox.stopped.store(true, Ordering::Release);
        // messages that raced with the stop (results of dropped connections) go now
        self.inbox
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        tracing::debug!(thread = self.index, "event thread stopped");
    }

    /// Run `f`; if it panics (a bug: input never should), log it and close the connection
    /// that was being worked on, so that one bad connection never takes the thread and every
    /// other connection on it down.
    fn guarded(&mut self, what: &str, f: impl FnOnce(&mut Self)) {
        self.current = None;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        if let Err(payload) = r {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(thread = self.index, "internal error during {what}: {msg}");
            if let Some(s) = self.current.take() {
                self.close(s, "internal error");
            }
        }
    }

    fn accept(&mut self, i: usize) {
        loop {
            let Some(l) = self.listeners.get(i) else {
                return;
            };
            match l.accept() {
                Ok((sock, peer)) => {
                    if self.stopping {
                        continue; // dropped: refuse new work while stopping
                    }
                    if !self.shared.admit(peer) {
                        continue;
                    }
                    let t = match sock.local_addr() {
                        Ok(local) => self.shared.thread_for(local.ip()),
                        Err(_) => {
                            self.shared.next_thread.fetch_add(1, Ordering::Relaxed)
                                % self.shared.thread_count()
                        }
                    };
                    if t == self.index {
                        self.adopt(sock, peer);
                    } else if let Some(inbox) = self.shared.inbox(t) {
                        inbox.send(Msg::NewConn(sock, peer));
                    }
                }
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

    fn adopt(&mut self, mut sock: TcpStream, peer: SocketAddr) {
        if let Err(e) = sock.set_nodelay(true) {
            tracing::debug!(%peer, "TCP_NODELAY: {e}");
        }
        let local = match sock.local_addr() {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(%peer, "connection lost before adoption: {e}");
                return;
            }
        };
        let s = self.alloc_slot();
        if let Err(e) = self.poll.registry().register(
            &mut sock,
            Token(s),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::error!(%peer, "cannot poll connection: {e}");
            self.free.push(s);
            return;
        }
        tracing::debug!(%peer, thread = self.index, node = self.node, "connection accepted");
        self.install(s, Link::Tcp(sock), peer, local, |_| {});
    }

    /// A free connection slot (its tokens are not registered).
    fn alloc_slot(&mut self) -> usize {
        self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        })
    }

    /// Puts a new connection in slot `s` (its fds already registered); `setup` adjusts the
    /// protocol connection before its first PDU (the iSER transport).
    fn install(
        &mut self,
        s: usize,
        link: Link,
        peer: SocketAddr,
        local: SocketAddr,
        setup: impl FnOnce(&mut Connection<Payload>),
    ) {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.shared.connections.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "conn",
            id = generation,
            thread = self.index,
            %peer,
            transport = link.name(),
            initiator = tracing::field::Empty,
            target = tracing::field::Empty
        );
        let mut conn = Connection::new(self.shared.registry.config_for(None, local), peer, local);
        conn.set_random_source(Box::new(crate::registry::os_random));
        setup(&mut conn);
        self.slots[s] = Some(Slot {
            link,
            conn,
            generation,
            peer,
            target: None,
            nexus: None,
            luns: None,
            inflight: 0,
            closing: false,
            close_after_tmf: false,
            more_input: false,
            hangup: false,
            window_drops: 0,
            io: Default::default(),
            events: self.shared.proto_stats.target(""),
            span,
        });
    }

    fn id(&self, s: usize) -> Option<ConnId> {
        self.slots.get(s).and_then(|o| o.as_ref()).map(|sl| ConnId {
            thread: self.index,
            slot: s,
            generation: sl.generation,
        })
    }

    fn on_readable(&mut self, s: usize) {
        let Some(id) = self.id(s) else { return };
        self.current = Some(s);
        let now = self.now_ms();
        let shared = Arc::clone(&self.shared);
        let Some(slot) = self.slots.get_mut(s).and_then(|o| o.as_mut()) else {
            return;
        };
        slot.more_input = false;
        let ctx = LoginContext {
            registry: &shared.registry,
            me: id,
            control: &*shared,
            transport: config::Driver::Iscsi,
        };
        #[cfg_attr(not(feature = "iser"), allow(irrefutable_let_patterns))]
        let Link::Tcp(sock) = &mut slot.link else {
            return;
        };
        let mut reads = 0;
        let mut eof = false;
        let until_end = slot.hangup;
        loop {
            if slot.closing {
                break;
            }
            let space = slot.conn.rx_space();
            let cap = space.len();
            match sock.read(space) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    slot.conn.rx_commit(n, &ctx, now);
                    if n < cap && !until_end {
                        break; // drained: the next arrival raises a new edge
                    }
                    reads += 1;
                    if reads >= READS_PER_WAKEUP {
                        slot.more_input = true;
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!(peer = %slot.peer, "read failed: {e}");
                    eof = true;
                    break;
                }
            }
        }
        self.process_events(s);
        if eof {
            self.close(s, "connection closed by the initiator");
            return;
        }
        self.flush(s);
    }

    fn flush(&mut self, s: usize) {
        self.current = Some(s);
        let Some(slot) = self.slots.get_mut(s).and_then(|o| o.as_mut()) else {
            return;
        };
        #[cfg_attr(not(feature = "iser"), allow(clippy::infallible_destructuring_match))]
        let sock = match &mut slot.link {
            Link::Tcp(sock) => sock,
            #[cfg(feature = "iser")]
            Link::Iser(_) => return self.flush_iser(s),
        };
        let mut failed = None;
        // one iovec array per thread, reused for every writev
        let mut spare = std::mem::take(&mut self.iov_spare);
        while slot.conn.has_tx() {
            let mut iov: Vec<IoSlice<'_>> = spare;
            slot.conn.gather_tx(&mut iov, IOV_MAX);
            let sent = if iov.is_empty() {
                None
            } else {
                Some(sock.write_vectored(&iov))
            };
            spare = recycle(iov);
            match sent {
                None => break,
                Some(Ok(0)) => {
                    failed = Some("socket closed for writing");
                    break;
                }
                Some(Ok(n)) => slot.conn.tx_consumed(n),
                Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Some(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Some(Err(e)) => {
                    let _in_conn = slot.span.enter();
                    tracing::debug!("write failed: {e}");
                    failed = Some("write to the initiator failed");
                    break;
                }
            }
        }
        self.iov_spare = spare;
        let Some(slot) = self.slots.get_mut(s).and_then(|o| o.as_mut()) else {
            return;
        };
        let done = slot.closing && !slot.conn.has_tx();
        if let Some(reason) = failed {
            self.close(s, reason);
        } else if done || slot.conn.is_closing() && !slot.conn.has_tx() {
            self.close(s, "connection finished");
        }
    }

    fn tick(&mut self) {
        #[cfg(feature = "iser")]
        self.drain_iser();
        if self.index == 0 {
            // the summaries of refusal bursts that are over
            self.shared.registry.limits.flush_logs();
        }
        let now = self.now_ms();
        for s in 0..self.slots.len() {
            if let Some(slot) = self.slots[s].as_mut() {
                self.current = Some(s);
                slot.conn.on_tick(now);
                self.process_events(s);
                self.flush(s);
            }
        }
    }

    fn close(&mut self, s: usize, reason: &str) {
        let Some(id) = self.id(s) else { return };
        if let Some(mut slot) = self.slots[s].take() {
            let _in_conn = slot.span.clone().entered();
            match slot.link {
                Link::Tcp(mut sock) => {
                    let _ = self.poll.registry().deregister(&mut sock);
                }
                #[cfg(feature = "iser")]
                Link::Iser(link) => self.retire_iser(link),
            }
            if let (Some(t), Some(n)) = (&slot.target, &slot.nexus) {
                for l in t.lun_set().map.values() {
                    l.scsi.nexus_removed(n.id);
                }
            }
            slot.io.detach_all();
            tracing::info!(inflight = slot.inflight, "connection closed: {reason}");
            crate::backend::task_watch::tasks_ended(id, |_| false);
            self.shared.registry.connection_closed(id);
            self.shared.connections.fetch_sub(1, Ordering::Relaxed);
            self.free.push(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_iovec_keeps_its_allocation() {
        let mut v: Vec<IoSlice<'static>> = Vec::with_capacity(IOV_MAX);
        let ptr = v.as_ptr() as usize;
        for _ in 0..3 {
            let data = vec![1u8; 10];
            let mut iov: Vec<IoSlice<'_>> = v;
            iov.push(IoSlice::new(&data));
            iov.push(IoSlice::new(&data[2..]));
            v = recycle(iov);
            assert!(v.is_empty());
            assert!(v.capacity() >= IOV_MAX);
            assert_eq!(v.as_ptr() as usize, ptr, "the buffer was reallocated");
        }
    }
}
