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
//! event thread never waits. A write that outlives the call that started it (librbd aio)
//! holds its stripes through a [`WriteClaim`] — shared, or exclusive for a write-through
//! of a cached LUN — released wherever it is dropped.

use std::sync::Arc;

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

    /// As [`RangeLocks::exclusive`] without waiting: `None` when any writer holds a stripe
    /// of the range (nothing is held then).
    pub fn try_exclusive(&self, offset: u64, len: u64) -> Option<ExclusiveHold<'_>> {
        let set = stripes(offset, len);
        let mut guards: [Option<RwLockWriteGuard<'_, ()>>; STRIPES] = [const { None }; STRIPES];
        for (i, g) in guards.iter_mut().enumerate() {
            if set & (1 << i) != 0 {
                *g = Some(self.stripes[i].try_write()?);
            }
        }
        Some(ExclusiveHold { _guards: guards })
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

/// A hold of some stripes of `T`'s range locks that borrows nothing: it keeps `T` (the LUN)
/// alive and lets go when dropped, on whichever thread that happens. For a write that lives
/// on after the call that started it (an asynchronous store write): shared for a plain
/// write ([`WriteClaim::try_new`], as [`RangeLocks::try_write`]), exclusive for a
/// write-through to a cached LUN ([`WriteClaim::try_exclusive`], as
/// [`RangeLocks::try_exclusive`]).
pub struct WriteClaim<T: AsRef<RangeLocks>> {
    owner: Arc<T>,
    set: u64,
    exclusive: bool,
}

impl<T: AsRef<RangeLocks>> WriteClaim<T> {
    /// As [`RangeLocks::try_write`] on `owner`'s locks: `None` when a COMPARE AND WRITE (or
    /// another exclusive holder) holds a stripe of the range, nothing held then.
    pub fn try_new(owner: &Arc<T>, offset: u64, len: u64) -> Option<WriteClaim<T>> {
        let hold = (**owner).as_ref().try_write(offset, len)?;
        // the guards are forgotten: the claim releases their stripes itself (Drop)
        std::mem::forget(hold);
        Some(WriteClaim {
            owner: Arc::clone(owner),
            set: stripes(offset, len),
            exclusive: false,
        })
    }

    /// As [`RangeLocks::try_exclusive`] on `owner`'s locks: `None` when any writer holds a
    /// stripe of the range, nothing held then.
    pub fn try_exclusive(owner: &Arc<T>, offset: u64, len: u64) -> Option<WriteClaim<T>> {
        let hold = (**owner).as_ref().try_exclusive(offset, len)?;
        // as in `try_new`
        std::mem::forget(hold);
        Some(WriteClaim {
            owner: Arc::clone(owner),
            set: stripes(offset, len),
            exclusive: true,
        })
    }
}

impl<T: AsRef<RangeLocks>> Drop for WriteClaim<T> {
    fn drop(&mut self) {
        let locks = (*self.owner).as_ref();
        for (i, stripe) in locks.stripes.iter().enumerate() {
            if self.set & (1 << i) != 0 {
                if self.exclusive {
                    // SAFETY: `try_exclusive` took the write lock of exactly the stripes in
                    // `set` and forgot their guards; this claim owns those locks logically
                    // and releases each once, here (parking_lot's locks are not tied to a
                    // thread).
                    unsafe { stripe.force_unlock_write() };
                } else {
                    // SAFETY: as above, for the read locks `try_new` took.
                    unsafe { stripe.force_unlock_read() };
                }
            }
        }
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

    struct Owner(RangeLocks);

    impl AsRef<RangeLocks> for Owner {
        fn as_ref(&self) -> &RangeLocks {
            &self.0
        }
    }

    #[test]
    fn a_claim_holds_its_stripes_until_dropped_on_any_thread() {
        let o = Arc::new(Owner(RangeLocks::default()));
        let claim = WriteClaim::try_new(&o, 4096, 70_000).expect("free");
        assert!(o.0.try_write(0, 512).is_some(), "writers still share");
        let caw = o.0.stripes[1].try_write();
        assert!(caw.is_none(), "stripe 1 is claimed");
        drop(caw);
        let other = WriteClaim::try_new(&o, 0, 512).expect("claims share");
        // let go on another thread (an asynchronous write's end)
        std::thread::spawn(move || drop(claim))
            .join()
            .expect("join");
        drop(other);
        let caw = o.0.compare_and_write(0, 4 * STRIPE_BYTES);
        assert!(
            WriteClaim::try_new(&o, 4096, 512).is_none(),
            "a compare and write keeps claims out"
        );
        drop(caw);
        assert_eq!(Arc::strong_count(&o), 1, "the claims let the owner go");
    }

    #[test]
    fn an_exclusive_claim_keeps_every_other_writer_out_until_dropped_on_any_thread() {
        let o = Arc::new(Owner(RangeLocks::default()));
        let shared = WriteClaim::try_new(&o, 0, 512).expect("free");
        assert!(
            WriteClaim::try_exclusive(&o, 0, 8192).is_none(),
            "an exclusive claim over a plain write"
        );
        assert!(
            o.0.try_write(STRIPE_BYTES, 512).is_some(),
            "a failed exclusive claim holds nothing"
        );
        drop(shared);
        let claim = WriteClaim::try_exclusive(&o, 4096, 70_000).expect("free now");
        assert!(
            o.0.try_write(0, 512).is_none(),
            "a writer got into stripe 0"
        );
        assert!(o.0.try_write(STRIPE_BYTES, 512).is_none(), "stripe 1");
        assert!(
            o.0.try_exclusive(0, 512).is_none(),
            "another exclusive holder"
        );
        assert!(
            o.0.try_write(2 * STRIPE_BYTES, 512).is_some(),
            "a write elsewhere was kept out"
        );
        std::thread::spawn(move || drop(claim))
            .join()
            .expect("join");
        let caw = o.0.try_exclusive(0, 2 * STRIPE_BYTES).expect("released");
        drop(caw);
        assert_eq!(Arc::strong_count(&o), 1, "the claim lets the owner go");
    }
}
