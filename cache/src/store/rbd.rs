//! The RBD store (tgt's `rbd`): a Ceph RBD image through librbd (loaded at run time by the
//! `rbd` crate), `path` = `[pool/]image[@snap]` (a snapshot is read-only) on the cluster
//! that `--bsopts` names, on the connection every image of that cluster shares (or one of
//! its own). Every write is acknowledged by the cluster (no librbd cache), so durable
//! already — unless the admin turns librbd's cache on (`rbd_cache=true`), and then a
//! durable write is flushed; a discard zeroes (librbd skips partial-object discards, which
//! would leave old data where zeros were promised; whole objects are still deallocated); a
//! flush gives up after librados' op timeout and a margin. The image's update watch is the
//! resize watch; its allocation is what `rbd_diff_iterate2` reports. An event thread reads,
//! writes and flushes through librbd's asynchronous calls ([`ReadEngine::Callback`],
//! [`super::AioRing`]); a write-back batch has all its writes in flight at once. Each
//! operation's latency is kept.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{BackingError, Caps, OpenRequest, PendingOp, ReadEngine, Store};
use crate::op_latency::{OpLatency, StoreOp};
use crate::uring::OpKind;

/// An open RBD image and whether its header changed since the size was last looked at.
pub struct RbdStore {
    image: rbd::Image,
    /// Set by the image's update watch (a librbd thread), taken by
    /// [`Store::take_changed`].
    changed: Arc<AtomicBool>,
    /// How long librbd takes, per operation.
    latency: OpLatency,
    /// The longest a flush may take before it is reported failed (librados' OSD op
    /// timeout and a margin): a flush to a sick cluster must not hang SYNCHRONIZE CACHE or
    /// the daemon's stop.
    flush_limit: Duration,
    /// The admin turned librbd's own cache on (`rbd_cache=true` in bsopts): librbd may
    /// acknowledge a write before the cluster has it, so a durable write is followed by a
    /// flush.
    librbd_cache: bool,
}

impl std::fmt::Debug for RbdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RbdStore({})", self.image.spec())
    }
}

/// Margin over `rados_osd_op_timeout` before a flush is given up.
const FLUSH_MARGIN_SECS: u64 = 5;

/// The flush limit for cluster options `c`: their `rados_osd_op_timeout` (seconds; 0 means
/// none, then 60 s) plus a margin.
fn flush_limit(c: &rbd::ClusterOptions) -> Duration {
    // the defaults come first in the list, the admin's values after them: the last wins
    let op = c
        .effective_settings()
        .iter()
        .rev()
        .find(|(k, _)| k == "rados_osd_op_timeout")
        .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(60.0)
        .min(3600.0);
    Duration::from_secs_f64(op) + Duration::from_secs(FLUSH_MARGIN_SECS)
}

/// Whether cluster options `c` turn librbd's cache on (the last `rbd_cache` setting wins;
/// Ceph's spellings of true).
fn librbd_cache(c: &rbd::ClusterOptions) -> bool {
    c.effective_settings()
        .iter()
        .rev()
        .find(|(k, _)| k == "rbd_cache")
        .is_some_and(|(_, v)| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on"
            )
        })
}

/// Open the image `req.path` on the cluster `req.bsopts` names (tgt's
/// `conf=…;id=…;cluster=…` and librados settings; keys in `req.skip` are the caller's),
/// with its update watch set: on the connection every image of that cluster shares, or
/// on one of its own when it is fenced alone ([`super::OpenOptions::fenced_alone`]).
pub fn open(req: &OpenRequest<'_>) -> Result<Box<dyn Store>, BackingError> {
    let spec = req.path.to_string_lossy();
    let err = |source| BackingError::Rbd {
        path: req.path.to_owned(),
        source,
    };
    let invalid = |m: String| err(io::Error::new(io::ErrorKind::InvalidInput, m));
    let image_spec = rbd::ImageSpec::parse(&spec).map_err(invalid)?;
    let cluster = rbd::ClusterOptions::parse(req.bsopts, req.skip).map_err(invalid)?;
    let image = if req.options.fenced_alone {
        rbd::open(&image_spec, &cluster, req.options.readonly)
    } else {
        rbd::open_shared(&image_spec, &cluster, req.options.readonly)
    }
    .map_err(err)?;
    let changed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&changed);
    image
        .update_watch(move || flag.store(true, Ordering::Release))
        .map_err(err)?;
    Ok(Box::new(RbdStore {
        image,
        changed,
        latency: OpLatency::default(),
        flush_limit: flush_limit(&cluster),
        librbd_cache: librbd_cache(&cluster),
    }))
}

impl RbdStore {
    /// The open image (its exclusive lock and the records beside it belong to the caller).
    pub fn image(&self) -> &rbd::Image {
        &self.image
    }

    /// An image flush that reports ETIMEDOUT after the flush limit instead of waiting for
    /// a cluster that never answers (librbd finishes it later, or never; nothing waits).
    fn bounded_flush(&self) -> io::Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.image.aio_flush(Box::new(move |res, ()| {
            let _ = tx.send(res);
        }));
        match rx.recv_timeout(self.flush_limit) {
            Ok(res) => res.map(drop),
            Err(_) => {
                tracing::warn!(image = %self.image.spec(), limit = ?self.flush_limit,
                    "rbd flush did not finish in time: reported failed");
                Err(io::Error::from_raw_os_error(libc::ETIMEDOUT))
            }
        }
    }
}

impl Store for RbdStore {
    fn caps(&self) -> Caps {
        Caps {
            direct: false,
            discard: true,
            readonly: self.image.is_read_only(),
            resizable: true,
            zeroes: false,
            durable_writes: !self.librbd_cache,
            shared: true,
        }
    }

    fn measure(&self) -> io::Result<u64> {
        self.image.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.latency
            .time(StoreOp::Read, || self.image.read_at(buf, offset))
    }

    /// Acknowledged = in the cluster (no librbd cache): durable already. With librbd's
    /// cache turned on by the admin, a durable write is flushed before it returns.
    fn write_at(&self, data: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        self.latency
            .time(StoreOp::Write, || self.image.write_at(data, offset))?;
        if durable && self.librbd_cache {
            self.flush()?;
        }
        Ok(())
    }

    /// Every write started with librbd's asynchronous call at once, then waited for: librbd
    /// has them all in flight together (a write-back batch costs about one round trip, not
    /// one per block). Returns only when librbd has answered every one (it reads the
    /// borrowed memory until then; librados' op timeout ends those a sick cluster does not
    /// answer).
    fn write_all(&self, writes: &[(u64, &[u8])], results: &mut Vec<io::Result<()>>) {
        let (tx, rx) = std::sync::mpsc::channel::<(usize, io::Result<usize>, u64)>();
        for (i, &(offset, data)) in writes.iter().enumerate() {
            let tx = tx.clone();
            let started = std::time::Instant::now();
            self.latency.started_async();
            let bytes = Borrowed {
                ptr: data.as_ptr(),
                len: data.len(),
            };
            self.image.aio_write(
                bytes,
                offset,
                Box::new(move |r, _| {
                    let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    let _ = tx.send((i, r, ns));
                }),
            );
        }
        drop(tx);
        results.clear();
        results.extend(
            writes
                .iter()
                .map(|_| Err(io::Error::from_raw_os_error(libc::EIO))),
        );
        // ends when every callback has run (each holds a sender until then)
        while let Ok((i, r, ns)) = rx.recv() {
            self.latency.record_async(StoreOp::Write, ns, r.is_ok());
            if let Some(slot) = results.get_mut(i) {
                *slot = r.map(drop);
            }
        }
    }

    fn flush(&self) -> io::Result<()> {
        self.latency.time(StoreOp::Flush, || self.bounded_flush())
    }

    /// `write_zeroes`, not discard: see the module docs.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.latency
            .time(StoreOp::Zero, || self.image.write_zeroes(offset, len))
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.discard(offset, len)
    }

    /// The image's data extents in the range (`rbd_diff_iterate2`), the gaps between them
    /// deallocated.
    fn allocation(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u64, bool)>> {
        let data = self.image.data_extents(offset, len)?;
        Ok(runs_of(offset, len, &data))
    }

    fn grow(&self, size: u64) -> io::Result<()> {
        self.image.resize(size)
    }

    fn take_changed(&self) -> bool {
        self.changed.load(Ordering::Acquire) && self.changed.swap(false, Ordering::AcqRel)
    }

    fn read_engine(&self) -> ReadEngine {
        ReadEngine::Callback
    }

    fn start_op(&self, op: PendingOp) {
        // the closures capture nothing: boxing them allocates nothing
        let offset = op.offset();
        match op.kind() {
            OpKind::Read => {
                self.image
                    .aio_read(op, offset, Box::new(|r, op: PendingOp| op.done(r)))
            }
            // acknowledged = in the cluster (no librbd cache): durable already
            OpKind::Write => {
                self.image
                    .aio_write(op, offset, Box::new(|r, op: PendingOp| op.done(r)))
            }
            OpKind::Flush => self.image.aio_flush_with(op, Box::new(|r, op| op.done(r))),
            // as `discard`: zeros, deallocated where whole objects are
            OpKind::Zero => {
                let len = op.len();
                self.image
                    .aio_write_zeroes_with(op, offset, len, Box::new(|r, op| op.done(r)))
            }
        }
    }

    fn latency(&self) -> Option<&OpLatency> {
        Some(&self.latency)
    }
}

/// Memory a batch write lends librbd: valid and unchanged until its callback has run
/// ([`RbdStore::write_all`] does not return before).
struct Borrowed {
    ptr: *const u8,
    len: usize,
}

// SAFETY: only read (by librbd's threads) while the lender waits for the callback.
unsafe impl Send for Borrowed {}

impl AsRef<[u8]> for Borrowed {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` and `len` come from a live slice that `write_all` keeps borrowed
        // until this write's callback has run.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// `(offset, len, allocated)` runs covering `offset .. offset + len` exactly, from the data
/// extents `data` (sorted; clipped to the range, overlaps and neighbours merged).
fn runs_of(offset: u64, len: u64, data: &[(u64, u64)]) -> Vec<(u64, u64, bool)> {
    let end = offset.saturating_add(len);
    let mut runs: Vec<(u64, u64, bool)> = Vec::new();
    let mut push = |start: u64, stop: u64, allocated: bool| {
        if stop <= start {
            return;
        }
        match runs.last_mut() {
            Some(last) if last.2 == allocated && last.0 + last.1 >= start => {
                last.1 = last.1.max(stop - last.0)
            }
            _ => runs.push((start, stop - start, allocated)),
        }
    };
    let mut pos = offset;
    for &(o, l) in data {
        let (s, e) = (o.max(pos), o.saturating_add(l).min(end));
        if e <= s {
            continue;
        }
        push(pos, s, false);
        push(s, e, true);
        pos = e;
    }
    push(pos, end, false);
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn librbd_cache_is_off_unless_the_admin_turns_it_on() {
        let on =
            |bsopts: &str| librbd_cache(&rbd::ClusterOptions::parse(bsopts, &[]).expect("bsopts"));
        assert!(!on(""), "numatgt's default");
        assert!(!on("rbd_cache=false"));
        assert!(on("rbd_cache=true"));
        assert!(on("rbd_cache=1;id=x"));
        assert!(!on("rbd_cache=true;rbd_cache=false"), "the last one wins");
    }

    #[test]
    fn data_extents_become_runs_covering_the_range() {
        assert_eq!(runs_of(0, 100, &[]), vec![(0, 100, false)]);
        assert_eq!(
            runs_of(10, 100, &[(0, 20), (20, 10), (50, 10), (55, 10), (200, 5)]),
            vec![
                (10, 20, true),
                (30, 20, false),
                (50, 15, true),
                (65, 45, false)
            ]
        );
        assert_eq!(runs_of(0, 8, &[(0, 8)]), vec![(0, 8, true)]);
        assert_eq!(runs_of(4, 0, &[(0, 8)]), vec![]);
    }

    #[test]
    fn flush_limit_follows_the_admins_op_timeout() {
        let secs = |bsopts: &str| {
            let c = rbd::ClusterOptions::parse(bsopts, &[]).expect("bsopts");
            flush_limit(&c).as_secs()
        };
        assert_eq!(
            secs("id=admin;rados_osd_op_timeout=4"),
            4 + FLUSH_MARGIN_SECS
        );
        assert_eq!(
            secs("id=admin"),
            30 + FLUSH_MARGIN_SECS,
            "the default op timeout"
        );
        assert_eq!(
            secs("rados_osd_op_timeout=0"),
            60 + FLUSH_MARGIN_SECS,
            "0 = none"
        );
        assert_eq!(secs("rados_osd_op_timeout=junk"), 60 + FLUSH_MARGIN_SECS);
    }
}
