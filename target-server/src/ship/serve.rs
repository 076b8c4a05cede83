//! The owner's side of the gateway link: a TCP listener (started when the first RBD LUN of
//! several gateways is served here, on the first portal's address that is not a wildcard,
//! else on the address of this gateway's Ceph client) that admits a link only with this
//! daemon's token, and per link a reader thread that runs each shipped action on this
//! gateway's backend — the NUMA cache of the owner stays the one copy — and a writer
//! thread that sends the answers back as they finish (Data-In straight from the cache
//! blocks).
//!
//! A shipped command for a LUN this gateway no longer owns is answered NOT READY,
//! ASYMMETRIC ACCESS STATE TRANSITION, which the non-owner passes on (the initiator
//! retries; the non-owner's route follows the new owner meanwhile).

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use iscsi_proto::{CommandResult, DataBuf};

use super::frames::{Batch, FrameReader, is_timeout};
use super::route::{self, Local};
use super::stats;
use super::wire::{self, Frame, Request, TOKEN_LEN};
use crate::backend::StorageCtx;
use crate::backend::payload::Payload;
use crate::backend::reply::{Answer, CompletionSink, ReplyTo, completed};
use crate::conn_id::ConnId;
use crate::event_loop::Shared;
use crate::io_stats::IoTag;

/// Links served at once; more are refused.
const MAX_LINKS: usize = 64;
/// The largest frame before the hello is accepted.
const MAX_HELLO: usize = 64;

static SHARED: OnceLock<Arc<Shared>> = OnceLock::new();
static LOCAL: Mutex<Option<Local>> = Mutex::new(None);
static LINKS: AtomicUsize = AtomicUsize::new(0);

/// Lets the link server start when a LUN needs it (the runtime calls this once the event
/// threads' shared state exists).
pub fn install(shared: Arc<Shared>) {
    let _ = SHARED.set(shared);
    route::set_server(ensure);
}

/// The link server, started on first use.
fn ensure(ceph_ip: Option<IpAddr>) -> std::io::Result<Local> {
    let mut g = LOCAL.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(l) = *g {
        return Ok(l);
    }
    let shared = SHARED
        .get()
        .ok_or_else(|| std::io::Error::other("the daemon is not serving yet"))?;
    let ip = shared
        .registry
        .portals()
        .iter()
        .map(|p| p.addr.ip())
        .find(|ip| !ip.is_unspecified())
        .or(ceph_ip)
        .ok_or_else(|| {
            std::io::Error::other(
                "no address to listen on: every portal is a wildcard and the Ceph client's \
                 address is unknown",
            )
        })?;
    let listener = TcpListener::bind(SocketAddr::new(ip, 0))?;
    let addr = listener.local_addr()?;
    let token = random_token()?;
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("ship-listen".into())
        .spawn(move || accept_loop(&listener, token, &shared))?;
    tracing::info!(%addr, "gateway link server listening");
    let l = Local { addr, token };
    *g = Some(l);
    Ok(l)
}

fn random_token() -> std::io::Result<[u8; TOKEN_LEN]> {
    let mut t = [0; TOKEN_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut t)?;
    Ok(t)
}

fn accept_loop(listener: &TcpListener, token: [u8; TOKEN_LEN], shared: &Arc<Shared>) {
    for s in listener.incoming() {
        let s = match s {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("gateway link accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if LINKS.fetch_add(1, Ordering::AcqRel) >= MAX_LINKS {
            LINKS.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(peer = ?s.peer_addr().ok(), "gateway link refused: {MAX_LINKS} links already");
            continue;
        }
        let shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("ship-serve".into())
            .spawn(move || {
                let peer = s.peer_addr().ok();
                if let Err(e) = serve_link(s, &token, &shared) {
                    tracing::info!(?peer, "gateway link ended: {e}");
                }
                LINKS.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            LINKS.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!("gateway link thread: {e}");
        }
    }
}

/// Reads the hello: small, within 5 s, with this daemon's token.
fn hello(s: &mut TcpStream, token: &[u8; TOKEN_LEN]) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut prefix = [0; wire::LEN_PREFIX];
    s.read_exact(&mut prefix)?;
    let n = u32::from_be_bytes(prefix) as usize;
    if n == 0 || n > MAX_HELLO {
        return Err(std::io::Error::other(format!(
            "not a gateway link (first frame {n} bytes)"
        )));
    }
    let mut body = vec![0; n];
    s.read_exact(&mut body)?;
    match wire::decode(&body).map_err(std::io::Error::other)? {
        Frame::Hello(h) if wire::same_token(&h.token, token) => Ok(()),
        Frame::Hello(_) => Err(std::io::Error::other(
            "wrong token: the peer did not read this gateway's link from the cluster",
        )),
        other => Err(std::io::Error::other(format!(
            "expected a hello, got {other:?}"
        ))),
    }
}

/// Where the answers of one link's commands go: its writer thread.
struct LinkSink(mpsc::Sender<(u32, CommandResult<Payload>)>);

impl CompletionSink for LinkSink {
    fn complete(&self, _: ConnId, itt: u32, _: IoTag, result: CommandResult<Payload>, _: Vec<u8>) {
        // a link gone: nobody waits for the answer any more
        let _ = self.0.send((itt, result));
    }
}

fn serve_link(
    mut s: TcpStream,
    token: &[u8; TOKEN_LEN],
    shared: &Arc<Shared>,
) -> std::io::Result<()> {
    let peer = s.peer_addr()?;
    if let Err(e) = hello(&mut s, token) {
        tracing::warn!(%peer, "gateway link refused: {e}");
        return Ok(());
    }
    s.set_nodelay(true)?;
    s.write_all(&wire::encode_hello_ok())?;
    tracing::info!(%peer, "gateway link accepted");
    // the reader wakes every second to notice a writer that failed
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let (tx, rx) = mpsc::channel::<(u32, CommandResult<Payload>)>();
    let sink: Arc<dyn CompletionSink> = Arc::new(LinkSink(tx));
    let out = Arc::new(Mutex::new(AnswerOut {
        s: s.try_clone()?,
        batch: Batch::default(),
    }));
    let writer = {
        let out = Arc::clone(&out);
        std::thread::Builder::new()
            .name("ship-answer".into())
            .spawn(move || write_later_answers(&rx, &out))?
    };
    let conn = ConnId {
        thread: usize::MAX,
        slot: 0,
        generation: 0,
    };
    let mut frames = FrameReader::default();
    let ended = loop {
        if writer.is_finished() {
            break Ok(());
        }
        let r = match frames.next(&mut s) {
            Ok(Frame::Request(r)) => r,
            Ok(other) => break Err(std::io::Error::other(format!("unexpected {other:?}"))),
            Err(e) if is_timeout(&e) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break Ok(()),
            Err(e) => break Err(e),
        };
        let id = r.id;
        let now = run(r, shared, ReplyTo::new(Arc::clone(&sink), conn, id));
        // an answer ready at once (a cached read) is written here, without waking the
        // writer; gathered while more requests are already read, written before the next
        // read may wait
        let mut o = lock(&out);
        let written = match &now {
            Some(answer) => o.add(id, answer),
            None => Ok(()),
        };
        let flushed = written.and_then(|()| {
            if frames.has_frame() && o.batch.has_room() {
                Ok(())
            } else {
                o.flush()
            }
        });
        if let Err(e) = flushed {
            break Err(e);
        }
    };
    drop(sink);
    let _ = s.shutdown(std::net::Shutdown::Read);
    // the writer ends once every command of the link has answered (their sinks dropped)
    match writer.join() {
        Ok(Err(e)) if ended.is_ok() => Err(e),
        _ => ended,
    }
}

/// The link's answers on their way out: the stream and what is gathered for it.
struct AnswerOut {
    s: TcpStream,
    batch: Batch,
}

impl AnswerOut {
    fn add(&mut self, id: u32, r: &CommandResult<Payload>) -> std::io::Result<()> {
        write_answer(&mut self.s, &mut self.batch, id, r)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.batch.flush(&mut self.s)
    }
}

fn lock(m: &Mutex<AnswerOut>) -> std::sync::MutexGuard<'_, AnswerOut> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `ship-answer` thread: the answers that come later (from the I/O workers), what is
/// ready together in one batch; ends once every command of the link has answered.
fn write_later_answers(
    rx: &mpsc::Receiver<(u32, CommandResult<Payload>)>,
    out: &Mutex<AnswerOut>,
) -> std::io::Result<()> {
    while let Ok(first) = rx.recv() {
        let mut o = lock(out);
        let mut next = Some(first);
        let mut written = Ok(());
        while let Some((id, r)) = next {
            written = o.add(id, &r);
            if written.is_err() {
                break;
            }
            next = if o.batch.has_room() {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        if let Err(e) = written.and_then(|()| o.flush()) {
            let _ = o.s.shutdown(std::net::Shutdown::Both);
            return Err(e);
        }
    }
    Ok(())
}

/// Adds command `id`'s answer to `batch` (its Data-In written from where it is when large:
/// pinned cache blocks).
fn write_answer(
    s: &mut TcpStream,
    batch: &mut Batch,
    id: u32,
    r: &CommandResult<Payload>,
) -> std::io::Result<()> {
    let len = r.data.as_ref().map_or(0, DataBuf::len);
    batch.head(&wire::encode_response_head(id, r.status, &r.sense, len));
    if let Some(d) = &r.data {
        let mut at = 0;
        while at < len {
            let c = d.chunk(at);
            if c.is_empty() {
                return Err(std::io::Error::other("payload shorter than its length"));
            }
            batch.data(s, c)?;
            at += c.len();
        }
    }
    Ok(())
}

/// Runs one shipped command; `Some` when it is answered at once.
fn run(r: Request, shared: &Shared, reply: ReplyTo) -> Option<CommandResult<Payload>> {
    let failure = || Some(crate::backend::reply::internal_failure());
    let Some(target) = shared.registry.target(&r.target) else {
        tracing::warn!(target = %r.target, "shipped command for a target not served here");
        return failure();
    };
    let luns = target.lun_set();
    let Some(lun) = luns.map.get(&r.lun) else {
        tracing::warn!(target = %r.target, lun = r.lun, "shipped command for a LUN not served here");
        return failure();
    };
    let Some(o) = lun
        .rbd_ownership
        .as_ref()
        .filter(|o| o.record() == r.record)
    else {
        tracing::warn!(target = %r.target, lun = r.lun, record = %r.record,
            "shipped command for another image than this LUN's");
        return failure();
    };
    if !o.owns() {
        return Some(completed(
            lun.scsi.check_condition(&scsi::alua::TRANSITIONING),
        ));
    }
    stats::of(&r.record).served.fetch_add(1, Ordering::Relaxed);
    let ctx = StorageCtx {
        workers: &shared.workers,
        node: 0,
        cache: shared.cache.as_ref(),
        router: shared.router.as_ref(),
        sends_from_blocks: false,
        state_dir: shared.registry.state_dir(),
        tasks: Some(shared),
        registry: Some(&shared.registry),
    };
    let mut data = r.data;
    match crate::dispatch::run_shipped(
        r.action.into_action(),
        &mut data,
        lun,
        &target,
        &luns,
        &ctx,
        reply,
    ) {
        Answer::Now(res) => Some(res),
        Answer::Later(_) => None,
    }
}
