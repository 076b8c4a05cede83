//! `key=value\0` text encoding (RFC 7143 §6.1): parsing with limits (key ≤ 63 bytes,
//! value ≤ 8192 bytes), encoding, and accumulation of text split over several PDUs
//! with the C (continue) bit.

/// Longest key name (RFC 7143 §6.1).
pub const MAX_KEY_LEN: usize = 63;
/// Longest value (RFC 7143 §6.1: 8192 bytes, not counting the NUL).
pub const MAX_VALUE_LEN: usize = 8192;

/// Malformed text data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("text pair without '='")]
    NoEquals,
    #[error("empty key")]
    EmptyKey,
    #[error("key longer than 63 bytes")]
    KeyTooLong,
    #[error("invalid character in key")]
    BadKeyChar,
    #[error("value longer than 8192 bytes")]
    ValueTooLong,
    #[error("text is not UTF-8")]
    NotUtf8,
    #[error("text exchange longer than {0} bytes")]
    TooLong(usize),
}

fn key_char_ok(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b'+' | b'@' | b'_' | b'#')
}

/// Parses a complete text segment into ordered `(key, value)` pairs. Trailing NULs and
/// padding are tolerated; a final pair without NUL is accepted.
pub fn parse(data: &[u8]) -> Result<Vec<(String, String)>, TextError> {
    let mut out = Vec::new();
    for item in data.split(|&b| b == 0) {
        if item.is_empty() {
            continue;
        }
        let eq = item
            .iter()
            .position(|&b| b == b'=')
            .ok_or(TextError::NoEquals)?;
        let (k, v) = (&item[..eq], &item[eq + 1..]);
        if k.is_empty() {
            return Err(TextError::EmptyKey);
        }
        if k.len() > MAX_KEY_LEN {
            return Err(TextError::KeyTooLong);
        }
        if !k.iter().all(|&c| key_char_ok(c)) {
            return Err(TextError::BadKeyChar);
        }
        if v.len() > MAX_VALUE_LEN {
            return Err(TextError::ValueTooLong);
        }
        let k = std::str::from_utf8(k).map_err(|_| TextError::NotUtf8)?;
        let v = std::str::from_utf8(v).map_err(|_| TextError::NotUtf8)?;
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// Appends `key=value\0`.
pub fn push(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    out.push(b'=');
    out.extend_from_slice(value.as_bytes());
    out.push(0);
}

/// Encodes pairs as `key=value\0...`.
pub fn encode<K: AsRef<str>, V: AsRef<str>>(pairs: &[(K, V)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        push(&mut out, k.as_ref(), v.as_ref());
    }
    out
}

/// Collects the data of a text/login exchange split over PDUs with the C bit.
#[derive(Debug, Default)]
pub struct Accumulator {
    buf: Vec<u8>,
    limit: usize,
}

impl Accumulator {
    /// An accumulator that refuses more than `limit` bytes in total.
    pub fn new(limit: usize) -> Self {
        Accumulator {
            buf: Vec::new(),
            limit,
        }
    }
    /// Adds one PDU's data. Returns `Some(all_text)` when `cont` is false (the exchange
    /// is complete), `None` while more PDUs are expected.
    pub fn push(&mut self, data: &[u8], cont: bool) -> Result<Option<Vec<u8>>, TextError> {
        if self.buf.len() + data.len() > self.limit {
            self.buf.clear();
            return Err(TextError::TooLong(self.limit));
        }
        self.buf.extend_from_slice(data);
        if cont {
            Ok(None)
        } else {
            Ok(Some(std::mem::take(&mut self.buf)))
        }
    }
    /// True while a continued exchange is in progress.
    pub fn pending(&self) -> bool {
        !self.buf.is_empty()
    }
}

/// Splits `text` into chunks of at most `max` bytes for PDUs with the C bit.
pub fn split(text: &[u8], max: usize) -> Vec<&[u8]> {
    if text.is_empty() {
        return vec![text];
    }
    text.chunks(max.max(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parse_basic() {
        let p = parse(b"InitiatorName=iqn.x\0SessionType=Normal\0\0\0").unwrap();
        assert_eq!(p[0], ("InitiatorName".into(), "iqn.x".into()));
        assert_eq!(p[1], ("SessionType".into(), "Normal".into()));
        assert_eq!(parse(b"Foo\0"), Err(TextError::NoEquals));
        assert_eq!(parse(b"=x\0"), Err(TextError::EmptyKey));
        let long = format!("{}=1\0", "K".repeat(64));
        assert_eq!(parse(long.as_bytes()), Err(TextError::KeyTooLong));
        let v = format!("K={}\0", "v".repeat(8193));
        assert_eq!(parse(v.as_bytes()), Err(TextError::ValueTooLong));
        assert_eq!(parse(b"K=a=b").unwrap(), vec![("K".into(), "a=b".into())]);
    }

    #[test]
    fn accumulate_with_continue() {
        let mut a = Accumulator::new(16);
        assert_eq!(a.push(b"Key=va", true).unwrap(), None);
        assert!(a.pending());
        assert_eq!(
            a.push(b"lue\0", false).unwrap().unwrap(),
            b"Key=value\0".to_vec()
        );
        assert!(a.push(&[0u8; 17], false).is_err());
    }

    proptest! {
        #[test]
        fn kv_roundtrip(pairs in prop::collection::vec(("[A-Za-z][A-Za-z0-9.+_-]{0,62}", "[ -~]{0,100}"), 0..10)) {
            let bytes = encode(&pairs);
            let back = parse(&bytes).unwrap();
            let want: Vec<(String, String)> = pairs.into_iter().collect();
            prop_assert_eq!(back, want);
        }
    }
}
