//! [`BackingStore`], the handle every caller holds: the checks every store shares (ranges,
//! read-only), the size (grown online, never shrunk), the deallocation fallbacks, and the
//! store's capabilities and read engine kept as plain fields, then the store's own call.

use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{BackingError, Caps, OpenOptions, OpenRequest, ReadEngine, Store, unsupported};
use crate::aligned::AlignedBuf;
use crate::op_latency::OpLatency;

/// Memory alignment below which an O_DIRECT write is bounced at once (the smallest logical
/// sector); above it, only when the file system refuses the buffer.
pub const MIN_DIRECT_MEM_ALIGN: usize = 512;

/// An open backing store. Thread-safe: positional I/O only, no shared cursor.
#[derive(Debug)]
pub struct BackingStore {
    store: Box<dyn Store>,
    path: PathBuf,
    /// Bytes; changes only by an online resize ([`BackingStore::resize`]).
    size: AtomicU64,
    block_size: u32,
    caps: Caps,
    engine: ReadEngine,
}

/// The coherence functions take the handle itself or whatever holds it (`Arc`).
impl AsRef<BackingStore> for BackingStore {
    fn as_ref(&self) -> &BackingStore {
        self
    }
}

impl BackingStore {
    /// Open a store of bstype `bstype` (a name of [`super::STORES`]) for `req`.
    pub fn open_as(bstype: &str, req: &OpenRequest<'_>) -> Result<Self, BackingError> {
        let open = super::opener(bstype).ok_or_else(|| BackingError::UnknownType {
            path: req.path.to_owned(),
            bstype: bstype.to_string(),
        })?;
        Self::from_store(req.path, req.options.block_size, open(req)?)
    }

    /// Open `path` (regular file or block device) for a LUN with `opts.block_size` blocks.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Self, BackingError> {
        Self::open_as(
            "rdwr",
            &OpenRequest {
                path,
                bsopts: "",
                skip: &[],
                options: opts,
            },
        )
    }

    /// The handle of an open `store` (tests bring their own, e.g. a disk in memory): its
    /// size is measured now and must be a non-zero multiple of `block_size`.
    pub fn from_store(
        path: &Path,
        block_size: u32,
        store: Box<dyn Store>,
    ) -> Result<Self, BackingError> {
        let size = store.measure().map_err(|source| BackingError::Io {
            path: path.to_owned(),
            source,
        })?;
        if size == 0 {
            return Err(BackingError::Empty {
                path: path.to_owned(),
            });
        }
        if size % u64::from(block_size.max(1)) != 0 {
            return Err(BackingError::Unaligned {
                path: path.to_owned(),
                size,
                block_size,
            });
        }
        Ok(BackingStore {
            caps: store.caps(),
            engine: store.read_engine(),
            store,
            path: path.to_owned(),
            size: AtomicU64::new(size),
            block_size,
        })
    }

    /// The store itself, as the type its module gave it (`None` for another type): for
    /// what only that store has (an RBD image's exclusive lock).
    pub fn store_as<S: Store>(&self) -> Option<&S> {
        let any: &dyn std::any::Any = &*self.store;
        any.downcast_ref::<S>()
    }

    /// The RBD image, `None` for other stores: its exclusive lock and the records beside
    /// it.
    pub fn rbd_image(&self) -> Option<&rbd::Image> {
        self.store_as::<super::rbd::RbdStore>().map(|r| r.image())
    }

    /// The latency histograms of the store's own operations (RBD), `None` for others.
    pub fn op_latency(&self) -> Option<&OpLatency> {
        self.store.latency()
    }

    /// The store's new size in blocks when it grew outside the daemon since the last call
    /// (an RBD image resized with `rbd resize`, seen by its update watch), so the LUN's
    /// capacity can follow; `None` otherwise. One atomic load when nothing changed. A
    /// shrink is refused (logged) as by [`resize`](Self::resize).
    pub fn take_size_change(&self) -> Option<u64> {
        if !self.store.take_changed() {
            return None;
        }
        let before = self.num_blocks();
        match self.resize(None) {
            Ok(_) if self.num_blocks() != before => Some(self.num_blocks()),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(store = %self.path.display(), "store changed: {e}");
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    pub fn block_size(&self) -> u32 {
        self.block_size
    }
    pub fn num_blocks(&self) -> u64 {
        self.size() / u64::from(self.block_size)
    }
    /// What the store can do.
    pub fn caps(&self) -> Caps {
        self.caps
    }
    /// How an event thread reads it without blocking.
    pub fn read_engine(&self) -> ReadEngine {
        self.engine
    }
    pub fn is_direct(&self) -> bool {
        self.caps.direct
    }
    pub fn is_readonly(&self) -> bool {
        self.caps.readonly
    }

    /// Online resize. A resizable store (a regular file, an RBD image) grows to
    /// `new_size` bytes (never shrinks: that would destroy data an initiator may still
    /// address); another (a block device) is re-measured (grow the LV or LUN first).
    /// Returns the new size. The size must stay a multiple of the block size.
    pub fn resize(&self, new_size: Option<u64>) -> io::Result<u64> {
        let bs = u64::from(self.block_size);
        if let Some(n) = new_size.filter(|_| self.caps.resizable) {
            let current = self.store.measure()?;
            if n < current {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is {current} bytes; shrinking to {n} is refused",
                        self.path.display()
                    ),
                ));
            }
            if n % bs != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{n} bytes is not a multiple of the {bs}-byte block size"),
                ));
            }
            if n > current {
                if self.caps.readonly {
                    return Err(io::Error::from_raw_os_error(libc::EROFS));
                }
                self.store.grow(n)?;
            }
        }
        let size = self.store.measure()?;
        let size = size - size % bs;
        if size < self.size() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} shrank to {size} bytes; refusing to shrink a LUN",
                    self.path.display()
                ),
            ));
        }
        self.size.store(size, Ordering::Release);
        Ok(size)
    }

    /// The O_DIRECT descriptor, for callers that submit their own I/O (io_uring reads and
    /// write-back) to an [`is_direct`](Self::is_direct) store; they must keep to
    /// [`check_write`](Self::check_write) and the O_DIRECT alignment rules. -1 for every
    /// other store.
    pub fn raw_fd(&self) -> RawFd {
        match self.engine {
            ReadEngine::Uring(fd) => fd,
            _ => -1,
        }
    }

    /// Whether `len` bytes at `offset` may be written as they are from memory at `addr`:
    /// EROFS for a read-only store, EINVAL past the end, and EINVAL for an O_DIRECT store
    /// when the memory is not sector-aligned (then [`write_at`](Self::write_at) bounces it).
    pub fn check_write(&self, addr: usize, offset: u64, len: usize) -> io::Result<()> {
        if self.caps.readonly {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.check_range(offset, len)?;
        if self.caps.direct && addr % MIN_DIRECT_MEM_ALIGN != 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(())
    }

    /// EINVAL unless `len` bytes at `offset` lie inside the store.
    pub fn check_range(&self, offset: u64, len: usize) -> io::Result<()> {
        let end = offset.checked_add(len as u64);
        match end {
            Some(end) if end <= self.size() => Ok(()),
            _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        }
    }

    /// Read exactly `buf.len()` bytes at `offset`. With O_DIRECT, `buf` must be 4096-aligned
    /// (an [`AlignedBuf`]) and `offset`/length multiples of the block size.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_range(offset, buf.len())?;
        self.store.read_at(buf, offset)
    }

    /// Write all of `data` at `offset`, from a buffer of any alignment. `durable` makes this
    /// one write reach stable storage before returning (FUA or write cache disabled).
    pub fn write_at(&self, data: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        if self.caps.readonly {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.check_range(offset, data.len())?;
        self.store.write_at(data, offset, durable)
    }

    /// Write every `(offset, data)` of `writes` (not overlapping; buffers of any alignment),
    /// several at once where the store can ([`Store::write_all`]), and return when all have
    /// ended: `results[i]` for `writes[i]`.
    pub fn write_all(&self, writes: &[(u64, &[u8])], results: &mut Vec<io::Result<()>>) {
        let refused = self.caps.readonly
            || writes
                .iter()
                .any(|&(o, d)| self.check_range(o, d.len()).is_err());
        if refused || writes.len() < 2 {
            // each on its own: the checks say which failed
            results.clear();
            results.extend(writes.iter().map(|&(o, d)| self.write_at(d, o, false)));
            return;
        }
        self.store.write_all(writes, results);
    }

    /// Write `bufs` one after the other at `offset`, as one write where the store can
    /// ([`Store::write_vectored_at`]); buffers of any alignment, as for
    /// [`write_at`](BackingStore::write_at).
    pub fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64, durable: bool) -> io::Result<()> {
        if self.caps.readonly {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        let len = bufs.iter().try_fold(0usize, |n, b| n.checked_add(b.len()));
        self.check_range(offset, len.unwrap_or(usize::MAX))?;
        self.store.write_vectored_at(bufs, offset, durable)
    }

    /// Deallocate `len` bytes at `offset` so that they read back as zeros: the store's
    /// discard (a hole punched in a file, zeroed objects of an image); where it cannot, the
    /// store's zeroing (ZERO_RANGE), then plain zero writes, so reads return zeros in
    /// every case. Returns whether space was really deallocated.
    pub fn deallocate(&self, offset: u64, len: u64) -> io::Result<bool> {
        if self.caps.readonly {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.check_range(offset, usize::try_from(len).unwrap_or(usize::MAX))?;
        if len == 0 {
            return Ok(false);
        }
        match self.store.discard(offset, len) {
            Ok(()) => return Ok(true),
            Err(e) if !unsupported(&e) => return Err(e),
            Err(_) => {}
        }
        match self.store.write_zeroes(offset, len) {
            Ok(()) => return Ok(false),
            Err(e) if !unsupported(&e) => return Err(e),
            Err(_) => {}
        }
        // last resort: write zeros (aligned, for O_DIRECT)
        let chunk = len.min(1 << 20) as usize;
        let zeros = AlignedBuf::new(chunk);
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(chunk as u64) as usize;
            self.store
                .write_at(&zeros.as_slice()[..n], offset + at, false)?;
            at += n as u64;
        }
        Ok(false)
    }

    /// The allocation state of `offset .. offset + len` (clipped to the size) as
    /// `(offset, len, allocated)` runs in order: a file's holes and data; stores that
    /// cannot tell report everything allocated.
    pub fn allocation(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u64, bool)>> {
        let end = offset.saturating_add(len).min(self.size());
        if offset >= end {
            return Ok(Vec::new());
        }
        self.store.allocation(offset, end - offset)
    }

    /// Make every completed write durable (fdatasync; an RBD image's flush).
    pub fn sync(&self) -> io::Result<()> {
        if self.caps.readonly {
            return Ok(());
        }
        self.store.flush()
    }

    /// Start `op` through the store's own asynchronous engine ([`ReadEngine::Callback`]);
    /// EINVAL (through `op`) past the end or for another store, EROFS for a write to a
    /// read-only store (a flush of one succeeds at once, as [`sync`](Self::sync) does).
    pub(crate) fn start_op(&self, op: super::PendingOp) {
        use crate::uring::OpKind;
        match op.kind() {
            OpKind::Flush if self.caps.readonly => op.done(Ok(0)),
            OpKind::Flush => self.store.start_op(op),
            OpKind::Write | OpKind::Zero if self.caps.readonly => {
                op.done(Err(io::Error::from_raw_os_error(libc::EROFS)))
            }
            OpKind::Zero if op.is_empty() => op.done(Ok(0)),
            OpKind::Read | OpKind::Write | OpKind::Zero => {
                match self.check_range(op.offset(), op.len()) {
                    Ok(()) => self.store.start_op(op),
                    Err(e) => op.done(Err(e)),
                }
            }
        }
    }
}
