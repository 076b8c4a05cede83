//! ALUA across gateways: the target port groups a LUN reports (from its target's `alua`
//! settings and the LUN's owner group), and how the ownership of a LUN moves between
//! gateways safely for the NUMA write-back cache. Only the owner (active/optimized) caches a
//! LUN. The entry points the rest of the daemon calls are here; the parts:
//!
//! - `machine.rs`: the ownership of one LUN as a sans-I/O state machine (`Starting`,
//!   `Following`, `Requesting`, `Acquiring`, `Owning`, `Releasing`, `Fenced`), time passed
//!   in, actions out; the handover protocol is described there;
//! - `record.rs`: the ownership record beside an RBD image, its text form;
//! - `local.rs`: the one function that sets this gateway's ALUA state for a LUN together
//!   with its caching mode, and the port groups;
//! - `ceph.rs`: the Ceph driver (an RBD LUN of several gateways: its thread, librbd's lock
//!   calls, the record object);
//! - `file.rs`: the file driver (the administrator moves the LUN: no lock, no thread);
//! - `shared.rs`: what a `Lun` holds (cache in use now, the published ownership of an RBD
//!   LUN), read by the event threads;
//! - `tests.rs`: the machines of two or three gateways against a simulated cluster (lock,
//!   record, blocklist) on simulated time.

mod ceph;
mod file;
mod local;
mod machine;
mod record;
pub(crate) mod shared;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use cache::BlockCache;
use scsi::AccessState;

pub(crate) use ceph::for_lun as rbd_ownership_for;
pub use machine::MoveCause;

/// The ownership records (one per RBD image, `record.rs`) of the LUNs this gateway owns
/// now: a live upgrade passes them on, so that the new executable takes those images' locks
/// back at start ([`owned_before_upgrade`]) rather than follow the configured owner.
pub(crate) fn owned_records(registry: &crate::registry::Registry) -> Vec<String> {
    let mut out = Vec::new();
    for t in registry.targets() {
        for l in t.lun_set().map.values() {
            if let Some(o) = l.rbd_ownership.as_ref().filter(|o| o.owns())
                && !out.contains(&o.record)
            {
                out.push(o.record.clone());
            }
        }
    }
    out
}

/// The previous executable (a live upgrade) owned the images of these ownership records:
/// the LUNs opened next take their locks back when they are free (each record once).
pub(crate) fn owned_before_upgrade(records: Vec<String>) {
    *OWNED_BEFORE.lock().unwrap_or_else(|p| p.into_inner()) = records;
}

static OWNED_BEFORE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Whether the previous executable owned the image of `record` (asked once: taken).
fn take_owned_before(record: &str) -> bool {
    let mut v = OWNED_BEFORE.lock().unwrap_or_else(|p| p.into_inner());
    match v.iter().position(|r| r == record) {
        Some(i) => {
            v.swap_remove(i);
            true
        }
        None => false,
    }
}

/// Starts what follows the other gateways for `targets`' RBD LUNs exported by several: the
/// ownership threads (once the block cache exists) and the shared reservations' watches.
pub(crate) fn start_all(targets: &[Arc<crate::registry::Target>], cache: Option<&Arc<BlockCache>>) {
    ceph::start_all(targets, cache);
    for t in targets {
        for lun in t.lun_set().map.values() {
            crate::backend::pr_cluster::start(t, lun);
        }
    }
}

/// [`start_all`] for one new LUN of `target`.
pub(crate) fn start(
    target: &Arc<crate::registry::Target>,
    lun: &Lun,
    cache: Option<&Arc<BlockCache>>,
) {
    ceph::start(target, lun, cache);
    crate::backend::pr_cluster::start(target, lun);
}
use local::LocalError;
pub(crate) use local::carry_over;

use crate::registry::Lun;

/// Why an ownership change did not happen.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    #[error("target port group {0} is not one of the target's groups")]
    UnknownGroup(u16),
    #[error("writing the LUN's dirty cache blocks back failed: {0}; the LUN stays owned here")]
    Flush(std::io::Error),
    #[error("{0}")]
    Groups(#[from] scsi::PortGroupError),
    #[error(
        "an RBD LUN moves when the new owner takes it over: run this on the gateway of group \
         {0} (alua_owner={0} there)"
    )]
    TakenNotGiven(u16),
}

impl From<LocalError> for OwnerError {
    fn from(e: LocalError) -> Self {
        match e {
            LocalError::WriteBack(e) => OwnerError::Flush(e),
            LocalError::Groups(e) => OwnerError::Groups(e),
        }
    }
}

/// Sets the first state of a new LUN owned by `owner` and whether it uses the cache: an
/// RBD LUN of several gateways asks the image's lock (the configured owner takes it when
/// free) and the record; any other LUN is owned as configured.
pub fn init(lun: &Lun, alua: &config::AluaConfig, owner: u16) -> Result<(), OwnerError> {
    if !alua.has_group(owner) {
        return Err(OwnerError::UnknownGroup(owner));
    }
    match &lun.rbd_ownership {
        Some(o) => ceph::init(lun, o, owner),
        None => file::init(lun, alua, owner)?,
    }
    Ok(())
}

/// The administrator made group `owner` the owner of `lun` (tgtadm `alua_owner=N`);
/// returns whether any state changed. A file LUN moves here and now (see `file.rs`); an
/// RBD LUN is taken over by the new owner: asked on its gateway, this one starts a
/// takeover, asked elsewhere it refuses.
pub fn set_owner(
    lun: &Lun,
    alua: &config::AluaConfig,
    owner: u16,
    cache: Option<&Arc<BlockCache>>,
) -> Result<bool, OwnerError> {
    if !alua.has_group(owner) {
        return Err(OwnerError::UnknownGroup(owner));
    }
    match &lun.rbd_ownership {
        Some(_) if owner != alua.group => Err(OwnerError::TakenNotGiven(owner)),
        Some(o) => {
            o.want_ownership(MoveCause::Admin);
            Ok(!o.owns())
        }
        None => Ok(file::set_owner(lun, alua, owner, cache.map(|c| &**c))?),
    }
}

/// SET TARGET PORT GROUPS (explicit ALUA, RBD LUNs): asking for this gateway's group to
/// be active/optimized takes the LUN over (answered when the takeover ends: GOOD, or
/// SET TARGET PORT GROUPS COMMAND FAILED); asking for the states as they are, or for other
/// groups to leave active/optimized (they do when this one takes over), is GOOD; anything
/// else fails.
pub(crate) fn set_target_port_groups(
    lun: &Arc<Lun>,
    target: &crate::registry::Target,
    asks: &[(u16, AccessState)],
    reply: crate::backend::reply::ReplyTo,
) -> crate::backend::reply::Answer {
    use crate::backend::reply::{Answer, completed};
    let me = target.portal_group_tag();
    let take = asks
        .iter()
        .any(|&(g, s)| g == me && s == AccessState::ActiveOptimized);
    let now = lun.scsi.port_groups();
    let fine = asks.iter().all(|&(g, s)| {
        (g == me && s == AccessState::ActiveOptimized)
            || (take && g != me && s != AccessState::ActiveOptimized)
            || now.iter().any(|x| x.id == g && x.state == s)
    });
    let failed = || {
        Answer::Now(completed(
            lun.scsi.check_condition(&scsi::alua::STPG_FAILED),
        ))
    };
    match &lun.rbd_ownership {
        _ if !fine => failed(),
        Some(o) if take && !o.owns() => {
            if o.is_fenced() {
                return failed();
            }
            let (replier, deferred) = reply.defer();
            o.take_over_for(replier);
            Answer::Later(deferred)
        }
        _ => Answer::Now(completed(scsi::Completion::good())),
    }
}
