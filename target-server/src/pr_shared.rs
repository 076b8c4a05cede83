//! What the registry's `Lun` holds of persistent reservations that several gateways share
//! (an RBD LUN exported by several): the state object's name, this gateway's identity in
//! notifications, the watch and whether it holds, and the counters the metrics show. The
//! work — the cluster's state read, changed and watched — is `backend::pr_cluster`'s.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The largest state object read (1024 registrations with the longest names fit).
pub(crate) const MAX_STATE: usize = 2 << 20;
/// How long a copy stays trusted after the cluster last confirmed the gateway's watch
/// (librados confirms it every 5 s): shorter than the time a PR OUT waits for the other
/// gateways (`pr_cluster`'s 10 s) before it fences the silent ones, so a gateway cut off or
/// frozen has stopped admitting media access on its copy before that PR OUT's status.
pub(crate) const LEASE_MS: u64 = 8_000;

/// Milliseconds since the first call (a process-wide monotonic clock).
pub(crate) fn now_ms() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// The shared reservations of one LUN.
pub struct SharedPr {
    /// The state object's name.
    pub(crate) object: String,
    /// This gateway in notifications (its own are not applied twice).
    pub(crate) me: u64,
    /// This gateway's PR OUTs of the LUN, one at a time.
    pub(crate) local: Mutex<()>,
    /// The watch's cookie, when it is established.
    pub(crate) cookie: Mutex<Option<u64>>,
    /// The watch broke: the `pr-<lun>` thread makes it again.
    pub(crate) broken: AtomicBool,
    /// The `pr-<lun>` thread runs.
    pub(crate) started: AtomicBool,
    /// When ([`now_ms`]) the cluster last confirmed the watch.
    pub(crate) confirmed_ms: AtomicU64,
    /// Counters for the metrics.
    pub stats: SharedPrStats,
}

impl SharedPr {
    /// The watch is broken: the copy may be stale (media access waits).
    pub fn is_stale(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// The cluster confirmed the watch `ms_ago` milliseconds ago.
    pub(crate) fn confirmed(&self, ms_ago: u64) {
        self.confirmed_ms
            .store(now_ms().saturating_sub(ms_ago), Ordering::Release);
    }

    /// Per command, before it is checked against the copy: a copy the cluster has not
    /// confirmed for [`LEASE_MS`] (this gateway was cut off or frozen, and may have been
    /// fenced meanwhile) is no longer trusted — `lu` answers media access NOT READY until
    /// the `pr-<lun>` thread has watched and read the state again.
    pub fn check_lease(&self, lu: &scsi::LogicalUnit) {
        let age = now_ms().saturating_sub(self.confirmed_ms.load(Ordering::Acquire));
        if age > LEASE_MS && self.distrust(lu) {
            tracing::warn!(
                age_ms = age,
                "reservation copy not confirmed by the cluster: media access waits"
            );
        }
    }

    /// The copy may miss other gateways' changes from now on (the watch broke, the lease
    /// ran out): `lu` admits no media access until [`trust`](Self::trust). Whether the
    /// copy was trusted until now.
    pub(crate) fn distrust(&self, lu: &scsi::LogicalUnit) -> bool {
        lu.set_pr_unknown(true);
        !self.broken.swap(true, Ordering::AcqRel)
    }

    /// Watched again and read again: the copy is current.
    pub(crate) fn trust(&self, lu: &scsi::LogicalUnit) {
        self.broken.store(false, Ordering::Release);
        lu.set_pr_unknown(false);
    }
}

/// What the metrics show of a shared LUN's reservations.
#[derive(Default)]
pub struct SharedPrStats {
    /// State changes this gateway wrote to the cluster.
    pub written: AtomicU64,
    /// Compare-and-write attempts that found the state changed by another gateway.
    pub races: AtomicU64,
    /// Notifications from other gateways taken.
    pub taken: AtomicU64,
    /// Notifications some gateway did not answer in time.
    pub unanswered: AtomicU64,
    /// Gateways fenced (blocklisted) because they did not answer.
    pub fenced: AtomicU64,
    /// Watches that broke and were made again.
    pub rewatched: AtomicU64,
}

/// The state object of image `image`.
pub fn object_name(image: &str) -> String {
    format!("numatgt.pr.{image}")
}

/// The shared reservations of an RBD LUN whose target has ALUA peers (several gateways);
/// `None` for every other LUN, which keeps local reservations.
pub(crate) fn for_lun(
    alua: &config::AluaConfig,
    store: &cache::BackingStore,
) -> Option<Arc<SharedPr>> {
    let image = store.rbd_image()?;
    if alua.peers.is_empty() || image.is_read_only() {
        return None;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Some(Arc::new(SharedPr {
        object: object_name(&image.spec().image),
        me: (u64::from(std::process::id()) << 40) ^ nanos,
        local: Mutex::new(()),
        cookie: Mutex::new(None),
        broken: AtomicBool::new(false),
        started: AtomicBool::new(false),
        confirmed_ms: AtomicU64::new(now_ms()),
        stats: SharedPrStats::default(),
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn object_names() {
        assert_eq!(super::object_name("disk"), "numatgt.pr.disk");
    }
}
