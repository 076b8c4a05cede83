//! The ownership of one LUN at this gateway as a sans-I/O state machine. Inputs are the
//! `handle_*` methods (what the record says, what the image's lock says, how a write-back
//! ended, a command or SET TARGET PORT GROUPS wanting the LUN here, an administrator's
//! move); outputs are [`Action`]s taken with [`Machine::poll_action`] (read or write the
//! record, look at / take / break / release the lock, set this gateway's ALUA state with its
//! caching mode, answer the waiting STPG commands, report a transition). Time is passed in;
//! nothing here does I/O, sleeps or starts a thread: the Ceph driver (`ceph.rs`) and the
//! file driver (`file.rs`) carry the actions out, and `tests.rs` drives several machines
//! against a simulated cluster on simulated time.
//!
//! An RBD LUN ([`Machine::arbitrated`]) is owned by the gateway holding the image's
//! exclusive lock; every gateway learns the owner's group from the record beside the image
//! (`record.rs`), which it reads every [`POLL`]:
//!
//! 1. a gateway wanting the LUN (I/O on its active/non-optimized path, or STPG) reports
//!    transitioning and writes `request=<its group>` into the record (again whenever
//!    another requester's write replaced it);
//! 2. a live owner, having held the LUN at least [`MIN_HOLD`], sees a request within
//!    [`POLL`], writes `acked=1`, reports transitioning, writes its dirty blocks back, stops
//!    caching, flushes the image and releases the lock; the requester, looking at the lock
//!    every [`LOCK_POLL`], waits up to [`HANDOFF_MAX`] for that once it saw its ack;
//! 3. a lock holder that does not acknowledge within [`ACK_WAIT`] of the request is taken
//!    for dead: the requester breaks its lock, which blocklists its Ceph client, so a late
//!    write from it (it was only frozen, or its network came back) cannot land. A new
//!    holder (another requester took the LUN meanwhile) gets its full time. The record is
//!    written whole, so a requester's write erases the holder's ack: rewriting the request
//!    restarts the wait for the ack, two requesters facing a dead holder wait for each
//!    other up to [`HANDOFF_MAX`], and a requester that erased an ack and then died leaves
//!    the other one fencing the releasing holder after [`ACK_WAIT`] (safe: its unwritten
//!    blocks are lost, as a volatile cache's). A conditional record write (RADOS
//!    assert-version) would end both;
//! 4. the requester takes the lock, writes `owner=<its group>` (keeping another gateway's
//!    request that arrived meanwhile: it is answered after [`MIN_HOLD`]), and reports itself
//!    active/optimized. A requester that finds the lock taken by another one meanwhile asks
//!    that one in turn; a takeover that failed otherwise is retried no sooner than
//!    [`RETRY_AFTER`].
//!
//! An owner that finds the lock no longer its own was fenced: it drops its cache (its dirty
//! blocks cannot be written any more, as a volatile cache that lost power) and reports
//! unavailable until it restarts. An owner whose write-back failed looks at the lock before
//! it serves the LUN again (the failure may be the fence).
//!
//! A file LUN ([`Machine::administered`]) has no lock and no record: the administrator
//! moves it, with the same hand-over (transitioning, write back, stop caching) when it
//! leaves this gateway.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::record::Record;

/// How often each gateway reads the record (and the owner checks its lock).
pub const POLL: Duration = Duration::from_millis(200);
/// How often a requester looks at the lock while it waits for the owner.
pub const LOCK_POLL: Duration = Duration::from_millis(50);
/// How long a requester waits for the owner to acknowledge before it fences it.
pub const ACK_WAIT: Duration = Duration::from_millis(2500);
/// How long a requester waits for an acknowledging owner to write back and release.
pub const HANDOFF_MAX: Duration = Duration::from_secs(120);
/// An owner keeps a LUN it just took at least this long (initiators sending to two paths
/// at once must not make it change hands on every command).
pub const MIN_HOLD: Duration = Duration::from_secs(1);
/// After a failed takeover, the next one waits this long.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// This gateway's ALUA state for the LUN, with the caching mode that goes with it
/// (`local.rs` sets both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalState {
    /// Active/optimized: this gateway owns the LUN and caches it if configured (dropping
    /// whatever it cached before it starts).
    Owner,
    /// Transitioning (the other groups as they are): handing the LUN over or taking it
    /// over. An owner leaving active/optimized writes its dirty blocks back and stops
    /// caching; the outcome is [`Machine::handle_write_back`]'s input.
    Transitioning,
    /// Group `owner` owns the LUN: this gateway is in the configured non-owner state and
    /// does not cache.
    NonOwner { owner: u16 },
    /// Fenced: unavailable, the cache dropped unwritten; `owner` is taken for the owner.
    Unavailable { owner: u16 },
}

/// Who holds the image's lock, as [`Action::ReadLockOwners`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockOwners {
    /// Nobody.
    Free,
    /// Another client (the driver keeps who, for [`Action::BreakLocks`]).
    Held(Holder),
    /// The owners could not be read.
    Unknown,
}

/// Which client holds the lock, as a token the driver makes from the owners' names: a
/// different token is a different holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder(pub u64);

/// A transition worth a log line and a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A new LUN's first state: group `owner` owns it (`owns`: this gateway).
    Started { owner: u16, owns: bool },
    /// This gateway took the LUN over from group `from` (`fenced_other`: by breaking a
    /// silent owner's lock), `took` after its request, asked for by `cause`.
    TookOver {
        cause: MoveCause,
        from: u16,
        fenced_other: bool,
        took: Duration,
    },
    /// A takeover failed: the lock could not be taken.
    TakeoverFailed,
    /// This gateway handed the LUN over to group `to` on request.
    Released { to: u16 },
    /// This gateway's lock was broken by another one.
    Fenced,
}

/// What the driver is asked to do. The ones marked "answer" wait for the input named
/// before the machine goes on; the others are done and forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read the record; answer [`Machine::handle_record`] (an unreadable record reads as
    /// empty).
    ReadRecord,
    /// Write the record.
    WriteRecord(Record),
    /// Whether this gateway still holds the lock; answer [`Machine::handle_lock_check`].
    CheckLock,
    /// Who holds the lock; answer [`Machine::handle_lock_owners`].
    ReadLockOwners,
    /// Break the lock of every owner the last [`Action::ReadLockOwners`] found, fencing
    /// them (`acked`: the owner had acknowledged; `waited`: since the request).
    BreakLocks { acked: bool, waited: Duration },
    /// Take the lock; answer [`Machine::handle_lock_acquired`].
    AcquireLock,
    /// Flush the image and release the lock.
    ReleaseLock,
    /// Set this gateway's ALUA state and caching mode. [`LocalState::Transitioning`] is
    /// answered with [`Machine::handle_write_back`].
    SetLocal(LocalState),
    /// Answer the SET TARGET PORT GROUPS commands waiting for a takeover: GOOD (`ok`) or
    /// SET TARGET PORT GROUPS COMMAND FAILED.
    AnswerStpg { ok: bool },
    /// Count and log a transition.
    Report(Event),
}

/// What asked this gateway to take an RBD LUN over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveCause {
    /// A command arrived through this gateway's non-owner path (a standby path, or an
    /// active/non-optimized one whose link to the owner failed).
    Io,
    /// SET TARGET PORT GROUPS asked for this gateway's group.
    Stpg,
    /// The administrator (tgtadm `alua_owner=`).
    Admin,
}

impl MoveCause {
    /// Of two causes waiting at once, the one a takeover is counted for: the
    /// administrator's and SET TARGET PORT GROUPS' over a command's.
    fn max_priority(self, other: MoveCause) -> MoveCause {
        if self == MoveCause::Io { other } else { self }
    }

    /// Every cause, in the metrics' order.
    pub const ALL: [MoveCause; 3] = [MoveCause::Io, MoveCause::Stpg, MoveCause::Admin];

    /// Its place in [`MoveCause::ALL`].
    pub fn index(self) -> usize {
        match self {
            MoveCause::Io => 0,
            MoveCause::Stpg => 1,
            MoveCause::Admin => 2,
        }
    }

    /// The metrics' label.
    pub fn label(self) -> &'static str {
        match self {
            MoveCause::Io => "io",
            MoveCause::Stpg => "stpg",
            MoveCause::Admin => "admin",
        }
    }
}

/// How ownership moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arbitration {
    /// Through the image's lock and the record (an RBD LUN of several gateways).
    Lock,
    /// By the administrator (tgtadm `alua_owner=N`, the YAML): a file LUN.
    Admin,
}

/// The input the machine waits for before it goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Await {
    Record,
    LockCheck,
    LockOwners,
    LockAcquired,
    WriteBack,
}

/// Where the ownership is.
#[derive(Debug, Clone, Copy)]
enum State {
    /// A new LUN: reading the record, the configured owner taking a free lock.
    Starting(Starting),
    /// Another group owns the LUN: following the record.
    Following(Following),
    /// Asked the owner for the LUN; waiting for the lock to be free (or fencing).
    Requesting(Requesting),
    /// Taking the lock, then writing the record.
    Acquiring(Acquiring),
    /// This gateway holds the LUN: checking the lock and the record's requests.
    Owning(Owning),
    /// Handing the LUN over: writing back (then releasing, or, on a failed write-back,
    /// checking the lock before owning it again).
    Releasing(Releasing),
    /// The lock was broken by another gateway: unavailable until a restart.
    Fenced(Fenced),
}

#[derive(Debug, Clone, Copy)]
struct Starting {
    /// The configured owner group.
    configured: u16,
    /// The record as read first.
    record: Record,
    /// This gateway owned the LUN before a live upgrade: it takes the lock back when it is
    /// free, as the configured owner does.
    owned_before: bool,
}

#[derive(Debug, Clone, Copy)]
struct Following {
    owner: u16,
}

#[derive(Debug, Clone, Copy)]
struct Requesting {
    /// What asked for the takeover.
    cause: MoveCause,
    /// The owner as known before the request (kept when the takeover fails).
    owner: u16,
    /// When the request was written (or the holder changed): [`HANDOFF_MAX`] runs from
    /// there.
    started: Instant,
    /// When the holder was first asked: its time to acknowledge runs from there.
    asked: Instant,
    /// The request is in the record (until then: transitioning, reading the record).
    requested: bool,
    /// The lock holder seen last.
    holder: Option<Holder>,
    /// The lock could not be taken: unless another holder has it now, the takeover failed.
    lost_race: bool,
}

#[derive(Debug, Clone, Copy)]
struct Acquiring {
    cause: MoveCause,
    owner: u16,
    started: Instant,
    fenced_other: bool,
    /// The holder seen last (when the lock was not free).
    holder: Option<Holder>,
    /// When the lock was taken (then the record is read, to keep a pending request).
    acquired: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Owning {
    /// Since when this gateway holds the LUN.
    since: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Releasing {
    to: u16,
    since: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Fenced;

/// The ownership of one LUN at this gateway.
#[derive(Debug)]
pub struct Machine {
    me: u16,
    /// The other gateways' groups, as configured (the first is taken for the owner when
    /// nothing names one).
    peers: Vec<u16>,
    arbitration: Arbitration,
    state: State,
    actions: VecDeque<Action>,
    awaiting: Option<Await>,
    /// When the next round starts (or, requesting, when the lock is looked at again).
    wake_at: Option<Instant>,
    /// A takeover is wanted, and what asked for it.
    want: Option<MoveCause>,
    /// SET TARGET PORT GROUPS commands wait for a takeover.
    stpg_waiting: bool,
    last_failure: Option<Instant>,
}

impl Machine {
    /// An RBD LUN of several gateways, `me` one of them and `peers` the others, whose
    /// configured owner is `configured`: it starts by reading the record (and, the
    /// configured owner, by taking a free lock).
    pub fn arbitrated(me: u16, peers: &[u16], configured: u16) -> Machine {
        let mut m = Machine::new(
            me,
            peers,
            Arbitration::Lock,
            State::Starting(Starting {
                configured,
                record: Record::default(),
                owned_before: false,
            }),
        );
        m.ask(Action::ReadRecord, Await::Record);
        m
    }

    /// This gateway owned the LUN in the executable it was upgraded from (whose stop gave
    /// the lock back): at start it takes the lock again when nobody took it meanwhile,
    /// rather than following the configured owner.
    pub fn owned_before_upgrade(mut self) -> Machine {
        if let State::Starting(s) = &mut self.state {
            s.owned_before = true;
        }
        self
    }

    /// A LUN whose owner the administrator sets, as it is now: owned by this gateway
    /// (`owns`) or by group `owner`. [`Machine::handle_admin_move`] moves it.
    pub fn administered(me: u16, peers: &[u16], owns: bool, owner: u16, now: Instant) -> Machine {
        let state = if owns {
            State::Owning(Owning { since: now })
        } else {
            State::Following(Following { owner })
        };
        Machine::new(me, peers, Arbitration::Admin, state)
    }

    fn new(me: u16, peers: &[u16], arbitration: Arbitration, state: State) -> Machine {
        Machine {
            me,
            peers: peers.iter().copied().filter(|&g| g != me).collect(),
            arbitration,
            state,
            actions: VecDeque::new(),
            awaiting: None,
            wake_at: None,
            want: None,
            stpg_waiting: false,
            last_failure: None,
        }
    }

    /// The next thing to do: queued actions first; nothing while an answer is awaited;
    /// else a round starts when its time has come.
    pub fn poll_action(&mut self, now: Instant) -> Option<Action> {
        if let Some(a) = self.actions.pop_front() {
            return Some(a);
        }
        if self.awaiting.is_some() {
            return None;
        }
        match self.wake_at {
            Some(t) if t <= now => {
                self.wake_at = None;
                self.on_timer(now);
                self.actions.pop_front()
            }
            _ => None,
        }
    }

    /// When [`Machine::poll_action`] has something to do next without an input (`None`:
    /// only after an input).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.actions.is_empty() || self.awaiting.is_some() {
            return None;
        }
        self.wake_at
    }

    /// This gateway owns the LUN (it is handing it over, possibly).
    #[cfg(test)]
    pub fn owns(&self) -> bool {
        matches!(self.state, State::Owning(_) | State::Releasing(_))
    }

    /// `cause` asks for the LUN here (a command arrived and this gateway does not own
    /// the LUN: it is answered "transitioning" and retried by the initiator; or the
    /// administrator): take it over.
    pub fn handle_want(&mut self, now: Instant, cause: MoveCause) {
        if self.arbitration == Arbitration::Lock {
            self.want = Some(self.want.map_or(cause, |w| w.max_priority(cause)));
            self.wake_soon(now);
        }
    }

    /// SET TARGET PORT GROUPS asked for this gateway's group: take the LUN over, then
    /// answer it ([`Action::AnswerStpg`]).
    pub fn handle_stpg(&mut self, now: Instant) {
        if self.arbitration == Arbitration::Lock {
            self.stpg_waiting = true;
            self.want = Some(MoveCause::Stpg);
            self.wake_soon(now);
        }
    }

    /// The administrator made group `to` the owner (a file LUN).
    pub fn handle_admin_move(&mut self, now: Instant, to: u16) {
        if self.arbitration != Arbitration::Admin || self.awaiting.is_some() {
            return;
        }
        match self.state {
            State::Owning(o) if to != self.me => {
                self.state = State::Releasing(Releasing { to, since: o.since });
                self.ask(
                    Action::SetLocal(LocalState::Transitioning),
                    Await::WriteBack,
                );
            }
            State::Owning(_) => self.push(Action::SetLocal(LocalState::Owner)),
            State::Following(_) if to == self.me => {
                self.state = State::Owning(Owning { since: now });
                self.push(Action::SetLocal(LocalState::Owner));
            }
            State::Following(_) => {
                self.state = State::Following(Following { owner: to });
                self.push(Action::SetLocal(LocalState::NonOwner { owner: to }));
            }
            _ => {}
        }
    }

    /// What [`Action::ReadRecord`] read.
    pub fn handle_record(&mut self, now: Instant, rec: Record) {
        if !self.answered(Await::Record) {
            return;
        }
        match self.state {
            State::Starting(s) if s.configured == self.me || s.owned_before => {
                self.state = State::Starting(Starting { record: rec, ..s });
                self.ask(Action::ReadLockOwners, Await::LockOwners);
            }
            State::Starting(s) => self.settle(now, s.configured, rec, false),
            State::Following(f) => {
                if let Some(o) = self.peer(rec.owner)
                    && o != f.owner
                {
                    self.state = State::Following(Following { owner: o });
                    self.push(Action::SetLocal(LocalState::NonOwner { owner: o }));
                }
                self.end_round(now);
            }
            State::Requesting(r) if !r.requested => {
                self.push(Action::WriteRecord(Record {
                    owner: rec.owner,
                    request: Some(self.me),
                    acked: false,
                }));
                self.state = State::Requesting(Requesting {
                    started: now,
                    asked: now,
                    requested: true,
                    ..r
                });
                self.ask(Action::ReadLockOwners, Await::LockOwners);
            }
            State::Requesting(r) => self.watch(now, r, rec),
            State::Acquiring(a) => {
                // a request another gateway wrote meanwhile stays (answered after MIN_HOLD)
                let pending = rec.request.filter(|&g| g != self.me);
                self.push(Action::WriteRecord(Record {
                    owner: Some(self.me),
                    request: pending,
                    acked: false,
                }));
                self.push(Action::SetLocal(LocalState::Owner));
                self.push(Action::Report(Event::TookOver {
                    cause: a.cause,
                    from: a.owner,
                    fenced_other: a.fenced_other,
                    took: now.saturating_duration_since(a.started),
                }));
                self.answer_stpg(true);
                self.state = State::Owning(Owning {
                    since: a.acquired.unwrap_or(now),
                });
                self.end_round(now);
            }
            State::Owning(o) => match self.peer(rec.request) {
                Some(to) if now.saturating_duration_since(o.since) >= MIN_HOLD => {
                    self.push(Action::WriteRecord(Record { acked: true, ..rec }));
                    self.state = State::Releasing(Releasing { to, since: o.since });
                    self.ask(
                        Action::SetLocal(LocalState::Transitioning),
                        Await::WriteBack,
                    );
                }
                _ => self.end_round(now),
            },
            State::Releasing(_) | State::Fenced(_) => {}
        }
    }

    /// What [`Action::CheckLock`] found: this gateway still holds the lock (`false` also
    /// when that cannot be known).
    pub fn handle_lock_check(&mut self, now: Instant, held: bool) {
        if !self.answered(Await::LockCheck) {
            return;
        }
        match self.state {
            State::Owning(_) if held => self.ask(Action::ReadRecord, Await::Record),
            State::Releasing(r) if held => {
                // the write-back failed, the lock is still this gateway's: keep the LUN
                // (the requester fences this gateway if it must)
                self.state = State::Owning(Owning { since: r.since });
                self.push(Action::SetLocal(LocalState::Owner));
                self.end_round(now);
            }
            State::Owning(_) | State::Releasing(_) => self.fence(now),
            _ => {}
        }
    }

    /// What [`Action::ReadLockOwners`] found.
    pub fn handle_lock_owners(&mut self, now: Instant, owners: LockOwners) {
        if !self.answered(Await::LockOwners) {
            return;
        }
        match self.state {
            State::Starting(_) if owners == LockOwners::Free => {
                self.ask(Action::AcquireLock, Await::LockAcquired)
            }
            State::Starting(s) => self.settle(now, s.configured, s.record, false),
            State::Requesting(r) => match owners {
                LockOwners::Held(h) if r.lost_race && r.holder == Some(h) => {
                    self.fail(now, r.owner)
                }
                LockOwners::Held(h) => {
                    let r = if r.holder.is_some_and(|x| x != h) || r.lost_race {
                        // a new holder (another requester took the LUN): its full time
                        Requesting {
                            started: now,
                            asked: now,
                            lost_race: false,
                            ..r
                        }
                    } else {
                        r
                    };
                    self.state = State::Requesting(Requesting {
                        holder: Some(h),
                        ..r
                    });
                    self.ask(Action::ReadRecord, Await::Record);
                }
                _ if r.lost_race => self.fail(now, r.owner),
                _ => self.acquire(r, false),
            },
            _ => {}
        }
    }

    /// How [`Action::AcquireLock`] ended.
    pub fn handle_lock_acquired(&mut self, now: Instant, ok: bool) {
        if !self.answered(Await::LockAcquired) {
            return;
        }
        match self.state {
            State::Starting(s) => {
                if ok {
                    self.push(Action::WriteRecord(Record {
                        owner: Some(self.me),
                        ..Record::default()
                    }));
                }
                self.settle(now, s.configured, s.record, ok);
            }
            State::Acquiring(a) if ok => {
                self.state = State::Acquiring(Acquiring {
                    acquired: Some(now),
                    ..a
                });
                self.ask(Action::ReadRecord, Await::Record);
            }
            State::Acquiring(a) => {
                // another requester may have been faster: look who holds the lock
                self.state = State::Requesting(Requesting {
                    cause: a.cause,
                    owner: a.owner,
                    started: a.started,
                    asked: now,
                    requested: true,
                    holder: a.holder,
                    lost_race: true,
                });
                self.ask(Action::ReadLockOwners, Await::LockOwners);
            }
            _ => {}
        }
    }

    /// How [`LocalState::Transitioning`] ended: `ok`, or the dirty blocks could not be
    /// written back (the LUN keeps caching).
    pub fn handle_write_back(&mut self, now: Instant, ok: bool) {
        if !self.answered(Await::WriteBack) {
            return;
        }
        match self.state {
            State::Requesting(_) => self.ask(Action::ReadRecord, Await::Record),
            State::Releasing(r) if ok => {
                let lock = self.arbitration == Arbitration::Lock;
                if lock {
                    self.push(Action::ReleaseLock);
                }
                self.push(Action::SetLocal(LocalState::NonOwner { owner: r.to }));
                if lock {
                    self.push(Action::Report(Event::Released { to: r.to }));
                }
                self.state = State::Following(Following { owner: r.to });
                self.end_round(now);
            }
            State::Releasing(r) => match self.arbitration {
                // the lock may have been broken while the blocks were written (the
                // write-back fails then): look before serving the LUN again
                Arbitration::Lock => self.ask(Action::CheckLock, Await::LockCheck),
                Arbitration::Admin => {
                    self.state = State::Owning(Owning { since: r.since });
                    self.push(Action::SetLocal(LocalState::Owner));
                }
            },
            _ => {}
        }
    }

    /// A round of the state the machine is in, or (requesting) another look at the lock.
    fn on_timer(&mut self, now: Instant) {
        match self.state {
            State::Requesting(_) => self.ask(Action::ReadLockOwners, Await::LockOwners),
            State::Following(f) => {
                let want = self
                    .want
                    .take()
                    .or(self.stpg_waiting.then_some(MoveCause::Stpg));
                if let Some(cause) = want.filter(|_| self.may_try(now)) {
                    self.state = State::Requesting(Requesting {
                        cause,
                        owner: f.owner,
                        started: now,
                        asked: now,
                        requested: false,
                        holder: None,
                        lost_race: false,
                    });
                    self.ask(
                        Action::SetLocal(LocalState::Transitioning),
                        Await::WriteBack,
                    );
                } else {
                    if want.is_some() {
                        // the last takeover failed a moment ago
                        self.answer_stpg(false);
                    }
                    self.ask(Action::ReadRecord, Await::Record);
                }
            }
            State::Owning(_) => {
                self.want = None;
                self.answer_stpg(true);
                self.ask(Action::CheckLock, Await::LockCheck);
            }
            State::Fenced(_) => {
                self.want = None;
                self.answer_stpg(false);
                self.end_round(now);
            }
            State::Starting(_) | State::Acquiring(_) | State::Releasing(_) => {}
        }
    }

    /// Requesting, the lock held: the record says whether the holder acknowledged.
    fn watch(&mut self, now: Instant, r: Requesting, rec: Record) {
        let mut asked = r.asked;
        if rec.request != Some(self.me) {
            // another requester's write replaced the request (erasing the holder's ack, if
            // it gave one): ask again, and give the holder its full time
            self.push(Action::WriteRecord(Record {
                request: Some(self.me),
                acked: false,
                ..rec
            }));
            asked = now;
        }
        let acked = rec.acked && rec.request == Some(self.me);
        let waited = now.saturating_duration_since(r.started);
        if (!acked && now.saturating_duration_since(asked) >= ACK_WAIT) || waited >= HANDOFF_MAX {
            self.push(Action::BreakLocks { acked, waited });
            self.acquire(r, true);
        } else {
            self.state = State::Requesting(Requesting { asked, ..r });
            self.wake_at = Some(now + LOCK_POLL);
        }
    }

    fn acquire(&mut self, r: Requesting, fenced_other: bool) {
        self.state = State::Acquiring(Acquiring {
            cause: r.cause,
            owner: r.owner,
            started: r.started,
            fenced_other,
            holder: r.holder,
            acquired: None,
        });
        self.ask(Action::AcquireLock, Await::LockAcquired);
    }

    /// The takeover failed: follow the owner known before; the next one waits
    /// [`RETRY_AFTER`].
    fn fail(&mut self, now: Instant, owner: u16) {
        self.last_failure = Some(now);
        self.push(Action::SetLocal(LocalState::NonOwner { owner }));
        self.answer_stpg(false);
        self.push(Action::Report(Event::TakeoverFailed));
        self.state = State::Following(Following { owner });
        self.end_round(now);
    }

    /// A new LUN's first state (`owns`: this gateway took the lock).
    fn settle(&mut self, now: Instant, configured: u16, rec: Record, owns: bool) {
        let owner = if owns {
            self.me
        } else {
            self.peer(rec.owner).unwrap_or(if configured == self.me {
                self.some_peer()
            } else {
                configured
            })
        };
        if owns {
            self.state = State::Owning(Owning { since: now });
            self.push(Action::SetLocal(LocalState::Owner));
        } else {
            self.state = State::Following(Following { owner });
            self.push(Action::SetLocal(LocalState::NonOwner { owner }));
        }
        self.push(Action::Report(Event::Started { owner, owns }));
        self.end_round(now);
    }

    /// The lock was broken by another gateway.
    fn fence(&mut self, now: Instant) {
        let owner = self.some_peer();
        self.state = State::Fenced(Fenced);
        self.push(Action::SetLocal(LocalState::Unavailable { owner }));
        self.push(Action::Report(Event::Fenced));
        self.end_round(now);
    }

    fn answer_stpg(&mut self, ok: bool) {
        if std::mem::take(&mut self.stpg_waiting) {
            self.push(Action::AnswerStpg { ok });
        }
    }

    fn may_try(&self, now: Instant) -> bool {
        self.last_failure
            .is_none_or(|t| now.saturating_duration_since(t) >= RETRY_AFTER)
    }

    /// The round is over: the next one after [`POLL`], or at once when a takeover is
    /// wanted.
    fn end_round(&mut self, now: Instant) {
        self.wake_at = match self.arbitration {
            Arbitration::Lock if self.want.is_some() => Some(now),
            Arbitration::Lock => Some(now + POLL),
            Arbitration::Admin => None,
        };
    }

    /// Between rounds, an input that wants a takeover starts the next round now.
    fn wake_soon(&mut self, now: Instant) {
        let between_rounds = matches!(
            self.state,
            State::Following(_) | State::Owning(_) | State::Fenced(_)
        ) && self.awaiting.is_none()
            && self.actions.is_empty();
        if between_rounds {
            self.wake_at = Some(self.wake_at.map_or(now, |t| t.min(now)));
        }
    }

    /// `group`, if it is one of the other gateways'.
    fn peer(&self, group: Option<u16>) -> Option<u16> {
        group.filter(|g| self.peers.contains(g))
    }

    /// Some other group (the owner when nothing names one).
    fn some_peer(&self) -> u16 {
        self.peers.first().copied().unwrap_or(self.me)
    }

    fn push(&mut self, a: Action) {
        self.actions.push_back(a);
    }

    fn ask(&mut self, a: Action, answer: Await) {
        self.actions.push_back(a);
        self.awaiting = Some(answer);
    }

    /// Whether `input` is the one awaited (it is consumed then); any other is ignored.
    fn answered(&mut self, input: Await) -> bool {
        if self.awaiting == Some(input) {
            self.awaiting = None;
            true
        } else {
            false
        }
    }
}
