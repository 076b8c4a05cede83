//! The Data-In payload type handed to `iscsi_proto::Connection`: small emulated command data
//! (INQUIRY, MODE SENSE…), an O_DIRECT buffer filled by a backing-store read, or pinned cache
//! blocks (sent as they are: the connection writes straight from block memory). The
//! connection holds a payload once for all of its Data-In PDUs and drops it when the last
//! one is written; cache blocks stay pinned until then. The list of block references comes
//! from a per-thread pool, so a cache hit allocates nothing.

use std::cell::RefCell;

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

/// Lists kept per thread, and the largest list kept (in references).
const POOL_LISTS: usize = 256;
const POOL_LIST_MAX: usize = 256;

thread_local! {
    static POOL: RefCell<Vec<Vec<BlockRef>>> = const { RefCell::new(Vec::new()) };
}

/// Pinned block references in request order. Dropping the list unpins every block and
/// gives the list's memory back to the dropping thread's pool.
#[derive(Debug, Default)]
pub struct BlockList {
    refs: Vec<BlockRef>,
}

impl BlockList {
    /// An empty list, from this thread's pool when it has one.
    pub fn new() -> Self {
        let refs = POOL
            .try_with(|p| p.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| Vec::with_capacity(16));
        BlockList { refs }
    }

    pub fn push(&mut self, r: BlockRef) {
        self.refs.push(r);
    }

    /// Takes every reference out (still pinned), leaving the list empty.
    pub fn drain(&mut self) -> std::vec::Drain<'_, BlockRef> {
        self.refs.drain(..)
    }

    pub fn iter(&self) -> std::slice::Iter<'_, BlockRef> {
        self.refs.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }
}

impl Drop for BlockList {
    fn drop(&mut self) {
        let mut refs = std::mem::take(&mut self.refs);
        refs.clear(); // unpins every block now
        if refs.capacity() == 0 || refs.capacity() > POOL_LIST_MAX {
            return;
        }
        let _ = POOL.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut()
                && p.len() < POOL_LISTS
            {
                // full size at once: lists made on I/O workers end here, so the pool of an
                // event thread grows to its bound; it must not reallocate on the way
                let room = POOL_LISTS - p.len();
                p.reserve_exact(room);
                p.push(refs);
            }
        });
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
