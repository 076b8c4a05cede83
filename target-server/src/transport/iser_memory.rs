//! Gauges of what iSER holds registered with RDMA devices (bytes pinned, by use), the
//! receives it keeps posted, its shared receive queues and connections: updated when a
//! connection, a shared pool or a device's cache registration comes or goes (never per
//! I/O), read by the metrics scrape. Compiled without iSER too (all zero then).

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
    }
}
