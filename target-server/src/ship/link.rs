//! One link from this gateway to another one that owns LUNs this gateway serves on its
//! active/non-optimized paths: a TCP connection (opened with the owner's token), a sender
//! thread that writes the shipped requests in the order the event threads queued them (an
//! event thread never blocks on the link), and a receiver thread that matches the owner's
//! responses to the waiting commands and answers them through their `Replier`s.
//!
//! A link that breaks — a write or read error, a frame it does not understand, or an owner
//! that leaves a request unanswered for [`ANSWER_WAIT`] — is dead for good: every command
//! still waiting on it is answered NOT READY, ASYMMETRIC ACCESS STATE TRANSITION (the
//! initiator retries it; its outcome on the owner is unknown, as after any path failure),
//! and the route makes a new link or, failing that, moves the LUN here as before.

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use iscsi_proto::CommandResult;

use super::frames::{Batch, FrameReader, is_timeout, read_frame};
use super::stats::ShipStats;
use super::wire::{self, Frame, Hello, LunRef, Shipped, TOKEN_LEN};
use crate::backend::payload::Payload;
use crate::backend::reply::Replier;
use crate::registry::Lun;

/// How long the owner may leave a shipped command unanswered before the link is taken
/// for dead (shorter than Linux's 30 s SCSI command timeout, longer than a librbd write
/// waiting out an OSD's recovery).
pub const ANSWER_WAIT: Duration = Duration::from_secs(20);
/// How long connecting and the hello may take.
const CONNECT_WAIT: Duration = Duration::from_secs(2);
/// Commands in flight on one link; beyond, a command is answered TASK SET FULL.
pub const MAX_IN_FLIGHT: usize = 1024;

/// A command waiting for the owner's answer.
struct Pending {
    replier: Replier,
    /// For the sense of a failed link (the LU's sense format).
    lun: Arc<Lun>,
    since: Instant,
    /// The command's write buffer, back from the sender once written (for the connection
    /// to reuse).
    buffer: Vec<u8>,
    stats: Arc<ShipStats>,
}

/// A request for the sender thread.
struct Outgoing {
    id: u32,
    head: Vec<u8>,
    data: Vec<u8>,
}

/// Why a command was not shipped.
pub enum NotShipped {
    /// The link is dead: the caller decides what else to do.
    Dead(Replier, Vec<u8>),
    /// Too many commands in flight on the link.
    Full(Replier, Vec<u8>),
}

/// A link to one owner gateway.
pub struct Link {
    addr: SocketAddr,
    token: [u8; TOKEN_LEN],
    tx: Mutex<Option<mpsc::Sender<Outgoing>>>,
    pending: Mutex<HashMap<u32, Pending>>,
    next_id: AtomicU32,
    dead: AtomicBool,
    stream: TcpStream,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Link({}, dead {})", self.addr, self.is_dead())
    }
}

impl Link {
    /// Connects to the owner at `addr`, proves the token, and starts the link's threads.
    pub fn connect(addr: SocketAddr, token: [u8; TOKEN_LEN]) -> std::io::Result<Arc<Link>> {
        let mut s = TcpStream::connect_timeout(&addr, CONNECT_WAIT)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(CONNECT_WAIT))?;
        s.set_write_timeout(Some(CONNECT_WAIT))?;
        s.write_all(&wire::encode_hello(&Hello {
            version: wire::VERSION,
            token,
        }))?;
        match read_frame(&mut s)? {
            Frame::HelloOk { .. } => {}
            other => {
                return Err(std::io::Error::other(format!(
                    "the owner answered the hello with {other:?}"
                )));
            }
        }
        s.set_write_timeout(None)?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        let (tx, rx) = mpsc::channel();
        let link = Arc::new(Link {
            addr,
            token,
            tx: Mutex::new(Some(tx)),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU32::new(1),
            dead: AtomicBool::new(false),
            stream: s.try_clone()?,
        });
        let writer = s.try_clone()?;
        let (l1, l2) = (Arc::clone(&link), Arc::clone(&link));
        std::thread::Builder::new()
            .name("ship-tx".into())
            .spawn(move || l1.send_loop(writer, &rx))?;
        std::thread::Builder::new()
            .name("ship-rx".into())
            .spawn(move || l2.receive_loop(s))?;
        tracing::info!(owner = %addr, "gateway link up");
        Ok(link)
    }

    /// The token the link was opened with.
    pub fn token(&self) -> &[u8; TOKEN_LEN] {
        &self.token
    }

    /// Whether the link broke.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Ships `action` of LUN `lun` (`to` on the owner) with its write `data`; `reply`
    /// answers once the owner did. Counted in `stats` as sent.
    pub fn ship(
        &self,
        to: LunRef<'_>,
        action: Shipped,
        data: Vec<u8>,
        reply: Replier,
        lun: Arc<Lun>,
        stats: Arc<ShipStats>,
    ) -> Result<(), NotShipped> {
        if self.is_dead() {
            return Err(NotShipped::Dead(reply, data));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let data = if action.has_data() { data } else { Vec::new() };
        let head = wire::encode_request_head(id, to, &action, data.len());
        {
            let mut p = lock(&self.pending);
            if p.len() >= MAX_IN_FLIGHT {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                return Err(NotShipped::Full(reply, data));
            }
            stats.sent.fetch_add(1, Ordering::Relaxed);
            p.insert(
                id,
                Pending {
                    replier: reply,
                    lun,
                    since: Instant::now(),
                    buffer: Vec::new(),
                    stats,
                },
            );
        }
        let sent = lock(&self.tx)
            .as_ref()
            .map(|tx| tx.send(Outgoing { id, head, data }));
        if !matches!(sent, Some(Ok(()))) {
            // the sender is gone: the link is dying; this command is answered with the rest
            self.fail("the link's sender stopped");
        }
        Ok(())
    }

    /// Writes the requests in the order they were queued: what is queued together goes
    /// out in one batch.
    fn send_loop(&self, mut s: TcpStream, rx: &mpsc::Receiver<Outgoing>) {
        let mut batch = Batch::default();
        while let Ok(first) = rx.recv() {
            let mut next = Some(first);
            while let Some(o) = next {
                batch.head(&o.head);
                if let Err(e) = batch.data(&mut s, &o.data) {
                    self.fail(&format!("writing to the owner: {e}"));
                    return;
                }
                if let Some(p) = lock(&self.pending).get_mut(&o.id) {
                    p.buffer = o.data;
                }
                next = if batch.has_room() {
                    rx.try_recv().ok()
                } else {
                    None
                };
            }
            if let Err(e) = batch.flush(&mut s) {
                self.fail(&format!("writing to the owner: {e}"));
                return;
            }
        }
    }

    fn receive_loop(&self, mut s: TcpStream) {
        let mut frames = FrameReader::default();
        let mut checked = Instant::now();
        loop {
            if self.is_dead() {
                return;
            }
            match frames.next(&mut s) {
                Ok(Frame::Response(r)) => self.answer(r),
                Ok(other) => {
                    self.fail(&format!("unexpected frame from the owner: {other:?}"));
                    return;
                }
                Err(e) if is_timeout(&e) => {}
                Err(e) => {
                    self.fail(&format!("reading from the owner: {e}"));
                    return;
                }
            }
            if checked.elapsed() >= Duration::from_secs(1) {
                checked = Instant::now();
                if let Some(age) = self.oldest()
                    && age > ANSWER_WAIT
                {
                    self.fail(&format!(
                        "the owner left a command unanswered for {} s",
                        age.as_secs()
                    ));
                    return;
                }
            }
        }
    }

    fn oldest(&self) -> Option<Duration> {
        lock(&self.pending)
            .values()
            .map(|p| p.since.elapsed())
            .max()
    }

    fn answer(&self, r: wire::Response) {
        let Some(p) = lock(&self.pending).remove(&r.id) else {
            tracing::warn!(owner = %self.addr, id = r.id, "answer to no shipped command");
            return;
        };
        p.stats.answered(p.since.elapsed());
        let result = CommandResult {
            status: r.status,
            sense: r.sense,
            data: (!r.data.is_empty()).then(|| Payload::bytes(r.data)),
            write_transfer_len: None,
        };
        p.replier.send_with_buffer(result, p.buffer);
    }

    /// The link is dead: closed, and every waiting command answered transitioning.
    fn fail(&self, why: &str) {
        if self.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        tracing::warn!(owner = %self.addr, "gateway link lost: {why}");
        let _ = self.stream.shutdown(Shutdown::Both);
        lock(&self.tx).take();
        let waiting: Vec<Pending> = lock(&self.pending).drain().map(|(_, p)| p).collect();
        for p in waiting {
            p.stats.failed();
            let c = p.lun.scsi.check_condition(&scsi::alua::TRANSITIONING);
            p.replier
                .send_with_buffer(crate::backend::reply::completed(c), p.buffer);
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}
