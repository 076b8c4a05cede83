//! Gauges of what iSER holds registered with RDMA devices (bytes pinned, by use), the
//! receives it keeps posted, its shared receive queues and connections: updated when a
//! connection, a shared pool or a device's cache registration comes or goes (never per
//! I/O), read by the metrics scrape. And counters of the data path: the bytes its RDMA data
//! moved, by path (straight from cache blocks or through staging chunks), and the verbs
//! calls that enter the kernel on soft-RoCE (completion events read, completion queue
//! re-arms, send-queue posts) with the completions they took; each connection counts its
//! own and adds them here once a tick and when it ends. Compiled without iSER too (all
//! zero then).

use std::sync::atomic::{AtomicI64, Ordering};

/// What registered memory is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Receive buffers (shared receive queues and per-connection receive queues).
    Receive,
    /// Send buffers (iSER headers and PDUs).
    Send,
    /// Staging chunks (RDMA READ targets, copied READ data).
    Staging,
    /// The block cache's node arenas (RDMA WRITE sources).
    Cache,
}

impl Kind {
    /// Every kind, in the order the metrics list them.
    pub const ALL: [Kind; 4] = [Kind::Receive, Kind::Send, Kind::Staging, Kind::Cache];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Receive => "receive",
            Kind::Send => "send",
            Kind::Staging => "staging",
            Kind::Cache => "cache",
        }
    }
}

static BYTES: [AtomicI64; 4] = [const { AtomicI64::new(0) }; 4];
static POSTED_SHARED: AtomicI64 = AtomicI64::new(0);
static POSTED_OWN: AtomicI64 = AtomicI64::new(0);
static SRQS: AtomicI64 = AtomicI64::new(0);
static CONNECTIONS: AtomicI64 = AtomicI64::new(0);
static POOL_PAGES: [AtomicI64; 2] = [const { AtomicI64::new(0) }; 2];
static DATA: [AtomicI64; 4] = [const { AtomicI64::new(0) }; 4];

/// How RDMA moved a command's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// READ data sent by RDMA WRITEs straight from pinned cache blocks.
    InDirect,
    /// READ data copied into staging chunks, then sent by RDMA WRITEs.
    InStaged,
    /// WRITE data fetched by RDMA READs into staging chunks, then copied out.
    OutStaged,
    /// WRITE data fetched by RDMA READs straight into the cache slots it is kept in.
    OutDirect,
}

impl DataPath {
    /// Every path, in the order the metrics list them.
    pub const ALL: [DataPath; 4] = [
        DataPath::InDirect,
        DataPath::InStaged,
        DataPath::OutStaged,
        DataPath::OutDirect,
    ];

    /// The metric labels: iSCSI's direction (in: to the initiator) and the path.
    pub fn labels(self) -> (&'static str, &'static str) {
        match self {
            DataPath::InDirect => ("in", "direct"),
            DataPath::InStaged => ("in", "staged"),
            DataPath::OutStaged => ("out", "staged"),
            DataPath::OutDirect => ("out", "direct"),
        }
    }
}

static CALLS: [AtomicI64; 5] = [const { AtomicI64::new(0) }; 5];

/// What the event loop asked of the verbs library for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// A completion event read from one of the connection's two completion channels (one
    /// wake-up).
    CqEvent,
    /// A completion queue armed (`ibv_req_notify_cq`).
    CqArm,
    /// A batch posted on the send queue (`ibv_post_send`: one doorbell).
    PostSend,
    /// Completions polled of send-queue requests (Sends, RDMA READs, signaled WRITEs).
    SendCompletion,
    /// Completions polled of receives (iSER messages that arrived).
    RecvCompletion,
}

impl Call {
    /// Every call, in the order the counters hold them.
    pub const ALL: [Call; 5] = [
        Call::CqEvent,
        Call::CqArm,
        Call::PostSend,
        Call::SendCompletion,
        Call::RecvCompletion,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Call::CqEvent => "cq_event",
            Call::CqArm => "cq_arm",
            Call::PostSend => "post_send",
            Call::SendCompletion => "send",
            Call::RecvCompletion => "receive",
        }
    }
}

/// A connection's counts by `Call::ALL` order, added to the totals.
pub fn add_calls(counts: [u64; 5]) {
    add_to(&CALLS, &counts);
}

/// Bytes a connection moved by `DataPath::ALL` order, added to the totals.
pub fn add_data(bytes: [u64; 4]) {
    add_to(&DATA, &bytes);
}

/// Adds a connection's counts to the shared totals (skipping zeros: no write to the line).
fn add_to(totals: &[AtomicI64], counts: &[u64]) {
    for (total, &n) in totals.iter().zip(counts) {
        if n > 0 {
            total.fetch_add(n as i64, Ordering::Relaxed);
        }
    }
}

fn slot(k: Kind) -> &'static AtomicI64 {
    &BYTES[k as usize]
}

/// Registered bytes of `k` changed by `delta`.
pub fn add(k: Kind, delta: i64) {
    slot(k).fetch_add(delta, Ordering::Relaxed);
}

/// Posted receives changed by `delta` (`shared`: in shared receive queues).
pub fn add_posted(shared: bool, delta: i64) {
    let g = if shared { &POSTED_SHARED } else { &POSTED_OWN };
    g.fetch_add(delta, Ordering::Relaxed);
}

/// Shared receive queues changed by `delta`.
pub fn add_srqs(delta: i64) {
    SRQS.fetch_add(delta, Ordering::Relaxed);
}

/// iSER connections changed by `delta`.
pub fn add_connections(delta: i64) {
    CONNECTIONS.fetch_add(delta, Ordering::Relaxed);
}

/// Pages of a new shared pool found on its event thread's node (`local`) and elsewhere.
pub fn add_pool_pages(local: i64, remote: i64) {
    POOL_PAGES[0].fetch_add(local, Ordering::Relaxed);
    POOL_PAGES[1].fetch_add(remote, Ordering::Relaxed);
}

/// A reading of every gauge.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    /// Registered bytes by [`Kind::ALL`] order.
    pub bytes: [i64; 4],
    /// Receives posted in shared receive queues.
    pub posted_shared: i64,
    /// Receives posted in per-connection receive queues.
    pub posted_own: i64,
    /// Shared receive queues.
    pub srqs: i64,
    /// iSER connections (queue pairs set up, not yet released).
    pub connections: i64,
    /// Pages of the shared pools made so far, on their thread's node and elsewhere.
    pub pool_pages: [i64; 2],
    /// Data bytes moved so far by [`DataPath::ALL`] order.
    pub data: [i64; 4],
    /// Verbs calls and completions so far by [`Call::ALL`] order.
    pub calls: [i64; 5],
}

/// Reads the gauges.
pub fn snapshot() -> Snapshot {
    let mut bytes = [0; 4];
    for (b, s) in bytes.iter_mut().zip(&BYTES) {
        *b = s.load(Ordering::Relaxed);
    }
    Snapshot {
        bytes,
        posted_shared: POSTED_SHARED.load(Ordering::Relaxed),
        posted_own: POSTED_OWN.load(Ordering::Relaxed),
        srqs: SRQS.load(Ordering::Relaxed),
        connections: CONNECTIONS.load(Ordering::Relaxed),
        pool_pages: [
            POOL_PAGES[0].load(Ordering::Relaxed),
            POOL_PAGES[1].load(Ordering::Relaxed),
        ],
        data: std::array::from_fn(|i| DATA[i].load(Ordering::Relaxed)),
        calls: std::array::from_fn(|i| CALLS[i].load(Ordering::Relaxed)),
    }
}
