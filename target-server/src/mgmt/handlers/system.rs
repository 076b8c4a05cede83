//! `--mode sys` (show, update State/debug, delete = clean stop as SIGTERM), `--mode lld`,
//! `--mode portal` (show), `--mode session` and `--mode conn` (show, forced logout).

use crate::mgmt::show;
use crate::mgmt::{Ctx, Reply};
use tgtadm_wire::{ErrCode, Op, Payload, ReqHeader};

use super::parse_bool;
use crate::mgmt::portals::PortalError;

fn op_word(op: Op) -> &'static str {
    if op == Op::New { "new" } else { "delete" }
}
use super::target::lookup;

pub fn system(ctx: &Ctx, op: Op, p: &Payload) -> Reply {
    let reg = &ctx.registry;
    match op {
        // numatgt's extension: `dump=yaml` asks for the running configuration as YAML
        Op::Show if p.get("dump") == Some("yaml") => Ok(crate::mgmt::dump::yaml(reg, &ctx.base)),
        Op::Show => Ok(show::system(reg)),
        Op::Stats => Ok(show::STAT_HEADER.to_string()),
        // numatgt's extension: `reload=FILE` applies a configuration file (numatgtadm
        // --reload); the answer is the summary, or `reload failed: why`
        Op::Update if p.get("reload").is_some() => {
            let path = p
                .get("reload")
                .filter(|f| !f.is_empty())
                .map(std::path::Path::new);
            Ok(match crate::reload::reload(ctx, path) {
                Ok(summary) => {
                    tracing::info!("management request: {summary}");
                    format!("{summary}\n")
                }
                Err(e) => {
                    tracing::error!("management request: reload failed, nothing changed: {e}");
                    format!("reload failed: {e}\n")
                }
            })
        }
        // numatgt's extension: `upgrade=BINARY` hands the daemon over to a new numatgtd
        // (numatgtadm --upgrade; empty: the executable it started from); the answer is the
        // summary, or `upgrade failed: why`
        Op::Update if p.get("upgrade").is_some() => {
            let binary = p
                .get("upgrade")
                .filter(|f| !f.is_empty())
                .map(std::path::PathBuf::from);
            Ok(match crate::mgmt::upgrade_request::request(binary) {
                Ok(summary) => format!("{summary}\n"),
                Err(e) => format!("upgrade failed: {e}\n"),
            })
        }
        Op::Update => {
            if p.pairs.is_empty() {
                return Err(ErrCode::InvalidRequest);
            }
            // limits: all values checked before any is applied
            let mut limits = reg.limits.settings();
            let mut limits_changed = false;
            for (k, v) in &p.pairs {
                if let Some(changed) = limit_key(&mut limits, k, v)? {
                    limits_changed |= changed;
                }
            }
            if limits_changed {
                tracing::info!(?limits, "management request: limits updated");
                reg.limits.apply(&limits);
            }
            for (k, v) in &p.pairs {
                if is_limit_key(k) {
                    continue;
                }
                match k.as_str() {
                    "State" => {
                        let offline = match v.as_str() {
                            "offline" => true,
                            "ready" => false,
                            _ => return Err(ErrCode::InvalidRequest),
                        };
                        reg.system().offline = offline;
                    }
                    "debug" => {
                        let on = parse_bool(v)?;
                        reg.system().debug = on;
                        if let Some(switch) = &ctx.debug {
                            switch(on);
                        }
                    }
                    "iSNS" | "iSNSServerIP" | "iSNSServerPort" | "iSNSAccessControl" => {
                        return Err(ErrCode::UnsupportedOperation);
                    }
                    _ => return Err(ErrCode::InvalidRequest),
                }
            }
            Ok(String::new())
        }
        // the socket thread stops the daemon once the answer is sent
        Op::Delete => Ok(String::new()),
        _ => Err(ErrCode::UnsupportedOperation),
    }
}

/// The `--mode sys` keys of the limits (tgt-style names, or the `limits:` key names).
const LIMIT_KEYS: [(&str, &str); 4] = [
    ("MaxSessions", "max_sessions"),
    ("MaxConnections", "max_connections"),
    ("LoginTimeout", "login_timeout"),
    ("MaxMgmtClients", "max_mgmt_clients"),
];

fn is_limit_key(k: &str) -> bool {
    LIMIT_KEYS
        .iter()
        .any(|(a, b)| k.eq_ignore_ascii_case(a) || k.eq_ignore_ascii_case(b))
}

/// Sets limit `k` in `l` to `v` (checked against its configuration range): `Ok(None)` when
/// `k` is not a limit, `Ok(Some(changed))` when it is.
fn limit_key(l: &mut config::LimitsSettings, k: &str, v: &str) -> Result<Option<bool>, ErrCode> {
    use config::limits as r;
    if !is_limit_key(k) {
        return Ok(None);
    }
    let k = k.to_ascii_lowercase().replace('_', "");
    let (field, range) = match k.as_str() {
        "maxsessions" => (&mut l.max_sessions, r::MAX_SESSIONS),
        "maxconnections" => (&mut l.max_connections, r::MAX_CONNECTIONS),
        "logintimeout" => (&mut l.login_timeout, r::LOGIN_TIMEOUT),
        _ => (&mut l.max_mgmt_clients, r::MAX_MGMT_CLIENTS),
    };
    let n = super::target::number(v, range)?;
    let changed = *field != n;
    *field = n;
    Ok(Some(changed))
}

/// Stop the daemon as SIGTERM does (the main thread waits for it and shuts down cleanly).
pub fn shutdown_now() {
    tracing::info!("management request: system delete, stopping");
    let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGTERM);
}

pub fn lld(ctx: &Ctx, op: Op) -> Reply {
    match op {
        Op::Show => Ok(show::llds(&ctx.registry)),
        Op::Start => Ok(String::new()),
        Op::Stop => {
            if ctx.registry.targets().is_empty() {
                Ok(String::new())
            } else {
                Err(ErrCode::DriverActive)
            }
        }
        _ => Err(ErrCode::UnsupportedOperation),
    }
}

/// `--mode portal`. iSER portals (`--lld iser`) are shown; adding or removing them at run
/// time is not supported (yet): they come from `iser_portals:` / `--iser portal=`.
pub fn portal(ctx: &Ctx, op: Op, p: &Payload, lld: config::Driver) -> Reply {
    let iser = lld == config::Driver::Iser;
    match op {
        Op::Show if iser => Ok(show::portal_list(&ctx.registry.iser_portals())),
        Op::Show => Ok(show::portals(&ctx.registry)),
        Op::New | Op::Delete => {
            let Some((_, v)) = p.params.iter().find(|(k, _)| k == "portal") else {
                return Err(ErrCode::InvalidRequest);
            };
            let addr = crate::cli::parse_portal(v).map_err(|_| ErrCode::InvalidRequest)?;
            let acceptor = ctx.portals.as_ref().ok_or(ErrCode::UnsupportedOperation)?;
            let r = match (iser, op == Op::New) {
                (false, true) => acceptor.add(addr),
                (false, false) => acceptor.remove(addr),
                #[cfg(feature = "iser")]
                (true, true) => acceptor.add_iser(addr),
                #[cfg(feature = "iser")]
                (true, false) => acceptor.remove_iser(addr),
                #[cfg(not(feature = "iser"))]
                (true, _) => return Err(ErrCode::UnsupportedOperation),
            };
            r.map(|()| String::new()).map_err(|e| {
                tracing::info!(%addr, "portal {}: {e:?}", op_word(op));
                match e {
                    PortalError::Fixed => ErrCode::UnsupportedOperation,
                    _ => ErrCode::InvalidRequest,
                }
            })
        }
        _ => Err(ErrCode::UnsupportedOperation),
    }
}

pub fn session(ctx: &Ctx, op: Op, h: &ReqHeader) -> Reply {
    match op {
        Op::Show => {
            let t = lookup(ctx, h)?;
            let s = ctx.registry.sessions_of(&t.iqn);
            if !s.iter().any(|s| u64::from(s.tsih) == h.sid) {
                return Err(ErrCode::InvalidRequest);
            }
            Ok(show::target_params(&t))
        }
        _ => Err(ErrCode::UnsupportedOperation),
    }
}

pub fn connection(ctx: &Ctx, op: Op, h: &ReqHeader) -> Reply {
    match op {
        Op::Show => {
            let t = lookup(ctx, h)?;
            Ok(show::connections(&ctx.registry.sessions_of(&t.iqn)))
        }
        Op::Delete => {
            let t = lookup(ctx, h)?;
            let sessions = ctx.registry.sessions_of(&t.iqn);
            let s = sessions
                .iter()
                .find(|s| u64::from(s.tsih) == h.sid)
                .ok_or(ErrCode::NoSession)?;
            if h.cid != u32::from(s.cid) {
                return Err(ErrCode::NoConnection);
            }
            ctx.control.close(s.owner, "connection deleted by tgtadm");
            Ok(String::new())
        }
        _ => Err(ErrCode::UnsupportedOperation),
    }
}
