//! ALUA on the server side: the target port groups a LUN reports (from its target's `alua`
//! settings and the LUN's owner group) and the ownership transitions of a LUN between
//! gateways. Only the owner (active/optimized) keeps a write-back NUMA cache for the LUN;
//! elsewhere its commands go straight to the backing store, so that no gateway serves a
//! block another gateway changed. A gateway giving a LUN up reports transitioning, writes
//! its dirty blocks back and drops the LUN's cached blocks before it reports the new
//! state; one taking a LUN over drops whatever it cached before, then caches again.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cache::BlockCache;
use scsi::{AccessState, PortGroup};

use crate::registry::Lun;

/// The groups of a target whose LUN is owned by `owner`: the owner active/optimized, every
/// other group in the configured non-owner state.
pub fn port_groups(alua: &config::AluaConfig, owner: u16, arbitrated: bool) -> Vec<PortGroup> {
    alua.groups()
        .iter()
        .map(|g| PortGroup {
            id: g.group,
            state: if g.group == owner {
                AccessState::ActiveOptimized
            } else {
                non_owner(alua, arbitrated)
            },
            rel_ports: vec![g.relative_port],
            preferred: false,
        })
        .collect()
}

fn non_owner(alua: &config::AluaConfig, arbitrated: bool) -> AccessState {
    match alua.non_owner_for(arbitrated) {
        config::NonOwnerState::ActiveNonOptimized => AccessState::ActiveNonOptimized,
        config::NonOwnerState::Standby => AccessState::Standby,
    }
}

/// Whether this gateway may cache `lun` when `owner` owns it: only the owner, and only when
/// no other gateway can write the LUN behind its back. Other gateways can while they are
/// active/non-optimized, and a file or block device has nothing that makes them ask the
/// owner first, so such a LUN is not cached anywhere; with non-owners in standby, the
/// owner caches.
pub fn may_cache(lun: &Lun, alua: &config::AluaConfig, owner: u16) -> bool {
    // an RBD LUN's other gateways take it over (the owner writes back first) before they
    // serve it
    let others_write = !alua.peers.is_empty()
        && alua.non_owner_for(false) == config::NonOwnerState::ActiveNonOptimized
        && lun.rbd_ownership.is_none();
    lun.cache_configured && owner == alua.group && !others_write
}

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

/// Sets the initial groups of a new LUN owned by `owner` (no transition, no unit attention
/// beyond the power-on one its nexuses get anyway) and whether it may use the cache.
pub fn init(lun: &Lun, alua: &config::AluaConfig, owner: u16) -> Result<(), OwnerError> {
    if !alua.has_group(owner) {
        return Err(OwnerError::UnknownGroup(owner));
    }
    if let Some(a) = &lun.rbd_ownership {
        // an RBD LUN: the image's lock decides
        a.init(lun, owner);
        return Ok(());
    }
    lun.scsi.set_port_groups(port_groups(alua, owner, false))?;
    // the state change above raised ASYMMETRIC ACCESS STATE CHANGED for no nexus: a new
    // LU has none yet
    let on = may_cache(lun, alua, owner);
    if lun.cache_configured && !on && owner == alua.group {
        tracing::warn!(
            lun = lun.number,
            "the NUMA cache is off for this LUN: other gateways (alua.peers) can write it while \
             active/non-optimized, and nothing makes them ask this one first; set \
             alua.non_owner_state: standby to cache on the owner"
        );
    }
    lun.cache_in_use.store(on, Ordering::Release);
    Ok(())
}

/// Moves the ownership of `lun` to group `owner`; returns whether any state changed. When
/// this gateway gives the LUN up, its cache is written back and dropped first (while the
/// LUN reports transitioning, so new commands are retried by the initiator); a failed
/// write-back keeps the LUN here and says so.
pub fn set_owner(
    lun: &Lun,
    alua: &config::AluaConfig,
    owner: u16,
    cache: Option<&Arc<BlockCache>>,
) -> Result<bool, OwnerError> {
    if !alua.has_group(owner) {
        return Err(OwnerError::UnknownGroup(owner));
    }
    let me = alua.group;
    if let Some(a) = &lun.rbd_ownership {
        if owner != me {
            return Err(OwnerError::TakenNotGiven(owner));
        }
        a.want_ownership();
        return Ok(!a.owns());
    }
    let was_owner = lun.scsi.access_state() == AccessState::ActiveOptimized;
    let cache = cache.filter(|_| lun.cache_configured);
    if was_owner && owner != me {
        let mut transitioning = lun.scsi.port_groups();
        for g in &mut transitioning {
            if g.id == me {
                g.state = AccessState::Transitioning;
            }
        }
        lun.scsi.set_port_groups(transitioning)?;
        if let Some(c) = cache
            && let Err(e) = stop_caching(c, lun)
        {
            lun.scsi.set_port_groups(port_groups(alua, me, false))?;
            return Err(OwnerError::Flush(e));
        }
        lun.cache_in_use.store(false, Ordering::Release);
    } else if !was_owner && owner == me {
        if let Some(c) = cache {
            // nothing of this LUN should be cached here; drop anything stale
            c.invalidate_lun(lun.cache_id);
        }
        lun.cache_in_use
            .store(may_cache(lun, alua, owner), Ordering::Release);
    }
    let changed = lun.scsi.set_port_groups(port_groups(alua, owner, false))?;
    if changed {
        tracing::info!(
            lun = lun.number,
            owner,
            here = me,
            state = lun.scsi.access_state().name(),
            "ALUA owner changed"
        );
    }
    Ok(changed)
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
    let me = target.alua.group;
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
        Some(a) if take && !a.owns() => {
            if a.is_fenced() {
                return failed();
            }
            let (replier, deferred) = reply.defer();
            a.take_over_for(replier);
            Answer::Later(deferred)
        }
        _ => Answer::Now(completed(scsi::Completion::good())),
    }
}

/// Writes the LUN's dirty blocks back and makes them durable, whether or not the LUN uses
/// the cache now.
fn write_back(c: &BlockCache, lun: &Lun) -> std::io::Result<()> {
    cache::coherence::flush_and_sync(
        c,
        lun.cache_id,
        &*lun.store,
        &mut cache::coherence::Backoff::flush_range(),
    )
}

/// A gateway giving `lun` up (its port already reports transitioning): commands that
/// passed the state check before still use the cache, so write back, stop caching, write
/// back what they left, then drop the LUN's blocks. On a failed write-back the LUN keeps
/// caching (it stays owned here) and the error is returned.
pub(crate) fn stop_caching(c: &BlockCache, lun: &Lun) -> std::io::Result<()> {
    let flushed = write_back(c, lun).and_then(|()| {
        lun.cache_in_use.store(false, Ordering::Release);
        write_back(c, lun)
    });
    if let Err(e) = flushed {
        lun.cache_in_use.store(true, Ordering::Release);
        return Err(e);
    }
    c.invalidate_lun(lun.cache_id);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_follow_the_owner() {
        let a = config::AluaConfig {
            group: 2,
            relative_port: 20,
            peers: vec![config::AluaPeer {
                group: 1,
                relative_port: 10,
            }],
            non_owner_state: Some(config::NonOwnerState::Standby),
        };
        let g = port_groups(&a, 1, false);
        assert_eq!(g.len(), 2);
        assert_eq!(
            (g[0].id, g[0].state, g[0].rel_ports[0]),
            (2, AccessState::Standby, 20)
        );
        assert_eq!(
            (g[1].id, g[1].state, g[1].rel_ports[0]),
            (1, AccessState::ActiveOptimized, 10)
        );
    }
}
