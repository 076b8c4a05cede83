//! Memory files (memfd) behind the cache arenas, so a live upgrade can hand a node's cache
//! memory to the next executable instead of reading every block back from disk.
//!
//! A memory file is created sized (`ftruncate`, no page allocated yet), mapped `MAP_SHARED`
//! at a 2 MiB-aligned address (so shared-memory transparent huge pages can back it when the
//! kernel allows them: `/sys/kernel/mm/transparent_hugepage/shmem_enabled`), or from the
//! hugetlbfs pool (`MFD_HUGETLB`) when it has enough free pages. An inherited file is mapped
//! the same way after checking its size; its pages, and the memory policy `mbind` gave them
//! (a memory file keeps it), stay where they were.
//!
//! This module only maps memory; what the slots hold is the partitions' business.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;

use crate::arena::HUGE_PAGE;

/// A mapped memory file: its descriptor and the mapping.
#[derive(Debug)]
pub(crate) struct Mapped {
    pub fd: OwnedFd,
    pub ptr: NonNull<u8>,
    pub len: usize,
    /// From the hugetlbfs pool.
    pub hugetlb: bool,
}

/// True when the kernel gives shared memory (memory files) transparent huge pages on
/// request: `shmem_enabled` is `always`, `within_size`, `advise` or `force`.
pub fn shared_huge_pages() -> bool {
    let Ok(t) = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled") else {
        return false;
    };
    let chosen = t
        .split_whitespace()
        .find(|w| w.starts_with('['))
        .map(|w| w.trim_matches(|c| c == '[' || c == ']'));
    matches!(chosen, Some("always" | "within_size" | "advise" | "force"))
}

/// A new memory file of `len` bytes named after `node`, mapped. `hugetlb`: take its pages
/// from the hugetlbfs pool (the file is then a whole number of [`HUGE_PAGE`]s).
pub(crate) fn create(node: usize, len: usize, hugetlb: bool) -> io::Result<Mapped> {
    let len = if hugetlb {
        len.div_ceil(HUGE_PAGE) * HUGE_PAGE
    } else {
        len
    };
    let name = std::ffi::CString::new(format!("numatgt-cache-node{node}"))
        .map_err(|_| io::Error::other("memory file name"))?;
    let mut flags = libc::MFD_CLOEXEC;
    if hugetlb {
        // MFD_HUGE_2MB is MAP_HUGE_2MB: 21 << MFD_HUGE_SHIFT (26)
        flags |= libc::MFD_HUGETLB | (21 << 26);
    }
    // SAFETY: `name` is a valid NUL-terminated string; memfd_create returns a new descriptor
    // or -1 and touches no memory of ours.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just returned by memfd_create and is owned by nobody else.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    let size = libc::off_t::try_from(len).map_err(|_| io::Error::other("memory file size"))?;
    // SAFETY: ftruncate on our own descriptor.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    map(fd, len, hugetlb)
}

/// Maps an inherited memory file made by [`create`] for `len` bytes: it must be that size
/// (from the hugetlbfs pool: rounded up as `create` does).
pub(crate) fn adopt(fd: OwnedFd, len: usize) -> io::Result<Mapped> {
    // SAFETY: fstat fills the zeroed struct for our own descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // hugetlbfs files report a 2 MiB block size
    let hugetlb = st.st_blksize as usize == HUGE_PAGE;
    let want = if hugetlb {
        len.div_ceil(HUGE_PAGE) * HUGE_PAGE
    } else {
        len
    };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_size as u64 != want as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the kept cache memory file is {} bytes, {want} expected",
                st.st_size
            ),
        ));
    }
    map(fd, want, hugetlb)
}

/// Maps `fd` shared at a [`HUGE_PAGE`]-aligned address (reserve an anonymous range one huge
/// page longer, map the file over its aligned part, give the rest back).
fn map(fd: OwnedFd, len: usize, hugetlb: bool) -> io::Result<Mapped> {
    let over = len
        .checked_add(HUGE_PAGE)
        .ok_or_else(|| io::Error::other("memory file size"))?;
    // SAFETY: an anonymous, inaccessible reservation with no address hint.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let addr = raw as usize;
    let aligned = addr.div_ceil(HUGE_PAGE) * HUGE_PAGE;
    // SAFETY: [aligned, aligned + len) lies inside the reservation just made (aligned - addr
    // < HUGE_PAGE); MAP_FIXED replaces that part of it with the file, nothing else.
    let p = unsafe {
        libc::mmap(
            aligned as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            0,
        )
    };
    let err = (p == libc::MAP_FAILED).then(io::Error::last_os_error);
    let head = aligned - addr;
    let tail = over - head - len;
    // SAFETY: head and tail are the page-aligned, unused ends of our own reservation (on
    // failure, the whole reservation goes).
    unsafe {
        if err.is_some() {
            libc::munmap(raw, over);
        } else {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + len) as *mut libc::c_void, tail);
            }
        }
    }
    if let Some(e) = err {
        return Err(e);
    }
    if !hugetlb {
        // SAFETY: madvise on our own mapping; without shared-memory THP it changes nothing.
        unsafe { libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
    }
    let ptr = NonNull::new(aligned as *mut u8).ok_or_else(|| io::Error::other("mmap null"))?;
    Ok(Mapped {
        fd,
        ptr,
        len,
        hugetlb,
    })
}

/// Free 2 MiB pages in the system's hugetlbfs pool.
pub fn hugetlb_free_pages() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}
