//! State a logical unit shares between its I_T nexuses: the nexuses the server reported
//! (each with its unit attention queue), the SPC-2 reservation, the persistent reservation
//! state and its persistence sequence number. One mutex guards it all; two atomics let the
//! per-I/O path skip the mutex while no unit attention is pending and no reservation or
//! registration exists (the common case).
//!
//! Command checks, in SAM-5 5.3.2 status precedence order: RESERVATION CONFLICT first,
//! then a pending unit attention (INQUIRY, REPORT LUNS and REQUEST SENSE pass; REPORT LUNS
//! clears REPORTED LUNS DATA HAS CHANGED; REQUEST SENSE reports and clears one condition as
//! its parameter data), then the command itself.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::nexus::{Ident, Nexus, NexusId, PortPair};
use crate::ops::opcode;
use crate::pr::state::PrState;
use crate::ua::{UaQueue, UnitAttention};

/// How many initiator ports a logical unit remembers having seen (to tell a returning
/// port, I_T NEXUS LOSS OCCURRED, from a new one, POWER ON OCCURRED). Past it the memory
/// starts over.
const MAX_SEEN: usize = 4096;

#[derive(Debug)]
pub(crate) struct NexusEntry {
    pub ports: PortPair,
    pub ua: UaQueue,
}

#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub nexuses: HashMap<NexusId, NexusEntry>,
    seen: HashSet<PortPair>,
    /// The persistent reservation state and the SPC-2 reservation's holder (`pr.spc2`).
    pub pr: PrState,
    /// Sequence number of the last persistence request.
    pub seq: u64,
    /// Several gateways share the persistent reservations: every change is stored.
    pub shared_pr: bool,
    /// The unit attentions of nexuses a previous process served (live upgrade), by
    /// identity: the nexus added next with that identity gets them instead of POWER ON.
    carried: HashMap<PortPair, UaQueue>,
    /// The identities whose nexus prevented medium removal in the previous process (each
    /// also in `carried`): the nexus added next with one prevents it again
    /// ([`SharedState::nexus_added`]).
    pub carried_preventing: HashSet<PortPair>,
}

impl Shared {
    /// The entry of `n`, added without a unit attention when the server did not report it
    /// (e.g. the anonymous nexus of [`crate::LogicalUnit::execute`]).
    pub fn entry(&mut self, n: &Nexus) -> &mut NexusEntry {
        self.nexuses.entry(n.id).or_insert_with(|| NexusEntry {
            ports: n.key(),
            ua: UaQueue::default(),
        })
    }

    /// Establishes `ua` for every nexus.
    pub fn ua_all(&mut self, ua: UnitAttention) {
        for e in self.nexuses.values_mut() {
            e.ua.push(ua);
        }
    }

    /// Establishes `ua` for every nexus with the identity `p`.
    pub fn ua_for(&mut self, p: &PortPair, ua: UnitAttention) {
        for e in self.nexuses.values_mut().filter(|e| e.ports == *p) {
            e.ua.push(ua);
        }
    }

    /// The initiator ports seen (for the next process, `crate::handover`).
    pub fn seen_ports(&self) -> impl Iterator<Item = &PortPair> {
        self.seen.iter()
    }

    /// `p` was seen (by the previous process).
    pub fn remember_port(&mut self, p: PortPair) {
        if self.seen.len() < MAX_SEEN {
            self.seen.insert(p);
        }
    }

    /// The nexus with identity `p` that the previous process served had `q` pending.
    pub fn carry(&mut self, p: PortPair, q: UaQueue) {
        self.carried.insert(p, q);
    }

    /// The state carried from the previous process is not what this one has (a tape drive
    /// that could not go on): each carried nexus learns so as a new one does.
    pub fn carried_power_on(&mut self) {
        for q in self.carried.values_mut() {
            q.push(UnitAttention::PowerOnReset);
        }
    }

    /// The ids of the nexuses with identity `p`.
    pub fn ids_of(&self, p: &PortPair) -> Vec<NexusId> {
        let mut ids: Vec<NexusId> = self
            .nexuses
            .iter()
            .filter(|(_, e)| e.ports == *p)
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        ids
    }
}

/// The shared state and the flags of the lock-free fast path.
#[derive(Debug, Default)]
pub(crate) struct SharedState {
    inner: Mutex<Shared>,
    /// Some nexus has a unit attention queued.
    ua_pending: AtomicBool,
    /// An SPC-2 reservation, a persistent reservation or a registration exists.
    guarded: AtomicBool,
}

/// Lock guard that refreshes the fast-path flags when dropped.
pub(crate) struct Guard<'a> {
    g: MutexGuard<'a, Shared>,
    st: &'a SharedState,
}

impl std::ops::Deref for Guard<'_> {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.g
    }
}

impl std::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Shared {
        &mut self.g
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let ua = self.g.nexuses.values().any(|e| !e.ua.is_empty());
        let guarded =
            self.g.pr.spc2.is_some() || self.g.pr.res.is_some() || !self.g.pr.regs.is_empty();
        self.st.ua_pending.store(ua, Ordering::Release);
        self.st.guarded.store(guarded, Ordering::Release);
    }
}

/// What the pre-command checks decided.
pub(crate) enum Gate {
    /// Run the command.
    Proceed,
    /// RESERVATION CONFLICT.
    Conflict,
    /// CHECK CONDITION reporting this unit attention (now cleared).
    Attention(UnitAttention),
}

impl SharedState {
    pub fn lock(&self) -> Guard<'_> {
        Guard {
            g: self.inner.lock().unwrap_or_else(|e| e.into_inner()),
            st: self,
        }
    }

    /// Server-reported new nexus: POWER ON, RESET, OR BUS DEVICE RESET OCCURRED, or I_T
    /// NEXUS LOSS OCCURRED for an initiator port seen before. Returns whether the nexus
    /// prevented medium removal in the previous process (live upgrade): it does again.
    pub fn nexus_added(&self, n: &Nexus) -> bool {
        let mut g = self.lock();
        let ports = n.key();
        if let Some(q) = g.carried.remove(&ports) {
            // a nexus the previous process served goes on (live upgrade)
            let preventing = g.carried_preventing.remove(&ports);
            g.nexuses.insert(n.id, NexusEntry { ports, ua: q });
            return preventing;
        }
        if g.seen.len() >= MAX_SEEN && !g.seen.contains(&ports) {
            g.seen.clear();
        }
        let ua = if g.seen.insert(ports.clone()) {
            UnitAttention::PowerOnReset
        } else {
            UnitAttention::NexusLoss
        };
        let mut q = UaQueue::default();
        q.push(ua);
        g.nexuses.insert(n.id, NexusEntry { ports, ua: q });
        false
    }

    /// I_T nexus loss: forgets the nexus and releases its SPC-2 reservation; persistent
    /// reservations are not affected (SPC-4 5.9.1). Whether it held the SPC-2 reservation.
    pub fn nexus_removed(&self, id: NexusId) -> bool {
        let mut g = self.lock();
        let Some(e) = g.nexuses.remove(&id) else {
            return false;
        };
        let held = g.pr.spc2.as_ref() == Some(&e.ports);
        if held {
            g.pr.spc2 = None;
        }
        held
    }

    /// Logical unit reset or hard reset: releases the SPC-2 reservation and establishes `ua`
    /// for every nexus.
    pub fn reset(&self, ua: UnitAttention) {
        let mut g = self.lock();
        g.pr.spc2 = None;
        g.ua_all(ua);
    }

    pub fn ua_all(&self, ua: UnitAttention) {
        self.lock().ua_all(ua);
    }

    /// Establishes `ua` for every nexus but `except`.
    pub fn ua_others(&self, except: NexusId, ua: UnitAttention) {
        let mut g = self.lock();
        for (_, e) in g.nexuses.iter_mut().filter(|(id, _)| **id != except) {
            e.ua.push(ua);
        }
    }

    /// Reports and clears the next unit attention of `n` (REQUEST SENSE).
    pub fn take_ua(&self, n: &Nexus) -> Option<UnitAttention> {
        if !self.ua_pending.load(Ordering::Acquire) {
            return None;
        }
        self.lock().nexuses.get_mut(&n.id)?.ua.pop()
    }

    /// Whether `cdb` from `n` would be RESERVATION CONFLICT (SPC-2 or persistent
    /// reservation), without touching unit attentions: the check the copy manager makes for
    /// the READs and WRITEs it performs on behalf of `n` (EXTENDED COPY).
    pub fn would_conflict(&self, n: &Nexus, cdb: &[u8]) -> bool {
        if !self.guarded.load(Ordering::Acquire) || cdb.is_empty() {
            return false;
        }
        conflicts(&self.lock(), n, cdb)
    }

    /// Reservation and unit attention checks before `cdb` from `n` runs.
    pub fn gate(&self, n: &Nexus, cdb: &[u8]) -> Gate {
        if !self.ua_pending.load(Ordering::Acquire) && !self.guarded.load(Ordering::Acquire) {
            return Gate::Proceed;
        }
        let Some(&op) = cdb.first() else {
            return Gate::Proceed;
        };
        let mut g = self.lock();
        if conflicts(&g, n, cdb) {
            return Gate::Conflict;
        }
        let e = g.entry(n);
        match op {
            opcode::INQUIRY | opcode::REQUEST_SENSE => Gate::Proceed,
            opcode::REPORT_LUNS => {
                e.ua.remove(UnitAttention::LunsChanged);
                Gate::Proceed
            }
            _ => e.ua.pop().map_or(Gate::Proceed, Gate::Attention),
        }
    }
}

/// Whether `cdb` from `n` conflicts with the SPC-2 or the persistent reservation.
fn conflicts(g: &Shared, n: &Nexus, cdb: &[u8]) -> bool {
    use crate::reserve_spc2;
    let op = cdb[0];
    let pr_cmd = op == opcode::PERSISTENT_RESERVE_IN || op == opcode::PERSISTENT_RESERVE_OUT;
    if let Some(holder) = &g.pr.spc2 {
        // SPC-4 5.9.3: with an SPC-2 reservation every PERSISTENT RESERVE IN / OUT
        // conflicts, whoever sends it
        if pr_cmd || (!n.is(holder) && !reserve_spc2::allowed(cdb)) {
            return true;
        }
    }
    if reserve_spc2::is_reserve_release(op) {
        // SPC-4 5.9.3: with any registration RESERVE and RELEASE conflict
        return !g.pr.regs.is_empty();
    }
    if g.pr.res.is_none() {
        return false;
    }
    !g.pr.allows(n, crate::pr::access_class(cdb))
}
