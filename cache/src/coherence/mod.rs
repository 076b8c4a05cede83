//! Cache coherence: every step that moves a LUN's bytes between the block cache and its
//! medium, in the order that keeps them in agreement — reads looked up, filled and read
//! ahead; writes kept dirty (write-back) or written through with the cached copy updated
//! after; dirty blocks written back before anything reads or writes the medium around the
//! cache. Functions take the cache, the LUN's cache id and its [`Medium`], and return typed
//! outcomes; the caller (the daemon's backend) maps them to commands and runs them on the
//! right thread: [`lookup`] and [`write_back`] with [`NoWait`] never block (event threads),
//! the rest do I/O and wait ([`Backoff`]) on I/O workers only.

mod lists;
mod medium;
mod read;
mod wait;
mod write;

pub(crate) use lists::PiecePool;
pub use lists::{BlockList, Piece, PieceList};
pub use medium::Medium;
pub use read::{CachedRead, Looked, fill, lookup, read, read_ahead};
pub use wait::{Backoff, GaveUp, NoWait, Waiter};
pub use write::{
    Invalidated, WrittenThrough, flush_and_sync, flush_range, update_cached_copy, write_back,
    write_dirty, write_through,
};
