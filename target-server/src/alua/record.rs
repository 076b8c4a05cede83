//! The ownership record of an RBD LUN: a small object beside the image
//! (`numatgt.alua.<image>`) that every gateway reads to learn which target port group owns
//! the LUN, and that a gateway wanting the LUN writes its request into. Its text form
//! (`owner=G request=G acked=0|1`) and nothing else: no I/O here.

/// The largest record read back (the text is about 30 bytes).
pub const MAX_LEN: usize = 256;

/// The record's name beside image `image`.
pub fn object_name(image: &str) -> String {
    format!("numatgt.alua.{image}")
}

/// What the record says.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// The group that owns the LUN (holds the image's lock), as its last owner wrote.
    pub owner: Option<u16>,
    /// The group that asked the owner for the LUN.
    pub request: Option<u16>,
    /// The owner acknowledged `request`: it is writing its dirty blocks back and releases
    /// the lock next.
    pub acked: bool,
}

impl Record {
    /// Reads a record; anything it does not understand (garbage, group 0) is left out, so a
    /// damaged record reads as an empty one.
    pub fn parse(b: &[u8]) -> Record {
        let mut r = Record::default();
        for word in String::from_utf8_lossy(b).split_whitespace() {
            match word.split_once('=') {
                Some(("owner", v)) => r.owner = v.parse().ok().filter(|&g| g != 0),
                Some(("request", v)) => r.request = v.parse().ok().filter(|&g| g != 0),
                Some(("acked", v)) => r.acked = v == "1",
                _ => {}
            }
        }
        r
    }

    /// The record's text.
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "owner={} request={} acked={}\n",
            self.owner.unwrap_or(0),
            self.request.unwrap_or(0),
            u8::from(self.acked)
        )
        .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_garbage() {
        let r = Record {
            owner: Some(2),
            request: Some(1),
            acked: true,
        };
        assert_eq!(Record::parse(&r.encode()), r);
        assert_eq!(Record::parse(b"owner=0 request=x junk"), Record::default());
        assert_eq!(Record::parse(&[0xff, 0xfe]), Record::default());
        assert_eq!(object_name("disk"), "numatgt.alua.disk");
    }
}
