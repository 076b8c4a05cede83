//! Heap buffers aligned for O_DIRECT (4096-byte alignment, length rounded up to it), bound to
//! the NUMA node of the thread that first touches them.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

/// Alignment used for every O_DIRECT buffer: covers 512- and 4096-byte logical blocks.
pub const DIRECT_ALIGN: usize = 4096;

/// A zero-initialised buffer whose start and capacity are multiples of [`DIRECT_ALIGN`].
/// `len()` is the number of meaningful bytes (may be smaller than the capacity).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Vec<u8>); moving it between
// threads or sharing `&AlignedBuf` is as safe as for Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads of initialised bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` meaningful bytes. Capacity is `len` rounded up to the alignment
    /// (at least one alignment unit).
    pub fn new(len: usize) -> Self {
        let cap = len.max(1).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        let layout = Self::layout(cap);
        // SAFETY: layout has non-zero size (cap >= DIRECT_ALIGN) and a valid power-of-two align.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = match NonNull::new(raw) {
            Some(p) => p,
            None => std::alloc::handle_alloc_error(layout),
        };
        AlignedBuf { ptr, cap, len }
    }

    fn layout(cap: usize) -> Layout {
        match Layout::from_size_align(cap, DIRECT_ALIGN) {
            Ok(l) => l,
            // cap is a multiple of DIRECT_ALIGN and far below isize::MAX for any real request
            Err(_) => panic!("AlignedBuf: impossible layout for {cap} bytes"),
        }
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Self {
        let mut b = Self::new(data.len());
        b.as_mut_slice().copy_from_slice(data);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Change the meaningful length (bytes past the old length keep their contents).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.cap, "AlignedBuf::set_len beyond capacity");
        self.len = len;
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap >= len initialised (zeroed at allocation) bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The whole aligned capacity, for I/O calls that need a block-multiple length.
    pub fn full_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for cap initialised bytes; &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }

    pub fn full(&self) -> &[u8] {
        // SAFETY: ptr is valid for cap initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout in `new`.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.cap)) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for len in [0usize, 1, 511, 512, 4096, 4097, 131072] {
            let b = AlignedBuf::new(len);
            assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_ALIGN, 0);
            assert_eq!(b.len(), len);
            assert_eq!(b.capacity() % DIRECT_ALIGN, 0);
            assert!(b.capacity() >= len);
            assert!(b.full().iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn copy_in() {
        let b = AlignedBuf::from_slice(b"hello");
        assert_eq!(b.as_slice(), b"hello");
    }
}
