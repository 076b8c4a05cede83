//! The reusable lists a request's blocks travel in, so the per-I/O path allocates nothing
//! once warm: [`BlockList`] (pinned references, pooled per thread: it is sent and dropped
//! by the event thread that owns the connection) and [`PieceList`] (hits and reserved
//! misses of a read that needs the medium, pooled per NUMA node by the [`BlockCache`]: taken
//! on the node's event thread, given back by the node's I/O worker that filled it — one
//! lock per node, never a process-wide one).
//!
//! [`BlockCache`]: crate::BlockCache

use std::cell::RefCell;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::partition::{BlockRef, Fill};

/// Block lists kept per thread, and the largest list kept (in references).
const BLOCK_LISTS: usize = 256;
const BLOCK_LIST_MAX: usize = 256;

thread_local! {
    static BLOCK_POOL: RefCell<Vec<Vec<BlockRef>>> = const { RefCell::new(Vec::new()) };
}

/// Pinned block references in request order. Dropping the list unpins every block and
/// gives the list's memory back to the dropping thread's pool.
#[derive(Debug, Default)]
pub struct BlockList {
    refs: Vec<BlockRef>,
}

impl BlockList {
    /// An empty list, from this thread's pool when it has one.
    pub fn new() -> Self {
        let refs = BLOCK_POOL
            .try_with(|p| p.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| Vec::with_capacity(16));
        BlockList { refs }
    }

    pub fn push(&mut self, r: BlockRef) {
        self.refs.push(r);
    }

    /// Takes every reference out (still pinned), leaving the list empty.
    pub fn drain(&mut self) -> std::vec::Drain<'_, BlockRef> {
        self.refs.drain(..)
    }

    pub fn iter(&self) -> std::slice::Iter<'_, BlockRef> {
        self.refs.iter()
    }

    pub fn len(&self) -> usize {
        self.refs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }
}

impl Drop for BlockList {
    fn drop(&mut self) {
        let mut refs = std::mem::take(&mut self.refs);
        refs.clear(); // unpins every block now
        if refs.capacity() == 0 || refs.capacity() > BLOCK_LIST_MAX {
            return;
        }
        let _ = BLOCK_POOL.try_with(|p| {
            if let Ok(mut p) = p.try_borrow_mut()
                && p.len() < BLOCK_LISTS
            {
                // full size at once: lists made on I/O workers end here, so the pool of an
                // event thread grows to its bound; it must not reallocate on the way
                let room = BLOCK_LISTS - p.len();
                p.reserve_exact(room);
                p.push(refs);
            }
        });
    }
}

/// One block of a read that needs the medium.
#[allow(
    clippy::large_enum_variant,
    reason = "a Fill carries its sector mask inline; boxing would allocate per miss"
)]
pub enum Piece {
    Hit(BlockRef),
    Miss(Fill),
}

/// Piece lists kept per node, and the longest list kept.
const PIECE_LISTS: usize = 1024;
const PIECE_LIST_MAX: usize = 256;

/// A node's spare piece lists (room for [`PIECE_LISTS`] reserved when the cache is built).
pub(crate) struct PiecePool {
    lists: Mutex<Vec<Vec<Piece>>>,
}

impl PiecePool {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(PiecePool {
            lists: Mutex::new(Vec::with_capacity(PIECE_LISTS)),
        })
    }

    /// A list from this pool (a new one while the pool is empty); it comes back here when
    /// dropped, wherever that is.
    pub(crate) fn take(self: &Arc<Self>) -> PieceList {
        let pieces = self
            .lists
            .lock()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(16));
        PieceList {
            pieces,
            pool: Arc::clone(self),
        }
    }
}

/// The pieces of a request with misses, in request order; the list's memory is reused.
pub struct PieceList {
    pieces: Vec<Piece>,
    pool: Arc<PiecePool>,
}

impl PieceList {
    pub fn push(&mut self, p: Piece) {
        self.pieces.push(p);
    }

    /// The pieces, in request order.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Piece> {
        self.pieces.iter_mut()
    }

    /// Takes every piece out, leaving the list empty.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Piece> {
        self.pieces.drain(..)
    }

    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }
}

impl Drop for PieceList {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.pieces);
        v.clear(); // unpins hits, releases reservations
        if v.capacity() == 0 || v.capacity() > PIECE_LIST_MAX {
            return;
        }
        let mut pool = self.pool.lists.lock();
        if pool.len() < PIECE_LISTS {
            pool.push(v); // within the capacity reserved at start: no reallocation
        }
    }
}

impl std::fmt::Debug for PieceList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PieceList")
            .field("pieces", &self.pieces.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_list_goes_back_to_the_pool_it_came_from() {
        let (a, b) = (PiecePool::new(), PiecePool::new());
        let list = a.take();
        // dropped on another thread (an I/O worker): back in `a`, not in `b`
        std::thread::spawn(move || drop(list)).join().expect("join");
        assert_eq!((a.lists.lock().len(), b.lists.lock().len()), (1, 0));
        let again = a.take();
        assert_eq!(a.lists.lock().len(), 0, "reused");
        assert!(again.is_empty());
        assert!(
            a.lists.lock().capacity() >= PIECE_LISTS,
            "reserved once at start"
        );
    }
}
