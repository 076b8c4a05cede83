//! Memory registration: a [`MemoryRegion`] pins memory for the device and names it with a
//! local key (for this side's work requests) and a remote key (for the peer's RDMA READ and
//! WRITE).
//!
//! A region owns (an `Arc` of) what holds its memory, a [`MemoryHolder`], and the protection
//! domain it lives in, so in safe code it cannot outlive either: the memory is deregistered
//! (`ibv_dereg_mr`, in drop) before its holder can free it. [`Buffer`] is a ready-made holder
//! (page-aligned, zeroed, read and written by copies only, so no Rust reference ever aliases
//! bytes the device writes); an arena can implement [`MemoryHolder`] itself, or use
//! [`MemoryRegion::register_raw`] with the lifetime promise as the caller's.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rdma_mummy_sys as ffi;

use crate::context::ProtectionDomain;
use crate::error::{Error, LIBIBVERBS, Result};
use crate::qp::Sge;

/// What the device may do with a region (`IBV_ACCESS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access(u32);

impl Access {
    /// Local reads only (Send sources, RDMA WRITE sources).
    pub const LOCAL_READ: Access = Access(0);
    /// The device writes it (receive buffers, RDMA READ destinations).
    pub const LOCAL_WRITE: Access = Access(ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// The peer may RDMA WRITE into it (needs `LOCAL_WRITE` too).
    pub const REMOTE_WRITE: Access = Access(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0);
    /// The peer may RDMA READ it.
    pub const REMOTE_READ: Access = Access(ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0);

    /// The raw `IBV_ACCESS_*` bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every bit of `other` is set in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// Something that holds memory a [`MemoryRegion`] covers.
///
/// # Safety
///
/// `memory()` must return the same range every time, valid for reads and writes of `len`
/// bytes for as long as the holder is alive, and not moved; the device may write it at any
/// time while it is registered, so the holder must never hand out Rust references (`&[u8]`,
/// `&mut [u8]`) to it — only raw copies, atomics, or `unsafe` access whose caller knows no
/// RDMA operation on those bytes is in flight.
pub unsafe trait MemoryHolder: Send + Sync + 'static {
    /// The start and the length of the memory.
    fn memory(&self) -> (NonNull<u8>, usize);
}

/// A registered memory region: lkey and rkey for the memory of its holder.
pub struct MemoryRegion {
    mr: NonNull<ffi::ibv_mr>,
    addr: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
    // dropped after the region is deregistered (Drop::drop runs first)
    _holder: Arc<dyn MemoryHolder>,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the region's handle is only passed to ibv_dereg_mr, once, in drop; the rest is
// plain copied data. The holder is Send + Sync by its trait bound.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above: `&self` gives access to plain data only.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers all of `holder`'s memory in `pd` with `access`.
    pub fn register(
        pd: &Arc<ProtectionDomain>,
        holder: Arc<dyn MemoryHolder>,
        access: Access,
    ) -> Result<MemoryRegion> {
        let (ptr, len) = holder.memory();
        if len == 0 {
            return Err(Error::Invalid("cannot register an empty memory range"));
        }
        // SAFETY: the holder's contract: `ptr..ptr+len` is valid and stays so while the holder
        // lives; the region keeps the holder alive until after ibv_dereg_mr. The PD is live.
        let mr = unsafe {
            ffi::ibv_reg_mr(
                pd.as_ptr(),
                ptr.as_ptr().cast(),
                len,
                access.bits() as libc::c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| Error::last("ibv_reg_mr", LIBIBVERBS))?;
        // SAFETY: ibv_reg_mr succeeded: `mr` points at a region whose keys are set and
        // constant until deregistration.
        let (lkey, rkey) = unsafe { (mr.as_ref().lkey, mr.as_ref().rkey) };
        Ok(MemoryRegion {
            mr,
            addr: ptr.as_ptr() as u64,
            len,
            lkey,
            rkey,
            _holder: holder,
            _pd: pd.clone(),
        })
    }

    /// Registers `len` bytes at `ptr` that this crate does not own (e.g. a NUMA arena mapped
    /// elsewhere).
    ///
    /// # Safety
    ///
    /// `ptr..ptr+len` must stay mapped, unmoved and unused by Rust references that the device
    /// could alias (see [`MemoryHolder`]) until the returned region is dropped.
    pub unsafe fn register_raw(
        pd: &Arc<ProtectionDomain>,
        ptr: NonNull<u8>,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion> {
        MemoryRegion::register(pd, Arc::new(RawMemory { ptr, len }), access)
    }

    /// The local key, for this side's scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key, for the peer's RDMA READ/WRITE.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The address of the first byte (what the peer puts in its RDMA requests).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: registration refuses empty ranges).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A scatter/gather entry for `len` bytes at `offset` in the region, `None` when it does
    /// not fit.
    pub fn sge(&self, offset: usize, len: u32) -> Option<Sge> {
        let end = offset.checked_add(len as usize)?;
        (end <= self.len).then(|| Sge {
            addr: self.addr + offset as u64,
            len,
            lkey: self.lkey,
        })
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: the region is deregistered once, before its holder and PD are released.
        unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) };
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MemoryRegion(addr {:#x}, len {}, lkey {:#x}, rkey {:#x})",
            self.addr, self.len, self.lkey, self.rkey
        )
    }
}

/// Memory named by the caller of [`MemoryRegion::register_raw`].
struct RawMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: only the address is stored; the caller of register_raw promised the memory's
// validity from any thread.
unsafe impl Send for RawMemory {}
// SAFETY: as above.
unsafe impl Sync for RawMemory {}

// SAFETY: the range is constant; its validity is register_raw's caller's promise.
unsafe impl MemoryHolder for RawMemory {
    fn memory(&self) -> (NonNull<u8>, usize) {
        (self.ptr, self.len)
    }
}

/// Page-aligned, zeroed memory for registration, read and written by copies of atomic bytes
/// only (so concurrent use from Rust is race-free, and device writes alias no reference).
pub struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the memory is owned by the buffer and accessed through atomic bytes, or by plain
// copies and slices only while quiescent (the unsafe accessors' contract).
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

const PAGE: usize = 4096;

impl Buffer {
    /// A zeroed buffer of `len` bytes (at least 1), page-aligned.
    pub fn new(len: usize) -> Result<Buffer> {
        let layout = Layout::from_size_align(len.max(1), PAGE)
            .map_err(|_| Error::Invalid("buffer too large"))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(Error::Invalid("out of memory for a buffer"))?;
        Ok(Buffer {
            ptr,
            len: len.max(1),
        })
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: at least 1 byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn bytes(&self) -> &[AtomicU8] {
        // SAFETY: the allocation holds `len` initialised bytes for the buffer's lifetime;
        // AtomicU8 has the size and alignment of u8, and every access goes through atomics.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<AtomicU8>(), self.len) }
    }

    /// Copies `data` to `offset`. [`Error::Invalid`] when it does not fit.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        let dst = offset
            .checked_add(data.len())
            .and_then(|end| self.bytes().get(offset..end))
            .ok_or(Error::Invalid("write past the end of a buffer"))?;
        for (d, s) in dst.iter().zip(data) {
            d.store(*s, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Copies `out.len()` bytes from `offset`. [`Error::Invalid`] when they do not fit.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let src = offset
            .checked_add(out.len())
            .and_then(|end| self.bytes().get(offset..end))
            .ok_or(Error::Invalid("read past the end of a buffer"))?;
        for (o, s) in out.iter_mut().zip(src) {
            *o = s.load(Ordering::Relaxed);
        }
        Ok(())
    }
}

impl Buffer {
    /// Copies `data` to `offset` with one memcpy. [`Error::Invalid`] when it does not fit.
    ///
    /// # Safety
    ///
    /// Nothing else may access `offset..offset + data.len()` during the call: no RDMA
    /// operation on it is in flight (no posted receive or RDMA READ targets it) and no other
    /// thread reads or writes it.
    pub unsafe fn write_quiescent(&self, offset: usize, data: &[u8]) -> Result<()> {
        let end = offset
            .checked_add(data.len())
            .filter(|&e| e <= self.len)
            .ok_or(Error::Invalid("write past the end of a buffer"))?;
        debug_assert!(end <= self.len);
        // SAFETY: the range is inside the allocation (checked); the caller promises no
        // concurrent access, so the plain copy races with nothing.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    /// Copies `out.len()` bytes from `offset` with one memcpy. [`Error::Invalid`] when they
    /// do not fit.
    ///
    /// # Safety
    ///
    /// As for [`Buffer::write_quiescent`]: nothing else accesses the range during the call
    /// (the receive or RDMA READ that filled it has completed and is not posted again yet).
    pub unsafe fn read_quiescent(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        offset
            .checked_add(out.len())
            .filter(|&e| e <= self.len)
            .ok_or(Error::Invalid("read past the end of a buffer"))?;
        // SAFETY: in bounds (checked); no concurrent access by the caller's promise.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }
}

impl Buffer {
    /// The bytes `offset..offset + len` in place, without a copy (a received message parsed
    /// where the device put it). [`Error::Invalid`] when they do not fit.
    ///
    /// # Safety
    ///
    /// For as long as the returned slice lives nothing writes the range: no receive or RDMA
    /// READ targeting it is posted (the one that filled it has completed), and no thread
    /// writes it (`write_at`, `write_quiescent`).
    pub unsafe fn slice_quiescent(&self, offset: usize, len: usize) -> Result<&[u8]> {
        offset
            .checked_add(len)
            .filter(|&e| e <= self.len)
            .ok_or(Error::Invalid("slice past the end of a buffer"))?;
        // SAFETY: in bounds (checked) of an allocation of initialised bytes that lives as
        // long as `self`; the caller promises no writer, device or thread, while it lives.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) })
    }
}

// SAFETY: the allocation is fixed for the buffer's lifetime and only accessed through atomic
// bytes, never through plain references.
unsafe impl MemoryHolder for Buffer {
    fn memory(&self) -> (NonNull<u8>, usize) {
        (self.ptr, self.len)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this very layout (checked there), freed once.
        unsafe {
            std::alloc::dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len, PAGE),
            )
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({:p}, {} bytes)", self.ptr.as_ptr(), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_copies_and_bounds() {
        let b = Buffer::new(8192).unwrap();
        assert_eq!(b.len(), 8192);
        assert_eq!(b.memory().0.as_ptr() as usize % PAGE, 0);
        let mut out = [9u8; 4];
        b.read_at(100, &mut out).unwrap();
        assert_eq!(out, [0; 4]);
        b.write_at(8188, &[1, 2, 3, 4]).unwrap();
        b.read_at(8188, &mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4]);
        assert!(b.write_at(8189, &[1, 2, 3, 4]).is_err());
        assert!(b.read_at(usize::MAX, &mut out).is_err());
        assert_eq!(Buffer::new(0).unwrap().len(), 1);
    }

    #[test]
    fn access_bits() {
        let a = Access::LOCAL_WRITE | Access::REMOTE_READ;
        assert_eq!(a.bits(), 1 | 4);
        assert!(a.contains(Access::LOCAL_WRITE));
        assert!(!a.contains(Access::REMOTE_WRITE));
        assert_eq!(Access::LOCAL_READ.bits(), 0);
    }
}
