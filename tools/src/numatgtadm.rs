//! numatgtadm: tgtadm's command line, byte for byte where scripts can see it (GNU
//! getopt_long parsing with unambiguous long prefixes and the `-F`/`-O` quirk, per-mode
//! validation messages, exit codes 0/22/1, `tgtadm: <message>` on stderr), speaking the
//! tgtadm wire protocol to numatgtd (or tgtd) on `$TGT_IPC_SOCKET.<port>`. `--dump` (numatgt
//! only) prints the running configuration as YAML.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use target_server::mgmt::wire::{self, ErrCode, Mode, Op, ReqHeader};

const EINVAL: u8 = 22;
const TRY_HELP: &str = "Try `tgtadm --help' for more information.";

/// getopt's short option string of tgtadm (`F:` and `O:` take an argument: tgtadm's quirk).
const SHORT: &str = "dhVL:o:m:t:s:c:l:n:v:b:E:f:y:T:I:Q:u:p:H:F:P:B:Y:O:C:S:";

/// Long options: name, takes an argument, short letter; in tgtadm's table order.
const LONG: [(&str, bool, char); 29] = [
    ("debug", false, 'd'),
    ("help", false, 'h'),
    ("version", false, 'V'),
    ("lld", true, 'L'),
    ("op", true, 'o'),
    ("mode", true, 'm'),
    ("tid", true, 't'),
    ("sid", true, 's'),
    ("cid", true, 'c'),
    ("lun", true, 'l'),
    ("name", true, 'n'),
    ("value", true, 'v'),
    ("backing-store", true, 'b'),
    ("bstype", true, 'E'),
    ("bsopts", true, 'S'),
    ("bsoflags", true, 'f'),
    ("blocksize", true, 'y'),
    ("targetname", true, 'T'),
    ("initiator-address", true, 'I'),
    ("initiator-name", true, 'Q'),
    ("user", true, 'u'),
    ("password", true, 'p'),
    ("host", true, 'H'),
    ("force", false, 'F'),
    ("params", true, 'P'),
    ("bus", true, 'B'),
    ("device-type", true, 'Y'),
    ("outgoing", false, 'O'),
    ("control-port", true, 'C'),
];

/// A failure: message for stderr (already formatted) and exit code.
struct Fail(String, u8);

fn getopt_err(msg: String) -> Fail {
    Fail(format!("tgtadm: {msg}\n{TRY_HELP}\n"), EINVAL)
}

fn fail(msg: impl Into<String>) -> Fail {
    Fail(format!("tgtadm: {}\n", msg.into()), EINVAL)
}

fn short_takes_arg(c: char) -> Option<bool> {
    let i = SHORT.find(c)?;
    if c == ':' {
        return None;
    }
    Some(SHORT[i + c.len_utf8()..].starts_with(':'))
}

/// Options in command-line order (letter, argument) and the operands.
type Scanned = (Vec<(char, String)>, Vec<String>);

/// GNU getopt_long (permuting): the options in order, and the operands.
fn getopt(args: &[String]) -> Result<Scanned, Fail> {
    let mut opts = Vec::new();
    let mut operands = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            operands.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (body, None),
            };
            let exact = LONG.iter().find(|(n, _, _)| *n == name);
            let cands: Vec<&(&str, bool, char)> = LONG
                .iter()
                .filter(|(n, _, _)| n.starts_with(name))
                .collect();
            let opt = match (exact, cands.len()) {
                (Some(o), _) => o,
                (None, 1) => cands[0],
                (None, 0) => return Err(getopt_err(format!("unrecognized option '{a}'"))),
                (None, _) => {
                    let first = cands[0];
                    if cands.iter().all(|c| c.1 == first.1 && c.2 == first.2) {
                        first
                    } else {
                        let list: Vec<String> =
                            cands.iter().map(|c| format!(" '--{}'", c.0)).collect();
                        return Err(getopt_err(format!(
                            "option '--{name}' is ambiguous; possibilities:{}",
                            list.concat()
                        )));
                    }
                }
            };
            let (lname, has_arg, letter) = *opt;
            let val = if has_arg {
                match inline {
                    Some(v) => v,
                    None => match args.get(i) {
                        Some(v) => {
                            i += 1;
                            v.clone()
                        }
                        None => {
                            return Err(getopt_err(format!(
                                "option '--{lname}' requires an argument"
                            )));
                        }
                    },
                }
            } else {
                if inline.is_some() {
                    return Err(getopt_err(format!(
                        "option '--{lname}' doesn't allow an argument"
                    )));
                }
                String::new()
            };
            opts.push((letter, val));
            continue;
        }
        if a.len() > 1 && a.starts_with('-') {
            let chars: Vec<char> = a[1..].chars().collect();
            let mut k = 0;
            while k < chars.len() {
                let c = chars[k];
                k += 1;
                match short_takes_arg(c) {
                    None => return Err(getopt_err(format!("invalid option -- '{c}'"))),
                    Some(false) => opts.push((c, String::new())),
                    Some(true) => {
                        let rest: String = chars[k..].iter().collect();
                        let val = if !rest.is_empty() {
                            rest
                        } else if let Some(v) = args.get(i) {
                            i += 1;
                            v.clone()
                        } else {
                            return Err(getopt_err(format!(
                                "option requires an argument -- '{c}'"
                            )));
                        };
                        opts.push((c, val));
                        break;
                    }
                }
            }
            continue;
        }
        operands.push(a.clone());
    }
    Ok((opts, operands))
}

/// tgt's number options: digits only; "invalid" or "out of range".
fn number(letter: char, v: &str, max: u64) -> Result<u64, Fail> {
    let bad = |what: &str| {
        Fail(
            format!("-{letter} argument value '{v}' {what}\n{TRY_HELP}\n"),
            EINVAL,
        )
    };
    let t = v.trim_start();
    if t.is_empty() || t.starts_with('-') {
        return Err(bad("invalid"));
    }
    let digits = t.strip_prefix('+').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("invalid"));
    }
    match digits.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(bad("out of range")),
    }
}

fn mode_of(s: &str) -> Option<Mode> {
    Some(match s {
        "system" | "sys" => Mode::System,
        "target" | "tgt" => Mode::Target,
        "logicalunit" | "lu" => Mode::Device,
        "portal" | "pt" => Mode::Portal,
        "session" | "sess" => Mode::Session,
        "connection" | "conn" => Mode::Connection,
        "account" => Mode::Account,
        "lld" => Mode::Lld,
        _ => return None,
    })
}

fn op_of(s: &str) -> Option<Op> {
    Some(match s {
        "new" => Op::New,
        "delete" => Op::Delete,
        "show" => Op::Show,
        "bind" => Op::Bind,
        "unbind" => Op::Unbind,
        "update" => Op::Update,
        "stat" => Op::Stats,
        "start" => Op::Start,
        "stop" => Op::Stop,
        _ => return None,
    })
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
    Some(match s {
        "disk" => 0x00,
        "tape" | "ssc" => 0x01,
        "cd" => 0x05,
        "changer" => 0x08,
        "osd" => 0x11,
        "pt" => 0xff,
        _ => return None,
    })
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

/// The per-mode checks tgtadm makes before it talks to the daemon.
fn validate(a: &mut Args) -> Result<(Mode, Op), Fail> {
    let Some(op) = a.op else {
        return Err(fail("specify the operation type"));
    };
    let Some(mode) = a.mode else {
        return Err(fail("specify the mode"));
    };
    let allowed = |a: &Args, set: &str| -> Result<(), Fail> {
        for &c in &a.letters {
            if c != 'd' && !set.contains(c) {
                return Err(fail(format!(
                    "{} mode: option '-{c}' is not allowed/supported",
                    mode_name(mode)
                )));
            }
        }
        Ok(())
    };
    let unsupported = || {
        fail(format!(
            "operation {} not supported in {} mode",
            op_name(op),
            mode_name(mode)
        ))
    };
    let need_tid = |a: &Args| -> Result<(), Fail> {
        match a.tid {
            0 => Err(fail("'tid' cannot be 0")),
            t if t < 0 => Err(fail("'tid' option is necessary")),
            _ => Ok(()),
        }
    };
    let name_value = |a: &Args| -> Result<(), Fail> {
        if a.name.is_none() || a.value.is_none() {
            return Err(fail("update operation requires 'name' and 'value' options"));
        }
        Ok(())
    };
    match mode {
        Mode::System => {
            if op == Op::Update {
                allowed(a, "LmonvC")?;
                name_value(a)?;
            }
        }
        Mode::Target => {
            if op != Op::Show {
                need_tid(a)?;
            }
            match op {
                Op::New => {
                    allowed(a, "LmotTC")?;
                    if a.targetname.is_none() {
                        return Err(fail(
                            "creating new target requires a name, use --targetname",
                        ));
                    }
                }
                Op::Delete => allowed(a, "LmotCF")?,
                Op::Show | Op::Stats => allowed(a, "LmotC")?,
                Op::Bind | Op::Unbind => {
                    allowed(a, "LmotIQBHC")?;
                    if a.address.is_none() && a.iqn.is_none() && a.bus.is_none() {
                        return Err(fail(format!(
                            "{} operation requires initiator-address, initiator-nameor bus",
                            op_name(op)
                        )));
                    }
                }
                Op::Update => {
                    allowed(a, "LmotnvC")?;
                    name_value(a)?;
                }
                _ => return Err(unsupported()),
            }
        }
        Mode::Account => match op {
            Op::New => {
                allowed(a, "LmoupfC")?;
                if a.user.is_none() || a.password.is_none() {
                    return Err(fail("'user' and 'password' options are required"));
                }
            }
            Op::Show => allowed(a, "LmoC")?,
            Op::Delete => {
                allowed(a, "LmouC")?;
                if a.user.is_none() {
                    return Err(fail("'user' option is necessary"));
                }
            }
            Op::Bind | Op::Unbind => {
                allowed(a, "LmotuOC")?;
                if a.user.is_none() {
                    return Err(fail("'user' option is necessary"));
                }
                if a.tid == -1 {
                    a.tid = i64::from(wire::GLOBAL_TID);
                }
            }
            _ => return Err(unsupported()),
        },
        Mode::Device => {
            need_tid(a)?;
            if a.lun == u64::MAX {
                return Err(fail("'lun' option is necessary"));
            }
            match op {
                Op::New => allowed(a, "LmofytlbEYCS")?,
                Op::Delete | Op::Stats => allowed(a, "LmotlC")?,
                Op::Update => allowed(a, "LmofytlPC")?,
                _ => return Err(unsupported()),
            }
        }
        Mode::Portal => match op {
            Op::New | Op::Delete => {
                allowed(a, "LmoCP")?;
                if a.portal_ops.is_none() {
                    return Err(fail("you must specify --param portal=<portal>"));
                }
            }
            Op::Show => allowed(a, "LmoC")?,
            _ => return Err(unsupported()),
        },
        Mode::Lld => match op {
            Op::Start | Op::Stop | Op::Show => allowed(a, "LmoC")?,
            _ => {
                return Err(fail(format!(
                    "option {} not supported in lld mode",
                    op.as_u32()
                )));
            }
        },
        Mode::Session | Mode::Connection => {}
    }
    Ok((mode, op))
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
    let mut s = UnixStream::connect(path).map_err(|_| not_connected())?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    s.write_all(req).map_err(|_| not_connected())?;
    let mut head = [0u8; wire::RSP_HEADER_LEN];
    s.read_exact(&mut head)
        .map_err(|e| fail(format!("can't get the response, {e}")))?;
    let (err, len) = wire::decode_response_header(&head);
    if err != 0 {
        let msg = ErrCode::from_u32(err).map_or("unknown error", ErrCode::message);
        return Err(fail(msg));
    }
    let body_len = (len as usize).saturating_sub(wire::RSP_HEADER_LEN);
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

fn run(argv: &[String]) -> Result<String, Fail> {
    if argv.iter().any(|a| a == "--dump") {
        return dump(argv);
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
