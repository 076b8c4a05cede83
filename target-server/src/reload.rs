//! Configuration reload (SIGHUP, `systemctl reload`, `numatgtadm --reload FILE`): the file
//! is loaded and validated as at start (YAML or targets.conf); nothing changes if it is
//! invalid. It is compared with the configuration loaded last (`config::diff`) and only what
//! differs is touched: targets removed from the file go (their sessions are closed, their
//! cached data written back); changed targets are rebuilt from the file (their sessions are
//! closed and the initiators log in again); added targets appear; portals are bound and
//! closed, TCP and iSER alike (a portal the daemon started with stays until restart);
//! accounts and discovery authentication are replaced. Sessions of unchanged targets
//! never notice. Settings that only apply at start (cache sizing, NUMA, threads) are
//! reported as needing a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::mgmt::Ctx;
use crate::registry::{Accounts, Target};

/// What the running daemon was configured from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file given with `--config` (reload reads it again when no other is named).
    pub path: Option<PathBuf>,
    /// The configuration as last applied.
    pub(crate) config: config::Config,
    /// Portals came from the command line (`--iscsi portal=`): the file's are ignored.
    pub portals_from_cli: bool,
    /// iSER portals came from the command line (`--iser portal=`): the file's are ignored.
    pub iser_portals_from_cli: bool,
    /// The metrics settings came from the command line (`--metrics`): the file's are ignored.
    pub metrics_from_cli: bool,
    /// Targets added by `--demo`, kept across reloads.
    pub demo: Vec<config::TargetConfig>,
}

/// [`Loaded`] shared by the management socket and the SIGHUP handler.
pub type Shared = Arc<Mutex<Loaded>>;

/// How long a reload waits for the sessions of a removed or changed target to close.
const SESSION_CLOSE_WAIT: Duration = Duration::from_secs(10);

/// Applies `path` (or the file the daemon was started with). Returns a summary for the log
/// and for `numatgtadm --reload`, or why nothing was changed.
///
/// The steps: read the file into the next configuration; compare it with the running one;
/// open the added and changed targets (any failure leaves the daemon as it was); retire the
/// removed and changed ones; put the new ones in service; replace the accounts and limits;
/// bind and close portals; report.
pub fn reload(ctx: &Ctx, path: Option<&Path>) -> Result<String, String> {
    let mut loaded = ctx.loaded.lock().unwrap_or_else(|p| p.into_inner());
    let path = match path.map(Path::to_path_buf).or_else(|| loaded.path.clone()) {
        Some(p) => p,
        None => return Err("no configuration file to reload (started without --config)".into()),
    };
    let next = next_config(&loaded, &path)?;
    let diff = config::diff(&loaded.config, &next);
    if diff.is_empty() {
        loaded.path = Some(path);
        return Ok("configuration unchanged".into());
    }
    for what in &diff.needs_restart {
        tracing::warn!("reload: {what} changed; it takes effect at the next start");
    }
    // open everything new first: a target that cannot be opened leaves the daemon as it was
    let opened = open_new_targets(ctx, &diff, &next)?;
    // now replace: the old versions go first (sessions closed, dirty data written back)
    let closed = retire_replaced(ctx, &diff);
    crate::alua::start_all(&opened, ctx.cache.as_ref());
    // the tapes of the new drives, now that the old ones let go of them; the changers'
    // drives then get the cartridges their libraries hold
    crate::backend::tape::load_deferred(&opened);
    ctx.registry.update_targets(|ts| ts.extend(opened));
    crate::backend::changer::settle(&ctx.registry);
    apply_accounts(ctx, &diff, &next);
    if diff.limits_changed {
        // in force at once: new connections, logins and management clients see them
        ctx.registry.limits.apply(&next.limits);
    }
    apply_qos(ctx, &diff, &next);
    let portal_errors = apply_portals(ctx, &diff);
    let summary = summary(&path, &diff, closed, &portal_errors);
    loaded.config = next;
    loaded.path = Some(path);
    crate::saved::after_change(ctx);
    Ok(summary)
}

/// LUNs whose QoS limits alone changed take them at once: their sessions go on, their held
/// commands keep their times, the next ones are charged at the new rates.
fn apply_qos(ctx: &Ctx, diff: &config::ConfigDiff, next: &config::Config) {
    for (iqn, number) in &diff.qos_changed {
        let (Some(t), Some(tc)) = (ctx.registry.target(iqn), next.target(iqn)) else {
            continue;
        };
        let (Some(lun), Some(lc)) = (t.lun_set().map.get(number).cloned(), tc.lun(*number)) else {
            continue;
        };
        let q = lc.effective_qos(tc);
        lun.qos.set(&q, crate::io_stats::now_ns());
        tracing::info!(target = %t.iqn, lun = number, qos = %crate::mgmt::show::qos_text(&q),
            "reload: QoS limits set");
    }
}

/// The configuration `path` holds (its warnings logged), with what does not come from the
/// file kept as it runs: the `--demo` targets, and the portals and metrics settings given
/// on the command line.
fn next_config(loaded: &Loaded, path: &Path) -> Result<config::Config, String> {
    let imported = config::load(path).map_err(|e| e.to_string())?;
    for w in &imported.warnings {
        tracing::warn!("{}: {w}", path.display());
    }
    let mut next = imported.config;
    next.targets.extend(loaded.demo.iter().cloned());
    if loaded.portals_from_cli {
        next.portals = loaded.config.portals.clone();
    }
    if loaded.iser_portals_from_cli {
        next.iser_portals = loaded.config.iser_portals.clone();
    }
    if loaded.metrics_from_cli {
        next.metrics = loaded.config.metrics;
    }
    Ok(next)
}

/// Opens the added and changed targets of `next`, not yet in service: the first that
/// cannot be opened (or asks for a tid another target keeps) is the error.
fn open_new_targets(
    ctx: &Ctx,
    diff: &config::ConfigDiff,
    next: &config::Config,
) -> Result<Vec<Arc<Target>>, String> {
    let rebuild: Vec<&str> = diff
        .added
        .iter()
        .map(String::as_str)
        .chain(diff.changed.iter().map(|c| c.iqn.as_str()))
        .collect();
    let state_dir = ctx
        .registry
        .state_dir()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut opened: Vec<Arc<Target>> = Vec::new();
    // the tids of the targets that stay, then of those opened so far
    let mut used: Vec<u32> = ctx
        .registry
        .targets()
        .iter()
        .filter(|t| !rebuild.iter().any(|i| t.iqn.eq_ignore_ascii_case(i)))
        .map(|t| t.tid)
        .collect();
    for iqn in &rebuild {
        let Some(tc) = next
            .targets
            .iter()
            .find(|t| t.iqn.eq_ignore_ascii_case(iqn))
        else {
            continue;
        };
        let tid = pick_tid(ctx, iqn, tc.tid, &used)?;
        used.push(tid);
        let reg = Arc::clone(&ctx.registry);
        let mut ids = move |_lun: u64| reg.alloc_cache_id();
        let t = crate::runtime::open_target(next, tc, tid, &mut ids, &state_dir, true)
            .map_err(|e| format!("{e}"))?;
        opened.push(Arc::new(t));
    }
    Ok(opened)
}

/// The tid of target `iqn`: the one the file gives (refused when `used`), else the one it
/// runs with (if free), else the lowest free one.
fn pick_tid(ctx: &Ctx, iqn: &str, asked: Option<u32>, used: &[u32]) -> Result<u32, String> {
    match asked {
        Some(t) if used.contains(&t) => Err(format!("{iqn}: tid {t} is in use by another target")),
        Some(t) => Ok(t),
        None => Ok(ctx
            .registry
            .target(iqn)
            .map(|t| t.tid)
            .filter(|t| !used.contains(t))
            .unwrap_or_else(|| (1..).find(|n| !used.contains(n)).unwrap_or(u32::MAX))),
    }
}

/// Retires the removed and the changed targets (see [`retire`]). Returns the number of
/// sessions closed.
fn retire_replaced(ctx: &Ctx, diff: &config::ConfigDiff) -> usize {
    let mut closed = 0usize;
    for iqn in diff
        .removed
        .iter()
        .chain(diff.changed.iter().map(|c| &c.iqn))
    {
        closed += retire(ctx, iqn);
    }
    closed
}

/// CHAP accounts and discovery authentication replaced from `next` when they changed.
fn apply_accounts(ctx: &Ctx, diff: &config::ConfigDiff, next: &config::Config) {
    if !diff.accounts_changed.is_empty() || diff.discovery_auth_changed {
        *ctx.registry.accounts() = Accounts::from_config(next);
    }
}

/// iSCSI and iSER portals closed and bound as the file says, as tgtadm's `--mode portal`
/// does: a portal added at run time (by tgtadm or an earlier reload) can go, one the daemon
/// started with stays until restart (reported `Fixed`); a changed portal's NOP settings
/// apply at the next start. Returns what could not be done (also logged).
fn apply_portals(ctx: &Ctx, diff: &config::ConfigDiff) -> Vec<String> {
    let mut portal_errors = Vec::new();
    if let Some(acceptor) = &ctx.portals {
        for a in &diff.portals_removed {
            if let Err(e) = acceptor.remove(*a) {
                portal_errors.push(format!("portal {a}: {e:?}"));
            }
        }
        for a in &diff.portals_added {
            if let Err(e) = acceptor.add(*a) {
                portal_errors.push(format!("portal {a}: {e:?}"));
            }
        }
        apply_iser_portals(acceptor, diff, &mut portal_errors);
    }
    for a in &diff.iser_portals_changed {
        portal_errors.push(format!(
            "iser portal {a} changed: takes effect at the next start"
        ));
    }
    for e in &portal_errors {
        tracing::warn!("reload: {e}");
    }
    portal_errors
}

/// The iSER half of [`apply_portals`].
#[cfg(feature = "iser")]
fn apply_iser_portals(
    acceptor: &crate::mgmt::portals::PortalAcceptor,
    diff: &config::ConfigDiff,
    errors: &mut Vec<String>,
) {
    for a in &diff.iser_portals_removed {
        if let Err(e) = acceptor.remove_iser(*a) {
            errors.push(format!("iser portal {a}: {e:?}"));
        }
    }
    for a in &diff.iser_portals_added {
        if let Err(e) = acceptor.add_iser(*a) {
            errors.push(format!("iser portal {a}: {e:?}"));
        }
    }
}

/// Without iSER a portal cannot be added.
#[cfg(not(feature = "iser"))]
fn apply_iser_portals(
    _acceptor: &crate::mgmt::portals::PortalAcceptor,
    diff: &config::ConfigDiff,
    errors: &mut Vec<String>,
) {
    for a in diff
        .iser_portals_added
        .iter()
        .chain(&diff.iser_portals_removed)
    {
        errors.push(format!(
            "iser portal {a}: this numatgtd is built without iSER"
        ));
    }
}

/// The one-line summary of an applied reload.
fn summary(
    path: &Path,
    diff: &config::ConfigDiff,
    closed: usize,
    portal_errors: &[String],
) -> String {
    format!(
        "reloaded {}: {} added, {} changed, {} removed, {} unchanged targets; {} sessions closed{}{}",
        path.display(),
        diff.added.len(),
        diff.changed.len(),
        diff.removed.len(),
        diff.unchanged.len(),
        closed,
        if diff.needs_restart.is_empty() {
            String::new()
        } else {
            format!("; needs a restart: {}", diff.needs_restart.join(", "))
        },
        if portal_errors.is_empty() {
            String::new()
        } else {
            format!("; {}", portal_errors.join("; "))
        },
    )
}

/// Takes target `iqn` out of service: no new logins, its sessions closed (waited for), its
/// LUNs' dirty cached data written back and synced, their cache entries dropped. Returns
/// the number of sessions closed.
fn retire(ctx: &Ctx, iqn: &str) -> usize {
    let Some(t) = ctx.registry.target(iqn) else {
        return 0;
    };
    ctx.registry
        .update_targets(|ts| ts.retain(|x| !Arc::ptr_eq(x, &t)));
    let sessions = ctx.registry.sessions_of(&t.iqn);
    for s in &sessions {
        ctx.control.close(s.owner, "target reconfigured");
    }
    let start = Instant::now();
    while !ctx.registry.sessions_of(&t.iqn).is_empty() && start.elapsed() < SESSION_CLOSE_WAIT {
        std::thread::sleep(Duration::from_millis(10));
    }
    for lun in t.lun_set().map.values() {
        if let Err(e) = ctx.sync_lun(lun) {
            tracing::error!(target = %t.iqn, lun = lun.number,
                "reload: writing back the LUN's cached data failed: {e}");
        }
        if let Some(c) = &ctx.cache {
            c.invalidate_lun(lun.cache_id);
        }
    }
    tracing::info!(target = %t.iqn, tid = t.tid, sessions = sessions.len(), "reload: target retired");
    sessions.len()
}
