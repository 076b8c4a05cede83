//! `--mode target`: new, delete (`--force` closes the sessions), show (all, or one target's
//! parameters), bind/unbind access rules, update (state, NOP-In, iSCSI session keys for new
//! sessions, the ALUA group and peers of a target without LUNs), stat.

use std::collections::BTreeMap;
use std::sync::Arc;

use iscsi_proto::Digest;
use iscsi_proto::limits::{self, KeyRange};

use super::{need_tid, parse_bool};
use crate::mgmt::show;
use crate::mgmt::{Ctx, Reply};
use crate::registry::{Acl, Target, TargetState};
use tgtadm_wire::{ErrCode, Op, Payload, ReqHeader};

/// `lld`: the request's `--lld`; `new` makes a target of that LLD, `show` without a tid
/// lists only that LLD's targets (tgtd keeps a target list per LLD).
pub fn handle(ctx: &Ctx, op: Op, h: &ReqHeader, p: &Payload, lld: config::Driver) -> Reply {
    match op {
        Op::New => new(ctx, h, p, lld),
        Op::Delete => delete(ctx, h),
        Op::Show => {
            if h.tid < 0 {
                Ok(show::targets(&ctx.registry, lld))
            } else {
                let t = lookup(ctx, h)?;
                Ok(show::target_params(&t))
            }
        }
        Op::Bind => bind(ctx, h, p, true),
        Op::Unbind => bind(ctx, h, p, false),
        Op::Update => update(ctx, h, p),
        Op::Stats => {
            let t = lookup(ctx, h)?;
            Ok(show::stats(&ctx.registry, &t, None))
        }
        Op::Start | Op::Stop => Err(ErrCode::UnsupportedOperation),
    }
}

pub fn lookup(ctx: &Ctx, h: &ReqHeader) -> Result<Arc<Target>, ErrCode> {
    let tid = need_tid(h).map_err(|_| ErrCode::NoTarget)?;
    ctx.registry.target_by_tid(tid).ok_or(ErrCode::NoTarget)
}

fn new(ctx: &Ctx, h: &ReqHeader, p: &Payload, lld: config::Driver) -> Reply {
    let tid = need_tid(h)?;
    let name = p
        .get("targetname")
        .filter(|n| !n.is_empty())
        .ok_or(ErrCode::InvalidRequest)?;
    if name.len() > config::MAX_NAME_LEN || name.chars().any(|c| c.is_whitespace()) {
        return Err(ErrCode::InvalidRequest);
    }
    let reg = &ctx.registry;
    reg.update_targets(|ts| {
        if ts
            .iter()
            .any(|t| t.tid == tid || t.iqn.eq_ignore_ascii_case(name))
        {
            return Err(ErrCode::TargetExist);
        }
        ts.push(Arc::new(
            Target::new(
                tid,
                name.to_string(),
                None,
                BTreeMap::new(),
                reg.default_config().clone(),
                // as tgtd: nobody may log in until an ACL is bound
                Acl::default(),
            )
            .with_driver(lld),
        ));
        tracing::info!(tid, target = name, lld = lld.as_str(), "target created");
        Ok(String::new())
    })
}

fn delete(ctx: &Ctx, h: &ReqHeader) -> Reply {
    let t = lookup(ctx, h)?;
    let sessions = ctx.registry.sessions_of(&t.iqn);
    if !sessions.is_empty() {
        if h.force == 0 {
            return Err(ErrCode::TargetActive);
        }
        for s in &sessions {
            ctx.control.close(s.owner, "target deleted");
        }
    }
    ctx.registry
        .update_targets(|ts| ts.retain(|x| x.tid != t.tid));
    for lun in t.lun_set().map.values() {
        if let Err(e) = ctx.sync_lun(lun) {
            tracing::warn!(target = %t.iqn, lun = lun.number, "sync on target delete failed: {e}");
        }
    }
    tracing::info!(tid = t.tid, target = %t.iqn, sessions = sessions.len(), "target deleted");
    Ok(String::new())
}

fn bind(ctx: &Ctx, h: &ReqHeader, p: &Payload, add: bool) -> Reply {
    let t = lookup(ctx, h)?;
    let addr = p.get("initiator-address");
    let name = p.get("initiator-name");
    if addr.is_none() && name.is_none() {
        return Err(ErrCode::InvalidRequest);
    }
    let rule = match addr {
        Some(a) => Some((
            a.to_string(),
            config::AddressRule::parse(a).map_err(|_| ErrCode::InvalidRequest)?,
        )),
        None => None,
    };
    let mut m = t.mgmt();
    let mut next = m.acl.clone();
    if let Some((text, r)) = rule {
        let pos = next.addresses.iter().position(|(x, _)| *x == text);
        match (add, pos) {
            (true, Some(_)) => return Err(ErrCode::AclExist),
            (true, None) => next.addresses.push((text, r)),
            (false, Some(i)) => {
                next.addresses.remove(i);
            }
            (false, None) => return Err(ErrCode::AclNoExist),
        }
    }
    if let Some(n) = name {
        let pos = next.names.iter().position(|x| x == n);
        match (add, pos) {
            (true, Some(_)) => return Err(ErrCode::AclExist),
            (true, None) => next.names.push(n.to_string()),
            (false, Some(i)) => {
                next.names.remove(i);
            }
            (false, None) => return Err(ErrCode::AclNoExist),
        }
    }
    m.acl = next;
    Ok(String::new())
}

/// A decimal `v` in `lo..=hi`.
pub(crate) fn number(v: &str, (lo, hi): (u64, u64)) -> Result<u32, ErrCode> {
    match v.trim().parse::<u32>() {
        Ok(n) if (lo..=hi).contains(&u64::from(n)) => Ok(n),
        _ => Err(ErrCode::InvalidRequest),
    }
}

/// A value of the iSCSI key `k`, in its range from [`limits`].
fn key_value(v: &str, k: &KeyRange) -> Result<u32, ErrCode> {
    number(v, k.bounds())
}

fn digest_list(v: &str) -> Result<Vec<Digest>, ErrCode> {
    let mut out = Vec::new();
    for w in v.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        out.push(match w.to_ascii_lowercase().as_str() {
            "none" => Digest::None,
            "crc32c" => Digest::Crc32c,
            _ => return Err(ErrCode::InvalidRequest),
        });
    }
    if out.is_empty() {
        return Err(ErrCode::InvalidRequest);
    }
    Ok(out)
}

/// Keys shown and stored as given, not negotiated differently (iSER and local values,
/// login redirection).
const STORED_KEYS: [&str; 8] = [
    "RDMAExtensions",
    "TargetRecvDataSegmentLength",
    "InitiatorRecvDataSegmentLength",
    "MaxXmitDataSegmentLength",
    "RedirectAddress",
    "RedirectPort",
    "RedirectReason",
    "RedirectCallback",
];

/// Apply one `name=value` to target `t`.
pub fn update_key(t: &Target, name: &str, value: &str) -> Result<(), ErrCode> {
    let lower = name.to_ascii_lowercase();
    match lower.as_str() {
        "state" => {
            let st = match value {
                "offline" => TargetState::Offline,
                "ready" => TargetState::Ready,
                _ => return Err(ErrCode::InvalidRequest),
            };
            t.mgmt().state = st;
            return Ok(());
        }
        "nop_interval" => {
            let n = number(value, config::limits::NOP_INTERVAL)?;
            t.update_conn_config(|c| c.nop_interval_ms = u64::from(n) * 1000);
            return Ok(());
        }
        "nop_count" => {
            let n = number(value, config::limits::NOP_COUNT)?;
            t.update_conn_config(|c| c.nop_count = n);
            return Ok(());
        }
        // numatgt's own: the target's session limit (0 = none of its own); at once for
        // new logins, logged-in sessions above it stay
        "maxsessions" | "max_sessions" => {
            let n = match value.trim() {
                "0" => None,
                v => Some(number(v, config::limits::MAX_SESSIONS)?),
            };
            t.set_max_sessions(n);
            return Ok(());
        }
        _ => {}
    }
    match lower.as_str() {
        "maxrecvdatasegmentlength" => {
            let n = key_value(value, &limits::MAX_RECV_DATA_SEGMENT_LENGTH)?;
            t.update_conn_config(|c| c.max_recv_data_segment_length = n);
        }
        "maxburstlength" => {
            let n = key_value(value, &limits::MAX_BURST_LENGTH)?;
            t.update_conn_config(|c| c.max_burst_length = n);
        }
        "firstburstlength" => {
            let n = key_value(value, &limits::FIRST_BURST_LENGTH)?;
            t.update_conn_config(|c| c.first_burst_length = n);
        }
        "maxoutstandingr2t" => {
            let n = key_value(value, &limits::MAX_OUTSTANDING_R2T)?;
            t.update_conn_config(|c| c.max_outstanding_r2t = n);
        }
        "maxqueuecmd" => {
            let n = number(value, config::limits::MAX_QUEUE_CMD)?;
            t.update_conn_config(|c| c.max_queued_commands = n);
        }
        "defaulttime2wait" => {
            let n = key_value(value, &limits::DEFAULT_TIME2WAIT)?;
            t.update_conn_config(|c| c.default_time2wait = n as u16);
        }
        "defaulttime2retain" => {
            let n = key_value(value, &limits::DEFAULT_TIME2RETAIN)?;
            t.update_conn_config(|c| c.default_time2retain = n as u16);
        }
        "initialr2t" => {
            let b = parse_bool(value)?;
            t.update_conn_config(|c| c.initial_r2t = b);
        }
        "immediatedata" => {
            let b = parse_bool(value)?;
            t.update_conn_config(|c| c.immediate_data = b);
        }
        "headerdigest" => {
            let d = digest_list(value)?;
            t.update_conn_config(|c| c.header_digest = d);
        }
        "datadigest" => {
            let d = digest_list(value)?;
            t.update_conn_config(|c| c.data_digest = d);
        }
        _ => {
            if let Some((k, fixed)) = show::FIXED_KEYS
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
            {
                // a value numatgt cannot honour is refused rather than silently shown
                if !fixed.eq_ignore_ascii_case(value.trim()) {
                    tracing::info!(key = k, value, "session key value not supported");
                    return Err(ErrCode::UnsupportedOperation);
                }
                return Ok(());
            }
            let Some(k) = STORED_KEYS.iter().find(|k| k.eq_ignore_ascii_case(name)) else {
                return Err(ErrCode::InvalidRequest);
            };
            let mut m = t.mgmt();
            m.extra.retain(|(n, _)| n != k);
            m.extra.push((k.to_string(), value.to_string()));
        }
    }
    Ok(())
}

fn update(ctx: &Ctx, h: &ReqHeader, p: &Payload) -> Reply {
    let t = lookup(ctx, h)?;
    let pairs: Vec<&(String, String)> = p.pairs.iter().chain(p.params.iter()).collect();
    if pairs.is_empty() {
        return Err(ErrCode::InvalidRequest);
    }
    let (alua, keys): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|(k, _)| is_alua(k));
    if !alua.is_empty() {
        update_alua(ctx, &t, alua.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    }
    if !keys.is_empty() {
        update_keys(&t, keys.iter().map(|(k, v)| (k.as_str(), v.as_str())))?;
    }
    Ok(String::new())
}

/// Whether `name` is one of the target's ALUA settings (`config::alua::TGTADM_NAMES`).
fn is_alua(name: &str) -> bool {
    let key = name.to_ascii_lowercase().replace('-', "_");
    config::alua::TGTADM_NAMES.contains(&key.as_str())
}

/// Sets the target's ALUA group, relative port, peers or non-owner state (all of
/// `settings`, or none of them: the first one that is wrong is refused with the reason in
/// the log). Only while the target has no LUN (each LUN runs with the settings it was
/// added with) and no session (each logged in with the group as its portal group tag).
fn update_alua<'a>(
    ctx: &Ctx,
    t: &Target,
    settings: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), ErrCode> {
    let luns = t.lun_set().map.len();
    if luns > 0 {
        tracing::warn!(target = %t.iqn, luns,
            "ALUA settings are refused while the target has LUNs: set them before adding any");
        return Err(ErrCode::LunActive);
    }
    let sessions = ctx.registry.sessions_of(&t.iqn).len();
    if sessions > 0 {
        tracing::warn!(target = %t.iqn, sessions,
            "ALUA settings are refused while sessions are logged in to the target");
        return Err(ErrCode::TargetActive);
    }
    let mut alua = (*t.alua()).clone();
    for (name, value) in settings {
        alua = alua.with_setting(name, value).map_err(|why| {
            tracing::warn!(target = %t.iqn, "ALUA setting refused: {why}");
            ErrCode::InvalidRequest
        })?;
    }
    tracing::info!(target = %t.iqn, group = alua.group, relative_port = alua.relative_port,
        peers = ?alua.peers, non_owner_state = ?alua.non_owner_state, "ALUA settings");
    t.set_alua(alua);
    Ok(())
}

/// Applies `name=value` pairs in order (stopping at the first invalid one, as before),
/// then checks FirstBurstLength ≤ MaxBurstLength (RFC 7143 §13.14) as the configuration
/// file does: a request that breaks it changes neither length and is refused.
pub fn update_keys<'a>(
    t: &Target,
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), ErrCode> {
    let before = t.conn_config();
    let applied = pairs.into_iter().try_for_each(|(k, v)| update_key(t, k, v));
    let now = t.conn_config();
    if let Err(why) = limits::check_bursts(now.first_burst_length, now.max_burst_length) {
        t.update_conn_config(|c| {
            c.first_burst_length = before.first_burst_length;
            c.max_burst_length = before.max_burst_length;
        });
        tracing::info!(target = %t.iqn, "session keys refused: {why}");
        return Err(ErrCode::InvalidRequest);
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        let name = "iqn.2026-11.org.numatgt:t";
        Target::new(
            1,
            name.to_string(),
            None,
            BTreeMap::new(),
            iscsi_proto::ConnConfig::default(),
            Acl::default(),
        )
    }

    #[test]
    fn session_key_ranges_are_the_limits_table() {
        let t = target();
        for k in [
            limits::MAX_RECV_DATA_SEGMENT_LENGTH,
            limits::MAX_BURST_LENGTH,
            limits::FIRST_BURST_LENGTH,
            limits::MAX_OUTSTANDING_R2T,
            limits::DEFAULT_TIME2WAIT,
            limits::DEFAULT_TIME2RETAIN,
        ] {
            let set = |v: u64| update_keys(&t, [(k.name, v.to_string().as_str())]);
            // keep FirstBurstLength <= MaxBurstLength out of the way
            update_keys(
                &t,
                [("FirstBurstLength", "512"), ("MaxBurstLength", "16777215")],
            )
            .unwrap();
            assert_eq!(set(k.min.into()), Ok(()), "{} min", k.name);
            assert_eq!(set(k.max.into()), Ok(()), "{} max", k.name);
            assert_eq!(set(u64::from(k.max) + 1), Err(ErrCode::InvalidRequest));
            if k.min > 0 {
                assert_eq!(set(u64::from(k.min) - 1), Err(ErrCode::InvalidRequest));
            }
        }
        // the keys numatgt fixes are shown with a value in the table's range
        for (name, value) in show::FIXED_KEYS {
            if let (Some(k), Ok(v)) = (limits::find(name), value.parse::<u64>()) {
                assert!(k.contains(v), "{name}={value}");
            }
        }
    }

    #[test]
    fn first_burst_must_not_exceed_max_burst() {
        let t = target();
        let bursts = |t: &Target| {
            let c = t.conn_config();
            (c.first_burst_length, c.max_burst_length)
        };
        assert_eq!(bursts(&t), (65_536, 262_144));
        assert_eq!(
            update_keys(&t, [("FirstBurstLength", "524288")]),
            Err(ErrCode::InvalidRequest)
        );
        assert_eq!(
            update_keys(&t, [("MaxBurstLength", "4096")]),
            Err(ErrCode::InvalidRequest)
        );
        // refused requests change neither length, even next to a valid key
        assert_eq!(
            update_keys(&t, [("MaxBurstLength", "8192"), ("MaxOutstandingR2T", "0")]),
            Err(ErrCode::InvalidRequest)
        );
        assert_eq!(bursts(&t), (65_536, 262_144));
        // both in one request, in either order
        update_keys(
            &t,
            [("MaxBurstLength", "8192"), ("FirstBurstLength", "4096")],
        )
        .unwrap();
        assert_eq!(bursts(&t), (4096, 8192));
        update_keys(
            &t,
            [
                ("FirstBurstLength", "1048576"),
                ("MaxBurstLength", "2097152"),
            ],
        )
        .unwrap();
        assert_eq!(bursts(&t), (1_048_576, 2_097_152));
    }
}
