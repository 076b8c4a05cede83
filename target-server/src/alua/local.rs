//! This gateway's ALUA state for one LUN together with its caching mode, set in one place
//! ([`set_local_state`]) for every path: a LUN's first state, the administrator's move of a
//! file LUN, an RBD LUN's handover and takeover, a fenced gateway, and a LUN rebuilt by
//! tgtadm ([`carry_over`]). Only the owner (active/optimized) caches a LUN; elsewhere its
//! commands go straight to the backing store, so that no gateway serves a block another
//! gateway changed. Also the target port groups a LUN reports.

use cache::BlockCache;
use scsi::{AccessState, PortGroup};

use super::machine::LocalState;
use super::shared::Published;
use crate::registry::Lun;

/// The groups of a target whose LUN is owned by `owner`: the owner active/optimized, every
/// other group in the configured non-owner state (`arbitrated`: an RBD LUN, moved through
/// its lock).
pub fn port_groups(alua: &config::AluaConfig, owner: u16, arbitrated: bool) -> Vec<PortGroup> {
    let non_owner = match alua.non_owner_for(arbitrated) {
        config::NonOwnerState::ActiveNonOptimized => AccessState::ActiveNonOptimized,
        config::NonOwnerState::Standby => AccessState::Standby,
    };
    alua.groups()
        .iter()
        .map(|g| PortGroup {
            id: g.group,
            state: if g.group == owner {
                AccessState::ActiveOptimized
            } else {
                non_owner
            },
            rel_ports: vec![g.relative_port],
            preferred: false,
        })
        .collect()
}

/// `groups` with this gateway's group (`me`) in `state`.
fn with_mine(mut groups: Vec<PortGroup>, me: u16, state: AccessState) -> Vec<PortGroup> {
    for g in &mut groups {
        if g.id == me {
            g.state = state;
        }
    }
    groups
}

/// Whether this gateway may cache `lun` while it owns it: when its cache is configured and
/// no other gateway can write the LUN behind its back. Other gateways can while they are
/// active/non-optimized, and a file or block device has nothing that makes them ask the
/// owner first, so such a LUN is cached nowhere; an RBD LUN's other gateways take it over
/// (the owner writes back first) before they serve it.
pub fn may_cache(lun: &Lun, alua: &config::AluaConfig) -> bool {
    let others_write = !alua.peers.is_empty()
        && alua.non_owner_for(false) == config::NonOwnerState::ActiveNonOptimized
        && lun.rbd_ownership.is_none();
    lun.cache_configured() && !others_write
}

/// Why a LUN's ALUA state was not set.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// Leaving active/optimized, the dirty blocks could not be written back: the LUN keeps
    /// caching (and reports transitioning until its owner state is set again).
    #[error("writing the LUN's dirty cache blocks back failed: {0}")]
    WriteBack(std::io::Error),
    #[error("{0}")]
    Groups(#[from] scsi::PortGroupError),
}

/// Sets this gateway's ALUA state for `lun` (its target's `alua` settings; the daemon's
/// block `cache`, if it has one yet) together with the caching mode that goes with it, and
/// for an RBD LUN publishes it to the event threads; returns whether the reported groups
/// changed. The only place that changes [`Lun::cache_in_use`]:
///
/// - [`LocalState::Owner`]: drops what the cache held of the LUN if it was not caching
///   (nothing of it should be cached here), caches it if it may, then reports
///   active/optimized;
/// - [`LocalState::Transitioning`]: reports transitioning; leaving active/optimized with
///   the cache configured, writes the dirty blocks back, stops caching, writes back what
///   in-flight commands left and drops the LUN's blocks (a failed write-back keeps it
///   caching and is returned);
/// - [`LocalState::NonOwner`]: stops caching (writing back first if it still did) and
///   reports the non-owner state;
/// - [`LocalState::Unavailable`]: stops caching and drops the LUN's blocks unwritten (a
///   fenced gateway's writes cannot land any more).
///
/// Restricting facts are published before the cache and groups change, permitting ones
/// after.
pub(crate) fn set_local_state(
    lun: &Lun,
    alua: &config::AluaConfig,
    cache: Option<&BlockCache>,
    state: LocalState,
) -> Result<bool, LocalError> {
    let me = alua.group;
    let arbitrated = lun.rbd_ownership.is_some();
    let publish = |p| {
        if let Some(o) = &lun.rbd_ownership {
            o.publish(p);
        }
    };
    let configured = cache.filter(|_| lun.cache_configured());
    let groups = match state {
        LocalState::Owner => {
            if !lun.cache_in_use.get()
                && let Some(c) = cache
            {
                c.invalidate_lun(lun.cache_id);
            }
            lun.cache_in_use.set(may_cache(lun, alua));
            publish(Published::Owner(me));
            port_groups(alua, me, arbitrated)
        }
        LocalState::Transitioning => {
            let was_owner = lun.scsi.access_state() == AccessState::ActiveOptimized;
            let changed = lun.scsi.set_port_groups(with_mine(
                lun.scsi.port_groups(),
                me,
                AccessState::Transitioning,
            ))?;
            if was_owner && let Some(c) = configured {
                stop_caching(c, lun).map_err(LocalError::WriteBack)?;
            }
            return Ok(changed);
        }
        LocalState::NonOwner { owner } => {
            if lun.cache_in_use.get()
                && let Some(c) = configured
            {
                stop_caching(c, lun).map_err(LocalError::WriteBack)?;
            }
            publish(Published::NonOwner(owner));
            lun.cache_in_use.set(false);
            port_groups(alua, owner, arbitrated)
        }
        LocalState::Unavailable { owner } => {
            publish(Published::Fenced(owner));
            lun.cache_in_use.set(false);
            if let Some(c) = cache {
                c.invalidate_lun(lun.cache_id);
            }
            with_mine(
                port_groups(alua, owner, arbitrated),
                me,
                AccessState::Unavailable,
            )
        }
    };
    Ok(lun.scsi.set_port_groups(groups)?)
}

/// A LUN rebuilt by tgtadm (`next`, on the same store) starts in the ALUA state and caching
/// mode of the one it replaces.
pub(crate) fn carry_over(old: &Lun, next: &Lun) -> Result<(), scsi::PortGroupError> {
    if let Some(o) = &next.rbd_ownership {
        next.scsi.set_explicit_alua(o.explicit());
    }
    next.cache_in_use.set(old.cache_in_use.get());
    next.scsi.set_port_groups(old.scsi.port_groups())?;
    Ok(())
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
fn stop_caching(c: &BlockCache, lun: &Lun) -> std::io::Result<()> {
    let flushed = write_back(c, lun).and_then(|()| {
        lun.cache_in_use.set(false);
        write_back(c, lun)
    });
    if let Err(e) = flushed {
        lun.cache_in_use.set(true);
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
        let fenced = with_mine(port_groups(&a, 1, true), 2, AccessState::Unavailable);
        assert_eq!(fenced[0].state, AccessState::Unavailable);
        assert_eq!(fenced[1].state, AccessState::ActiveOptimized);
    }
}
