//! Cache coherence: every step that moves a LUN's bytes between the block cache and its
//! backing store, in the order that keeps them in agreement — reads looked up, filled and
//! read ahead; writes kept dirty (write-back) or written through with the cached copy
//! updated after; dirty blocks written back before anything reads or writes the store around
//! the cache. Functions take the cache, the LUN's cache id and its
//! [`BackingStore`](crate::store::BackingStore) (or what holds it; any
//! [`Store`](crate::store::Store) behind it: a file, an image, nothing, a disk in memory in
//! tests), and return typed outcomes; the caller (the daemon's backend) maps them to
//! commands and runs them on the right thread: [`lookup`] and [`write_back`] with
//! [`NoWait`] do no I/O and never wait (beyond a partition or pool lock: fit for event
//! threads); the rest do I/O and wait ([`Backoff`]) on I/O workers only.

mod lists;
mod read;
mod wait;
mod write;

pub(crate) use lists::PiecePool;
pub use lists::{BlockList, Piece, PieceList};
pub use read::{
    CachedRead, FillRead, Looked, Warmed, fill, fill_done, fill_reads, lookup, read, read_ahead,
    warm,
};
pub use wait::{Backoff, GaveUp, NoWait, Waiter};
pub use write::{
    Invalidated, WrittenThrough, flush_and_sync, flush_range, try_update_cached_copy,
    update_cached_copy, write_back, write_dirty, write_dirty_all, write_through,
    write_through_landed,
};

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::partition::{Lookup, ReadAhead, WriteOutcome};
    use crate::store::{BackingStore, Store};
    use crate::{BlockCache, BlockSpan, CacheConfig, Topology};

    const BS: usize = 4096;

    /// A disk in memory (the bytes shared with the test).
    #[derive(Debug)]
    struct Mem(Arc<Mutex<Vec<u8>>>);

    impl Store for Mem {
        fn measure(&self) -> io::Result<u64> {
            Ok(self.0.lock().expect("mem").len() as u64)
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            let o = offset as usize;
            buf.copy_from_slice(&self.0.lock().expect("mem")[o..o + buf.len()]);
            Ok(())
        }
        fn write_at(&self, data: &[u8], offset: u64, _durable: bool) -> io::Result<()> {
            let o = offset as usize;
            self.0.lock().expect("mem")[o..o + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A 16-block disk holding `bytes`, and its bytes.
    fn disk(bytes: Vec<u8>) -> (Arc<Mutex<Vec<u8>>>, BackingStore) {
        let bytes = Arc::new(Mutex::new(bytes));
        let store = Box::new(Mem(Arc::clone(&bytes)));
        let disk = BackingStore::from_store(std::path::Path::new("mem"), 512, store);
        (bytes, disk.expect("disk"))
    }

    fn cache() -> BlockCache {
        let cfg = CacheConfig {
            block_size: BS,
            group_blocks: 1,
            partitions_per_node: 1,
            bytes_per_node: 8 * BS,
            huge_pages: false,
            dirty_limit_bytes: 8 * BS as u64,
            ..CacheConfig::default()
        };
        BlockCache::new(cfg, &Topology::split(&[0, 1], 2, 1)).expect("cache")
    }

    #[test]
    fn a_busy_block_refuses_a_write_back_that_may_not_wait() {
        let c = cache();
        let span = BlockSpan::new(BS, 3, 0, BS).expect("span");
        let Lookup::Miss(fill) = c.lookup(0, &span, ReadAhead::None) else {
            panic!("a cold block misses");
        };
        let data = vec![7u8; BS];
        let busy = write_back(&c, 0, 3 * BS as u64, &data, &mut NoWait);
        assert_eq!(busy, Err(WriteOutcome::Busy));
        fill.abort();
        assert_eq!(write_back(&c, 0, 3 * BS as u64, &data, &mut NoWait), Ok(()));
        // written back and read through the production read path
        let (bytes, disk) = disk(vec![0; 16 * BS]);
        flush_and_sync(&c, 0, &disk, &mut NoWait).expect("flush");
        assert_eq!(&bytes.lock().expect("mem")[3 * BS..4 * BS], &data[..]);
        let CachedRead::Blocks(refs) = read(&c, 0, &disk, 0, 3 * BS as u64, BS as u64) else {
            panic!("a dirty-then-clean block is cached");
        };
        assert_eq!(refs.iter().next().map(|r| r.bytes().to_vec()), Some(data));
    }

    #[test]
    fn write_through_updates_the_cached_copy_and_fills_read_the_store() {
        let c = cache();
        let (bytes, disk) = disk((0..16 * BS).map(|i| (i / BS) as u8).collect());
        let Looked::Pieces(p) = lookup(&c, 0, 1, 0, 2 * BS as u64) else {
            panic!("cold blocks need a fill");
        };
        let CachedRead::Blocks(refs) = fill(&disk, p) else {
            panic!("fill");
        };
        assert_eq!(refs.len(), 2);
        drop(refs);
        let new = vec![0xEEu8; 512];
        let done = write_through(Some(&c), 0, &disk, 512, &new, true, &mut NoWait);
        assert!(done.written.is_ok() && done.cached.is_ok());
        let Looked::AllHits(refs) = lookup(&c, 0, 1, 0, BS as u64) else {
            panic!("still cached");
        };
        let cached = refs.iter().next().map(|r| r.bytes().to_vec()).expect("one");
        assert_eq!(&cached[512..1024], &new[..]);
        assert_eq!(&cached[..], &bytes.lock().expect("mem")[..BS]);
    }

    #[test]
    fn range_clean_sees_dirty_blocks_without_taking_them() {
        let c = cache();
        assert!(
            c.range_clean(0, 0, 4 * BS as u64),
            "an empty cache is clean"
        );
        let data = vec![5u8; BS];
        write_back(&c, 0, 2 * BS as u64, &data, &mut NoWait).expect("write back");
        assert!(
            c.range_clean(0, 0, 2 * BS as u64),
            "blocks 0-1 hold nothing"
        );
        assert!(
            !c.range_clean(0, BS as u64, 2 * BS as u64),
            "block 2 is dirty"
        );
        assert!(c.range_clean(1, 2 * BS as u64, 1), "another LUN's block 2");
        let mut held = Vec::new();
        let taken = c
            .dirty_ranges(0, 0, 16 * BS as u64, &mut held)
            .expect("scan");
        assert_eq!(
            taken.taken, 1,
            "the probe took nothing: the flush still finds it"
        );
        assert!(
            !c.range_clean(0, 2 * BS as u64, 1),
            "dirty while written back"
        );
        drop(held);
        assert!(
            !c.range_clean(0, 2 * BS as u64, 1),
            "dirty after a failed write-back"
        );
        assert!(
            !c.range_clean(0, u64::MAX, 2),
            "an overflowing range is not probed"
        );
        assert!(!c.range_clean(0, 0, 1 << 40), "a huge range is not probed");
    }

    #[test]
    fn a_no_wait_update_stops_at_a_busy_block_and_drops_nothing() {
        let c = cache();
        let (_bytes, disk) = disk(vec![1; 16 * BS]);
        // block 0 cached and clean, block 1 being filled (busy)
        let Looked::Pieces(p) = lookup(&c, 0, 1, 0, BS as u64) else {
            panic!("cold block 0");
        };
        let CachedRead::Blocks(refs) = fill(&disk, p) else {
            panic!("fill");
        };
        drop(refs);
        let span = BlockSpan::new(BS, 1, 0, BS).expect("span");
        let Lookup::Miss(filling) = c.lookup(0, &span, ReadAhead::None) else {
            panic!("a cold block misses");
        };
        let new = vec![9u8; 2 * BS];
        let stopped = try_update_cached_copy(&c, 0, 0, &new);
        assert!(
            matches!(stopped, Err(Invalidated { block: 1, .. })),
            "{stopped:?}"
        );
        let Looked::AllHits(refs) = lookup(&c, 0, 1, 0, BS as u64) else {
            panic!("block 0 still cached: nothing was dropped");
        };
        let cached = refs.iter().next().map(|r| r.bytes().to_vec()).expect("one");
        assert_eq!(
            cached,
            new[..BS],
            "block 0 brought up to date before the stop"
        );
        drop(refs);
        filling.abort();
        assert_eq!(try_update_cached_copy(&c, 0, 0, &new), Ok(Ok(())));
    }
}
