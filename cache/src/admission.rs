//! Admission of read misses when a partition is full (TinyLFU, Einziger et al.): a small
//! count-min sketch of how often each block was looked up recently, halved every
//! `AGE_FACTOR x slots` lookups so old popularity fades. A missing block displaces the LRU
//! victim only when it was looked up more often than the victim; otherwise the read goes
//! around the cache (straight to the backing store). A scan, or a uniformly random working
//! set larger than the cache, then leaves the cached set alone instead of churning it with
//! blocks that will be evicted before they are read again, and its misses cost what an
//! uncached read costs; a skewed set still brings its hot blocks in.
//!
//! Pure bookkeeping: the partition calls it under its lock; nothing allocates after `new`.

/// Counters saturate here (4-bit counters, as TinyLFU's).
const MAX_COUNT: u8 = 15;
/// Sample size before the counters are halved, in lookups per slot.
const AGE_FACTOR: u64 = 10;

/// Recent lookup frequency of block keys (by their 64-bit hash).
#[derive(Debug, Clone)]
pub struct FrequencySketch {
    counters: Vec<u8>,
    mask: u64,
    adds: u64,
    period: u64,
}

impl FrequencySketch {
    /// A sketch for a partition of `slots` cache blocks (about four counters per slot).
    pub fn new(slots: usize) -> Self {
        let size = (slots.max(16) * 4).next_power_of_two();
        FrequencySketch {
            counters: vec![0; size],
            mask: size as u64 - 1,
            adds: 0,
            period: AGE_FACTOR * slots.max(16) as u64,
        }
    }

    /// The sketch's hash of a block key: a fixed mix (splitmix64), so admission decisions
    /// are reproducible; collisions only make a block look more popular than it is.
    pub fn key_hash(lun: u32, block_no: u64) -> u64 {
        let mut z = block_no ^ (u64::from(lun) << 40 | u64::from(lun) >> 24);
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn rows(&self, hash: u64) -> [usize; 2] {
        [
            (hash & self.mask) as usize,
            ((hash >> 32 ^ hash.rotate_left(17)) & self.mask) as usize,
        ]
    }

    /// Count one lookup of the block with this hash.
    pub fn touch(&mut self, hash: u64) {
        for i in self.rows(hash) {
            if let Some(c) = self.counters.get_mut(i)
                && *c < MAX_COUNT
            {
                *c += 1;
            }
        }
        self.adds += 1;
        if self.adds >= self.period {
            self.adds = 0;
            for c in &mut self.counters {
                *c >>= 1;
            }
        }
    }

    /// How often the block was looked up recently (an upper estimate).
    pub fn estimate(&self, hash: u64) -> u8 {
        self.rows(hash)
            .into_iter()
            .map(|i| self.counters.get(i).copied().unwrap_or(0))
            .min()
            .unwrap_or(0)
    }

    /// Should a block with hash `candidate` replace the one with hash `victim`?
    pub fn admit(&self, candidate: u64, victim: u64) -> bool {
        self.estimate(candidate) > self.estimate(victim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(x: u64) -> u64 {
        FrequencySketch::key_hash(0, x)
    }

    #[test]
    fn popular_beats_rare_and_ties_stay_out() {
        let mut s = FrequencySketch::new(64);
        for _ in 0..5 {
            s.touch(h(1));
        }
        s.touch(h(2));
        assert!(s.admit(h(1), h(2)));
        assert!(!s.admit(h(2), h(1)));
        // equal counts: the cached block stays
        s.touch(h(3));
        assert!(!s.admit(h(3), h(2)));
        assert!(s.estimate(h(99)) <= 1);
    }

    #[test]
    fn counts_saturate_and_age() {
        let mut s = FrequencySketch::new(16);
        for _ in 0..100 {
            s.touch(h(7));
        }
        // 100 touches in a period of 160: saturated at 15
        assert_eq!(s.estimate(h(7)), MAX_COUNT);
        // the rest of the period goes to other keys: the count is halved
        for k in 0..60 {
            s.touch(h(1000 + k));
        }
        assert!(s.estimate(h(7)) <= 8, "{}", s.estimate(h(7)));
    }
}
