//! numatgtd's command line: tgtd's options (`-f`, `-C`, `-t`, `-d`, `--iscsi portal=…`,
//! `--iser portal=…`) plus
//! numatgt's own (`--config`, `--state-dir`, `--demo`, NUMA and thread sizing).
//!
//! The same definitions make numatgtd(8) and the bash and zsh completions: the hidden
//! `numatgtd --generate man|bash|zsh` prints them (clap_mangen, clap_complete), and
//! tools/build-deb.sh packages what the built binary prints, so the man page and the
//! completions list exactly the options `--help` shows.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};

/// numatgtd's command line (tgtd's options and numatgt's own). `long_about = None` keeps this
/// comment out of `--help`.
#[derive(Debug, Parser)]
#[command(
    name = "numatgtd",
    version,
    about = "NUMA-aware iSCSI target daemon (tgtd-compatible)",
    long_about = None
)]
pub struct Cli {
    /// Stay in the foreground (do not daemonize); logs go to stderr (detached: to syslog).
    #[arg(short = 'f', long = "foreground")]
    pub foreground: bool,

    /// Control port: the management socket is $TGT_IPC_SOCKET.N, default
    /// /var/run/tgtd/socket.N (as tgtd).
    #[arg(short = 'C', long = "control-port", default_value_t = 0)]
    pub control_port: u16,

    /// I/O worker threads per NUMA node (tgtd: per LUN).
    #[arg(short = 't', long = "nr_iothreads")]
    pub nr_iothreads: Option<usize>,

    /// Debug level: 0 = info, 1 = debug, 2+ = trace.
    #[arg(short = 'd', long = "debug")]
    pub debug: Option<u32>,

    /// iSCSI driver options, as tgtd: portal=IP:PORT[,nop_interval=S][,nop_count=N]. Repeatable.
    #[arg(long = "iscsi", value_name = "OPTIONS")]
    pub iscsi: Vec<String>,

    /// iSER driver options, as tgtd: portal=IP:PORT (IPv6 as [addr]:port, port 3260 if
    /// left out). Repeatable; replaces the configuration's `iser_portals`. Without it iSER
    /// listens on 0.0.0.0:3260 when the host has an RDMA device.
    #[arg(long = "iser", value_name = "OPTIONS")]
    pub iser: Vec<String>,

    /// YAML configuration file, or tgt's targets.conf. Without it (and without --demo)
    /// numatgtd starts with no targets, as tgtd does, and waits for tgtadm.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Directory for numatgt's state (demo LUN, persistent data).
    #[arg(
        long = "state-dir",
        value_name = "DIR",
        default_value = "/var/lib/numatgt"
    )]
    pub state_dir: PathBuf,

    /// Save every change made at run time (tgtadm, tgt-admin, numatgtadm, reloads) to
    /// STATE_DIR/saved-config.yaml, and start from it next time unless the --config file
    /// was changed after it.
    #[arg(long = "save-config")]
    pub save_config: bool,

    /// Serve a demo LUN: STATE_DIR/demo.img (1 GiB sparse) as LUN 1 of
    /// iqn.2026-11.org.numatgt:demo on 127.0.0.1:3260 (or the --iscsi portals).
    #[arg(long = "demo")]
    pub demo: bool,

    /// Split the CPUs into N virtual NUMA nodes (default: the host's real nodes).
    #[arg(long = "numa-nodes", value_name = "N")]
    pub numa_nodes: Option<usize>,

    /// Total number of event threads (default: one per CPU).
    #[arg(long = "event-threads", value_name = "N")]
    pub event_threads: Option<usize>,

    /// Microseconds an event thread keeps polling without sleeping after its last work
    /// (0 = off, the default; at most 10000). Lower latency at queue depth 1 for more CPU.
    /// Overrides `threads.busy_poll_us`.
    #[arg(long = "busy-poll", value_name = "USEC", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub busy_poll: Option<u32>,

    /// How write-back reaches the backing stores: auto (io_uring where the kernel allows
    /// it), io_uring (required), threads (pwrite). Overrides `threads.io_engine`.
    #[arg(long = "io-engine", value_name = "auto|io_uring|threads", value_parser = parse_io_engine)]
    pub io_engine: Option<config::IoEngine>,

    /// Throughput limit of SANITIZE OVERWRITE in MiB/s per operation (0 = unlimited), so a
    /// sanitize does not starve other LUNs sharing the disks.
    #[arg(long = "sanitize-rate", value_name = "MIB_PER_S", default_value_t = 0)]
    pub sanitize_rate: u64,

    /// Bytes of block cache per NUMA node (e.g. 64M, 2G) or `auto`. Overrides
    /// `cache.size_per_node`.
    #[arg(long = "cache-size", value_name = "SIZE|auto", value_parser = parse_cache_size)]
    pub cache_size: Option<config::CacheSize>,

    /// Serve Prometheus metrics at http://ADDR/metrics and the status page at http://ADDR/
    /// (`off` turns it off). Overrides `metrics.address`; default 127.0.0.1:9470.
    #[arg(long = "metrics", value_name = "ADDR|off", value_parser = parse_metrics_addr)]
    pub metrics: Option<config::MetricsAddress>,

    /// Export `numatgt_session_info` (names the initiators; off by default).
    #[arg(long = "metrics-session-info")]
    pub metrics_session_info: bool,
}

/// `numatgtd --generate WHAT`, alone on the command line: print numatgtd(8) or a completion
/// script made from [`Cli`] and exit (packaging: tools/build-deb.sh). Not part of [`Cli`],
/// so neither `--help`, the man page nor the completions offer it.
#[derive(Debug, Parser)]
#[command(
    name = "numatgtd",
    disable_help_flag = true,
    disable_version_flag = true
)]
struct GenerateCli {
    #[arg(long = "generate", value_name = "man|bash|zsh")]
    generate: Generate,
}

/// What `numatgtd --generate` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Generate {
    /// The numatgtd(8) man page, roff source.
    Man,
    /// A bash completion script (bash-completion's completions directory).
    Bash,
    /// A zsh completion script (`_numatgtd`, for zsh's vendor-completions).
    Zsh,
}

/// The hook at the top of `main`: when the command line is `--generate WHAT`, print it
/// and return the exit status; `None` for every other command line. The check comes before
/// anything else main does (logging, configuration), so generating a man page needs no
/// configuration and starts nothing.
pub fn generate_if_requested() -> Option<ExitCode> {
    let asked = std::env::args_os()
        .skip(1)
        .any(|a| a == "--generate" || a.as_encoded_bytes().starts_with(b"--generate="));
    if !asked {
        return None;
    }
    // clap checks the value, and that nothing else is on the command line
    let what = GenerateCli::parse().generate;
    let mut out = std::io::stdout().lock();
    Some(match generate(what, &mut out).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("numatgtd: --generate: {e}");
            ExitCode::from(1)
        }
    })
}

/// Write numatgtd(8) or a completion script, made from [`Cli`], to `out`.
pub fn generate(what: Generate, out: &mut dyn Write) -> std::io::Result<()> {
    let mut cmd = Cli::command();
    match what {
        Generate::Bash => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "numatgtd", out);
            Ok(())
        }
        Generate::Zsh => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, "numatgtd", out);
            Ok(())
        }
        Generate::Man => man_page(cmd, out),
    }
}

/// numatgtd(8)'s DESCRIPTION (the options come from the clap definitions).
const MAN_DESCRIPTION: &[&str] = &[
    "numatgtd is a user-space iSCSI target for Linux, with iSER (iSCSI over RDMA), and a \
     drop-in for tgtd(8): it takes tgtd's options, speaks tgt's management protocol \
     (tgtadm(8), tgt-admin(8) and numatgtadm(8) drive it unchanged) and imports tgt's \
     targets.conf(5). Its data path is NUMA-aware: event threads per NUMA node own the \
     connections, and a partitioned block cache keeps each block in the memory of its home \
     node.",
    "Without --config (and without --demo) numatgtd starts as tgtd does: no targets, \
     listening on 0.0.0.0:3260 and [::]:3260 (or on the --iscsi portals), the management \
     socket ready for tgtadm. With --config FILE it reads a YAML configuration \
     (numatgt.yaml(5)) or tgt's targets.conf; a bad file stops it at start with \
     FILE:LINE:COL and the problem. Without -f it detaches, as tgtd does.",
    "Prometheus metrics are served at http://127.0.0.1:9470/metrics and a status page at \
     http://127.0.0.1:9470/ unless --metrics says otherwise.",
];

/// numatgtd(8)'s sections after OPTIONS: (heading, [(tag, text)]).
const MAN_SECTIONS: &[(&str, &[(&str, &str)])] = &[
    (
        "SIGNALS",
        &[
            (
                "SIGTERM, SIGINT",
                "Stop cleanly: connections are closed, dirty cached data is written back and \
                 the LUNs are synced (as tgtadm --op delete --mode system).",
            ),
            (
                "SIGHUP",
                "Apply the --config file again: only targets whose definition changed are \
                 touched; a refused file changes nothing and the reason is logged \
                 (numatgtadm --reload waits for the result and reports it).",
            ),
            (
                "SIGUSR1",
                "Log the block cache's state, one line per NUMA node.",
            ),
            (
                "SIGUSR2",
                "Live upgrade: replace the daemon, in the same process (same PID), with \
                 the executable it was started from, without refusing a connection; \
                 TCP sessions move to it with their connections (no login again), iSER \
                 sessions are asked to log out and log in again (numatgtadm --upgrade does \
                 the same, with --binary, and reports the outcome). An executable that \
                 fails its check leaves the daemon serving; one that cannot start gives \
                 way to the previous executable.",
            ),
        ],
    ),
    (
        "FILES",
        &[
            (
                "/etc/numatgt/numatgt.yaml",
                "The configuration numatgtd.service starts numatgtd with (numatgt.yaml(5)).",
            ),
            (
                "/var/run/tgtd/socket.N",
                "The management socket of control port N (--control-port, default 0), as \
                 tgtd's; socket.N.lock keeps a second daemon off the same port.",
            ),
            (
                "/var/lib/numatgt",
                "The default --state-dir: persistent reservations kept over restarts (pr/) \
                 and the --demo LUN.",
            ),
        ],
    ),
    (
        "ENVIRONMENT",
        &[
            (
                "NUMATGT_LOG",
                "Log filter (tracing's env-filter syntax, e.g. debug or \
                 target_server=trace); it overrides -d.",
            ),
            (
                "TGT_IPC_SOCKET",
                "Path prefix of the management socket (default /var/run/tgtd/socket), as for \
                 tgtd and tgtadm.",
            ),
            (
                "NOTIFY_SOCKET",
                "Set by systemd for Type=notify: numatgtd sends READY=1 once every portal \
                 listens and every LUN is open, RELOADING=1 around a SIGHUP reload and \
                 STOPPING=1 when it stops.",
            ),
        ],
    ),
    (
        "EXIT STATUS",
        &[
            ("0", "Stopped cleanly."),
            (
                "1",
                "The configuration was refused or the daemon could not start (the reason is \
                 on standard error).",
            ),
            ("2", "A command-line error."),
        ],
    ),
];

/// numatgtd(8)'s SEE ALSO.
const MAN_SEE_ALSO: &[(&str, &str)] = &[
    ("numatgtadm", "8"),
    ("numatgt.yaml", "5"),
    ("tgtadm", "8"),
    ("tgt-admin", "8"),
    ("tgtd", "8"),
    ("targets.conf", "5"),
    ("systemd.service", "5"),
];

/// numatgtd(8): clap_mangen's title, NAME, SYNOPSIS, OPTIONS and VERSION around the prose
/// above.
fn man_page(cmd: clap::Command, out: &mut dyn Write) -> std::io::Result<()> {
    use clap_mangen::roff::{Roff, bold, roman};
    let man = clap_mangen::Man::new(cmd)
        .title("NUMATGTD")
        .section("8")
        .date(man_date())
        .source(concat!("numatgt ", env!("CARGO_PKG_VERSION")))
        .manual("System Administration");
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    let mut r = Roff::new();
    r.control("SH", ["DESCRIPTION"]);
    for (i, p) in MAN_DESCRIPTION.iter().enumerate() {
        if i > 0 {
            r.control("PP", []);
        }
        r.text([roman(*p)]);
    }
    r.to_writer(&mut page)?;
    man.render_options_section(&mut page)?;
    let mut r = Roff::new();
    for (heading, items) in MAN_SECTIONS {
        r.control("SH", [*heading]);
        for (tag, text) in *items {
            r.control("TP", []);
            r.text([bold(*tag)]);
            r.text([roman(*text)]);
        }
    }
    r.control("SH", ["SEE ALSO"]);
    let mut see = Vec::new();
    for (i, (name, section)) in MAN_SEE_ALSO.iter().enumerate() {
        let sep = if i + 1 < MAN_SEE_ALSO.len() { ", " } else { "" };
        see.push(bold(*name));
        see.push(roman(format!("({section}){sep}")));
    }
    r.text(see);
    r.to_writer(&mut page)?;
    man.render_version_section(&mut page)?;
    write_man(&page, out)
}

/// The page's date: `NUMATGT_MAN_DATE` (tools/build-deb.sh sets it from the package's
/// changelog, so the page is the same at every build), else none.
fn man_date() -> String {
    std::env::var("NUMATGT_MAN_DATE").unwrap_or_default()
}

/// Every roff piece starts with the same preamble: keep the first one only.
fn write_man(page: &[u8], out: &mut dyn Write) -> std::io::Result<()> {
    let preamble = clap_mangen::roff::Roff::new().render();
    let text = String::from_utf8_lossy(page);
    let body = text.replace(&preamble, "");
    out.write_all(preamble.as_bytes())?;
    out.write_all(body.as_bytes())
}

/// One `--iscsi` option set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IscsiOpts {
    /// `portal=IP:PORT`: listen there.
    pub portal: Option<SocketAddr>,
    /// `nop_interval=S`: seconds between NOP-In pings.
    pub nop_interval: Option<u32>,
    /// `nop_count=N`: unanswered pings before the connection is dropped.
    pub nop_count: Option<u32>,
}

/// Parse tgtd's `--iscsi` value: comma-separated key=value pairs.
pub fn parse_iscsi_opts(s: &str) -> Result<IscsiOpts, String> {
    let mut o = IscsiOpts::default();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("--iscsi: '{part}' is not key=value"))?;
        match k {
            "portal" => {
                let addr = parse_portal(v).map_err(|e| format!("--iscsi portal={v}: {e}"))?;
                o.portal = Some(addr);
            }
            "nop_interval" => {
                o.nop_interval = Some(
                    v.parse()
                        .map_err(|_| format!("--iscsi nop_interval={v}: not a number"))?,
                )
            }
            "nop_count" => {
                o.nop_count = Some(
                    v.parse()
                        .map_err(|_| format!("--iscsi nop_count={v}: not a number"))?,
                )
            }
            _ => {
                return Err(format!(
                    "--iscsi: unknown option '{k}' (portal, nop_interval, nop_count)"
                ));
            }
        }
    }
    Ok(o)
}

/// One `--iser` option set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IserOpts {
    /// `portal=IP:PORT`: listen for iSER (RDMA CM) there.
    pub portal: Option<SocketAddr>,
}

/// Parse tgtd's `--iser` value: comma-separated key=value pairs, `portal` or `port`
/// (same address syntax as `--iscsi portal=`).
pub fn parse_iser_opts(s: &str) -> Result<IserOpts, String> {
    let mut o = IserOpts::default();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("--iser: '{part}' is not key=value"))?;
        match k {
            "portal" => {
                let addr = parse_portal(v).map_err(|e| format!("--iser portal={v}: {e}"))?;
                o.portal = Some(addr);
            }
            // tgtd's `--iser port=N`: every address, port N
            "port" => {
                let port: u16 =
                    v.parse().ok().filter(|&p| p != 0).ok_or_else(|| {
                        format!("--iser port={v}: expected a port number 1-65535")
                    })?;
                o.portal = Some(SocketAddr::from(([0, 0, 0, 0], port)));
            }
            _ => {
                return Err(format!(
                    "--iser: unknown option '{k}' (portal=IP:PORT, port=PORT)"
                ));
            }
        }
    }
    Ok(o)
}

/// The iSER portals the `--iser` options name, in order; `None` when none does (the
/// configuration's `iser_portals` then apply).
pub fn iser_portals(values: &[String]) -> Result<Option<Vec<SocketAddr>>, String> {
    let mut out = Vec::new();
    for v in values {
        out.extend(parse_iser_opts(v)?.portal);
    }
    Ok((!out.is_empty()).then_some(out))
}

/// `IP:PORT`, `[v6]:PORT`, or `IP` alone (port 3260); `*` is every IPv4 address, as tgtd
/// writes it (`*:3261`).
pub(crate) fn parse_portal(v: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = v.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(rest) = v.strip_prefix('*') {
        let port = match rest.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| format!("bad port '{p}'"))?,
            None if rest.is_empty() => 3260,
            None => return Err("expected IP:PORT (IPv6 as [addr]:port)".into()),
        };
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(ip) = v
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
    {
        return Ok(SocketAddr::new(ip, 3260));
    }
    Err("expected IP:PORT (IPv6 as [addr]:port)".into())
}

fn parse_io_engine(s: &str) -> Result<config::IoEngine, String> {
    config::IoEngine::parse(s)
        .ok_or_else(|| format!("must be auto, io_uring or threads, not {s:?}"))
}

fn parse_cache_size(s: &str) -> Result<config::CacheSize, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(config::CacheSize::Auto);
    }
    config::parse_size(s).map(config::CacheSize::Bytes)
}

fn parse_metrics_addr(s: &str) -> Result<config::MetricsAddress, String> {
    config::MetricsAddress::parse(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iscsi_options() {
        let o = parse_iscsi_opts("portal=127.0.0.1:3270,nop_interval=5,nop_count=3").expect("ok");
        assert_eq!(o.portal, Some("127.0.0.1:3270".parse().expect("addr")));
        assert_eq!(o.nop_interval, Some(5));
        assert_eq!(o.nop_count, Some(3));
        assert_eq!(
            parse_iscsi_opts("portal=[::1]:3261").expect("v6").portal,
            Some("[::1]:3261".parse().expect("addr"))
        );
        assert_eq!(
            parse_iscsi_opts("portal=10.0.0.1").expect("no port").portal,
            Some("10.0.0.1:3260".parse().expect("addr"))
        );
        assert!(parse_iscsi_opts("portal=nonsense").is_err());
        assert!(parse_iscsi_opts("bogus=1").is_err());
        assert!(parse_iscsi_opts("nop_count=x").is_err());
    }

    #[test]
    fn iser_options() {
        let p = |s: &str| parse_iser_opts(s).map(|o| o.portal);
        assert_eq!(
            p("portal=10.0.0.1:3261"),
            Ok(Some("10.0.0.1:3261".parse().expect("addr")))
        );
        assert_eq!(
            p("portal=[::1]:3261"),
            Ok(Some("[::1]:3261".parse().expect("addr")))
        );
        assert_eq!(
            p("portal=10.0.0.1"),
            Ok(Some("10.0.0.1:3260".parse().expect("addr")))
        );
        assert_eq!(p(""), Ok(None));
        let e = p("portal=nonsense").expect_err("bad address");
        assert!(
            e.starts_with("--iser portal=nonsense: expected IP:PORT"),
            "{e}"
        );
        let e = p("nop_interval=5").expect_err("unknown option");
        assert!(
            e.contains("unknown option 'nop_interval'") && e.contains("portal="),
            "{e}"
        );
        let e = p("portal").expect_err("not key=value");
        assert!(e.contains("not key=value"), "{e}");
        // tgtd's spellings: port=N and the * wildcard
        assert_eq!(
            p("port=13261"),
            Ok(Some("0.0.0.0:13261".parse().expect("addr")))
        );
        assert!(p("port=0").is_err() && p("port=x").is_err());
        assert_eq!(
            p("portal=*:13261"),
            Ok(Some("0.0.0.0:13261".parse().expect("addr")))
        );
        assert_eq!(
            p("portal=*"),
            Ok(Some("0.0.0.0:3260".parse().expect("addr")))
        );
        assert!(p("portal=*x").is_err() && p("portal=*:99999").is_err());
    }

    #[test]
    fn iser_flags_collect_portals() {
        let c = Cli::try_parse_from([
            "numatgtd",
            "--iser",
            "portal=10.0.0.1:3260",
            "--iscsi",
            "portal=127.0.0.1:3270",
            "--iser",
            "portal=[fd00::1]",
        ])
        .expect("parse");
        assert_eq!(
            iser_portals(&c.iser),
            Ok(Some(vec![
                "10.0.0.1:3260".parse().expect("addr"),
                "[fd00::1]:3260".parse().expect("addr"),
            ]))
        );
        assert_eq!(c.iscsi.len(), 1);
        let none = Cli::try_parse_from(["numatgtd", "--demo"]).expect("parse");
        assert_eq!(iser_portals(&none.iser), Ok(None));
        assert!(iser_portals(&["bogus=1".to_string()]).is_err());
    }

    #[test]
    fn man_page_and_completions_come_from_the_definitions() {
        let text = |what| {
            let mut out = Vec::new();
            generate(what, &mut out).expect("generate");
            String::from_utf8(out).expect("utf-8")
        };
        let man = text(Generate::Man);
        assert!(man.contains(".TH NUMATGTD 8"), "{man}");
        assert_eq!(man.matches(".ie \\n(.g").count(), 1, "one preamble:\n{man}");
        let bash = text(Generate::Bash);
        let zsh = text(Generate::Zsh);
        for arg in Cli::command().get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            // roff escapes '-' as '\-'
            let roff = format!("\\-\\-{}", long.replace('-', "\\-"));
            assert!(man.contains(&roff), "--{long} in the man page");
            assert!(bash.contains(&format!("--{long} ")), "--{long} in bash");
            assert!(zsh.contains(&format!("--{long}")), "--{long} in zsh");
        }
        for text in [&man, &bash, &zsh] {
            assert!(!text.contains("generate"), "--generate offered:\n{text}");
        }
        assert!(bash.contains("complete -F _numatgtd"), "{bash}");
        assert!(zsh.starts_with("#compdef numatgtd"), "{zsh}");
    }

    #[test]
    fn generate_is_hidden_and_alone() {
        let g = |args: &[&str]| GenerateCli::try_parse_from(args).map(|g| g.generate);
        assert_eq!(
            g(&["numatgtd", "--generate", "man"]).ok(),
            Some(Generate::Man)
        );
        assert_eq!(g(&["numatgtd", "--generate=zsh"]).ok(), Some(Generate::Zsh));
        assert!(g(&["numatgtd", "--generate", "html"]).is_err());
        assert!(g(&["numatgtd", "-f", "--generate", "bash"]).is_err());
        assert!(Cli::try_parse_from(["numatgtd", "--generate", "man"]).is_err());
        let help = Cli::command().render_long_help().to_string();
        assert!(!help.contains("generate"), "{help}");
    }

    #[test]
    fn tgtd_flags_parse() {
        let c = Cli::try_parse_from([
            "numatgtd",
            "-f",
            "-C",
            "7",
            "-t",
            "4",
            "-d",
            "1",
            "--iscsi",
            "portal=127.0.0.1:3270",
        ])
        .expect("parse");
        assert!(c.foreground);
        assert_eq!(c.control_port, 7);
        assert_eq!(c.nr_iothreads, Some(4));
        assert_eq!(c.iscsi.len(), 1);
    }
}
