//! The Data-In payload type handed to `iscsi_proto::Connection`: small emulated command data
//! (INQUIRY, MODE SENSE…), an O_DIRECT buffer filled by a backing-store read, pinned cache
//! blocks (sent as they are: the connection writes straight from block memory), or zeros
//! (an uncached read of a store that stores nothing, sent from one shared zero buffer). The
//! connection holds a payload once for all of its Data-In PDUs and drops it when the last
//! one is written; cache blocks stay pinned until then. The list of block references
//! ([`BlockList`], the cache's) comes from a per-thread pool, so a cache hit allocates
//! nothing.

pub use cache::BlockList;
use cache::{AlignedBuf, BlockRef};

#[derive(Debug)]
pub enum Payload {
    Bytes(Vec<u8>),
    Block(AlignedBuf),
    /// Pieces of cache blocks, in request order (each reference pins its block).
    Blocks(BlockList),
    /// This many zero bytes, from [`ZEROS`] (no memory of its own: null reads).
    Zeros(usize),
}

/// The zeros every [`Payload::Zeros`] is sent from, a piece at a time.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

impl Payload {
    pub fn bytes(v: Vec<u8>) -> Self {
        Payload::Bytes(v)
    }

    /// The payload as one slice: borrowed when it is one buffer, copied out of the cache
    /// blocks otherwise (off the hot path: compares, copies, read-modify-writes).
    pub fn contiguous(&self) -> std::borrow::Cow<'_, [u8]> {
        match self {
            Payload::Bytes(v) => std::borrow::Cow::Borrowed(v.as_slice()),
            Payload::Block(b) => std::borrow::Cow::Borrowed(b.as_slice()),
            Payload::Blocks(refs) => std::borrow::Cow::Owned(
                refs.iter()
                    .flat_map(|r| r.bytes().iter().copied())
                    .collect(),
            ),
            Payload::Zeros(n) => std::borrow::Cow::Owned(vec![0; *n]),
        }
    }
}

impl iscsi_proto::DataBuf for Payload {
    fn len(&self) -> usize {
        match self {
            Payload::Bytes(v) => v.len(),
            Payload::Block(b) => b.len(),
            Payload::Blocks(refs) => refs.iter().map(BlockRef::len).sum(),
            Payload::Zeros(n) => *n,
        }
    }

    fn chunk(&self, offset: usize) -> &[u8] {
        match self {
            Payload::Bytes(v) => v.get(offset..).unwrap_or(&[]),
            Payload::Block(b) => b.as_slice().get(offset..).unwrap_or(&[]),
            Payload::Blocks(refs) => {
                let mut at = offset;
                for r in refs.iter() {
                    let b = r.bytes();
                    if at < b.len() {
                        return &b[at..];
                    }
                    at -= b.len();
                }
                &[]
            }
            Payload::Zeros(n) => &ZEROS[..n.saturating_sub(offset).min(ZEROS.len())],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iscsi_proto::DataBuf;

    #[test]
    fn zeros_are_served_in_pieces_of_the_shared_buffer() {
        let p = Payload::Zeros(150 * 1024 + 7);
        assert_eq!(p.len(), 150 * 1024 + 7);
        let mut at = 0;
        let mut pieces = 0;
        while at < p.len() {
            let c = p.chunk(at);
            assert!(!c.is_empty() && c.len() <= ZEROS.len());
            assert!(c.iter().all(|&b| b == 0));
            at += c.len();
            pieces += 1;
        }
        assert_eq!((at, pieces), (150 * 1024 + 7, 3));
        assert!(p.chunk(p.len()).is_empty());
        assert_eq!(p.contiguous().len(), p.len());
    }
}
