//! Turns the raw YAML structures into the validated [`Config`]: applies the
//! defaults and checks every rule (names, ranges, duplicates, sizes, paths),
//! reporting the first problem as a [`ConfigError`] located in the text.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::error::ConfigError;
use crate::model::{
    Account, AddressRule, BsOflags, BsType, CacheMode, CacheSettings, CacheSize, Config, Digest,
    DirtyLimit, DiscoveryAuth, Driver, IscsiParams, IscsiParamsOverride, LunConfig, NumaConfig,
    PortalConfig, RouterSettings, SenseFormat, TargetConfig, TargetState, ThreadConfig,
    default_portal_addr,
};
use crate::names::validate_iscsi_name;
use crate::net::parse_portal_addr;
use crate::raw::{
    List, RawAuth, RawCache, RawConfig, RawIscsi, RawLun, RawPortal, RawRouter, RawTarget, Scalar,
    Word,
};
use crate::size::{format_size, parse_size};
use crate::validate_auth::{accounts, auth};

/// Bounds of the configurable values other than the iSCSI keys, whose ranges are the one
/// table in [`iscsi_proto::limits`].
pub mod limits {
    /// iSCSI data lengths (RFC 7143 §13.12-13.14): 512 ..= 2^24 - 1.
    pub const DATA_LEN: (u64, u64) = iscsi_proto::limits::MAX_RECV_DATA_SEGMENT_LENGTH.bounds();
    /// `MaxQueueCmd`: commands queued per session.
    pub const MAX_QUEUE_CMD: (u64, u64) = (1, 2048);
    /// `NopInterval`, seconds.
    pub const NOP_INTERVAL: (u64, u64) = (0, 86_400);
    /// `NopCount`.
    pub const NOP_COUNT: (u64, u64) = (0, 65_535);
    /// `numa.nodes`.
    pub const NUMA_NODES: (u64, u64) = (1, 256);
    /// `threads.event_threads`.
    pub const EVENT_THREADS: (u64, u64) = (1, 4096);
    /// `threads.io_threads`, per node.
    pub const IO_THREADS: (u64, u64) = (1, 256);
    /// A LUN number.
    pub const LUN: (u64, u64) = (0, 16_383);
    /// A target id.
    pub const TID: (u64, u64) = (1, 2_147_483_647);
    /// Longest `vendor_id`, bytes.
    pub const VENDOR_ID: usize = 8;
    /// Longest `product_id`, bytes.
    pub const PRODUCT_ID: usize = 16;
    /// Longest `product_rev`, bytes.
    pub const PRODUCT_REV: usize = 4;
    /// Longest `serial`, bytes.
    pub const SERIAL: usize = 36;
    /// Longest target `alias`, bytes.
    pub const ALIAS: usize = 255;
    /// tgt's `scsi_id` (SCSI_ID_LEN).
    pub const SCSI_ID: usize = 24;
    /// Logical blocks per physical block exponent (4 bits).
    pub const LBPPBE: (u64, u64) = (0, 15);
    /// Lowest aligned LBA (14 bits).
    pub const LA_LBA: (u64, u64) = (0, 16_383);
    /// Block Limits VPD optimal transfer granularity (16 bits).
    pub const OPTIMAL_XFER_GRAN: (u64, u64) = (0, 65_535);
    /// Block Limits VPD optimal transfer length (32 bits).
    pub const OPTIMAL_XFER_LEN: (u64, u64) = (0, 4_294_967_295);
    /// `cache.block_size`: a power of two in 4 KiB ..= 1 MiB.
    pub const CACHE_BLOCK_SIZE: (u64, u64) = (4096, 1 << 20);
    /// `cache.group_blocks`: a power of two.
    pub const GROUP_BLOCKS: (u64, u64) = (1, 4096);
    /// `cache.partitions_per_node`.
    pub const PARTITIONS_PER_NODE: (u64, u64) = (1, 1024);
    /// `cache.size_per_node` must hold at least this many blocks (and one per partition).
    pub const MIN_CACHE_BLOCKS: u64 = 16;
    /// `cache.dirty_limit` as a percentage of `size_per_node`.
    pub const DIRTY_PERCENT: (u64, u64) = (1, 100);
    /// `cache.read_ahead` in blocks; also at most half the blocks per node.
    pub const READ_AHEAD: (u64, u64) = (0, 1024);
    /// `router.min_forward_bytes`: 0 ..= 16 MiB.
    pub const MIN_FORWARD_BYTES: (u64, u64) = (0, 16 << 20);
    /// `router.max_queue`.
    pub const ROUTER_MAX_QUEUE: (u64, u64) = (1, 65_535);
}

pub(crate) struct Ctx<'a> {
    pub text: &'a str,
    pub file: &'a str,
    /// For an imported targets.conf: where each field path came from
    /// (errors are then located there instead of in `text`).
    pub conf: Option<&'a crate::targets_conf::Locations>,
}

pub(crate) type R<T> = Result<T, ConfigError>;

impl Ctx<'_> {
    pub(crate) fn err(&self, path: &str, msg: impl Into<String>) -> ConfigError {
        match self.conf {
            Some(l) => l.error(path, msg),
            None => ConfigError::at_path(self.text, self.file, path, msg),
        }
    }

    fn range(&self, path: &str, v: u64, (lo, hi): (u64, u64)) -> R<u64> {
        if (lo..=hi).contains(&v) {
            Ok(v)
        } else {
            Err(self.err(path, format!("must be in {lo}..={hi} (got {v})")))
        }
    }

    fn range32(&self, path: &str, v: u64, r: (u64, u64)) -> R<u32> {
        let v = self.range(path, v, r)?;
        u32::try_from(v).map_err(|_| self.err(path, format!("too large (got {v})")))
    }

    fn auto_or(&self, path: &str, s: &Scalar, (lo, hi): (u64, u64)) -> R<Option<usize>> {
        let n = match s {
            Scalar::Text(t) if t.trim().eq_ignore_ascii_case("auto") => return Ok(None),
            Scalar::Text(t) => t.trim().parse::<i128>().ok(),
            Scalar::Int(i) => Some(*i),
        };
        match n {
            Some(n) if n >= i128::from(lo) && n <= i128::from(hi) => usize::try_from(n)
                .map(Some)
                .map_err(|_| self.err(path, "too large")),
            _ => Err(self.err(
                path,
                format!("must be auto or a number in {lo}..={hi} (got {})", show(s)),
            )),
        }
    }

    /// A byte size: an integer, or a number with a K/M/G/T suffix.
    fn size(&self, path: &str, s: &Scalar) -> R<u64> {
        match s {
            Scalar::Int(i) => u64::try_from(*i)
                .map_err(|_| self.err(path, format!("must be a size in bytes (got {i})"))),
            Scalar::Text(t) => parse_size(t).map_err(|m| self.err(path, m)),
        }
    }

    /// `numa`, `off` or `page`.
    fn cache_mode(&self, path: &str, w: &Word) -> R<CacheMode> {
        CacheMode::parse(&w.0)
            .ok_or_else(|| self.err(path, format!("must be numa, off or page (got {:?})", w.0)))
    }
}

fn show(s: &Scalar) -> String {
    match s {
        Scalar::Int(i) => i.to_string(),
        Scalar::Text(t) => format!("{t:?}"),
    }
}

pub(crate) fn build(ctx: &Ctx<'_>, raw: RawConfig) -> R<Config> {
    let portals = match raw.portals {
        None => vec![PortalConfig::new(default_portal_addr())],
        Some(list) => portals(ctx, &list)?,
    };
    let numa = NumaConfig {
        nodes: match raw.numa.and_then(|n| n.nodes) {
            Some(s) => ctx.auto_or("numa.nodes", &s, limits::NUMA_NODES)?,
            None => None,
        },
    };
    let mut threads = ThreadConfig::default();
    if let Some(t) = raw.threads {
        if let Some(s) = &t.event_threads {
            threads.event_threads =
                ctx.auto_or("threads.event_threads", s, limits::EVENT_THREADS)?;
        }
        if let Some(n) = t.io_threads {
            threads.io_threads =
                Some(ctx.range("threads.io_threads", n, limits::IO_THREADS)? as usize);
        }
    }
    let defaults = IscsiParams::default();
    let iscsi = match &raw.iscsi {
        Some(ri) => {
            let o = iscsi_override(ctx, "iscsi", ri)?;
            let p = defaults.merged_with(&o);
            check_bursts(ctx, "iscsi", &p, Some(ri), None)?;
            p
        }
        None => defaults,
    };
    let cache = cache(ctx, raw.cache.as_ref())?;
    let router = router(ctx, raw.router.as_ref())?;
    let accounts = accounts(ctx, raw.accounts.unwrap_or_default())?;
    let discovery_auth = match &raw.discovery_auth {
        Some(a) => {
            let (incoming_users, outgoing_user) = auth(ctx, "discovery_auth", a, &accounts)?;
            DiscoveryAuth {
                incoming_users,
                outgoing_user,
            }
        }
        None => DiscoveryAuth::default(),
    };
    let mut targets = Vec::new();
    for (i, rt) in raw.targets.unwrap_or_default().into_iter().enumerate() {
        targets.push(target(
            ctx,
            &format!("targets[{i}]"),
            rt,
            &iscsi,
            &accounts,
        )?);
    }
    cross_checks(ctx, &targets)?;
    Ok(Config {
        portals,
        numa,
        threads,
        iscsi,
        cache,
        router,
        accounts,
        discovery_auth,
        targets,
    })
}

/// The `cache:` section: each value in its range, then the rules between them
/// (reported at the key that was written, the first of those involved).
fn cache(ctx: &Ctx<'_>, raw: Option<&RawCache>) -> R<CacheSettings> {
    let d = CacheSettings::default();
    let Some(r) = raw else {
        return Ok(d);
    };
    let mode = match &r.mode {
        Some(w) => ctx.cache_mode("cache.mode", w)?,
        None => d.mode,
    };
    let block_size = match &r.block_size {
        None => d.block_size,
        Some(s) => {
            let b = ctx.size("cache.block_size", s)?;
            let (lo, hi) = limits::CACHE_BLOCK_SIZE;
            if !b.is_power_of_two() || !(lo..=hi).contains(&b) {
                return Err(ctx.err(
                    "cache.block_size",
                    format!(
                        "must be a power of two from {} to {} (got {b})",
                        format_size(lo),
                        format_size(hi)
                    ),
                ));
            }
            b as u32
        }
    };
    let group_blocks = match r.group_blocks {
        None => d.group_blocks,
        Some(g) => {
            let (lo, hi) = limits::GROUP_BLOCKS;
            if !g.is_power_of_two() || !(lo..=hi).contains(&g) {
                return Err(ctx.err(
                    "cache.group_blocks",
                    format!("must be a power of two in {lo}..={hi} (got {g})"),
                ));
            }
            g as u32
        }
    };
    let partitions_per_node = match r.partitions_per_node {
        None => d.partitions_per_node,
        Some(n) => ctx.range32("cache.partitions_per_node", n, limits::PARTITIONS_PER_NODE)?,
    };
    let size_per_node = match &r.size_per_node {
        None => d.size_per_node,
        Some(Scalar::Text(t)) if t.trim().eq_ignore_ascii_case("auto") => CacheSize::Auto,
        Some(s) => CacheSize::Bytes(ctx.size("cache.size_per_node", s)?),
    };
    // `auto` is resolved at start, never below what the shape needs (see
    // `CacheSettings::resolve_size`); a fixed size is checked here
    let sized = size_per_node.fixed().unwrap_or(u64::MAX);
    let blocks = sized / u64::from(block_size);
    let need = limits::MIN_CACHE_BLOCKS.max(partitions_per_node.into());
    if blocks < need {
        let key = if r.size_per_node.is_some() {
            "cache.size_per_node"
        } else if r.block_size.is_some() {
            "cache.block_size"
        } else {
            "cache.partitions_per_node"
        };
        return Err(ctx.err(
            key,
            format!(
                "size_per_node {} holds {blocks} blocks of {}, fewer than {need} \
                 (the cache needs at least {} blocks per node and one per partition)",
                format_size(sized),
                format_size(block_size.into()),
                limits::MIN_CACHE_BLOCKS
            ),
        ));
    }
    let dirty_limit = match &r.dirty_limit {
        None => d.dirty_limit,
        Some(s) => dirty_limit(ctx, s, size_per_node, block_size)?,
    };
    let read_ahead = match r.read_ahead {
        None => d.read_ahead,
        Some(n) => {
            let n = ctx.range32("cache.read_ahead", n, limits::READ_AHEAD)?;
            if u64::from(n) > blocks / 2 {
                return Err(ctx.err(
                    "cache.read_ahead",
                    format!("{n} blocks is more than half of the {blocks} cache blocks per node"),
                ));
            }
            n
        }
    };
    Ok(CacheSettings {
        mode,
        size_per_node,
        block_size,
        group_blocks,
        partitions_per_node,
        huge_pages: r.huge_pages.map_or(d.huge_pages, |b| b.0),
        dirty_limit,
        read_ahead,
    })
}

/// `cache.dirty_limit`: `N%` (1..=100) of `size_per_node`, or a size, in
/// either case at least one cache block and at most a fixed `size_per_node` (with `auto`,
/// an absolute limit is capped at the size the daemon picks).
fn dirty_limit(
    ctx: &Ctx<'_>,
    s: &Scalar,
    size_per_node: CacheSize,
    block_size: u32,
) -> R<DirtyLimit> {
    const KEY: &str = "cache.dirty_limit";
    let limit = match s {
        Scalar::Text(t) if t.trim().ends_with('%') => {
            let num = t.trim().trim_end_matches('%').trim();
            let (lo, hi) = limits::DIRTY_PERCENT;
            match num.parse::<u64>() {
                Ok(p) if (lo..=hi).contains(&p) => DirtyLimit::Percent(p as u8),
                _ => {
                    return Err(ctx.err(
                        KEY,
                        format!("a percentage must be in {lo}%..={hi}% (got {:?})", t.trim()),
                    ));
                }
            }
        }
        _ => DirtyLimit::Bytes(ctx.size(KEY, s)?),
    };
    let size_per_node = match size_per_node {
        CacheSize::Bytes(b) => b,
        // a percentage of a size known only at start always gives at least one block
        // (the daemon keeps the limit within one block and the cache)
        CacheSize::Auto if matches!(limit, DirtyLimit::Percent(_)) => return Ok(limit),
        CacheSize::Auto => u64::MAX,
    };
    let bytes = limit.bytes(size_per_node);
    let bs = u64::from(block_size);
    if bytes < bs || bytes > size_per_node {
        let what = match limit {
            DirtyLimit::Percent(p) => {
                format!("{p}% of {} is {bytes} bytes", format_size(size_per_node))
            }
            DirtyLimit::Bytes(b) => format!("{b} bytes"),
        };
        let most = if size_per_node == u64::MAX {
            String::new()
        } else {
            format!(" and at most size_per_node ({size_per_node})")
        };
        return Err(ctx.err(
            KEY,
            format!("must be at least one cache block ({bs}){most} ({what})"),
        ));
    }
    Ok(limit)
}

/// The `router:` section.
fn router(ctx: &Ctx<'_>, raw: Option<&RawRouter>) -> R<RouterSettings> {
    let d = RouterSettings::default();
    let Some(r) = raw else {
        return Ok(d);
    };
    let min_forward_bytes = match &r.min_forward_bytes {
        None => d.min_forward_bytes,
        Some(s) => {
            let v = ctx.size("router.min_forward_bytes", s)?;
            ctx.range("router.min_forward_bytes", v, limits::MIN_FORWARD_BYTES)?
        }
    };
    Ok(RouterSettings {
        min_forward_bytes,
        max_queue: match r.max_queue {
            None => d.max_queue,
            Some(n) => ctx.range32("router.max_queue", n, limits::ROUTER_MAX_QUEUE)?,
        },
        enabled: r.enabled.map_or(d.enabled, |b| b.0),
    })
}

fn portals(ctx: &Ctx<'_>, list: &[RawPortal]) -> R<Vec<PortalConfig>> {
    if list.is_empty() {
        return Err(ctx.err(
            "portals",
            "must list at least one portal (leave the key out for 0.0.0.0:3260)",
        ));
    }
    let mut out: Vec<PortalConfig> = Vec::new();
    for (i, rp) in list.iter().enumerate() {
        let path = format!("portals[{i}]");
        let addr =
            parse_portal_addr(&rp.address).map_err(|m| ctx.err(&format!("{path}.address"), m))?;
        for (j, prev) in out.iter().enumerate() {
            if let Some(why) = portal_clash(prev.addr, addr) {
                return Err(ctx.err(
                    &format!("{path}.address"),
                    format!("{addr} {why} portals[{j}] ({})", prev.addr),
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
fn portal_clash(a: SocketAddr, b: SocketAddr) -> Option<&'static str> {
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

fn digest_list(ctx: &Ctx<'_>, path: &str, l: &List) -> R<Vec<Digest>> {
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

fn iscsi_override(ctx: &Ctx<'_>, base: &str, r: &RawIscsi) -> R<IscsiParamsOverride> {
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
fn check_bursts(
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

fn target(
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
        luns,
    })
}

pub(crate) fn item_path(p: &str, l: &List, j: usize) -> String {
    if l.single {
        p.to_string()
    } else {
        format!("{p}[{j}]")
    }
}

fn check_nonempty(ctx: &Ctx<'_>, p: &str, l: &List) -> R<()> {
    if l.items.is_empty() {
        return Err(ctx.err(
            p,
            "empty list; write [ALL] to allow any, or leave the key out",
        ));
    }
    Ok(())
}

fn ident(ctx: &Ctx<'_>, path: &str, v: Option<String>, max: usize) -> R<Option<String>> {
    if let Some(s) = &v {
        if s.is_empty() || s.len() > max || !s.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(ctx.err(
                path,
                format!("must be 1 to {max} printable ASCII characters (got {s:?})"),
            ));
        }
    }
    Ok(v)
}

fn lun(ctx: &Ctx<'_>, p: &str, rl: RawLun) -> R<LunConfig> {
    let lun = ctx.range(&format!("{p}.lun"), rl.lun, limits::LUN)?;
    if let Some(w) = &rl.device_type {
        if !w.0.trim().eq_ignore_ascii_case("disk") {
            return Err(ctx.err(
                &format!("{p}.device_type"),
                format!(
                    "device type {:?} is not supported; numatgt exports disks only (disk)",
                    w.0
                ),
            ));
        }
    }
    if rl.path.is_empty() {
        return Err(ctx.err(&format!("{p}.path"), "must not be empty"));
    }
    let path = PathBuf::from(&rl.path);
    if !path.is_absolute() {
        return Err(ctx.err(
            &format!("{p}.path"),
            format!(
                "must be an absolute path (got {:?}); relative paths are not resolved",
                rl.path
            ),
        ));
    }
    let block_size = match rl.block_size {
        None => 512,
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
        bs_type: match &rl.bs_type {
            None => BsType::Rdwr,
            Some(w) => BsType::parse(&w.0).ok_or_else(|| {
                ctx.err(
                    &format!("{p}.bs_type"),
                    format!(
                        "backing-store type {:?} is not supported; numatgt serves files and \
                         block devices only (rdwr or aio)",
                        w.0
                    ),
                )
            })?,
        },
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
    })
}

/// Rules across targets: unique names and tids; a backing file is used by one
/// writable LUN only (two writable views of one file would corrupt it).
fn cross_checks(ctx: &Ctx<'_>, targets: &[TargetConfig]) -> R<()> {
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut tids: HashMap<u32, usize> = HashMap::new();
    let mut files: HashMap<&std::path::Path, (usize, usize, bool)> = HashMap::new();
    for (i, t) in targets.iter().enumerate() {
        if let Some(k) = names.insert(t.iqn.to_ascii_lowercase(), i) {
            return Err(ctx.err(
                &format!("targets[{i}].iqn"),
                format!(
                    "duplicate target name {:?}, already used by targets[{k}]",
                    t.iqn
                ),
            ));
        }
        if let Some(tid) = t.tid {
            if let Some(k) = tids.insert(tid, i) {
                return Err(ctx.err(
                    &format!("targets[{i}].tid"),
                    format!("duplicate tid {tid}, already used by targets[{k}]"),
                ));
            }
        }
        for (j, l) in t.luns.iter().enumerate() {
            if let Some(&(ti, lj, ro)) = files.get(l.path.as_path()) {
                if !(ro && l.readonly) {
                    return Err(ctx.err(
                        &format!("targets[{i}].luns[{j}].path"),
                        format!(
                            "{} is already the backing file of targets[{ti}].luns[{lj}]; \
                             a file can back several LUNs only if all are readonly",
                            l.path.display()
                        ),
                    ));
                }
            } else {
                files.insert(l.path.as_path(), (i, j, l.readonly));
            }
        }
    }
    Ok(())
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
