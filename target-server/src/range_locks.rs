//! Range locks, for write atomicity per LUN (COMPARE AND WRITE): byte ranges map to 64 lock
//! stripes (64 KiB each, modulo 64). Every writer of a LUN — WRITE on an event thread or an
//! I/O worker, WRITE SAME, UNMAP — holds the stripes it touches shared; a COMPARE AND WRITE
//! holds its stripes exclusive from the read of the compared data to the end of its write.
//! Writers never wait for each other, and no write can slip between a COMPARE AND WRITE's
//! compare and its write, whichever node's thread serves either (the table is one per LUN,
//! in shared memory). WRITE ATOMIC(16) holds its stripes exclusive in the same way for its
//! whole write, and so does every write-through to a LUN in the NUMA cache (WCE=0, FUA,
//! WRITE SAME, UNMAP, a write the cache could not take): its backing-store write and the
//! update of the cached copy must not interleave with another writer's, or two overlapping
//! writes could leave the disk holding one and the cache the other. Event threads only try
//! the lock: when a COMPARE AND WRITE holds it, the write is handed to an I/O worker, so an
//! event thread never waits.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

const STRIPES: usize = 64;
const STRIPE_BYTES: u64 = 64 << 10;

/// The stripe locks of one LUN.
pub struct RangeLocks {
    stripes: [RwLock<()>; STRIPES],
}

impl Default for RangeLocks {
    fn default() -> Self {
        RangeLocks {
            stripes: std::array::from_fn(|_| RwLock::new(())),
        }
    }
}

impl std::fmt::Debug for RangeLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RangeLocks")
    }
}

/// The stripes of `offset .. offset + len`, as a bit set (ascending order = lock order).
fn stripes(offset: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let first = offset / STRIPE_BYTES;
    let last = (offset + len - 1) / STRIPE_BYTES;
    if last - first >= STRIPES as u64 - 1 {
        return u64::MAX;
    }
    let mut set = 0u64;
    for s in first..=last {
        set |= 1 << (s % STRIPES as u64);
    }
    set
}

/// Shared hold of some stripes (a plain write).
pub struct SharedHold<'a> {
    _guards: [Option<RwLockReadGuard<'a, ()>>; STRIPES],
}

/// Exclusive hold of some stripes (a COMPARE AND WRITE).
pub struct ExclusiveHold<'a> {
    _guards: [Option<RwLockWriteGuard<'a, ()>>; STRIPES],
}

impl RangeLocks {
    /// Blocks until no COMPARE AND WRITE holds any stripe of the range.
    pub fn write(&self, offset: u64, len: u64) -> SharedHold<'_> {
        let set = stripes(offset, len);
        let mut guards: [Option<RwLockReadGuard<'_, ()>>; STRIPES] = [const { None }; STRIPES];
        for (i, g) in guards.iter_mut().enumerate() {
            if set & (1 << i) != 0 {
                *g = Some(self.stripes[i].read());
            }
        }
        SharedHold { _guards: guards }
    }

    /// As [`RangeLocks::write`] without waiting: `None` when a COMPARE AND WRITE holds a
    /// stripe of the range (nothing is held then).
    pub fn try_write(&self, offset: u64, len: u64) -> Option<SharedHold<'_>> {
        let set = stripes(offset, len);
        let mut guards: [Option<RwLockReadGuard<'_, ()>>; STRIPES] = [const { None }; STRIPES];
        for (i, g) in guards.iter_mut().enumerate() {
            if set & (1 << i) != 0 {
                *g = Some(self.stripes[i].try_read()?);
            }
        }
        Some(SharedHold { _guards: guards })
    }

    /// Waits for the writers of the range to finish and keeps new ones out (COMPARE AND
    /// WRITE, WRITE ATOMIC, a write-through to a cached LUN).
    pub fn exclusive(&self, offset: u64, len: u64) -> ExclusiveHold<'_> {
        self.compare_and_write(offset, len)
    }

    /// Waits for the writers of the range to finish and keeps new ones out.
    pub fn compare_and_write(&self, offset: u64, len: u64) -> ExclusiveHold<'_> {
        let set = stripes(offset, len);
        let mut guards: [Option<RwLockWriteGuard<'_, ()>>; STRIPES] = [const { None }; STRIPES];
        for (i, g) in guards.iter_mut().enumerate() {
            if set & (1 << i) != 0 {
                *g = Some(self.stripes[i].write());
            }
        }
        ExclusiveHold { _guards: guards }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_of_ranges() {
        assert_eq!(stripes(0, 0), 0);
        assert_eq!(stripes(0, 1), 1);
        assert_eq!(stripes(65535, 2), 0b11);
        assert_eq!(stripes(64 * STRIPE_BYTES, 1), 1, "wraps modulo the table");
        assert_eq!(stripes(0, 64 * STRIPE_BYTES), u64::MAX);
    }

    #[test]
    fn compare_and_write_excludes_overlapping_writers_only() {
        let l = RangeLocks::default();
        let caw = l.compare_and_write(4096, 512);
        assert!(
            l.try_write(0, 8192).is_none(),
            "an overlapping write got in"
        );
        assert!(
            l.try_write(STRIPE_BYTES, 512).is_some(),
            "a write elsewhere was kept out"
        );
        drop(caw);
        let w1 = l
            .try_write(0, 8192)
            .expect("free after the compare and write");
        let w2 = l.try_write(0, 8192).expect("writers share");
        drop((w1, w2));
    }
}
