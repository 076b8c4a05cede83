//! Binary values in text keys (RFC 7143 §6.1 `binary-value`): `0x`/`0X` followed by hex
//! digits (an odd number of digits has an implied leading zero nibble) or `0b`/`0B`
//! followed by base64 (RFC 4648, standard alphabet, `=` padding optional). Decoding is
//! bounded: the decoded length is checked against a caller's limit before anything is
//! allocated. Used by CHAP (CHAP_C, CHAP_R).

/// Why a binary value could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BinaryError {
    #[error("binary value without 0x/0b prefix")]
    NoPrefix,
    #[error("empty binary value")]
    Empty,
    #[error("invalid hex digit")]
    BadHex,
    #[error("invalid base64")]
    BadBase64,
    #[error("binary value longer than {0} bytes")]
    TooLong(usize),
}

/// Decodes a hex (`0x`) or base64 (`0b`) binary value of at most `max` bytes.
pub fn decode(v: &str, max: usize) -> Result<Vec<u8>, BinaryError> {
    let b = v.as_bytes();
    if b.len() < 2 || b[0] != b'0' {
        return Err(BinaryError::NoPrefix);
    }
    match b[1] {
        b'x' | b'X' => decode_hex(&b[2..], max),
        b'b' | b'B' => decode_base64(&b[2..], max),
        _ => Err(BinaryError::NoPrefix),
    }
}

/// Decodes what [`encode_hex`] made of `max` bytes at most, the empty `0x` included (for
/// the server's own records, where an empty value is a value).
pub fn decode_hex_record(v: &str, max: usize) -> Result<Vec<u8>, BinaryError> {
    match v.strip_prefix("0x") {
        Some("") => Ok(Vec::new()),
        Some(d) => decode_hex(d.as_bytes(), max),
        None => Err(BinaryError::NoPrefix),
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn decode_hex(d: &[u8], max: usize) -> Result<Vec<u8>, BinaryError> {
    if d.is_empty() {
        return Err(BinaryError::Empty);
    }
    let n = d.len().div_ceil(2);
    if n > max {
        return Err(BinaryError::TooLong(max));
    }
    let mut out = Vec::with_capacity(n);
    // an odd digit count: the first byte holds a single (low) nibble
    let (head, rest) = d.split_at(d.len() % 2);
    if let Some(&c) = head.first() {
        out.push(hex_val(c).ok_or(BinaryError::BadHex)?);
    }
    for pair in rest.chunks_exact(2) {
        let hi = hex_val(pair[0]).ok_or(BinaryError::BadHex)?;
        let lo = hex_val(pair[1]).ok_or(BinaryError::BadHex)?;
        out.push(hi << 4 | lo);
    }
    Ok(out)
}

fn b64_val(c: u8) -> Option<u32> {
    match c {
        b'A'..=b'Z' => Some(u32::from(c - b'A')),
        b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
        b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

fn decode_base64(d: &[u8], max: usize) -> Result<Vec<u8>, BinaryError> {
    let body_len = d.iter().rposition(|&c| c != b'=').map_or(0, |p| p + 1);
    let pad = d.len() - body_len;
    let body = &d[..body_len];
    if body.is_empty() {
        return Err(BinaryError::Empty);
    }
    // padding: at most two '=', and only to complete the last 4-character group
    if pad > 2 || (pad > 0 && d.len() % 4 != 0) || body.len() % 4 == 1 {
        return Err(BinaryError::BadBase64);
    }
    let n = body.len() / 4 * 3 + (body.len() % 4).saturating_sub(1);
    if n > max {
        return Err(BinaryError::TooLong(max));
    }
    let mut out = Vec::with_capacity(n);
    for group in body.chunks(4) {
        let mut acc = 0u32;
        for &c in group {
            acc = acc << 6 | b64_val(c).ok_or(BinaryError::BadBase64)?;
        }
        // left-align a short final group to 24 bits
        acc <<= 6 * (4 - group.len() as u32);
        let bytes = acc.to_be_bytes();
        out.extend_from_slice(&bytes[1..group.len()]);
    }
    Ok(out)
}

/// Encodes bytes as a `0x` hex binary value (lowercase).
pub fn encode_hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 + 2 * b.len());
    s.push_str("0x");
    for &x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 15)]));
    }
    s
}

/// Encodes bytes as a `0b` base64 binary value (with padding).
pub fn encode_base64(b: &[u8]) -> String {
    const ALPHA: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(2 + b.len().div_ceil(3) * 4);
    s.push_str("0b");
    for chunk in b.chunks(3) {
        let mut v = [0u8; 4];
        v[1..=chunk.len()].copy_from_slice(chunk);
        let acc = u32::from_be_bytes(v);
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(char::from(ALPHA[((acc >> (18 - 6 * i)) & 63) as usize]));
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hex() {
        assert_eq!(decode("0x00ff10", 8).unwrap(), vec![0, 0xff, 0x10]);
        assert_eq!(decode("0XaBc", 8).unwrap(), vec![0x0a, 0xbc]);
        assert_eq!(decode("0x1", 8).unwrap(), vec![1]);
        assert_eq!(decode("0x", 8), Err(BinaryError::Empty));
        assert_eq!(decode("0xzz", 8), Err(BinaryError::BadHex));
        assert_eq!(decode("0x12 3", 8), Err(BinaryError::BadHex));
        assert_eq!(decode("0x112233", 2), Err(BinaryError::TooLong(2)));
        assert_eq!(decode("1234", 8), Err(BinaryError::NoPrefix));
        assert_eq!(decode("0y12", 8), Err(BinaryError::NoPrefix));
        assert_eq!(decode("", 8), Err(BinaryError::NoPrefix));
        assert_eq!(encode_hex(&[0xde, 0xad, 0x01]), "0xdead01");
    }

    #[test]
    fn base64_rfc4648_vectors() {
        // RFC 4648 §10
        let vectors = [
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, enc) in vectors {
            assert_eq!(encode_base64(plain.as_bytes()), format!("0b{enc}"));
            assert_eq!(decode(&format!("0b{enc}"), 64).unwrap(), plain.as_bytes());
            let unpadded = enc.trim_end_matches('=');
            assert_eq!(
                decode(&format!("0B{unpadded}"), 64).unwrap(),
                plain.as_bytes()
            );
        }
        assert_eq!(decode("0b", 8), Err(BinaryError::Empty));
        assert_eq!(decode("0b====", 8), Err(BinaryError::Empty));
        assert_eq!(decode("0bZ", 8), Err(BinaryError::BadBase64));
        assert_eq!(decode("0bZg=", 8), Err(BinaryError::BadBase64));
        assert_eq!(decode("0bZ===", 8), Err(BinaryError::BadBase64));
        assert_eq!(decode("0bZm9v!A==", 8), Err(BinaryError::BadBase64));
        assert_eq!(decode("0bZ=9v", 8), Err(BinaryError::BadBase64));
        assert_eq!(decode("0bZm9vYmFy", 5), Err(BinaryError::TooLong(5)));
    }

    proptest! {
        #[test]
        fn roundtrip(b in prop::collection::vec(any::<u8>(), 1..200)) {
            prop_assert_eq!(decode(&encode_hex(&b), 200).unwrap(), b.clone());
            prop_assert_eq!(decode(&encode_base64(&b), 200).unwrap(), b);
        }

        #[test]
        fn never_panics(s in "\\PC{0,64}", max in 0usize..40) {
            if let Ok(v) = decode(&s, max) {
                prop_assert!(v.len() <= max);
            }
        }
    }
}
