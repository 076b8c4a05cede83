//! The `cache:`, `router:` and `metrics:` sections: block cache sizing, modes, dirty limit,
//! routing, the metrics server's address.

use super::{Ctx, R, limits};

use crate::model::{
    CacheSettings, CacheSize, DirtyLimit, MetricsAddress, MetricsSettings, RouterSettings,
};
use crate::raw::{RawCache, RawMetrics, RawRouter, Scalar};
use crate::size::format_size;

/// The `cache:` section: each value in its range, then the rules between them
/// (reported at the key that was written, the first of those involved).
pub(super) fn cache(ctx: &Ctx<'_>, raw: Option<&RawCache>) -> R<CacheSettings> {
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
        warm_restart: r.warm_restart.map_or(d.warm_restart, |b| b.0),
        memory: match &r.memory {
            None => d.memory,
            Some(w) => crate::model::CacheMemory::parse(&w.0).ok_or_else(|| {
                ctx.err(
                    "cache.memory",
                    format!("must be auto, shared or private (got {:.40})", w.0),
                )
            })?,
        },
    })
}

/// `cache.dirty_limit`: `N%` (1..=100) of `size_per_node`, or a size, in
/// either case at least one cache block and at most a fixed `size_per_node` (with `auto`,
/// an absolute limit is capped at the size the daemon picks).
pub(super) fn dirty_limit(
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
pub(super) fn router(ctx: &Ctx<'_>, raw: Option<&RawRouter>) -> R<RouterSettings> {
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

/// The `metrics:` section.
pub(super) fn metrics(ctx: &Ctx<'_>, raw: Option<&RawMetrics>) -> R<MetricsSettings> {
    let Some(m) = raw else {
        return Ok(MetricsSettings::default());
    };
    let address = match &m.address {
        None => MetricsAddress::Default,
        Some(a) => MetricsAddress::parse(a).map_err(|e| ctx.err("metrics.address", e))?,
    };
    Ok(MetricsSettings {
        address,
        session_info: m.session_info.is_some_and(|b| b.0),
    })
}
