//! One rate limit as a virtual-scheduling bucket (GCRA, the ATM cell rate algorithm) kept
//! in atomics: `tat`, the theoretical arrival time of the next unit, moves forward by each
//! request's cost; a request may start once `tat - tolerance` is reached. The tolerance is
//! the burst: how far ahead of the rate a quiet bucket lets requests go. Every request is
//! accepted (reserved) and told when it may start, so the callers never retry and requests
//! start in the order they were charged.

use std::sync::atomic::{AtomicU64, Ordering};

/// A rate in units per second (IOPS: one unit per command; bytes per second: one per byte).
#[derive(Debug, Default)]
pub struct Bucket {
    /// Femtoseconds per unit (10^15 / the rate in units per second; at least 1; 0: no
    /// limit).
    fs_per_unit: AtomicU64,
    /// How far ahead of the rate requests may go, in nanoseconds.
    tolerance_ns: AtomicU64,
    /// The theoretical arrival time of the next unit, on the caller's clock (ns).
    tat_ns: AtomicU64,
}

impl Bucket {
    /// `rate` units per second (0: no limit) with `tolerance_ns` of slack, from `now_ns` on:
    /// what was charged at the old rate is forgotten (commands already told when to start
    /// keep their time).
    pub fn set(&self, rate: u64, tolerance_ns: u64, now_ns: u64) {
        let fs = 1_000_000_000_000_000u64
            .checked_div(rate)
            .map_or(0, |f| f.max(1));
        self.tolerance_ns.store(tolerance_ns, Ordering::Relaxed);
        self.fs_per_unit.store(fs, Ordering::Relaxed);
        self.tat_ns.store(now_ns, Ordering::Relaxed);
    }

    /// Charges `units` at `now_ns`: when the request may start (`now_ns` when at once). A
    /// bucket without a limit answers `now_ns` and keeps nothing.
    pub fn reserve(&self, now_ns: u64, units: u64) -> u64 {
        let fs = self.fs_per_unit.load(Ordering::Relaxed);
        if fs == 0 {
            return now_ns;
        }
        let cost =
            ((u128::from(units) * u128::from(fs)) / 1_000_000).min(u128::from(u64::MAX / 4)) as u64;
        let tolerance = self.tolerance_ns.load(Ordering::Relaxed);
        let mut tat = self.tat_ns.load(Ordering::Acquire);
        loop {
            let start = now_ns.max(tat.saturating_sub(tolerance));
            let next = tat.max(now_ns).saturating_add(cost);
            match self
                .tat_ns
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return start,
                Err(seen) => tat = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    #[test]
    fn no_limit_starts_everything_at_once() {
        let b = Bucket::default();
        assert_eq!(b.reserve(5, 1_000_000), 5);
        b.set(0, MS, 10);
        assert_eq!(b.reserve(20, 1), 20);
    }

    #[test]
    fn requests_beyond_the_tolerance_are_spaced_by_the_rate() {
        let b = Bucket::default();
        b.set(1000, 0, 0); // 1000 IOPS: 1 ms apart
        let starts: Vec<u64> = (0..5).map(|_| b.reserve(0, 1)).collect();
        assert_eq!(starts, [0, MS, 2 * MS, 3 * MS, 4 * MS]);
    }

    #[test]
    fn the_tolerance_lets_a_quiet_bucket_burst() {
        let b = Bucket::default();
        b.set(1000, 10 * MS, 0);
        // 10 ms of tolerance at 1 ms a request: 11 go at once, the 12th waits 1 ms
        let starts: Vec<u64> = (0..12).map(|_| b.reserve(0, 1)).collect();
        assert!(starts[..11].iter().all(|&s| s == 0), "{starts:?}");
        assert_eq!(starts[11], MS);
    }

    #[test]
    fn idle_time_is_not_saved_beyond_the_tolerance() {
        let b = Bucket::default();
        b.set(1000, 2 * MS, 0);
        for _ in 0..3 {
            b.reserve(0, 1);
        }
        // a second later: only the tolerance is there again
        let starts: Vec<u64> = (0..5).map(|_| b.reserve(S, 1)).collect();
        assert_eq!(starts, [S, S, S, S + MS, S + 2 * MS]);
    }

    #[test]
    fn bytes_are_charged_by_size() {
        let b = Bucket::default();
        b.set(50_000_000, 0, 0); // 50 MB/s
        assert_eq!(b.reserve(0, 500_000), 0);
        // the next request waits for 500 000 bytes at 50 MB/s: 10 ms
        assert_eq!(b.reserve(0, 1), 10 * MS);
    }

    #[test]
    fn a_new_rate_starts_from_now() {
        let b = Bucket::default();
        b.set(10, 0, 0);
        for _ in 0..10 {
            b.reserve(0, 1);
        }
        b.set(1000, 0, 5 * MS);
        assert_eq!(b.reserve(5 * MS, 1), 5 * MS);
        assert_eq!(b.reserve(5 * MS, 1), 6 * MS);
    }

    proptest! {
        /// Over any schedule of requests, what starts by time t never exceeds
        /// rate × t + what the tolerance allows (plus the request that opens it).
        #[test]
        fn never_faster_than_the_rate(
            rate in 1u64..100_000,
            tol_ms in 0u64..50,
            gaps in proptest::collection::vec(0u64..2 * MS, 1..400),
        ) {
            let b = Bucket::default();
            let tol = tol_ms * MS;
            b.set(rate, tol, 0);
            let mut now = 0;
            let mut starts = Vec::new();
            for g in gaps {
                now += g;
                let s = b.reserve(now, 1);
                prop_assert!(s >= now);
                starts.push(s);
            }
            starts.sort_unstable();
            let first = starts[0];
            for (i, &s) in starts.iter().enumerate() {
                // i + 1 requests started within [first, s]
                let allowed = (u128::from(s - first + tol) * u128::from(rate)) / u128::from(S) + 1;
                prop_assert!((i as u128 + 1) <= allowed + 1, "{} started by {} (rate {rate}, tol {tol})", i + 1, s - first);
            }
        }
    }
}
