//! Byte sizes as written in the configuration: a plain integer (bytes) or a
//! number with a binary suffix `K`, `M`, `G`, `T` (optionally followed by `iB`
//! or `B`), e.g. `512`, `64K`, `1G`, `2TiB`. Owns parsing and the canonical
//! short form used when a configuration is written back out.

const UNITS: [(char, u32); 4] = [('K', 10), ('M', 20), ('G', 30), ('T', 40)];

/// Parses a size such as `"1G"` (= 1073741824), `"64K"`, `"4096"` or `"2TiB"`.
///
/// Suffixes are binary (K = 1024) and case-insensitive; `B`/`iB` after the unit
/// is accepted. Whitespace around the value and between number and unit is
/// allowed. Returns a description of the problem when the text is not a size
/// or does not fit in 64 bits.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, rest) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(format!(
            "not a size (expected a number with an optional K, M, G or T suffix, got {text:?})"
        ));
    }
    let value: u64 = num
        .parse()
        .map_err(|_| format!("size {text:?} does not fit in 64 bits"))?;
    let rest = rest.trim_start();
    let mut chars = rest.chars();
    let shift = match chars.next() {
        None => 0,
        Some(c) => {
            let upper = c.to_ascii_uppercase();
            let Some(&(_, shift)) = UNITS.iter().find(|(u, _)| *u == upper) else {
                if upper == 'B' && chars.as_str().is_empty() {
                    return Ok(value);
                }
                return Err(format!(
                    "unknown size suffix in {text:?} (use K, M, G or T, binary)"
                ));
            };
            let tail = chars.as_str();
            if !(tail.is_empty()
                || tail.eq_ignore_ascii_case("b")
                || tail.eq_ignore_ascii_case("ib"))
            {
                return Err(format!(
                    "unknown size suffix in {text:?} (use K, M, G or T, binary)"
                ));
            }
            shift
        }
    };
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("size {text:?} does not fit in 64 bits"))
}

/// Formats a byte count in the shortest exact form `parse_size` reads back:
/// `1073741824` -> `"1G"`, `1536` -> `"1536"`, `0` -> `"0"`.
pub fn format_size(bytes: u64) -> String {
    if bytes == 0 {
        return "0".to_string();
    }
    for &(unit, shift) in UNITS.iter().rev() {
        let mult = 1u64 << shift;
        if bytes % mult == 0 {
            return format!("{}{}", bytes / mult, unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("3 GB"), Ok(3 << 30));
        assert_eq!(parse_size(" 10B "), Ok(10));
    }

    #[test]
    fn bad_sizes() {
        for bad in [
            "",
            "G",
            "1X",
            "1GG",
            "-1",
            "1.5G",
            "99999999999999999999",
            "16777216T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn format_round_trips() {
        for v in [0u64, 1, 512, 1536, 1 << 20, 3 << 30, 5 << 40, u64::MAX] {
            assert_eq!(parse_size(&format_size(v)), Ok(v));
        }
        assert_eq!(format_size(1 << 30), "1G");
        assert_eq!(format_size(1536), "1536");
    }
}
