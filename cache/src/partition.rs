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

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::admission::FrequencySketch;
use crate::arena::NodeArena;
use crate::bits::{self, MAX_WORDS, Mask};
use crate::counters::NodeCounters;

/// Identity of a cached block: LUN and block number (byte offset / block size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    pub lun: u32,
    pub block_no: u64,
}

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum List {
    None = 0,
    Free = 1,
    Lru = 2,
    Dirty = 3,
}

#[derive(Clone, Debug)]
struct Slot {
    key: BlockKey,
    generation: u64,
    /// Non-zero while a flush of this block's dirty sectors is in flight (its token).
    flush_id: u64,
    prev: u32,
    next: u32,
    pins: u32,
    valid_n: u32,
    dirty_n: u32,
    list: List,
    /// In the map (the cached copy of `key`); false when free or detached.
    mapped: bool,
    /// A fill is in flight.
    busy: bool,
    /// The in-flight fill must not validate what it read (the block was invalidated or
    /// overwritten on disk meanwhile).
    stale: bool,
    /// The write-back clock (ms) when the block last went from clean to dirty.
    dirty_since: u64,
}

impl Slot {
    fn empty() -> Self {
        Slot {
            key: BlockKey {
                lun: 0,
                block_no: 0,
            },
            generation: 0,
            dirty_since: 0,
            flush_id: 0,
            prev: NIL,
            next: NIL,
            pins: 0,
            valid_n: 0,
            dirty_n: 0,
            list: List::None,
            mapped: false,
            busy: false,
            stale: false,
        }
    }

    fn desired_list(&self) -> List {
        if !self.mapped {
            if self.pins == 0 && !self.busy {
                List::Free
            } else {
                List::None
            }
        } else if self.dirty_n > 0 {
            if self.flush_id == 0 {
                List::Dirty
            } else {
                List::None
            }
        } else if self.pins == 0 && !self.busy {
            List::Lru
        } else {
            List::None
        }
    }
}

/// Seeded hasher for block keys (multiply-rotate mixing, murmur3 finaliser).
#[derive(Clone)]
pub(crate) struct KeyHashBuilder {
    seed: u64,
}

pub(crate) struct KeyHasher {
    h: u64,
}

impl BuildHasher for KeyHashBuilder {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher { h: self.seed }
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.h = (self.h ^ v)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
    fn finish(&self) -> u64 {
        let mut h = self.h;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

struct State {
    map: HashMap<BlockKey, u32, KeyHashBuilder>,
    slots: Vec<Slot>,
    valid: Vec<u64>,
    dirty: Vec<u64>,
    words: usize,
    head: [u32; 4],
    tail: [u32; 4],
    len: [u32; 4],
    next_gen: u64,
    /// Recent read frequency of blocks, for admission when the partition is full.
    freq: FrequencySketch,
}

impl State {
    fn valid_of(&self, i: u32) -> &[u64] {
        let w = self.words;
        &self.valid[i as usize * w..(i as usize + 1) * w]
    }
    fn dirty_of(&self, i: u32) -> &[u64] {
        let w = self.words;
        &self.dirty[i as usize * w..(i as usize + 1) * w]
    }
    fn valid_mut(&mut self, i: u32) -> &mut [u64] {
        let w = self.words;
        &mut self.valid[i as usize * w..(i as usize + 1) * w]
    }
    fn dirty_mut(&mut self, i: u32) -> &mut [u64] {
        let w = self.words;
        &mut self.dirty[i as usize * w..(i as usize + 1) * w]
    }
    fn next_generation(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    fn unlink(&mut self, i: u32) {
        let l = self.slots[i as usize].list;
        if l == List::None {
            return;
        }
        let (p, n) = (self.slots[i as usize].prev, self.slots[i as usize].next);
        if p == NIL {
            self.head[l as usize] = n;
        } else {
            self.slots[p as usize].next = n;
        }
        if n == NIL {
            self.tail[l as usize] = p;
        } else {
            self.slots[n as usize].prev = p;
        }
        let s = &mut self.slots[i as usize];
        s.prev = NIL;
        s.next = NIL;
        s.list = List::None;
        self.len[l as usize] -= 1;
    }

    fn push_head(&mut self, l: List, i: u32) {
        let h = self.head[l as usize];
        {
            let s = &mut self.slots[i as usize];
            s.prev = NIL;
            s.next = h;
            s.list = l;
        }
        if h == NIL {
            self.tail[l as usize] = i;
        } else {
            self.slots[h as usize].prev = i;
        }
        self.head[l as usize] = i;
        self.len[l as usize] += 1;
    }

    fn push_tail(&mut self, l: List, i: u32) {
        let t = self.tail[l as usize];
        {
            let s = &mut self.slots[i as usize];
            s.prev = t;
            s.next = NIL;
            s.list = l;
        }
        if t == NIL {
            self.head[l as usize] = i;
        } else {
            self.slots[t as usize].next = i;
        }
        self.tail[l as usize] = i;
        self.len[l as usize] += 1;
    }

    /// Put slot `i` on the list its state calls for. Becoming clean-and-idle puts it at the
    /// most-recently-used end of the LRU; becoming free resets it.
    fn settle(&mut self, i: u32) {
        let want = self.slots[i as usize].desired_list();
        if want == self.slots[i as usize].list {
            return;
        }
        self.unlink(i);
        match want {
            List::None => {}
            List::Lru => self.push_head(List::Lru, i),
            List::Dirty => self.push_tail(List::Dirty, i),
            List::Free => {
                self.valid_mut(i).fill(0);
                self.dirty_mut(i).fill(0);
                let s = &mut self.slots[i as usize];
                s.valid_n = 0;
                s.dirty_n = 0;
                s.stale = false;
                s.flush_id = 0;
                self.push_head(List::Free, i);
            }
        }
    }

    /// Remove slot `i` from the map (it stays allocated while pinned or busy). Its dirty
    /// sectors, if any, are discarded; the returned byte count must leave the dirty counter.
    fn detach(&mut self, i: u32, sector: u64) -> u64 {
        let key = self.slots[i as usize].key;
        if self.slots[i as usize].mapped && self.map.get(&key) == Some(&i) {
            self.map.remove(&key);
        }
        let s = &mut self.slots[i as usize];
        s.mapped = false;
        let discarded = s.dirty_n as u64 * sector;
        s.dirty_n = 0;
        self.dirty_mut(i).fill(0);
        discarded
    }

    /// A slot for a new block: a free one, else the least recently used clean, idle block
    /// (evicted). The slot is on no list and unmapped.
    fn alloc(&mut self, counters: &NodeCounters) -> Option<u32> {
        let f = self.head[List::Free as usize];
        if f != NIL {
            self.unlink(f);
            return Some(f);
        }
        let v = self.tail[List::Lru as usize];
        if v == NIL {
            return None;
        }
        self.unlink(v);
        // An LRU block is clean, so nothing is discarded.
        self.detach(v, 0);
        self.valid_mut(v).fill(0);
        self.slots[v as usize].valid_n = 0;
        NodeCounters::add(&counters.evictions, 1);
        Some(v)
    }

    /// Make `i` the mapped slot of `key` (fresh: no valid sector).
    fn map_fresh(&mut self, i: u32, key: BlockKey) {
        let g = self.next_generation();
        let s = &mut self.slots[i as usize];
        s.key = key;
        s.mapped = true;
        s.generation = g;
        s.valid_n = 0;
        s.dirty_n = 0;
        s.stale = false;
        s.flush_id = 0;
        self.map.insert(key, i);
    }
}

/// Read-ahead policy for a miss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadAhead {
    /// Read only the missing sectors of the requested range.
    #[default]
    None,
    /// Read every missing sector of the block.
    WholeBlock,
}

/// Result of a read lookup for one block.
#[must_use]
#[expect(
    clippy::large_enum_variant,
    reason = "a Fill/DirtyRange carries its sector mask inline; boxing would allocate per miss"
)]
pub enum Lookup {
    /// Every requested sector is cached: the block is pinned until the reference is dropped.
    Hit(BlockRef),
    /// Some requested sector is missing: a slot is reserved (the block is busy for other
    /// fills and writes) until the [`Fill`] is completed, aborted or dropped.
    Miss(Fill),
    /// A fill of this block is in flight and the requested sectors are not all valid yet:
    /// retry later or read around the cache.
    Busy,
    /// No slot of the partition can be reused (all pinned, dirty or busy): read around the
    /// cache for this block.
    NoSpace,
    /// The block is not cached and the partition is full of blocks read more often than it
    /// (see `admission`): nothing was reserved; read the backing store directly — no sector
    /// of the block is cached, so the disk holds its newest data.
    Bypass,
}

impl std::fmt::Debug for Lookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lookup::Hit(r) => f.debug_tuple("Hit").field(r).finish(),
            Lookup::Miss(m) => f.debug_tuple("Miss").field(m).finish(),
            Lookup::Busy => f.write_str("Busy"),
            Lookup::NoSpace => f.write_str("NoSpace"),
            Lookup::Bypass => f.write_str("Bypass"),
        }
    }
}

/// Result of a write-back write into the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum WriteOutcome {
    /// The cache holds the data; `newly_dirty` bytes were added to the node's dirty total.
    Written { newly_dirty: u64 },
    /// The node's dirty bytes would pass the limit: nothing was written. Wait for the
    /// flusher, or write through to disk and call `write_through_update`.
    Throttled,
    /// A fill of this block is in flight: nothing was written; retry.
    Busy,
    /// No slot could take the data (all pinned, dirty or busy): nothing was written.
    NoSpace,
    /// The range is not whole sectors: nothing was written.
    Unaligned,
}

/// Result of bringing the cached copy up to date after the caller wrote data to disk itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum UpdateOutcome {
    /// The cached copy now holds the new data.
    Updated,
    /// The block is not cached: nothing to do.
    NotCached,
    /// The cached (clean, pinned) copy was dropped instead of updated; later reads miss.
    Dropped,
    /// A fill was in flight: it will not validate what it read, but the cached copy is not
    /// updated yet. Call again before completing the command.
    Busy,
    /// The copy is pinned and dirty and no slot is free for copy-on-write: call again.
    NoSpace,
    /// The range is not whole sectors: nothing was done.
    Unaligned,
}

/// Errors creating a partition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    #[error("partition slots {first}..{end} are not inside the node arena of {have} slots")]
    Slots {
        first: usize,
        end: usize,
        have: usize,
    },
    #[error("{0} sectors per block exceed the {max}-bit bitmaps", max = MAX_WORDS * 64)]
    Sectors(usize),
}

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
        // Copy the valid sectors the write does not cover, old slot -> new slot.
        let ss = self.sector_shift;
        let mut from = 0;
        while let Some((a, e)) = bits::next_run(st.valid_of(i), from, self.bits) {
            for (pa, pe) in [(a, e.min(lo)), (a.max(hi), e)] {
                if pa < pe {
                    // SAFETY: both ranges are inside their slots; slot i's valid sectors are
                    // not written while it is pinned, slot j is ours alone (just allocated,
                    // on no list, unmapped), and the slots differ, so the ranges do not overlap.
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
        st.map.insert(old.key, j);
        st.settle(i);
        Some(j)
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
        let ss = self.sector();
        let mut st = self.state.lock();
        let existing = st.map.get(&key).copied();
        let newly = match existing {
            Some(i) if st.slots[i as usize].busy => {
                NodeCounters::add(&c.busy, 1);
                return WriteOutcome::Busy;
            }
            Some(i) => (hi - lo - bits::count_range(st.dirty_of(i), lo, hi)) as u64 * ss,
            None => (hi - lo) as u64 * ss,
        };
        if newly > 0 {
            let dirty = c.dirty_bytes.load(std::sync::atomic::Ordering::Relaxed);
            if dirty.saturating_add(newly) > dirty_limit {
                NodeCounters::add(&c.throttled, 1);
                return WriteOutcome::Throttled;
            }
        }
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
    part: Arc<Partition>,
    slot: u32,
    key: BlockKey,
    start: u32,
    len: u32,
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
    part: Arc<Partition>,
    slot: u32,
    key: BlockKey,
    start: u32,
    len: u32,
    mask: Mask,
    done: bool,
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
    mask: &'a Mask,
    bits: usize,
    next: usize,
    base: *mut u8,
    block_offset: u64,
    sector_shift: u32,
    _buf: PhantomData<&'a mut [u8]>,
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
    part: Arc<Partition>,
    slot: u32,
    key: BlockKey,
    generation: u64,
    flush_id: u64,
    mask: Mask,
    done: bool,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::{ArenaOptions, BindPolicy};
    use crate::topology::Topology;

    fn part(slots: usize, bs: usize) -> Arc<Partition> {
        let t = Topology::split(&[0], 1, 1);
        let a = NodeArena::new(
            &t.nodes()[0],
            true,
            ArenaOptions {
                slot_size: bs,
                slots,
                huge_pages: false,
                policy: BindPolicy::Preferred,
                prefault: false,
            },
        )
        .unwrap();
        Arc::new(Partition::new(0, Arc::new(a), 0, slots, 512, Arc::default()).unwrap())
    }

    fn key(b: u64) -> BlockKey {
        BlockKey {
            lun: 0,
            block_no: b,
        }
    }

    fn fill_with(p: &Arc<Partition>, b: u64, byte: u8) -> BlockRef {
        match p.lookup(key(b), 0, 4096, ReadAhead::None) {
            Lookup::Miss(mut f) => {
                for r in f.runs_mut() {
                    r.buf.fill(byte);
                }
                f.complete().unwrap()
            }
            other => panic!("expected miss, got {other:?}"),
        }
    }

    #[test]
    fn miss_fill_hit() {
        let p = part(4, 4096);
        let r = fill_with(&p, 7, 0xab);
        assert!(r.bytes().iter().all(|&b| b == 0xab));
        drop(r);
        match p.lookup(key(7), 512, 1024, ReadAhead::None) {
            Lookup::Hit(r) => assert_eq!(r.bytes(), &[0xab; 1024][..]),
            other => panic!("{other:?}"),
        }
        p.check_invariants().unwrap();
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let p = part(3, 4096);
        for b in 0..3 {
            drop(fill_with(&p, b, b as u8));
        }
        assert_eq!(p.lru_order(), vec![key(0), key(1), key(2)]);
        // Touch 0: now 1 is the oldest.
        let Lookup::Hit(r) = p.lookup(key(0), 0, 512, ReadAhead::None) else {
            panic!()
        };
        drop(r);
        assert_eq!(p.lru_order(), vec![key(1), key(2), key(0)]);
        // full: a block seen for the first time does not displace one read as often
        assert!(matches!(
            p.lookup(key(3), 0, 512, ReadAhead::None),
            Lookup::Bypass
        ));
        assert_eq!(p.lru_order(), vec![key(1), key(2), key(0)]);
        // read again, it is more popular than the victim and comes in
        drop(fill_with(&p, 3, 3));
        assert_eq!(p.lru_order(), vec![key(2), key(0), key(3)]);
        // block 1 was evicted; looked up twice now, it beats block 2 (read once)
        assert!(matches!(
            p.lookup(key(1), 0, 512, ReadAhead::None),
            Lookup::Miss(_)
        ));
        p.check_invariants().unwrap();
    }

    #[test]
    fn pins_stop_eviction() {
        let p = part(2, 4096);
        let a = fill_with(&p, 0, 1);
        let b = fill_with(&p, 1, 2);
        assert!(matches!(
            p.lookup(key(2), 0, 512, ReadAhead::None),
            Lookup::NoSpace
        ));
        let b2 = b.clone();
        drop(b);
        assert!(matches!(
            p.lookup(key(2), 0, 512, ReadAhead::None),
            Lookup::NoSpace
        ));
        drop(b2);
        drop(fill_with(&p, 2, 3)); // evicts block 1, the only unpinned one
        assert!(a.bytes().iter().all(|&x| x == 1));
        assert!(matches!(
            p.lookup(key(0), 0, 512, ReadAhead::None),
            Lookup::Hit(_)
        ));
        p.check_invariants().unwrap();
    }

    #[test]
    fn busy_block_reported_and_partial_fill_reads_only_missing() {
        let p = part(2, 65536);
        let Lookup::Miss(mut f) = p.lookup(key(0), 4096, 4096, ReadAhead::None) else {
            panic!()
        };
        assert_eq!(f.missing_bytes(), 4096);
        assert!(matches!(
            p.lookup(key(0), 0, 512, ReadAhead::None),
            Lookup::Busy
        ));
        assert_eq!(
            p.write_back(key(0), 0, &[0; 512], u64::MAX),
            WriteOutcome::Busy
        );
        for r in f.runs_mut() {
            assert_eq!(r.disk_offset, 4096);
            r.buf.fill(9);
        }
        drop(f.complete().unwrap());
        let Lookup::Miss(f) = p.lookup(key(0), 0, 65536, ReadAhead::None) else {
            panic!()
        };
        assert_eq!(f.missing_bytes(), 65536 - 4096);
        let Lookup::Hit(h) = p.lookup(key(0), 4096, 4096, ReadAhead::None) else {
            panic!("valid sectors stay readable during a fill")
        };
        assert!(h.bytes().iter().all(|&x| x == 9));
        f.abort();
        p.check_invariants().unwrap();
    }

    #[test]
    fn write_to_pinned_block_is_copy_on_write() {
        let p = part(3, 4096);
        let old = fill_with(&p, 0, 1);
        assert!(matches!(
            p.write_back(key(0), 0, &[2; 1024], u64::MAX),
            WriteOutcome::Written { newly_dirty: 1024 }
        ));
        assert!(
            old.bytes().iter().all(|&x| x == 1),
            "a pinned block changed"
        );
        let Lookup::Hit(new) = p.lookup(key(0), 0, 4096, ReadAhead::None) else {
            panic!()
        };
        assert_eq!(&new.bytes()[..1024], &[2; 1024][..]);
        assert_eq!(&new.bytes()[1024..], &[1; 3072][..]);
        assert_eq!(p.stats().detached, 1);
        drop(old);
        assert_eq!(p.stats().detached, 0);
        p.check_invariants().unwrap();
    }

    #[test]
    fn lazy_write_back_takes_only_old_dirty_blocks() {
        let clock = Arc::new(AtomicU64::new(100));
        let t = Topology::split(&[0], 1, 1);
        let a = NodeArena::new(
            &t.nodes()[0],
            true,
            ArenaOptions {
                slot_size: 4096,
                slots: 4,
                huge_pages: false,
                policy: BindPolicy::Preferred,
                prefault: false,
            },
        )
        .unwrap();
        let p = Arc::new(
            Partition::new(0, Arc::new(a), 0, 4, 512, Arc::default())
                .unwrap()
                .with_clock(Arc::clone(&clock)),
        );
        let _ = p.write_back(key(1), 0, &[1; 512], u64::MAX);
        clock.store(200, Ordering::Relaxed);
        let _ = p.write_back(key(2), 0, &[2; 512], u64::MAX);
        // writing again does not make block 1 younger
        let _ = p.write_back(key(1), 512, &[3; 512], u64::MAX);
        let mut v = Vec::new();
        assert_eq!(p.collect_dirty_older(8, &mut v, 99), 0);
        assert_eq!(p.collect_dirty_older(8, &mut v, 150), 1);
        assert_eq!(v[0].key(), key(1));
        assert_eq!(p.collect_dirty_older(8, &mut v, 200), 1);
        assert_eq!(v[1].key(), key(2));
        assert_eq!(p.dirty_queued(), (0, 4));
    }

    #[test]
    fn dirty_generation_and_mark_clean() {
        let p = part(4, 4096);
        let _ = p.write_back(key(1), 512, &[5; 1024], u64::MAX);
        assert_eq!(
            p.counters
                .dirty_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            1024
        );
        assert_eq!(
            p.write_back(key(2), 0, &[5; 4096], 4096),
            WriteOutcome::Throttled
        );
        let mut v = Vec::new();
        assert_eq!(p.collect_dirty(8, &mut v), 1);
        let r = v.pop().unwrap();
        let runs: Vec<(u64, usize)> = r.runs().map(|(o, b)| (o, b.len())).collect();
        assert_eq!(runs, vec![(4096 + 512, 1024)]);
        assert!(matches!(p.dirty_of(key(1)), DirtyProbe::InFlight));
        // A newer write while the flush is in flight: cleaning must not happen.
        let _ = p.write_back(key(1), 0, &[6; 512], u64::MAX);
        assert!(!r.mark_clean());
        assert_eq!(p.dirty_sectors(), 3);
        let DirtyProbe::Taken(r) = p.dirty_of(key(1)) else {
            panic!()
        };
        assert_eq!(
            r.runs().map(|(o, b)| (o, b.len())).collect::<Vec<_>>(),
            vec![(4096, 1536)]
        );
        assert!(r.mark_clean());
        assert_eq!(p.dirty_sectors(), 0);
        assert_eq!(
            p.counters
                .dirty_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        p.check_invariants().unwrap();
    }

    #[test]
    fn dropped_flush_requeues() {
        let p = part(2, 4096);
        let _ = p.write_back(key(0), 0, &[1; 4096], u64::MAX);
        let mut v = Vec::new();
        p.collect_dirty(1, &mut v);
        assert_eq!(p.collect_dirty(1, &mut v), 0);
        v.clear();
        assert_eq!(p.collect_dirty(1, &mut v), 1);
        p.check_invariants().unwrap();
    }

    #[test]
    fn invalidate_lun_waits_for_pins() {
        let p = part(2, 4096);
        let r = fill_with(&p, 0, 4);
        let _ = p.write_back(key(1), 0, &[1; 512], u64::MAX);
        assert_eq!(p.invalidate_lun(0), 2);
        assert_eq!(p.dirty_sectors(), 0);
        assert_eq!(p.stats().free, 1);
        assert!(r.bytes().iter().all(|&x| x == 4));
        drop(r);
        assert_eq!(p.stats().free, 2);
        p.check_invariants().unwrap();
    }

    #[test]
    fn write_through_update_marks_fill_stale() {
        let p = part(2, 4096);
        let Lookup::Miss(mut f) = p.lookup(key(0), 0, 4096, ReadAhead::None) else {
            panic!()
        };
        assert_eq!(
            p.write_through_update(key(0), 0, &[7; 512]),
            UpdateOutcome::Busy
        );
        for r in f.runs_mut() {
            r.buf.fill(1);
        }
        assert_eq!(f.complete().unwrap_err(), FillRaced);
        assert_eq!(
            p.write_through_update(key(0), 0, &[7; 512]),
            UpdateOutcome::NotCached
        );
        p.check_invariants().unwrap();
    }
}
