//! The Data-In payload type handed to `iscsi_proto::Connection`: small emulated command data
//! (INQUIRY, MODE SENSE…), an O_DIRECT buffer filled by a backing-store read, or pinned cache
//! blocks (sent as they are: the connection writes straight from block memory). Cheap to
//! clone; cache blocks stay pinned until the last clone is dropped.

use std::sync::Arc;

use cache::{AlignedBuf, BlockRef};

#[derive(Clone, Debug)]
pub enum Payload {
    Bytes(Arc<Vec<u8>>),
    Block(Arc<AlignedBuf>),
    /// Pieces of cache blocks, in request order (each reference pins its block).
    Blocks(Arc<Vec<BlockRef>>),
}

impl Payload {
    pub fn bytes(v: Vec<u8>) -> Self {
        Payload::Bytes(Arc::new(v))
    }

    pub fn blocks(refs: Vec<BlockRef>) -> Self {
        Payload::Blocks(Arc::new(refs))
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
