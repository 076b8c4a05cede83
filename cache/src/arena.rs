//! Node-local memory arenas: one anonymous `mmap` region per NUMA node, cut into fixed-size,
//! 4096-aligned slots that hold that node's cache blocks.
//!
//! Placement is decided once, at start:
//! 1. map the region (explicit huge pages with `MAP_HUGETLB` when asked for and the node has
//!    enough free ones; otherwise normal pages, 2 MiB-aligned, with `madvise(MADV_HUGEPAGE)` so
//!    transparent huge pages can back it; normal pages are mapped `MAP_NORESERVE`);
//! 2. bind it to the node's OS index with `mbind(2)` (`MPOL_BIND` or `MPOL_PREFERRED`). Virtual
//!    nodes (carved out of fewer real nodes) are **not** bound: there is no real node to bind
//!    to, and [`NodeArena::binding`] says so;
//! 3. pages: by default the arena grows lazily — a page is allocated (under the policy, so on
//!    the node) the first time a cache block in it is filled, so start-up is instant whatever
//!    the size and memory is used only as data is cached, as with the kernel's page cache.
//!    With [`ArenaOptions::prefault`] every page is touched now instead.
//!
//! [`placement`] asks the kernel (`move_pages(2)` with a null node list) where each page of a
//! range lives; [`NodeArena::local_fraction`] turns that into the share of an arena's resident
//! pages that are on its node (the VM test expects at least 99 %), and
//! [`NodeArena::resident_bytes`] says how much of the arena is in memory.
//!
//! With [`Memory::Shared`] the region is a memory file instead (`memory_file`), which a live
//! upgrade passes to the next executable: [`Memory::Kept`] maps it again, pages and policy as
//! they were.
//!
//! The arena only hands out raw slot pointers; who may read or write a slot, and when, is
//! decided by the partition that owns it (see `partition`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use crate::aligned::DIRECT_ALIGN;
use crate::topology::Node;

/// `MPOL_PREFERRED` from `<linux/mempolicy.h>`.
const MPOL_PREFERRED: libc::c_int = 1;
/// `MPOL_BIND` from `<linux/mempolicy.h>`.
const MPOL_BIND: libc::c_int = 2;
/// `MPOL_MF_STRICT`: fail if a page already present cannot follow the policy.
const MPOL_MF_STRICT: libc::c_uint = 1;
/// `MPOL_MF_MOVE`: move pages already present (none should be, we bind before touching).
const MPOL_MF_MOVE: libc::c_uint = 2;
/// Bits in the node mask passed to mbind (node OS indexes must be below this).
const MASK_BITS: usize = 1024;
/// Size of a (PMD) huge page on x86-64 and arm64 with 4 KiB base pages.
pub const HUGE_PAGE: usize = 2 << 20;

/// How an arena is tied to its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindPolicy {
    /// `MPOL_BIND`: pages may only come from the node. The node's free memory is checked
    /// first so that pre-faulting cannot run the node out of memory.
    #[default]
    Bind,
    /// `MPOL_PREFERRED`: the node first, others when it is full (check [`NodeArena::local_fraction`]).
    Preferred,
}

/// Options for [`NodeArena::new`].
#[derive(Debug, Clone, Copy)]
pub struct ArenaOptions {
    /// Bytes per slot: a power of two, at least 4096.
    pub slot_size: usize,
    /// Number of slots.
    pub slots: usize,
    /// Try huge pages (explicit, then transparent).
    pub huge_pages: bool,
    /// Memory policy for real nodes.
    pub policy: BindPolicy,
    /// Touch every page at start (`false`: pages are allocated on first use).
    pub prefault: bool,
}

/// Whose memory the arena is.
#[derive(Debug, Default)]
pub enum Memory {
    /// Anonymous memory of this process (gone with it).
    #[default]
    Private,
    /// A new memory file (memfd), which can be handed to another executable.
    Shared,
    /// A memory file an earlier executable of this process made with the same options.
    Kept(OwnedFd),
}

/// What backs the arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// `MAP_HUGETLB` pages from the hugetlbfs pool.
    HugeTlb,
    /// Normal pages, advised with `MADV_HUGEPAGE` (the kernel may use transparent huge pages).
    TransparentHuge,
    /// Normal pages only.
    Normal,
}

/// How (and whether) the arena was bound to its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// Bound with mbind to this OS node.
    Bound { os_node: usize, policy: BindPolicy },
    /// Virtual node: nothing to bind to; pages land wherever the kernel's default policy puts
    /// them (the first-touching thread's node).
    SkippedVirtual,
}

/// Errors building an arena.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    #[error("arena slot size {0} is not a power of two of at least 4096 bytes")]
    SlotSize(usize),
    #[error("arena of {slots} slots of {slot_size} bytes is empty or too large")]
    Size { slots: usize, slot_size: usize },
    #[error("node {node}'s memory file of {len} bytes: {err}")]
    MemoryFile {
        node: usize,
        len: usize,
        err: io::Error,
    },
    #[error("mmap of {len} bytes for node {node} failed: {err}")]
    Map {
        node: usize,
        len: usize,
        err: io::Error,
    },
    #[error("node {node}: OS node index {os_node} is beyond the {MASK_BITS}-node mask")]
    NodeIndex { node: usize, os_node: usize },
    #[error("mbind of node {node}'s arena to OS node {os_node} failed: {err}")]
    Bind {
        node: usize,
        os_node: usize,
        err: io::Error,
    },
    #[error(
        "node {node} (OS node {os_node}) has {free} bytes free, the arena needs {need}: \
         lower cache.size_per_node or use the preferred policy"
    )]
    NodeMemory {
        node: usize,
        os_node: usize,
        need: usize,
        free: usize,
    },
}

/// One node's cache memory: `slots` slots of `slot_size` bytes, mapped, bound and pre-faulted.
#[derive(Debug)]
pub struct NodeArena {
    ptr: NonNull<u8>,
    map_len: usize,
    slot_size: usize,
    slots: usize,
    node: usize,
    binding: Binding,
    pages: PageKind,
    /// The memory file behind a shared arena.
    file: Option<OwnedFd>,
}

// SAFETY: the arena owns its mapping exclusively; it hands out raw pointers only, and the code
// that dereferences them (the partitions) enforces the access rules. Moving or sharing the
// owner between threads does not touch the memory.
unsafe impl Send for NodeArena {}
// SAFETY: as above; `&NodeArena` only exposes addresses and metadata.
unsafe impl Sync for NodeArena {}

impl NodeArena {
    /// Map, bind (real nodes only) and pre-fault an arena for `node`.
    /// `virtual_node` is `Topology::is_virtual()`.
    pub fn new(node: &Node, virtual_node: bool, opts: ArenaOptions) -> Result<Self, ArenaError> {
        Self::with_memory(node, virtual_node, opts, Memory::Private)
    }

    /// As [`NodeArena::new`], in `memory`. A kept memory file must have the size these
    /// options give; its pages stay (nothing is pre-faulted) and its free-memory check is
    /// skipped (the memory is in use already).
    pub fn with_memory(
        node: &Node,
        virtual_node: bool,
        opts: ArenaOptions,
        memory: Memory,
    ) -> Result<Self, ArenaError> {
        if !opts.slot_size.is_power_of_two() || opts.slot_size < DIRECT_ALIGN {
            return Err(ArenaError::SlotSize(opts.slot_size));
        }
        let size_err = ArenaError::Size {
            slots: opts.slots,
            slot_size: opts.slot_size,
        };
        let len = match opts.slots.checked_mul(opts.slot_size) {
            Some(l) if l > 0 && l <= isize::MAX as usize / 2 => l,
            _ => return Err(size_err),
        };
        let os_node = (!virtual_node).then_some(node.os_index);
        if let Some(os) = os_node {
            if os >= MASK_BITS {
                return Err(ArenaError::NodeIndex {
                    node: node.index,
                    os_node: os,
                });
            }
            if opts.policy == BindPolicy::Bind && !matches!(memory, Memory::Kept(_)) {
                if let Some(free) = node_free_bytes(os) {
                    if free < len {
                        return Err(ArenaError::NodeMemory {
                            node: node.index,
                            os_node: os,
                            need: len,
                            free,
                        });
                    }
                }
            }
        }

        let kept = matches!(memory, Memory::Kept(_));
        let (ptr, map_len, pages, file) = match memory {
            Memory::Private => {
                let (p, l, k) =
                    map_region(node.index, len, opts.huge_pages, os_node, opts.prefault)?;
                (p, l, k, None)
            }
            Memory::Shared | Memory::Kept(_) => {
                let file_err = |err| ArenaError::MemoryFile {
                    node: node.index,
                    len,
                    err,
                };
                let m = match memory {
                    Memory::Kept(fd) => crate::memory_file::adopt(fd, len),
                    _ => {
                        let pool = opts.huge_pages
                            && len >= HUGE_PAGE
                            && free_huge_pages(os_node) >= len.div_ceil(HUGE_PAGE);
                        crate::memory_file::create(node.index, len, pool).or_else(|e| {
                            if !pool {
                                return Err(e);
                            }
                            tracing::debug!("node {}: MFD_HUGETLB failed ({e})", node.index);
                            crate::memory_file::create(node.index, len, false)
                        })
                    }
                }
                .map_err(file_err)?;
                let kind = if m.hugetlb {
                    PageKind::HugeTlb
                } else if opts.huge_pages && crate::memory_file::shared_huge_pages() {
                    PageKind::TransparentHuge
                } else {
                    PageKind::Normal
                };
                (m.ptr, m.len, kind, Some(m.fd))
            }
        };
        let mut arena = NodeArena {
            ptr,
            map_len,
            slot_size: opts.slot_size,
            slots: opts.slots,
            node: node.index,
            binding: Binding::SkippedVirtual,
            pages,
            file,
        };
        if let Some(os) = os_node {
            // On error `arena` is dropped here, which unmaps the region. Kept memory: its
            // pages stay where they are (the file kept the policy too; this restates it).
            mbind(arena.ptr, arena.map_len, os, opts.policy, !kept).map_err(|err| {
                ArenaError::Bind {
                    node: node.index,
                    os_node: os,
                    err,
                }
            })?;
            arena.binding = Binding::Bound {
                os_node: os,
                policy: opts.policy,
            };
        } else {
            tracing::info!(
                "node {}: virtual node, cache arena not bound (pages follow first touch)",
                node.index
            );
        }
        if opts.prefault && !kept {
            arena.prefault();
        }
        Ok(arena)
    }

    /// The memory file behind a shared arena (`None`: private memory).
    pub fn memory_file(&self) -> Option<BorrowedFd<'_>> {
        self.file.as_ref().map(AsFd::as_fd)
    }

    /// Touch every base page so the kernel allocates it now, under the arena's policy.
    fn prefault(&mut self) {
        let page = base_page_size();
        let base = self.ptr.as_ptr();
        let mut off = 0;
        while off < self.map_len {
            // SAFETY: `off < map_len`, so the address is inside our private, writable mapping;
            // nothing else references the arena yet (we hold `&mut self` during construction).
            unsafe { std::ptr::write_volatile(base.add(off), 0u8) };
            off += page;
        }
    }

    /// Dense node index this arena belongs to.
    pub fn node(&self) -> usize {
        self.node
    }
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }
    pub fn slots(&self) -> usize {
        self.slots
    }
    /// Bytes used for slots (`slots * slot_size`).
    pub fn len(&self) -> usize {
        self.slots * self.slot_size
    }
    pub fn is_empty(&self) -> bool {
        self.slots == 0
    }
    pub fn binding(&self) -> Binding {
        self.binding
    }
    pub fn page_kind(&self) -> PageKind {
        self.pages
    }
    /// Start of the arena (4096-aligned, 2 MiB-aligned when huge pages were asked for).
    pub fn base(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Address of slot `i`, or `None` when out of range. The pointer is valid for
    /// `slot_size` bytes for the arena's lifetime; the caller decides who may access it.
    pub fn slot_ptr(&self, i: usize) -> Option<NonNull<u8>> {
        if i >= self.slots {
            return None;
        }
        // SAFETY: i < slots, so the offset is inside the mapping, and the result is non-null.
        Some(unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(i * self.slot_size)) })
    }

    /// OS node of every base page of the arena ([`placement`]).
    pub fn placement(&self) -> io::Result<Vec<i32>> {
        placement(self.ptr.as_ptr(), self.len())
    }

    /// Share of the arena's resident pages that are on its OS node (virtual nodes: every
    /// resident page counts); 1.0 while nothing is resident. Uses `move_pages(2)`.
    pub fn local_fraction(&self) -> io::Result<f64> {
        let pages = self.placement()?;
        let resident = pages.iter().filter(|&&n| n >= 0).count();
        if resident == 0 {
            return Ok(1.0);
        }
        let good = match self.binding {
            Binding::Bound { os_node, .. } => pages
                .iter()
                .filter(|&&n| n >= 0 && n as usize == os_node)
                .count(),
            Binding::SkippedVirtual => resident,
        };
        Ok(good as f64 / resident as f64)
    }

    /// Bytes of the arena backed by memory now (lazily grown arenas fill up as blocks are
    /// cached). Uses `mincore(2)`.
    pub fn resident_bytes(&self) -> io::Result<u64> {
        let page = base_page_size();
        let pages = self.map_len.div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: the range is exactly our own mapping; `vec` has one byte per page of it.
        let rc = unsafe { libc::mincore(self.ptr.as_ptr().cast(), self.map_len, vec.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let resident = vec.iter().filter(|&&b| b & 1 != 0).count();
        Ok((resident * page) as u64)
    }
}

impl Drop for NodeArena {
    fn drop(&mut self) {
        // SAFETY: ptr/map_len describe exactly the mapping created in `map_region`; every
        // reference into it (partitions, BlockRefs) holds an Arc to the arena, so none outlives it.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.map_len);
        }
    }
}

fn base_page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// Free bytes of an OS node according to sysfs, if readable.
fn node_free_bytes(os_node: usize) -> Option<usize> {
    let text =
        std::fs::read_to_string(format!("/sys/devices/system/node/node{os_node}/meminfo")).ok()?;
    let line = text.lines().find(|l| l.contains("MemFree:"))?;
    let kb: usize = line.split_whitespace().rev().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Free 2 MiB huge pages: on one OS node (sysfs), or system-wide when `os_node` is None.
fn free_huge_pages(os_node: Option<usize>) -> usize {
    let path = match os_node {
        Some(n) => {
            format!("/sys/devices/system/node/node{n}/hugepages/hugepages-2048kB/free_hugepages")
        }
        None => "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages".to_string(),
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn mmap_anon(len: usize, extra_flags: libc::c_int) -> io::Result<NonNull<u8>> {
    // SAFETY: anonymous private mapping with no address hint; the kernel validates everything.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))
}

/// Map `len` bytes: explicit huge pages if asked and available, else normal pages (2 MiB
/// aligned and advised for THP when huge pages were asked for).
fn map_region(
    node: usize,
    len: usize,
    huge: bool,
    os_node: Option<usize>,
    prefault: bool,
) -> Result<(NonNull<u8>, usize, PageKind), ArenaError> {
    let map_err = |len, err| ArenaError::Map { node, len, err };
    // a lazily grown arena reserves no swap up front (its pages are committed as blocks are
    // filled); hugetlb pages keep their reservation so a later fault cannot SIGBUS
    let lazy = if prefault { 0 } else { libc::MAP_NORESERVE };
    if huge && len >= HUGE_PAGE {
        let hlen = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        // With a binding, the pages must come from that node's pool, or the first touch would
        // SIGBUS; check the node's free count first. Unbound: mmap's reservation is enough.
        if free_huge_pages(os_node) >= hlen / HUGE_PAGE {
            match mmap_anon(hlen, libc::MAP_HUGETLB) {
                Ok(p) => return Ok((p, hlen, PageKind::HugeTlb)),
                Err(e) => tracing::debug!("node {node}: MAP_HUGETLB failed ({e}), using THP"),
            }
        }
        // Over-map by one huge page, then trim so the region is 2 MiB aligned (THP needs it).
        let over = hlen + HUGE_PAGE;
        let raw = mmap_anon(over, lazy).map_err(|e| map_err(over, e))?;
        let addr = raw.as_ptr() as usize;
        let aligned = addr.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let head = aligned - addr;
        let tail = over - head - hlen;
        // SAFETY: head and tail lie inside the mapping we just created and are page-aligned
        // (both addr and aligned are page-aligned); nothing references them.
        unsafe {
            if head > 0 {
                libc::munmap(raw.as_ptr().cast(), head);
            }
            if tail > 0 {
                libc::munmap((aligned + hlen) as *mut libc::c_void, tail);
            }
        }
        // SAFETY: aligned is inside the original (non-null) mapping.
        let ptr = unsafe { NonNull::new_unchecked(aligned as *mut u8) };
        // SAFETY: madvise on our own mapping; failure (no THP support) is harmless.
        let rc = unsafe { libc::madvise(ptr.as_ptr().cast(), hlen, libc::MADV_HUGEPAGE) };
        let kind = if rc == 0 {
            PageKind::TransparentHuge
        } else {
            PageKind::Normal
        };
        return Ok((ptr, hlen, kind));
    }
    let ptr = mmap_anon(len, lazy).map_err(|e| map_err(len, e))?;
    Ok((ptr, len, PageKind::Normal))
}

/// `mbind(2)` the region to one OS node.
/// `strict`: fail when a page present cannot follow the policy, moving what can be moved
/// (a new region has none); otherwise only the policy is set.
fn mbind(
    ptr: NonNull<u8>,
    len: usize,
    os_node: usize,
    policy: BindPolicy,
    strict: bool,
) -> io::Result<()> {
    const WORD: usize = libc::c_ulong::BITS as usize;
    let mut mask = [0 as libc::c_ulong; MASK_BITS / WORD];
    mask[os_node / WORD] |= 1 << (os_node % WORD);
    let mode = match policy {
        BindPolicy::Bind => MPOL_BIND,
        BindPolicy::Preferred => MPOL_PREFERRED,
    };
    // SAFETY: SYS_mbind reads `mask` (MASK_BITS bits; the kernel reads maxnode - 1 bits, so we
    // pass MASK_BITS + 1) and changes the policy of our own mapping [ptr, ptr+len).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            ptr.as_ptr(),
            len as libc::c_ulong,
            mode,
            mask.as_ptr(),
            (MASK_BITS + 1) as libc::c_ulong,
            if strict {
                MPOL_MF_STRICT | MPOL_MF_MOVE
            } else {
                0
            },
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The OS node of every base page in `[ptr, ptr + len)`, via `move_pages(2)` with a null node
/// list (which only queries). Entries are node numbers, or a negative errno for a page that
/// is not present (`-ENOENT`) or not mapped (`-EFAULT`). Never dereferences `ptr`.
pub fn placement(ptr: *const u8, len: usize) -> io::Result<Vec<i32>> {
    let page = base_page_size();
    let start = ptr as usize / page * page;
    let end = (ptr as usize).saturating_add(len);
    let count = end.saturating_sub(start).div_ceil(page);
    let pages: Vec<*const libc::c_void> = (0..count)
        .map(|i| (start + i * page) as *const libc::c_void)
        .collect();
    let mut status = vec![0i32; count];
    const CHUNK: usize = 1 << 16;
    let mut done = 0;
    while done < count {
        let n = (count - done).min(CHUNK);
        // SAFETY: `pages[done..done+n]` and `status[done..done+n]` are valid arrays of n
        // entries; a null `nodes` makes move_pages only report placement (no migration).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                0 as libc::c_int,
                n as libc::c_ulong,
                pages.as_ptr().add(done),
                std::ptr::null::<libc::c_int>(),
                status.as_mut_ptr().add(done),
                0 as libc::c_int,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        done += n;
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;

    fn opts(slots: usize, huge: bool) -> ArenaOptions {
        ArenaOptions {
            slot_size: 65536,
            slots,
            huge_pages: huge,
            policy: BindPolicy::Preferred,
            prefault: true,
        }
    }

    #[test]
    fn slots_aligned_and_writable() {
        let t = Topology::split(&[0], 1, 1);
        let a = NodeArena::new(&t.nodes()[0], true, opts(8, false)).unwrap();
        assert_eq!(a.binding(), Binding::SkippedVirtual);
        for i in 0..8 {
            let p = a.slot_ptr(i).unwrap();
            assert_eq!(p.as_ptr() as usize % 4096, 0);
            // SAFETY: test owns the arena; slot i is valid for slot_size bytes.
            unsafe { p.as_ptr().add(65535).write(i as u8) };
        }
        assert!(a.slot_ptr(8).is_none());
        assert_eq!(a.local_fraction().unwrap(), 1.0);
    }

    #[test]
    fn real_node_bound_and_placed() {
        let t = Topology::detect(None);
        if t.is_virtual() {
            return;
        }
        let n = &t.nodes()[0];
        for huge in [false, true] {
            let a = NodeArena::new(n, false, opts(64, huge)).unwrap();
            assert!(matches!(a.binding(), Binding::Bound { .. }));
            let frac = a.local_fraction().unwrap();
            assert!(frac >= 0.99, "only {frac} of pages on node {}", n.os_index);
            if huge {
                assert_eq!(a.base().as_ptr() as usize % HUGE_PAGE, 0);
            }
        }
    }

    #[test]
    fn lazy_arena_grows_on_use() {
        let t = Topology::split(&[0], 1, 1);
        let mut o = opts(64, false);
        o.prefault = false;
        let a = NodeArena::new(&t.nodes()[0], true, o).unwrap();
        assert_eq!(a.resident_bytes().unwrap(), 0);
        assert_eq!(a.local_fraction().unwrap(), 1.0);
        for i in [0, 5] {
            // SAFETY: test owns the arena; slot i is valid for slot_size bytes.
            unsafe { a.slot_ptr(i).unwrap().as_ptr().write(1) };
        }
        let r = a.resident_bytes().unwrap();
        assert!((2 * 4096..64 * 65536).contains(&r), "{r} resident");
        let pre = NodeArena::new(&t.nodes()[0], true, opts(64, false)).unwrap();
        assert_eq!(pre.resident_bytes().unwrap(), 64 * 65536);
    }

    #[test]
    fn placement_of_heap_pages() {
        let v = vec![1u8; 3 * 4096];
        let st = placement(v.as_ptr(), v.len()).unwrap();
        assert!(st.len() >= 3);
        assert!(st.iter().all(|&s| s >= 0));
    }

    #[test]
    fn bad_sizes_rejected() {
        let t = Topology::split(&[0], 1, 1);
        let n = &t.nodes()[0];
        let mut o = opts(1, false);
        o.slot_size = 3000;
        assert!(matches!(
            NodeArena::new(n, true, o),
            Err(ArenaError::SlotSize(_))
        ));
        assert!(matches!(
            NodeArena::new(n, true, opts(0, false)),
            Err(ArenaError::Size { .. })
        ));
        assert!(matches!(
            NodeArena::new(n, true, opts(usize::MAX / 2, false)),
            Err(ArenaError::Size { .. })
        ));
    }
}
