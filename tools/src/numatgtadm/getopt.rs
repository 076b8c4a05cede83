//! GNU `getopt_long` as tgtadm uses it: permuting, unambiguous long prefixes, tgtadm's option
//! table (with its `F:`/`O:` quirk), getopt's own error messages, and tgt's number parsing.

use super::{EINVAL, Fail, TRY_HELP, getopt_err};

/// getopt's short option string of tgtadm (`F:` and `O:` take an argument: tgtadm's quirk).
pub(super) const SHORT: &str = "dhVL:o:m:t:s:c:l:n:v:b:E:f:y:T:I:Q:u:p:H:F:P:B:Y:O:C:S:";

/// Long options: name, takes an argument, short letter; in tgtadm's table order.
pub(super) const LONG: [(&str, bool, char); 29] = [
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

fn short_takes_arg(c: char) -> Option<bool> {
    let i = SHORT.find(c)?;
    if c == ':' {
        return None;
    }
    Some(SHORT[i + c.len_utf8()..].starts_with(':'))
}

/// Options in command-line order (letter, argument) and the operands.
pub(super) type Scanned = (Vec<(char, String)>, Vec<String>);

/// GNU getopt_long (permuting): the options in order, and the operands.
pub(super) fn getopt(args: &[String]) -> Result<Scanned, Fail> {
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
pub(super) fn number(letter: char, v: &str, max: u64) -> Result<u64, Fail> {
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
