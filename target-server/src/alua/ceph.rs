//! The Ceph driver of the ownership machine, for RBD LUNs exported by several gateways: it
//! runs a LUN's [`Machine`] — first on the thread that opens the LUN (its first state), then
//! on the LUN's own thread (`alua-<lun>`), which sleeps until the machine's next timer or an
//! input — and carries the machine's actions out with librbd (the record object, the
//! image's exclusive lock: owner check, owners, acquire, break, release) and
//! [`set_local_state`]. Decisions are the machine's; here are only the calls and their logs.

use std::sync::{Arc, Weak};
use std::time::Instant;

use cache::BlockCache;

use super::local::set_local_state;
use super::machine::{Action, Event, Holder, LocalState, LockOwners, Machine, POLL};
use super::record::{self, Record};
use super::shared::RbdOwnership;
use crate::registry::{Lun, Target};

/// The ownership of an RBD LUN whose target has `alua` peers; `None` for other LUNs
/// (files, read-only snapshots, single gateways), which need none.
pub(crate) fn for_lun(
    alua: &config::AluaConfig,
    store: &cache::BackingStore,
) -> Option<Arc<RbdOwnership>> {
    let image = store.rbd_image()?;
    if alua.peers.is_empty() || image.is_read_only() {
        return None;
    }
    let name = record::object_name(&image.spec().image);
    Some(Arc::new(RbdOwnership::new(alua.clone(), name)))
}

/// The first state of a new LUN (before it serves): the configured owner takes the lock
/// when nobody holds it; everybody else follows the record. The machine waits for
/// [`start`].
pub(super) fn init(lun: &Lun, o: &RbdOwnership, configured: u16) {
    lun.scsi.set_explicit_alua(o.explicit());
    let Some(image) = lun.store.rbd_image() else {
        return;
    };
    let peers: Vec<u16> = o.alua.peers.iter().map(|p| p.group).collect();
    let mut m = Machine::arbitrated(o.alua.group, &peers, configured);
    if super::take_owned_before(&o.record) {
        tracing::info!(
            lun = lun.number,
            record = %o.record,
            "owned by this gateway before the upgrade: taking the image's lock back"
        );
        m = m.owned_before_upgrade();
    }
    Driver::new(o, None).run(lun, image, &mut m);
    o.park(m);
}

/// Starts the ownership threads of `targets`' RBD LUNs (once the block cache exists).
pub(crate) fn start_all(targets: &[Arc<Target>], cache: Option<&Arc<BlockCache>>) {
    for t in targets {
        for lun in t.lun_set().map.values() {
            start(t, lun, cache);
        }
    }
}

/// Starts the thread that follows and moves the ownership of `lun` of `target` (an RBD
/// LUN of several gateways; nothing for others). The thread serves whichever LUN of that
/// number holds the same ownership (a LUN rebuilt by tgtadm keeps it) and ends when there
/// is none, or on [`RbdOwnership::stop`].
pub(crate) fn start(target: &Arc<Target>, lun: &Lun, cache: Option<&Arc<BlockCache>>) {
    let Some(o) = &lun.rbd_ownership else {
        return;
    };
    let Some(m) = o.unpark() else {
        return; // started already
    };
    let (o, target, number) = (Arc::clone(o), Arc::downgrade(target), lun.number);
    let cache = cache.cloned();
    let spawned = std::thread::Builder::new()
        .name(format!("alua-{number}"))
        .spawn(move || {
            follow(&o, m, &target, number, cache.as_deref());
            crate::ship::route::forget(o.record());
        });
    if let Err(e) = spawned {
        tracing::error!(lun = number, "cannot start the ownership thread: {e}");
    }
}

/// The ownership thread: inputs to the machine, its actions carried out, then sleep until
/// its next timer or input.
fn follow(
    o: &Arc<RbdOwnership>,
    mut m: Machine,
    target: &Weak<Target>,
    number: u64,
    cache: Option<&BlockCache>,
) {
    let mut driver = Driver::new(o, cache);
    let mut link = LinkUpkeep::default();
    loop {
        let inbox = o.take_inbox();
        if inbox.stop {
            return;
        }
        let now = Instant::now();
        if let Some(cause) = inbox.want {
            m.handle_want(now, cause);
        }
        if o.has_waiting() {
            m.handle_stpg(now);
        }
        let Some(lun) = current(target, number, o) else {
            return;
        };
        let Some(image) = lun.store.rbd_image() else {
            return;
        };
        driver.run(&lun, image, &mut m);
        if let Some(from) = driver.fenced_group.take() {
            release_fenced_ports(&lun, from);
        }
        link.keep(image, o);
        drop(lun);
        o.wait(m.poll_timeout().unwrap_or_else(|| Instant::now() + POLL));
    }
}

/// The gateway link of one LUN (`crate::ship`): this gateway's link server published
/// beside the ownership record (retried every 10 s until it is), and while another gateway
/// owns the LUN and this one's paths are active/non-optimized, the route to the owner.
#[derive(Default)]
struct LinkUpkeep {
    published: bool,
    tried: Option<Instant>,
}

impl LinkUpkeep {
    fn keep(&mut self, image: &rbd::Image, o: &RbdOwnership) {
        use crate::ship::route;
        if !self.published
            && route::can_publish()
            && self
                .tried
                .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(10))
        {
            self.tried = Some(Instant::now());
            self.published = route::publish(image, o.record(), o.alua.group);
        }
        let ships = o.alua.non_owner_for(true) == config::NonOwnerState::ActiveNonOptimized;
        if ships && !o.owns() && !o.is_fenced() {
            route::refresh(image, o.record(), o.owner_group());
        }
    }
}

/// The owner group `from` was fenced to take `lun` over: its gateway is cut off from the
/// cluster until it restarts, so the I_T nexuses through its ports are gone, and the SPC-2
/// reservation one of them held ends (SPC-2: the holder's nexus loss). Released in the
/// cluster on a thread of its own (it waits for the other gateways' answers).
fn release_fenced_ports(lun: &Arc<Lun>, from: u16) {
    if lun.shared_pr.is_none() {
        return;
    }
    let ports: Vec<u16> = lun
        .scsi
        .port_groups()
        .iter()
        .filter(|g| g.id == from)
        .flat_map(|g| g.rel_ports.iter().copied())
        .filter(|&p| p != 0)
        .collect();
    if ports.is_empty() {
        return;
    }
    let (lun, number) = (Arc::clone(lun), lun.number);
    let spawned = std::thread::Builder::new()
        .name(format!("spc2-{number}"))
        .spawn(move || {
            for p in ports {
                crate::backend::pr_cluster::release_spc2(
                    &lun,
                    scsi::Spc2Holder::ThroughPort(p),
                    &[],
                );
            }
        });
    if let Err(e) = spawned {
        tracing::error!(
            lun = number,
            "cannot release the fenced gateway's SPC-2 reservation: {e}"
        );
    }
}

/// The LUN `number` of `target` that `o` is the ownership of.
fn current(target: &Weak<Target>, number: u64, o: &Arc<RbdOwnership>) -> Option<Arc<Lun>> {
    let lun = target.upgrade()?.lun_set().map.get(&number).cloned()?;
    let same = lun
        .rbd_ownership
        .as_ref()
        .is_some_and(|x| Arc::ptr_eq(x, o));
    same.then_some(lun)
}

/// Carries a machine's actions out for one LUN.
struct Driver<'a> {
    o: &'a RbdOwnership,
    cache: Option<&'a BlockCache>,
    /// The lock owners the last look found (broken on [`Action::BreakLocks`]).
    owners: Vec<String>,
    /// Why the lock was lost or could not be taken (for the logs).
    trouble: String,
    /// The group whose gateway a takeover just fenced (its SPC-2 reservation is
    /// released once this turn is done).
    fenced_group: Option<u16>,
}

impl<'a> Driver<'a> {
    fn new(o: &'a RbdOwnership, cache: Option<&'a BlockCache>) -> Self {
        Driver {
            o,
            cache,
            owners: Vec::new(),
            trouble: String::new(),
            fenced_group: None,
        }
    }

    /// Everything the machine has to do now.
    fn run(&mut self, lun: &Lun, image: &rbd::Image, m: &mut Machine) {
        while let Some(a) = m.poll_action(Instant::now()) {
            self.execute(lun, image, m, a);
        }
    }

    fn execute(&mut self, lun: &Lun, image: &rbd::Image, m: &mut Machine, action: Action) {
        match action {
            Action::ReadRecord => {
                let rec = self.read_record(image);
                m.handle_record(Instant::now(), rec);
            }
            Action::WriteRecord(r) => {
                if let Err(e) = image.object_write(&self.o.record, &r.encode()) {
                    tracing::warn!(record = %self.o.record, "writing the ownership record: {e}");
                }
            }
            Action::CheckLock => {
                let held = match image.is_lock_owner() {
                    Ok(held) => {
                        if !held {
                            "the image's exclusive lock was broken".clone_into(&mut self.trouble);
                        }
                        held
                    }
                    Err(e) => {
                        self.trouble = format!("lock state unknown: {e}");
                        false
                    }
                };
                m.handle_lock_check(Instant::now(), held);
            }
            Action::ReadLockOwners => {
                let owners = match image.lock_owners() {
                    Ok(o) if o.is_empty() => LockOwners::Free,
                    Ok(o) => {
                        let mut h = std::hash::DefaultHasher::new();
                        std::hash::Hash::hash(&o, &mut h);
                        self.owners = o;
                        LockOwners::Held(Holder(std::hash::Hasher::finish(&h)))
                    }
                    Err(e) => {
                        tracing::warn!(lun = lun.number, "cannot read the lock owners: {e}");
                        LockOwners::Unknown
                    }
                };
                m.handle_lock_owners(Instant::now(), owners);
            }
            Action::BreakLocks { acked, waited } => {
                for owner in std::mem::take(&mut self.owners) {
                    tracing::warn!(lun = lun.number, %owner, acked,
                        waited_ms = waited.as_millis() as u64,
                        "the owner did not hand the LUN over: breaking its lock (fencing it)");
                    if let Err(e) = image.lock_break(&owner) {
                        tracing::warn!(lun = lun.number, "breaking the lock: {e}");
                    }
                }
            }
            Action::AcquireLock => {
                let ok = match image.lock_acquire() {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(lun = lun.number, record = %self.o.record,
                            "cannot take the image's exclusive lock: {e}");
                        self.trouble = format!("cannot take the lock: {e}");
                        false
                    }
                };
                m.handle_lock_acquired(Instant::now(), ok);
            }
            Action::ReleaseLock => {
                if let Err(e) = image.flush().and_then(|()| image.lock_release()) {
                    tracing::warn!(lun = lun.number, "releasing the exclusive lock: {e}");
                }
            }
            Action::SetLocal(state) => {
                let set = set_local_state(lun, &self.o.alua, self.cache, state);
                if let Err(e) = &set {
                    tracing::error!(lun = lun.number, state = ?state, "ALUA state: {e}");
                }
                if state == LocalState::Transitioning {
                    m.handle_write_back(Instant::now(), set.is_ok());
                }
            }
            Action::AnswerStpg { ok } => {
                for r in self.o.take_waiting() {
                    let c = if ok {
                        scsi::Completion::good()
                    } else {
                        lun.scsi.check_condition(&scsi::alua::STPG_FAILED)
                    };
                    r.send(crate::backend::reply::completed(c));
                }
            }
            Action::Report(e) => self.report(lun, e),
        }
    }

    fn report(&mut self, lun: &Lun, e: Event) {
        use std::sync::atomic::Ordering::Relaxed;
        let t = &self.o.transitions;
        let here = self.o.alua.group;
        match e {
            Event::Started { owner, owns } => {
                tracing::info!(lun = lun.number, owner, here, owns, "RBD LUN ownership");
            }
            Event::TookOver {
                cause,
                from,
                fenced_other,
                took,
            } => {
                t.takeovers.fetch_add(1, Relaxed);
                t.causes[cause.index()].fetch_add(1, Relaxed);
                if fenced_other {
                    t.fenced_others.fetch_add(1, Relaxed);
                    self.fenced_group = Some(from);
                }
                tracing::info!(
                    lun = lun.number,
                    here,
                    from,
                    cause = cause.label(),
                    fenced_other,
                    ms = took.as_millis() as u64,
                    "RBD LUN taken over"
                );
            }
            Event::TakeoverFailed => {
                tracing::warn!(lun = lun.number, "takeover failed: {}", self.trouble);
            }
            Event::Released { to } => {
                t.releases.fetch_add(1, Relaxed);
                tracing::info!(lun = lun.number, to, here, "RBD LUN handed over");
            }
            Event::Fenced => {
                t.fenced.fetch_add(1, Relaxed);
                tracing::error!(
                    lun = lun.number,
                    here,
                    "fenced: {}; another gateway took the LUN over and this gateway's Ceph \
                     client is blocklisted. Its port is unavailable for the LUN until numatgtd \
                     restarts",
                    self.trouble
                );
            }
        }
    }

    fn read_record(&self, image: &rbd::Image) -> Record {
        match image.object_read(&self.o.record, record::MAX_LEN) {
            Ok(Some(b)) => Record::parse(&b),
            Ok(None) => Record::default(),
            Err(e) => {
                tracing::debug!(record = %self.o.record, "reading the ownership record: {e}");
                Record::default()
            }
        }
    }
}
