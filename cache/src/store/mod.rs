//! Backing stores, as tgt's backing-store template: one interface ([`Store`]) that every
//! kind of store implements in a module of its own — [`file`] (a regular file or a block
//! device, O_DIRECT or buffered), [`rbd`] (a Ceph RBD image through librbd) and [`null`]
//! (tgtd's `--bstype null`: zeros read, writes dropped) — and one table, [`STORES`], that
//! maps a bstype name to the module's opener. Adding a store is one module here and one
//! line in that table (and the name in `config::BsType`).
//!
//! [`BackingStore`] is the handle the rest of the daemon holds (`Arc<BackingStore>`): it
//! checks ranges and read-only access, keeps the size (an online resize only grows it),
//! falls back from discard to zeroing, and hands a store's calls on. Every call of a store
//! may block (run it on an [`crate::IoPool`] worker), except where the store's
//! [`ReadEngine`] says otherwise: that is how an event thread reads without blocking —
//! through its io_uring ring ([`crate::uring::ReadRing`]), the store's own asynchronous
//! reads ([`aio::AioRing`], librbd's aio), or at once ([`ReadEngine::Immediate`]) —
//! and [`ThreadIo`] is the one per-thread object that runs all of them.
//!
//! Why a trait and not an enum: a store's state (an open file and its O_DIRECT mode, an
//! image with its watch and latency histograms, nothing at all) and its answers to each
//! call belong together in its module; an enum spreads every store over every call's
//! match (twenty arms in the file this replaces), and a new store touched all of them.
//! The one call per I/O through a vtable costs nothing next to a system call or librbd;
//! what the event thread asks per command (`is_direct`, the read engine) is kept in the
//! handle at open and read without a call.

pub mod aio;
pub mod file;
mod handle;
pub mod null;
pub mod rbd;
mod thread_io;

#[cfg(test)]
mod tests;

use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

pub use aio::{AioRing, PendingOp};
pub use file::create_sparse;
pub use handle::{BackingStore, MIN_DIRECT_MEM_ALIGN};
pub use thread_io::ThreadIo;

use crate::op_latency::OpLatency;

/// Errors opening or creating a backing store, each naming the path.
#[derive(Debug, thiserror::Error)]
pub enum BackingError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path}: not a regular file or block device")]
    NotFileOrDevice { path: PathBuf },
    #[error("{path}: size {size} bytes is not a multiple of the {block_size}-byte block size")]
    Unaligned {
        path: PathBuf,
        size: u64,
        block_size: u32,
    },
    #[error("{path}: {source}")]
    Rbd { path: PathBuf, source: io::Error },
    #[error("{path}: is empty (0 bytes)")]
    Empty { path: PathBuf },
    #[error(
        "{path}: device logical sector size {sector} is larger than the LUN block size {block_size}"
    )]
    SectorTooLarge {
        path: PathBuf,
        sector: u32,
        block_size: u32,
    },
    #[error("{path}: backing-store type {bstype:?} is not known")]
    UnknownType { path: PathBuf, bstype: String },
}

/// How to open a backing store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub block_size: u32,
    pub readonly: bool,
    /// Try O_DIRECT (default true). `false` gives buffered I/O through the page cache
    /// (stores without a page cache ignore it).
    pub direct: bool,
    /// The LUN may be fenced on its own (an RBD LUN that several gateways arbitrate: a
    /// takeover blocklists its client), so its store keeps a client connection of its own
    /// instead of the one shared by every LUN of the cluster (default false).
    pub fenced_alone: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            block_size: 512,
            readonly: false,
            direct: true,
            fenced_alone: false,
        }
    }
}

/// What an opener gets: the LUN's path (a file or device, an RBD image spec, a name), its
/// tgt `--bsopts` (the keys in `skip` are the caller's own, e.g. `cache`), and the options.
#[derive(Debug, Clone, Copy)]
pub struct OpenRequest<'a> {
    pub path: &'a Path,
    pub bsopts: &'a str,
    pub skip: &'a [&'a str],
    pub options: &'a OpenOptions,
}

/// A store's opener: the store, or why it cannot be opened.
pub type Opener = fn(&OpenRequest<'_>) -> Result<Box<dyn Store>, BackingError>;

/// The stores, by tgt's bstype name. `rdwr` and `aio` are both the file store (numatgt's
/// own I/O path serves them alike; the name is kept for tgtadm).
pub const STORES: &[(&str, Opener)] = &[
    ("rdwr", file::open),
    ("aio", file::open),
    ("rbd", rbd::open),
    ("null", null::open),
];

/// The opener of bstype `name` (any case).
pub fn opener(name: &str) -> Option<Opener> {
    STORES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name.trim()))
        .map(|&(_, o)| o)
}

/// What a store can do; fixed once it is open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// O_DIRECT: buffers must be sector-aligned in memory (the handle's `write_at` bounces
    /// those that are not) and offsets and lengths multiples of the block size.
    pub direct: bool,
    /// [`Store::discard`] deallocates (space goes back; the range reads as zeros).
    pub discard: bool,
    /// Opened read-only (asked for, or a snapshot).
    pub readonly: bool,
    /// [`Store::grow`] grows it to a size asked for; otherwise a resize re-measures it
    /// (a block device grown outside, an image changed by `rbd resize`).
    pub resizable: bool,
    /// Every read returns zeros, whatever was written (nothing is stored: null): a reader
    /// that does not cache may answer from shared zeros without reading or filling memory.
    pub zeroes: bool,
    /// Every write is durable once acknowledged (an RBD image without librbd's cache): a
    /// durable write (FUA, write cache off) needs nothing more, so the store's
    /// asynchronous engine may run it ([`Store::start_op`] writes are never made durable
    /// by other means).
    pub durable_writes: bool,
    /// Other hosts may write it while this process has it open (an RBD image behind several
    /// gateways): a cached copy must not outlive the process that read it (a live upgrade
    /// reads such blocks back instead of keeping them in memory).
    pub shared: bool,
}

/// How an event thread's reads of a store complete without blocking it (the store's
/// completion mechanism). Writes and flushes run on the I/O worker threads, except for a
/// [`Callback`](ReadEngine::Callback) store's uncached writes (durable ones only when
/// [`Caps::durable_writes`]) and flushes, which its engine runs as well; so do reads from
/// other threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadEngine {
    /// None: every read blocks, the node's I/O worker threads run them (buffered files:
    /// the read completes inside the submitting call anyway, so a thread copies it).
    Threads,
    /// The thread's io_uring read ring, on this O_DIRECT descriptor.
    Uring(RawFd),
    /// The store's own asynchronous operations ([`Store::start_op`]: reads, writes,
    /// flushes), whose completions arrive through the thread's [`AioRing`] (librbd's aio).
    Callback,
    /// At once, on the calling thread: [`Store::read_at`] never blocks (null).
    Immediate,
}

/// One backing store: a LUN's bytes somewhere. The handle ([`BackingStore`]) has checked
/// every range against the size and refused writes to a read-only store before a call
/// gets here. Calls may block unless [`read_engine`](Store::read_engine) says otherwise.
pub trait Store: Send + Sync + std::fmt::Debug + std::any::Any {
    /// What it can do (asked once, at open).
    fn caps(&self) -> Caps {
        Caps::default()
    }
    /// Its size in bytes now (the file's or device's length, the image's size).
    fn measure(&self) -> io::Result<u64>;
    /// Read exactly `buf.len()` bytes at byte `offset` (memory aligned as
    /// [`Caps::direct`] needs).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Write all of `data` at byte `offset`, from memory of any alignment; `durable`: on
    /// stable storage before returning (FUA, write cache off).
    fn write_at(&self, data: &[u8], offset: u64, durable: bool) -> io::Result<()>;
    /// Write `bufs`, one after the other, at byte `offset` (as one write where the store
    /// can: one system call, one durability point); `durable` as for
    /// [`write_at`](Store::write_at). By default each buffer is written on its own.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64, durable: bool) -> io::Result<()> {
        let mut at = offset;
        for b in bufs {
            self.write_at(b, at, durable)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Write every `(offset, data)` of `writes` (not overlapping), several in flight at once
    /// where the store can, and return when all of them have ended: `results[i]` for
    /// `writes[i]`, not durable unless the store's writes always are. By default one after
    /// the other (a file's write-back batches go through io_uring instead).
    fn write_all(&self, writes: &[(u64, &[u8])], results: &mut Vec<io::Result<()>>) {
        results.clear();
        results.extend(writes.iter().map(|&(o, d)| self.write_at(d, o, false)));
    }
    /// Make every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Deallocate `len` bytes at `offset`: they read back as zeros and their space is
    /// returned. EOPNOTSUPP (or EINVAL, ENODEV) when it cannot; the handle zeroes then.
    fn discard(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
    /// Make `len` bytes at `offset` read as zeros, without writing them from memory where
    /// the store can. EOPNOTSUPP (or EINVAL, ENODEV) when it cannot; the handle writes
    /// zeros then.
    fn write_zeroes(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
    /// The allocation state of `offset .. offset + len` (inside the store) as
    /// `(offset, len, allocated)` runs in order, covering the range. A store that cannot
    /// tell reports it all allocated.
    fn allocation(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u64, bool)>> {
        Ok(vec![(offset, len, true)])
    }
    /// Grow to `size` bytes (only asked of a store with [`Caps::resizable`], with a size
    /// larger than it measures).
    fn grow(&self, _size: u64) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
    /// The resize watch: whether the store may have changed size outside the daemon since
    /// the last call (an RBD image resized with `rbd resize`). Called per command: one
    /// atomic load when nothing changed.
    fn take_changed(&self) -> bool {
        false
    }
    /// How an event thread's reads complete (asked once, at open).
    fn read_engine(&self) -> ReadEngine {
        ReadEngine::Threads
    }
    /// Start `op` (a read, write or flush at [`PendingOp::offset`]) without waiting
    /// ([`ReadEngine::Callback`] stores): the store's engine reads into or writes from the
    /// op's memory and calls [`PendingOp::done`] once, on any thread. Others fail it with
    /// EINVAL.
    fn start_op(&self, op: PendingOp) {
        op.done(Err(io::Error::from_raw_os_error(libc::EINVAL)));
    }
    /// Latency histograms of the store's own operations, where it keeps them (RBD).
    fn latency(&self) -> Option<&OpLatency> {
        None
    }
}

/// Whether `e` says the store cannot do what was asked (so a fallback applies).
pub(crate) fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENODEV)
    )
}
