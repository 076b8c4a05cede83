//! RBD LUNs exported by several gateways: which gateway owns each LUN and how ownership
//! moves between them, safely for the NUMA write-back cache.
//!
//! The owner is the gateway holding the image's exclusive lock; only it caches the LUN.
//! Every gateway knows the owner's target port group from a small record object beside
//! the image (`numatgt.alua.<image>`: `owner=G request=G acked=0|1`), which it reads every
//! [`POLL`]. A gateway that gets I/O for a LUN it does not own (its path is
//! active/non-optimized, so the initiator's multipath moved there) answers "transitioning"
//! (the initiator retries) and takes the LUN over:
//!
//! 1. it writes `request=<its group>` into the record;
//! 2. a live owner sees the request within [`POLL`], writes `acked=1`, reports
//!    transitioning, writes its dirty blocks back, stops caching, flushes the image and
//!    releases the lock; the requester waits up to [`HANDOFF_MAX`] for that;
//! 3. an owner that does not acknowledge within [`ACK_WAIT`] is taken for dead: the
//!    requester breaks its lock, which blocklists its Ceph client, so a late write from it
//!    (it was only frozen, or its network came back) cannot land;
//! 4. the requester takes the lock, writes `owner=<its group>`, and reports itself
//!    active/optimized (ASYMMETRIC ACCESS STATE CHANGED on every gateway's sessions).
//!
//! An owner whose lock was broken (it finds itself no longer the lock owner) drops its
//! cache — its dirty blocks cannot be written any more, exactly what SCSI allows for a
//! volatile cache that lost power — and reports its port unavailable: its client is
//! blocklisted, so it serves the LUN again after a restart.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use cache::BlockCache;
use scsi::{AccessState, PortGroup};

use crate::registry::Lun;

/// How often each gateway reads the record (and the owner checks its lock).
pub const POLL: Duration = Duration::from_millis(200);
/// How long a requester waits for the owner to acknowledge before it fences it.
pub const ACK_WAIT: Duration = Duration::from_millis(2500);
/// How long a requester waits for an acknowledging owner to write back and release.
pub const HANDOFF_MAX: Duration = Duration::from_secs(120);
/// An owner keeps a LUN it just took at least this long (initiators sending to two paths
/// at once must not make it change hands on every command).
pub const MIN_HOLD: Duration = Duration::from_secs(1);
/// After a failed takeover, the next one waits this long.
const RETRY_AFTER: Duration = Duration::from_secs(1);
const RECORD_MAX: usize = 256;

/// Starts the ownership threads of `targets`' RBD LUNs (once the block cache exists).
pub fn start_all(targets: &[Arc<crate::registry::Target>], cache: Option<&Arc<BlockCache>>) {
    for t in targets {
        for lun in t.lun_set().map.values() {
            if let Some(a) = &lun.rbd_ownership {
                a.start(lun, cache);
            }
        }
    }
}

/// The record beside the image.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Record {
    owner: Option<u16>,
    request: Option<u16>,
    acked: bool,
}

impl Record {
    fn parse(b: &[u8]) -> Record {
        let mut r = Record::default();
        for word in String::from_utf8_lossy(b).split_whitespace() {
            match word.split_once('=') {
                Some(("owner", v)) => r.owner = v.parse().ok().filter(|&g| g != 0),
                Some(("request", v)) => r.request = v.parse().ok().filter(|&g| g != 0),
                Some(("acked", v)) => r.acked = v == "1",
                _ => {}
            }
        }
        r
    }

    fn encode(&self) -> Vec<u8> {
        format!(
            "owner={} request={} acked={}\n",
            self.owner.unwrap_or(0),
            self.request.unwrap_or(0),
            u8::from(self.acked)
        )
        .into_bytes()
    }
}

/// Ownership transitions of one LUN, for the metrics.
#[derive(Debug, Default)]
pub struct Transitions {
    /// This gateway took the LUN over (from a releasing or a fenced owner).
    pub takeovers: AtomicU64,
    /// … of which by breaking a silent owner's lock.
    pub fenced_others: AtomicU64,
    /// This gateway handed the LUN over on request.
    pub releases: AtomicU64,
    /// This gateway's lock was broken by another one.
    pub fenced: AtomicU64,
}

/// The ownership of one RBD LUN at this gateway.
pub struct Arbiter {
    alua: config::AluaConfig,
    record: String,
    /// The block cache, known once the daemon runs ([`Arbiter::start`]).
    cache: OnceLock<Arc<BlockCache>>,
    lun: Mutex<Weak<Lun>>,
    owns: AtomicBool,
    fenced: AtomicBool,
    owner: AtomicU16,
    since: Mutex<Instant>,
    last_failure: Mutex<Option<Instant>>,
    /// SET TARGET PORT GROUPS commands waiting for a takeover to end.
    waiting: Mutex<Vec<crate::backend::reply::Replier>>,
    /// (a takeover is wanted, stop) and the condition the thread waits on.
    wake: (Mutex<(bool, bool)>, Condvar),
    pub transitions: Transitions,
}

impl std::fmt::Debug for Arbiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Arbiter({}, owner {})", self.record, self.owner_group())
    }
}

impl Arbiter {
    /// The arbiter of an RBD LUN whose target has `alua` peers; `None` for other LUNs
    /// (files, read-only snapshots, single gateways), which need none.
    pub fn for_lun(alua: &config::AluaConfig, store: &cache::BackingStore) -> Option<Arc<Arbiter>> {
        let image = store.rbd_image()?;
        if alua.peers.is_empty() || image.is_read_only() {
            return None;
        }
        let name = image.spec().image.clone();
        Some(Arc::new(Arbiter {
            alua: alua.clone(),
            record: format!("numatgt.alua.{name}"),
            cache: OnceLock::new(),
            lun: Mutex::new(Weak::new()),
            owns: AtomicBool::new(false),
            fenced: AtomicBool::new(false),
            owner: AtomicU16::new(0),
            since: Mutex::new(Instant::now()),
            last_failure: Mutex::new(None),
            waiting: Mutex::new(Vec::new()),
            wake: (Mutex::new((false, false)), Condvar::new()),
            transitions: Transitions::default(),
        }))
    }

    /// Whether this gateway owns the LUN (holds the lock).
    pub fn owns(&self) -> bool {
        self.owns.load(Ordering::Acquire)
    }

    /// The owner's target port group as known here (0: unknown).
    pub fn owner_group(&self) -> u16 {
        self.owner.load(Ordering::Acquire)
    }

    /// Whether this gateway's lock was broken by another one.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// The initial ownership of a new LUN (before it serves): the configured owner takes
    /// the lock when nobody holds it; everybody else follows the record.
    pub fn init(&self, lun: &Lun, configured: u16) {
        let me = self.alua.group;
        lun.scsi.set_explicit_alua(true);
        let Some(image) = lun.store.rbd_image() else {
            return;
        };
        let rec = self.read_record(image);
        let free = image.lock_owners().map(|o| o.is_empty()).unwrap_or(false);
        if configured == me && free {
            match image.lock_acquire() {
                Ok(()) => {
                    self.became_owner();
                    self.write_record(
                        image,
                        Record {
                            owner: Some(me),
                            ..Record::default()
                        },
                    );
                }
                Err(e) => tracing::warn!(lun = lun.number, record = %self.record,
                    "cannot take the image's exclusive lock: {e}; the first I/O here will try again"),
            }
        }
        let owner = if self.owns() {
            me
        } else {
            rec.owner
                .filter(|&g| g != me && self.alua.has_group(g))
                .unwrap_or(if configured == me {
                    self.other_group()
                } else {
                    configured
                })
        };
        self.owner.store(owner, Ordering::Release);
        self.apply(lun, owner, self.owns());
        tracing::info!(
            lun = lun.number,
            owner,
            here = me,
            owns = self.owns(),
            "RBD LUN ownership"
        );
    }

    /// Starts the thread that follows and moves the ownership of `lun` (also after the LUN
    /// was rebuilt by tgtadm: the new one is followed).
    pub fn start(self: &Arc<Self>, lun: &Arc<Lun>, cache: Option<&Arc<BlockCache>>) {
        if let Some(c) = cache {
            let _ = self.cache.set(Arc::clone(c));
        }
        *self.lun.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(lun);
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("alua-{}", lun.number))
            .spawn(move || me.run());
        if let Err(e) = spawned {
            tracing::error!(lun = lun.number, "cannot start the ownership thread: {e}");
        }
    }

    /// Follows `lun` from now on (it replaced the LUN the thread followed).
    pub fn rebind(&self, lun: &Arc<Lun>) {
        *self.lun.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(lun);
    }

    /// A command for the LUN arrived here and this gateway does not own it: start a
    /// takeover (the command is answered "transitioning" and retried by the initiator).
    pub fn want_ownership(&self) {
        let (m, cv) = &self.wake;
        m.lock().unwrap_or_else(|p| p.into_inner()).0 = true;
        cv.notify_all();
    }

    /// SET TARGET PORT GROUPS asked for this gateway: take the LUN over, then answer
    /// `reply`.
    pub fn take_over_for(&self, reply: crate::backend::reply::Replier) {
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(reply);
        self.want_ownership();
    }

    /// Answers the SET TARGET PORT GROUPS commands waiting for a takeover.
    fn answer_waiting(&self, lun: &Lun, ok: bool) {
        let waiting = std::mem::take(&mut *self.waiting.lock().unwrap_or_else(|p| p.into_inner()));
        for r in waiting {
            let c = if ok {
                scsi::Completion::good()
            } else {
                lun.scsi.check_condition(&scsi::alua::STPG_FAILED)
            };
            r.send(crate::backend::reply::completed(c));
        }
    }

    fn has_waiting(&self) -> bool {
        !self
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Ends the thread (the LUN is going away).
    pub fn stop(&self) {
        let (m, cv) = &self.wake;
        m.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        cv.notify_all();
    }

    fn run(self: Arc<Self>) {
        loop {
            let want = {
                let (m, cv) = &self.wake;
                let g = m.lock().unwrap_or_else(|p| p.into_inner());
                let (mut g, _) = cv
                    .wait_timeout_while(g, POLL, |w| !w.0 && !w.1)
                    .unwrap_or_else(|p| p.into_inner());
                if g.1 {
                    return;
                }
                std::mem::take(&mut g.0)
            };
            let lun = self.lun.lock().unwrap_or_else(|p| p.into_inner()).upgrade();
            let Some(lun) = lun else { return };
            let want = want || self.has_waiting();
            if self.is_fenced() {
                self.answer_waiting(&lun, false);
                continue;
            }
            if self.owns() {
                self.answer_waiting(&lun, true);
                self.check_owner(&lun);
            } else if want && self.may_try() {
                self.take_over(&lun);
            } else if want {
                // the last takeover failed a moment ago
                self.answer_waiting(&lun, false);
                self.follow(&lun);
            } else {
                self.follow(&lun);
            }
        }
    }

    fn may_try(&self) -> bool {
        let last = *self.last_failure.lock().unwrap_or_else(|p| p.into_inner());
        last.is_none_or(|t| t.elapsed() >= RETRY_AFTER)
    }

    /// Owner side: still the lock owner? A request from another gateway?
    fn check_owner(&self, lun: &Lun) {
        let Some(image) = lun.store.rbd_image() else {
            return;
        };
        match image.is_lock_owner() {
            Ok(true) => {}
            Ok(false) => return self.was_fenced(lun, "the image's exclusive lock was broken"),
            Err(e) => return self.was_fenced(lun, &format!("lock state unknown: {e}")),
        }
        let rec = self.read_record(image);
        let me = self.alua.group;
        let Some(to) = rec.request.filter(|&g| g != me && self.alua.has_group(g)) else {
            return;
        };
        let held = self
            .since
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed();
        if held < MIN_HOLD {
            return;
        }
        self.write_record(image, Record { acked: true, ..rec });
        self.release(lun, image, to);
    }

    /// Hands the LUN over to group `to`: transitioning, dirty blocks written back, cache
    /// off and dropped, image flushed, lock released.
    fn release(&self, lun: &Lun, image: &rbd::Image, to: u16) {
        let me = self.alua.group;
        self.set_local(lun, AccessState::Transitioning);
        if let Some(c) = self.cache.get().filter(|_| lun.cache_configured)
            && let Err(e) = crate::alua::stop_caching(c, lun)
        {
            // keep the LUN: the requester fences this gateway if it must
            tracing::error!(
                lun = lun.number,
                to,
                "cannot write the LUN's dirty blocks back; not handing it over: {e}"
            );
            self.apply(lun, me, true);
            return;
        }
        lun.cache_in_use.store(false, Ordering::Release);
        let released = image.flush().and_then(|()| image.lock_release());
        if let Err(e) = released {
            tracing::warn!(lun = lun.number, "releasing the exclusive lock: {e}");
        }
        self.owns.store(false, Ordering::Release);
        self.owner.store(to, Ordering::Release);
        self.transitions.releases.fetch_add(1, Ordering::Relaxed);
        self.apply(lun, to, false);
        tracing::info!(lun = lun.number, to, here = me, "RBD LUN handed over");
    }

    /// The lock was broken by another gateway: nothing cached here may be written or
    /// served any more.
    fn was_fenced(&self, lun: &Lun, why: &str) {
        self.owns.store(false, Ordering::Release);
        self.fenced.store(true, Ordering::Release);
        lun.cache_in_use.store(false, Ordering::Release);
        if let Some(c) = self.cache.get() {
            c.invalidate_lun(lun.cache_id);
        }
        self.transitions.fenced.fetch_add(1, Ordering::Relaxed);
        let me = self.alua.group;
        let owner = self.other_group();
        self.owner.store(owner, Ordering::Release);
        let mut groups = crate::alua::port_groups(&self.alua, owner, true);
        for g in &mut groups {
            if g.id == me {
                g.state = AccessState::Unavailable;
            }
        }
        let _ = lun.scsi.set_port_groups(groups);
        tracing::error!(
            lun = lun.number,
            here = me,
            "fenced: {why}; another gateway took the LUN over and this gateway's Ceph client \
             is blocklisted. Its port is unavailable for the LUN until numatgtd restarts"
        );
    }

    /// Non-owner side: follow the record's owner.
    fn follow(&self, lun: &Lun) {
        let Some(image) = lun.store.rbd_image() else {
            return;
        };
        let me = self.alua.group;
        let rec = self.read_record(image);
        if let Some(o) = rec.owner.filter(|&g| g != me && self.alua.has_group(g))
            && o != self.owner_group()
        {
            self.owner.store(o, Ordering::Release);
            self.apply(lun, o, false);
        }
    }

    /// Takes the LUN over: request, wait for the owner's release (or fence a silent
    /// owner), take the lock, become active/optimized.
    fn take_over(&self, lun: &Lun) {
        let Some(image) = lun.store.rbd_image() else {
            return;
        };
        let me = self.alua.group;
        self.set_local(lun, AccessState::Transitioning);
        let rec = self.read_record(image);
        self.write_record(
            image,
            Record {
                owner: rec.owner,
                request: Some(me),
                acked: false,
            },
        );
        let start = Instant::now();
        let mut asked = Instant::now();
        let mut fenced_other = false;
        loop {
            match image.lock_owners() {
                Ok(o) if o.is_empty() => break,
                Ok(owners) => {
                    let now = self.read_record(image);
                    if now.request != Some(me) {
                        // another gateway's write replaced the request (e.g. one that
                        // just took the LUN): ask again, and give the owner its full time
                        self.write_record(
                            image,
                            Record {
                                request: Some(me),
                                acked: false,
                                ..now
                            },
                        );
                        asked = Instant::now();
                    }
                    let acked = now.acked && now.request == Some(me);
                    let waited = start.elapsed();
                    if (!acked && asked.elapsed() >= ACK_WAIT) || waited >= HANDOFF_MAX {
                        for o in &owners {
                            tracing::warn!(lun = lun.number, owner = %o, acked,
                                waited_ms = waited.as_millis() as u64,
                                "the owner did not hand the LUN over: breaking its lock (fencing it)");
                            if let Err(e) = image.lock_break(o) {
                                tracing::warn!(lun = lun.number, "breaking the lock: {e}");
                            }
                        }
                        fenced_other = true;
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(lun = lun.number, "cannot read the lock owners: {e}");
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Err(e) = image.lock_acquire() {
            tracing::warn!(
                lun = lun.number,
                "takeover failed: cannot take the lock: {e}"
            );
            *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            let owner = self.owner_group();
            self.apply(lun, owner, false);
            self.answer_waiting(lun, false);
            return;
        }
        self.became_owner();
        // a request another gateway wrote meanwhile stays (it is answered after MIN_HOLD)
        let pending = self.read_record(image).request.filter(|&g| g != me);
        self.write_record(
            image,
            Record {
                owner: Some(me),
                request: pending,
                acked: false,
            },
        );
        if let Some(c) = self.cache.get() {
            c.invalidate_lun(lun.cache_id);
        }
        self.transitions.takeovers.fetch_add(1, Ordering::Relaxed);
        if fenced_other {
            self.transitions
                .fenced_others
                .fetch_add(1, Ordering::Relaxed);
        }
        self.apply(lun, me, true);
        self.answer_waiting(lun, true);
        tracing::info!(
            lun = lun.number,
            here = me,
            fenced_other,
            ms = start.elapsed().as_millis() as u64,
            "RBD LUN taken over"
        );
    }

    fn became_owner(&self) {
        self.owns.store(true, Ordering::Release);
        self.owner.store(self.alua.group, Ordering::Release);
        *self.since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Groups and cache for owner `owner` (`cache`: this gateway owns and may cache).
    fn apply(&self, lun: &Lun, owner: u16, cache: bool) {
        lun.cache_in_use
            .store(cache && lun.cache_configured, Ordering::Release);
        if let Err(e) = lun
            .scsi
            .set_port_groups(crate::alua::port_groups(&self.alua, owner, true))
        {
            tracing::warn!(lun = lun.number, "ALUA groups: {e}");
        }
    }

    /// This gateway's group in `state`, the others as they are.
    fn set_local(&self, lun: &Lun, state: AccessState) {
        let me = self.alua.group;
        let groups: Vec<PortGroup> = lun
            .scsi
            .port_groups()
            .into_iter()
            .map(|mut g| {
                if g.id == me {
                    g.state = state;
                }
                g
            })
            .collect();
        let _ = lun.scsi.set_port_groups(groups);
    }

    /// Some other group (the owner when the record names none).
    fn other_group(&self) -> u16 {
        self.alua.peers.first().map_or(self.alua.group, |p| p.group)
    }

    fn read_record(&self, image: &rbd::Image) -> Record {
        match image.object_read(&self.record, RECORD_MAX) {
            Ok(Some(b)) => Record::parse(&b),
            Ok(None) => Record::default(),
            Err(e) => {
                tracing::debug!(record = %self.record, "reading the ownership record: {e}");
                Record::default()
            }
        }
    }

    fn write_record(&self, image: &rbd::Image, r: Record) {
        if let Err(e) = image.object_write(&self.record, &r.encode()) {
            tracing::warn!(record = %self.record, "writing the ownership record: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_garbage() {
        let r = Record {
            owner: Some(2),
            request: Some(1),
            acked: true,
        };
        assert_eq!(Record::parse(&r.encode()), r);
        assert_eq!(Record::parse(b"owner=0 request=x junk"), Record::default());
        assert_eq!(Record::parse(&[0xff, 0xfe]), Record::default());
    }
}
