//! Backing stores: a regular file or a block device holding a LUN's blocks, opened with
//! O_DIRECT (falling back to buffered I/O, with a warning, where the file system refuses it or
//! needs a coarser alignment than the LUN's block size), or a Ceph RBD image (librbd, loaded
//! at run time by the `rbd` crate). Every caller sees the same calls whatever the medium.
//! Every call here blocks: run them on an [`crate::IoPool`] worker, never on an event thread.

use std::fs::{File, OpenOptions as StdOpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::aligned::AlignedBuf;
use crate::op_latency::{OpLatency, StoreOp};

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
}

/// How to open a backing store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub block_size: u32,
    pub readonly: bool,
    /// Try O_DIRECT (default true). `false` gives buffered I/O through the page cache.
    pub direct: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            block_size: 512,
            readonly: false,
            direct: true,
        }
    }
}

/// What holds the blocks.
#[derive(Debug)]
enum Medium {
    File(File),
    Rbd(Box<RbdImage>),
}

/// An open RBD image and whether its header changed since the size was last looked at.
struct RbdImage {
    image: rbd::Image,
    /// Set by the image's update watch (a librbd thread), taken by
    /// [`BackingStore::take_size_change`].
    changed: Arc<AtomicBool>,
    /// How long librbd takes, per operation.
    latency: OpLatency,
    /// The longest a flush may take before it is reported failed (librados' OSD op
    /// timeout and a margin): a flush to a sick cluster must not hang SYNCHRONIZE CACHE or
    /// the daemon's stop.
    flush_limit: std::time::Duration,
}

/// Margin over `rados_osd_op_timeout` before a flush is given up.
const FLUSH_MARGIN_SECS: u64 = 5;

/// The flush limit for cluster options `c`: their `rados_osd_op_timeout` (seconds; 0 means
/// none, then 60 s) plus a margin.
fn flush_limit(c: &rbd::ClusterOptions) -> std::time::Duration {
    // the defaults come first in the list, the admin's values after them: the last wins
    let op = c
        .effective_settings()
        .iter()
        .rev()
        .find(|(k, _)| k == "rados_osd_op_timeout")
        .and_then(|(_, v)| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(60.0)
        .min(3600.0);
    std::time::Duration::from_secs_f64(op) + std::time::Duration::from_secs(FLUSH_MARGIN_SECS)
}

impl std::fmt::Debug for RbdImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RbdImage({})", self.image.spec())
    }
}

/// An open backing store. Thread-safe: positional I/O only (pread/pwrite, librbd), no
/// shared cursor.
#[derive(Debug)]
pub struct BackingStore {
    medium: Medium,
    path: PathBuf,
    /// Bytes; changes only by an online resize ([`BackingStore::resize`]).
    size: std::sync::atomic::AtomicU64,
    block_size: u32,
    direct: bool,
    block_device: bool,
    readonly: bool,
}

/// Memory alignment below which an O_DIRECT write is bounced at once (the smallest logical
/// sector); above it, only when the file system refuses the buffer.
pub const MIN_DIRECT_MEM_ALIGN: usize = 512;

const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const BLKSSZGET: libc::c_ulong = 0x1268;

/// Create `path` as a sparse file of `size` bytes if it does not exist yet. Returns whether it
/// created the file.
pub fn create_sparse(path: &Path, size: u64) -> Result<bool, BackingError> {
    let err = |source| BackingError::Io {
        path: path.to_owned(),
        source,
    };
    if path.exists() {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    match StdOpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(f) => {
            f.set_len(size).map_err(err)?;
            f.sync_all().map_err(err)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(err(e)),
    }
}

impl BackingStore {
    /// Open `path` (regular file or block device) for a LUN with `opts.block_size` blocks.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Self, BackingError> {
        let err = |source| BackingError::Io {
            path: path.to_owned(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(err)?;
        let block_device = meta.file_type().is_block_device();
        if !block_device && !meta.is_file() {
            return Err(BackingError::NotFileOrDevice {
                path: path.to_owned(),
            });
        }
        let open = |direct: bool| {
            let mut o = StdOpenOptions::new();
            o.read(true).write(!opts.readonly);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (file, mut direct) = if opts.direct {
            match open(true) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::warn!(path = %path.display(), "O_DIRECT refused by the file system; using buffered I/O");
                    (open(false).map_err(err)?, false)
                }
                Err(e) => return Err(err(e)),
            }
        } else {
            (open(false).map_err(err)?, false)
        };
        let size = if block_device {
            let sector = ioctl_u32(&file, BLKSSZGET).map_err(err)?;
            if sector > opts.block_size {
                return Err(BackingError::SectorTooLarge {
                    path: path.to_owned(),
                    sector,
                    block_size: opts.block_size,
                });
            }
            ioctl_u64(&file, BLKGETSIZE64).map_err(err)?
        } else {
            meta.len()
        };
        if size == 0 {
            return Err(BackingError::Empty {
                path: path.to_owned(),
            });
        }
        if size % u64::from(opts.block_size) != 0 {
            return Err(BackingError::Unaligned {
                path: path.to_owned(),
                size,
                block_size: opts.block_size,
            });
        }
        let mut store = BackingStore {
            medium: Medium::File(file),
            path: path.to_owned(),
            size: std::sync::atomic::AtomicU64::new(size),
            block_size: opts.block_size,
            direct,
            block_device,
            readonly: opts.readonly,
        };
        if direct && !store.direct_alignment_ok() {
            tracing::warn!(path = %path.display(), block_size = opts.block_size,
                "O_DIRECT needs a coarser alignment than the LUN block size here; using buffered I/O");
            store.medium = Medium::File(open(false).map_err(err)?);
            direct = false;
            store.direct = direct;
        }
        Ok(store)
    }

    /// Open the RBD image `spec` (`[pool/]image[@snap]`; a snapshot is read-only) on the
    /// cluster `bsopts` names (tgt's `conf=…;id=…;cluster=…` and librados settings; keys in
    /// `skip` are the caller's). Its size is the image's; the image's update watch marks
    /// header changes for [`take_size_change`](Self::take_size_change). Never O_DIRECT.
    pub fn open_rbd(
        spec: &str,
        bsopts: &str,
        skip: &[&str],
        opts: &OpenOptions,
    ) -> Result<Self, BackingError> {
        let path = PathBuf::from(spec);
        let err = |source| BackingError::Rbd {
            path: path.clone(),
            source,
        };
        let invalid = |m: String| err(io::Error::new(io::ErrorKind::InvalidInput, m));
        let image_spec = rbd::ImageSpec::parse(spec).map_err(invalid)?;
        let cluster = rbd::ClusterOptions::parse(bsopts, skip).map_err(invalid)?;
        let image = rbd::open(&image_spec, &cluster, opts.readonly).map_err(err)?;
        let size = image.size().map_err(err)?;
        if size == 0 {
            return Err(BackingError::Empty { path });
        }
        if size % u64::from(opts.block_size) != 0 {
            return Err(BackingError::Unaligned {
                path,
                size,
                block_size: opts.block_size,
            });
        }
        let changed = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&changed);
        image
            .update_watch(move || flag.store(true, Ordering::Release))
            .map_err(err)?;
        let readonly = image.is_read_only();
        Ok(BackingStore {
            medium: Medium::Rbd(Box::new(RbdImage {
                image,
                changed,
                latency: OpLatency::default(),
                flush_limit: flush_limit(&cluster),
            })),
            path,
            size: std::sync::atomic::AtomicU64::new(size),
            block_size: opts.block_size,
            direct: false,
            block_device: false,
            readonly,
        })
    }

    /// The latency histograms of an RBD image's operations (`None` for a file).
    pub fn op_latency(&self) -> Option<&OpLatency> {
        match &self.medium {
            Medium::Rbd(r) => Some(&r.latency),
            Medium::File(_) => None,
        }
    }

    /// Whether this store is a Ceph RBD image.
    pub fn is_rbd(&self) -> bool {
        matches!(self.medium, Medium::Rbd(_))
    }

    /// The RBD image, `None` for a file: its exclusive lock and the records beside it, and
    /// librbd's asynchronous calls ([`crate::rbd_aio`], which keeps to
    /// [`check_range`](Self::check_range)).
    pub fn rbd_image(&self) -> Option<&rbd::Image> {
        match &self.medium {
            Medium::Rbd(r) => Some(&r.image),
            Medium::File(_) => None,
        }
    }

    /// The store's new size in blocks when it grew outside the daemon since the last call
    /// (an RBD image resized with `rbd resize`, seen by its update watch), so the LUN's
    /// capacity can follow; `None` otherwise. One atomic load when nothing changed. A
    /// shrink is refused (logged) as by [`resize`](Self::resize).
    pub fn take_size_change(&self) -> Option<u64> {
        let Medium::Rbd(r) = &self.medium else {
            return None;
        };
        if !r.changed.load(Ordering::Acquire) || !r.changed.swap(false, Ordering::AcqRel) {
            return None;
        }
        let before = self.num_blocks();
        match self.resize(None) {
            Ok(_) if self.num_blocks() != before => Some(self.num_blocks()),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(image = %self.path.display(), "image changed: {e}");
                None
            }
        }
    }

    /// Probe one block-sized O_DIRECT read at a block-aligned (not page-aligned) offset.
    fn direct_alignment_ok(&self) -> bool {
        let bs = self.block_size as usize;
        let offset = if self.size() >= 2 * bs as u64 {
            bs as u64
        } else {
            0
        };
        let mut buf = AlignedBuf::new(bs);
        !matches!(self.read_at(buf.as_mut_slice(), offset), Err(e) if e.raw_os_error() == Some(libc::EINVAL))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn size(&self) -> u64 {
        self.size.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Online resize. A file grows to `new_size` bytes (never shrinks: that would destroy
    /// data an initiator may still address); a block device is re-measured (grow the LV or
    /// LUN first). Returns the new size. The size must stay a multiple of the block size.
    pub fn resize(&self, new_size: Option<u64>) -> io::Result<u64> {
        let bs = u64::from(self.block_size);
        let size = match &self.medium {
            Medium::Rbd(r) => self.resize_rbd(&r.image, new_size)?,
            Medium::File(file) if self.block_device => ioctl_u64(file, BLKGETSIZE64)?,
            Medium::File(file) => {
                let current = file.metadata()?.len();
                match new_size {
                    Some(n) if n < current => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!(
                                "{} is {current} bytes; shrinking to {n} is refused",
                                self.path.display()
                            ),
                        ));
                    }
                    Some(n) if n % bs != 0 => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("{n} bytes is not a multiple of the {bs}-byte block size"),
                        ));
                    }
                    Some(n) if n > current => {
                        if self.readonly {
                            return Err(io::Error::from_raw_os_error(libc::EROFS));
                        }
                        file.set_len(n)?;
                        n
                    }
                    _ => current,
                }
            }
        };
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
        self.size.store(size, std::sync::atomic::Ordering::Release);
        Ok(size)
    }
    /// [`resize`](Self::resize) of an image: grown with `rbd_resize` when asked, then
    /// measured.
    fn resize_rbd(&self, image: &rbd::Image, new_size: Option<u64>) -> io::Result<u64> {
        if let Some(n) = new_size {
            let current = image.size()?;
            if n < current {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is {current} bytes; shrinking to {n} is refused",
                        self.path.display()
                    ),
                ));
            }
            if n % u64::from(self.block_size) != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{n} bytes is not a multiple of the {}-byte block size",
                        self.block_size
                    ),
                ));
            }
            if n > current {
                if self.readonly {
                    return Err(io::Error::from_raw_os_error(libc::EROFS));
                }
                image.resize(n)?;
            }
        }
        image.size()
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }
    pub fn num_blocks(&self) -> u64 {
        self.size() / u64::from(self.block_size)
    }
    pub fn is_direct(&self) -> bool {
        self.direct
    }
    pub fn is_block_device(&self) -> bool {
        self.block_device
    }
    pub fn is_readonly(&self) -> bool {
        self.readonly
    }

    /// The open file, for callers that submit their own I/O (io_uring write-back) to an
    /// [`is_direct`](Self::is_direct) store; they must keep to
    /// [`check_write`](Self::check_write) and the O_DIRECT alignment rules. -1 for an RBD
    /// image (never direct).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        match &self.medium {
            Medium::File(f) => f.as_raw_fd(),
            Medium::Rbd(_) => -1,
        }
    }

    /// Whether `len` bytes at `offset` may be written as they are from memory at `addr`:
    /// EROFS for a read-only store, EINVAL past the end, and EINVAL for an O_DIRECT store
    /// when the memory is not sector-aligned (then [`write_at`](Self::write_at) bounces it).
    pub fn check_write(&self, addr: usize, offset: u64, len: usize) -> io::Result<()> {
        if self.readonly {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.check_range(offset, len)?;
        if self.direct && addr % MIN_DIRECT_MEM_ALIGN != 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(())
    }

    pub(crate) fn check_range(&self, offset: u64, len: usize) -> io::Result<()> {
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
        let file = match &self.medium {
            Medium::File(f) => f,
            Medium::Rbd(r) => {
                return r
                    .latency
                    .time(StoreOp::Read, || r.image.read_at(buf, offset));
            }
        };
        let mut done = 0usize;
        while done < buf.len() {
            let rest = &mut buf[done..];
            // SAFETY: rest is a valid writable slice of rest.len() bytes; the fd is open.
            let n = unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    rest.as_mut_ptr().cast(),
                    rest.len(),
                    (offset + done as u64) as libc::off_t,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                // file shrank under us: the rest reads as zeroes would hide it; report EIO
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            done += n as usize;
        }
        Ok(())
    }

    /// Write all of `data` at `offset`, from a buffer of any alignment. `durable` makes this
    /// one write reach stable storage before returning (RWF_DSYNC: FUA or write cache
    /// disabled).
    ///
    /// The one O_DIRECT alignment path for every caller: a buffer not aligned to a sector
    /// ([`MIN_DIRECT_MEM_ALIGN`]) is copied into an [`AlignedBuf`] first; a sector-aligned
    /// one (cache block runs) is written as it is, and copied only when the file system
    /// answers EINVAL because it wants coarser memory alignment. Buffered stores write
    /// `data` as it is.
    pub fn write_at(&self, data: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        if self.readonly {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.check_range(offset, data.len())?;
        if let Medium::Rbd(r) = &self.medium {
            // acknowledged = in the cluster (no librbd cache): durable already
            return r
                .latency
                .time(StoreOp::Write, || r.image.write_at(data, offset));
        }
        if !self.direct {
            return self.pwrite_all(data, offset, durable);
        }
        let addr = data.as_ptr() as usize;
        if addr % MIN_DIRECT_MEM_ALIGN != 0 {
            return self.pwrite_all(AlignedBuf::from_slice(data).as_slice(), offset, durable);
        }
        match self.pwrite_all(data, offset, durable) {
            Err(e)
                if e.raw_os_error() == Some(libc::EINVAL)
                    && addr % crate::aligned::DIRECT_ALIGN != 0 =>
            {
                // the file system wants coarser memory alignment than a sector: bounce
                self.pwrite_all(AlignedBuf::from_slice(data).as_slice(), offset, durable)
            }
            other => other,
        }
    }

    /// pwritev2 until all of `data` is written (the buffer as it is).
    fn pwrite_all(&self, data: &[u8], offset: u64, durable: bool) -> io::Result<()> {
        let flags = if durable { libc::RWF_DSYNC } else { 0 };
        let fd = self.raw_fd();
        let mut done = 0usize;
        while done < data.len() {
            let rest = &data[done..];
            let iov = libc::iovec {
                iov_base: rest.as_ptr() as *mut libc::c_void,
                iov_len: rest.len(),
            };
            // SAFETY: iov points to rest.len() readable bytes that outlive the call; one iovec.
            let n = unsafe {
                libc::pwritev2(fd, &iov, 1, (offset + done as u64) as libc::off_t, flags)
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            done += n as usize;
        }
        Ok(())
    }

    /// Deallocate `len` bytes at `offset` so that they read back as zeros: a hole punched in
    /// a file (fallocate PUNCH_HOLE, space returned to the file system), a discard that
    /// zeroes on a block device; where neither is possible (the file system or device cannot)
    /// the range is zeroed instead (ZERO_RANGE, then plain zero writes), so reads return
    /// zeros in every case. Returns whether space was really deallocated.
    pub fn deallocate(&self, offset: u64, len: u64) -> io::Result<bool> {
        if self.readonly {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        self.check_range(offset, usize::try_from(len).unwrap_or(usize::MAX))?;
        if len == 0 {
            return Ok(false);
        }
        if let Medium::Rbd(r) = &self.medium {
            // write_zeroes, not discard: librbd skips partial-object discards, which would
            // leave old data where the initiator was promised zeros; whole objects are
            // still deallocated
            let len =
                usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            r.latency
                .time(StoreOp::Zero, || r.image.write_zeroes(offset, len))?;
            return Ok(true);
        }
        let fd = self.raw_fd();
        let fallocate = |mode: libc::c_int| {
            // SAFETY: plain syscall on our own descriptor; the range was checked above.
            let r = unsafe { libc::fallocate(fd, mode, offset as libc::off_t, len as libc::off_t) };
            if r == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        };
        let unsupported = |e: &io::Error| {
            matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) | Some(libc::ENODEV)
            )
        };
        match fallocate(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE) {
            Ok(()) => return Ok(true),
            Err(e) if !unsupported(&e) => return Err(e),
            Err(_) => {}
        }
        match fallocate(libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE) {
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
            self.write_at(&zeros.as_slice()[..n], offset + at, false)?;
            at += n as u64;
        }
        Ok(false)
    }

    /// The allocation state of `offset .. offset + len` as `(offset, len, allocated)` runs in
    /// order, from the file's holes and data (lseek SEEK_DATA / SEEK_HOLE). A block device,
    /// or a file system that cannot tell, reports everything allocated.
    pub fn allocation(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u64, bool)>> {
        let end = offset.saturating_add(len).min(self.size());
        if offset >= end {
            return Ok(Vec::new());
        }
        if self.block_device || self.is_rbd() {
            return Ok(vec![(offset, end - offset, true)]);
        }
        let fd = self.raw_fd();
        let seek = |pos: u64, whence: libc::c_int| -> io::Result<Option<u64>> {
            // SAFETY: lseek on our descriptor; positional I/O never uses the file offset.
            let r = unsafe { libc::lseek(fd, pos as libc::off_t, whence) };
            if r >= 0 {
                return Ok(Some(r as u64));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ENXIO) => Ok(None), // no data at or after pos
                _ => Err(e),
            }
        };
        let mut runs: Vec<(u64, u64, bool)> = Vec::new();
        let mut push = |start: u64, stop: u64, allocated: bool| {
            if stop <= start {
                return;
            }
            match runs.last_mut() {
                Some(last) if last.2 == allocated && last.0 + last.1 == start => {
                    last.1 += stop - start
                }
                _ => runs.push((start, stop - start, allocated)),
            }
        };
        let mut pos = offset;
        while pos < end {
            let data = match seek(pos, libc::SEEK_DATA) {
                Ok(d) => d,
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    // the file system does not report holes
                    return Ok(vec![(offset, end - offset, true)]);
                }
                Err(e) => return Err(e),
            };
            let Some(data) = data.filter(|&d| d < end) else {
                push(pos, end, false);
                break;
            };
            push(pos, data, false);
            let hole = seek(data, libc::SEEK_HOLE)?.unwrap_or(self.size()).min(end);
            push(data, hole, true);
            pos = hole.max(data + 1);
        }
        Ok(runs)
    }

    /// Make every completed write durable (fdatasync; an RBD image's flush).
    pub fn sync(&self) -> io::Result<()> {
        if self.readonly {
            return Ok(());
        }
        match &self.medium {
            Medium::File(f) => nix::unistd::fdatasync(f.as_raw_fd()).map_err(io::Error::from),
            Medium::Rbd(r) => r.latency.time(StoreOp::Flush, || bounded_flush(r)),
        }
    }
}

/// An image flush that reports ETIMEDOUT after the image's flush limit instead of waiting
/// for a cluster that never answers (librbd finishes it later, or never; nothing waits).
fn bounded_flush(r: &RbdImage) -> io::Result<()> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    r.image.aio_flush(Box::new(move |res, ()| {
        let _ = tx.send(res);
    }));
    match rx.recv_timeout(r.flush_limit) {
        Ok(res) => res.map(drop),
        Err(_) => {
            tracing::warn!(image = %r.image.spec(), limit = ?r.flush_limit,
                "rbd flush did not finish in time: reported failed");
            Err(io::Error::from_raw_os_error(libc::ETIMEDOUT))
        }
    }
}

fn ioctl_u64(file: &File, req: libc::c_ulong) -> io::Result<u64> {
    let mut v: u64 = 0;
    // SAFETY: the request writes one u64 into v, which is valid and writable.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), req, &mut v as *mut u64) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

fn ioctl_u32(file: &File, req: libc::c_ulong) -> io::Result<u32> {
    let mut v: libc::c_int = 0;
    // SAFETY: the request writes one int into v, which is valid and writable.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), req, &mut v as *mut libc::c_int) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v.max(0) as u32)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn rbd_flush_limit_follows_the_admins_op_timeout() {
        let secs = |bsopts: &str| {
            let c = rbd::ClusterOptions::parse(bsopts, &[]).expect("bsopts");
            flush_limit(&c).as_secs()
        };
        assert_eq!(
            secs("id=admin;rados_osd_op_timeout=4"),
            4 + FLUSH_MARGIN_SECS
        );
        assert_eq!(
            secs("id=admin"),
            30 + FLUSH_MARGIN_SECS,
            "the default op timeout"
        );
        assert_eq!(
            secs("rados_osd_op_timeout=0"),
            60 + FLUSH_MARGIN_SECS,
            "0 = none"
        );
        assert_eq!(secs("rados_osd_op_timeout=junk"), 60 + FLUSH_MARGIN_SECS);
    }

    use super::*;

    fn store(size: u64, bs: u32) -> (tempfile::TempDir, BackingStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("lun.img");
        assert!(create_sparse(&p, size).expect("create"));
        assert!(!create_sparse(&p, size).expect("exists"));
        let s = BackingStore::open(
            &p,
            &OpenOptions {
                block_size: bs,
                ..Default::default()
            },
        )
        .expect("open");
        (dir, s)
    }

    #[test]
    fn write_read_roundtrip() {
        for bs in [512u32, 4096] {
            let (_d, s) = store(1 << 20, bs);
            assert_eq!(s.num_blocks(), (1 << 20) / u64::from(bs));
            let mut data = AlignedBuf::new(3 * bs as usize);
            for (i, b) in data.as_mut_slice().iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            s.write_at(data.as_slice(), u64::from(bs) * 5, false)
                .expect("write");
            s.write_at(data.as_slice(), u64::from(bs) * 9, true)
                .expect("durable write");
            s.sync().expect("sync");
            let mut back = AlignedBuf::new(3 * bs as usize);
            s.read_at(back.as_mut_slice(), u64::from(bs) * 5)
                .expect("read");
            assert_eq!(back.as_slice(), data.as_slice());
            let mut zero = AlignedBuf::new(bs as usize);
            s.read_at(zero.as_mut_slice(), 0).expect("read hole");
            assert!(zero.as_slice().iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn deallocate_zeroes_and_reports_holes() {
        let (_d, s) = store(4 << 20, 512);
        let mut data = AlignedBuf::new(1 << 20);
        data.as_mut_slice().fill(0xAB);
        s.write_at(data.as_slice(), 1 << 20, false).expect("write");
        s.write_at(data.as_slice(), 2 << 20, false).expect("write");
        s.sync().expect("sync");
        let runs = s.allocation(0, 4 << 20).expect("allocation");
        // the file system may round to its own blocks; the written MiBs are data
        assert!(
            runs.iter()
                .any(|&(o, l, a)| a && o <= 1 << 20 && o + l >= 3 << 20),
            "{runs:?}"
        );
        assert!(runs.iter().any(|&(o, _, a)| !a && o == 0), "{runs:?}");
        // punch the middle of the first written MiB
        s.deallocate((1 << 20) + 65536, 131072).expect("deallocate");
        let mut back = AlignedBuf::new(1 << 20);
        s.read_at(back.as_mut_slice(), 1 << 20).expect("read");
        let b = back.as_slice();
        assert!(b[..65536].iter().all(|&x| x == 0xAB));
        assert!(b[65536..196608].iter().all(|&x| x == 0));
        assert!(b[196608..].iter().all(|&x| x == 0xAB));
        // the runs cover the range exactly, in order
        let runs = s.allocation(4096, (4 << 20) - 8192).expect("allocation");
        assert_eq!(runs.first().map(|r| r.0), Some(4096));
        let mut at = 4096;
        for &(o, l, _) in &runs {
            assert_eq!(o, at);
            at += l;
        }
        assert_eq!(at, (4 << 20) - 4096);
        assert!(s.deallocate(4 << 20, 512).is_err(), "beyond the end");
    }

    #[test]
    fn online_resize_grows_files_only() {
        let (_d, s) = store(1 << 20, 512);
        assert_eq!(s.resize(Some(2 << 20)).expect("grow"), 2 << 20);
        assert_eq!(s.size(), 2 << 20);
        let data = AlignedBuf::new(512);
        s.write_at(data.as_slice(), (2 << 20) - 512, false)
            .expect("write in the new space");
        assert!(s.resize(Some(1 << 20)).is_err(), "shrinking is refused");
        assert!(s.resize(Some((3 << 20) + 1)).is_err(), "not whole blocks");
        assert_eq!(s.resize(None).expect("re-measure"), 2 << 20);
    }

    #[test]
    fn writes_from_unaligned_buffers() {
        let (_d, s) = store(1 << 20, 512);
        // a Vec slice at an odd address: bounced when the store is O_DIRECT
        let v: Vec<u8> = (0..4097u32).map(|i| (i % 253) as u8).collect();
        s.write_at(&v[1..], 8192, false).expect("unaligned write");
        let mut back = AlignedBuf::new(4096);
        s.read_at(back.as_mut_slice(), 8192).expect("read");
        assert_eq!(back.as_slice(), &v[1..]);
        // sector-aligned but not page-aligned memory
        let mut a = AlignedBuf::new(8192);
        a.as_mut_slice()[512..1536].fill(0x5A);
        s.write_at(&a.as_slice()[512..1536], 4096, true)
            .expect("sector-aligned write");
        let mut back = AlignedBuf::new(1024);
        s.read_at(back.as_mut_slice(), 4096).expect("read");
        assert!(back.as_slice().iter().all(|&b| b == 0x5A));
    }

    #[test]
    fn out_of_range_is_einval() {
        let (_d, s) = store(8192, 512);
        let mut b = AlignedBuf::new(1024);
        let e = s
            .read_at(b.as_mut_slice(), 8192 - 512)
            .expect_err("past end");
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn rejects_unaligned_size_and_dirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("odd.img");
        std::fs::write(&p, vec![0u8; 1000]).expect("write");
        let e = BackingStore::open(&p, &OpenOptions::default()).expect_err("unaligned");
        assert!(e.to_string().contains("not a multiple"), "{e}");
        let e = BackingStore::open(dir.path(), &OpenOptions::default()).expect_err("dir");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = BackingStore::open(&dir.path().join("missing"), &OpenOptions::default())
            .expect_err("missing");
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn readonly_refuses_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("ro.img");
        create_sparse(&p, 4096).expect("create");
        let s = BackingStore::open(
            &p,
            &OpenOptions {
                readonly: true,
                ..Default::default()
            },
        )
        .expect("open");
        let b = AlignedBuf::new(512);
        let e = s.write_at(b.as_slice(), 0, false).expect_err("ro");
        assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    }
}
