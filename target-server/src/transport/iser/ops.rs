//! Bookkeeping of one iSER link: the send-queue requests in flight, by work-request id
//! ([`Ops`]), and fixed pools of buffer slots (send buffers, staging chunks: [`Pool`]).

use crate::backend::payload::Payload;

/// A request on the send queue, and the buffer it holds until it completes.
#[derive(Debug)]
pub(super) enum Op {
    /// A Send from send buffer `slot`.
    Send { slot: usize },
    /// An RDMA WRITE (READ data to the initiator) from staging `chunk`.
    Write { chunk: usize },
    /// An RDMA WRITE straight from cache blocks: the payload keeps them pinned until it
    /// completes.
    WriteFrom {
        #[allow(
            dead_code,
            reason = "held, not read: dropping it unpins the cache blocks"
        )]
        payload: Payload,
    },
    /// An RDMA READ (WRITE data from the initiator) into staging `chunk`: `len` bytes for
    /// task `itt`, transfer `xfer`.
    Read {
        chunk: usize,
        itt: u32,
        xfer: u32,
        len: usize,
    },
}

impl Op {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Op::Send { .. } => "Send",
            Op::Write { .. } | Op::WriteFrom { .. } => "RDMA WRITE",
            Op::Read { .. } => "RDMA READ",
        }
    }
}

/// Requests in flight, indexed by their work-request id (a slab: ids are reused).
#[derive(Debug, Default)]
pub(super) struct Ops {
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
}

impl Ops {
    /// Stores `op`; returns its work-request id.
    pub(super) fn insert(&mut self, op: Op) -> u64 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(op);
                i as u64
            }
            None => {
                self.slots.push(Some(op));
                (self.slots.len() - 1) as u64
            }
        }
    }

    /// Whether request `wr` is in flight.
    pub(super) fn contains(&self, wr: u64) -> bool {
        usize::try_from(wr)
            .ok()
            .and_then(|i| self.slots.get(i))
            .is_some_and(Option::is_some)
    }

    /// Removes and returns the request with id `wr` (None: unknown or already taken).
    pub(super) fn take(&mut self, wr: u64) -> Option<Op> {
        let i = usize::try_from(wr).ok()?;
        let op = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        Some(op)
    }
}

/// A fixed set of numbered buffer slots.
#[derive(Debug)]
pub(super) struct Pool {
    free: Vec<usize>,
    size: usize,
}

impl Pool {
    pub(super) fn new(n: usize) -> Pool {
        Pool {
            free: (0..n).rev().collect(),
            size: n,
        }
    }

    /// Slots free now.
    pub(super) fn available(&self) -> usize {
        self.free.len()
    }

    pub(super) fn alloc(&mut self) -> Option<usize> {
        self.free.pop()
    }

    /// Gives slot `i` back (ignored when out of range or already free).
    pub(super) fn free(&mut self, i: usize) {
        if i < self.size && !self.free.contains(&i) {
            self.free.push(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_reused_and_taken_once() {
        let mut ops = Ops::default();
        let a = ops.insert(Op::Send { slot: 1 });
        let b = ops.insert(Op::Write { chunk: 2 });
        assert_ne!(a, b);
        assert!(ops.contains(a) && ops.contains(b) && !ops.contains(999));
        assert!(matches!(ops.take(a), Some(Op::Send { slot: 1 })));
        assert!(!ops.contains(a));
        assert!(ops.take(a).is_none());
        assert!(ops.take(999).is_none());
        let c = ops.insert(Op::Send { slot: 3 });
        assert_eq!(c, a);
    }

    #[test]
    fn pool_hands_out_each_slot_once() {
        let mut p = Pool::new(3);
        let got: Vec<_> = std::iter::from_fn(|| p.alloc()).collect();
        assert_eq!(got.len(), 3);
        p.free(1);
        p.free(1);
        p.free(7);
        assert_eq!(p.alloc(), Some(1));
        assert_eq!(p.alloc(), None);
    }
}
