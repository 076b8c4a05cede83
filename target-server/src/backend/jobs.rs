//! The blocking work event threads hand to a node's I/O workers, as plain values: submitting
//! one moves it into the pool's queue without a heap allocation (a boxed closure would need
//! one per command). Each variant runs on a worker and reports through its `Replier`;
//! rare commands (VERIFY, SYNCHRONIZE CACHE) still use a closure.

use std::sync::Arc;

use cache::coherence::PieceList;
use cache::{BlockCache, IoRequest};

use super::reply::Replier;
use super::storage;
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
    Other(IoRequest),
}

impl cache::IoJob for Job {
    fn run(self) {
        match self {
            Job::DirectRead { at, reply } => {
                reply.send(storage::direct_read(&at.lun, at.lba, at.offset, at.len))
            }
            Job::Fill {
                cache,
                at,
                pieces,
                node,
                reply,
            } => reply.send(storage::fill_and_serve(&cache, &at, pieces, node)),
            Job::ReadAround { cache, at, reply } => reply.send(storage::read_around(
                &cache, &at.lun, at.lba, at.offset, at.len,
            )),
            Job::Gather {
                cache,
                at,
                node,
                reply,
            } => reply.send(storage::gather_read(
                &cache, &at.lun, at.lba, at.offset, at.len, node,
            )),
            Job::ReadAhead {
                cache,
                lun,
                first,
                last,
            } => storage::read_ahead(&cache, &lun, first, last),
            Job::Write {
                cache,
                at,
                durable,
                data,
                data_offset,
                reply,
            } => {
                let result = storage::write_job(cache.as_ref(), &at, durable, &data, data_offset);
                reply.send_with_buffer(result, data);
            }
            Job::Other(f) => f(),
        }
    }
}
