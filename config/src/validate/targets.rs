//! One target and its LUNs: names, ACLs, authentication bindings, LUN attributes, QoS.

use super::network::{check_bursts, iscsi_override};
use super::{Ctx, R, check_nonempty, ident, item_path, limits};
use std::path::PathBuf;

use crate::model::{
    Account, AddressRule, BsOflags, BsType, DeviceType, Driver, IscsiParams, LunConfig, Qos,
    SenseFormat, TargetConfig, TargetState,
};
use crate::names::validate_iscsi_name;
use crate::raw::{RawAuth, RawLun, RawTarget, Scalar};
use crate::size::parse_size;
use crate::validate_auth::auth;

pub(super) fn target(
    ctx: &Ctx<'_>,
    path: &str,
    rt: RawTarget,
    global: &IscsiParams,
    accounts: &[Account],
) -> R<TargetConfig> {
    validate_iscsi_name(&rt.iqn).map_err(|m| ctx.err(&format!("{path}.iqn"), m))?;
    let tid = rt
        .tid
        .map(|v| ctx.range32(&format!("{path}.tid"), v, limits::TID))
        .transpose()?;
    if let Some(a) = &rt.alias {
        if a.is_empty() || a.len() > limits::ALIAS || a.chars().any(char::is_control) {
            return Err(ctx.err(
                &format!("{path}.alias"),
                format!(
                    "must be 1..={} bytes without control characters",
                    limits::ALIAS
                ),
            ));
        }
    }
    let mut allow_initiators = Vec::new();
    let mut allow_addresses = Vec::new();
    if let Some(allow) = &rt.allow {
        if let Some(l) = &allow.initiators {
            let p = format!("{path}.allow.initiators");
            check_nonempty(ctx, &p, l)?;
            for (j, name) in l.items.iter().enumerate() {
                let ip = item_path(&p, l, j);
                if name.trim().eq_ignore_ascii_case("all") {
                    allow_initiators.push("ALL".to_string());
                } else {
                    validate_iscsi_name(name).map_err(|m| ctx.err(&ip, m))?;
                    allow_initiators.push(name.clone());
                }
            }
            if allow_initiators.iter().any(|n| n == "ALL") {
                allow_initiators.clear();
            }
        }
        if let Some(l) = &allow.addresses {
            let p = format!("{path}.allow.addresses");
            check_nonempty(ctx, &p, l)?;
            for (j, a) in l.items.iter().enumerate() {
                let rule = AddressRule::parse(a).map_err(|m| ctx.err(&item_path(&p, l, j), m))?;
                allow_addresses.push(rule);
            }
            if allow_addresses.contains(&AddressRule::All) {
                allow_addresses.clear();
            }
        }
    }
    let iscsi = match &rt.iscsi {
        Some(ri) => {
            let base = format!("{path}.iscsi");
            let o = iscsi_override(ctx, &base, ri)?;
            check_bursts(ctx, &base, &global.merged_with(&o), Some(ri), None)?;
            Some(o)
        }
        None => None,
    };
    let driver = match &rt.driver {
        Some(w) => Driver::parse(&w.0).ok_or_else(|| {
            ctx.err(
                &format!("{path}.driver"),
                format!("must be iscsi or iser (got {:?})", w.0),
            )
        })?,
        None => Driver::Iscsi,
    };
    let state = match &rt.state {
        Some(w) => TargetState::parse(&w.0).ok_or_else(|| {
            ctx.err(
                &format!("{path}.state"),
                format!("must be ready or offline (got {:?})", w.0),
            )
        })?,
        None => TargetState::Ready,
    };
    let raw_auth = RawAuth {
        incoming_users: rt.incoming_users.clone(),
        outgoing_user: rt.outgoing_user.clone(),
    };
    let (incoming_users, outgoing_user) = auth(ctx, path, &raw_auth, accounts)?;
    let mut luns: Vec<LunConfig> = Vec::new();
    for (j, rl) in rt.luns.unwrap_or_default().into_iter().enumerate() {
        let lp = format!("{path}.luns[{j}]");
        let l = lun(ctx, &lp, rl)?;
        if let Some(k) = luns.iter().position(|o| o.lun == l.lun) {
            return Err(ctx.err(
                &format!("{lp}.lun"),
                format!("LUN {} is already used by {path}.luns[{k}]", l.lun),
            ));
        }
        luns.push(l);
    }
    let alua = match &rt.alua {
        Some(ra) => Some(ra.validate(|f, m| ctx.err(&format!("{path}.alua.{f}"), m))?),
        None => None,
    };
    for (j, l) in luns.iter().enumerate() {
        let Some(owner) = l.alua_owner else { continue };
        let known = alua.as_ref().map_or(owner == 1, |a| a.has_group(owner));
        if !known {
            return Err(ctx.err(
                &format!("{path}.luns[{j}].alua_owner"),
                format!(
                    "target port group {owner} is not one of the target's groups (alua.group \
                     and alua.peers; without an alua section the only group is 1)"
                ),
            ));
        }
    }
    let max_sessions = rt
        .max_sessions
        .map(|v| ctx.range32(&format!("{path}.max_sessions"), v, limits::MAX_SESSIONS))
        .transpose()?;
    let qos = match &rt.qos {
        Some(rq) => rq.validate(|k, m| ctx.err(&format!("{path}.qos.{k}"), m))?,
        None => Qos::default(),
    };
    Ok(TargetConfig {
        iqn: rt.iqn,
        tid,
        alias: rt.alias,
        allow_initiators,
        allow_addresses,
        iscsi,
        driver,
        state,
        incoming_users,
        outgoing_user,
        max_sessions,
        luns,
        alua,
        qos,
    })
}

pub(super) fn lun(ctx: &Ctx<'_>, p: &str, rl: RawLun) -> R<LunConfig> {
    let lun = ctx.range(&format!("{p}.lun"), rl.lun, limits::LUN)?;
    let device_type = match &rl.device_type {
        None => DeviceType::Disk,
        Some(w) => DeviceType::parse(&w.0).ok_or_else(|| {
            ctx.err(
                &format!("{p}.device_type"),
                format!(
                    "device type {:?} is not supported; numatgt exports disks (disk), \
                     CD/DVD images (cd), tape drives (tape), medium changers (changer) and \
                     local SCSI devices passed through (pt)",
                    w.0
                ),
            )
        })?,
    };
    if rl.path.is_empty() {
        return Err(ctx.err(&format!("{p}.path"), "must not be empty"));
    }
    let path = PathBuf::from(&rl.path);
    let bs_type = match &rl.bs_type {
        // tgt's store of a CD/DVD drive, of a tape drive
        None => BsType::default_for(device_type),
        Some(w) => BsType::parse(&w.0).ok_or_else(|| {
            ctx.err(
                &format!("{p}.bs_type"),
                format!(
                    "backing-store type {:?} is not supported; numatgt serves files and \
                     block devices (rdwr or aio), CD/DVD images (mmc), tape images (ssc), \
                     changer state files (smc), local SCSI devices passed through (sg, bsg), \
                     Ceph RBD images (rbd) and no storage (null)",
                    w.0
                ),
            )
        })?,
    };
    let bsopts = rl
        .bsopts
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty());
    if bs_type == BsType::Rbd {
        rbd::ImageSpec::parse(&rl.path).map_err(|m| ctx.err(&format!("{p}.path"), m))?;
        rbd::ClusterOptions::parse(bsopts.unwrap_or(""), &[])
            .map_err(|m| ctx.err(&format!("{p}.bsopts"), m))?;
        if rl.size.is_some() {
            return Err(ctx.err(
                &format!("{p}.size"),
                "an rbd image is not created by numatgt: create it with `rbd create`",
            ));
        }
    } else if bsopts.is_some() {
        return Err(ctx.err(
            &format!("{p}.bsopts"),
            "bsopts is for bs_type: rbd (a file's cache mode is `cache:`)",
        ));
    } else if matches!(bs_type, BsType::Ssc | BsType::Smc) {
        let (needs, what) = if bs_type == BsType::Ssc {
            (
                DeviceType::Tape,
                "ssc is a tape image: it needs device_type: tape",
            )
        } else {
            (
                DeviceType::Changer,
                "smc is a changer's state file: it needs device_type: changer",
            )
        };
        if device_type != needs {
            return Err(ctx.err(&format!("{p}.bs_type"), what));
        }
        if rl.size.is_some() {
            return Err(ctx.err(
                &format!("{p}.size"),
                if bs_type == BsType::Ssc {
                    "a tape image is made with tgtimg (--op new --device-type tape), not size:"
                } else {
                    "a changer's state file is written by numatgtd, not made with size:"
                },
            ));
        }
        if !path.is_absolute() {
            return Err(ctx.err(&format!("{p}.path"), "must be an absolute path"));
        }
    } else if !bs_type.is_file() {
        if rl.size.is_some() {
            return Err(ctx.err(
                &format!("{p}.size"),
                format!("a {} LUN has no file to create", bs_type.as_str()),
            ));
        }
    } else if !path.is_absolute() {
        return Err(ctx.err(
            &format!("{p}.path"),
            format!(
                "must be an absolute path (got {:?}); relative paths are not resolved",
                rl.path
            ),
        ));
    }
    if (device_type == DeviceType::Passthrough) != bs_type.is_passthrough() {
        return Err(ctx.err(
            &format!("{p}.bs_type"),
            if bs_type.is_passthrough() {
                format!(
                    "{} passes a local SCSI device through: it needs device_type: pt",
                    bs_type.as_str()
                )
            } else {
                format!(
                    "a pt LUN is a local SCSI device (bs_type: sg for /dev/sgN, bsg for \
                     /dev/bsg/H:C:T:L), not {}",
                    bs_type.as_str()
                )
            },
        ));
    }
    if bs_type.is_passthrough() {
        if !path.is_absolute() {
            return Err(ctx.err(&format!("{p}.path"), "must be an absolute path"));
        }
        if rl.readonly.is_some_and(|r| r.0) {
            return Err(ctx.err(
                &format!("{p}.readonly"),
                "a passed-through device is the device as it is: the target does not \
                 write-protect it (write-protect the device itself)",
            ));
        }
    }
    if device_type == DeviceType::Tape && bs_type != BsType::Ssc {
        return Err(ctx.err(
            &format!("{p}.bs_type"),
            format!("a tape LUN is a tape image (ssc), not {}", bs_type.as_str()),
        ));
    }
    if device_type == DeviceType::Changer && bs_type != BsType::Smc {
        return Err(ctx.err(
            &format!("{p}.bs_type"),
            format!(
                "a changer LUN's store is smc (its state file), not {}",
                bs_type.as_str()
            ),
        ));
    }
    if device_type != DeviceType::Changer && !rl.changer.is_empty() {
        return Err(ctx.err(
            &format!("{p}.changer"),
            "only a medium changer (device_type: changer) has elements",
        ));
    }
    for (i, params) in rl.changer.iter().enumerate() {
        check_changer_params(params).map_err(|m| ctx.err(&format!("{p}.changer[{i}]"), m))?;
    }
    if device_type == DeviceType::Cd {
        if !bs_type.is_file() {
            return Err(ctx.err(
                &format!("{p}.bs_type"),
                format!(
                    "a cd LUN is an image file (mmc, rdwr or aio), not {}",
                    bs_type.as_str()
                ),
            ));
        }
        if let Some(b) = rl.block_size.filter(|&b| b != 2048) {
            return Err(ctx.err(
                &format!("{p}.block_size"),
                format!("a cd LUN has 2048-byte blocks (got {b})"),
            ));
        }
    }
    let no_blocks = matches!(
        device_type,
        DeviceType::Tape | DeviceType::Changer | DeviceType::Passthrough
    );
    if no_blocks && rl.block_size.is_some() {
        return Err(ctx.err(
            &format!("{p}.block_size"),
            "a tape drive's block size is the initiator's choice (MODE SELECT), a \
             changer has no blocks and a passed-through device has its own: not configured",
        ));
    }
    let block_size = match rl.block_size {
        // tgtd shows a tape drive's and a changer's block size as 1
        None if no_blocks => 1,
        None if device_type == DeviceType::Cd => 2048,
        None => 512,
        Some(2048) if device_type == DeviceType::Cd => 2048,
        Some(b @ (512 | 4096)) => b as u32,
        Some(b) => {
            return Err(ctx.err(
                &format!("{p}.block_size"),
                format!("must be 512 or 4096 (got {b})"),
            ));
        }
    };
    let create_size = match &rl.size {
        None => None,
        Some(s) => {
            let sp = format!("{p}.size");
            let bytes = match s {
                Scalar::Int(i) => u64::try_from(*i)
                    .map_err(|_| ctx.err(&sp, format!("must be a positive size (got {i})")))?,
                Scalar::Text(t) => parse_size(t).map_err(|m| ctx.err(&sp, m))?,
            };
            if bytes == 0 {
                return Err(ctx.err(&sp, "must be greater than 0"));
            }
            if bytes % u64::from(block_size) != 0 {
                return Err(ctx.err(
                    &sp,
                    format!("{bytes} bytes is not a multiple of the block size {block_size}"),
                ));
            }
            Some(bytes)
        }
    };
    let qos = match &rl.qos {
        Some(rq) => rq.validate(|k, m| ctx.err(&format!("{p}.qos.{k}"), m))?,
        None => Qos::default(),
    };
    Ok(LunConfig {
        lun,
        path,
        block_size,
        write_cache: rl.write_cache.is_none_or(|b| b.0),
        readonly: rl.readonly.is_some_and(|b| b.0),
        create_size,
        vendor_id: ident(
            ctx,
            &format!("{p}.vendor_id"),
            rl.vendor_id,
            limits::VENDOR_ID,
        )?,
        product_id: ident(
            ctx,
            &format!("{p}.product_id"),
            rl.product_id,
            limits::PRODUCT_ID,
        )?,
        product_rev: ident(
            ctx,
            &format!("{p}.product_rev"),
            rl.product_rev,
            limits::PRODUCT_REV,
        )?,
        serial: ident(ctx, &format!("{p}.serial"), rl.serial, limits::SERIAL)?,
        cache: rl
            .cache
            .as_ref()
            .map(|w| ctx.cache_mode(&format!("{p}.cache"), w))
            .transpose()?,
        scsi_id: ident(ctx, &format!("{p}.scsi_id"), rl.scsi_id, limits::SCSI_ID)?,
        sense_format: match &rl.sense_format {
            None => SenseFormat::Fixed,
            Some(w) => SenseFormat::parse(&w.0).ok_or_else(|| {
                ctx.err(
                    &format!("{p}.sense_format"),
                    format!("must be 0/fixed or 1/descriptor (got {:?})", w.0),
                )
            })?,
        },
        removable: rl.removable.is_some_and(|b| b.0),
        thin_provisioning: rl.thin_provisioning.is_some_and(|b| b.0),
        online: rl.online.is_none_or(|b| b.0),
        bs_type,
        device_type,
        bsopts: bsopts.map(str::to_string),
        bsoflags: match &rl.bsoflags {
            None => BsOflags::default(),
            Some(w) => BsOflags::parse(&w.0).map_err(|m| ctx.err(&format!("{p}.bsoflags"), m))?,
        },
        lbppbe: rl
            .lbppbe
            .map(|v| {
                ctx.range(&format!("{p}.lbppbe"), v, limits::LBPPBE)
                    .map(|v| v as u8)
            })
            .transpose()?,
        la_lba: rl
            .la_lba
            .map(|v| {
                ctx.range(&format!("{p}.la_lba"), v, limits::LA_LBA)
                    .map(|v| v as u16)
            })
            .transpose()?,
        optimal_xfer_gran: rl
            .optimal_xfer_gran
            .map(|v| {
                ctx.range32(
                    &format!("{p}.optimal_xfer_gran"),
                    v,
                    limits::OPTIMAL_XFER_GRAN,
                )
            })
            .transpose()?,
        optimal_xfer_len: rl
            .optimal_xfer_len
            .map(|v| {
                ctx.range32(
                    &format!("{p}.optimal_xfer_len"),
                    v,
                    limits::OPTIMAL_XFER_LEN,
                )
            })
            .transpose()?,
        alua_owner: rl
            .alua_owner
            .map(|v| {
                ctx.range(&format!("{p}.alua_owner"), v, crate::alua::ID_RANGE)
                    .map(|v| v as u16)
            })
            .transpose()?,
        changer: rl.changer.clone(),
        qos,
    })
}

/// The keys tgt's medium changer takes in `--params` (its element configuration).
pub const CHANGER_KEYS: [&str; 11] = [
    "element_type",
    "start_address",
    "quantity",
    "address",
    "barcode",
    "tid",
    "lun",
    "sides",
    "media_home",
    "dump",
    "type",
];

/// One changer `params` string: `key=value` pairs of [`CHANGER_KEYS`] (what they mean is
/// the changer's to check when it applies them).
fn check_changer_params(params: &str) -> Result<(), String> {
    for part in params.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let Some((k, _)) = part.split_once('=') else {
            return Err(format!("expected key=value (got {part:?})"));
        };
        if !CHANGER_KEYS.contains(&k.trim()) {
            return Err(format!(
                "unknown changer parameter {:?} (one of {})",
                k.trim(),
                CHANGER_KEYS.join(", ")
            ));
        }
    }
    Ok(())
}
