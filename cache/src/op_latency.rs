//! Latency of a backing store's own operations (an RBD image's reads, writes, zeroing and
//! flushes as librbd answers them), as lock-free per-operation histograms that the metrics
//! read. Recording is a clock read, an atomic add per counter; nothing allocates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Upper bounds of the buckets in nanoseconds (50 µs … 5 s); one more bucket (+Inf)
/// follows. The LUN command histograms use the same bounds.
pub const LATENCY_BOUNDS_NS: [u64; 13] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    100_000_000,
    500_000_000,
    1_000_000_000,
    5_000_000_000,
];
/// Buckets per histogram (the bounds and +Inf).
pub const LATENCY_BUCKETS: usize = LATENCY_BOUNDS_NS.len() + 1;

/// The operations timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    Read = 0,
    Write = 1,
    /// Deallocation / zeroing (UNMAP, WRITE SAME with UNMAP).
    Zero = 2,
    Flush = 3,
}

impl StoreOp {
    pub const ALL: [StoreOp; 4] = [StoreOp::Read, StoreOp::Write, StoreOp::Zero, StoreOp::Flush];

    /// The `op` label.
    pub fn label(self) -> &'static str {
        match self {
            StoreOp::Read => "read",
            StoreOp::Write => "write",
            StoreOp::Zero => "zero",
            StoreOp::Flush => "flush",
        }
    }
}

/// One operation's histogram, as read: counts per bucket (not cumulative), the sum of
/// latencies in ns, and how many failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpHistogram {
    pub buckets: [u64; LATENCY_BUCKETS],
    pub sum_ns: u64,
    pub errors: u64,
    /// How many of them were asynchronous calls (librbd aio completed into an event
    /// thread) rather than blocking ones on an I/O worker.
    pub asynchronous: u64,
}

/// Per-operation latency histograms of one store.
#[derive(Debug, Default)]
pub struct OpLatency {
    buckets: [[AtomicU64; LATENCY_BUCKETS]; 4],
    sum_ns: [AtomicU64; 4],
    errors: [AtomicU64; 4],
    asynchronous: [AtomicU64; 4],
    /// Operations started and not finished (blocking calls running, asynchronous ones
    /// started and not yet reaped).
    in_flight: AtomicU64,
}

impl OpLatency {
    /// Runs `f` and records how long it took under `op` (and whether it failed).
    pub fn time<T, E>(&self, op: StoreOp, f: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let t0 = Instant::now();
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let r = f();
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.record(op, ns, r.is_ok());
        r
    }

    /// One asynchronous operation was started (its end is [`record_async`](Self::record_async)).
    pub fn started_async(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// Records one asynchronous operation of `op` (counted by
    /// [`started_async`](Self::started_async)) that took `ns` nanoseconds (timed by its
    /// caller) and whether it succeeded.
    pub fn record_async(&self, op: StoreOp, ns: u64, ok: bool) {
        self.asynchronous[op as usize].fetch_add(1, Ordering::Relaxed);
        // saturating: a recording without its start (a test) must not wrap the gauge
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        self.record(op, ns, ok);
    }

    fn record(&self, op: StoreOp, ns: u64, ok: bool) {
        let i = op as usize;
        let b = LATENCY_BOUNDS_NS
            .iter()
            .position(|&bound| ns <= bound)
            .unwrap_or(LATENCY_BOUNDS_NS.len());
        self.buckets[i][b].fetch_add(1, Ordering::Relaxed);
        self.sum_ns[i].fetch_add(ns, Ordering::Relaxed);
        if !ok {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Operations in flight now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The histogram of `op` now.
    pub fn snapshot(&self, op: StoreOp) -> OpHistogram {
        let i = op as usize;
        let mut h = OpHistogram {
            sum_ns: self.sum_ns[i].load(Ordering::Relaxed),
            errors: self.errors[i].load(Ordering::Relaxed),
            asynchronous: self.asynchronous[i].load(Ordering::Relaxed),
            ..Default::default()
        };
        for (out, b) in h.buckets.iter_mut().zip(self.buckets[i].iter()) {
            *out = b.load(Ordering::Relaxed);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_buckets_sums_and_errors() {
        let l = OpLatency::default();
        let ok: Result<(), ()> = l.time(StoreOp::Read, || Ok(()));
        assert!(ok.is_ok());
        let err: Result<(), &str> = l.time(StoreOp::Flush, || {
            std::thread::sleep(std::time::Duration::from_millis(2));
            Err("down")
        });
        assert!(err.is_err());
        let r = l.snapshot(StoreOp::Read);
        assert_eq!(r.buckets.iter().sum::<u64>(), 1);
        assert_eq!(r.errors, 0);
        let f = l.snapshot(StoreOp::Flush);
        assert_eq!(f.errors, 1);
        assert!(f.sum_ns >= 2_000_000, "{}", f.sum_ns);
        // 2 ms lands in the 2.5 ms bucket (index 5) or, on a slow machine, a later one
        assert_eq!(f.buckets[..5].iter().sum::<u64>(), 0, "{:?}", f.buckets);
        assert_eq!(l.snapshot(StoreOp::Write), OpHistogram::default());
        assert_eq!(f.asynchronous, 0);
        // an asynchronous call is counted as one as well, and in flight until recorded
        assert_eq!(l.in_flight(), 0);
        l.started_async();
        assert_eq!(l.in_flight(), 1);
        l.record_async(StoreOp::Read, 60_000, false);
        assert_eq!(l.in_flight(), 0);
        let r = l.snapshot(StoreOp::Read);
        assert_eq!((r.asynchronous, r.errors), (1, 1));
        assert_eq!(
            r.buckets[1], 1,
            "60 µs is in the 100 µs bucket: {:?}",
            r.buckets
        );
    }
}
