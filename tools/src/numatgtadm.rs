//! numatgtadm: tgtadm's command line, byte for byte where scripts can see it (GNU
//! getopt_long parsing with unambiguous long prefixes and the `-F`/`-O` quirk, per-mode
//! validation messages, exit codes 0/22/1, `tgtadm: <message>` on stderr), speaking the
//! tgtadm wire protocol to numatgtd (or tgtd) on `$TGT_IPC_SOCKET.<port>`. `--dump` (numatgt
//! only) prints the running configuration as YAML. `--generate man|bash|zsh` (first on the
//! command line, not in `--help`) prints numatgtadm(8) or a completion script made from the
//! parser's own option table (`numatgtadm/manual.rs`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tgtadm_wire::{ErrCode, Mode, Op, ReqHeader};

#[path = "numatgtadm/getopt.rs"]
mod getopt;
#[path = "numatgtadm/manual.rs"]
mod manual;
#[path = "numatgtadm/validate.rs"]
mod validate;

use getopt::{getopt, number};
use validate::validate;

const EINVAL: u8 = 22;
const TRY_HELP: &str = "Try `tgtadm --help' for more information.";

/// A failure: message for stderr (already formatted) and exit code.
struct Fail(String, u8);

fn getopt_err(msg: String) -> Fail {
    Fail(format!("tgtadm: {msg}\n{TRY_HELP}\n"), EINVAL)
}

fn fail(msg: impl Into<String>) -> Fail {
    Fail(format!("tgtadm: {}\n", msg.into()), EINVAL)
}

/// `--mode` values, tgtadm's spellings (the parser's table; the man page and the
/// completions list it).
const MODES: [(&str, Mode); 14] = [
    ("system", Mode::System),
    ("sys", Mode::System),
    ("target", Mode::Target),
    ("tgt", Mode::Target),
    ("logicalunit", Mode::Device),
    ("lu", Mode::Device),
    ("portal", Mode::Portal),
    ("pt", Mode::Portal),
    ("session", Mode::Session),
    ("sess", Mode::Session),
    ("connection", Mode::Connection),
    ("conn", Mode::Connection),
    ("account", Mode::Account),
    ("lld", Mode::Lld),
];

/// `--op` values, tgtadm's spellings.
const OPS: [(&str, Op); 9] = [
    ("new", Op::New),
    ("delete", Op::Delete),
    ("show", Op::Show),
    ("bind", Op::Bind),
    ("unbind", Op::Unbind),
    ("update", Op::Update),
    ("stat", Op::Stats),
    ("start", Op::Start),
    ("stop", Op::Stop),
];

/// `--device-type` values and their SCSI peripheral device types.
const DEVICE_TYPES: [(&str, u32); 7] = [
    ("disk", 0x00),
    ("tape", 0x01),
    ("ssc", 0x01),
    ("cd", 0x05),
    ("changer", 0x08),
    ("osd", 0x11),
    ("pt", 0xff),
];

fn mode_of(s: &str) -> Option<Mode> {
    MODES.iter().find(|(n, _)| *n == s).map(|&(_, m)| m)
}

fn op_of(s: &str) -> Option<Op> {
    OPS.iter().find(|(n, _)| *n == s).map(|&(_, o)| o)
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::New => "new",
        Op::Delete => "delete",
        Op::Show => "show",
        Op::Bind => "bind",
        Op::Unbind => "unbind",
        Op::Update => "update",
        Op::Stats => "stat",
        Op::Start => "start",
        Op::Stop => "stop",
    }
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::System => "system",
        Mode::Target => "target",
        Mode::Device => "logicalunit",
        Mode::Portal => "portal",
        Mode::Lld => "lld",
        Mode::Session => "session",
        Mode::Connection => "connection",
        Mode::Account => "account",
    }
}

fn device_type(s: &str) -> Option<u32> {
    DEVICE_TYPES.iter().find(|(n, _)| *n == s).map(|&(_, t)| t)
}

/// Everything from the command line.
#[derive(Default)]
struct Args {
    op: Option<Op>,
    mode: Option<Mode>,
    lld: String,
    tid: i64,
    sid: u64,
    cid: u32,
    lun: u64,
    host_no: u32,
    device_type: u32,
    tape: bool,
    force: bool,
    outgoing: bool,
    control_port: u16,
    name: Option<String>,
    value: Option<String>,
    path: Option<String>,
    bstype: Option<String>,
    bsopts: Option<String>,
    bsoflags: Option<String>,
    blocksize: Option<String>,
    targetname: Option<String>,
    address: Option<String>,
    iqn: Option<String>,
    user: Option<String>,
    password: Option<String>,
    target_ops: Option<String>,
    portal_ops: Option<String>,
    bus: Option<String>,
    /// Option letters in command-line order, for the per-mode check.
    letters: Vec<char>,
}

enum Parsed {
    Run(Box<Args>),
    Help,
    Version,
}

fn parse(argv: &[String]) -> Result<Parsed, Fail> {
    let (opts, operands) = getopt(argv)?;
    let mut a = Args {
        tid: -1,
        lun: u64::MAX,
        ..Args::default()
    };
    for (c, v) in opts {
        a.letters.push(c);
        match c {
            'd' => {}
            'h' => return Ok(Parsed::Help),
            'V' => return Ok(Parsed::Version),
            'L' => a.lld = v,
            'o' => {
                a.op = Some(
                    op_of(&v)
                        .ok_or_else(|| Fail(format!("tgtadm: unknown operation: {v}\n"), 1))?,
                )
            }
            'm' => {
                a.mode = Some(
                    mode_of(&v).ok_or_else(|| Fail(format!("tgtadm: unknown mode: {v}\n"), 1))?,
                )
            }
            't' => a.tid = number('t', &v, i32::MAX as u64)? as i64,
            's' => a.sid = number('s', &v, u64::MAX)?,
            'c' => a.cid = number('c', &v, u64::from(u32::MAX))? as u32,
            'l' => a.lun = number('l', &v, u64::MAX)?,
            'H' => a.host_no = number('H', &v, i32::MAX as u64)? as u32,
            'C' => a.control_port = number('C', &v, 32767)? as u16,
            'n' => a.name = Some(v),
            'v' => a.value = Some(v),
            'b' => a.path = Some(v),
            'E' => a.bstype = Some(v),
            'S' => a.bsopts = Some(v),
            'f' => a.bsoflags = Some(v),
            'y' => a.blocksize = Some(v),
            'T' => a.targetname = Some(v),
            'I' => a.address = Some(v),
            'Q' => a.iqn = Some(v),
            'u' => a.user = Some(v),
            'p' => a.password = Some(v),
            'F' => a.force = true,
            'O' => a.outgoing = true,
            'B' => a.bus = Some(v),
            'P' => {
                // as tgtadm: portal parameters only when --mode portal came first
                if a.mode == Some(Mode::Portal) {
                    a.portal_ops = Some(v);
                } else {
                    a.target_ops = Some(v);
                }
            }
            'Y' => {
                a.device_type =
                    device_type(&v).ok_or_else(|| fail(format!("unknown target type: {v}")))?;
                a.tape = a.device_type == 0x01;
            }
            _ => {}
        }
    }
    if let Some(op) = operands.first() {
        return Err(getopt_err(format!("unrecognized option '{op}'")));
    }
    Ok(Parsed::Run(Box::new(a)))
}

/// The request bytes, payload built in tgtadm's order.
fn request(a: &Args, mode: Mode, op: Op) -> Vec<u8> {
    let mut parts: Vec<String> = Vec::new();
    if let (Some(n), Some(v)) = (&a.name, &a.value) {
        parts.push(format!("{n}={v}"));
    }
    let kv = [
        ("path", &a.path),
        (
            "bstype",
            &if a.tape {
                Some("ssc".to_string())
            } else {
                a.bstype.clone()
            },
        ),
        ("bsopts", &a.bsopts),
        ("bsoflags", &a.bsoflags),
        ("blocksize", &a.blocksize),
        ("targetname", &a.targetname),
        ("initiator-address", &a.address),
        ("initiator-name", &a.iqn),
        ("user", &a.user),
        ("password", &a.password),
    ];
    for (k, v) in kv {
        if let Some(v) = v {
            parts.push(format!("{k}={v}"));
        }
    }
    let mut payload = parts.join(",");
    let ops = match (&a.target_ops, &a.portal_ops) {
        (_, Some(p)) if mode == Mode::Portal => Some(format!("portalOps {p},")),
        (Some(t), _) if mode != Mode::Portal => Some(format!("targetOps {t},")),
        _ => None,
    };
    if let Some(o) = ops {
        if !payload.is_empty() {
            payload.push(',');
        }
        payload.push_str(&o);
    }
    ReqHeader {
        mode: mode.as_u32(),
        op: op.as_u32(),
        lld: a.lld.clone(),
        tid: a.tid as i32,
        sid: a.sid,
        lun: a.lun,
        cid: a.cid,
        host_no: a.host_no,
        device_type: a.device_type,
        ac_dir: u32::from(a.outgoing),
        pack: 0,
        force: u32::from(a.force),
        ..ReqHeader::default()
    }
    .encode(&payload)
}

fn socket_path(port: u16) -> String {
    let prefix = std::env::var("TGT_IPC_SOCKET")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/var/run/tgtd/socket".into());
    format!("{prefix}.{port}")
}

fn not_connected() -> Fail {
    Fail(
        "tgtadm: failed to send request hdr to tgt daemon, Transport endpoint is not connected\n"
            .into(),
        107,
    )
}

/// Send the request, print the answer; returns the exit code.
fn exchange(path: &str, req: &[u8]) -> Result<String, Fail> {
    exchange_within(path, req, Duration::from_secs(60))
}

/// [`exchange`], waiting up to `wait` for the answer.
fn exchange_within(path: &str, req: &[u8], wait: Duration) -> Result<String, Fail> {
    let mut s = UnixStream::connect(path).map_err(|_| not_connected())?;
    let _ = s.set_read_timeout(Some(wait));
    s.write_all(req).map_err(|_| not_connected())?;
    let mut head = [0u8; tgtadm_wire::RSP_HEADER_LEN];
    s.read_exact(&mut head)
        .map_err(|e| fail(format!("can't get the response, {e}")))?;
    let (err, len) = tgtadm_wire::decode_response_header(&head);
    if err != 0 {
        let msg = ErrCode::from_u32(err).map_or("unknown error", ErrCode::message);
        return Err(fail(msg));
    }
    let body_len = (len as usize).saturating_sub(tgtadm_wire::RSP_HEADER_LEN);
    let mut body = Vec::with_capacity(body_len.min(1 << 24));
    s.take(body_len as u64)
        .read_to_end(&mut body)
        .map_err(|e| fail(format!("can't get the response, {e}")))?;
    // the text is a C string (tgtd sends its NUL): print up to the NUL, as tgtadm does
    let end = body.iter().position(|&b| b == 0).unwrap_or(body.len());
    Ok(String::from_utf8_lossy(&body[..end]).into_owned())
}

/// After `--op delete --mode system`: wait until the daemon is gone (bounded).
fn wait_gone(path: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if UnixStream::connect(path).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

const USAGE: &str = "Linux SCSI Target administration utility (numatgtadm, tgtadm-compatible)

Usage: tgtadm [OPTION]
--lld <driver> --mode target --op new --tid <id> --targetname <name>
--lld <driver> --mode target --op delete [--force] --tid <id>
--lld <driver> --mode target --op show [--tid <id>]
--lld <driver> --mode target --op update --tid <id> --name <param> --value <value>
--lld <driver> --mode target --op bind --tid <id> --initiator-address <address>
--lld <driver> --mode target --op bind --tid <id> --initiator-name <name>
--lld <driver> --mode target --op unbind --tid <id> --initiator-address <address>
--lld <driver> --mode target --op unbind --tid <id> --initiator-name <name>
--lld <driver> --mode logicalunit --op new --tid <id> --lun <lun> --backing-store <path> [--bstype <type>] [--bsoflags {direct|sync}] [--blocksize <size>]
--lld <driver> --mode logicalunit --op delete --tid <id> --lun <lun>
--lld <driver> --mode logicalunit --op update --tid <id> --lun <lun> --params <param=value[,param=value...]>
--lld <driver> --mode logicalunit --op stat --tid <id> --lun <lun>
--lld <driver> --mode account --op new --user <name> --password <pass>
--lld <driver> --mode account --op delete --user <name>
--lld <driver> --mode account --op bind --tid <id> --user <name> [--outgoing]
--lld <driver> --mode account --op unbind --tid <id> --user <name> [--outgoing]
--lld <driver> --mode account --op show
--lld <driver> --mode conn --op show --tid <id>
--lld <driver> --mode conn --op delete --tid <id> --sid <sid> --cid <cid>
--lld <driver> --mode portal --op new|delete --param portal=<address>[:<port>]
--lld <driver> --mode portal --op show
--lld <driver> --mode lld --op start|stop|show
--mode sys --op show|delete
--mode sys --op update --name State|debug --value <value>
--dump                     print the running configuration as numatgt YAML (numatgtd only)
--reload [FILE]            apply a configuration file (default: the daemon's --config)
                           to the running daemon; only changed targets are touched
--upgrade [--binary PATH]  replace the running daemon, in the same process, with a new
                           numatgtd executable (default: the file it was started from);
                           sessions log in again, no connection is refused
-C, --control-port <port>  use /var/run/tgtd/socket.<port> ($TGT_IPC_SOCKET.<port>)
-h, --help                 display this help and exit
-V, --version              display version and exit
";

/// `numatgtadm [-C N] --dump`: the running configuration as numatgt YAML (numatgtd only).
fn dump(argv: &[String]) -> Result<String, Fail> {
    let rest: Vec<String> = argv.iter().filter(|a| *a != "--dump").cloned().collect();
    let a = match parse(&rest)? {
        Parsed::Run(a) => a,
        _ => return Err(fail("--dump takes no other options than -C")),
    };
    if let Some(c) = a.letters.iter().find(|c| **c != 'C' && **c != 'd') {
        return Err(fail(format!("--dump: option '-{c}' is not allowed")));
    }
    let req = ReqHeader {
        mode: Mode::System.as_u32(),
        op: Op::Show.as_u32(),
        ..ReqHeader::default()
    }
    .encode("dump=yaml");
    let out = exchange(&socket_path(a.control_port), &req)?;
    if !out.starts_with('#') {
        return Err(fail("the daemon does not support --dump (is it tgtd?)"));
    }
    Ok(out)
}

/// `numatgtadm [-C N] --reload [FILE]`: apply a configuration file to the running daemon,
/// touching only the targets whose definition changed (numatgtd only).
fn reload(argv: &[String]) -> Result<String, Fail> {
    let at = argv.iter().position(|a| a == "--reload").unwrap_or(0);
    let file = argv
        .get(at + 1)
        .filter(|f| !f.starts_with('-'))
        .cloned()
        .unwrap_or_default();
    let skip = if file.is_empty() { 1 } else { 2 };
    let rest: Vec<String> = argv
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < at || *i >= at + skip)
        .map(|(_, a)| a.clone())
        .collect();
    let a = match parse(&rest)? {
        Parsed::Run(a) => a,
        _ => return Err(fail("--reload takes no other options than -C")),
    };
    if let Some(c) = a.letters.iter().find(|c| **c != 'C' && **c != 'd') {
        return Err(fail(format!("--reload: option '-{c}' is not allowed")));
    }
    let file = if file.is_empty() {
        String::new()
    } else {
        // the daemon resolves paths from its own working directory: send an absolute one
        std::fs::canonicalize(&file)
            .map_err(|e| fail(format!("{file}: {e}")))?
            .display()
            .to_string()
    };
    if file.contains(',') {
        return Err(fail("--reload: the file name may not contain ','"));
    }
    let req = ReqHeader {
        mode: Mode::System.as_u32(),
        op: Op::Update.as_u32(),
        ..ReqHeader::default()
    }
    .encode(&format!("reload={file}"));
    let out = exchange(&socket_path(a.control_port), &req)?;
    if let Some(why) = out.trim_end().strip_prefix("reload failed: ") {
        return Err(fail(why.to_string()));
    }
    if !out.starts_with("reloaded") && !out.starts_with("configuration unchanged") {
        return Err(fail("the daemon does not support --reload (is it tgtd?)"));
    }
    Ok(out)
}

/// `numatgtadm [-C N] --upgrade [--binary PATH]`: hand the running daemon over to a new
/// numatgtd executable (numatgtd only); waits for the outcome.
fn upgrade(argv: &[String]) -> Result<String, Fail> {
    let mut binary = String::new();
    let mut rest = Vec::new();
    let mut i = 0;
    while i < argv.len() {
        match argv[i].as_str() {
            "--upgrade" => {}
            "--binary" => {
                binary = argv
                    .get(i + 1)
                    .cloned()
                    .ok_or_else(|| fail("--binary needs a path"))?;
                i += 1;
            }
            a => match a.strip_prefix("--binary=") {
                Some(b) => binary = b.to_string(),
                None => rest.push(a.to_string()),
            },
        }
        i += 1;
    }
    let a = match parse(&rest)? {
        Parsed::Run(a) => a,
        _ => {
            return Err(fail(
                "--upgrade takes no other options than -C and --binary",
            ));
        }
    };
    if let Some(c) = a.letters.iter().find(|c| **c != 'C' && **c != 'd') {
        return Err(fail(format!("--upgrade: option '-{c}' is not allowed")));
    }
    if !binary.is_empty() {
        // the daemon starts it from its own working directory: send an absolute path
        binary = std::fs::canonicalize(&binary)
            .map_err(|e| fail(format!("{binary}: {e}")))?
            .display()
            .to_string();
    }
    if binary.contains(',') {
        return Err(fail("--binary: the path may not contain ','"));
    }
    let req = ReqHeader {
        mode: Mode::System.as_u32(),
        op: Op::Update.as_u32(),
        ..ReqHeader::default()
    }
    .encode(&format!("upgrade={binary}"));
    let out = exchange_within(&socket_path(a.control_port), &req, Duration::from_secs(900))?;
    if let Some(why) = out.trim_end().strip_prefix("upgrade failed: ") {
        return Err(fail(why.to_string()));
    }
    if !out.starts_with("upgraded") {
        return Err(fail("the daemon does not support --upgrade (is it tgtd?)"));
    }
    Ok(out)
}

fn run(argv: &[String]) -> Result<String, Fail> {
    if argv.first().is_some_and(|a| a == "--generate") {
        return manual::generate(&argv[1..]);
    }
    if argv.iter().any(|a| a == "--dump") {
        return dump(argv);
    }
    if argv.iter().any(|a| a == "--reload") {
        return reload(argv);
    }
    if argv.iter().any(|a| a == "--upgrade") {
        return upgrade(argv);
    }
    let mut a = match parse(argv)? {
        Parsed::Help => return Ok(USAGE.to_string()),
        Parsed::Version => return Ok(format!("{}\n", env!("CARGO_PKG_VERSION"))),
        Parsed::Run(a) => a,
    };
    let (mode, op) = validate(&mut a)?;
    let path = socket_path(a.control_port);
    let out = exchange(&path, &request(&a, mode, op))?;
    if mode == Mode::System && op == Op::Delete {
        wait_gone(&path);
    }
    Ok(out)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match run(&argv) {
        Ok(out) => {
            print!("{out}");
            let _ = std::io::stdout().flush();
            ExitCode::SUCCESS
        }
        Err(Fail(msg, code)) => {
            eprint!("{msg}");
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn long_prefixes_and_quirks() {
        let Parsed::Run(a) = parse(&args("--par portal=1.2.3.4 --op new")).unwrap_or_else(|f| {
            panic!("{}", f.0);
        }) else {
            panic!("not a run")
        };
        assert_eq!(a.target_ops.as_deref(), Some("portal=1.2.3.4"));
        // --o is ambiguous (op, outgoing)
        let Err(Fail(m, 22)) = parse(&args("--o show")) else {
            panic!("--o accepted")
        };
        assert!(m.contains("'--op' '--outgoing'"), "{m}");
        // -F swallows an argument
        let Err(Fail(m, 22)) = parse(&args("--op delete -F")) else {
            panic!("-F without argument accepted")
        };
        assert!(m.contains("option requires an argument -- 'F'"), "{m}");
        let Ok(Parsed::Run(a)) = parse(&args("-F x --tid=3 -t4")) else {
            panic!("parse")
        };
        assert!(a.force);
        assert_eq!(a.tid, 4);
    }

    #[test]
    fn numbers_and_validation() {
        let Err(Fail(m, 22)) = parse(&args("-C 40000")) else {
            panic!("-C 40000 accepted")
        };
        assert!(
            m.starts_with("-C argument value '40000' out of range\n"),
            "{m}"
        );
        let Ok(Parsed::Run(mut a)) = parse(&args("--op new --mode target --tid 1")) else {
            panic!("parse")
        };
        let Err(Fail(m, 22)) = validate(&mut a) else {
            panic!("no name accepted")
        };
        assert_eq!(
            m,
            "tgtadm: creating new target requires a name, use --targetname\n"
        );
    }

    #[test]
    fn payload_order_matches_tgtadm() {
        let Ok(Parsed::Run(a)) = parse(&args(
            "--op new --mode lu --tid 1 --lun 2 -b /tmp/f --blocksize 4096 -f direct -E aio",
        )) else {
            panic!("parse")
        };
        let r = request(&a, Mode::Device, Op::New);
        assert_eq!(
            &r[120..],
            b"path=/tmp/f,bstype=aio,bsoflags=direct,blocksize=4096\0"
        );
        let Ok(Parsed::Run(a)) = parse(&args("--op update --mode lu --params a=1,b=2")) else {
            panic!("parse")
        };
        let r = request(&a, Mode::Device, Op::Update);
        assert_eq!(&r[120..], b"targetOps a=1,b=2,\0");
    }
}
