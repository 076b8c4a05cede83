//! What the metrics show of shipped I/O, per LUN (keyed by the LUN's ownership record):
//! commands shipped from here and how long the owner took to answer them, commands lost
//! with a link, and commands served here for other gateways.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds (the last bucket is +Inf).
pub const BOUNDS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.0,
];

/// One LUN's shipped-I/O counters.
#[derive(Debug, Default)]
pub struct ShipStats {
    /// Commands shipped to the owner.
    pub sent: AtomicU64,
    /// Shipped commands answered by the owner, per latency bucket (the last: +Inf).
    pub buckets: [AtomicU64; BOUNDS.len() + 1],
    /// The sum of the answered commands' latencies, in nanoseconds.
    pub sum_ns: AtomicU64,
    /// Shipped commands whose link broke before the owner answered.
    pub lost: AtomicU64,
    /// Commands that could not be shipped (link full).
    pub refused: AtomicU64,
    /// Commands other gateways shipped here, served as the owner.
    pub served: AtomicU64,
}

impl ShipStats {
    pub(super) fn answered(&self, took: Duration) {
        let s = took.as_secs_f64();
        let i = BOUNDS.iter().position(|&b| s <= b).unwrap_or(BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }

    pub(super) fn failed(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// The latency buckets' counts.
    pub fn counts(&self) -> Vec<u64> {
        self.buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }
}

static ALL: OnceLock<Mutex<HashMap<String, Arc<ShipStats>>>> = OnceLock::new();

/// The counters of the LUN whose ownership record is `record` (made on first use).
pub fn of(record: &str) -> Arc<ShipStats> {
    let mut m = ALL
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(s) = m.get(record) {
        return Arc::clone(s);
    }
    let s = Arc::new(ShipStats::default());
    m.insert(record.to_owned(), Arc::clone(&s));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_their_buckets() {
        let s = ShipStats::default();
        s.answered(Duration::from_micros(50));
        s.answered(Duration::from_millis(3));
        s.answered(Duration::from_secs(5));
        let c = s.counts();
        assert_eq!(c[0], 1);
        assert_eq!(c[5], 1);
        assert_eq!(c[BOUNDS.len()], 1);
        assert_eq!(c.iter().sum::<u64>(), 3);
        assert!(Arc::ptr_eq(&of("r"), &of("r")));
    }
}
