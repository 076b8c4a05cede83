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

fn load(cli: &Cli) -> Result<RuntimeConfig, String> {
    let mut iscsi = Vec::new();
    for s in &cli.iscsi {
        iscsi.push(parse_iscsi_opts(s)?);
    }
    let cli_portals: Vec<std::net::SocketAddr> = iscsi.iter().filter_map(|o| o.portal).collect();
    let cli_iser = iser_portals(&cli.iser)?;
    let file = config_source(cli);
    let mut cfg = match (&file, cli.demo) {
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

fn main() -> ExitCode {
    // packaging: `numatgtd --generate man|bash|zsh` prints numatgtd(8) or a completion
    // script made from the clap definitions (cli.rs) and exits before anything starts
    if let Some(code) = target_server::cli::generate_if_requested() {
        return code;
    }
    let cli = Cli::parse();
    // before anything logs; without -f the lines go to syslog (and to stderr until detached)
    let logging = target_server::logging::init(cli.debug, !cli.foreground);
    target_server::set_sanitize_rate_limit_mib(cli.sanitize_rate);
    let rc = match load(&cli) {
        Ok(rc) => rc,
        Err(e) => {
            eprintln!("numatgtd: {e}");
            return ExitCode::from(1);
        }
    };
    if !cli.foreground {
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
    let mgmt = match MgmtSocket::bind(&sock_path) {
        Ok(m) => m,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("numatgtd: {e}");
            return ExitCode::from(1);
        }
    };
    // iSER: which RDMA devices there are (logged; tgtadm shows the LLD ready or error)
    target_server::rdma_probe::probe();
    let daemon = match Daemon::start(rc) {
        Ok(d) => d,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("numatgtd: {e}");
            return ExitCode::from(1);
        }
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
    if let Err(e) = mgmt.spawn(ctx) {
        tracing::error!("{e}");
        eprintln!("numatgtd: {e}");
        daemon.stop();
        return ExitCode::from(1);
    }
    // up: a detached daemon that logs to syslog lets go of the terminal (/dev/null)
    if !cli.foreground
        && let Err(e) = logging.release_stdio()
    {
        tracing::warn!("cannot point stdin, stdout and stderr at /dev/null: {e}");
    }
    // systemd (Type=notify): the portals are listening and every LUN is open
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
