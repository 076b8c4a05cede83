//! The blocking work event threads hand to a node's I/O workers, as plain values: submitting
//! one moves it into the pool's queue without a heap allocation (a boxed closure would need
//! one per command). Each variant runs on a worker (`storage.rs` runs them) unless an event
//! thread's own engine takes it (`workers.rs`), and reports through its `Replier`; rare
//! commands (VERIFY, a cached LUN's SYNCHRONIZE CACHE) still use a closure.

use std::sync::Arc;

use cache::coherence::PieceList;
use cache::{BlockCache, IoRequest};

use super::landing::Landing;
use super::reply::Replier;
use crate::registry::Lun;

/// Where a request's bytes are: LUN, first LBA (for sense data), byte offset and length.
pub struct Extent {
    pub lun: Arc<Lun>,
    pub lba: u64,
    pub offset: u64,
    pub len: u64,
}

pub enum Job {
    /// `cache: off`/`page`: read straight from the backing store.
    DirectRead {
        at: Extent,
        reply: Replier,
    },
    /// Cached read with missing blocks: read them into the cache, then send from it.
    Fill {
        cache: Arc<BlockCache>,
        at: Extent,
        pieces: PieceList,
        /// The node the connection's thread runs on (for the local/remote counters).
        node: usize,
        reply: Replier,
    },
    /// Read the backing store after writing the range's dirty cached data back.
    ReadAround {
        cache: Arc<BlockCache>,
        at: Extent,
        reply: Replier,
    },
    /// A routed read served on `node` (Algorithm 1): gathered from that node's blocks.
    Gather {
        cache: Arc<BlockCache>,
        at: Extent,
        node: usize,
        reply: Replier,
    },
    /// Load cache blocks `first..last` of a LUN ahead of a sequential reader.
    ReadAhead {
        cache: Arc<BlockCache>,
        lun: Arc<Lun>,
        first: u64,
        last: u64,
    },
    /// A write that did not complete on the event thread (write-through, or a large
    /// write-back); the buffer goes back to the connection with the result.
    Write {
        cache: Option<Arc<BlockCache>>,
        at: Extent,
        durable: bool,
        data: Vec<u8>,
        data_offset: usize,
        reply: Replier,
    },
    /// A write whose data landed in cache slots, written through from them (durable, or a
    /// LUN that does not cache); the command's buffer (its immediate data) goes back to the
    /// connection with the result.
    WriteLanded {
        cache: Option<Arc<BlockCache>>,
        at: Extent,
        durable: bool,
        landing: Landing,
        data: Vec<u8>,
        reply: Replier,
    },
    /// UNMAP (or WRITE SAME with UNMAP): every `(lba, blocks)` range deallocated, reading
    /// zeros after; a cached LUN's dirty data of a range written back first and its cached
    /// copies zeroed.
    Deallocate {
        cache: Option<Arc<BlockCache>>,
        lun: Arc<Lun>,
        ranges: Vec<(u64, u64)>,
        reply: Replier,
    },
    /// SYNCHRONIZE CACHE of a LUN that does not cache now: the store's flush; a failure
    /// is reported at `lba`.
    Flush {
        lun: Arc<Lun>,
        lba: u64,
        reply: Replier,
    },
    Other(IoRequest),
}
