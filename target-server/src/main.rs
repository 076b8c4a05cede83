//! numatgtd: parse the command line, load the configuration, start the daemon, and stop it
//! cleanly on SIGTERM/SIGINT.

use std::process::ExitCode;

use clap::Parser;
use nix::sys::signal::{SigSet, Signal};
use target_server::cli::{Cli, iser_portals, parse_iscsi_opts};
use target_server::mgmt::socket::MgmtSocket;
use target_server::runtime::{Daemon, RuntimeConfig};

#[global_allocator]
static ALLOC: target_server::alloc_count::CountingAlloc = target_server::alloc_count::CountingAlloc;

/// The configuration file a start loads: `--config`, or with `--save-config` the saved
/// configuration when it was written after it (or there is no `--config`).
fn config_source(cli: &Cli) -> Option<std::path::PathBuf> {
    use target_server::saved::{self, Source};
    if !cli.save_config {
        return cli.config.clone();
    }
    match saved::source(cli.config.as_deref(), &cli.state_dir) {
        Source::Saved(p) => {
            match &cli.config {
                Some(c) => tracing::info!(saved = %p.display(), config = %c.display(),
                    "loading the saved configuration (written after the --config file)"),
                None => tracing::info!(saved = %p.display(), "loading the saved configuration"),
            }
            Some(p)
        }
        Source::Config(c) => {
            let saved = saved::path(&cli.state_dir);
            if saved.exists() {
                tracing::info!(config = %c.display(), saved = %saved.display(),
                    "the --config file was written after the saved configuration: loading it");
            }
            Some(c)
        }
        Source::Nothing => None,
    }
}

/// The runtime configuration: the command line over the configuration file (or, after
/// a handover, over the running configuration the old numatgtd passed on: `handed`).
fn load(cli: &Cli, handed: Option<&str>) -> Result<RuntimeConfig, String> {
    let mut iscsi = Vec::new();
    for s in &cli.iscsi {
        iscsi.push(parse_iscsi_opts(s)?);
    }
    let cli_portals: Vec<std::net::SocketAddr> = iscsi.iter().filter_map(|o| o.portal).collect();
    let cli_iser = iser_portals(&cli.iser)?;
    let file = if handed.is_some() {
        None
    } else {
        config_source(cli)
    };
    let mut cfg = match (&file, cli.demo) {
        // the running configuration holds the demo targets already
        (None, _) if handed.is_some() => {
            config::parse(handed.unwrap_or_default(), "the handed-over configuration")
                .map_err(|e| e.to_string())?
        }
        (Some(path), _) => {
            // numatgt YAML, or tgt's targets.conf (by extension `.conf` or by its content)
            let imported = config::load(path).map_err(|e| e.to_string())?;
            for w in &imported.warnings {
                tracing::warn!("{}: {w}", path.display());
            }
            let mut cfg = imported.config;
            if cli.demo {
                let demo = config::Config::demo(&cli.state_dir, &[]);
                cfg.targets.extend(demo.targets);
            }
            cfg
        }
        (None, true) => {
            let portals = if cli_portals.is_empty() {
                vec!["127.0.0.1:3260".parse().map_err(|e| format!("{e}"))?]
            } else {
                cli_portals.clone()
            };
            config::Config::demo(&cli.state_dir, &portals)
        }
        (None, false) => {
            // as tgtd: no targets yet, listening on every address (IPv4 and IPv6) unless
            // --iscsi names portals; tgtadm / tgt-admin configure the rest
            let cfg = config::Config {
                portals: [
                    std::net::SocketAddr::from(([0u8; 4], config::ISCSI_PORT)),
                    std::net::SocketAddr::from(([0u16; 8], config::ISCSI_PORT)),
                ]
                .into_iter()
                .map(config::PortalConfig::new)
                .collect(),
                ..config::Config::default()
            };
            tracing::info!(
                "no --config: starting with no targets; waiting for tgtadm on the management socket"
            );
            cfg
        }
    };
    if !cli_portals.is_empty() {
        cfg.portals = cli_portals
            .iter()
            .map(|&addr| config::PortalConfig {
                addr,
                nop_interval: None,
                nop_count: None,
            })
            .collect();
    }
    // --iser portal= replaces `iser_portals` (none given: the file's, or tgtd's default of
    // 0.0.0.0:3260 when the host has an RDMA device; --demo included)
    if let Some(list) = cli_iser {
        cfg.iser_portals = Some(list.into_iter().map(config::PortalConfig::new).collect());
    }
    for o in &iscsi {
        if let Some(v) = o.nop_interval {
            cfg.iscsi.nop_interval = v;
        }
        if let Some(v) = o.nop_count {
            cfg.iscsi.nop_count = v;
        }
    }
    if let Some(a) = cli.metrics {
        cfg.metrics.address = a;
    }
    if let Some(size) = cli.cache_size {
        cfg.cache = cfg
            .cache
            .with_size(size)
            .map_err(|e| format!("--cache-size: {e}"))?;
    }
    if cli.metrics_session_info {
        cfg.metrics.session_info = true;
    }
    Ok(RuntimeConfig {
        state_dir: cli.state_dir.clone(),
        numa_nodes: cli.numa_nodes.or(cfg.numa.nodes),
        event_threads: cli.event_threads.or(cfg.threads.event_threads),
        io_engine: cli.io_engine.unwrap_or(cfg.threads.io_engine),
        inherited: Default::default(),
        busy_poll: std::time::Duration::from_micros(u64::from(
            cli.busy_poll.unwrap_or(cfg.threads.busy_poll_us),
        )),
        io_threads: cli
            .nr_iothreads
            .or(cfg.threads.io_threads)
            .unwrap_or(8)
            .max(1),
        config: cfg,
    })
}

/// A start after a handover that cannot go on: a takeover tells the management client
/// and starts the previous executable again in this process; otherwise the daemon exits.
fn give_up(incoming: Option<target_server::handover::Incoming>, e: &str) -> ExitCode {
    tracing::error!("{e}");
    eprintln!("numatgtd: {e}");
    if let Some(i) = incoming {
        let e = i.fall_back(e);
        tracing::error!("handover: {e}");
    }
    ExitCode::from(1)
}

fn main() -> ExitCode {
    target_server::handover::record_start();
    // packaging: `numatgtd --generate man|bash|zsh` prints numatgtd(8) or a completion
    // script made from the clap definitions (cli.rs) and exits before anything starts
    if let Some(code) = target_server::cli::generate_if_requested() {
        return code;
    }
    let cli = Cli::parse();
    // before anything logs; without -f the lines go to syslog (and to stderr until detached)
    let logging = target_server::logging::init(cli.debug, !cli.foreground);
    target_server::set_sanitize_rate_limit_mib(cli.sanitize_rate);
    // started with a handover socket (numatgtadm --upgrade): a check of this executable,
    // or this process taking over from the numatgtd it was (or going back to it)
    use target_server::handover::wire::Mode;
    let mut incoming = match target_server::handover::incoming() {
        None => None,
        Some(Ok(i)) => Some(i),
        Some(Err(e)) => {
            tracing::error!("handover: {e}");
            eprintln!("numatgtd: handover: {e}");
            return ExitCode::from(1);
        }
    };
    let loaded = load(&cli, incoming.as_ref().map(|i| i.offer.config.as_str()));
    if let Some(i) = incoming.as_ref().filter(|i| i.offer.mode == Mode::Check) {
        // a trial: the configuration as this executable reads it, then exit
        let r = loaded.as_ref().map(|_| ()).map_err(Clone::clone);
        i.answer_check(&r);
        return ExitCode::from(u8::from(r.is_err()));
    }
    let mut rc = match loaded {
        Ok(rc) => rc,
        Err(e) => return give_up(incoming, &e),
    };
    if let Some(i) = &mut incoming {
        tracing::info!(from_pid = i.offer.from_pid, from_version = %i.offer.from_version,
            mode = ?i.offer.mode, "handover: taking over from the previous numatgtd");
        rc.inherited = std::mem::take(&mut i.inherited);
    }
    if incoming.is_some() {
        // the old daemon detached already: this one runs where it ran
        if !cli.foreground {
            logging.detached();
        }
    } else if !cli.foreground {
        // as tgtd: detach unless -f, and log to syslog from here on. stdin, stdout and
        // stderr stay until the daemon is up, so that a failure to start (the lock, a
        // portal) still reaches the terminal
        if let Err(e) = nix::unistd::daemon(true, true) {
            eprintln!("numatgtd: cannot daemonize: {e}");
            return ExitCode::from(1);
        }
        logging.detached();
    }
    // block the stop signals in every thread; the main thread waits for them
    let mut sigs = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ] {
        sigs.add(s);
    }
    if let Err(e) = sigs.thread_block() {
        eprintln!("numatgtd: cannot block signals: {e}");
        return ExitCode::from(1);
    }
    // the lock is taken after daemonizing (lockf locks are not inherited across fork) and
    // before anything starts, so a second daemon on the same control port stops here
    let sock_path = target_server::mgmt::socket_path(cli.control_port);
    let passed_mgmt = incoming.as_mut().and_then(|i| i.mgmt.take());
    let mgmt = match passed_mgmt {
        Some(l) => MgmtSocket::adopt(&sock_path, l),
        None => MgmtSocket::bind(&sock_path),
    };
    let mgmt = match mgmt {
        Ok(m) => m,
        Err(e) => return give_up(incoming, &e.to_string()),
    };
    // iSER: which RDMA devices there are (logged; tgtadm shows the LLD ready or error)
    target_server::rdma_probe::probe();
    let mut daemon = match Daemon::start(rc) {
        Ok(d) => d,
        Err(e) => return give_up(incoming, &e.to_string()),
    };
    let mut ctx = daemon.mgmt_ctx();
    ctx.debug = Some(logging.debug_switch());
    {
        let mut loaded = ctx.loaded.lock().unwrap_or_else(|p| p.into_inner());
        loaded.path = cli.config.clone();
        loaded.portals_from_cli = cli
            .iscsi
            .iter()
            .any(|s| parse_iscsi_opts(s).ok().and_then(|o| o.portal).is_some());
        loaded.iser_portals_from_cli = matches!(iser_portals(&cli.iser), Ok(Some(_)));
        loaded.metrics_from_cli = cli.metrics.is_some() || cli.metrics_session_info;
        if cli.demo && cli.config.is_some() {
            loaded.demo = config::Config::demo(&cli.state_dir, &[]).targets;
        }
    }
    if cli.save_config {
        ctx.saved = Some(target_server::saved::path(&cli.state_dir));
        // what the daemon started from is what a restart starts from
        target_server::saved::after_change(&ctx);
    }
    let reload_ctx = ctx.clone();
    let mgmt = match mgmt.spawn(ctx) {
        Ok(h) => h,
        Err(e) => {
            daemon.stop();
            return give_up(incoming, &e.to_string());
        }
    };
    // up: a detached daemon that logs to syslog lets go of the terminal (/dev/null)
    if !cli.foreground
        && let Err(e) = logging.release_stdio()
    {
        tracing::warn!("cannot point stdin, stdout and stderr at /dev/null: {e}");
    }
    // systemd (Type=notify): the portals are listening and every LUN is open (after an
    // upgrade: the same main process, a new executable)
    target_server::sd_notify::notify(&format!(
        "READY=1\nMAINPID={}\nSTATUS=serving on {}",
        std::process::id(),
        daemon
            .listening()
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    ));
    if let Some(mut i) = incoming {
        i.served();
    }
    loop {
        match sigs.wait() {
            Ok(Signal::SIGHUP) => {
                target_server::sd_notify::notify("RELOADING=1");
                match target_server::reload::reload(&reload_ctx, None) {
                    Ok(summary) => tracing::info!("SIGHUP: {summary}"),
                    Err(e) => tracing::error!("SIGHUP: reload failed, nothing changed: {e}"),
                }
                target_server::sd_notify::notify("READY=1");
            }
            Ok(Signal::SIGUSR2) => {
                // live upgrade: numatgtadm --upgrade (a request waits) or kill -USR2
                let mut req = target_server::mgmt::upgrade_request::take_request();
                let binary = req.as_ref().and_then(|r| r.binary.clone());
                let client = req.as_mut().and_then(|r| r.client.take());
                target_server::sd_notify::notify("STATUS=upgrading");
                use target_server::handover::Failure;
                // returns only when the upgrade did not happen
                match target_server::handover::upgrade(
                    daemon,
                    &mgmt,
                    &reload_ctx,
                    binary.as_deref(),
                    client,
                ) {
                    Failure::Refused(d, why) => {
                        daemon = *d;
                        mgmt.resume_accepting();
                        tracing::error!("upgrade refused, this numatgtd goes on serving: {why}");
                        target_server::sd_notify::notify("STATUS=serving");
                        if let Some(req) = req {
                            req.answer(Err(format!("{why}; the running numatgtd goes on serving")));
                        }
                    }
                    Failure::Lost(why, resume) => {
                        let answer = format!(
                            "upgrade failed: {why}; the previous numatgtd starts again (same pid)"
                        );
                        tracing::error!("{answer}");
                        let e = resume.exec_self(&answer);
                        tracing::error!("upgrade: {e}");
                        return ExitCode::from(1);
                    }
                }
            }
            Ok(Signal::SIGUSR1) => {
                daemon.report();
                let (allocs, bytes) = target_server::alloc_count::event_thread_allocations();
                tracing::info!(
                    "alloc report: event_thread_allocs={allocs} event_thread_alloc_bytes={bytes}"
                );
            }
            Ok(sig) => {
                tracing::info!("{sig:?}: stopping");
                break;
            }
            Err(e) => {
                tracing::error!("sigwait failed: {e}");
                break;
            }
        }
    }
    target_server::sd_notify::notify("STOPPING=1");
    daemon.stop();
    // the socket file stays (as tgtd's): `tgtadm --op delete --mode system` waits for
    // ECONNREFUSED on it
    tracing::info!("numatgtd stopped");
    ExitCode::SUCCESS
}
