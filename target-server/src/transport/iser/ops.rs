//! Bookkeeping of one iSER link: the send-queue requests in flight, by work-request id and
//! in posting order ([`Ops`]), and fixed pools of buffer slots (send buffers, staging
//! chunks: [`Pool`]).

use std::collections::VecDeque;

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
    /// An RDMA READ of `len` bytes for task `itt`, transfer `xfer`, straight into the
    /// task's landing (the link's `Landings` hold it).
    Land { itt: u32, xfer: u32, len: usize },
}

impl Op {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Op::Send { .. } => "Send",
            Op::Write { .. } | Op::WriteFrom { .. } => "RDMA WRITE",
            Op::Read { .. } | Op::Land { .. } => "RDMA READ",
        }
    }
}

/// Requests in flight, indexed by their work-request id (a slab: ids are reused), and the
/// ids on the send queue in posting order. An RC send queue completes in order, and an
/// unsignaled request reports only through a later signaled one: a completion retires its
/// request and every one queued before it ([`Ops::retire_through`]).
#[derive(Debug, Default)]
pub(super) struct Ops {
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
    queued: VecDeque<u64>,
}

impl Ops {
    /// An empty set with room for `depth` queued requests (no allocation below it).
    pub(super) fn with_depth(depth: usize) -> Ops {
        Ops {
            slots: Vec::with_capacity(depth),
            free: Vec::with_capacity(depth),
            queued: VecDeque::with_capacity(depth),
        }
    }

    /// Puts request `wr` (inserted) at the back of the send queue.
    pub(super) fn queue(&mut self, wr: u64) {
        self.queued.push_back(wr);
    }

    /// Requests on the send queue not known to be completed.
    pub(super) fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Takes back request `wr` queued last (its post failed); None when it is not the last.
    pub(super) fn unqueue_last(&mut self, wr: u64) -> Option<Op> {
        if self.queued.back() != Some(&wr) {
            return None;
        }
        self.queued.pop_back();
        self.take(wr)
    }

    /// Takes request `wr` off the send queue with every request queued before it, handing
    /// each earlier one to `done`; returns `wr`'s op (None when it is not queued: nothing
    /// is taken then).
    pub(super) fn retire_through(&mut self, wr: u64, mut done: impl FnMut(Op)) -> Option<Op> {
        if !self.contains(wr) || !self.queued.contains(&wr) {
            return None;
        }
        while let Some(w) = self.queued.pop_front() {
            let op = self.take(w);
            if w == wr {
                return op;
            }
            if let Some(op) = op {
                done(op);
            }
        }
        None
    }

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

    /// Takes every request still held (the link is being dropped).
    pub(super) fn take_all(&mut self) -> Vec<Op> {
        self.queued.clear();
        self.free.clear();
        self.slots.drain(..).flatten().collect()
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
    fn a_completion_retires_every_request_queued_before_it() {
        let mut ops = Ops::with_depth(8);
        let w1 = ops.insert(Op::Write { chunk: 1 });
        let w2 = ops.insert(Op::Write { chunk: 2 });
        let s = ops.insert(Op::Send { slot: 0 });
        let r = ops.insert(Op::Read {
            chunk: 3,
            itt: 7,
            xfer: 0,
            len: 512,
        });
        for wr in [w1, w2, s, r] {
            ops.queue(wr);
        }
        assert_eq!(ops.queued(), 4);
        let mut earlier = Vec::new();
        let got = ops.retire_through(s, |op| earlier.push(op));
        assert!(matches!(got, Some(Op::Send { slot: 0 })));
        assert!(matches!(
            earlier.as_slice(),
            [Op::Write { chunk: 1 }, Op::Write { chunk: 2 }]
        ));
        assert_eq!(ops.queued(), 1);
        // retired ids are unknown now: nothing more is taken
        assert!(
            ops.retire_through(w1, |_| panic!("nothing queued before"))
                .is_none()
        );
        assert_eq!(ops.queued(), 1);
        assert!(matches!(
            ops.retire_through(r, |_| panic!("nothing queued before")),
            Some(Op::Read { itt: 7, .. })
        ));
        assert_eq!(ops.queued(), 0);
    }

    #[test]
    fn a_failed_post_takes_back_only_the_last_queued() {
        let mut ops = Ops::with_depth(4);
        let a = ops.insert(Op::Send { slot: 1 });
        let b = ops.insert(Op::Send { slot: 2 });
        ops.queue(a);
        ops.queue(b);
        assert!(ops.unqueue_last(a).is_none());
        assert!(matches!(ops.unqueue_last(b), Some(Op::Send { slot: 2 })));
        assert!(matches!(ops.unqueue_last(a), Some(Op::Send { slot: 1 })));
        assert_eq!(ops.queued(), 0);
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
