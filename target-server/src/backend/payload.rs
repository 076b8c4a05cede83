//! The Data-In payload type handed to `iscsi_proto::Connection`: small emulated command data
//! (INQUIRY, MODE SENSE…), an O_DIRECT buffer filled by a backing-store read, or pinned cache
//! blocks (sent as they are: the connection writes straight from block memory). The
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
}

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
        }
    }
}

impl iscsi_proto::DataBuf for Payload {
    fn len(&self) -> usize {
        match self {
            Payload::Bytes(v) => v.len(),
            Payload::Block(b) => b.len(),
            Payload::Blocks(refs) => refs.iter().map(BlockRef::len).sum(),
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
        }
    }
}
