//! Heap buffers aligned for O_DIRECT (4096-byte alignment, length rounded up to it), bound to
//! the NUMA node of the thread that first touches them; and a per-thread recycle bin, so a
//! thread that reads into such buffers and drops them once sent (an event thread's uncached
//! reads) reuses their memory instead of allocating per I/O.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::cell::RefCell;
use std::ptr::NonNull;

/// Capacities the recycle bin keeps: powers of two from 4 KiB to 1 MiB.
const BIN_CLASSES: usize = 9;
/// Buffers kept per capacity class at most, and bytes kept per class at most (so a thread
/// keeps 64 buffers of 4 KiB but 2 of 1 MiB: at most ~14 MiB in all).
const BIN_DEPTH: usize = 64;
const BIN_CLASS_BYTES: usize = 2 << 20;

/// How many buffers class `class` keeps.
fn bin_depth(class: usize) -> usize {
    (BIN_CLASS_BYTES / (DIRECT_ALIGN << class)).clamp(1, BIN_DEPTH)
}

/// A thread's kept buffers by capacity class (class `c` holds capacity 4 KiB << c).
struct Bins(Vec<Vec<NonNull<u8>>>);

impl Bins {
    fn class_mut(&mut self, class: usize) -> Option<&mut Vec<NonNull<u8>>> {
        self.0.get_mut(class)
    }
}

impl Drop for Bins {
    /// The thread ends: free what it kept.
    fn drop(&mut self) {
        for (class, bin) in self.0.iter_mut().enumerate() {
            for ptr in bin.drain(..) {
                // SAFETY: every pointer in class `class` came from an AlignedBuf of
                // capacity DIRECT_ALIGN << class, allocated with that layout, and the bin
                // is its only owner.
                unsafe { dealloc(ptr.as_ptr(), AlignedBuf::layout(DIRECT_ALIGN << class)) }
            }
        }
    }
}

thread_local! {
    /// Freed buffers of this thread (None: recycling is off here).
    static BIN: RefCell<Option<Bins>> = const { RefCell::new(None) };
}

/// The recycle-bin class of capacity `cap`, when it has one.
fn bin_class(cap: usize) -> Option<usize> {
    if !cap.is_power_of_two() || cap < DIRECT_ALIGN {
        return None;
    }
    let c = (cap / DIRECT_ALIGN).trailing_zeros() as usize;
    (c < BIN_CLASSES).then_some(c)
}

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

    /// Turn on the recycle bin of the calling thread: buffers of the sizes
    /// [`for_overwrite`](Self::for_overwrite) makes that this thread drops are kept (up to
    /// 64 and 2 MiB per size) and handed out again by `for_overwrite` on this thread. The bin's own
    /// memory is taken now.
    pub fn recycle_on_this_thread() {
        BIN.with(|b| {
            *b.borrow_mut() = Some(Bins(
                (0..BIN_CLASSES)
                    .map(|_| Vec::with_capacity(BIN_DEPTH))
                    .collect(),
            ));
        });
    }

    /// A buffer of `len` meaningful bytes whose contents are unspecified (recycled memory
    /// of this thread when it has some of that size, else new and zeroed): only for a
    /// caller that overwrites every byte it will use. Capacity is a power of two up to
    /// 1 MiB (recyclable), beyond that as [`new`](Self::new).
    pub fn for_overwrite(len: usize) -> Self {
        let cap = len.max(1).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
        let cap = cap.next_power_of_two();
        let Some(class) = bin_class(cap) else {
            return Self::new(len);
        };
        let reused = BIN
            .try_with(|b| {
                b.try_borrow_mut()
                    .ok()
                    .and_then(|mut g| g.as_mut()?.class_mut(class)?.pop())
            })
            .ok()
            .flatten();
        match reused {
            Some(ptr) => AlignedBuf { ptr, cap, len },
            None => {
                let mut b = Self::new(cap);
                b.len = len;
                b
            }
        }
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
        if let Some(class) = bin_class(self.cap) {
            let kept = BIN
                .try_with(|b| {
                    let Ok(mut g) = b.try_borrow_mut() else {
                        return false;
                    };
                    match g.as_mut().and_then(|bins| bins.class_mut(class)) {
                        Some(bin) if bin.len() < bin_depth(class) => {
                            bin.push(self.ptr);
                            true
                        }
                        _ => false,
                    }
                })
                .unwrap_or(false);
            if kept {
                return; // the bin owns the memory now (capacity `cap`, this layout)
            }
        }
        // SAFETY: ptr was allocated with exactly this layout in `new` (a recycled buffer
        // keeps the capacity it was allocated with).
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
    fn recycled_on_the_thread_that_turned_it_on() {
        std::thread::spawn(|| {
            // off: nothing is kept
            let a = AlignedBuf::for_overwrite(5000);
            assert_eq!((a.len(), a.capacity()), (5000, 8192));
            drop(a);
            AlignedBuf::recycle_on_this_thread();
            let mut a = AlignedBuf::for_overwrite(8192);
            a.as_mut_slice().fill(7);
            let p = a.as_slice().as_ptr();
            drop(a);
            let b = AlignedBuf::for_overwrite(6000);
            assert_eq!(b.as_slice().as_ptr(), p, "the freed buffer came back");
            assert_eq!((b.len(), b.capacity()), (6000, 8192));
            // other sizes and huge buffers are not mixed up with it
            let c = AlignedBuf::for_overwrite(4096);
            assert_ne!(c.as_slice().as_ptr(), p);
            let big = AlignedBuf::for_overwrite(3 << 20);
            assert_eq!(big.capacity(), 3 << 20);
            // at most BIN_DEPTH kept per size; the rest are freed
            let many: Vec<_> = (0..BIN_DEPTH + 10)
                .map(|_| AlignedBuf::for_overwrite(4096))
                .collect();
            drop(many);
            BIN.with(|bin| assert_eq!(bin.borrow().as_ref().unwrap().0[0].len(), BIN_DEPTH));
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn copy_in() {
        let b = AlignedBuf::from_slice(b"hello");
        assert_eq!(b.as_slice(), b"hello");
    }
}
