//! What the partition's operations answer: read-ahead policy, lookup results, write and
//! update outcomes, construction errors.

use super::{BlockRef, Fill};
use crate::bits::MAX_WORDS;

/// Read-ahead policy for a miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadAhead {
    /// Read only the missing sectors of the requested range.
    #[default]
    None,
    /// Read every missing sector of the block.
    WholeBlock,
}

/// Result of a read lookup for one block.
#[must_use]
#[expect(
    clippy::large_enum_variant,
    reason = "a Fill/DirtyRange carries its sector mask inline; boxing would allocate per miss"
)]
pub enum Lookup {
    /// Every requested sector is cached: the block is pinned until the reference is dropped.
    Hit(BlockRef),
    /// Some requested sector is missing: a slot is reserved (the block is busy for other
    /// fills and writes) until the [`Fill`] is completed, aborted or dropped.
    Miss(Fill),
    /// A fill of this block is in flight and the requested sectors are not all valid yet:
    /// retry later or read around the cache.
    Busy,
    /// No slot of the partition can be reused (all pinned, dirty or busy): read around the
    /// cache for this block.
    NoSpace,
    /// The block is not cached and the partition is full of blocks read more often than it
    /// (see `admission`): nothing was reserved; read the backing store directly — no sector
    /// of the block is cached, so the disk holds its newest data.
    Bypass,
}

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lookup::Hit(r) => f.debug_tuple("Hit").field(r).finish(),
            Lookup::Miss(m) => f.debug_tuple("Miss").field(m).finish(),
            Lookup::Busy => f.write_str("Busy"),
            Lookup::NoSpace => f.write_str("NoSpace"),
            Lookup::Bypass => f.write_str("Bypass"),
        }
    }
}

/// Result of a write-back write into the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum WriteOutcome {
    /// The cache holds the data; `newly_dirty` bytes were added to the node's dirty total.
    Written { newly_dirty: u64 },
    /// The node's dirty bytes would pass the limit: nothing was written. Wait for the
    /// flusher, or write through to disk and call `write_through_update`.
    Throttled,
    /// A fill of this block is in flight: nothing was written; retry.
    Busy,
    /// No slot could take the data (all pinned, dirty or busy): nothing was written.
    NoSpace,
    /// The range is not whole sectors: nothing was written.
    Unaligned,
}

/// Result of bringing the cached copy up to date after the caller wrote data to disk itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum UpdateOutcome {
    /// The cached copy now holds the new data.
    Updated,
    /// The block is not cached: nothing to do.
    NotCached,
    /// The cached (clean, pinned) copy was dropped instead of updated; later reads miss.
    Dropped,
    /// A fill was in flight: it will not validate what it read, but the cached copy is not
    /// updated yet. Call again before completing the command.
    Busy,
    /// The copy is pinned and dirty and no slot is free for copy-on-write: call again.
    NoSpace,
    /// The range is not whole sectors: nothing was done.
    Unaligned,
}

/// Errors creating a partition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error("partition slots {first}..{end} are not inside the node arena of {have} slots")]
    Slots {
        first: usize,
        end: usize,
        have: usize,
    },
    #[error("{0} sectors per block exceed the {max}-bit bitmaps", max = MAX_WORDS * 64)]
    Sectors(usize),
}
