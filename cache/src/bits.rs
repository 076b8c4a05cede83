//! Fixed-size sector bitsets: slices of `u64` words (one slice per cache slot, sized for the
//! configured block: `block_size / sector_size` bits, at most [`MAX_WORDS`] words) and the
//! range and run operations the partitions need. Word-level, no allocation.

/// Words for the largest block (1 MiB) at the smallest sector (512 B): 2048 bits.
pub const MAX_WORDS: usize = 32;

/// A stack copy of one slot's bitset (only the first `words` words are meaningful).
pub type Mask = [u64; MAX_WORDS];

/// Mask of bits `lo..hi` of word `w` (bit indexes are global).
#[inline]
fn word_mask(w: usize, lo: usize, hi: usize) -> u64 {
    let start = (w * 64).max(lo);
    let end = ((w + 1) * 64).min(hi);
    if start >= end {
        return 0;
    }
    let n = end - start;
    let m = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
    m << (start - w * 64)
}

#[inline]
fn words_of(lo: usize, hi: usize) -> std::ops::Range<usize> {
    lo / 64..hi.div_ceil(64)
}

pub fn set_range(b: &mut [u64], lo: usize, hi: usize) {
    for w in words_of(lo, hi) {
        b[w] |= word_mask(w, lo, hi);
    }
}

pub fn clear_range(b: &mut [u64], lo: usize, hi: usize) {
    for w in words_of(lo, hi) {
        b[w] &= !word_mask(w, lo, hi);
    }
}

/// Number of set bits in `lo..hi`.
pub fn count_range(b: &[u64], lo: usize, hi: usize) -> usize {
    words_of(lo, hi)
        .map(|w| (b[w] & word_mask(w, lo, hi)).count_ones() as usize)
        .sum()
}

pub fn all_set(b: &[u64], lo: usize, hi: usize) -> bool {
    words_of(lo, hi).all(|w| b[w] & word_mask(w, lo, hi) == word_mask(w, lo, hi))
}

pub fn any_set(b: &[u64], lo: usize, hi: usize) -> bool {
    words_of(lo, hi).any(|w| b[w] & word_mask(w, lo, hi) != 0)
}

pub fn count(b: &[u64]) -> usize {
    b.iter().map(|w| w.count_ones() as usize).sum()
}

/// First bit `>= from` and `< hi` that equals `value`.
pub fn next_with(b: &[u64], from: usize, hi: usize, value: bool) -> Option<usize> {
    let mut i = from;
    while i < hi {
        let w = i / 64;
        let word = if value { b[w] } else { !b[w] };
        let masked = word & word_mask(w, i, hi);
        if masked != 0 {
            return Some(w * 64 + masked.trailing_zeros() as usize);
        }
        i = (w + 1) * 64;
    }
    None
}

/// The next run `[a, b)` of set bits starting at or after `from`, within `..hi`.
pub fn next_run(b: &[u64], from: usize, hi: usize) -> Option<(usize, usize)> {
    let a = next_with(b, from, hi, true)?;
    let e = next_with(b, a, hi, false).unwrap_or(hi);
    Some((a, e))
}

/// The sectors a flush must write: within each run of valid sectors, the span from its
/// first to its last dirty sector (clean valid sectors in between equal the disk's copy, so
/// writing them costs bytes but saves system calls; invalid sectors are never included).
pub fn flush_mask(valid: &[u64], dirty: &[u64], bits: usize) -> Mask {
    let mut out = [0u64; MAX_WORDS];
    let mut from = 0;
    while let Some((a, e)) = next_run(valid, from, bits) {
        if let Some(first) = next_with(dirty, a, e, true) {
            let mut last = first;
            let mut i = first;
            while let Some((_, de)) = next_run(dirty, i, e) {
                last = de;
                i = de;
            }
            set_range(&mut out, first, last);
        }
        from = e;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn model_set(v: &mut [bool], lo: usize, hi: usize, x: bool) {
        for b in &mut v[lo..hi] {
            *b = x;
        }
    }

    proptest! {
        #[test]
        fn ranges_match_bool_model(ops in prop::collection::vec((0usize..300, 0usize..300, any::<bool>()), 1..40),
                                   q in (0usize..300, 0usize..300)) {
            let bits = 300;
            let mut b = [0u64; MAX_WORDS];
            let mut m = vec![false; bits];
            for (x, y, set) in ops {
                let (lo, hi) = (x.min(y), x.max(y));
                if set { set_range(&mut b, lo, hi) } else { clear_range(&mut b, lo, hi) }
                model_set(&mut m, lo, hi, set);
            }
            let (lo, hi) = (q.0.min(q.1), q.0.max(q.1));
            prop_assert_eq!(count_range(&b, lo, hi), m[lo..hi].iter().filter(|x| **x).count());
            prop_assert_eq!(all_set(&b, lo, hi), m[lo..hi].iter().all(|x| *x));
            prop_assert_eq!(any_set(&b, lo, hi), m[lo..hi].iter().any(|x| *x));
            prop_assert_eq!(next_with(&b, lo, hi, true), (lo..hi).find(|&i| m[i]));
            prop_assert_eq!(next_with(&b, lo, hi, false), (lo..hi).find(|&i| !m[i]));
        }

        #[test]
        fn flush_mask_covers_dirty_within_valid(v in prop::collection::vec(0u8..3, 64..200)) {
            // 0 = invalid, 1 = valid clean, 2 = valid dirty
            let bits = v.len();
            let mut valid = [0u64; MAX_WORDS];
            let mut dirty = [0u64; MAX_WORDS];
            for (i, s) in v.iter().enumerate() {
                if *s >= 1 { set_range(&mut valid, i, i + 1) }
                if *s == 2 { set_range(&mut dirty, i, i + 1) }
            }
            let f = flush_mask(&valid, &dirty, bits);
            for (i, s) in v.iter().enumerate() {
                let in_f = any_set(&f, i, i + 1);
                if *s == 2 { prop_assert!(in_f, "dirty {} not flushed", i) }
                if *s == 0 { prop_assert!(!in_f, "invalid {} flushed", i) }
            }
        }
    }
}
