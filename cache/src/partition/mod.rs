//! One cache partition: an independent, fully associative cache over a fixed range of slots
//! of its node's arena, under its own lock (seed 004 §5.2.2).
//!
//! State per partition: a hash map of cached blocks (key → slot), three intrusive lists
//! threaded through the slots' `prev`/`next` indexes (free slots; clean, unpinned, idle
//! blocks in LRU order; dirty blocks waiting for the flusher in FIFO order), and per slot:
//! key, sector validity and dirty bitmaps, pin count, a busy flag (a fill is in flight),
//! a generation (bumped by every write) and a flush token. Nothing allocates per operation:
//! the map is created with room for every slot and the lists are indexes.
//!
//! # Memory rules (why the `unsafe` slot accesses are sound)
//! * A [`BlockRef`] only exposes bytes of sectors that were valid when it was taken. In a
//!   block that is cached (mapped), valid sectors never become invalid, and **valid sectors of
//!   a pinned slot are never written**: a write to a pinned block that touches valid sectors
//!   goes to a fresh slot (copy-on-write) which then replaces the old one in the map; the old
//!   slot stays, detached, until its last pin is dropped.
//! * A [`Fill`] writes only sectors that were invalid when it was created, and while it
//!   exists the block is busy: no other fill and no write may start on it. Readers may still
//!   hit its *valid* sectors.
//! * A slot goes back to the free list only when it is detached, unpinned and not busy.
//! * All metadata changes and all writes done by the cache itself (write-back copies,
//!   copy-on-write copies) happen under the partition lock.
//!
//! So there is never more than one cached (mapped) copy of a block, never two writers of a
//! slot's memory at once, and never a write to memory that a reference can read.
//!
//! Files: this one holds [`Partition`] and its operations; `state` the bookkeeping under the
//! lock, `outcomes` what operations answer, `handles` the references, reservations and
//! dirty ranges given out.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::admission::FrequencySketch;
use crate::arena::NodeArena;
use crate::bits::{self, MAX_WORDS};
use crate::counters::NodeCounters;

/// Identity of a cached block: LUN and block number (byte offset / block size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    pub lun: u32,
    pub block_no: u64,
}

mod handles;
mod outcomes;
mod state;
#[cfg(test)]
mod tests;

pub use handles::*;
pub use outcomes::*;
pub(crate) use state::KeyHashBuilder;
use state::{List, NIL, Slot, State};

/// One partition (see the module documentation).
pub struct Partition {
    index: usize,
    node: usize,
    state: Mutex<State>,
    mem: NonNull<u8>,
    slot_size: usize,
    sector_shift: u32,
    bits: usize,
    slots: u32,
    counters: Arc<NodeCounters>,
    /// The write-back clock (ms, set by the flushers through the block cache): stamps when a
    /// block became dirty, so lazy write-back can leave young dirty blocks to coalesce.
    clock: Arc<AtomicU64>,
    _arena: Arc<NodeArena>,
}

// SAFETY: the slot memory behind `mem` is owned by `_arena` (kept alive by the Arc) and every
// access to it follows the rules in the module documentation, enforced under `state`.
unsafe impl Send for Partition {}
// SAFETY: as above; shared access goes through the lock or through pinned, immutable sectors.
unsafe impl Sync for Partition {}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition")
            .field("index", &self.index)
            .field("node", &self.node)
            .field("slots", &self.slots)
            .finish()
    }
}

/// Counts of one partition's slots by state (for tests and diagnostics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionStats {
    pub slots: usize,
    pub free: usize,
    pub lru: usize,
    pub dirty_queued: usize,
    pub mapped: usize,
    pub pinned: usize,
    pub busy: usize,
    pub detached: usize,
    pub dirty_sectors: usize,
}

impl Partition {
    /// A partition over `slots` slots of `arena`, starting at slot `first`, with
    /// `sector_size`-byte validity granularity. `index` is its global partition number.
    pub fn new(
        index: usize,
        arena: Arc<NodeArena>,
        first: usize,
        slots: usize,
        sector_size: usize,
        counters: Arc<NodeCounters>,
    ) -> Result<Self, PartitionError> {
        let end = first.saturating_add(slots);
        let bad_range = PartitionError::Slots {
            first,
            end,
            have: arena.slots(),
        };
        if slots == 0 || end > arena.slots() || slots >= NIL as usize {
            return Err(bad_range);
        }
        let mem = arena.slot_ptr(first).ok_or(bad_range)?;
        let slot_size = arena.slot_size();
        let bits = slot_size / sector_size.max(1);
        if bits == 0 || bits > MAX_WORDS * 64 || !sector_size.is_power_of_two() {
            return Err(PartitionError::Sectors(bits));
        }
        let words = bits.div_ceil(64);
        let seed = std::hash::RandomState::new().hash_one(index);
        let mut st = State {
            map: HashMap::with_capacity_and_hasher(slots, KeyHashBuilder { seed }),
            slots: vec![Slot::empty(); slots],
            valid: vec![0; slots * words],
            dirty: vec![0; slots * words],
            words,
            head: [NIL; 4],
            tail: [NIL; 4],
            len: [0; 4],
            next_gen: 0,
            freq: FrequencySketch::new(slots),
            counters: Arc::clone(&counters),
        };
        for i in (0..slots as u32).rev() {
            st.push_head(List::Free, i);
        }
        Ok(Partition {
            index,
            node: arena.node(),
            state: Mutex::new(st),
            mem,
            slot_size,
            sector_shift: sector_size.trailing_zeros(),
            bits,
            slots: slots as u32,
            counters,
            clock: Arc::default(),
            _arena: arena,
        })
    }

    /// Use `clock` (milliseconds, advanced by the caller) to stamp blocks as they become
    /// dirty (see [`Partition::collect_dirty_older`]).
    pub fn with_clock(mut self, clock: Arc<AtomicU64>) -> Self {
        self.clock = clock;
        self
    }

    pub fn index(&self) -> usize {
        self.index
    }
    /// Node whose arena holds this partition's blocks.
    pub fn node(&self) -> usize {
        self.node
    }
    pub fn slot_count(&self) -> usize {
        self.slots as usize
    }
    pub fn block_size(&self) -> usize {
        self.slot_size
    }
    fn sector(&self) -> u64 {
        1 << self.sector_shift
    }

    fn slot_mem(&self, i: u32) -> *mut u8 {
        debug_assert!(i < self.slots);
        // SAFETY: i < slots, so the offset stays inside this partition's part of the arena.
        unsafe { self.mem.as_ptr().add(i as usize * self.slot_size) }
    }

    /// Sector range `[lo, hi)` covering bytes `[start, start + len)` of a block.
    fn sectors(&self, start: usize, len: usize) -> (usize, usize) {
        let s = self.sector_shift;
        (start >> s, (start + len).div_ceil(1 << s))
    }

    fn aligned(&self, start: usize, len: usize) -> Option<(usize, usize)> {
        let m = (1usize << self.sector_shift) - 1;
        if len == 0 || start & m != 0 || len & m != 0 || start.checked_add(len)? > self.slot_size {
            return None;
        }
        Some(self.sectors(start, len))
    }

    /// Look up bytes `[start, start + len)` of block `key` for a read. The range must lie in
    /// the block (`BlockSpan` guarantees it); an empty or outside range is treated as the
    /// nearest valid one and never panics.
    pub fn lookup(
        self: &Arc<Self>,
        key: BlockKey,
        start: usize,
        len: usize,
        ra: ReadAhead,
    ) -> Lookup {
        let start = start.min(self.slot_size - 1);
        let len = len.clamp(1, self.slot_size - start);
        let (lo, hi) = self.sectors(start, len);
        let (mut flo, mut fhi) = match ra {
            ReadAhead::None => (lo, hi),
            ReadAhead::WholeBlock => (0, self.bits),
        };
        let c = &self.counters;
        let mut st = self.state.lock();
        let hash = FrequencySketch::key_hash(key.lun, key.block_no);
        st.freq.touch(hash);
        let i = match st.map.get(&key) {
            Some(&i) => {
                if bits::all_set(st.valid_of(i), lo, hi) {
                    st.slots[i as usize].pins += 1;
                    st.settle(i);
                    NodeCounters::add(&c.hits, 1);
                    return Lookup::Hit(self.block_ref(i, key, start, len));
                }
                if st.slots[i as usize].busy {
                    NodeCounters::add(&c.busy, 1);
                    return Lookup::Busy;
                }
                i
            }
            None => {
                // full: the LRU victim stays unless this block is read more often
                let victim = st.tail[List::Lru as usize];
                if st.head[List::Free as usize] == NIL && victim != NIL {
                    let vk = st.slots[victim as usize].key;
                    let v = FrequencySketch::key_hash(vk.lun, vk.block_no);
                    if !st.freq.admit(hash, v) {
                        NodeCounters::add(&c.bypassed, 1);
                        return Lookup::Bypass;
                    }
                    // admitted over a victim: a block read this often is read whole, so
                    // the slot it takes holds as much as the one it displaces
                    (flo, fhi) = (0, self.bits);
                }
                let Some(i) = st.alloc(c) else {
                    NodeCounters::add(&c.no_space, 1);
                    return Lookup::NoSpace;
                };
                st.map_fresh(i, key);
                i
            }
        };
        let mut mask = [0u64; MAX_WORDS];
        bits::set_range(&mut mask, flo, fhi);
        for (m, v) in mask.iter_mut().zip(st.valid_of(i)) {
            *m &= !v;
        }
        st.slots[i as usize].busy = true;
        st.settle(i);
        NodeCounters::add(&c.misses, 1);
        Lookup::Miss(Fill {
            part: Arc::clone(self),
            slot: i,
            key,
            start: start as u32,
            len: len as u32,
            mask,
            done: false,
        })
    }

    fn block_ref(self: &Arc<Self>, slot: u32, key: BlockKey, start: usize, len: usize) -> BlockRef {
        BlockRef {
            part: Arc::clone(self),
            slot,
            key,
            start: start as u32,
            len: len as u32,
        }
    }

    /// Choose where a write of sectors `[lo, hi)` to the mapped slot `i` goes: in place when
    /// no reader can see those bytes, else a fresh copy-on-write slot that replaces `i`.
    fn place_write(&self, st: &mut State, i: u32, lo: usize, hi: usize) -> Option<u32> {
        if st.slots[i as usize].pins == 0 || !bits::any_set(st.valid_of(i), lo, hi) {
            return Some(i);
        }
        let j = st.alloc(&self.counters)?;
        self.move_into(st, i, j, lo, hi);
        Some(j)
    }

    /// Copy-on-write: slot `j` (ours alone: allocated, on no list, unmapped) becomes the
    /// cached copy of mapped slot `i`'s block. `i`'s valid sectors outside `[lo, hi)` (the
    /// ones the write does not cover) are copied over, its bitmaps, dirty state and flush
    /// token move with them, and `i` is detached (freed once unpinned).
    fn move_into(&self, st: &mut State, i: u32, j: u32, lo: usize, hi: usize) {
        let ss = self.sector_shift;
        let mut from = 0;
        while let Some((a, e)) = bits::next_run(st.valid_of(i), from, self.bits) {
            for (pa, pe) in [(a, e.min(lo)), (a.max(hi), e)] {
                if pa < pe {
                    // SAFETY: both ranges are inside their slots; slot i's valid sectors are
                    // not written while it is pinned, slot j is ours alone (allocated, on no
                    // list, unmapped), and the slots differ, so the ranges do not overlap.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            self.slot_mem(i).add(pa << ss),
                            self.slot_mem(j).add(pa << ss),
                            (pe - pa) << ss,
                        );
                    }
                }
            }
            from = e;
        }
        let w = st.words;
        let (iu, ju) = (i as usize * w, j as usize * w);
        st.valid.copy_within(iu..iu + w, ju);
        st.dirty.copy_within(iu..iu + w, ju);
        let old = st.slots[i as usize].clone();
        {
            let s = &mut st.slots[j as usize];
            s.key = old.key;
            s.mapped = true;
            s.valid_n = old.valid_n;
            s.dirty_n = old.dirty_n;
            s.flush_id = old.flush_id;
            s.stale = false;
            s.generation = old.generation;
            s.dirty_since = old.dirty_since;
        }
        // The dirty sectors moved with the data: detach without discarding the count.
        st.slots[i as usize].flush_id = 0;
        st.detach(i, 0);
        if st.map.insert(old.key, j).is_none() {
            NodeCounters::add(&st.counters.cached_blocks, 1);
        }
        st.settle(i);
    }

    /// A fresh slot for write data of block `key`, bytes `[start, start + len)`, that a
    /// device will put there (an RDMA READ) before the write is committed
    /// ([`Landing::commit`]). The slot is unmapped and held (on no list, never handed out
    /// again) until the landing is committed or dropped; the block's cached copy, if any,
    /// stays as it is meanwhile. `None`: the range is not whole sectors of one block, or no
    /// slot can be reused.
    pub fn reserve_landing(
        self: &Arc<Self>,
        key: BlockKey,
        start: usize,
        len: usize,
    ) -> Option<Landing> {
        self.aligned(start, len)?;
        let mut st = self.state.lock();
        let Some(j) = st.alloc(&self.counters) else {
            NodeCounters::add(&self.counters.no_space, 1);
            return None;
        };
        let s = &mut st.slots[j as usize];
        s.key = key;
        s.pins = 1;
        Some(Landing {
            part: Arc::clone(self),
            slot: j,
            key,
            start: start as u32,
            len: len as u32,
            done: false,
        })
    }

    /// Makes a landing's slot the cached copy of its block, its bytes valid and dirty (a
    /// write-back, as [`write_back`](Partition::write_back) would leave them): sectors of
    /// the old copy the landing does not cover are copied over, its dirty state and any
    /// flush in flight move along (that flush cannot mark the new data clean: the
    /// generation changes). Refuses as `write_back` does (`Throttled`, `Busy` for a fill in
    /// flight), changing nothing.
    fn commit_landing(&self, l: &Landing, dirty_limit: u64) -> WriteOutcome {
        let (lo, hi) = self.sectors(l.start as usize, l.len as usize);
        let c = &self.counters;
        let mut st = self.state.lock();
        let j = l.slot;
        let existing = st.map.get(&l.key).copied();
        let newly = match self.admit_write(&st, existing, lo, hi, dirty_limit) {
            Ok(n) => n,
            Err(refused) => return refused,
        };
        match existing {
            Some(i) => self.move_into(&mut st, i, j, lo, hi),
            None => st.map_fresh(j, l.key),
        }
        bits::set_range(st.valid_mut(j), lo, hi);
        st.slots[j as usize].valid_n = bits::count(st.valid_of(j)) as u32;
        let g = st.next_generation();
        if st.slots[j as usize].dirty_n == 0 {
            st.slots[j as usize].dirty_since = self.clock.load(Ordering::Relaxed);
        }
        bits::set_range(st.dirty_mut(j), lo, hi);
        let s = &mut st.slots[j as usize];
        s.generation = g;
        s.pins -= 1;
        st.slots[j as usize].dirty_n = bits::count(st.dirty_of(j)) as u32;
        NodeCounters::add(&c.dirty_bytes, newly);
        st.settle(j);
        WriteOutcome::Written { newly_dirty: newly }
    }

    /// After a landing's bytes were written through to the backing store: when the block is
    /// cached, the landing's slot becomes its cached copy (sectors of the old copy the
    /// landing does not cover are copied over, as [`commit_landing`](Self::commit_landing)
    /// does), the landed sectors valid and clean (they are on disk) — the write data is not
    /// copied. Sectors a flush in flight is writing stay dirty (that flush cannot mark them
    /// clean: the generation changes), as in [`write_through_update`](Self::write_through_update).
    /// `NotCached`: nothing to do (the caller drops the landing). `Busy`: a fill is in flight
    /// (it will not validate what it read); call again. Nothing changed on either.
    fn replace_with_landing(&self, l: &Landing) -> UpdateOutcome {
        let (lo, hi) = self.sectors(l.start as usize, l.len as usize);
        let c = &self.counters;
        let mut st = self.state.lock();
        let j = l.slot;
        let Some(&i) = st.map.get(&l.key) else {
            return UpdateOutcome::NotCached;
        };
        if st.slots[i as usize].busy {
            st.slots[i as usize].stale = true;
            NodeCounters::add(&c.busy, 1);
            return UpdateOutcome::Busy;
        }
        self.move_into(&mut st, i, j, lo, hi);
        bits::set_range(st.valid_mut(j), lo, hi);
        st.slots[j as usize].valid_n = bits::count(st.valid_of(j)) as u32;
        if st.slots[j as usize].flush_id == 0 {
            let cleaned = bits::count_range(st.dirty_of(j), lo, hi);
            bits::clear_range(st.dirty_mut(j), lo, hi);
            st.slots[j as usize].dirty_n -= cleaned as u32;
            NodeCounters::sub(&c.dirty_bytes, cleaned as u64 * self.sector());
        }
        let g = st.next_generation();
        let s = &mut st.slots[j as usize];
        s.generation = g;
        s.pins -= 1;
        st.settle(j);
        UpdateOutcome::Updated
    }

    /// A landing given up: its slot is free again.
    fn release_landing(&self, slot: u32) {
        let mut st = self.state.lock();
        let s = &mut st.slots[slot as usize];
        s.pins = s.pins.saturating_sub(1);
        st.settle(slot);
    }

    /// Copy `data` into sectors `[lo, hi)` of slot `t` and mark them valid.
    fn copy_in(&self, st: &mut State, t: u32, start: usize, data: &[u8], lo: usize, hi: usize) {
        // SAFETY: `start + data.len() <= slot_size` (checked by `aligned`). Slot `t` is either
        // unpinned (no reader) or the sectors [lo, hi) are invalid in it (no reader covers
        // them); it is not busy (no fill writes it); we hold the lock (no other cache write).
        // `data` cannot overlap those bytes: no safe reference to them exists.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.slot_mem(t).add(start), data.len());
        }
        bits::set_range(st.valid_mut(t), lo, hi);
        st.slots[t as usize].valid_n = bits::count(st.valid_of(t)) as u32;
        let g = st.next_generation();
        st.slots[t as usize].generation = g;
    }

    /// Whether a write-back of sectors `[lo, hi)` of a block (mapped in slot `existing`, if
    /// cached) may go ahead: the bytes it newly makes dirty, or the refusal — `Busy` while
    /// a fill is in flight, `Throttled` when the node's dirty bytes would pass `dirty_limit`.
    fn admit_write(
        &self,
        st: &State,
        existing: Option<u32>,
        lo: usize,
        hi: usize,
        dirty_limit: u64,
    ) -> Result<u64, WriteOutcome> {
        let c = &self.counters;
        let newly = match existing {
            Some(i) if st.slots[i as usize].busy => {
                NodeCounters::add(&c.busy, 1);
                return Err(WriteOutcome::Busy);
            }
            Some(i) => (hi - lo - bits::count_range(st.dirty_of(i), lo, hi)) as u64,
            None => (hi - lo) as u64,
        } * self.sector();
        if newly > 0 && c.dirty_bytes.load(Ordering::Relaxed).saturating_add(newly) > dirty_limit {
            NodeCounters::add(&c.throttled, 1);
            return Err(WriteOutcome::Throttled);
        }
        Ok(newly)
    }

    /// Write-back: copy `data` into bytes `[start, ..)` of block `key` (allocating the block
    /// if absent) and mark those sectors valid and dirty. `start` and `data.len()` must be
    /// whole sectors. Refuses with `Throttled` when the node's dirty bytes would pass
    /// `dirty_limit`.
    pub fn write_back(
        &self,
        key: BlockKey,
        start: usize,
        data: &[u8],
        dirty_limit: u64,
    ) -> WriteOutcome {
        let Some((lo, hi)) = self.aligned(start, data.len()) else {
            return WriteOutcome::Unaligned;
        };
        let c = &self.counters;
        let mut st = self.state.lock();
        let existing = st.map.get(&key).copied();
        let newly = match self.admit_write(&st, existing, lo, hi, dirty_limit) {
            Ok(n) => n,
            Err(refused) => return refused,
        };
        let t = match existing {
            Some(i) => self.place_write(&mut st, i, lo, hi),
            None => {
                let j = st.alloc(c);
                if let Some(j) = j {
                    st.map_fresh(j, key);
                }
                j
            }
        };
        let Some(t) = t else {
            NodeCounters::add(&c.no_space, 1);
            return WriteOutcome::NoSpace;
        };
        self.copy_in(&mut st, t, start, data, lo, hi);
        if st.slots[t as usize].dirty_n == 0 {
            st.slots[t as usize].dirty_since = self.clock.load(Ordering::Relaxed);
        }
        bits::set_range(st.dirty_mut(t), lo, hi);
        st.slots[t as usize].dirty_n = bits::count(st.dirty_of(t)) as u32;
        NodeCounters::add(&c.dirty_bytes, newly);
        st.settle(t);
        WriteOutcome::Written { newly_dirty: newly }
    }

    /// Write-through: the caller has written `data` at bytes `[start, ..)` of block `key` to
    /// the backing store; bring the cached copy (if any) up to date. Never allocates.
    /// Sectors written are marked clean unless a flush of the block is in flight (then they
    /// stay dirty, and the flusher's `mark_clean` fails, so the new data is written again).
    pub fn write_through_update(&self, key: BlockKey, start: usize, data: &[u8]) -> UpdateOutcome {
        let Some((lo, hi)) = self.aligned(start, data.len()) else {
            return UpdateOutcome::Unaligned;
        };
        let c = &self.counters;
        let mut st = self.state.lock();
        let Some(&i) = st.map.get(&key) else {
            return UpdateOutcome::NotCached;
        };
        if st.slots[i as usize].busy {
            st.slots[i as usize].stale = true;
            NodeCounters::add(&c.busy, 1);
            return UpdateOutcome::Busy;
        }
        let Some(t) = self.place_write(&mut st, i, lo, hi) else {
            if st.slots[i as usize].dirty_n == 0 {
                st.detach(i, 0);
                st.settle(i);
                return UpdateOutcome::Dropped;
            }
            NodeCounters::add(&c.no_space, 1);
            return UpdateOutcome::NoSpace;
        };
        self.copy_in(&mut st, t, start, data, lo, hi);
        if st.slots[t as usize].flush_id == 0 {
            let cleaned = bits::count_range(st.dirty_of(t), lo, hi);
            bits::clear_range(st.dirty_mut(t), lo, hi);
            st.slots[t as usize].dirty_n -= cleaned as u32;
            NodeCounters::sub(&c.dirty_bytes, cleaned as u64 * self.sector());
        }
        st.settle(t);
        UpdateOutcome::Updated
    }

    fn take_dirty(self: &Arc<Self>, st: &mut State, i: u32) -> DirtyRange {
        let id = st.next_generation();
        let mask = bits::flush_mask(st.valid_of(i), st.dirty_of(i), self.bits);
        let s = &mut st.slots[i as usize];
        s.flush_id = id;
        s.pins += 1;
        let (key, generation) = (s.key, s.generation);
        st.settle(i);
        DirtyRange {
            part: Arc::clone(self),
            slot: i,
            key,
            generation,
            flush_id: id,
            mask,
            done: false,
        }
    }

    /// Take up to `max` dirty blocks (oldest first) for writing back, appending to `out`.
    /// Each is pinned and marked as being flushed until its [`DirtyRange`] is completed or
    /// dropped. Returns how many were added.
    pub fn collect_dirty(self: &Arc<Self>, max: usize, out: &mut Vec<DirtyRange>) -> usize {
        self.collect_dirty_older(max, out, u64::MAX)
    }

    /// Like [`Partition::collect_dirty`], but only blocks that became dirty at clock time
    /// `cutoff` or earlier (the dirty list is in the order blocks became dirty, so the
    /// first younger one ends the walk).
    pub fn collect_dirty_older(
        self: &Arc<Self>,
        max: usize,
        out: &mut Vec<DirtyRange>,
        cutoff: u64,
    ) -> usize {
        let mut st = self.state.lock();
        let mut n = 0;
        while n < max {
            let i = st.head[List::Dirty as usize];
            if i == NIL || st.slots[i as usize].dirty_since > cutoff {
                break;
            }
            out.push(self.take_dirty(&mut st, i));
            n += 1;
        }
        n
    }

    /// The dirty sectors of one block, for SYNCHRONIZE CACHE / FUA.
    pub fn dirty_of(self: &Arc<Self>, key: BlockKey) -> DirtyProbe {
        let mut st = self.state.lock();
        let Some(&i) = st.map.get(&key) else {
            return DirtyProbe::Clean;
        };
        let s = &st.slots[i as usize];
        if s.dirty_n == 0 {
            DirtyProbe::Clean
        } else if s.flush_id != 0 {
            DirtyProbe::InFlight
        } else {
            DirtyProbe::Taken(self.take_dirty(&mut st, i))
        }
    }

    /// Whether the block holds dirty sectors (being written back or not); takes nothing.
    pub fn is_dirty(&self, key: BlockKey) -> bool {
        let st = self.state.lock();
        st.map
            .get(&key)
            .is_some_and(|&i| st.slots[i as usize].dirty_n > 0)
    }

    /// Keys of the dirty blocks of `lun` with block numbers in `first..=last` (appended).
    pub fn dirty_keys(&self, lun: u32, first: u64, last: u64, out: &mut Vec<BlockKey>) {
        let st = self.state.lock();
        out.extend(
            st.slots
                .iter()
                .filter(|s| {
                    s.mapped
                        && s.dirty_n > 0
                        && s.key.lun == lun
                        && (first..=last).contains(&s.key.block_no)
                })
                .map(|s| s.key),
        );
    }

    fn finish_flush(&self, r: &DirtyRange, written: bool) -> bool {
        let c = &self.counters;
        let mut st = self.state.lock();
        let i = r.slot;
        let mut cleaned = false;
        {
            let s = &st.slots[i as usize];
            if written && s.mapped && s.generation == r.generation && s.flush_id == r.flush_id {
                let d = s.dirty_n as u64 * self.sector();

                st.dirty_mut(i).fill(0);
                st.slots[i as usize].dirty_n = 0;
                NodeCounters::sub(&c.dirty_bytes, d);
                cleaned = true;
            }
        }
        // Copy-on-write moves the flush token to the block's new slot: release it there.
        if let Some(&j) = st.map.get(&r.key) {
            if st.slots[j as usize].flush_id == r.flush_id {
                st.slots[j as usize].flush_id = 0;
                st.settle(j);
            }
        }
        if st.slots[i as usize].flush_id == r.flush_id {
            st.slots[i as usize].flush_id = 0;
        }
        let s = &mut st.slots[i as usize];
        s.pins = s.pins.saturating_sub(1);
        st.settle(i);
        cleaned
    }

    /// Drop every cached block of `lun`. Dirty data is discarded (flush first when it must
    /// survive). Pinned blocks are detached now and reused only once unpinned; an in-flight
    /// fill is told not to validate what it read. Returns the number of blocks dropped.
    pub fn invalidate_lun(&self, lun: u32) -> usize {
        let c = &self.counters;
        let mut st = self.state.lock();
        let mut n = 0;
        for i in 0..self.slots {
            let s = &st.slots[i as usize];
            if s.mapped && s.key.lun == lun {
                if s.busy {
                    st.slots[i as usize].stale = true;
                }
                let d = st.detach(i, self.sector());
                NodeCounters::sub(&c.dirty_bytes, d);
                st.settle(i);
                n += 1;
            }
        }
        n
    }

    fn unpin(&self, i: u32) {
        let mut st = self.state.lock();
        let s = &mut st.slots[i as usize];
        s.pins = s.pins.saturating_sub(1);
        st.settle(i);
    }

    fn pin(&self, i: u32) {
        let mut st = self.state.lock();
        st.slots[i as usize].pins += 1;
        st.settle(i);
    }

    fn end_fill(&self, f: &Fill, validate: bool) -> bool {
        let mut st = self.state.lock();
        let i = f.slot;
        let s = &mut st.slots[i as usize];
        s.busy = false;
        let ok = validate && s.mapped && !s.stale;
        s.stale = false;
        if ok {
            for (v, m) in st.valid_mut(i).iter_mut().zip(f.mask.iter()) {
                *v |= m;
            }
            st.slots[i as usize].valid_n = bits::count(st.valid_of(i)) as u32;
            st.slots[i as usize].pins += 1;
        } else if st.slots[i as usize].mapped && st.slots[i as usize].valid_n == 0 {
            st.detach(i, 0);
        }
        st.settle(i);
        ok
    }

    /// Slot-state counts, for tests and diagnostics.
    /// Blocks waiting on the dirty list and the partition's slot count: a cheap look (no
    /// walk over the slots) for a flusher deciding whether to hurry.
    pub fn dirty_queued(&self) -> (usize, usize) {
        let st = self.state.lock();
        (st.len[List::Dirty as usize] as usize, self.slots as usize)
    }

    pub fn stats(&self) -> PartitionStats {
        let st = self.state.lock();
        let mut p = PartitionStats {
            slots: self.slots as usize,
            free: st.len[List::Free as usize] as usize,
            lru: st.len[List::Lru as usize] as usize,
            dirty_queued: st.len[List::Dirty as usize] as usize,
            ..Default::default()
        };
        for s in &st.slots {
            p.mapped += s.mapped as usize;
            p.pinned += (s.pins > 0) as usize;
            p.busy += s.busy as usize;
            p.detached += (!s.mapped && (s.pins > 0 || s.busy)) as usize;
            p.dirty_sectors += s.dirty_n as usize;
        }
        p
    }

    /// The cached keys from least to most recently used among clean, idle blocks.
    pub fn lru_order(&self) -> Vec<BlockKey> {
        let st = self.state.lock();
        let mut v = Vec::new();
        let mut i = st.tail[List::Lru as usize];
        while i != NIL {
            v.push(st.slots[i as usize].key);
            i = st.slots[i as usize].prev;
        }
        v
    }

    /// The clean, idle blocks, most recently used first, with their slots and, for a block
    /// cached in part, its valid sectors (`None`: every sector): what a live upgrade's next
    /// executable adopts, where its memory is kept, or reads again.
    pub fn clean_blocks(&self) -> Vec<(BlockKey, u32, Option<Vec<u64>>)> {
        let st = self.state.lock();
        let mut v = Vec::with_capacity(st.len[List::Lru as usize] as usize);
        let mut i = st.head[List::Lru as usize];
        while i != NIL {
            let s = &st.slots[i as usize];
            let part = (s.valid_n as usize != self.bits).then(|| st.valid_of(i).to_vec());
            v.push((s.key, i, part));
            i = s.next;
        }
        v
    }

    /// Makes free slot `slot`, whose memory already holds block `key` (kept from the
    /// previous executable, after its write-back), the cached copy of `key`: the sectors of
    /// `valid` (`None`: every sector) valid and clean, at the most recently used end (adopt
    /// coldest first). False when the slot is out of range or not free, `key` is cached
    /// already, or `valid` is not a bitmap of this partition's sectors with one set: nothing
    /// changed.
    pub fn adopt(&self, key: BlockKey, slot: u32, valid: Option<&[u64]>) -> bool {
        if slot >= self.slots {
            return false;
        }
        let mut st = self.state.lock();
        let words = st.words;
        if let Some(v) = valid {
            let beyond =
                self.bits % 64 != 0 && v.last().is_some_and(|w| w >> (self.bits % 64) != 0);
            if v.len() != words || beyond || bits::count(v) == 0 {
                return false;
            }
        }
        if st.slots[slot as usize].list != List::Free || st.map.contains_key(&key) {
            return false;
        }
        st.unlink(slot);
        st.map_fresh(slot, key);
        let n = match valid {
            Some(v) => {
                st.valid_mut(slot).copy_from_slice(v);
                bits::count(v)
            }
            None => {
                bits::set_range(st.valid_mut(slot), 0, self.bits);
                self.bits
            }
        };
        st.slots[slot as usize].valid_n = n as u32;
        st.settle(slot);
        true
    }

    /// Check every structural invariant; `Err` describes the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        let st = self.state.lock();
        for (k, &i) in &st.map {
            let s = st
                .slots
                .get(i as usize)
                .ok_or("map points past the slots")?;
            if !s.mapped || s.key != *k {
                return Err(format!("map entry {k:?} -> slot {i} which is not its copy"));
            }
        }
        let mapped = st.slots.iter().filter(|s| s.mapped).count();
        if mapped != st.map.len() {
            return Err(format!(
                "{mapped} mapped slots but {} map entries (two copies of a block?)",
                st.map.len()
            ));
        }
        let mut counts = [0u32; 4];
        for l in [List::Free, List::Lru, List::Dirty] {
            let mut i = st.head[l as usize];
            let mut prev = NIL;
            while i != NIL {
                let s = &st.slots[i as usize];
                if s.list != l || s.prev != prev {
                    return Err(format!("slot {i} badly linked in {l:?}"));
                }
                counts[l as usize] += 1;
                if counts[l as usize] > self.slots {
                    return Err(format!("cycle in {l:?}"));
                }
                prev = i;
                i = s.next;
            }
            if st.tail[l as usize] != prev || st.len[l as usize] != counts[l as usize] {
                return Err(format!("{l:?} tail or length wrong"));
            }
        }
        for (i, s) in st.slots.iter().enumerate() {
            let i = i as u32;
            if s.list != s.desired_list() {
                return Err(format!(
                    "slot {i} on {:?}, should be {:?}: {s:?}",
                    s.list,
                    s.desired_list()
                ));
            }
            if s.valid_n as usize != bits::count(st.valid_of(i))
                || s.dirty_n as usize != bits::count(st.dirty_of(i))
            {
                return Err(format!("slot {i} counts disagree with bitmaps"));
            }
            if st
                .dirty_of(i)
                .iter()
                .zip(st.valid_of(i))
                .any(|(d, v)| d & !v != 0)
            {
                return Err(format!("slot {i} has dirty sectors that are not valid"));
            }
            if s.mapped && !s.busy && s.valid_n == 0 {
                return Err(format!("slot {i} cached with no valid sector"));
            }
            if !s.mapped && s.dirty_n != 0 {
                return Err(format!("detached slot {i} still counted dirty"));
            }
        }
        Ok(())
    }

    /// Dirty sectors currently counted in this partition.
    pub fn dirty_sectors(&self) -> usize {
        let st = self.state.lock();
        st.slots.iter().map(|s| s.dirty_n as usize).sum()
    }
}
