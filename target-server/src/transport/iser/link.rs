//! One iSER connection's RDMA side (RFC 7145 over the `rdma` crate): its queue pair, two
//! completion queues (receives; the send queue's requests) each with a completion channel
//! of its own, its own CM event channel (the id
//! is migrated off the listener's), and the registered memory it sends from and receives
//! into. The iSCSI side stays in `iscsi_proto::Connection` (RDMA datamover mode); this
//! module moves bytes between the two:
//!
//! - receives: every completed receive is one iSER message, parsed where the device put it
//!   (no copy): its iSCSI PDU goes to `rx_pdu` with the buffers the iSER header announced
//!   (immediate data is copied once, into the command's own buffer), then the receive is
//!   posted again, so the posted count stays full and the command window the connection
//!   grants never exceeds it ([`iser::proto::Credits`]);
//! - [`IserLink::pump`] posts what the connection queues, in order: PDUs as Sends behind
//!   an iSER header, READ data (`Put`) as RDMA WRITEs, the rest of WRITE data (`Get`) as
//!   RDMA READs — straight into the cache slots the server gave for it (`Link::land`,
//!   reported with `data_landed`), else into node-local registered staging memory, handed
//!   back in place with `data_arrived` — when they complete (in posting order on the RC
//!   queue pair). Everything
//!   one pump posts goes in one `ibv_post_send` call ([`rdma::SendBatch`]: one doorbell,
//!   with soft-RoCE one system call);
//! - selective signaling: RDMA WRITEs are posted unsignaled (as Linux's isert does); the
//!   response Send after them, or any later signaled request, completes them too (an RC
//!   send queue completes in order), so a READ costs one completion, not two. The send
//!   queue is kept as a FIFO of work-request ids ([`IserLink::retire_through`]). A WRITE
//!   is signaled anyway when it takes the last staging chunk, leaves the send queue short
//!   of room or ends a long unsignaled run, so a stalled pump always has a completion
//!   coming that frees what it waits for;
//! - wake-ups: the receive queue is armed at every wake-up; the send queue only while
//!   something waits for its completions ([`IserLink::needs_send_events`]: an RDMA READ, a
//!   stalled pump, a closing connection), else its completions are taken when the link
//!   wakes for a receive or at the timer's check — a response costs no wake-up;
//! - teardown ([`IserLink::drain`]): after a disconnect the link is kept until every posted
//!   request has completed (flushed) and the CM's TIMEWAIT_EXIT came, so no buffer is
//!   freed under the device.
//!
//! The link's life is one [`Phase`]: connecting, established, finishing (its last Sends
//! still on the queue), disconnected (draining).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use iscsi_proto::conn::{RdmaTx, RemoteBuf};
use iscsi_proto::pdu::in_command_window;
use iscsi_proto::{Connection, DataBuf, Directory};
use iser::proto::header::{ISER_HDR_LEN, ISER_HEADERS_LEN};
use iser::proto::{ControlHeader, Credits, CreditsConfig, IserLimits, IserLoginKeys, IserMessage};
use rdma::{
    Access, BatchError, Buffer, CmEventKind, Completion, CompletionQueue, EventChannel,
    MemoryRegion, QpCaps, Remote, SendBatch, SendOptions, Sge,
};

use super::device::DeviceRes;
use super::error::IserError;
use super::landings::Landings;
use super::listen::Incoming;
use super::ops::{Op, Ops, Pool};
use super::share::{self, Member};
use crate::backend::landing::Landing;
use crate::backend::payload::Payload;
use crate::transport::iser_stats::{self, Call, DataPath, Kind};

/// Receives posted per connection: Linux's `cmds_max` (128) plus the reserve for PDUs
/// outside the command window.
const RECVS: u32 = 128 + iser::proto::credits::DEFAULT_RESERVE;
/// Largest command window granted (Linux ib_iser's default queue depth).
const MAX_WINDOW: u32 = 128;
/// Data bytes a receive buffer holds beyond the headers (TargetRecvDataSegmentLength).
const RECV_DATA: usize = 8192;
/// Bytes per receive buffer: iSER header, BHS, data, rounded up to a cache-line multiple.
const RECV_LEN: usize = (ISER_HEADERS_LEN + RECV_DATA).next_multiple_of(64);
/// Send buffers in two sizes: small ones for responses (BHS and sense data, NOP-Ins
/// without data), a few large ones for what may carry up to 8 KiB (login and text
/// responses, NOP-In echoes).
const SMALL_SENDS: usize = 128;
const SMALL_LEN: usize = 512;
const LARGE_SENDS: usize = 4;
const SEND_LEN: usize = (ISER_HEADERS_LEN + 8192).next_multiple_of(64);
/// Bytes of all send buffers of a connection.
const SEND_BYTES: usize = SMALL_SENDS * SMALL_LEN + LARGE_SENDS * SEND_LEN;
/// Staging memory for RDMA READ / WRITE: chunks of this size. A connection registers a few
/// of its own (so it always has a completion coming that frees one) and borrows from its
/// thread's shared ones ([`share::SHARED_CHUNKS`]).
const CHUNK: usize = 128 * 1024;
const OWN_CHUNKS: usize = 2;
/// Send-queue depth: Sends, RDMA WRITEs and READs outstanding at once.
const SQ_DEPTH: u32 = 256;
use share::RECV_WR;
/// RDMA READs this side issues at once, at most (further capped by what the initiator
/// serves).
const MAX_READ_DEPTH: u8 = 16;
/// Completions taken per poll call.
const POLL_BATCH: usize = 32;
/// Scatter/gather entries per RDMA WRITE from cache blocks.
const MAX_SGE: u32 = 16;
/// Unsignaled RDMA WRITEs in a row at most; also the send-queue room below which every
/// WRITE is signaled (so a full queue always has a completion coming).
const UNSIGNALED_MAX: u32 = SQ_DEPTH / 4;
/// Longest time requests may sit on the send queue of an established connection with none
/// completing: then the initiator posts no receives (a Send to it is retried for ever on
/// Receiver-Not-Ready, as Linux initiators ask) or is gone, and the connection is dropped.
pub const STALL_LIMIT_MS: u64 = 15_000;
/// Longest wait for a closing connection's last Sends before it is disconnected anyway.
pub const FINISH_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A request of the connection being posted (a `Put` or `Get` may need several chunks).
struct Pending {
    tx: RdmaTx<Payload>,
    /// Bytes of a `Put` / `Get` posted so far.
    done: usize,
}

/// What became of a `Get` offered to its landing.
enum Landed {
    /// Its RDMA READs are queued, into the landing.
    Posted,
    /// Not enough send-queue room yet: try again after completions.
    NoRoom,
    /// No landing fits it: fetch it through staging chunks.
    NoLanding,
}

/// A send-queue request to queue: its scatter/gather list, and the initiator's buffer of
/// an RDMA operation.
#[derive(Clone, Copy)]
enum Request<'a> {
    Send(&'a [Sge]),
    Write(&'a [Sge], Remote),
    Read(&'a [Sge], Remote),
}

impl Request<'_> {
    fn what(&self) -> &'static str {
        match self {
            Request::Send(_) => "queueing a Send",
            Request::Write(..) => "queueing an RDMA WRITE",
            Request::Read(..) => "queueing an RDMA READ",
        }
    }
}

/// Where a link is in its life.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Accepted; the CM has not reported ESTABLISHED yet (the first receive may complete
    /// before it, and a post may fail until then).
    Connecting,
    /// The CM reported ESTABLISHED.
    Established,
    /// The connection asked to close at `since`; its last Sends may still be on the queue.
    Finishing { since: Instant, established: bool },
    /// Disconnected at `since`: every posted request completes (flushed), then the CM's
    /// TIMEWAIT_EXIT comes (`timewait_exit`), and the link may be dropped.
    Disconnected { since: Instant, timewait_exit: bool },
    /// The RDMA device is being removed (`RDMA_CM_EVENT_DEVICE_REMOVAL`): no flush nor
    /// TIMEWAIT_EXIT is to be waited for; the link is dropped at once, since the removal
    /// waits until every verbs object of the device is released.
    DeviceGone,
}

impl Phase {
    /// The queue pair has been established (and not disconnected).
    fn established(self) -> bool {
        matches!(
            self,
            Phase::Established
                | Phase::Finishing {
                    established: true,
                    ..
                }
        )
    }
}

/// The RDMA side of one iSER connection (see the module documentation).
pub struct IserLink {
    // field order is drop order: the queue pair (and its CM id) goes before the memory
    // regions it used (its own, then the shared ones), those before the completion queue
    // and the protection domain
    qp: rdma::Connection,
    /// Its own receive queue's buffers; None when it draws from the shared receive queue.
    own_recv: Option<(MemoryRegion, Arc<Buffer>)>,
    send_mr: MemoryRegion,
    stage_mr: MemoryRegion,
    send: Arc<Buffer>,
    stage: Arc<Buffer>,
    /// Its thread's shared receive queue and staging chunks on the device.
    member: Member,
    /// The receive side's completion queue: armed at every wake-up (a receive is input).
    cq: Arc<CompletionQueue>,
    /// The send side's (Sends, RDMA WRITEs and READs): armed only while something waits
    /// for its completions ([`IserLink::needs_send_events`]), else polled when the link
    /// wakes for receives — a response Send's completion costs no wake-up of its own.
    scq: Arc<CompletionQueue>,
    /// `scq` is armed (no event read since).
    send_armed: bool,
    /// `scq` was armed during this pump: what completed before raised no event.
    fresh_arm: bool,
    /// RDMA READs posted and not completed (their completions carry WRITE data: while any
    /// is out, `scq` stays armed).
    reads_out: u32,
    cm: EventChannel,
    dev: Arc<DeviceRes>,
    /// Scatter/gather entries per send-queue request (the queue pair's real limit).
    max_sge: usize,
    small_slots: Pool,
    large_slots: Pool,
    /// Its own staging chunks (numbered `0..OWN_CHUNKS`; shared chunk `i` is
    /// `OWN_CHUNKS + i`).
    chunks: Pool,
    ops: Ops,
    pending: VecDeque<Pending>,
    credits: Credits,
    sq_max: u32,
    /// Unsignaled requests posted since the last signaled one.
    unsignaled: u32,
    /// Requests gathered by the current pump, posted together at its end.
    batch: SendBatch,
    /// A send-queue completion came since the last [`IserLink::watchdog`] check.
    sq_progress: bool,
    /// Since when (ms) requests are queued with none completing.
    stalled_since: Option<u64>,
    phase: Phase,
    /// The scatter/gather list of the READ being posted from cache blocks (reused).
    sges: Vec<Sge>,
    /// Data bytes moved since the last [`IserLink::watchdog`], by `DataPath::ALL` order
    /// (added to the daemon's totals there and when the link is dropped).
    moved: [u64; 4],
    /// Verbs calls and completions since the last [`IserLink::watchdog`], by `Call::ALL`
    /// order (added to the daemon's totals like `moved`).
    calls: [u64; 5],
    /// Cache slots WRITE data is fetched into (dropped after the queue pair: no RDMA READ
    /// can reach a freed slot).
    landings: Landings,
    /// The memory pieces of the landing being posted (reused).
    pieces: Vec<(usize, usize)>,
}

impl IserLink {
    /// Sets up a connection for a connect request and accepts it: the device context, a
    /// protection domain, the completion queue (own channel, armed), the queue pair, the
    /// registered buffers, every receive posted. Returns the link and the login keys to
    /// give to the connection (`set_rdma_transport`). On error the request is rejected.
    pub fn accept(
        inc: Incoming,
        cache: Option<&Arc<cache::BlockCache>>,
    ) -> Result<(IserLink, IserLoginKeys), IserError> {
        let Incoming {
            id,
            channel,
            request,
            initiator_depth,
            ..
        } = inc;
        let setup = || -> Result<_, IserError> {
            let dev = DeviceRes::of_id(&id, cache)?;
            let pd = dev.pd();
            let cq = Arc::new(
                CompletionQueue::new(dev.context(), SQ_DEPTH + RECVS)
                    .map_err(IserError::rdma("completion queue"))?,
            );
            let scq = Arc::new(
                CompletionQueue::new(dev.context(), SQ_DEPTH)
                    .map_err(IserError::rdma("send completion queue"))?,
            );
            let reg = |len: usize, access: Access| -> Result<_, IserError> {
                let b = Arc::new(Buffer::new(len).map_err(IserError::rdma("buffer"))?);
                let mr = MemoryRegion::register(pd, b.clone(), access)
                    .map_err(|source| IserError::Register { len, source })?;
                Ok((b, mr))
            };
            let member = Member::join(&dev, RECV_LEN, CHUNK);
            let own_recv = match member.recv() {
                Some(_) => None,
                None => {
                    let (b, mr) = reg(RECV_LEN * RECVS as usize, Access::LOCAL_WRITE)?;
                    Some((mr, b))
                }
            };
            let (send, send_mr) = reg(SEND_BYTES, Access::LOCAL_WRITE)?;
            let (stage, stage_mr) = reg(CHUNK * OWN_CHUNKS, Access::LOCAL_WRITE)?;
            Ok((
                dev.clone(),
                (cq, scq),
                member,
                own_recv,
                send,
                send_mr,
                stage,
                stage_mr,
            ))
        };
        let (dev, (cq, scq), member, own_recv, send, send_mr, stage, stage_mr) = match setup() {
            Ok(v) => v,
            Err(e) => {
                let _ = id.reject(&[]);
                return Err(e);
            }
        };
        let caps = QpCaps {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: RECVS,
            max_send_sge: MAX_SGE,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let srq = member.recv().map(|r| r.srq());
        let qp = rdma::Connection::create_on_split(id, dev.pd(), &scq, &cq, caps, srq).map_err(
            |(e, id)| {
                let _ = id.reject(&[]);
                IserError::rdma("queue pair")(e)
            },
        )?;
        let credits = Credits::new(CreditsConfig {
            max_posted: RECVS,
            reserve: iser::proto::credits::DEFAULT_RESERVE,
            max_window: MAX_WINDOW,
        })?;
        let sq_max = qp.caps().max_send_wr.min(SQ_DEPTH);
        let qp_sge = qp.caps().max_send_sge;
        let own_receives = own_recv.is_some();
        let mut link = IserLink {
            qp,
            own_recv,
            send_mr,
            stage_mr,
            send,
            stage,
            member,
            cq,
            scq,
            send_armed: false,
            fresh_arm: false,
            reads_out: 0,
            cm: channel,
            max_sge: (qp_sge as usize).clamp(1, MAX_SGE as usize),
            dev,
            small_slots: Pool::new(SMALL_SENDS),
            large_slots: Pool::new(LARGE_SENDS),
            chunks: Pool::new(OWN_CHUNKS),
            ops: Ops::with_depth(sq_max as usize),
            pending: VecDeque::new(),
            credits,
            sq_max,
            unsignaled: 0,
            batch: SendBatch::new(),
            sq_progress: false,
            stalled_since: None,
            phase: Phase::Connecting,
            sges: Vec::with_capacity(64),
            moved: [0; 4],
            calls: [0; 5],
            landings: Landings::default(),
            pieces: Vec::new(),
        };
        let fail = |link: &IserLink, e: IserError| {
            // the id belongs to the queue pair now: reject through it
            link.qp.reject();
            e
        };
        link.count_memory(1);
        if own_receives {
            for i in 0..RECVS {
                if let Err(e) = link.post_recv(i) {
                    return Err(fail(&link, e));
                }
            }
        }
        if let Err(e) = link.credits.post(RECVS) {
            return Err(fail(&link, e.into()));
        }
        if let Err(e) = link.cq.arm(false) {
            return Err(fail(
                &link,
                IserError::rdma("arming the completion queue")(e),
            ));
        }
        link.calls[Call::CqArm as usize] += 1;
        let negotiated = request.negotiate(false);
        let depth = initiator_depth.clamp(1, MAX_READ_DEPTH);
        link.qp
            .accept(&negotiated.accept_private_data(), 0, depth)
            .map_err(IserError::rdma("accept"))?;
        let limits = IserLimits {
            target_recv_data_segment_length: RECV_DATA as u32,
            ..IserLimits::default()
        };
        let (keys, _params) = IserLoginKeys::new(limits);
        Ok((link, keys))
    }

    /// The completion channel's fd (readable: completions to poll).
    pub fn cq_fd(&self) -> RawFd {
        self.cq.as_raw_fd()
    }

    /// The CM event channel's fd (readable: CM events of this connection).
    pub fn scq_fd(&self) -> RawFd {
        self.scq.as_raw_fd()
    }

    pub fn cm_fd(&self) -> RawFd {
        self.cm.as_raw_fd()
    }

    /// The RDMA device's name.
    pub fn device(&self) -> &str {
        self.dev.name()
    }

    /// Adds (`sign` 1) or removes (-1) this connection's own registered memory and posted
    /// receives to the gauges.
    fn count_memory(&self, sign: i64) {
        iser_stats::add_connections(sign);
        iser_stats::add(Kind::Send, sign * SEND_BYTES as i64);
        iser_stats::add(Kind::Staging, sign * (CHUNK * OWN_CHUNKS) as i64);
        if self.own_recv.is_some() {
            iser_stats::add(Kind::Receive, sign * (RECV_LEN * RECVS as usize) as i64);
            iser_stats::add_posted(false, sign * i64::from(RECVS));
        }
    }

    /// Posts receive buffer `i` (again): on the connection's own receive queue, or back
    /// into the shared one.
    fn post_recv(&self, i: u32) -> Result<(), IserError> {
        let Some((mr, _)) = &self.own_recv else {
            return match self.member.recv() {
                Some(pool) => pool.repost(i),
                None => Err(IserError::OutOfRange("shared receive")),
            };
        };
        let sge = mr
            .sge(i as usize * RECV_LEN, RECV_LEN as u32)
            .ok_or(IserError::OutOfRange("receive buffer"))?;
        self.qp
            .post_recv(RECV_WR | u64::from(i), sge)
            .map_err(IserError::rdma("posting a receive"))
    }

    /// Reads the connection's CM events. `Err` when the connection is over (disconnected by
    /// the initiator, device removed, connection error).
    pub fn cm_events(&mut self) -> Result<(), IserError> {
        loop {
            let ev = match self.cm.get_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => return Ok(()),
                Err(e) => return Err(IserError::rdma("reading CM events")(e)),
            };
            match ev.kind {
                CmEventKind::Established => {
                    self.phase = match self.phase {
                        Phase::Connecting => Phase::Established,
                        Phase::Finishing { since, .. } => Phase::Finishing {
                            since,
                            established: true,
                        },
                        p => p,
                    }
                }
                CmEventKind::Disconnected => return Err(IserError::Disconnected),
                CmEventKind::TimewaitExit => {
                    // the queue pair is gone without a DISCONNECTED seen: nothing more to wait for
                    self.phase = Phase::Disconnected {
                        since: Instant::now(),
                        timewait_exit: true,
                    };
                    return Err(IserError::Disconnected);
                }
                CmEventKind::DeviceRemoval => {
                    self.device_removed();
                    return Err(IserError::DeviceRemoved);
                }
                CmEventKind::ConnectError | CmEventKind::Unreachable | CmEventKind::Rejected => {
                    return Err(IserError::ConnectFailed {
                        kind: ev.kind,
                        status: ev.status,
                    });
                }
                other => tracing::debug!(event = ?other, "CM event"),
            }
        }
    }

    /// The device is going away: nothing more is posted or waited for, and the device's
    /// shared objects are no longer handed to new connections (they go with the last link).
    fn device_removed(&mut self) {
        if !matches!(self.phase, Phase::DeviceGone) {
            tracing::warn!(
                device = self.device(),
                "RDMA device removed: its iSER connection is closed and released"
            );
        }
        self.phase = Phase::DeviceGone;
        self.pending.clear();
        self.batch.clear();
        self.dev.forget();
    }

    /// Takes every completion: receives go to `conn` (and are posted again), finished
    /// RDMA READs hand their data to `conn`, finished Sends and WRITEs free their buffers.
    /// Re-arms the completion queue first, so nothing that completes later is missed.
    ///
    /// Reads one completion event, not until the channel is empty: the queue is armed once
    /// per call and an armed queue raises at most one event, so at most one is waiting
    /// (one `read` instead of two per wake-up).
    pub fn complete(
        &mut self,
        conn: &mut Connection<Payload>,
        dir: &dyn Directory,
        now_ms: u64,
    ) -> Result<(), IserError> {
        if let Err(e) = self.cq.get_event() {
            return Err(IserError::rdma("completion channel")(e));
        }
        self.calls[Call::CqEvent as usize] += 1;
        self.cq
            .arm(false)
            .map_err(IserError::rdma("arming the completion queue"))?;
        self.calls[Call::CqArm as usize] += 1;
        let mut batch = [Completion::default(); POLL_BATCH];
        loop {
            let n = self
                .cq
                .poll(&mut batch)
                .map_err(IserError::rdma("polling the completion queue"))?;
            for c in &batch[..n] {
                self.completed(c, conn, dir, now_ms)?;
            }
            if n < batch.len() {
                break;
            }
        }
        // the send side's completions since the last wake-up, at no extra system call
        self.poll_send(Some(conn))?;
        self.settle_send_cq(conn)
    }

    /// The send completion queue raised its event: takes its completions (RDMA READs hand
    /// their data to `conn`), and arms it again while something still waits for it.
    pub fn complete_send(&mut self, conn: &mut Connection<Payload>) -> Result<(), IserError> {
        if let Err(e) = self.scq.get_event() {
            return Err(IserError::rdma("send completion channel")(e));
        }
        self.calls[Call::CqEvent as usize] += 1;
        self.send_armed = false;
        self.poll_send(Some(conn))?;
        self.settle_send_cq(conn)
    }

    /// Something waits for the send queue's completions: an RDMA READ (its WRITE data),
    /// requests waiting for send-queue room, buffers or staging chunks, or the closing
    /// connection's last Sends. Otherwise they are taken when the link wakes for a receive
    /// (or at the timer's check).
    fn needs_send_events(&self) -> bool {
        self.reads_out > 0
            || !self.pending.is_empty()
            || matches!(self.phase, Phase::Finishing { .. })
    }

    /// Arms the send completion queue when something waits for it and it is not armed,
    /// then takes what completed before the arming (it raised no event).
    fn settle_send_cq(&mut self, conn: &mut Connection<Payload>) -> Result<(), IserError> {
        if self.send_armed || !self.needs_send_events() {
            return Ok(());
        }
        self.arm_send()?;
        self.poll_send(Some(conn))
    }

    fn arm_send(&mut self) -> Result<(), IserError> {
        self.scq
            .arm(false)
            .map_err(IserError::rdma("arming the send completion queue"))?;
        self.calls[Call::CqArm as usize] += 1;
        self.send_armed = true;
        self.fresh_arm = true;
        Ok(())
    }

    /// Takes every completion of the send queue. Without `conn` (the timer's check, a
    /// closing link) only while no RDMA READ is out: a READ's completion carries data for
    /// the connection.
    fn poll_send(&mut self, mut conn: Option<&mut Connection<Payload>>) -> Result<(), IserError> {
        if conn.is_none() && self.reads_out > 0 {
            return Ok(());
        }
        let mut batch = [Completion::default(); POLL_BATCH];
        loop {
            let n = self
                .scq
                .poll(&mut batch)
                .map_err(IserError::rdma("polling the send completion queue"))?;
            for c in &batch[..n] {
                self.send_completed(c, conn.as_deref_mut())?;
            }
            if n < batch.len() {
                return Ok(());
            }
        }
    }

    fn completed(
        &mut self,
        c: &Completion,
        conn: &mut Connection<Payload>,
        dir: &dyn Directory,
        now_ms: u64,
    ) -> Result<(), IserError> {
        if c.wr_id & RECV_WR != 0 {
            self.calls[Call::RecvCompletion as usize] += 1;
            let i = (c.wr_id & !RECV_WR) as u32;
            if !c.status.is_success() {
                self.credits.flush();
                self.recycle_failed_recv(i);
                return Err(IserError::ReceiveFailed(c.status));
            }
            self.received(i, c.byte_len as usize, conn, dir, now_ms)?;
            self.post_recv(i)?;
            if let Err(e) = self.credits.repost(1) {
                tracing::debug!("{e}");
            }
            return Ok(());
        }
        self.send_completed(c, Some(conn))
    }

    /// One completion of the send queue: the request and those posted before it retire;
    /// an RDMA READ's data goes to `conn` (which only the callers that may see one omit).
    fn send_completed(
        &mut self,
        c: &Completion,
        conn: Option<&mut Connection<Payload>>,
    ) -> Result<(), IserError> {
        self.calls[Call::SendCompletion as usize] += 1;
        let Some(op) = self.retire_through(c.wr_id) else {
            return Err(IserError::UnknownRequest(c.wr_id));
        };
        self.sq_progress = true;
        if !c.status.is_success() {
            self.release(&op);
            return Err(IserError::RequestFailed {
                op: op.name(),
                status: c.status,
                vendor_err: c.vendor_err,
            });
        }
        if !matches!(op, Op::Read { .. } | Op::Land { .. }) {
            self.release(&op);
            return Ok(());
        }
        self.reads_out = self.reads_out.saturating_sub(1);
        let Some(conn) = conn else {
            // not reachable: polled without the connection only while no READ is out
            self.release(&op);
            return Err(IserError::ReadUndeliverable);
        };
        if let Op::Land { itt, xfer, len } = op {
            self.landings.read_done(itt);
            if !conn.data_landed(itt, xfer, len as u32) {
                tracing::debug!(itt, "write data of an ended task landed: dropped");
            }
            return Ok(());
        }
        if let Op::Read {
            chunk,
            itt,
            xfer,
            len,
        } = op
        {
            let (buf, at) = self.chunk_at(chunk)?;
            // SAFETY: the RDMA READ into this chunk has completed; the chunk is released
            // (and may be read into again) only after the slice's last use below; only this
            // thread touches it (a shared chunk is this connection's until it frees it).
            let data = unsafe { buf.slice_quiescent(at, len) };
            let data = data.map_err(IserError::rdma("reading a staging chunk"))?;
            if !conn.data_arrived(itt, xfer, data) {
                tracing::debug!(itt, "write data of an ended task dropped");
            }
        }
        self.release(&op);
        Ok(())
    }

    /// Takes request `wr` off the send queue together with every request posted before it
    /// (completed too: an RC send queue completes in order; the unsignaled ones report only
    /// this way) and releases those earlier ones. Returns `wr`'s op, None when it is not on
    /// the queue.
    fn retire_through(&mut self, wr: u64) -> Option<Op> {
        let mut bufs = Bufs {
            small: &mut self.small_slots,
            large: &mut self.large_slots,
            own: &mut self.chunks,
            shared: self.member.chunks(),
        };
        self.ops.retire_through(wr, |op| bufs.release(&op))
    }

    /// A receive that completed in error: a shared buffer goes back into the shared queue
    /// (it is the pool's, not this connection's), unless the device is gone.
    fn recycle_failed_recv(&self, i: u32) {
        if self.own_recv.is_none() && !matches!(self.phase, Phase::DeviceGone) {
            if let Err(e) = self.post_recv(i) {
                tracing::debug!("shared receive {i} not reposted: {e}");
            }
        }
    }

    /// The buffer holding staging chunk `chunk` (own or shared) and the chunk's offset in it.
    fn chunk_at(&self, chunk: usize) -> Result<(&Buffer, usize), IserError> {
        if chunk < OWN_CHUNKS {
            return Ok((&self.stage, chunk * CHUNK));
        }
        let shared = self
            .member
            .chunks()
            .ok_or(IserError::OutOfRange("staging chunk"))?;
        Ok((shared.buffer(), (chunk - OWN_CHUNKS) * shared.chunk_len()))
    }

    /// Takes a staging chunk: an own one first, else a shared one. The flag says it was the
    /// connection's last own chunk (its request is then signaled, so a completion that
    /// frees own chunks is always coming while the connection waits for one).
    fn alloc_chunk(&mut self) -> Option<(usize, bool)> {
        if let Some(c) = self.chunks.alloc() {
            return Some((c, self.chunks.available() == 0));
        }
        let i = self.member.chunks()?.alloc()?;
        Some((OWN_CHUNKS + i, false))
    }

    /// The pools buffers go back to.
    fn bufs(&mut self) -> Bufs<'_> {
        Bufs {
            small: &mut self.small_slots,
            large: &mut self.large_slots,
            own: &mut self.chunks,
            shared: self.member.chunks(),
        }
    }

    /// Gives staging chunk `chunk` back where it came from.
    fn free_chunk(&mut self, chunk: usize) {
        self.bufs().free_chunk(chunk);
    }

    /// Requests on the send queue not known to be completed.
    fn sq_used(&self) -> u32 {
        self.ops.queued() as u32
    }

    /// Gives an op's buffers back (cache blocks are unpinned when it is dropped).
    fn release(&mut self, op: &Op) {
        self.bufs().release(op);
    }

    /// One received iSER message (receive buffer `i`, `len` bytes).
    fn received(
        &mut self,
        i: u32,
        len: usize,
        conn: &mut Connection<Payload>,
        dir: &dyn Directory,
        now_ms: u64,
    ) -> Result<(), IserError> {
        if len > RECV_LEN {
            return Err(IserError::ReceiveTooLong { len, cap: RECV_LEN });
        }
        // SAFETY: the receive into buffer `i` has completed; the caller posts it again only
        // after this function returns, when the slice is gone; only this thread touches it
        // (a shared buffer belongs to the completion's connection until it is reposted).
        let bytes = unsafe {
            match &self.own_recv {
                Some((_, buf)) => buf
                    .slice_quiescent(i as usize * RECV_LEN, len)
                    .map_err(IserError::rdma("reading a receive buffer")),
                None => match self.member.recv() {
                    Some(pool) => pool.received(i, len),
                    None => Err(IserError::OutOfRange("shared receive")),
                },
            }
        }?;
        let (msg, pdu) = IserMessage::split(bytes)?;
        let IserMessage::Control(hdr) = msg else {
            // Linux never sends Hello; iSERHelloRequired is never negotiated Yes here
            return Err(IserError::Hello);
        };
        let counted = if conn.is_rdma() && in_command_window(pdu) {
            self.credits.on_command()
        } else {
            self.credits.on_unexpected()
        };
        if let Err(e) = counted {
            tracing::debug!("{e}");
        }
        conn.rx_pdu(pdu, hdr.remote_bufs(), dir, now_ms);
        Ok(())
    }

    /// Posts what the connection has queued, in order, as far as send-queue room, send
    /// buffers and staging chunks allow (the rest waits for completions), all in one post.
    /// Grants the command window the posted receives allow first. Posts nothing before the
    /// CM reported the connection established (a post may fail until then; the event loop
    /// pumps again after each CM event).
    pub fn pump(&mut self, conn: &mut Connection<Payload>) -> Result<(), IserError> {
        conn.set_window_limit(self.credits.grant());
        if !self.phase.established() {
            return Ok(());
        }
        self.landings.sweep(conn);
        self.fresh_arm = false;
        let mut gathered = self.gather(conn);
        if gathered.is_ok() && !self.send_armed && self.needs_send_events() {
            // armed before the batch is posted: its completions raise events
            gathered = self.arm_send();
        }
        if gathered.is_ok() && std::mem::take(&mut self.fresh_arm) {
            // what completed before the arming raised no event: take it now (it frees
            // buffers and queue room for another gather)
            gathered = self.poll_send(Some(conn)).and_then(|()| self.gather(conn));
        }
        let posted = self.post_batch();
        gathered.and(posted)
    }

    /// Moves what the connection queued into the batch (see [`IserLink::pump`]).
    fn gather(&mut self, conn: &mut Connection<Payload>) -> Result<(), IserError> {
        loop {
            let mut p = match self.pending.pop_front() {
                Some(p) => p,
                None => match conn.pop_rdma_tx() {
                    Some(tx) => Pending { tx, done: 0 },
                    None => return Ok(()),
                },
            };
            // the list is the link's, kept between READs (no allocation per command)
            let mut sges = std::mem::take(&mut self.sges);
            if let RdmaTx::Put {
                remote, data, len, ..
            } = &p.tx
                && p.done == 0
                && self.direct_sges(data, *len, &mut sges)
            {
                let wrs = sges.len().div_ceil(self.max_sge) as u32;
                if self.sq_max - self.sq_used() < wrs {
                    self.sges = sges;
                    self.pending.push_front(p);
                    return Ok(());
                }
                let (remote, len) = (*remote, *len as u64);
                let RdmaTx::Put { data, .. } = p.tx else {
                    self.sges = sges;
                    continue;
                };
                let r = self.put_direct(&sges, remote, data);
                self.sges = sges;
                r?;
                self.moved[DataPath::InDirect as usize] += len;
                continue;
            }
            self.sges = sges;
            if let RdmaTx::Get {
                itt,
                xfer,
                remote,
                offset,
                len,
            } = p.tx
                && p.done == 0
            {
                match self.get_into_landing(itt, xfer, remote, offset as usize, len as usize)? {
                    Landed::Posted => continue,
                    Landed::NoRoom => {
                        self.pending.push_front(p);
                        return Ok(());
                    }
                    Landed::NoLanding => {}
                }
            }
            if !self.progress(&mut p)? {
                self.pending.push_front(p);
                return Ok(());
            }
        }
    }

    /// Adds one request to the batch (posting the batch first when it is full) and puts
    /// it on the send-queue FIFO. Sends and RDMA READs are signaled; an RDMA WRITE is
    /// signaled when `last_chunk` (it holds the last free staging chunk), when the send
    /// queue is left with little room, or after [`UNSIGNALED_MAX`] unsignaled ones.
    fn queue(&mut self, wr: u64, req: Request<'_>, last_chunk: bool) -> Result<(), IserError> {
        let sges = match req {
            Request::Send(s) | Request::Write(s, _) | Request::Read(s, _) => s,
        };
        if !self.batch.has_room(sges.len()) {
            self.post_batch()?;
        }
        let room_after = self.sq_max.saturating_sub(self.sq_used() + 1);
        let signaled = match req {
            Request::Send(_) | Request::Read(..) => true,
            Request::Write(..) => {
                last_chunk || room_after < UNSIGNALED_MAX || self.unsignaled >= UNSIGNALED_MAX
            }
        };
        let r = match req {
            Request::Send(s) => self.batch.send(
                wr,
                s,
                SendOptions {
                    signaled,
                    ..Default::default()
                },
            ),
            Request::Write(s, to) => self.batch.rdma_write(wr, s, to, signaled),
            Request::Read(s, to) => self.batch.rdma_read(wr, s, to, signaled),
        };
        r.map_err(IserError::rdma(req.what()))?;
        self.ops.queue(wr);
        self.unsignaled = if signaled { 0 } else { self.unsignaled + 1 };
        Ok(())
    }

    /// Posts the batch. On failure the requests that did not go on the queue are taken
    /// back (their buffers released) and the error returned: the connection ends.
    fn post_batch(&mut self) -> Result<(), IserError> {
        if !self.batch.is_empty() {
            self.calls[Call::PostSend as usize] += 1;
            // nothing that needs its completion (an RDMA READ) is posted unarmed
            if !self.send_armed && self.needs_send_events() {
                self.arm_send()?;
            }
        }
        let Err(BatchError { posted, error }) = self.qp.post_batch(&mut self.batch) else {
            return Ok(());
        };
        for i in (posted..self.batch.len()).rev() {
            let Some(wr) = self.batch.wr_id(i) else {
                continue;
            };
            // the batch's requests are the last ones queued
            if let Some(op) = self.ops.unqueue_last(wr) {
                self.release(&op);
            }
        }
        self.batch.clear();
        Err(IserError::rdma("posting send-queue requests")(error))
    }

    /// True when READ data from the cache goes out straight from its blocks (see
    /// [`Link::sends_from_blocks`](crate::transport::Link::sends_from_blocks)).
    pub fn sends_from_blocks(&self) -> bool {
        self.dev.sends_from_cache()
    }

    /// Fills `sges` with the first `len` bytes of `data` when all of them lie in
    /// registered cache arenas; false (copy through staging instead) otherwise.
    fn direct_sges(&self, data: &Payload, len: usize, sges: &mut Vec<Sge>) -> bool {
        sges.clear();
        let Payload::Blocks(refs) = data else {
            return false;
        };
        let mut left = len;
        for r in refs.iter() {
            if left == 0 {
                break;
            }
            let b = r.bytes();
            let n = b.len().min(left);
            if n == 0 {
                continue;
            }
            let Ok(n32) = u32::try_from(n) else {
                return false;
            };
            let addr = b.as_ptr() as usize;
            let Some(lkey) = self.dev.lkey_of(addr, n) else {
                return false;
            };
            sges.push(Sge {
                addr: addr as u64,
                len: n32,
                lkey,
            });
            left -= n;
        }
        left == 0 && len > 0
    }

    /// Queues RDMA WRITEs straight from pinned cache blocks, `max_sge` pieces each; the
    /// last request holds the payload (its pins) until it is retired — the earlier ones
    /// complete before it on the RC queue pair.
    fn put_direct(
        &mut self,
        sges: &[Sge],
        remote: RemoteBuf,
        data: Payload,
    ) -> Result<(), IserError> {
        let mut data = Some(data);
        let mut offset = 0u64;
        let groups = sges.chunks(self.max_sge);
        let last = groups.len().saturating_sub(1);
        for (i, group) in groups.enumerate() {
            let payload = if i == last {
                data.take().ok_or(IserError::PayloadGone)?
            } else {
                Payload::Bytes(Vec::new())
            };
            let wr = self.ops.insert(Op::WriteFrom { payload });
            let to = Remote {
                addr: remote.va.wrapping_add(offset),
                rkey: remote.stag,
            };
            if let Err(e) = self.queue(wr, Request::Write(group, to), false) {
                self.ops.take(wr);
                return Err(e);
            }
            offset += group.iter().map(|s| u64::from(s.len)).sum::<u64>();
        }
        Ok(())
    }

    /// Holds `landing` for command `itt`'s write data (see [`Landings`]); gives it back
    /// when the READs could not reach it (the cache arenas are not registered) or the
    /// command has one already.
    pub fn land(&mut self, itt: u32, landing: Landing) -> Option<Landing> {
        if !self.sends_from_blocks() || !self.phase.established() {
            return Some(landing);
        }
        self.landings.add(itt, landing)
    }

    /// Command `itt`'s landing, once no RDMA READ into it is in flight.
    pub fn take_landing(&mut self, itt: u32) -> Option<Landing> {
        self.landings.take(itt)
    }

    /// Queues the RDMA READs of a `Get` straight into the landing held for it, `max_sge`
    /// pieces each, when there is one made for exactly this fetch and every piece lies in
    /// a registered arena.
    fn get_into_landing(
        &mut self,
        itt: u32,
        xfer: u32,
        remote: RemoteBuf,
        offset: usize,
        len: usize,
    ) -> Result<Landed, IserError> {
        let Some(landing) = self.landings.for_fetch(itt, offset, len) else {
            return Ok(Landed::NoLanding);
        };
        let mut pieces = std::mem::take(&mut self.pieces);
        pieces.clear();
        let mut sges = std::mem::take(&mut self.sges);
        sges.clear();
        let mapped = landing.pieces(offset, len, &mut pieces)
            && pieces.iter().all(|&(addr, n)| {
                let (Ok(n32), Some(lkey)) = (u32::try_from(n), self.dev.lkey_of(addr, n)) else {
                    return false;
                };
                sges.push(Sge {
                    addr: addr as u64,
                    len: n32,
                    lkey,
                });
                true
            });
        self.pieces = pieces;
        if !mapped || sges.is_empty() {
            self.sges = sges;
            return Ok(Landed::NoLanding);
        }
        let wrs = sges.len().div_ceil(self.max_sge) as u32;
        if self.sq_max - self.sq_used() < wrs {
            self.sges = sges;
            return Ok(Landed::NoRoom);
        }
        let mut done = 0usize;
        let mut result = Ok(());
        for group in sges.chunks(self.max_sge) {
            let n: usize = group.iter().map(|s| s.len as usize).sum();
            let wr = self.ops.insert(Op::Land { itt, xfer, len: n });
            // the Get's buffer begins at its own first byte (`offset` of the transfer)
            let from = Remote {
                addr: remote.va.wrapping_add(done as u64),
                rkey: remote.stag,
            };
            if let Err(e) = self.queue(wr, Request::Read(group, from), false) {
                self.ops.take(wr);
                result = Err(e);
                break;
            }
            self.landings.posted(itt, 1);
            self.reads_out += 1;
            done += n;
        }
        self.sges = sges;
        self.moved[DataPath::OutDirect as usize] += done as u64;
        result.map(|()| Landed::Posted)
    }

    /// Queues as much of `p` as possible; true when all of it is queued.
    fn progress(&mut self, p: &mut Pending) -> Result<bool, IserError> {
        match &p.tx {
            RdmaTx::Pdu { bhs, data } => {
                if self.sq_used() >= self.sq_max {
                    return Ok(false);
                }
                let len = ISER_HEADERS_LEN + data.len();
                if len > SEND_LEN {
                    return Err(IserError::PduTooLong(len));
                }
                let slot = if len <= SMALL_LEN {
                    self.small_slots.alloc()
                } else {
                    self.large_slots.alloc().map(|l| SMALL_SENDS + l)
                };
                let Some(slot) = slot else {
                    return Ok(false);
                };
                let at = slot_offset(slot);
                let iser_hdr = ControlHeader::NONE.encode();
                // SAFETY: the slot is free (no Send from it in flight) and owned by this
                // thread until its Send completes.
                let r = unsafe {
                    self.send
                        .write_quiescent(at, &iser_hdr[..ISER_HDR_LEN])
                        .and_then(|()| self.send.write_quiescent(at + ISER_HDR_LEN, bhs))
                        .and_then(|()| self.send.write_quiescent(at + ISER_HEADERS_LEN, data))
                };
                if let Err(e) = r {
                    self.release(&Op::Send { slot });
                    return Err(IserError::rdma("writing a send buffer")(e));
                }
                let Some(sge) = self.send_mr.sge(at, len as u32) else {
                    self.release(&Op::Send { slot });
                    return Err(IserError::OutOfRange("send buffer"));
                };
                let wr = self.ops.insert(Op::Send { slot });
                if let Err(e) = self.queue(wr, Request::Send(&[sge]), false) {
                    if let Some(op) = self.ops.take(wr) {
                        self.release(&op);
                    }
                    return Err(e);
                }
                Ok(true)
            }
            RdmaTx::Put { .. } | RdmaTx::Get { .. } => self.post_staged(p),
        }
    }

    /// Queues the rest of a `Put` (copied into staging chunks, then RDMA WRITEs) or a `Get`
    /// (RDMA READs into staging chunks), one chunk per request; false when send-queue room
    /// or chunks ran out (the rest waits for completions).
    fn post_staged(&mut self, p: &mut Pending) -> Result<bool, IserError> {
        let (remote, len, read) = match &p.tx {
            RdmaTx::Put { remote, len, .. } => (*remote, *len, false),
            RdmaTx::Get { remote, len, .. } => (*remote, *len as usize, true),
            RdmaTx::Pdu { .. } => return Ok(true),
        };
        while p.done < len {
            if self.sq_used() >= self.sq_max {
                return Ok(false);
            }
            let Some((chunk, last_own)) = self.alloc_chunk() else {
                return Ok(false);
            };
            let n = CHUNK.min(len - p.done);
            let op = match &p.tx {
                RdmaTx::Get { itt, xfer, .. } => Op::Read {
                    chunk,
                    itt: *itt,
                    xfer: *xfer,
                    len: n,
                },
                RdmaTx::Put { data, .. } => match self.stage_copy(data, chunk, p.done, n) {
                    Ok(()) => Op::Write { chunk },
                    Err(e) => {
                        self.free_chunk(chunk);
                        return Err(e);
                    }
                },
                RdmaTx::Pdu { .. } => {
                    self.free_chunk(chunk);
                    return Ok(true);
                }
            };
            let wr = self.ops.insert(op);
            if let Err(e) = self.post_rdma(wr, (chunk, last_own), n, remote, p.done, read) {
                self.ops.take(wr);
                self.free_chunk(chunk);
                return Err(e);
            }
            if read {
                self.reads_out += 1;
            }
            p.done += n;
            let path = if read {
                DataPath::OutStaged
            } else {
                DataPath::InStaged
            };
            self.moved[path as usize] += n as u64;
        }
        Ok(true)
    }

    /// Copies bytes `from..from + n` of `data` into staging `chunk`.
    fn stage_copy(
        &self,
        data: &Payload,
        chunk: usize,
        from: usize,
        n: usize,
    ) -> Result<(), IserError> {
        let mut at = 0;
        while at < n {
            let piece = data.chunk(from + at);
            let piece = &piece[..piece.len().min(n - at)];
            if piece.is_empty() {
                return Err(IserError::ShortData);
            }
            let (buf, base) = self.chunk_at(chunk)?;
            // SAFETY: the chunk is free (no RDMA on it in flight) and this connection's
            // until its WRITE completes; only this thread touches it.
            let r = unsafe { buf.write_quiescent(base + at, piece) };
            r.map_err(IserError::rdma("writing a staging chunk"))?;
            at += piece.len();
        }
        Ok(())
    }

    /// Queues one RDMA WRITE (or READ) of `n` bytes between staging `chunk` and the
    /// initiator's buffer `remote`, `offset` bytes in.
    fn post_rdma(
        &mut self,
        wr: u64,
        (chunk, last_own): (usize, bool),
        n: usize,
        remote: RemoteBuf,
        offset: usize,
        read: bool,
    ) -> Result<(), IserError> {
        let sge = match chunk.checked_sub(OWN_CHUNKS) {
            None => self.stage_mr.sge(chunk * CHUNK, n as u32),
            Some(i) => self.member.chunks().and_then(|s| s.sge(i, n)),
        };
        let sge = sge.ok_or(IserError::OutOfRange("staging chunk"))?;
        let to = Remote {
            addr: remote.va.wrapping_add(offset as u64),
            rkey: remote.stag,
        };
        let req = if read {
            Request::Read(&[sge], to)
        } else {
            Request::Write(&[sge], to)
        };
        self.queue(wr, req, last_own)
    }

    /// The timer's check (every tick): `Err` when the established connection has had
    /// requests on its send queue with none completing for [`STALL_LIMIT_MS`].
    pub fn watchdog(&mut self, now_ms: u64) -> Result<(), IserError> {
        iser_stats::add_data(std::mem::take(&mut self.moved));
        iser_stats::add_calls(std::mem::take(&mut self.calls));
        if self.phase.established() {
            // the send queue's completions nobody woke for (the last responses of a
            // connection gone quiet): taken here, before the stall is judged
            self.poll_send(None)?;
        }
        let progress = std::mem::take(&mut self.sq_progress);
        if progress || self.ops.queued() == 0 || !matches!(self.phase, Phase::Established) {
            self.stalled_since = None;
            return Ok(());
        }
        let since = *self.stalled_since.get_or_insert(now_ms);
        if now_ms.saturating_sub(since) >= STALL_LIMIT_MS {
            return Err(IserError::SendStalled {
                secs: STALL_LIMIT_MS / 1000,
            });
        }
        Ok(())
    }

    /// Nothing queued and nothing on the send queue: all that was sent has completed.
    pub fn idle(&self) -> bool {
        self.pending.is_empty() && self.ops.queued() == 0
    }

    /// The connection wants to close: true once its last Sends have completed, or
    /// [`FINISH_LIMIT`] after the first ask (an initiator that posts no receives would
    /// keep them retrying for ever; the disconnect flushes them).
    pub fn may_close(&mut self) -> bool {
        let since = match self.phase {
            Phase::Connecting | Phase::Established => {
                let since = Instant::now();
                self.phase = Phase::Finishing {
                    since,
                    established: self.phase.established(),
                };
                since
            }
            Phase::Finishing { since, .. } => since,
            Phase::Disconnected { .. } | Phase::DeviceGone => return true,
        };
        if !self.idle() && self.phase.established() {
            // wait for the last Sends with the send queue armed (what completed before
            // the arming is taken now: it raised no event)
            let armed = self.send_armed || self.arm_send().is_ok();
            if armed && let Err(e) = self.poll_send(None) {
                tracing::debug!("closing: {e}");
            }
        }
        self.idle() || since.elapsed() >= FINISH_LIMIT
    }

    /// Starts the teardown: disconnects (the queue pair goes to the error state, every
    /// posted request completes flushed) and drops what was not posted yet.
    pub fn disconnect(&mut self) {
        self.pending.clear();
        self.batch.clear();
        if matches!(self.phase, Phase::DeviceGone) {
            return;
        }
        if let Err(e) = self.qp.disconnect() {
            tracing::debug!("rdma_disconnect: {e}");
        }
        if !matches!(self.phase, Phase::Disconnected { .. }) {
            self.phase = Phase::Disconnected {
                since: Instant::now(),
                // never connected: no TIMEWAIT_EXIT will come
                timewait_exit: !self.phase.established(),
            };
        }
    }

    /// When the teardown started (`disconnect`), if it has.
    pub fn disconnected_since(&self) -> Option<Instant> {
        match self.phase {
            Phase::Disconnected { since, .. } => Some(since),
            Phase::DeviceGone => Some(Instant::now()),
            _ => None,
        }
    }

    /// One step of the teardown, without blocking: reads CM events and flushed
    /// completions (releasing their buffers). True once the link can be dropped: every
    /// posted request is back and the CM left TIMEWAIT.
    pub fn drain(&mut self) -> bool {
        while let Ok(Some(ev)) = self.cm.get_event() {
            match ev.kind {
                CmEventKind::DeviceRemoval => self.device_removed(),
                CmEventKind::TimewaitExit => {
                    if let Phase::Disconnected { timewait_exit, .. } = &mut self.phase {
                        *timewait_exit = true;
                    }
                }
                _ => {}
            }
        }
        if matches!(self.phase, Phase::DeviceGone) {
            return true;
        }
        while let Ok(true) = self.cq.get_event() {}
        while let Ok(true) = self.scq.get_event() {}
        let mut batch = [Completion::default(); POLL_BATCH];
        for cq in [Arc::clone(&self.cq), Arc::clone(&self.scq)] {
            self.drain_cq(&cq, &mut batch);
        }
        matches!(
            self.phase,
            Phase::Disconnected {
                timewait_exit: true,
                ..
            }
        ) && self.ops.queued() == 0
    }

    /// Takes a disconnected link's flushed completions from `cq`, releasing their buffers.
    fn drain_cq(&mut self, cq: &CompletionQueue, batch: &mut [Completion]) {
        loop {
            let n = match cq.poll(batch) {
                Ok(n) => n,
                Err(e) => {
                    tracing::debug!("draining: {e}");
                    break;
                }
            };
            for c in &batch[..n] {
                // flushed requests complete with an error, signaled or not; a flushed
                // shared receive goes back into the shared queue
                if c.wr_id & RECV_WR != 0 {
                    self.recycle_failed_recv((c.wr_id & !RECV_WR) as u32);
                } else if let Some(op) = self.retire_through(c.wr_id) {
                    self.release(&op);
                }
            }
            if n < batch.len() {
                break;
            }
        }
    }
}

/// The buffer pools an op's buffers go back to.
struct Bufs<'a> {
    small: &'a mut Pool,
    large: &'a mut Pool,
    own: &'a mut Pool,
    shared: Option<&'a share::SharedChunks>,
}

impl Bufs<'_> {
    /// Gives an op's buffers back to their pools (cache blocks are unpinned when it is
    /// dropped).
    fn release(&mut self, op: &Op) {
        match *op {
            Op::Send { slot } if slot < SMALL_SENDS => self.small.free(slot),
            Op::Send { slot } => self.large.free(slot - SMALL_SENDS),
            Op::Write { chunk } | Op::Read { chunk, .. } => self.free_chunk(chunk),
            Op::WriteFrom { .. } | Op::Land { .. } => {}
        }
    }

    fn free_chunk(&mut self, chunk: usize) {
        match chunk.checked_sub(OWN_CHUNKS) {
            None => self.own.free(chunk),
            Some(i) => {
                if let Some(s) = self.shared {
                    s.free(i);
                }
            }
        }
    }
}

/// Offset of send slot `slot` in the send buffer: the small slots first, then the large.
fn slot_offset(slot: usize) -> usize {
    match slot.checked_sub(SMALL_SENDS) {
        None => slot * SMALL_LEN,
        Some(l) => SMALL_SENDS * SMALL_LEN + l * SEND_LEN,
    }
}

impl Drop for IserLink {
    fn drop(&mut self) {
        // a link dropped with requests still out (teardown cut short, device removed) gives
        // the shared chunks they hold back to its thread
        for op in self.ops.take_all() {
            self.release(&op);
        }
        self.count_memory(-1);
        iser_stats::add_data(self.moved);
        iser_stats::add_calls(self.calls);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const _: () = {
        assert!(RECV_LEN >= ISER_HEADERS_LEN + RECV_DATA);
        assert!(SEND_LEN >= ISER_HEADERS_LEN + 8192);
        assert!(RECVS > MAX_WINDOW);
        // a response with the largest sense data fits a small send buffer
        assert!(SMALL_LEN >= ISER_HEADERS_LEN + 2 + 252);
    };

    #[test]
    fn send_slots_do_not_overlap() {
        let mut end = 0;
        for slot in 0..SMALL_SENDS + LARGE_SENDS {
            let at = slot_offset(slot);
            assert_eq!(at, end, "slot {slot}");
            end = at
                + if slot < SMALL_SENDS {
                    SMALL_LEN
                } else {
                    SEND_LEN
                };
        }
        assert_eq!(end, SEND_BYTES);
    }

    #[test]
    fn ops_go_back_to_their_pools() {
        let (mut small, mut large, mut own) = (
            Pool::new(SMALL_SENDS),
            Pool::new(LARGE_SENDS),
            Pool::new(OWN_CHUNKS),
        );
        let s = small.alloc().unwrap();
        let l = large.alloc().unwrap();
        let c = own.alloc().unwrap();
        let mut bufs = Bufs {
            small: &mut small,
            large: &mut large,
            own: &mut own,
            shared: None,
        };
        bufs.release(&Op::Send { slot: s });
        bufs.release(&Op::Send {
            slot: SMALL_SENDS + l,
        });
        bufs.release(&Op::Write { chunk: c });
        // a shared chunk without a shared set is ignored, not put in the own pool
        bufs.release(&Op::Write {
            chunk: OWN_CHUNKS + 3,
        });
        assert_eq!(small.available(), SMALL_SENDS);
        assert_eq!(large.available(), LARGE_SENDS);
        assert_eq!(own.available(), OWN_CHUNKS);
    }
}
