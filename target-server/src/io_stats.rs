//! I/O statistics of logical units, kept where the I/O happens: one counter block per
//! connection and LUN ([`ConnLunIo`]), written only by that connection's event thread (no
//! lock, no shared cache line, no read-modify-write instruction per I/O), and read by
//! scrapes and `tgtadm --op stat`. Each LUN's [`LunStats`] lists the live blocks and keeps
//! the totals of closed connections; its lock is taken when a connection first uses the LUN,
//! when it closes, and by readers — never per I/O.
//!
//! Also the command classes ([`IoClass`]), what one command moves ([`IoKind`]), the latency
//! histogram's buckets and the error kinds (`numatgt_lun_errors_total{sense_key}`).

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// What kind of command, as node_exporter's disk statistics count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    Read = 0,
    Write = 1,
    Flush = 2,
    Discard = 3,
    /// Everything else (INQUIRY, TEST UNIT READY, MODE SENSE, reservations, …): counted in
    /// the latency histogram and the errors only.
    Other = 4,
}

impl IoClass {
    /// Every class, in index order.
    pub const ALL: [IoClass; 5] = [
        IoClass::Read,
        IoClass::Write,
        IoClass::Flush,
        IoClass::Discard,
        IoClass::Other,
    ];

    /// The `op` label.
    pub fn label(self) -> &'static str {
        match self {
            IoClass::Read => "read",
            IoClass::Write => "write",
            IoClass::Flush => "flush",
            IoClass::Discard => "discard",
            IoClass::Other => "other",
        }
    }

    /// Counted in `io_now` and the busy times.
    fn is_io(self) -> bool {
        self != IoClass::Other
    }
}

/// What one command moves: its class and its bytes (transfer length for reads and writes,
/// deallocated bytes for discards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoKind {
    pub class: IoClass,
    pub bytes: u64,
}

impl IoKind {
    /// A command that is not I/O.
    pub const OTHER: IoKind = IoKind {
        class: IoClass::Other,
        bytes: 0,
    };
}

/// What travels with a command from its arrival to its answer: when it arrived, what it
/// is, and which counter block of its connection records it ([`NO_STATS`]: none).
#[derive(Debug, Clone, Copy)]
pub struct IoTag {
    pub started_ns: u64,
    pub kind: IoKind,
    pub stats: u32,
}

/// [`IoTag::stats`] of a command no counter block records.
pub const NO_STATS: u32 = u32::MAX;

impl IoTag {
    /// A command recorded nowhere (tests, internal jobs).
    pub const NONE: IoTag = IoTag {
        started_ns: 0,
        kind: IoKind::OTHER,
        stats: NO_STATS,
    };
}

/// Upper bounds of the latency histogram's buckets, in nanoseconds (50 µs … 5 s); one more
/// bucket (+Inf) follows. The same as the backing stores' own histograms.
pub const BUCKET_BOUNDS_NS: [u64; 13] = cache::LATENCY_BOUNDS_NS;
/// Buckets per histogram (the bounds and +Inf).
pub const BUCKETS: usize = BUCKET_BOUNDS_NS.len() + 1;

/// The `sense_key` label of `numatgt_lun_errors_total`: the sixteen sense keys, then the
/// statuses that carry no sense data.
pub const ERROR_KINDS: [&str; 20] = [
    "no_sense",
    "recovered_error",
    "not_ready",
    "medium_error",
    "hardware_error",
    "illegal_request",
    "unit_attention",
    "data_protect",
    "blank_check",
    "vendor_specific",
    "copy_aborted",
    "aborted_command",
    "reserved_0c",
    "volume_overflow",
    "miscompare",
    "completed",
    "reservation_conflict",
    "busy",
    "task_set_full",
    "other",
];

/// Indexes of the [`ERROR_KINDS`] entries that are not sense keys.
pub mod kind {
    /// RESERVATION CONFLICT.
    pub const RESERVATION_CONFLICT: usize = 16;
    /// BUSY.
    pub const BUSY: usize = 17;
    /// TASK SET FULL.
    pub const TASK_SET_FULL: usize = 18;
    /// Any other status, or CHECK CONDITION without readable sense data.
    pub const OTHER: usize = 19;
}

/// Which [`ERROR_KINDS`] entry a non-GOOD result counts under (`None`: GOOD).
pub fn error_kind(status: u8, sense: &[u8]) -> Option<usize> {
    use scsi::status::*;
    match status {
        GOOD | CONDITION_MET | INTERMEDIATE | INTERMEDIATE_CONDITION_MET => None,
        CHECK_CONDITION => Some(scsi::sense::sense_key(sense).map_or(kind::OTHER, usize::from)),
        RESERVATION_CONFLICT => Some(kind::RESERVATION_CONFLICT),
        BUSY => Some(kind::BUSY),
        TASK_SET_FULL => Some(kind::TASK_SET_FULL),
        _ => Some(kind::OTHER),
    }
}

/// The clock's origin: its first use in this process.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since the first call in this process (a monotonic clock).
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// `at` on the [`now_ns`] clock (0 when before its origin), without reading the clock
/// once the origin is set: an event loop stamps its commands with its turn's wake-up.
pub fn ns_at(at: Instant) -> u64 {
    at.saturating_duration_since(epoch()).as_nanos() as u64
}

/// Indexes of [`IoCounters::c`].
pub mod c {
    /// Reads received, and their requested bytes.
    pub const RD_SUBM: usize = 0;
    pub const RD_SUBM_BYTES: usize = 1;
    /// Reads answered (any status), bytes of the successful ones, and their latency sum.
    pub const RD_DONE: usize = 2;
    pub const RD_BYTES: usize = 3;
    pub const RD_NS: usize = 4;
    pub const WR_SUBM: usize = 5;
    pub const WR_SUBM_BYTES: usize = 6;
    pub const WR_DONE: usize = 7;
    pub const WR_BYTES: usize = 8;
    pub const WR_NS: usize = 9;
    pub const FLUSH_DONE: usize = 10;
    pub const DISCARD_DONE: usize = 11;
    pub const DISCARD_BYTES: usize = 12;
    /// Reads, writes, flushes and discards in flight (live blocks only).
    pub const INFLIGHT: usize = 13;
    /// Time with I/O in flight, and in-flight count integrated over time.
    pub const IO_NS: usize = 14;
    pub const WEIGHTED_NS: usize = 15;
    /// When `INFLIGHT` last changed.
    pub const STAMP_NS: usize = 16;
    /// Commands not ending GOOD.
    pub const ERRORS: usize = 17;
    pub const COUNT: usize = 18;
}

/// One block of counters; also the plain sum of many ([`IoTotals`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoTotals {
    pub c: [u64; c::COUNT],
    /// Latency histogram per [`IoClass`] (not cumulative), and its sum in ns.
    pub hist: [[u64; BUCKETS]; 5],
    pub hist_ns: [u64; 5],
    pub errors: [u64; ERROR_KINDS.len()],
}

impl Default for IoTotals {
    fn default() -> Self {
        IoTotals {
            c: [0; c::COUNT],
            hist: [[0; BUCKETS]; 5],
            hist_ns: [0; 5],
            errors: [0; ERROR_KINDS.len()],
        }
    }
}

impl IoTotals {
    fn add(&mut self, o: &IoTotals) {
        for (a, b) in self.c.iter_mut().zip(o.c.iter()) {
            *a = a.wrapping_add(*b);
        }
        for (ha, hb) in self.hist.iter_mut().zip(o.hist.iter()) {
            for (a, b) in ha.iter_mut().zip(hb.iter()) {
                *a = a.wrapping_add(*b);
            }
        }
        for (a, b) in self.hist_ns.iter_mut().zip(o.hist_ns.iter()) {
            *a = a.wrapping_add(*b);
        }
        for (a, b) in self.errors.iter_mut().zip(o.errors.iter()) {
            *a = a.wrapping_add(*b);
        }
    }
}

/// The counters of one connection on one LUN. One writer (the connection's event thread):
/// updates are a load and a store, readers see each counter whole.
#[derive(Debug)]
pub struct ConnLunIo {
    /// The session the connection belongs to (tgtadm's `sid`).
    pub tsih: u16,
    c: [AtomicU64; c::COUNT],
    hist: [[AtomicU64; BUCKETS]; 5],
    hist_ns: [AtomicU64; 5],
    errors: [AtomicU64; ERROR_KINDS.len()],
}

fn bump(a: &AtomicU64, v: u64) {
    // single writer: no read-modify-write instruction needed
    a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

impl ConnLunIo {
    fn new(tsih: u16) -> ConnLunIo {
        ConnLunIo {
            tsih,
            c: std::array::from_fn(|_| AtomicU64::new(0)),
            hist: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            hist_ns: std::array::from_fn(|_| AtomicU64::new(0)),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn get(&self, i: usize) -> u64 {
        self.c[i].load(Ordering::Relaxed)
    }

    /// Account the time since the in-flight count last changed (node_exporter's io_ticks
    /// and time_in_queue), then move the count by `delta`.
    fn inflight_change(&self, now: u64, up: bool) {
        let inflight = self.get(c::INFLIGHT);
        let since = now.saturating_sub(self.get(c::STAMP_NS));
        if inflight > 0 {
            bump(&self.c[c::IO_NS], since);
            bump(&self.c[c::WEIGHTED_NS], since.saturating_mul(inflight));
        }
        self.c[c::STAMP_NS].store(now, Ordering::Relaxed);
        let n = if up {
            inflight + 1
        } else {
            inflight.saturating_sub(1)
        };
        self.c[c::INFLIGHT].store(n, Ordering::Relaxed);
    }

    /// A command arrived (call once per command, before [`completed`](Self::completed)).
    pub fn submitted(&self, kind: IoKind, now: u64) {
        match kind.class {
            IoClass::Read => {
                bump(&self.c[c::RD_SUBM], 1);
                bump(&self.c[c::RD_SUBM_BYTES], kind.bytes);
            }
            IoClass::Write => {
                bump(&self.c[c::WR_SUBM], 1);
                bump(&self.c[c::WR_SUBM_BYTES], kind.bytes);
            }
            IoClass::Flush | IoClass::Discard | IoClass::Other => {}
        }
        if kind.class.is_io() {
            self.inflight_change(now, true);
        }
    }

    /// The command's answer is queued: its latency, status and (on success) bytes.
    pub fn completed(&self, tag: &IoTag, now: u64, status: u8, sense: &[u8]) {
        let ns = now.saturating_sub(tag.started_ns);
        let err = error_kind(status, sense);
        let ok = err.is_none();
        let bytes = if ok { tag.kind.bytes } else { 0 };
        match tag.kind.class {
            IoClass::Read => {
                bump(&self.c[c::RD_DONE], 1);
                bump(&self.c[c::RD_BYTES], bytes);
                bump(&self.c[c::RD_NS], ns);
            }
            IoClass::Write => {
                bump(&self.c[c::WR_DONE], 1);
                bump(&self.c[c::WR_BYTES], bytes);
                bump(&self.c[c::WR_NS], ns);
            }
            IoClass::Flush => bump(&self.c[c::FLUSH_DONE], 1),
            IoClass::Discard => {
                bump(&self.c[c::DISCARD_DONE], 1);
                bump(&self.c[c::DISCARD_BYTES], bytes);
            }
            IoClass::Other => {}
        }
        if tag.kind.class.is_io() {
            self.inflight_change(now, false);
        }
        let b = BUCKET_BOUNDS_NS
            .iter()
            .position(|&bound| ns <= bound)
            .unwrap_or(BUCKETS - 1);
        let k = tag.kind.class as usize;
        bump(&self.hist[k][b], 1);
        bump(&self.hist_ns[k], ns);
        if let Some(e) = err {
            bump(&self.c[c::ERRORS], 1);
            bump(&self.errors[e], 1);
        }
    }

    /// A copy of the counters.
    pub fn totals(&self) -> IoTotals {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoTotals {
            c: std::array::from_fn(|i| l(&self.c[i])),
            hist: std::array::from_fn(|k| std::array::from_fn(|b| l(&self.hist[k][b]))),
            hist_ns: std::array::from_fn(|k| l(&self.hist_ns[k])),
            errors: std::array::from_fn(|e| l(&self.errors[e])),
        }
    }
}

#[derive(Debug, Default)]
struct Blocks {
    live: Vec<Arc<ConnLunIo>>,
    /// What closed connections counted (nothing in flight).
    retired: IoTotals,
}

/// The I/O statistics of one logical unit: the live per-connection blocks and the totals of
/// closed connections.
#[derive(Debug, Default)]
pub struct LunStats {
    blocks: parking_lot::Mutex<Blocks>,
}

impl LunStats {
    /// A new counter block for a connection of session `tsih` (once per connection and LUN).
    pub fn attach(&self, tsih: u16) -> Arc<ConnLunIo> {
        let io = Arc::new(ConnLunIo::new(tsih));
        self.blocks.lock().live.push(Arc::clone(&io));
        io
    }

    /// The connection of `io` closed: its counts join the totals (what was in flight is
    /// not in flight any more).
    pub fn detach(&self, io: &Arc<ConnLunIo>) {
        let mut t = io.totals();
        t.c[c::INFLIGHT] = 0;
        t.c[c::STAMP_NS] = 0;
        let mut b = self.blocks.lock();
        if let Some(i) = b.live.iter().position(|x| Arc::ptr_eq(x, io)) {
            b.live.swap_remove(i);
            b.retired.add(&t);
        }
    }

    /// Everything counted on this LUN so far.
    pub fn totals(&self) -> IoTotals {
        let b = self.blocks.lock();
        let mut t = b.retired.clone();
        for io in &b.live {
            let mut x = io.totals();
            x.c[c::STAMP_NS] = 0;
            t.add(&x);
        }
        t
    }

    /// What each live session counted (tgtadm's per-session rows), by TSIH.
    pub fn by_session(&self) -> Vec<(u16, IoTotals)> {
        let b = self.blocks.lock();
        let mut out: Vec<(u16, IoTotals)> = Vec::new();
        for io in &b.live {
            let x = io.totals();
            match out.iter_mut().find(|(t, _)| *t == io.tsih) {
                Some((_, t)) => t.add(&x),
                None => out.push((io.tsih, x)),
            }
        }
        out
    }
}

/// A connection's counter blocks, one per LUN it has used, found by the LUN's [`LunStats`].
/// The index of a block is what [`IoTag::stats`] carries.
#[derive(Debug, Default)]
pub struct ConnIo {
    tsih: u16,
    blocks: Vec<(Arc<LunStats>, Arc<ConnLunIo>)>,
}

impl ConnIo {
    /// The connection logged in to session `tsih`.
    pub fn set_session(&mut self, tsih: u16) {
        self.tsih = tsih;
    }

    /// The index of the block for `lun` (attached on first use).
    pub fn index_for(&mut self, lun: &Arc<LunStats>) -> u32 {
        if let Some(i) = self.blocks.iter().position(|(l, _)| Arc::ptr_eq(l, lun)) {
            return i as u32;
        }
        let io = lun.attach(self.tsih);
        self.blocks.push((Arc::clone(lun), io));
        (self.blocks.len() - 1) as u32
    }

    /// The block at `index` (from an [`IoTag`]).
    pub fn block(&self, index: u32) -> Option<&ConnLunIo> {
        self.blocks.get(index as usize).map(|(_, io)| &**io)
    }

    /// A command arrived: count it in its block (if it has one).
    pub fn submitted(&self, tag: &IoTag) {
        if let Some(b) = self.block(tag.stats) {
            b.submitted(tag.kind, tag.started_ns);
        }
    }

    /// A command's answer is queued now: count it in its block (if it has one).
    pub fn completed(&self, tag: &IoTag, status: u8, sense: &[u8]) {
        if let Some(b) = self.block(tag.stats) {
            b.completed(tag, now_ns(), status, sense);
        }
    }

    /// The connection closes: every block joins its LUN's totals.
    pub fn detach_all(&mut self) {
        for (lun, io) in self.blocks.drain(..) {
            lun.detach(&io);
        }
    }
}

impl Drop for ConnIo {
    fn drop(&mut self) {
        self.detach_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(class: IoClass, bytes: u64, started_ns: u64) -> IoTag {
        IoTag {
            started_ns,
            kind: IoKind { class, bytes },
            stats: 0,
        }
    }

    #[test]
    fn counts_reads_writes_latency_and_errors() {
        let lun = Arc::new(LunStats::default());
        let mut conn = ConnIo::default();
        conn.set_session(7);
        let i = conn.index_for(&lun);
        assert_eq!(conn.index_for(&lun), i, "one block per LUN");
        let io = conn.block(i).expect("block");
        let r = tag(IoClass::Read, 4096, 1_000);
        io.submitted(r.kind, 1_000);
        let w = tag(IoClass::Write, 8192, 2_000);
        io.submitted(w.kind, 2_000);
        assert_eq!(lun.totals().c[c::INFLIGHT], 2);
        io.completed(&r, 81_000, 0, &[]); // 80 µs
        // CHECK CONDITION, fixed sense, MEDIUM ERROR
        let sense = [0x70, 0, 0x03, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x11, 0];
        io.completed(&w, 3_002_000, 2, &sense); // 3 ms
        let t = lun.totals();
        assert_eq!(t.c[c::RD_DONE], 1);
        assert_eq!(t.c[c::RD_BYTES], 4096);
        assert_eq!(t.c[c::RD_NS], 80_000);
        assert_eq!(t.c[c::WR_DONE], 1);
        assert_eq!(t.c[c::WR_BYTES], 0, "failed writes move no bytes");
        assert_eq!(t.c[c::INFLIGHT], 0);
        // busy from 1000 to 3_002_000; two in flight from 2000 to 81_000
        assert_eq!(t.c[c::IO_NS], 3_001_000);
        assert_eq!(
            t.c[c::WEIGHTED_NS],
            1_000 + 2 * 79_000 + (3_002_000 - 81_000)
        );
        assert_eq!(
            t.hist[IoClass::Read as usize][1],
            1,
            "80 µs is in the 100 µs bucket"
        );
        assert_eq!(
            t.hist[IoClass::Write as usize][6],
            1,
            "3 ms is in the 5 ms bucket"
        );
        assert_eq!(t.errors[3], 1);
        assert_eq!(ERROR_KINDS[3], "medium_error");
        assert_eq!(lun.by_session()[0].0, 7);
    }

    #[test]
    fn closed_connections_keep_their_counts_and_leave_nothing_in_flight() {
        let lun = Arc::new(LunStats::default());
        let mut conn = ConnIo::default();
        let i = conn.index_for(&lun);
        let io = conn.block(i).expect("block");
        let r = tag(IoClass::Read, 512, 0);
        io.submitted(r.kind, 0);
        io.completed(&r, 10, 0, &[]);
        io.submitted(r.kind, 20); // never answered
        drop(conn);
        let t = lun.totals();
        assert_eq!(t.c[c::RD_DONE], 1);
        assert_eq!(t.c[c::RD_BYTES], 512);
        assert_eq!(t.c[c::INFLIGHT], 0);
        assert!(lun.by_session().is_empty());
    }

    #[test]
    fn error_kinds_from_status_and_sense() {
        assert_eq!(
            ERROR_KINDS[kind::RESERVATION_CONFLICT],
            "reservation_conflict"
        );
        assert_eq!(ERROR_KINDS[kind::BUSY], "busy");
        assert_eq!(ERROR_KINDS[kind::TASK_SET_FULL], "task_set_full");
        assert_eq!(ERROR_KINDS[kind::OTHER], "other");
        assert_eq!(error_kind(0, &[]), None);
        assert_eq!(error_kind(0x04, &[]), None);
        assert_eq!(error_kind(0x08, &[]), Some(17));
        assert_eq!(error_kind(0x40, &[]), Some(19));
        assert_eq!(error_kind(0x02, &[0x71, 0, 0x03]), Some(3));
        assert_eq!(error_kind(0x18, &[]), Some(16));
        assert_eq!(error_kind(0x02, &[0x72, 0x05, 0x24, 0]), Some(5));
        assert_eq!(error_kind(0x02, &[]), Some(19));
        assert_eq!(error_kind(0x28, &[]), Some(18));
    }
}
