//! iSCSI name syntax (RFC 3720 §3.2.6, RFC 7143 §4.2.7): the `iqn.`, `eui.`
//! and `naa.` formats. Owns the checks only; names are never rewritten here.

/// Longest iSCSI name, in bytes of UTF-8 (RFC 7143 §4.2.7.1).
pub const MAX_NAME_LEN: usize = 223;

/// Checks that `name` is a well-formed iSCSI name:
///
/// - `iqn.YYYY-MM.<reversed domain>[:<anything>]`, e.g.
///   `iqn.2026-11.org.numatgt:disk1`. The date is a year and month (01..12);
///   the naming authority is dot-separated labels of `a-z`, `0-9` and `-`;
///   the whole name may only contain lowercase ASCII letters, digits, `-`, `.`,
///   `:` and non-ASCII characters (names are case-normalised to lowercase, so
///   uppercase ASCII is rejected rather than silently folded).
/// - `eui.` followed by exactly 16 hex digits.
/// - `naa.` followed by 16 or 32 hex digits.
///
/// At most 223 bytes. Returns the problem in words.
pub fn validate_iscsi_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(
            "must not be empty (an iSCSI name such as iqn.2026-11.org.example:disk1)".into(),
        );
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "iSCSI name is {} bytes long, the maximum is {MAX_NAME_LEN}",
            name.len()
        ));
    }
    let lower = name.get(..4).map(str::to_ascii_lowercase);
    match lower.as_deref() {
        Some("iqn.") => validate_iqn(name),
        Some("eui.") => validate_hex(name, &[16], "eui"),
        Some("naa.") => validate_hex(name, &[16, 32], "naa"),
        _ => Err(format!(
            "{name:?} is not an iSCSI name (must start with iqn., eui. or naa.)"
        )),
    }
}

fn validate_hex(name: &str, lens: &[usize], kind: &str) -> Result<(), String> {
    let (prefix, hex) = name.split_at(4);
    if prefix != format!("{kind}.") {
        return Err(format!(
            "{name:?}: the prefix must be lowercase \"{kind}.\""
        ));
    }
    let want = lens
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(" or ");
    if !lens.contains(&hex.len()) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{name:?}: a {kind}. name needs exactly {want} hex digits after \"{kind}.\""
        ));
    }
    Ok(())
}

fn validate_iqn(name: &str) -> Result<(), String> {
    if let Some(c) = name.chars().find(|c| c.is_ascii_uppercase()) {
        return Err(format!(
            "{name:?}: uppercase {c:?} is not allowed in an iqn name (iSCSI names are lowercase)"
        ));
    }
    if let Some(c) = name.chars().find(|&c| {
        c.is_ascii()
            && !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | ':'))
    }) {
        return Err(format!(
            "{name:?}: character {c:?} is not allowed in an iSCSI name (use a-z, 0-9, '-', '.', ':')"
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "{name:?}: character {c:?} is not allowed in an iSCSI name"
        ));
    }
    let rest = &name[4..];
    let date_ok = rest.len() >= 8 && {
        let d = &rest.as_bytes()[..8];
        d[..4].iter().all(u8::is_ascii_digit)
            && d[4] == b'-'
            && d[5..7].iter().all(u8::is_ascii_digit)
            && matches!((d[5] - b'0') * 10 + (d[6] - b'0'), 1..=12)
            && d[7] == b'.'
    };
    if !date_ok {
        return Err(format!(
            "{name:?}: an iqn name must look like iqn.YYYY-MM.reversed.domain[:id] (bad date)"
        ));
    }
    let after_date = &rest[8..];
    let authority = after_date.split(':').next().unwrap_or("");
    if authority.is_empty()
        || authority.split('.').any(|label| {
            label.is_empty()
                || !label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
    {
        return Err(format!(
            "{name:?}: an iqn name must look like iqn.YYYY-MM.reversed.domain[:id] (bad naming authority {authority:?})"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_names() {
        for n in [
            "iqn.2026-11.org.numatgt:demo",
            "iqn.2026-11.org.numatgt",
            "iqn.1993-08.org.debian:01:abcdef0123",
            "iqn.2001-04.com.example:storage:diskarrays-sn-a8675309",
            "iqn.2001-04.com.example:stor\u{e4}ge",
            "eui.02004567A425678D",
            "eui.02004567a425678d",
            "naa.52004567BA64678D",
            "naa.62004567BA64678D0123456789ABCDEF",
        ] {
            assert_eq!(validate_iscsi_name(n), Ok(()), "{n}");
        }
    }

    #[test]
    fn bad_names() {
        for n in [
            "",
            "iqn",
            "foo.2026-11.org.x",
            "iqn.2026-11.org.Numatgt:demo",
            "IQN.2026-11.org.numatgt:demo",
            "iqn.2026-13.org.numatgt:demo",
            "iqn.2026-00.org.numatgt:demo",
            "iqn.26-11.org.numatgt:demo",
            "iqn.2026-11:demo",
            "iqn.2026-11..org:demo",
            "iqn.2026-11.org.numatgt:de mo",
            "iqn.2026-11.org.numatgt:de_mo",
            "iqn.2026-11.org.numatgt:de/mo",
            "eui.02004567A425678",
            "eui.02004567A425678DX",
            "EUI.02004567A425678D",
            "naa.52004567BA64678D01",
            "naa.5200456ZBA64678D",
        ] {
            assert!(validate_iscsi_name(n).is_err(), "{n:?} accepted");
        }
        let long = format!("iqn.2026-11.org.numatgt:{}", "a".repeat(200));
        assert!(validate_iscsi_name(&long).unwrap_err().contains("223"));
        let max = format!("iqn.2026-11.org.numatgt:{}", "a".repeat(223 - 24));
        assert_eq!(max.len(), 223);
        assert_eq!(validate_iscsi_name(&max), Ok(()));
    }
}
