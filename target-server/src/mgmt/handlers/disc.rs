//! A CD/DVD LUN's disc as the administrator changes it, the way tgtd does: `--params
//! online=0` takes the disc out (the drive reports no medium, whatever the initiators
//! prevent), `path=IMAGE` puts another image in (only while the disc is out, as tgtd; the
//! drive is online again), `online=1` puts the disc back. The initiators see NOT READY TO
//! READY CHANGE and a media event, as after a disc change in a real drive.
//!
//! A tape drive's tape the same way: `online=0` takes it out (made durable first),
//! `path=TAPE` puts another tape image in while the drive is offline, `online=1` loads the
//! tape at the LUN's path again.

use std::sync::Arc;

use tgtadm_wire::ErrCode;

use scsi::ssc::Removed;

use super::lun::{change_in_place, replace_lun};
use crate::mgmt::Ctx;
use crate::registry::{Lun, LunMeta, Target};

/// Opens `path` as the disc of CD/DVD LUN `lun` and replaces the LUN with one on it (its
/// new capacity; the old image's cached blocks dropped).
pub(super) fn change(
    ctx: &Ctx,
    t: &Target,
    lun: &Arc<Lun>,
    path: &str,
    mut params: scsi::LuParams,
    mut meta: LunMeta,
) -> Result<(), ErrCode> {
    let lc = config::LunConfig {
        block_size: params.block_size,
        bs_type: config::BsType::parse(&meta.bstype).unwrap_or(config::BsType::Mmc),
        device_type: config::DeviceType::Cd,
        ..config::LunConfig::new(lun.number, path.into())
    };
    let store = crate::runtime::open_store(&t.iqn, &lc, lun.cache_mode, false).map_err(|e| {
        tracing::warn!(target = %t.iqn, lun = lun.number, path, "disc not changed: {e}");
        ErrCode::InvalidRequest
    })?;
    params.num_blocks = store.num_blocks();
    meta.path = path.to_string();
    meta.online = true;
    let old_cache_id = lun.cache_id;
    let cache_id = ctx.registry.alloc_cache_id();
    let next = replace_lun(t, lun, params, meta, Some((Arc::new(store), cache_id)));
    next.scsi.medium_changed();
    if let Some(c) = &ctx.cache {
        c.invalidate_lun(old_cache_id);
    }
    tracing::info!(target = %t.iqn, lun = lun.number, path, blocks = next.scsi.num_blocks(),
        "disc changed");
    Ok(())
}

/// `--op update` of a tape drive's LUN: the keys that rebuild the logical unit (the tape
/// moves into the new one), then the tape taken out (`online=0`) or put in (`path=`, or
/// `online=1` with the tape at the LUN's path). A tape that cannot be opened changes
/// nothing.
pub(super) fn tape_update(
    t: &Target,
    lun: &Arc<Lun>,
    path: Option<&str>,
    rebuild: bool,
    params: scsi::LuParams,
    mut meta: LunMeta,
) -> Result<(), ErrCode> {
    if let Some(p) = path {
        meta.path = p.to_string();
        meta.online = true;
    }
    let loaded = lun.scsi.tape_status().loaded;
    let new_tape = if meta.online && (path.is_some() || !loaded) {
        let tape = crate::backend::tape::FileTape::open(meta.path.as_ref(), params.readonly)
            .map_err(|e| {
                tracing::warn!(target = %t.iqn, lun = lun.number, path = %meta.path,
                    "tape not loaded: {e}");
                ErrCode::InvalidRequest
            })?;
        Some(tape)
    } else {
        None
    };
    let lun = if rebuild {
        replace_lun(t, lun, params, meta.clone(), None)
    } else {
        Arc::clone(lun)
    };
    if !meta.online && loaded {
        if let Some(Removed { synced: Err(e), .. }) = lun.scsi.tape_remove() {
            tracing::error!(target = %t.iqn, lun = lun.number,
                "tape taken out of the drive, but what was written may not be on disk: {e}");
        } else {
            tracing::info!(target = %t.iqn, lun = lun.number, "tape taken out of the drive");
        }
    }
    if let Some(tape) = new_tape {
        lun.scsi.tape_insert(Box::new(tape)).map_err(|e| {
            tracing::warn!(target = %t.iqn, lun = lun.number, path = %meta.path,
                "tape not loaded: {e}");
            ErrCode::InvalidRequest
        })?;
        tracing::info!(target = %t.iqn, lun = lun.number, path = %meta.path,
            barcode = %lun.scsi.tape_status().barcode, "tape loaded");
    }
    change_in_place(&lun, meta);
    Ok(())
}
