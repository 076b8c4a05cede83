//! The partition's bookkeeping under its lock: slots, the three intrusive lists (free,
//! LRU, dirty), the block map with its fixed hasher, and the admission sketch.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use super::BlockKey;
use crate::admission::FrequencySketch;
use crate::counters::NodeCounters;

pub(super) const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum List {
    None = 0,
    Free = 1,
    Lru = 2,
    Dirty = 3,
}

#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub(super) key: BlockKey,
    pub(super) generation: u64,
    /// Non-zero while a flush of this block's dirty sectors is in flight (its token).
    pub(super) flush_id: u64,
    pub(super) prev: u32,
    pub(super) next: u32,
    pub(super) pins: u32,
    pub(super) valid_n: u32,
    pub(super) dirty_n: u32,
    pub(super) list: List,
    /// In the map (the cached copy of `key`); false when free or detached.
    pub(super) mapped: bool,
    /// A fill is in flight.
    pub(super) busy: bool,
    /// The in-flight fill must not validate what it read (the block was invalidated or
    /// overwritten on disk meanwhile).
    pub(super) stale: bool,
    /// The write-back clock (ms) when the block last went from clean to dirty.
    pub(super) dirty_since: u64,
}

impl Slot {
    pub(super) fn empty() -> Self {
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

    pub(super) fn desired_list(&self) -> List {
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
    pub(super) seed: u64,
}

pub(crate) struct KeyHasher {
    pub(super) h: u64,
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

pub(super) struct State {
    pub(super) map: HashMap<BlockKey, u32, KeyHashBuilder>,
    pub(super) slots: Vec<Slot>,
    pub(super) valid: Vec<u64>,
    pub(super) dirty: Vec<u64>,
    pub(super) words: usize,
    pub(super) head: [u32; 4],
    pub(super) tail: [u32; 4],
    pub(super) len: [u32; 4],
    pub(super) next_gen: u64,
    /// Recent read frequency of blocks, for admission when the partition is full.
    pub(super) freq: FrequencySketch,
    /// The node's counters (`cached_blocks` follows the map's size).
    pub(super) counters: std::sync::Arc<NodeCounters>,
}

impl State {
    pub(super) fn valid_of(&self, i: u32) -> &[u64] {
        let w = self.words;
        &self.valid[i as usize * w..(i as usize + 1) * w]
    }
    pub(super) fn dirty_of(&self, i: u32) -> &[u64] {
        let w = self.words;
        &self.dirty[i as usize * w..(i as usize + 1) * w]
    }
    pub(super) fn valid_mut(&mut self, i: u32) -> &mut [u64] {
        let w = self.words;
        &mut self.valid[i as usize * w..(i as usize + 1) * w]
    }
    pub(super) fn dirty_mut(&mut self, i: u32) -> &mut [u64] {
        let w = self.words;
        &mut self.dirty[i as usize * w..(i as usize + 1) * w]
    }
    pub(super) fn next_generation(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    pub(super) fn unlink(&mut self, i: u32) {
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

    pub(super) fn push_head(&mut self, l: List, i: u32) {
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

    pub(super) fn push_tail(&mut self, l: List, i: u32) {
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
    pub(super) fn settle(&mut self, i: u32) {
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
    pub(super) fn detach(&mut self, i: u32, sector: u64) -> u64 {
        let key = self.slots[i as usize].key;
        if self.slots[i as usize].mapped && self.map.get(&key) == Some(&i) {
            self.map.remove(&key);
            NodeCounters::sub(&self.counters.cached_blocks, 1);
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
    pub(super) fn alloc(&mut self, counters: &NodeCounters) -> Option<u32> {
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
    pub(super) fn map_fresh(&mut self, i: u32, key: BlockKey) {
        let g = self.next_generation();
        let s = &mut self.slots[i as usize];
        s.key = key;
        s.mapped = true;
        s.generation = g;
        s.valid_n = 0;
        s.dirty_n = 0;
        s.stale = false;
        s.flush_id = 0;
        if self.map.insert(key, i).is_none() {
            NodeCounters::add(&self.counters.cached_blocks, 1);
        }
    }
}
