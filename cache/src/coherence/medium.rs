//! The backing store as the coherence code sees it: positional reads and writes, its size
//! and a durability barrier. [`BackingStore`] is the production medium; tests use an
//! in-memory one.

use std::io;

use crate::backing::BackingStore;

/// Where a LUN's blocks live outside the cache. Every call may block: coherence code runs
/// on an I/O worker, never on an event thread.
pub trait Medium {
    /// Read exactly `buf.len()` bytes at byte `offset` (`buf`: a cache block run or an
    /// aligned buffer).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Write all of `data` at byte `offset`, from a buffer of any alignment (the medium
    /// does what its I/O mode needs); `durable`: on stable storage before returning.
    fn write_at(&self, data: &[u8], offset: u64, durable: bool) -> io::Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Make every completed write durable.
    fn sync(&self) -> io::Result<()>;
}

impl Medium for BackingStore {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        BackingStore::read_at(self, buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        BackingStore::write_at(self, data, offset, durable)
    }
    fn size(&self) -> u64 {
        BackingStore::size(self)
    }
    fn sync(&self) -> io::Result<()> {
        BackingStore::sync(self)
    }
}
