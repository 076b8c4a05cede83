//! Turns the raw YAML structures into the validated [`Config`]: applies the
//! defaults and checks every rule (names, ranges, duplicates, sizes, paths),
//! reporting the first problem as a [`ConfigError`] located in the text.

use std::collections::HashMap;

use crate::error::ConfigError;
use crate::model::{
    CacheMode, Config, DiscoveryAuth, IoEngine, IscsiParams, NumaConfig, PortalConfig,
    TargetConfig, ThreadConfig, default_portal_addr,
};
use crate::raw::{List, RawConfig, Scalar, Word};
use crate::size::parse_size;
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
    /// `threads.busy_poll_us`, microseconds (at most 10 ms: longer is a spinning thread).
    pub const BUSY_POLL_US: (u64, u64) = (0, 10_000);
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
    /// `limits.max_sessions` and a target's `max_sessions` (TSIHs are 16 bits).
    pub const MAX_SESSIONS: (u64, u64) = (1, 65_535);
    /// `limits.max_connections`.
    pub const MAX_CONNECTIONS: (u64, u64) = (1, 1 << 20);
    /// `limits.login_timeout`, seconds.
    pub const LOGIN_TIMEOUT: (u64, u64) = (1, 3600);
    /// `limits.max_mgmt_clients`.
    pub const MAX_MGMT_CLIENTS: (u64, u64) = (1, 1024);
    /// `qos.iops`, `qos.read_iops`, `qos.write_iops`: commands per second (0 = no limit).
    pub const QOS_IOPS: (u64, u64) = (0, 100_000_000);
    /// `qos.bps`, `qos.read_bps`, `qos.write_bps`: bytes per second (0 = no limit), at
    /// most 2^50 (1 PiB/s).
    pub const QOS_BPS: (u64, u64) = (0, 1 << 50);
    /// `qos.burst`, in milliseconds (written in seconds): at most an hour (0 = no burst).
    pub const QOS_BURST_MS: (u64, u64) = (0, 3_600_000);
    /// `qos.burst_factor`, in percent of the limits (written as a factor, 1.01 ..= 100).
    pub const QOS_BURST_PERCENT: (u64, u64) = (101, 10_000);
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
    let iser_portals = match raw.iser_portals {
        None => None,
        Some(list) => Some(iser_portals(ctx, &list)?),
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
        if let Some(n) = t.busy_poll_us {
            threads.busy_poll_us = ctx.range32("threads.busy_poll_us", n, limits::BUSY_POLL_US)?;
        }
        if let Some(w) = &t.io_engine {
            threads.io_engine = IoEngine::parse(&w.0).ok_or_else(|| {
                ctx.err(
                    "threads.io_engine",
                    format!("must be auto, io_uring or threads (got {:?})", w.0),
                )
            })?;
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
    let metrics = metrics(ctx, raw.metrics.as_ref())?;
    let limits = network::limits_section(ctx, raw.limits.as_ref())?;
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
        iser_portals,
        numa,
        threads,
        iscsi,
        cache,
        router,
        metrics,
        limits,
        accounts,
        discovery_auth,
        targets,
    })
}

pub(crate) fn item_path(p: &str, l: &List, j: usize) -> String {
    if l.single {
        p.to_string()
    } else {
        format!("{p}[{j}]")
    }
}

pub(super) fn check_nonempty(ctx: &Ctx<'_>, p: &str, l: &List) -> R<()> {
    if l.items.is_empty() {
        return Err(ctx.err(
            p,
            "empty list; write [ALL] to allow any, or leave the key out",
        ));
    }
    Ok(())
}

pub(super) fn ident(ctx: &Ctx<'_>, path: &str, v: Option<String>, max: usize) -> R<Option<String>> {
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

mod caching;
mod network;
mod targets;

use caching::{cache, metrics, router};
use network::{check_bursts, iscsi_override, iser_portals, portals};
pub use targets::CHANGER_KEYS;
use targets::target;

pub(crate) use network::portal_from_option;
