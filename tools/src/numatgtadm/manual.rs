//! numatgtadm(8) and its bash and zsh completions, printed by `numatgtadm --generate
//! man|bash|zsh` (tools/build-deb.sh packages them). numatgtadm parses its command line as
//! tgtadm does (GNU getopt_long, `getopt.rs`), not with clap; the clap command built here
//! only describes it, from the parser's own tables (`getopt::LONG`, `MODES`, `OPS`,
//! `DEVICE_TYPES`) plus a help text per option letter, so the man page and the completions
//! list exactly the options the parser takes. It never parses anything.

use std::io::Write;

use clap::builder::PossibleValuesParser;
use clap::{Arg, ArgAction, Command, ValueHint};
use clap_mangen::roff::{Roff, bold, roman};

use super::getopt::LONG;
use super::{DEVICE_TYPES, Fail, MODES, OPS, USAGE, fail};

/// Help text, value name and value hint of each option letter of [`LONG`].
fn describe(letter: char) -> (&'static str, &'static str, ValueHint) {
    let none = ValueHint::Unknown;
    match letter {
        'd' => ("Accepted for tgtadm compatibility; no effect", "", none),
        'h' => ("Print the usage (tgtadm's forms) and exit", "", none),
        'V' => ("Print the version and exit", "", none),
        'L' => (
            "Low-level driver (TCP or RDMA), recorded with the target",
            "DRIVER",
            none,
        ),
        'o' => ("The operation", "OP", none),
        'm' => ("What the operation acts on", "MODE", none),
        't' => ("Target id (1 and up)", "TID", none),
        's' => ("Session id (--mode conn)", "SID", none),
        'c' => ("Connection id (--mode conn)", "CID", none),
        'l' => ("Logical unit number", "LUN", none),
        'n' => (
            "Parameter name of --op update (with --value): a target's state, alua_group, \
             alua_peers, or the system's State and debug",
            "NAME",
            none,
        ),
        'v' => (
            "Parameter value of --op update (with --name)",
            "VALUE",
            none,
        ),
        'b' => (
            "Backing store of a new logical unit: a file or block device, or what its \
             --bstype names (an RBD image, a SCSI generic device)",
            "PATH",
            ValueHint::AnyPath,
        ),
        'E' => (
            "Backing-store type, tgtd's names (rdwr by default; aio, rbd, null, sg, bsg...); \
             the daemon refuses those it does not serve",
            "TYPE",
            none,
        ),
        'S' => (
            "Backing-store options, comma-separated: numatgt's cache=numa|off|page, rbd's \
             conf=, id= and the like",
            "OPTIONS",
            none,
        ),
        'f' => (
            "Open flags of the backing store: direct, sync, or direct:sync",
            "FLAGS",
            none,
        ),
        'y' => (
            "Logical block size of a new logical unit: 512 (default), 1024, 2048 or 4096",
            "SIZE",
            none,
        ),
        'T' => ("The iSCSI name (IQN) of a new target", "NAME", none),
        'I' => (
            "Initiator address to bind or unbind: an IP address, ADDRESS/PREFIX, or ALL",
            "ADDRESS",
            none,
        ),
        'Q' => ("Initiator name (IQN) to bind or unbind", "NAME", none),
        'u' => ("Account user name (CHAP)", "USER", none),
        'p' => ("Account password (CHAP)", "PASSWORD", none),
        'H' => ("Host number, as tgtadm's --host", "HOST", none),
        'F' => (
            "Delete a target even while it has sessions. As with tgtadm, the short form -F \
             takes an argument (ignored)",
            "",
            none,
        ),
        'P' => (
            "Parameters, name=value[,name=value...]: of a logical unit or target for --op \
             update, portal=ADDRESS[:PORT] for --mode portal",
            "PARAMS",
            none,
        ),
        'B' => ("Bus to bind or unbind, as tgtadm's --bus", "BUS", none),
        'Y' => ("Device type of a new logical unit", "TYPE", none),
        'O' => (
            "Bind or unbind the account as the target's outgoing one (mutual CHAP). As with \
             tgtadm, the short form -O takes an argument (ignored)",
            "",
            none,
        ),
        'C' => (
            "Control port: talk to $TGT_IPC_SOCKET.PORT (default /var/run/tgtd/socket.PORT)",
            "PORT",
            none,
        ),
        _ => ("", "", none),
    }
}

/// Values the completions offer for an option letter: the parser's tables.
fn values(letter: char) -> Vec<&'static str> {
    match letter {
        'o' => OPS.iter().map(|(n, _)| *n).collect(),
        'm' => MODES.iter().map(|(n, _)| *n).collect(),
        'Y' => DEVICE_TYPES.iter().map(|(n, _)| *n).collect(),
        'L' => vec!["iscsi", "iser"],
        _ => Vec::new(),
    }
}

/// numatgtadm's command line as a clap command (for the man page and completions only).
pub(super) fn command() -> Command {
    let mut cmd = Command::new("numatgtadm")
        .version(env!("CARGO_PKG_VERSION"))
        .about("administer numatgtd (or tgtd) through tgt's management socket")
        .disable_help_flag(true)
        .disable_version_flag(true);
    for &(long, takes_arg, letter) in LONG.iter() {
        let (help, value_name, hint) = describe(letter);
        let vals = values(letter);
        // the values inline in the help text (one line, not clap_mangen's list of bullets);
        // the completions offer them
        let help = if vals.is_empty() {
            help.to_string()
        } else {
            format!("{help}: {}", vals.join(", "))
        };
        let mut arg = Arg::new(long).long(long).short(letter).help(help);
        arg = if takes_arg {
            arg.action(ArgAction::Set)
                .value_name(value_name)
                .value_hint(hint)
        } else {
            arg.action(ArgAction::SetTrue)
        };
        if !vals.is_empty() {
            arg = arg
                .value_parser(PossibleValuesParser::new(vals))
                .hide_possible_values(true);
        }
        cmd = cmd.arg(arg);
    }
    cmd.arg(
        Arg::new("dump")
            .long("dump")
            .action(ArgAction::SetTrue)
            .help("Print the running configuration as numatgt YAML (numatgtd only; with -C)"),
    )
    .arg(
        Arg::new("reload")
            .long("reload")
            .value_name("FILE")
            .num_args(0..=1)
            .value_hint(ValueHint::FilePath)
            .help(
                "Apply a configuration file (default: the daemon's --config) to the running \
                 daemon, touching only the targets that changed; waits for the result and \
                 fails when the file is refused (numatgtd only; with -C)",
            ),
    )
    .arg(
        Arg::new("upgrade")
            .long("upgrade")
            .action(ArgAction::SetTrue)
            .help(
                "Replace the running daemon, in the same process, with a new numatgtd \
                 executable (--binary; default: the file the daemon was started from) \
                 without refusing a connection: TCP sessions move to it with their \
                 connections, iSER sessions are asked to log out and log in again; an \
                 executable that fails gives way to the running one (numatgtd only; with \
                 -C)",
            ),
    )
    .arg(
        Arg::new("binary")
            .long("binary")
            .value_name("PATH")
            .value_hint(ValueHint::FilePath)
            .help("With --upgrade: the new numatgtd executable"),
    )
}

/// `numatgtadm --generate WHAT`: the man page or a completion script on stdout.
pub(super) fn generate(args: &[String]) -> Result<String, Fail> {
    let mut out = Vec::new();
    let mut cmd = command();
    match args {
        [w] if w == "man" => man_page(cmd, &mut out),
        [w] if w == "bash" => {
            clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "numatgtadm", &mut out);
            Ok(())
        }
        [w] if w == "zsh" => {
            clap_complete::generate(clap_complete::Shell::Zsh, &mut cmd, "numatgtadm", &mut out);
            Ok(())
        }
        _ => return Err(fail("--generate takes one of man, bash, zsh")),
    }
    .map_err(|e| fail(format!("--generate: {e}")))?;
    String::from_utf8(out).map_err(|e| fail(format!("--generate: {e}")))
}

/// numatgtadm(8)'s DESCRIPTION.
const DESCRIPTION: &[&str] = &[
    "numatgtadm is tgtadm's command line, shipped with numatgt: the same options, \
     messages and exit codes, speaking tgt's management protocol on \
     $TGT_IPC_SOCKET.PORT to numatgtd(8) or to tgtd(8). Scripts written for tgtadm(8) \
     work unchanged with it, and tgt's own tgtadm and tgt-admin(8) drive numatgtd as \
     well.",
    "Two operations are numatgt's own: --dump prints the running configuration as \
     numatgt YAML (numatgt.yaml(5)), which --config can load at the next start, and \
     --reload applies a configuration file to the running daemon, --upgrade hands \
     the running daemon over to a new numatgtd executable without refusing a \
     connection.",
];

/// numatgtadm(8)'s sections after OPTIONS: (heading, [(tag, text)]).
const SECTIONS: &[(&str, &[(&str, &str)])] = &[
    (
        "EXIT STATUS",
        &[
            (
                "0",
                "Success; the daemon's answer, if any, is on standard output.",
            ),
            (
                "22",
                "A bad command line, or the daemon refused the request: the message \
                 (\"tgtadm: ...\") is on standard error.",
            ),
            (
                "107",
                "No daemon listens on the management socket (\"Transport endpoint is not \
                 connected\").",
            ),
            ("1", "An unknown --op or --mode."),
        ],
    ),
    (
        "ENVIRONMENT",
        &[(
            "TGT_IPC_SOCKET",
            "Path prefix of the management socket (default /var/run/tgtd/socket); \
             --control-port N appends .N.",
        )],
    ),
    (
        "FILES",
        &[(
            "/var/run/tgtd/socket.N",
            "The management socket of the daemon on control port N (default 0).",
        )],
    ),
];

/// numatgtadm(8)'s SEE ALSO.
const SEE_ALSO: &[(&str, &str)] = &[
    ("numatgtd", "8"),
    ("numatgt.yaml", "5"),
    ("tgtadm", "8"),
    ("tgt-admin", "8"),
    ("tgtd", "8"),
];

/// numatgtadm(8): clap_mangen's title, NAME, SYNOPSIS, OPTIONS and VERSION, the usage
/// forms of `--help` verbatim, and the prose above.
fn man_page(cmd: Command, out: &mut dyn Write) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd)
        .title("NUMATGTADM")
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
    for (i, p) in DESCRIPTION.iter().enumerate() {
        if i > 0 {
            r.control("PP", []);
        }
        r.text([roman(*p)]);
    }
    // the operations' forms `--help` prints, one per line (the options follow in OPTIONS)
    r.control("SH", ["USAGE"]);
    r.text([roman("The operations, as numatgtadm --help lists them:")]);
    r.control("PP", []);
    r.control("nf", []);
    for line in USAGE
        .lines()
        .filter(|l| l.starts_with("--lld ") || l.starts_with("--mode "))
    {
        r.text([roman(line)]);
    }
    r.control("fi", []);
    r.to_writer(&mut page)?;
    man.render_options_section(&mut page)?;
    let mut r = Roff::new();
    for (heading, items) in SECTIONS {
        r.control("SH", [*heading]);
        for (tag, text) in *items {
            r.control("TP", []);
            r.text([bold(*tag)]);
            r.text([roman(*text)]);
        }
    }
    r.control("SH", ["SEE ALSO"]);
    let mut see = Vec::new();
    for (i, (name, section)) in SEE_ALSO.iter().enumerate() {
        let sep = if i + 1 < SEE_ALSO.len() { ", " } else { "" };
        see.push(bold(*name));
        see.push(roman(format!("({section}){sep}")));
    }
    r.text(see);
    r.to_writer(&mut page)?;
    man.render_version_section(&mut page)?;
    // every roff piece starts with the same preamble: keep the first one only
    let preamble = Roff::new().render();
    let text = String::from_utf8_lossy(&page);
    out.write_all(preamble.as_bytes())?;
    out.write_all(text.replace(&preamble, "").as_bytes())
}

/// The page's date: `NUMATGT_MAN_DATE` (tools/build-deb.sh sets it from the package's
/// changelog, so the page is the same at every build), else none.
fn man_date() -> String {
    std::env::var("NUMATGT_MAN_DATE").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::getopt::SHORT;
    use super::*;

    fn text(what: &str) -> String {
        generate(&[what.to_string()]).unwrap_or_else(|f| panic!("{}", f.0))
    }

    #[test]
    fn every_option_of_the_parser_is_described() {
        let cmd = command();
        for &(long, takes_arg, letter) in LONG.iter() {
            let (help, value_name, _) = describe(letter);
            assert!(!help.is_empty(), "-{letter} has no help text");
            assert_eq!(!value_name.is_empty(), takes_arg, "--{long}: value name");
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .unwrap_or_else(|| panic!("--{long} missing"));
            assert_eq!(arg.get_short(), Some(letter));
            assert!(SHORT.contains(letter), "-{letter} not in getopt's SHORT");
        }
        // and nothing the parser does not take, but numatgt's own operations
        let extra: Vec<&str> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| !LONG.iter().any(|(n, _, _)| n == l))
            .collect();
        assert_eq!(extra, ["dump", "reload", "upgrade", "binary"]);
        // the values offered are those the parser accepts
        for (n, _) in OPS {
            assert!(super::super::op_of(n).is_some());
        }
        for (n, _) in MODES {
            assert!(super::super::mode_of(n).is_some());
        }
    }

    #[test]
    fn man_page_and_completions() {
        let man = text("man");
        assert!(man.contains(".TH NUMATGTADM 8"), "{man}");
        assert!(man.contains("\\-\\-backing\\-store"), "{man}");
        assert!(
            man.contains("\\-\\-mode lld \\-\\-op start|stop|show"),
            "{man}"
        );
        assert_eq!(man.matches(".ie \\n(.g").count(), 1, "one preamble");
        let bash = text("bash");
        assert!(bash.contains("complete -F _numatgtadm"), "{bash}");
        assert!(bash.contains("logicalunit"), "{bash}");
        assert!(text("zsh").starts_with("#compdef numatgtadm"));
        for t in [&man, &bash] {
            assert!(!t.contains("generate"));
        }
        let Err(Fail(m, 22)) = generate(&["html".to_string()]) else {
            panic!("html accepted")
        };
        assert!(m.contains("man, bash, zsh"), "{m}");
    }
}
