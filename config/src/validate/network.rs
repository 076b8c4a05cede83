//! Portals, digests, the iSCSI key overrides (global and per target) and the `limits:`
//! section.

use super::{Ctx, R, limits};
use std::net::SocketAddr;

use crate::error::ConfigError;
use crate::model::{Digest, IscsiParams, IscsiParamsOverride, LimitsSettings, PortalConfig};
use crate::net::parse_portal_addr;
use crate::raw::{List, RawIscsi, RawLimits, RawPortal};

pub(super) fn portals(ctx: &Ctx<'_>, list: &[RawPortal]) -> R<Vec<PortalConfig>> {
    if list.is_empty() {
        return Err(ctx.err(
            "portals",
            "must list at least one portal (leave the key out for 0.0.0.0:3260)",
        ));
    }
    portal_list(ctx, "portals", list)
}

/// `iser_portals:`: the same entries as `portals:`, checked the same way; an empty list is
/// allowed (it switches iSER off). iSER portals are not compared with the TCP ones: RDMA CM
/// listens in its own port space, as tgtd's iSER driver does on 3260 next to its TCP one.
pub(super) fn iser_portals(ctx: &Ctx<'_>, list: &[RawPortal]) -> R<Vec<PortalConfig>> {
    portal_list(ctx, "iser_portals", list)
}

fn portal_list(ctx: &Ctx<'_>, key: &str, list: &[RawPortal]) -> R<Vec<PortalConfig>> {
    let mut out: Vec<PortalConfig> = Vec::new();
    for (i, rp) in list.iter().enumerate() {
        let path = format!("{key}[{i}]");
        let addr =
            parse_portal_addr(&rp.address).map_err(|m| ctx.err(&format!("{path}.address"), m))?;
        for (j, prev) in out.iter().enumerate() {
            if let Some(why) = portal_clash(prev.addr, addr) {
                return Err(ctx.err(
                    &format!("{path}.address"),
                    format!("{addr} {why} {key}[{j}] ({})", prev.addr),
                ));
            }
        }
        let nop_interval = rp
            .nop_interval
            .map(|v| ctx.range32(&format!("{path}.nop_interval"), v, limits::NOP_INTERVAL))
            .transpose()?;
        let nop_count = rp
            .nop_count
            .map(|v| ctx.range32(&format!("{path}.nop_count"), v, limits::NOP_COUNT))
            .transpose()?;
        out.push(PortalConfig {
            addr,
            nop_interval,
            nop_count,
        });
    }
    Ok(out)
}

/// Why two portals cannot both be bound, if they cannot. Port 0 (any free
/// port) never clashes.
pub(super) fn portal_clash(a: SocketAddr, b: SocketAddr) -> Option<&'static str> {
    if a.port() != b.port() || a.port() == 0 {
        return None;
    }
    if a.ip() == b.ip() {
        return Some("duplicates");
    }
    if a.is_ipv4() == b.is_ipv4() && (a.ip().is_unspecified() || b.ip().is_unspecified()) {
        return Some("overlaps the wildcard address of");
    }
    None
}

pub(super) fn digest_list(ctx: &Ctx<'_>, path: &str, l: &List) -> R<Vec<Digest>> {
    let mut out = Vec::new();
    for (j, item) in l.items.iter().enumerate() {
        let ipath = if l.single {
            path.to_string()
        } else {
            format!("{path}[{j}]")
        };
        for word in item.split(',') {
            let d = Digest::parse(word).ok_or_else(|| {
                ctx.err(
                    &ipath,
                    format!("must be None or CRC32C (got {:?})", word.trim()),
                )
            })?;
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    if out.is_empty() {
        return Err(ctx.err(path, "must list at least one of None, CRC32C"));
    }
    Ok(out)
}

pub(super) fn iscsi_override(ctx: &Ctx<'_>, base: &str, r: &RawIscsi) -> R<IscsiParamsOverride> {
    use iscsi_proto::limits::{self as iscsi, KeyRange};
    let p = |k: &str| format!("{base}.{k}");
    let key =
        |k: &KeyRange, v: Option<u64>| v.map(|v| ctx.range(&p(k.name), v, k.bounds())).transpose();
    let key32 = |k: &KeyRange, v: Option<u64>| {
        v.map(|v| ctx.range32(&p(k.name), v, k.bounds()))
            .transpose()
    };
    Ok(IscsiParamsOverride {
        max_recv_data_segment_length: key32(
            &iscsi::MAX_RECV_DATA_SEGMENT_LENGTH,
            r.max_recv_data_segment_length,
        )?,
        max_burst_length: key32(&iscsi::MAX_BURST_LENGTH, r.max_burst_length)?,
        first_burst_length: key32(&iscsi::FIRST_BURST_LENGTH, r.first_burst_length)?,
        immediate_data: r.immediate_data.map(|b| b.0),
        initial_r2t: r.initial_r2t.map(|b| b.0),
        max_outstanding_r2t: key32(&iscsi::MAX_OUTSTANDING_R2T, r.max_outstanding_r2t)?,
        header_digest: r
            .header_digest
            .as_ref()
            .map(|l| digest_list(ctx, &p("HeaderDigest"), l))
            .transpose()?,
        data_digest: r
            .data_digest
            .as_ref()
            .map(|l| digest_list(ctx, &p("DataDigest"), l))
            .transpose()?,
        max_queued_commands: r
            .max_queued_commands
            .map(|v| ctx.range32(&p("MaxQueueCmd"), v, limits::MAX_QUEUE_CMD))
            .transpose()?,
        nop_interval: r
            .nop_interval
            .map(|v| ctx.range32(&p("NopInterval"), v, limits::NOP_INTERVAL))
            .transpose()?,
        nop_count: r
            .nop_count
            .map(|v| ctx.range32(&p("NopCount"), v, limits::NOP_COUNT))
            .transpose()?,
        data_pdu_in_order: r.data_pdu_in_order.map(|b| b.0),
        data_sequence_in_order: r.data_sequence_in_order.map(|b| b.0),
        error_recovery_level: key(&iscsi::ERROR_RECOVERY_LEVEL, r.error_recovery_level)?
            .map(|v| v as u8),
        default_time2wait: key(&iscsi::DEFAULT_TIME2WAIT, r.default_time2wait)?.map(|v| v as u16),
        default_time2retain: key(&iscsi::DEFAULT_TIME2RETAIN, r.default_time2retain)?
            .map(|v| v as u16),
        max_connections: key32(&iscsi::MAX_CONNECTIONS, r.max_connections)?,
        // not an RFC 7143 key (a local value tgtd shows): the data length range
        max_xmit_data_segment_length: r
            .max_xmit_data_segment_length
            .map(|v| ctx.range32(&p("MaxXmitDataSegmentLength"), v, limits::DATA_LEN))
            .transpose()?,
    })
    .and_then(|o| {
        for (key, v) in [("IFMarker", r.if_marker), ("OFMarker", r.of_marker)] {
            if v.is_some_and(|b| b.0) {
                return Err(ctx.err(
                    &p(key),
                    "markers are not supported (RFC 7143 removed them); only No is accepted",
                ));
            }
        }
        Ok(o)
    })
}

/// FirstBurstLength <= MaxBurstLength (RFC 7143 §13.14), reported at the key
/// that was written in `local` (the section being checked), else in `global`.
pub(super) fn check_bursts(
    ctx: &Ctx<'_>,
    base: &str,
    p: &IscsiParams,
    local: Option<&RawIscsi>,
    global: Option<&str>,
) -> R<()> {
    let Err(why) = iscsi_proto::limits::check_bursts(p.first_burst_length, p.max_burst_length)
    else {
        return Ok(());
    };
    let key = match local {
        Some(r) if r.first_burst_length.is_some() => format!("{base}.FirstBurstLength"),
        Some(r) if r.max_burst_length.is_some() => format!("{base}.MaxBurstLength"),
        _ => format!("{}.FirstBurstLength", global.unwrap_or(base)),
    };
    Err(ctx.err(&key, why))
}

/// tgtd's `--iscsi portal=IP:PORT[,nop_interval=S][,nop_count=N]`.
pub(crate) fn portal_from_option(text: &str) -> R<PortalConfig> {
    const SRC: &str = "--iscsi";
    let err = |path: &str, m: String| ConfigError::new(SRC, None, None, path, m);
    let mut addr = None;
    let mut nop_interval = None;
    let mut nop_count = None;
    for (i, part) in text.split(',').enumerate() {
        let (k, v) = match part.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None if i == 0 => ("portal", part.trim()),
            None => return Err(err("", format!("expected key=value, got {part:?}"))),
        };
        let num = |r: (u64, u64)| -> R<u32> {
            match v.parse::<u64>() {
                Ok(n) if (r.0..=r.1).contains(&n) => Ok(n as u32),
                _ => Err(err(k, format!("must be in {}..={} (got {v:?})", r.0, r.1))),
            }
        };
        match k {
            "portal" => addr = Some(parse_portal_addr(v).map_err(|m| err(k, m))?),
            "nop_interval" => nop_interval = Some(num(limits::NOP_INTERVAL)?),
            "nop_count" => nop_count = Some(num(limits::NOP_COUNT)?),
            _ => {
                return Err(err(
                    k,
                    "unknown option (expected portal, nop_interval or nop_count)".into(),
                ));
            }
        }
    }
    let addr = addr.ok_or_else(|| err("portal", "missing portal=IP:PORT".into()))?;
    Ok(PortalConfig {
        addr,
        nop_interval,
        nop_count,
    })
}

/// The `limits:` section: each key in its range, absent keys at their defaults.
pub(super) fn limits_section(ctx: &Ctx<'_>, raw: Option<&RawLimits>) -> R<LimitsSettings> {
    let d = LimitsSettings::default();
    let Some(r) = raw else {
        return Ok(d);
    };
    let get = |key: &str, v: Option<u64>, range: (u64, u64), default: u32| match v {
        Some(v) => ctx.range32(&format!("limits.{key}"), v, range),
        None => Ok(default),
    };
    Ok(LimitsSettings {
        max_sessions: get(
            "max_sessions",
            r.max_sessions,
            limits::MAX_SESSIONS,
            d.max_sessions,
        )?,
        max_connections: get(
            "max_connections",
            r.max_connections,
            limits::MAX_CONNECTIONS,
            d.max_connections,
        )?,
        login_timeout: get(
            "login_timeout",
            r.login_timeout,
            limits::LOGIN_TIMEOUT,
            d.login_timeout,
        )?,
        max_mgmt_clients: get(
            "max_mgmt_clients",
            r.max_mgmt_clients,
            limits::MAX_MGMT_CLIENTS,
            d.max_mgmt_clients,
        )?,
    })
}
