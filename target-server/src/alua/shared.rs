//! What a `Lun` holds of ALUA, read by the event threads (on every command) and by the
//! metrics, and changed only by this module: whether the LUN uses the block cache now
//! ([`CacheInUse`], set by `local.rs`), and, for an RBD LUN several gateways export, the
//! published outcome of its ownership machine with the inputs waiting for the machine's
//! thread ([`RbdOwnership`]). No Ceph call and no LUN here: `ceph.rs` drives the machine.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::machine::{Machine, MoveCause};
use crate::backend::reply::Replier;

/// Whether a LUN's commands use the block cache now: its cache is configured and this
/// gateway owns it. Only `local.rs` changes it, with the LUN's ALUA state.
#[derive(Debug, Default)]
pub struct CacheInUse(AtomicBool);

impl CacheInUse {
    /// Not in use (a new LUN, until its first ALUA state is set).
    pub fn off() -> CacheInUse {
        CacheInUse(AtomicBool::new(false))
    }

    /// Whether commands use the cache now.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    pub(super) fn set(&self, on: bool) {
        self.0.store(on, Ordering::Release);
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
    /// Takeovers by what asked for them, in [`MoveCause::ALL`]'s order.
    pub causes: [AtomicU64; 3],
}

/// This gateway's part in the LUN's ownership, as published for the event threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Published {
    /// This gateway owns the LUN (`group` is its own).
    Owner(u16),
    /// Group `.0` owns it (0: not known yet).
    NonOwner(u16),
    /// This gateway was fenced; group `.0` is taken for the owner.
    Fenced(u16),
}

impl Published {
    fn encode(self) -> u32 {
        match self {
            Published::NonOwner(g) => u32::from(g),
            Published::Owner(g) => 1 << 16 | u32::from(g),
            Published::Fenced(g) => 2 << 16 | u32::from(g),
        }
    }

    fn decode(v: u32) -> Published {
        let g = (v & 0xffff) as u16;
        match v >> 16 {
            1 => Published::Owner(g),
            2 => Published::Fenced(g),
            _ => Published::NonOwner(g),
        }
    }
}

/// Inputs for the ownership thread.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Inbox {
    /// This gateway is asked to take the LUN over (a command arrived here and it does not
    /// own the LUN, the administrator, SET TARGET PORT GROUPS), by what.
    pub want: Option<MoveCause>,
    /// The LUN is going away: end the thread.
    pub stop: bool,
}

/// The ownership of an RBD LUN exported by several gateways, as the rest of the daemon
/// sees it: who owns it, and the requests for the ownership thread (`ceph.rs`), which runs
/// the LUN's [`Machine`] and publishes its outcome here.
pub struct RbdOwnership {
    /// The target's ALUA settings.
    pub(super) alua: config::AluaConfig,
    /// The name of the ownership record beside the image.
    pub(super) record: String,
    /// [`Published`], encoded.
    view: AtomicU32,
    inbox: Mutex<Inbox>,
    wake: Condvar,
    /// SET TARGET PORT GROUPS commands waiting for a takeover.
    waiting: Mutex<Vec<Replier>>,
    /// The machine, from the LUN's first state until its thread takes it.
    parked: Mutex<Option<Machine>>,
    pub transitions: Transitions,
}

impl std::fmt::Debug for RbdOwnership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RbdOwnership({}, owner {})",
            self.record,
            self.owner_group()
        )
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RbdOwnership {
    pub(super) fn new(alua: config::AluaConfig, record: String) -> RbdOwnership {
        RbdOwnership {
            alua,
            record,
            view: AtomicU32::new(Published::NonOwner(0).encode()),
            inbox: Mutex::new(Inbox::default()),
            wake: Condvar::new(),
            waiting: Mutex::new(Vec::new()),
            parked: Mutex::new(None),
            transitions: Transitions::default(),
        }
    }

    fn view(&self) -> Published {
        Published::decode(self.view.load(Ordering::Acquire))
    }

    /// The name of the ownership record beside the image (also the LUN's identity on the
    /// gateway link).
    pub fn record(&self) -> &str {
        &self.record
    }

    /// Whether the LUN offers explicit ALUA (SET TARGET PORT GROUPS): when the other
    /// gateways are standby, which an initiator activates with it. Active/non-optimized
    /// non-owners serve I/O by shipping it, and offer implicit ALUA only: Linux's ALUA
    /// handler would otherwise send SET TARGET PORT GROUPS whenever dm-multipath activates
    /// a path of theirs, moving the LUN back and forth under round-robin multipath.
    pub fn explicit(&self) -> bool {
        self.alua.non_owner_for(true) == config::NonOwnerState::Standby
    }

    /// Whether this gateway owns the LUN (holds the lock).
    pub fn owns(&self) -> bool {
        matches!(self.view(), Published::Owner(_))
    }

    /// Whether this gateway's lock was broken by another one.
    pub fn is_fenced(&self) -> bool {
        matches!(self.view(), Published::Fenced(_))
    }

    /// The owner's target port group as known here (0: unknown).
    pub fn owner_group(&self) -> u16 {
        match self.view() {
            Published::Owner(g) | Published::NonOwner(g) | Published::Fenced(g) => g,
        }
    }

    /// `cause` asks for the LUN here: start a takeover (a command is answered
    /// "transitioning" and retried by the initiator).
    pub fn want_ownership(&self, cause: MoveCause) {
        let mut g = lock(&self.inbox);
        // the first cause waiting is the one counted
        g.want = g.want.or(Some(cause));
        drop(g);
        self.wake.notify_all();
    }

    /// SET TARGET PORT GROUPS asked for this gateway: take the LUN over, then answer
    /// `reply`.
    pub fn take_over_for(&self, reply: Replier) {
        lock(&self.waiting).push(reply);
        self.want_ownership(MoveCause::Stpg);
    }

    /// Ends the ownership thread (the LUN is going away).
    pub fn stop(&self) {
        lock(&self.inbox).stop = true;
        self.wake.notify_all();
    }

    /// Publishes this gateway's part (`local.rs`, with the ALUA state it goes with).
    pub(super) fn publish(&self, p: Published) {
        self.view.store(p.encode(), Ordering::Release);
    }

    /// The inputs that arrived since the last call.
    pub(super) fn take_inbox(&self) -> Inbox {
        let mut g = lock(&self.inbox);
        let now = *g;
        g.want = None;
        now
    }

    /// Waits until `deadline` or an input arrives.
    pub(super) fn wait(&self, deadline: Instant) {
        let g = lock(&self.inbox);
        let left = deadline.saturating_duration_since(Instant::now());
        let _ = self
            .wake
            .wait_timeout_while(g, left, |i| i.want.is_none() && !i.stop)
            .unwrap_or_else(|p| p.into_inner());
    }

    /// Whether SET TARGET PORT GROUPS commands wait.
    pub(super) fn has_waiting(&self) -> bool {
        !lock(&self.waiting).is_empty()
    }

    /// The waiting SET TARGET PORT GROUPS commands, to be answered.
    pub(super) fn take_waiting(&self) -> Vec<Replier> {
        std::mem::take(&mut *lock(&self.waiting))
    }

    pub(super) fn park(&self, m: Machine) {
        *lock(&self.parked) = Some(m);
    }

    pub(super) fn unpark(&self) -> Option<Machine> {
        lock(&self.parked).take()
    }
}
