//! One event thread: a mio poll loop, bound to its NUMA node's CPUs, that owns a set of
//! connections (of any transport, through the seam in `crate::transport`) for their whole
//! life. Each wakeup hands what arrived on a connection to its protocol connection, SCSI
//! commands to `dispatch`, and has the link send everything ready. Backing-store results
//! come back through the thread's [`Inbox`] (a queue whose memory is reused, and a
//! coalesced waker). With `busy_poll` set, the thread keeps polling (epoll with a zero
//! timeout) for that long after its last event before it sleeps again, so a command arriving
//! soon after a response finds it awake.
//!
//! Split: `inbox` (messages and the mailbox), `shared` (state of all threads, placement of
//! new connections), `slot` (one connection's state and the completion path), `commands`
//! (protocol events to `dispatch`), `tokens` (poll tokens); this file owns the poll loop,
//! accepting, adopting, feeding and flushing links, and closing.

use std::collections::VecDeque;
use std::fmt::Display;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use iscsi_proto::Connection;
use iscsi_proto::conn::TransportKeys;
use mio::{Events, Interest, Poll};

use crate::backend::reply::CompletionSink;
use crate::conn_id::ConnId;
use crate::registry::LoginContext;
use crate::transport::{Accepted, Adopted, Feed, Input, Link, LinkError, Listener, Ready, Sources};

mod commands;
mod inbox;
mod shared;
mod slot;
mod throttle;
mod tokens;

pub use commands::lose_moved_nexus;
pub use inbox::{EventThreadSetup, Inbox, Msg};
pub use shared::{MovedIn, MovedOut, Shared, ThreadStats};

use slot::{Session, Slot};
use tokens::RING;

const TICK: Duration = Duration::from_millis(500);

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
    /// The portals this thread listens on (of every transport).
    listeners: Vec<Box<dyn Listener>>,
    /// Connections a listener just accepted, being placed (kept to reuse its memory).
    accepted: Vec<Box<dyn Accepted>>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Links of closed connections whose teardown has not finished ([`Link::drained`]).
    retiring: Vec<Box<dyn Link>>,
    next_generation: u64,
    stopping: bool,
    /// The connection being worked on (closed if that work panics).
    current: Option<usize>,
    /// Connections with completions in this inbox batch (kept to reuse its memory).
    touched: Vec<usize>,
    /// [`EventThread::now_ms`]: the clock as of this loop turn's wake-up.
    turn_ms: u64,
    /// The same wake-up on the I/O statistics' clock (`io_stats::now_ns`).
    turn_ns: u64,
    /// Tasks of this thread's connections ended by another connection's task management
    /// whose work still runs: counted down in what waits for them when it ends.
    awaited: std::collections::HashMap<(ConnId, u32), Arc<crate::backend::reply::TasksEnded>>,
    /// Connections held for a move to the next numatgtd (`Msg::Quiesce`), not moved yet.
    moving: usize,
    /// Commands held back by their LUN's QoS limits until their time.
    throttle: throttle::Throttle,
}

impl EventThread {
    pub fn new(
        index: usize,
        node: usize,
        setup: EventThreadSetup,
        shared: Arc<Shared>,
        listeners: Vec<Box<dyn Listener>>,
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
            accepted: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            retiring: Vec::new(),
            next_generation: 1,
            stopping: false,
            current: None,
            touched: Vec::new(),
            awaited: std::collections::HashMap::new(),
            turn_ms: 0,
            turn_ns: 0,
            moving: 0,
            throttle: Default::default(),
        }
    }

    /// Milliseconds since the daemon started, as of this loop turn's wake-up (one clock read
    /// per turn: where the clock is not in the vDSO, as in a TCG guest, each read is a
    /// system call).
    fn now_ms(&self) -> u64 {
        self.turn_ms
    }

    pub fn run(mut self) {
        crate::alloc_count::mark_event_thread();
        for (i, l) in self.listeners.iter_mut().enumerate() {
            if let Err(e) = l.register(self.poll.registry(), tokens::listener(i)) {
                tracing::error!(portal = %l.addr(), transport = l.driver().as_str(),
                    "cannot poll listener: {e}");
            }
        }
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
            let timeout = if !busy.is_empty() || spinning {
                Duration::ZERO
            } else if self.throttle.is_empty() {
                TICK
            } else {
                // held commands: woken when the earliest is due (the clock read only then)
                (self.throttle.wait(crate::io_stats::now_ns())).map_or(TICK, |d| d.min(TICK))
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("poll failed: {e}");
                }
            }
            let woke = Instant::now();
            self.turn_ms = woke.duration_since(self.shared.started).as_millis() as u64;
            self.turn_ns = crate::io_stats::ns_at(woke);
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
                match tokens::decode(ev.token()) {
                    tokens::Source::Wake => {}
                    tokens::Source::Listener(i) => self.guarded("accept", |me| me.accept(i)),
                    tokens::Source::Conn { slot, source } => {
                        let ready = Ready {
                            readable: ev.is_readable(),
                            writable: ev.is_writable(),
                            hangup: ev.is_read_closed() || ev.is_error(),
                        };
                        self.guarded("connection", |me| me.on_ready(slot, source, ready));
                    }
                }
            }
            // reads of this thread's ring that completed (their answers go through the
            // inbox, drained right after)
            self.guarded("read ring", |_| crate::backend::workers::reap_thread_ring());
            self.guarded("inbox", Self::drain_inbox);
            for s in 0..self.slots.len() {
                if let Some(source) = self.slots[s].as_ref().and_then(|sl| sl.more_input) {
                    self.guarded("receive", |me| me.on_ready(s, source, Ready::READABLE));
                    if self.slots[s]
                        .as_ref()
                        .is_some_and(|sl| sl.more_input.is_some())
                    {
                        busy.push(s);
                    }
                }
            }
            if !self.throttle.is_empty() {
                self.guarded("qos", Self::release_held);
            }
            if woke.duration_since(last_tick) >= TICK {
                last_tick = woke;
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
            if self.moving > 0 {
                self.guarded("move", Self::move_quiet);
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

    /// Takes what listener `i` accepted: each connection goes to the event thread of its
    /// node (this one, or another through its inbox).
    fn accept(&mut self, i: usize) {
        let Some(l) = self.listeners.get_mut(i) else {
            return;
        };
        let mut accepted = std::mem::take(&mut self.accepted);
        l.accept(&mut |a| accepted.push(a));
        for a in accepted.drain(..) {
            if self.stopping {
                continue; // dropped: refuse new work while stopping
            }
            match self.shared.place(&*a) {
                Some(t) if t == self.index => self.adopt(a),
                Some(t) => {
                    if let Some(inbox) = self.shared.inbox(t) {
                        inbox.send(Msg::Adopt(a));
                    }
                }
                None => {} // refused by the connection limit: dropping it closes it
            }
        }
        self.accepted = accepted;
    }

    /// Makes an accepted connection this thread's: its link set up and polled, a slot and a
    /// protocol connection for it.
    fn adopt(&mut self, a: Box<dyn Accepted>) {
        let peer = a.peer();
        let Some((s, adopted)) = self.adopt_link(a, "connection") else {
            return;
        };
        tracing::debug!(%peer, transport = adopted.link.driver().as_str(), thread = self.index,
            node = self.node, "connection accepted");
        self.install(s, adopted.link, peer, adopted.local, adopted.login_keys);
    }

    /// Sets `a`'s link up in this thread and polls it in a new slot: the slot and the
    /// adopted link, or `None` (logged as `what`'s failure, the link retired).
    fn adopt_link(&mut self, a: Box<dyn Accepted>, what: &str) -> Option<(usize, Adopted)> {
        let peer = a.peer();
        let mut adopted = match a.adopt(self.shared.cache.as_ref()) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(%peer, "{what} not adopted: {e}");
                return None;
            }
        };
        let s = self.alloc_slot();
        let sources = Sources::new(self.poll.registry(), s, tokens::conn);
        if let Err(e) = adopted.link.register(&sources) {
            let transport = adopted.link.driver().as_str();
            tracing::error!(%peer, transport, "cannot poll {what}: {e}");
            self.free.push(s);
            self.retire(adopted.link);
            return None;
        }
        Some((s, adopted))
    }

    /// A connection from the previous numatgtd (live upgrade): adopted as an accepted one,
    /// its protocol connection going on from the state it was moved with.
    fn resume(&mut self, m: Box<shared::MovedIn>) {
        let shared::MovedIn { state, accepted } = *m;
        let peer = accepted.peer();
        let Some((s, Adopted { link, local, .. })) = self.adopt_link(accepted, "moved connection")
        else {
            commands::lose_moved_nexus(&self.shared, &state.info);
            return;
        };
        let target = state
            .info
            .target_name
            .as_deref()
            .and_then(|n| self.shared.registry.target(n));
        let cfg = self
            .shared
            .registry
            .config_for(target.map(|t| t.conn_config()).as_ref(), local);
        let conn = Connection::resume(cfg, peer, local, state, self.now_ms());
        self.install_conn(s, link, peer, conn);
        self.process_events(s);
        self.flush(s);
    }

    /// Moves the held connections that have gone quiet (no task, nothing to send) out to
    /// `Shared::moved_out`, for the next numatgtd.
    fn move_quiet(&mut self) {
        for s in 0..self.slots.len() {
            let Some(slot) = self.slots[s].as_mut() else {
                continue;
            };
            if !slot.moving || slot.inflight > 0 {
                continue;
            }
            if slot.conn.is_closing() || slot.finishing() {
                // logged out or failed meanwhile: it closes as usual
                slot.moving = false;
                self.moving -= 1;
                continue;
            }
            if !slot.conn.movable() {
                continue;
            }
            let Some(socket) = slot.link.detach(self.poll.registry()) else {
                slot.moving = false;
                self.moving -= 1;
                self.close(s, "its socket cannot be handed over");
                continue;
            };
            let Some(state) = slot.conn.take_moved() else {
                continue; // not reached: it was movable
            };
            slot.moving = false;
            self.moving -= 1;
            let Some(id) = self.id(s) else { continue };
            if let Some(mut slot) = self.slots[s].take() {
                let _in_conn = slot.span.clone().entered();
                tracing::info!(
                    stat_sn = state.stat_sn,
                    exp_cmd_sn = state.exp_cmd_sn,
                    "connection handed over to the next numatgtd"
                );
                // the session goes on in the next process: its nexus is not lost (no
                // release of reservations), the socket stays open through `socket`
                slot.io.detach_all();
                crate::backend::task_watch::tasks_ended(id, |_| false);
                self.shared.registry.connection_closed(id);
                let nexus = slot.session.normal().map(|n| n.nexus.id);
                self.shared
                    .moved_out
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(shared::MovedOut {
                        state,
                        socket,
                        nexus,
                    });
                self.shared.connections.fetch_sub(1, Ordering::Relaxed);
                self.free.push(s);
            }
        }
    }

    /// A free connection slot (its tokens are not registered).
    fn alloc_slot(&mut self) -> usize {
        self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        })
    }

    /// Puts a new connection in slot `s` (its link registered); the transport's login keys,
    /// if any, go to the protocol connection before its first PDU.
    fn install(
        &mut self,
        s: usize,
        link: Box<dyn Link>,
        peer: SocketAddr,
        local: SocketAddr,
        login_keys: Option<Box<dyn TransportKeys>>,
    ) {
        let mut conn = Connection::new(self.shared.registry.config_for(None, local), peer, local);
        conn.set_random_source(Box::new(crate::registry::os_random));
        if let Some(keys) = login_keys {
            conn.set_rdma_transport(keys);
        }
        self.install_conn(s, link, peer, conn);
    }

    /// Puts `conn` in slot `s` with its link (registered).
    fn install_conn(
        &mut self,
        s: usize,
        link: Box<dyn Link>,
        peer: SocketAddr,
        conn: Connection<crate::backend::payload::Payload>,
    ) {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.shared.connections.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "conn",
            id = generation,
            thread = self.index,
            %peer,
            transport = link.driver().as_str(),
            initiator = tracing::field::Empty,
            target = tracing::field::Empty
        );
        let events = self.shared.proto_stats.target("");
        self.slots[s] = Some(Slot::new(link, conn, generation, peer, events, span));
    }

    fn id(&self, s: usize) -> Option<ConnId> {
        self.slots.get(s).and_then(|o| o.as_ref()).map(|sl| ConnId {
            thread: self.index,
            slot: s,
            generation: sl.generation,
        })
    }

    /// Poll source `source` of connection `s` is ready: its link feeds the protocol
    /// connection, whose events are then processed, and what they queued is sent (or the
    /// connection closed, when the link ended).
    fn on_ready(&mut self, s: usize, source: usize, ready: Ready) {
        let Some(id) = self.id(s) else { return };
        self.current = Some(s);
        let now = self.now_ms();
        let shared = Arc::clone(&self.shared);
        let Some(slot) = self.slots.get_mut(s).and_then(|o| o.as_mut()) else {
            return;
        };
        // the login's view of the registry, for every transport
        let ctx = LoginContext {
            registry: &shared.registry,
            me: id,
            control: &*shared,
            transport: slot.link.driver(),
        };
        let finishing = slot.finishing();
        let feed = Feed {
            conn: &mut slot.conn,
            dir: &ctx,
            now_ms: now,
            finishing,
        };
        let input = slot.link.on_ready(source, ready, feed);
        match input {
            Input::Idle => return self.flush(s),
            Input::More => slot.more_input = Some(source),
            Input::Drained | Input::Ended(_) => slot.more_input = None,
        }
        self.process_events(s);
        match input {
            Input::Ended(e) => self.close_on(s, e),
            _ => self.flush(s),
        }
    }

    /// Has connection `s`'s link send what the connection queued; closes the connection
    /// when that fails, or when it is finishing and its link says it may close.
    fn flush(&mut self, s: usize) {
        self.current = Some(s);
        let Some(slot) = self.slots.get_mut(s).and_then(|o| o.as_mut()) else {
            return;
        };
        match slot.link.flush(&mut slot.conn) {
            Err(e) => self.close_on(s, e),
            Ok(()) => {
                if slot.finishing() && slot.link.may_close(&slot.conn) {
                    self.close(s, "connection finished");
                }
            }
        }
    }

    /// Runs the held commands whose time came, each in its connection; a command whose
    /// task ended meanwhile is answered for its task management (which waited for it).
    fn release_held(&mut self) {
        let now = crate::io_stats::now_ns();
        let mut runs = std::mem::take(&mut self.touched);
        runs.clear();
        while let Some(h) = self.throttle.pop_due(now) {
            let s = h.conn.slot;
            if self.id(s) != Some(h.conn) {
                continue; // the connection is gone: so is its command
            }
            h.qos.held(now.saturating_sub(h.since_ns));
            let Some(slot) = self.slots[s].as_mut() else {
                continue;
            };
            slot.held_back = slot.held_back.saturating_sub(1);
            if !slot.conn.task_wanted(h.cmd.itt) {
                self.end_held(h);
                continue;
            }
            slot.released.push(h.cmd);
            if !runs.contains(&s) {
                runs.push(s);
            }
        }
        for &s in &runs {
            self.process_events(s);
            self.flush(s);
        }
        self.touched = runs;
    }

    /// Held commands whose tasks were ended by task management (this connection's or
    /// another's) leave at once: the task management response does not wait for their time.
    fn end_unwanted_held(&mut self) {
        let slots = &self.slots;
        // its connection gone, or its task no longer wanted there
        let gone = self.throttle.take_unwanted(|h| {
            (slots.get(h.conn.slot).and_then(Option::as_ref))
                .filter(|s| s.generation == h.conn.generation)
                .is_none_or(|s| !s.conn.task_wanted(h.cmd.itt))
        });
        let mut touched = Vec::new();
        for h in gone {
            let s = h.conn.slot;
            if let Some(slot) = self.slots[s]
                .as_mut()
                .filter(|sl| sl.generation == h.conn.generation)
            {
                slot.held_back = slot.held_back.saturating_sub(1);
                if !touched.contains(&s) {
                    touched.push(s);
                }
            }
            self.end_held(h);
        }
        for s in touched {
            self.process_events(s);
            self.flush(s);
        }
    }

    /// A held command whose task ended: answered (the connection sends nothing for an
    /// ended task, but counts it ended) and counted down where task management waits.
    fn end_held(&mut self, h: throttle::Held) {
        if let Some(e) = self.awaited.remove(&(h.conn, h.cmd.itt)) {
            e.one_done();
        }
        if self.id(h.conn.slot) != Some(h.conn) {
            return;
        }
        if let Some(slot) = self.slots[h.conn.slot].as_mut() {
            // write data an RDMA READ put into cache slots for it: the slots go free
            drop(slot.link.take_landing(h.cmd.itt));
            let aborted = iscsi_proto::CommandResult {
                status: scsi::status::TASK_ABORTED,
                sense: Vec::new(),
                data: None,
                write_transfer_len: None,
            };
            slot.complete(
                h.cmd.itt,
                &crate::io_stats::IoTag::NONE,
                aborted,
                h.cmd.data_out,
            );
        }
    }

    fn tick(&mut self) {
        self.retiring.retain_mut(|link| !link.drained());
        for l in &mut self.listeners {
            l.on_tick();
        }
        if self.index == 0 {
            // the summaries of refusal bursts that are over
            self.shared.registry.limits.flush_logs();
        }
        let now = self.now_ms();
        for s in 0..self.slots.len() {
            let stalled = match self.slots[s].as_mut() {
                Some(slot) => slot.link.on_tick(now).err(),
                None => continue,
            };
            if let Some(e) = stalled {
                self.close_on(s, e);
                continue;
            }
            if let Some(slot) = self.slots[s].as_mut() {
                self.current = Some(s);
                slot.conn.on_tick(now);
                if let Some(since) = slot.narrowed_since_ns
                    && slot.held_back == 0
                    && self.turn_ns.saturating_sub(since) >= throttle::NARROWED_FOR_MS * 1_000_000
                {
                    // nothing held for a while: the session's whole window again
                    slot.narrowed_since_ns = None;
                    slot.conn.narrow_window(None);
                }
                self.process_events(s);
                self.flush(s);
            }
        }
    }

    /// Closes connection `s` because its link ended or failed (the cause, when the reason
    /// has one, logged in the connection's context first).
    fn close_on(&mut self, s: usize, e: LinkError) {
        if let Some(cause) = std::error::Error::source(&e)
            && let Some(slot) = self.slots.get(s).and_then(|o| o.as_ref())
        {
            let _in_conn = slot.span.enter();
            tracing::debug!("{e}: {cause}");
        }
        self.close(s, e);
    }

    fn close(&mut self, s: usize, reason: impl Display) {
        let Some(id) = self.id(s) else { return };
        if let Some(mut slot) = self.slots[s].take() {
            let _in_conn = slot.span.clone().entered();
            self.retire(slot.link);
            if let Session::Normal(n) = &slot.session {
                let released = n.end();
                if !released.is_empty() {
                    // I_T nexus loss of an SPC-2 holder on LUNs other gateways share: the
                    // release goes to the cluster and to them
                    let nexus = n.nexus.clone();
                    let job = crate::backend::jobs::Job::Other(Box::new(move || {
                        for lun in &released {
                            crate::backend::pr_cluster::release_spc2(
                                lun,
                                scsi::Spc2Holder::Nexus(&nexus),
                                &[],
                            );
                        }
                    }));
                    crate::backend::Workers::submit(&self.shared.workers, self.node, job);
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

    /// A closed connection's link: out of the poll set, its teardown started, and kept
    /// until it has drained.
    fn retire(&mut self, mut link: Box<dyn Link>) {
        link.retire(self.poll.registry());
        if !link.drained() {
            self.retiring.push(link);
        }
    }
}
