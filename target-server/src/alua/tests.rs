//! The ownership machines of two or three gateways against a simulated cluster — the
//! image's exclusive lock, the record object, the blocklist and the image's blocks — on
//! simulated time: no Ceph, no thread, no sleep. Each gateway carries its machine's actions
//! out one at a time, as the Ceph driver does, each taking a latency (an action's effect
//! happens when it completes); a gateway can be killed (its lock stays until broken),
//! frozen (SIGSTOP: nothing it does completes until it is thawed) and restarted (a new Ceph
//! client). After every completed action the safety rules are checked: a gateway reporting
//! active/optimized holds the lock unless its client is blocklisted (so at most one
//! gateway can write), and only such a gateway (or one handing over) caches.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::machine::{
    ACK_WAIT, Action, Event, HANDOFF_MAX, Holder, LocalState, LockOwners, MIN_HOLD, Machine,
    MoveCause, POLL, RETRY_AFTER,
};
use super::record::Record;

/// A Ceph client: a gateway's process (its index and incarnation).
type Client = (usize, u32);

#[derive(Debug, Default)]
struct Cluster {
    lock: Option<Client>,
    record: Record,
    blocklist: BTreeSet<Client>,
    /// The image's blocks (block number, value).
    image: BTreeMap<u64, u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Running,
    Frozen,
    Dead,
}

struct Gateway {
    group: u16,
    client: Client,
    m: Machine,
    life: Life,
    /// The ALUA state last set.
    local: Option<LocalState>,
    caching: bool,
    /// Dirty blocks in this gateway's cache.
    dirty: BTreeMap<u64, u64>,
    /// How long writing the dirty blocks back takes.
    write_back_time: Duration,
    /// The action in progress and when it completes.
    busy: Option<(Duration, Action)>,
    /// Lock owners the last look found.
    owners_seen: Vec<Client>,
    stpg_waiting: usize,
    /// STPG answers, with when they were sent.
    answers: Vec<(Duration, bool)>,
    events: Vec<(Duration, Event)>,
    /// Set when this gateway reported active/optimized with a blocklisted client.
    owner_while_blocklisted: bool,
}

/// A tiny deterministic random source (xorshift64*), for latencies.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

struct Sim {
    t0: Instant,
    now: Duration,
    cluster: Cluster,
    gws: Vec<Gateway>,
    /// How many gateways (groups 1..=n).
    n: usize,
    /// The configured owner's group.
    configured: u16,
    /// Action latency: 1 ms plus up to this many ms at random.
    jitter_ms: u64,
    rng: Rng,
    /// Clients whose lock was broken while they ran (not frozen, not dead).
    live_fenced: Vec<(Client, String)>,
    /// What happened, for a failing test's message.
    trace: Vec<String>,
}

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Sim {
    /// `n` gateways (groups 1..=n), group 1 the configured owner, all started at 0.
    fn new(n: usize, jitter_ms: u64, seed: u64) -> Sim {
        let mut s = Sim {
            t0: Instant::now(),
            now: Duration::ZERO,
            cluster: Cluster::default(),
            gws: Vec::new(),
            n,
            configured: 1,
            jitter_ms,
            rng: Rng(seed | 1),
            live_fenced: Vec::new(),
            trace: Vec::new(),
        };
        for i in 0..n {
            let m = s.machine(i);
            s.gws.push(Gateway {
                group: i as u16 + 1,
                client: (i, 0),
                m,
                life: Life::Running,
                local: None,
                caching: false,
                dirty: BTreeMap::new(),
                write_back_time: ms(30),
                busy: None,
                owners_seen: Vec::new(),
                stpg_waiting: 0,
                answers: Vec::new(),
                events: Vec::new(),
                owner_while_blocklisted: false,
            });
        }
        s
    }

    fn machine(&self, i: usize) -> Machine {
        let me = i as u16 + 1;
        let peers: Vec<u16> = (1..=self.n as u16).filter(|&g| g != me).collect();
        Machine::arbitrated(me, &peers, self.configured)
    }

    fn at(&self, d: Duration) -> Instant {
        self.t0 + d
    }

    fn blocklisted(&self, i: usize) -> bool {
        self.cluster.blocklist.contains(&self.gws[i].client)
    }

    /// Runs until `until` (simulated).
    fn run_until(&mut self, until: Duration) {
        loop {
            self.start_actions();
            let next = self.next_event();
            match next {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.complete_due();
                }
                _ => {
                    self.now = self.now.max(until);
                    return;
                }
            }
        }
    }

    fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    /// Runs until `done` holds (checked after every step), at most `limit` more.
    fn run_while(&mut self, limit: Duration, mut done: impl FnMut(&Sim) -> bool) -> bool {
        let until = self.now + limit;
        while self.now < until {
            if done(self) {
                return true;
            }
            self.start_actions();
            match self.next_event() {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    self.complete_due();
                }
                _ => self.now = until,
            }
        }
        done(self)
    }

    fn next_event(&self) -> Option<Duration> {
        self.gws
            .iter()
            .filter(|g| g.life == Life::Running)
            .filter_map(|g| match g.busy {
                Some((t, _)) => Some(t),
                None => {
                    g.m.poll_timeout()
                        .map(|i| i.saturating_duration_since(self.t0))
                }
            })
            .min()
    }

    /// Every idle running gateway starts its next action, if it has one.
    fn start_actions(&mut self) {
        for i in 0..self.gws.len() {
            if self.gws[i].life != Life::Running || self.gws[i].busy.is_some() {
                continue;
            }
            let now = self.at(self.now);
            if self.gws[i].stpg_waiting > 0 {
                // the driver tells its machine at every turn while STPGs wait
                self.gws[i].m.handle_stpg(now);
            }
            if let Some(a) = self.gws[i].m.poll_action(now) {
                let mut took = ms(1 + self.rng.below(self.jitter_ms + 1));
                if a == Action::SetLocal(LocalState::Transitioning) {
                    let g = &mut self.gws[i];
                    if g.local == Some(LocalState::Owner) && g.caching {
                        took = g.write_back_time;
                    }
                    // the port reports transitioning at once; the write-back takes time
                    g.local = Some(LocalState::Transitioning);
                }
                self.gws[i].busy = Some((self.now + took, a));
            }
        }
    }

    fn complete_due(&mut self) {
        for i in 0..self.gws.len() {
            if self.gws[i].life != Life::Running {
                continue;
            }
            if let Some((t, a)) = self.gws[i].busy
                && t <= self.now
            {
                self.gws[i].busy = None;
                self.complete(i, a);
                self.check();
            }
        }
    }

    /// The trace's last lines.
    fn dump(&self) -> String {
        let from = self.trace.len().saturating_sub(150);
        self.trace[from..].join("\n")
    }

    /// An action's effect, at its completion, and the machine's input.
    fn complete(&mut self, i: usize, a: Action) {
        let now = self.at(self.now);
        self.trace.push(format!(
            "{:>6} g{} {:?} lock={:?} rec={:?}",
            self.now.as_millis(),
            self.gws[i].group,
            a,
            self.cluster.lock,
            self.cluster.record
        ));
        let me = self.gws[i].client;
        let fenced = self.blocklisted(i);
        match a {
            Action::ReadRecord => {
                let rec = if fenced {
                    Record::default()
                } else {
                    self.cluster.record
                };
                self.gws[i].m.handle_record(now, rec);
            }
            Action::WriteRecord(r) => {
                if !fenced {
                    self.cluster.record = r;
                }
            }
            Action::CheckLock => {
                let held = !fenced && self.cluster.lock == Some(me);
                self.gws[i].m.handle_lock_check(now, held);
            }
            Action::ReadLockOwners => {
                let owners = if fenced {
                    LockOwners::Unknown
                } else {
                    match self.cluster.lock {
                        None => LockOwners::Free,
                        Some(c) => {
                            self.gws[i].owners_seen = vec![c];
                            LockOwners::Held(Holder(u64::from(c.1) << 32 | c.0 as u64))
                        }
                    }
                };
                self.gws[i].m.handle_lock_owners(now, owners);
            }
            Action::BreakLocks { .. } => {
                for c in std::mem::take(&mut self.gws[i].owners_seen) {
                    // librbd breaks a lock only if its named owner still holds it
                    if !fenced && self.cluster.lock == Some(c) {
                        self.cluster.lock = None;
                        self.cluster.blocklist.insert(c);
                        if self.gws[c.0].client == c && self.gws[c.0].life == Life::Running {
                            let trace = self.dump();
                            self.live_fenced.push((c, trace));
                        }
                    }
                }
            }
            Action::AcquireLock => {
                let ok = !fenced && self.cluster.lock.is_none_or(|c| c == me);
                if ok {
                    self.cluster.lock = Some(me);
                }
                self.gws[i].m.handle_lock_acquired(now, ok);
            }
            Action::ReleaseLock => {
                assert!(self.gws[i].dirty.is_empty(), "released with dirty blocks");
                if self.cluster.lock == Some(me) {
                    self.cluster.lock = None;
                }
            }
            Action::SetLocal(s) => self.set_local(i, s),
            Action::AnswerStpg { ok } => {
                let g = &mut self.gws[i];
                for _ in 0..std::mem::take(&mut g.stpg_waiting) {
                    g.answers.push((self.now, ok));
                }
            }
            Action::Report(e) => self.gws[i].events.push((self.now, e)),
        }
    }

    /// What `set_local_state` does, on the simulated cache.
    fn set_local(&mut self, i: usize, s: LocalState) {
        let now = self.at(self.now);
        let fenced = self.blocklisted(i);
        let g = &mut self.gws[i];
        match s {
            LocalState::Owner => {
                if !g.caching {
                    assert!(g.dirty.is_empty(), "stale dirty blocks dropped");
                }
                g.caching = true;
                g.local = Some(s);
                if fenced {
                    g.owner_while_blocklisted = true;
                }
            }
            LocalState::Transitioning => {
                // the write-back (if any) took its time: it lands now, or fails when this
                // gateway's client was blocklisted meanwhile
                if g.caching {
                    if fenced {
                        g.m.handle_write_back(now, false);
                        return;
                    }
                    self.cluster.image.extend(std::mem::take(&mut g.dirty));
                    g.caching = false;
                }
                g.m.handle_write_back(now, true);
            }
            LocalState::NonOwner { .. } => {
                assert!(g.dirty.is_empty(), "left the owner state with dirty blocks");
                g.caching = false;
                g.local = Some(s);
            }
            LocalState::Unavailable { .. } => {
                g.dirty.clear();
                g.caching = false;
                g.local = Some(s);
            }
        }
    }

    /// The safety rules.
    fn check(&self) {
        for g in &self.gws {
            if g.life == Life::Dead {
                continue;
            }
            let blocklisted = self.cluster.blocklist.contains(&g.client);
            if g.local == Some(LocalState::Owner) && !blocklisted {
                assert_eq!(
                    self.cluster.lock,
                    Some(g.client),
                    "at {:?} group {} reports active/optimized without the lock",
                    self.now,
                    g.group
                );
            }
            if g.caching {
                assert!(
                    matches!(g.local, Some(LocalState::Owner | LocalState::Transitioning)),
                    "group {} caches in {:?}",
                    g.group,
                    g.local
                );
            }
        }
    }

    // -- what happens to the gateways

    fn stpg(&mut self, i: usize) {
        let now = self.at(self.now);
        self.gws[i].stpg_waiting += 1;
        self.gws[i].m.handle_stpg(now);
    }

    fn io(&mut self, i: usize) {
        let now = self.at(self.now);
        self.gws[i].m.handle_want(now, MoveCause::Io);
    }

    /// A write through gateway `i` (its owner state allowing): cached when it caches,
    /// else written through; `false` when refused.
    fn write(&mut self, i: usize, block: u64, value: u64) -> bool {
        let fenced = self.blocklisted(i);
        let g = &mut self.gws[i];
        if g.life != Life::Running || g.local != Some(LocalState::Owner) {
            return false;
        }
        if g.caching {
            g.dirty.insert(block, value);
            true
        } else if !fenced {
            self.cluster.image.insert(block, value);
            true
        } else {
            false
        }
    }

    /// SYNCHRONIZE CACHE (or a background flusher) at gateway `i`: its dirty blocks land
    /// unless its client is blocklisted.
    fn flush(&mut self, i: usize) -> bool {
        if self.blocklisted(i) {
            return false;
        }
        let dirty = std::mem::take(&mut self.gws[i].dirty);
        self.cluster.image.extend(dirty);
        true
    }

    fn kill(&mut self, i: usize) {
        self.gws[i].life = Life::Dead;
        self.gws[i].busy = None;
    }

    fn freeze(&mut self, i: usize) {
        if self.gws[i].life == Life::Running {
            self.gws[i].life = Life::Frozen;
        }
    }

    fn thaw(&mut self, i: usize) {
        if self.gws[i].life == Life::Frozen {
            self.gws[i].life = Life::Running;
            // what it was doing completes now
            if let Some((t, a)) = self.gws[i].busy {
                self.gws[i].busy = Some((t.max(self.now), a));
            }
        }
    }

    /// A new process for gateway `i` (a new Ceph client, its cache empty).
    fn restart(&mut self, i: usize) {
        let m = self.machine(i);
        let g = &mut self.gws[i];
        g.client.1 += 1;
        g.m = m;
        g.life = Life::Running;
        g.local = None;
        g.caching = false;
        g.dirty.clear();
        g.busy = None;
        g.stpg_waiting = 0;
    }

    // -- what is observed

    fn local(&self, i: usize) -> Option<LocalState> {
        self.gws[i].local
    }

    fn holder(&self) -> Option<usize> {
        self.cluster.lock.map(|c| c.0)
    }

    fn took_over(&self, i: usize) -> Vec<bool> {
        self.gws[i]
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                Event::TookOver { fenced_other, .. } => Some(*fenced_other),
                _ => None,
            })
            .collect()
    }

    fn has_event(&self, i: usize, f: impl Fn(&Event) -> bool) -> bool {
        self.gws[i].events.iter().any(|(_, e)| f(e))
    }

    /// Started, settled: group 1 owns.
    fn settled(n: usize, jitter_ms: u64, seed: u64) -> Sim {
        let mut s = Sim::new(n, jitter_ms, seed);
        s.run_for(ms(1500));
        assert_eq!(s.local(A), Some(LocalState::Owner));
        for i in 1..n {
            assert_eq!(s.local(i), Some(LocalState::NonOwner { owner: 1 }));
        }
        assert_eq!(s.holder(), Some(A));
        assert_eq!(s.cluster.record.owner, Some(1));
        s
    }
}

fn answered(s: &Sim, i: usize) -> bool {
    s.gws[i].stpg_waiting == 0 && !s.gws[i].answers.is_empty()
}

#[test]
fn handover_on_stpg_writes_the_owners_blocks_back() {
    let mut s = Sim::settled(2, 0, 1);
    assert!(s.write(A, 1, 10));
    assert!(s.write(A, 2, 20));
    let asked = s.now;
    s.stpg(B);
    assert!(s.run_while(ms(5000), |s| answered(s, B)));
    let (at, ok) = s.gws[B].answers[0];
    assert!(ok);
    let took = at - asked;
    // the owner sees the request within a poll, writes back, releases; the requester
    // looks at the lock every 50 ms
    assert!(took <= POLL + ms(200), "handover took {took:?}");
    assert_eq!(s.local(B), Some(LocalState::Owner));
    assert_eq!(s.local(A), Some(LocalState::NonOwner { owner: 2 }));
    assert_eq!(s.cluster.image.get(&1), Some(&10));
    assert_eq!(s.cluster.image.get(&2), Some(&20));
    assert_eq!(s.took_over(B), vec![false]);
    assert!(s.has_event(A, |e| *e == Event::Released { to: 2 }));
    assert!(s.cluster.blocklist.is_empty());
    s.run_for(ms(500));
    assert_eq!(s.cluster.record.owner, Some(2));
}

#[test]
fn takeover_after_the_owner_dies() {
    let mut s = Sim::settled(2, 0, 2);
    s.kill(A);
    let asked = s.now;
    s.stpg(B);
    assert!(s.run_while(ms(10_000), |s| answered(s, B)));
    let (at, ok) = s.gws[B].answers[0];
    assert!(ok);
    let took = at - asked;
    assert!(
        took >= ACK_WAIT && took <= ACK_WAIT + ms(200),
        "takeover took {took:?}"
    );
    assert!(
        s.cluster.blocklist.contains(&(A, 0)),
        "the dead owner is fenced"
    );
    assert_eq!(s.holder(), Some(B));
    assert_eq!(s.took_over(B), vec![true]);
    assert_eq!(s.local(B), Some(LocalState::Owner));
}

#[test]
fn a_frozen_owner_is_fenced_drops_its_cache_and_its_late_write_is_refused() {
    let mut s = Sim::settled(2, 3, 3);
    assert!(s.write(A, 5, 100));
    s.freeze(A);
    s.stpg(B);
    assert!(s.run_while(ms(10_000), |s| answered(s, B)));
    assert!(s.gws[B].answers[0].1);
    assert_eq!(s.took_over(B), vec![true]);
    assert!(s.write(B, 5, 200));
    assert!(s.flush(B));
    s.thaw(A);
    // its flushers try first: the blocklist refuses them
    assert!(!s.flush(A), "a fenced gateway's late write-back is refused");
    s.run_for(ms(1000));
    assert_eq!(s.cluster.image.get(&5), Some(&200));
    assert_eq!(s.local(A), Some(LocalState::Unavailable { owner: 2 }));
    assert!(s.gws[A].dirty.is_empty() && !s.gws[A].caching);
    assert!(s.has_event(A, |e| *e == Event::Fenced));
    assert!(!s.write(A, 5, 300), "the fenced gateway serves no write");
    assert_eq!(s.cluster.record.owner, Some(2), "nor writes the record");
    // it stays fenced, and refuses STPG
    s.stpg(A);
    s.run_for(ms(1000));
    let answers: Vec<bool> = s.gws[A].answers.iter().map(|a| a.1).collect();
    assert_eq!(answers, vec![false]);
    assert_eq!(s.local(A), Some(LocalState::Unavailable { owner: 2 }));
    assert_eq!(s.holder(), Some(B));
}

#[test]
fn the_old_owner_restarts_following() {
    let mut s = Sim::settled(2, 3, 4);
    s.kill(A);
    s.stpg(B);
    assert!(s.run_while(ms(10_000), |s| answered(s, B)));
    s.restart(A);
    s.run_for(ms(1000));
    // group 1 is the configured owner, but the lock is B's: A follows the record
    assert_eq!(s.local(A), Some(LocalState::NonOwner { owner: 2 }));
    assert!(s.has_event(A, |e| *e
        == Event::Started {
            owner: 2,
            owns: false
        }));
    assert_eq!(s.holder(), Some(B));
    assert_eq!(s.local(B), Some(LocalState::Owner));
    // and takes the LUN back on request, cooperatively
    s.stpg(A);
    assert!(s.run_while(ms(5000), |s| answered(s, A)));
    assert!(s.gws[A].answers[0].1);
    assert_eq!(s.took_over(A), vec![false]);
    assert_eq!(s.holder(), Some(A));
}

#[test]
fn two_gateways_asking_at_once_get_the_lun_in_turn_and_fence_nobody() {
    for seed in 1..40 {
        let mut s = Sim::settled(3, 20, seed);
        s.stpg(B);
        s.stpg(C);
        assert!(
            s.run_while(ms(20_000), |s| answered(s, B) && answered(s, C)),
            "seed {seed}"
        );
        s.run_for(ms(3000));
        assert!(s.cluster.blocklist.is_empty(), "seed {seed}: nobody fenced");
        let owners: Vec<usize> = (0..3)
            .filter(|&i| s.local(i) == Some(LocalState::Owner))
            .collect();
        assert_eq!(owners.len(), 1, "seed {seed}: one owner\n{}", s.dump());
        assert!(owners[0] != A, "seed {seed}: one of the askers owns");
        assert_eq!(s.holder(), Some(owners[0]));
        // the one that lost the race for the free lock asked the winner in turn: both
        // got the LUN, both were answered GOOD
        for i in [B, C] {
            assert!(
                s.gws[i].answers.iter().all(|a| a.1),
                "seed {seed}\n{}",
                s.dump()
            );
            assert!(!s.took_over(i).is_empty(), "seed {seed}");
        }
    }
}

#[test]
fn the_lock_lost_mid_flush_fences_the_owner() {
    let mut s = Sim::settled(2, 3, 5);
    // the owner acknowledges, then its write-back outlasts the requester's patience
    s.gws[A].write_back_time = HANDOFF_MAX + ms(10_000);
    assert!(s.write(A, 7, 70));
    s.stpg(B);
    assert!(s.run_while(HANDOFF_MAX + ms(5000), |s| answered(s, B)));
    assert_eq!(s.took_over(B), vec![true]);
    assert!(s.cluster.blocklist.contains(&(A, 0)));
    assert!(s.write(B, 7, 71));
    s.run_for(ms(12_000));
    // the write-back failed (blocklisted): A looks at the lock before serving again, finds
    // it broken and drops its cache
    assert!(
        !s.gws[A].owner_while_blocklisted,
        "served after its lock was broken"
    );
    assert_eq!(s.local(A), Some(LocalState::Unavailable { owner: 2 }));
    assert!(s.gws[A].dirty.is_empty());
    assert!(s.flush(B));
    assert_eq!(s.cluster.image.get(&7), Some(&71));
}

#[test]
fn a_failed_write_back_keeps_the_lun_while_the_lock_holds() {
    // the machine alone: the owner's write-back fails (a sick store)
    let t = Instant::now();
    let later = t + MIN_HOLD + POLL;
    let rec = Record {
        owner: Some(1),
        request: Some(2),
        acked: false,
    };
    // the lock is still its own: it serves again (and tries again a round later if the
    // request is still there)
    let kept = after_failed_write_back(t, later, rec, true);
    assert!(kept.contains(&Action::WriteRecord(Record { acked: true, ..rec })));
    assert_eq!(
        kept[kept.len() - 2..],
        [Action::CheckLock, Action::SetLocal(LocalState::Owner)],
        "the lock is looked at before the LUN is served again"
    );
    assert!(!kept.contains(&Action::ReleaseLock));
    // the lock was broken while it wrote back: fenced, never the owner again
    let fenced = after_failed_write_back(t, later, rec, false);
    assert_eq!(
        fenced[fenced.len() - 3..],
        [
            Action::CheckLock,
            Action::SetLocal(LocalState::Unavailable { owner: 2 }),
            Action::Report(Event::Fenced)
        ]
    );
}

/// An owner (group 1 of 1 and 2) asked for the LUN at `later`, whose write-back fails;
/// the lock is still its own (`held`) or not. The actions it took.
fn after_failed_write_back(t: Instant, later: Instant, rec: Record, held: bool) -> Vec<Action> {
    let mut m = Machine::arbitrated(1, &[2], 1);
    m.poll_action(t);
    m.handle_record(t, Record::default());
    m.poll_action(t);
    m.handle_lock_owners(t, LockOwners::Free);
    m.poll_action(t);
    m.handle_lock_acquired(t, true);
    while m.poll_action(t).is_some() {}
    let mut seen = Vec::new();
    let mut wrote_back = false;
    while let Some(a) = m.poll_action(later) {
        seen.push(a);
        match a {
            Action::CheckLock => m.handle_lock_check(later, !wrote_back || held),
            Action::ReadRecord => m.handle_record(later, rec),
            Action::SetLocal(LocalState::Transitioning) => {
                wrote_back = true;
                m.handle_write_back(later, false);
            }
            _ => {}
        }
    }
    seen
}

#[test]
fn a_takeovers_last_record_write_keeps_anothers_request() {
    // B takes the LUN from A; C's request lands between B's lock and B's record write
    let t = Instant::now();
    let mut m = Machine::arbitrated(2, &[1, 3], 1);
    assert_eq!(m.poll_action(t), Some(Action::ReadRecord));
    let a_owns = Record {
        owner: Some(1),
        ..Record::default()
    };
    m.handle_record(t, a_owns);
    assert_eq!(
        m.poll_action(t),
        Some(Action::SetLocal(LocalState::NonOwner { owner: 1 }))
    );
    assert!(matches!(m.poll_action(t), Some(Action::Report(_))));
    m.handle_stpg(t);
    assert_eq!(
        m.poll_action(t),
        Some(Action::SetLocal(LocalState::Transitioning))
    );
    m.handle_write_back(t, true);
    assert_eq!(m.poll_action(t), Some(Action::ReadRecord));
    m.handle_record(t, a_owns);
    assert_eq!(
        m.poll_action(t),
        Some(Action::WriteRecord(Record {
            owner: Some(1),
            request: Some(2),
            acked: false
        }))
    );
    assert_eq!(m.poll_action(t), Some(Action::ReadLockOwners));
    m.handle_lock_owners(t, LockOwners::Free);
    assert_eq!(m.poll_action(t), Some(Action::AcquireLock));
    m.handle_lock_acquired(t, true);
    assert_eq!(m.poll_action(t), Some(Action::ReadRecord));
    m.handle_record(
        t,
        Record {
            owner: Some(1),
            request: Some(3),
            acked: false,
        },
    );
    assert_eq!(
        m.poll_action(t),
        Some(Action::WriteRecord(Record {
            owner: Some(2),
            request: Some(3),
            acked: false
        })),
        "C's request stays"
    );
    assert_eq!(m.poll_action(t), Some(Action::SetLocal(LocalState::Owner)));
    assert!(matches!(
        m.poll_action(t),
        Some(Action::Report(Event::TookOver {
            cause: MoveCause::Stpg,
            from: 1,
            fenced_other: false,
            ..
        }))
    ));
    assert_eq!(m.poll_action(t), Some(Action::AnswerStpg { ok: true }));
}

#[test]
fn the_record_race_in_the_cluster_leaves_the_late_asker_its_turn() {
    // three gateways; C asks just after B: whoever wins, the other one's request survives
    // the winner's record write and it gets the LUN after the minimum hold, unfenced
    for seed in 1..40 {
        let mut s = Sim::settled(3, 15, seed);
        s.stpg(B);
        s.run_for(ms(seed % 60));
        s.stpg(C);
        assert!(
            s.run_while(ms(20_000), |s| answered(s, B) && answered(s, C)),
            "seed {seed}"
        );
        assert!(s.cluster.blocklist.is_empty(), "seed {seed}: nobody fenced");
        assert!(s.live_fenced.is_empty());
    }
}

/// Gateway 2 of two, following group 1, which the record names the owner, at `t`.
fn following_group_1(t: Instant) -> Machine {
    let mut m = Machine::arbitrated(2, &[1], 1);
    m.poll_action(t);
    m.handle_record(
        t,
        Record {
            owner: Some(1),
            ..Record::default()
        },
    );
    while m.poll_action(t).is_some() {}
    m
}

#[test]
fn stpg_is_answered_when_the_takeover_ends_and_failed_when_it_fails() {
    let t = Instant::now();
    let mut m = following_group_1(t);
    m.handle_stpg(t);
    let mut answers = Vec::new();
    let drive = |m: &mut Machine, now: Instant, acquire: bool, answers: &mut Vec<bool>| {
        while let Some(a) = m.poll_action(now) {
            match a {
                Action::SetLocal(LocalState::Transitioning) => m.handle_write_back(now, true),
                Action::ReadRecord => m.handle_record(now, Record::default()),
                Action::ReadLockOwners => m.handle_lock_owners(now, LockOwners::Free),
                Action::AcquireLock => m.handle_lock_acquired(now, acquire),
                Action::AnswerStpg { ok } => answers.push(ok),
                _ => {}
            }
        }
    };
    // the lock cannot be taken (another gateway was faster): failed
    drive(&mut m, t, false, &mut answers);
    assert_eq!(answers, vec![false]);
    assert!(!m.owns());
    // asked again within RETRY_AFTER: failed at once, without a takeover
    let soon = t + ms(300);
    m.handle_stpg(soon);
    drive(&mut m, soon, true, &mut answers);
    assert_eq!(answers, vec![false, false]);
    assert!(!m.owns());
    // later: taken over, GOOD
    let later = t + RETRY_AFTER + ms(100);
    m.handle_stpg(later);
    drive(&mut m, later, true, &mut answers);
    assert_eq!(answers, vec![false, false, true]);
    assert!(m.owns());
}

/// A takeover reports what asked for it; the administrator's request counts over a
/// command's that waited with it.
#[test]
fn a_takeover_says_what_asked_for_it() {
    for (asks, counted) in [
        (vec![MoveCause::Io], MoveCause::Io),
        (vec![MoveCause::Admin], MoveCause::Admin),
        (vec![MoveCause::Io, MoveCause::Admin], MoveCause::Admin),
        (vec![MoveCause::Admin, MoveCause::Io], MoveCause::Admin),
    ] {
        let t = Instant::now();
        let mut m = following_group_1(t);
        for c in &asks {
            m.handle_want(t, *c);
        }
        let mut took = None;
        for _ in 0..32 {
            let Some(a) = m.poll_action(t) else { break };
            match a {
                Action::SetLocal(LocalState::Transitioning) => m.handle_write_back(t, true),
                Action::ReadRecord => m.handle_record(t, Record::default()),
                Action::ReadLockOwners => m.handle_lock_owners(t, LockOwners::Free),
                Action::AcquireLock => m.handle_lock_acquired(t, true),
                Action::Report(Event::TookOver { cause, from, .. }) => took = Some((cause, from)),
                _ => {}
            }
        }
        assert_eq!(took, Some((counted, 1)), "{asks:?}");
        assert_eq!(MoveCause::ALL[counted.index()], counted);
        assert_eq!(counted.label(), ["io", "stpg", "admin"][counted.index()]);
    }
}

#[test]
fn io_on_a_non_owner_takes_the_lun_over() {
    let mut s = Sim::settled(2, 3, 6);
    s.io(B);
    s.run_for(ms(1500));
    assert_eq!(s.local(B), Some(LocalState::Owner));
    assert_eq!(s.took_over(B), vec![false]);
    assert!(s.gws[B].answers.is_empty());
}

#[test]
fn an_administered_lun_moves_with_its_blocks_written_back() {
    let t = Instant::now();
    // owned here; moved to group 2: transitioning, write back, then non-owner
    let mut m = Machine::administered(1, &[2], true, 1, t);
    m.handle_admin_move(t, 2);
    assert_eq!(
        m.poll_action(t),
        Some(Action::SetLocal(LocalState::Transitioning))
    );
    assert_eq!(m.poll_action(t), None, "waits for the write-back");
    m.handle_write_back(t, true);
    assert_eq!(
        m.poll_action(t),
        Some(Action::SetLocal(LocalState::NonOwner { owner: 2 }))
    );
    assert_eq!(m.poll_action(t), None);
    assert_eq!(m.poll_timeout(), None, "no timer, no lock, no record");
    // a failed write-back keeps it here
    let mut m = Machine::administered(1, &[2], true, 1, t);
    m.handle_admin_move(t, 2);
    m.poll_action(t);
    m.handle_write_back(t, false);
    assert_eq!(m.poll_action(t), Some(Action::SetLocal(LocalState::Owner)));
    assert!(m.owns());
    // not owned here; made the owner
    let mut m = Machine::administered(1, &[2], false, 2, t);
    m.handle_admin_move(t, 1);
    assert_eq!(m.poll_action(t), Some(Action::SetLocal(LocalState::Owner)));
    assert!(m.owns());
    // STPG and I/O mean nothing to an administered LUN
    m.handle_stpg(t);
    m.handle_want(t, MoveCause::Io);
    assert_eq!(m.poll_action(t + ms(10_000)), None);
}

/// Something that happens to a gateway in a random run.
#[derive(Debug, Clone, Copy)]
enum Happening {
    Stpg(usize),
    Io(usize),
    Write(usize, u64),
    Kill(usize),
    Freeze(usize, u64),
    Restart(usize),
}

fn happening(n: usize) -> impl Strategy<Value = (u64, Happening)> {
    let g = 0..n;
    (
        0u64..12_000,
        prop_oneof![
            4 => g.clone().prop_map(Happening::Stpg),
            2 => g.clone().prop_map(Happening::Io),
            3 => (g.clone(), 0u64..8).prop_map(|(i, b)| Happening::Write(i, b)),
            1 => g.clone().prop_map(Happening::Kill),
            1 => (g.clone(), 100u64..5000).prop_map(|(i, d)| Happening::Freeze(i, d)),
            1 => g.prop_map(Happening::Restart),
        ],
    )
}

fn scenario() -> impl Strategy<Value = (usize, u64, u64, u64, Vec<(u64, Happening)>)> {
    (2usize..=3).prop_flat_map(|n| {
        (
            Just(n),
            any::<u64>(),
            0u64..40,
            0u64..4000,
            prop::collection::vec(happening(n), 1..12),
        )
    })
}

proptest! {

    /// Random requests, writes, kills, freezes and restarts with random latencies: never two
    /// gateways able to write, never caching outside the owner state (checked after every
    /// action); a live owner is never fenced unless a gateway was frozen, killed or
    /// restarted; in the end every STPG is answered and the lock holder, if alive, is the
    /// one owner.
    #[test]
    fn random_interleavings_keep_one_writer(
        (n, seed, jitter, write_back, mut happenings) in scenario()
    ) {
        happenings.sort_by_key(|h| h.0);
        let mut s = Sim::settled(n, jitter, seed);
        for g in &mut s.gws {
            g.write_back_time = ms(write_back.max(1));
        }
        let start = s.now;
        let mut thaws: Vec<(Duration, usize)> = Vec::new();
        // a frozen requester acts on what it saw before it froze; a requester's write erases
        // the owner's ack (the record is written whole), and one killed or restarted after
        // that leaves the others no ack to see: any of these may fence a live owner during a
        // long write-back, which is safe (its unsynchronized blocks are lost)
        let mut disturbed = false;
        let mut value = 1000u64;
        for (t, h) in happenings {
            let at = start + ms(t);
            thaws.sort();
            while let Some(&(when, i)) = thaws.first().filter(|x| x.0 <= at) {
                s.run_until(when);
                s.thaw(i);
                thaws.remove(0);
            }
            s.run_until(at);
            match h {
                Happening::Stpg(i) if s.gws[i].life == Life::Running => s.stpg(i),
                Happening::Io(i) if s.gws[i].life == Life::Running => s.io(i),
                Happening::Write(i, b) => {
                    value += 1;
                    s.write(i, b, value);
                }
                Happening::Kill(i) => {
                    disturbed = true;
                    s.kill(i);
                }
                Happening::Freeze(i, d) if s.gws[i].life == Life::Running => {
                    disturbed = true;
                    s.freeze(i);
                    thaws.push((s.now + ms(d), i));
                }
                Happening::Restart(i) if s.gws[i].life != Life::Frozen => {
                    disturbed = true;
                    s.restart(i);
                }
                _ => {}
            }
        }
        for (when, i) in thaws {
            s.run_until(when.max(s.now));
            s.thaw(i);
        }
        // an owner that died after acknowledging is waited for up to HANDOFF_MAX
        s.run_for(HANDOFF_MAX + ms(30_000));
        if !disturbed {
            prop_assert!(
                s.live_fenced.is_empty(),
                "a live owner was fenced: {:?}",
                s.live_fenced.first()
            );
        }
        for (i, g) in s.gws.iter().enumerate() {
            if g.life == Life::Running {
                prop_assert_eq!(g.stpg_waiting, 0, "gateway {} has unanswered STPGs", i);
                prop_assert!(
                    !g.owner_while_blocklisted || disturbed,
                    "gateway {} served while fenced",
                    i
                );
            }
        }
        if let Some(h) = s.holder() {
            let g = &s.gws[h];
            if g.life == Life::Running && s.cluster.lock == Some(g.client) {
                prop_assert_eq!(g.local, Some(LocalState::Owner));
                prop_assert_eq!(s.cluster.record.owner, Some(g.group));
                for (i, o) in s.gws.iter().enumerate() {
                    let follows = i != h
                        && o.life == Life::Running
                        && !s.cluster.blocklist.contains(&o.client);
                    if follows {
                        prop_assert_eq!(o.local, Some(LocalState::NonOwner { owner: g.group }));
                    }
                }
            }
        }
    }
}

#[test]
fn a_gateway_that_owned_the_lun_before_an_upgrade_takes_the_free_lock_back() {
    // group 2 (the configured owner is 1) owned the LUN in the executable it was upgraded
    // from, whose stop gave the lock back: the record still names it
    let t = Instant::now();
    let two_owns = Record {
        owner: Some(2),
        ..Record::default()
    };
    let mut m = Machine::arbitrated(2, &[1], 1).owned_before_upgrade();
    assert_eq!(m.poll_action(t), Some(Action::ReadRecord));
    m.handle_record(t, two_owns);
    assert_eq!(m.poll_action(t), Some(Action::ReadLockOwners));
    m.handle_lock_owners(t, LockOwners::Free);
    assert_eq!(m.poll_action(t), Some(Action::AcquireLock));
    m.handle_lock_acquired(t, true);
    let mut seen = Vec::new();
    while let Some(a) = m.poll_action(t) {
        seen.push(a);
    }
    assert!(
        seen.contains(&Action::SetLocal(LocalState::Owner)),
        "owner again: {seen:?}"
    );
    assert!(m.owns(), "{seen:?}");

    // another gateway took the lock meanwhile: this one follows
    let mut m = Machine::arbitrated(2, &[1], 1).owned_before_upgrade();
    m.poll_action(t);
    m.handle_record(t, two_owns);
    assert_eq!(m.poll_action(t), Some(Action::ReadLockOwners));
    m.handle_lock_owners(t, LockOwners::Held(Holder(7)));
    let mut seen = Vec::new();
    while let Some(a) = m.poll_action(t) {
        seen.push(a);
    }
    assert!(!m.owns(), "{seen:?}");
    assert!(
        seen.contains(&Action::SetLocal(LocalState::NonOwner { owner: 1 })),
        "{seen:?}"
    );

    // without the upgrade, a gateway that is not the configured owner follows the record
    // without looking at the lock
    let mut m = Machine::arbitrated(2, &[1], 1);
    m.poll_action(t);
    m.handle_record(t, two_owns);
    assert_ne!(m.poll_action(t), Some(Action::ReadLockOwners));
    assert!(!m.owns());
}
