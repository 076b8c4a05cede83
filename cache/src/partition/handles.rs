//! The handles the partition gives out: pinned block references ([`BlockRef`]), fill
//! reservations ([`Fill`]) and dirty ranges being written back ([`DirtyRange`]); dropping one
//! gives its pin or reservation back.

use crate::counters::NodeCounters;
use std::marker::PhantomData;
use std::sync::Arc;

use super::{BlockKey, Partition, UpdateOutcome, WriteOutcome};
use crate::bits::{self, Mask};

/// Outcome of asking for one block's dirty sectors.
#[must_use]
#[expect(
    clippy::large_enum_variant,
    reason = "a Fill/DirtyRange carries its sector mask inline; boxing would allocate per miss"
)]
pub enum DirtyProbe {
    /// Nothing dirty.
    Clean,
    /// A flush of this block is in flight: wait for it, then ask again.
    InFlight,
    /// The dirty sectors, pinned, to write back.
    Taken(DirtyRange),
}

/// A pinned reference to the bytes of one cached block that were valid when it was taken.
/// Those bytes never change while any reference exists; `Clone` pins again, `Drop` unpins.
/// Holding it keeps the block's slot from being evicted or reused, whatever else happens
/// (LUN invalidation, overwrites: later writes go to a new copy).
pub struct BlockRef {
    pub(super) part: Arc<Partition>,
    pub(super) slot: u32,
    pub(super) key: BlockKey,
    pub(super) start: u32,
    pub(super) len: u32,
}

impl BlockRef {
    /// The referenced bytes (in the block's home node memory): send them as they are.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the slot is pinned by this reference, so it is not reused; the bytes lie in
        // sectors valid when the pin was taken, which are not written while pinned (module
        // docs); the arena outlives the partition we hold an Arc to.
        unsafe {
            std::slice::from_raw_parts(
                self.part.slot_mem(self.slot).add(self.start as usize),
                self.len as usize,
            )
        }
    }
    pub fn key(&self) -> BlockKey {
        self.key
    }
    /// Byte offset of [`bytes`](Self::bytes) inside the block.
    pub fn start(&self) -> usize {
        self.start as usize
    }
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Home node of the block (whose memory holds the bytes).
    pub fn node(&self) -> usize {
        self.part.node
    }
    /// Global index of the block's partition.
    pub fn partition(&self) -> usize {
        self.part.index
    }
}

impl Clone for BlockRef {
    fn clone(&self) -> Self {
        self.part.pin(self.slot);
        BlockRef {
            part: Arc::clone(&self.part),
            slot: self.slot,
            key: self.key,
            start: self.start,
            len: self.len,
        }
    }
}

impl Drop for BlockRef {
    fn drop(&mut self) {
        self.part.unpin(self.slot);
    }
}

impl std::fmt::Debug for BlockRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockRef")
            .field("key", &self.key)
            .field("start", &self.start)
            .field("len", &self.len)
            .field("node", &self.part.node)
            .finish()
    }
}

/// A reserved miss: the caller reads the missing sectors from the backing store straight
/// into the block's slot (home-node memory, 4096-aligned slot, sector-aligned runs: fit for
/// O_DIRECT), then calls [`complete`](Fill::complete) — or [`abort`](Fill::abort) on an
/// I/O error. Dropping it aborts. `Send`, so it can travel to a node's I/O worker.
pub struct Fill {
    pub(super) part: Arc<Partition>,
    pub(super) slot: u32,
    pub(super) key: BlockKey,
    pub(super) start: u32,
    pub(super) len: u32,
    pub(super) mask: Mask,
    pub(super) done: bool,
}

/// One contiguous run of missing sectors: read `buf.len()` bytes at byte `disk_offset` of the
/// LUN into `buf`.
#[derive(Debug)]
pub struct FillRun<'a> {
    pub disk_offset: u64,
    pub buf: &'a mut [u8],
}

/// Iterator over a fill's runs ([`Fill::runs_mut`]).
pub struct FillRuns<'a> {
    pub(super) mask: &'a Mask,
    pub(super) bits: usize,
    pub(super) next: usize,
    pub(super) base: *mut u8,
    pub(super) block_offset: u64,
    pub(super) sector_shift: u32,
    pub(super) _buf: PhantomData<&'a mut [u8]>,
}

impl<'a> Iterator for FillRuns<'a> {
    type Item = FillRun<'a>;

    fn next(&mut self) -> Option<FillRun<'a>> {
        let (a, e) = bits::next_run(self.mask, self.next, self.bits)?;
        self.next = e;
        let ss = self.sector_shift;
        // SAFETY: [a, e) lies inside the slot; the runs of one mask are disjoint, so the
        // slices handed out never overlap; the sectors were invalid when the fill was created
        // and the block is busy, so no reference reads them and nobody else writes them; the
        // iterator borrows the Fill mutably, so these slices cannot outlive it.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.base.add(a << ss), (e - a) << ss) };
        Some(FillRun {
            disk_offset: self.block_offset.wrapping_add((a as u64) << ss),
            buf,
        })
    }
}

impl Fill {
    /// The runs of missing sectors, each with its backing-store offset and its buffer.
    pub fn runs_mut(&mut self) -> FillRuns<'_> {
        let p = &self.part;
        FillRuns {
            mask: &self.mask,
            bits: p.bits,
            next: 0,
            base: p.slot_mem(self.slot),
            block_offset: self.key.block_no.wrapping_mul(p.slot_size as u64),
            sector_shift: p.sector_shift,
            _buf: PhantomData,
        }
    }

    /// Bytes this fill will read.
    pub fn missing_bytes(&self) -> usize {
        bits::count(&self.mask) << self.part.sector_shift
    }
    pub fn key(&self) -> BlockKey {
        self.key
    }
    /// Home node of the block: run the read on this node's I/O workers.
    pub fn node(&self) -> usize {
        self.part.node
    }

    /// The runs were read: mark exactly those sectors valid and return the requested bytes,
    /// pinned. `Err(FillRaced)` when the block was invalidated or overwritten on disk while
    /// the read was in flight: nothing was validated; look the block up again.
    pub fn complete(mut self) -> Result<BlockRef, FillRaced> {
        self.done = true;
        if self.part.end_fill(&self, true) {
            Ok(self
                .part
                .block_ref(self.slot, self.key, self.start as usize, self.len as usize))
        } else {
            Err(FillRaced)
        }
    }

    /// The read failed: release the reservation (a fresh slot is freed).
    pub fn abort(mut self) {
        self.done = true;
        self.part.end_fill(&self, false);
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        if !self.done {
            self.part.end_fill(self, false);
        }
    }
}

impl std::fmt::Debug for Fill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fill")
            .field("key", &self.key)
            .field("missing_bytes", &self.missing_bytes())
            .field("node", &self.part.node)
            .finish()
    }
}

// SAFETY: a Fill owns exclusive write access to its runs (see FillRuns) and an Arc to the
// partition; nothing in it is tied to the creating thread.
unsafe impl Send for Fill {}

/// The fill's block was invalidated or overwritten on disk during the read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the block changed while it was being read; look it up again")]
pub struct FillRaced;

/// Dirty sectors of one block, pinned, for a flusher or SYNCHRONIZE CACHE: write each run to
/// the backing store, then pass it to `mark_clean` (or [`DirtyRange::mark_clean`]). Dropping
/// it without marking (I/O error) leaves the block dirty and queued for the next flush.
/// While it exists no other flush of this block is handed out.
pub struct DirtyRange {
    pub(super) part: Arc<Partition>,
    pub(super) slot: u32,
    pub(super) key: BlockKey,
    pub(super) generation: u64,
    pub(super) flush_id: u64,
    pub(super) mask: Mask,
    pub(super) done: bool,
}

impl DirtyRange {
    pub fn key(&self) -> BlockKey {
        self.key
    }
    /// Generation of the block when collected; cleaning succeeds only if it is unchanged.
    pub fn generation(&self) -> u64 {
        self.generation
    }
    /// Home node of the block (run the write on its I/O workers).
    pub fn node(&self) -> usize {
        self.part.node
    }
    /// Bytes to write.
    pub fn bytes(&self) -> usize {
        bits::count(&self.mask) << self.part.sector_shift
    }

    /// The runs to write: (backing-store byte offset, bytes). Runs are sector-aligned and
    /// cover every dirty sector (plus clean valid sectors between dirty ones).
    pub fn runs(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        let p = &self.part;
        let ss = p.sector_shift;
        let block_offset = self.key.block_no.wrapping_mul(p.slot_size as u64);
        let base = p.slot_mem(self.slot);
        let mut from = 0;
        std::iter::from_fn(move || {
            let (a, e) = bits::next_run(&self.mask, from, p.bits)?;
            from = e;
            // SAFETY: the run lies in the slot, covers only valid sectors, and the slot is
            // pinned by this range, so those bytes are not written while it lives.
            let s = unsafe { std::slice::from_raw_parts(base.add(a << ss), (e - a) << ss) };
            Some((block_offset.wrapping_add((a as u64) << ss), s))
        })
    }

    /// The runs are on stable storage: clear the block's dirty state unless it was written
    /// again since collection (newer generation). Returns whether it was cleaned.
    pub fn mark_clean(mut self) -> bool {
        self.done = true;
        NodeCounters::add(&self.part.counters.writeback_bytes, self.bytes() as u64);
        self.part.finish_flush(&self, true)
    }
}

impl Drop for DirtyRange {
    fn drop(&mut self) {
        if !self.done {
            self.part.finish_flush(self, false);
        }
    }
}

impl std::fmt::Debug for DirtyRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirtyRange")
            .field("key", &self.key)
            .field("generation", &self.generation)
            .field("bytes", &self.bytes())
            .finish()
    }
}

/// A fresh slot reserved for one block's write data that a device puts there (an RDMA
/// READ from the initiator) before the write is committed: the data lands where the cache
/// will keep it, with no copy. Bytes `[start, start + len)` of the block. Until
/// [`commit`](Landing::commit) nothing sees the slot: readers and flushers keep using the
/// block's cached copy, if any. Dropping it frees the slot — only once no device write
/// into it can be in flight any more (the owner of the DMA keeps it until then). `Send`.
pub struct Landing {
    pub(super) part: Arc<Partition>,
    pub(super) slot: u32,
    pub(super) key: BlockKey,
    pub(super) start: u32,
    pub(super) len: u32,
    pub(super) done: bool,
}

impl Landing {
    pub fn key(&self) -> BlockKey {
        self.key
    }
    /// Where the bytes begin in the block.
    pub fn start(&self) -> usize {
        self.start as usize
    }
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Home node of the block (whose memory holds the slot).
    pub fn node(&self) -> usize {
        self.part.node
    }

    /// The address of the landing bytes, for a device to write them (`len()` bytes, in
    /// the node arena, so inside its memory registration).
    pub fn dma_addr(&self) -> usize {
        self.part.slot_mem(self.slot) as usize + self.start as usize
    }

    /// Copies `data` into the landing at byte `at` (from its start); false when it does not
    /// fit (nothing copied).
    pub fn fill(&mut self, at: usize, data: &[u8]) -> bool {
        if at
            .checked_add(data.len())
            .is_none_or(|e| e > self.len as usize)
        {
            return false;
        }
        // SAFETY: the range lies inside the landing's bytes (checked above), which lie inside
        // the slot; the slot is reserved for this landing alone (no reference reads it, no
        // other writer), and `&mut self` rules out another copy through it at once.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.part
                    .slot_mem(self.slot)
                    .add((self.start as usize) + at),
                data.len(),
            );
        }
        true
    }

    /// The landing bytes (to copy them elsewhere when the write does not go through the
    /// cache after all).
    ///
    /// # Safety
    /// No device write into the landing may be in flight (its DMA completed or was
    /// flushed): the bytes are read as they are.
    pub unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: the range lies inside the slot, which only this landing uses; the caller
        // guarantees no device writes it meanwhile, and `fill` needs `&mut self`.
        unsafe {
            std::slice::from_raw_parts(
                self.part.slot_mem(self.slot).add(self.start as usize),
                self.len as usize,
            )
        }
    }

    /// Makes the landing the block's cached copy, its bytes valid and dirty, as a
    /// write-back of them would ([`Partition::write_back`]). On `Err` nothing changed and
    /// the landing is handed back (the outcome says why: `Throttled`, `Busy`).
    ///
    /// The caller must own the data: every device write into the landing has completed.
    pub fn commit(mut self, dirty_limit: u64) -> Result<u64, (Landing, WriteOutcome)> {
        match self.part.commit_landing(&self, dirty_limit) {
            WriteOutcome::Written { newly_dirty } => {
                self.done = true;
                Ok(newly_dirty)
            }
            refused => Err((self, refused)),
        }
    }
}

impl Landing {
    /// After its bytes were written through to the backing store: becomes the block's cached
    /// copy, clean, if the block is cached ([`Partition::replace_with_landing`]: no copy of
    /// the write data). On `Err` nothing changed and the landing is handed back: `NotCached`
    /// (drop it), `Busy` (a fill in flight: try again).
    ///
    /// The write must have completed, and every device write into the landing.
    pub fn replace(mut self) -> Result<(), (Landing, UpdateOutcome)> {
        match self.part.replace_with_landing(&self) {
            UpdateOutcome::Updated => {
                self.done = true;
                Ok(())
            }
            other => Err((self, other)),
        }
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if !self.done {
            self.part.release_landing(self.slot);
        }
    }
}

impl std::fmt::Debug for Landing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Landing")
            .field("key", &self.key)
            .field("start", &self.start)
            .field("len", &self.len)
            .field("node", &self.part.node)
            .finish()
    }
}

// SAFETY: a Landing owns its reserved slot alone and an Arc to the partition; nothing in it
// is tied to the creating thread.
unsafe impl Send for Landing {}
