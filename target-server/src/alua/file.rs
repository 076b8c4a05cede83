//! The file driver of the ownership machine: a LUN whose owner the administrator sets (a
//! file or block device, or an RBD LUN of a single gateway: YAML `alua_owner`, tgtadm
//! `--params alua_owner=N` on every gateway, the old owner first). No lock, no record, no
//! thread: each move runs a machine made from the LUN's state as it is and carries its
//! actions out with [`set_local_state`] before it returns.

use std::time::Instant;

use cache::BlockCache;
use scsi::AccessState;

use super::local::{LocalError, set_local_state};
use super::machine::{Action, LocalState, Machine};
use crate::registry::Lun;

/// The first state of a new LUN owned by `owner` (no transition, no unit attention beyond
/// the power-on one its nexuses get anyway) and whether it uses the cache.
pub(super) fn init(lun: &Lun, alua: &config::AluaConfig, owner: u16) -> Result<(), LocalError> {
    let now = Instant::now();
    let mut m = Machine::administered(alua.group, &peers(alua), false, 0, now);
    m.handle_admin_move(now, owner);
    run(lun, alua, None, &mut m)?;
    // the state change above raised ASYMMETRIC ACCESS STATE CHANGED for no nexus: a new
    // LU has none yet
    if lun.cache_configured() && !lun.cache_in_use.get() && owner == alua.group {
        tracing::warn!(
            lun = lun.number,
            "the NUMA cache is off for this LUN: other gateways (alua.peers) can write it while \
             active/non-optimized, and nothing makes them ask this one first; set \
             alua.non_owner_state: standby to cache on the owner"
        );
    }
    Ok(())
}

/// Moves the ownership of `lun` to group `owner`; returns whether any state changed. When
/// this gateway gives the LUN up, its cache is written back and dropped first (while the
/// LUN reports transitioning, so new commands are retried by the initiator); a failed
/// write-back keeps the LUN here and says so.
pub(super) fn set_owner(
    lun: &Lun,
    alua: &config::AluaConfig,
    owner: u16,
    cache: Option<&BlockCache>,
) -> Result<bool, LocalError> {
    let now = Instant::now();
    let groups = lun.scsi.port_groups();
    let owns = lun.scsi.access_state() == AccessState::ActiveOptimized;
    let before = groups
        .iter()
        .find(|g| g.state == AccessState::ActiveOptimized)
        .map_or(0, |g| g.id);
    let mut m = Machine::administered(alua.group, &peers(alua), owns, before, now);
    m.handle_admin_move(now, owner);
    let changed = run(lun, alua, cache, &mut m)?;
    if changed {
        tracing::info!(
            lun = lun.number,
            owner,
            here = alua.group,
            state = lun.scsi.access_state().name(),
            "ALUA owner changed"
        );
    }
    Ok(changed)
}

fn peers(alua: &config::AluaConfig) -> Vec<u16> {
    alua.peers.iter().map(|p| p.group).collect()
}

/// Carries the machine's actions out (an administered machine asks only for ALUA states);
/// returns whether the reported groups changed, or the first failure.
fn run(
    lun: &Lun,
    alua: &config::AluaConfig,
    cache: Option<&BlockCache>,
    m: &mut Machine,
) -> Result<bool, LocalError> {
    let mut changed = false;
    let mut failed = None;
    while let Some(action) = m.poll_action(Instant::now()) {
        let Action::SetLocal(state) = action else {
            continue;
        };
        let set = set_local_state(lun, alua, cache, state);
        if state == LocalState::Transitioning {
            m.handle_write_back(Instant::now(), set.is_ok());
        }
        match set {
            Ok(c) => changed |= c,
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    failed.map_or(Ok(changed), Err)
}
