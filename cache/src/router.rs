//! The affinity router: seed 004 Algorithm 1 with two policy knobs.
//!
//! For a request `(lun, offset, len)` it sums, per node, the bytes whose cache blocks are
//! homed there, and picks the node with the most (ties go to the connection's own node, so
//! a tie never costs a forward). Because a whole group of `group_blocks` neighbouring blocks
//! shares one partition, the sum steps over group-sized pieces rather than single blocks:
//! the result is identical to the seed's per-block loop ([`Router::affinity_per_block`], kept
//! as the reference) but the cost no longer grows with the number of sub-requests inside a
//! group (the seed noted that growth as a bottleneck).
//!
//! Knobs ([`RouterPolicy`]):
//! * `min_forward_bytes`: requests shorter than this are served on the connection's node
//!   without computing anything (the seed measured forwarding to cost more than it saved up
//!   to 32 KiB);
//! * `max_queue`: a node whose queue is longer than this is not sent more work (so one hot
//!   node cannot become a single-core bottleneck, cf. SPDK issue 3719); the connection's own
//!   node is always allowed, since the task is already there.
//!
//! A forwarded task must carry [`RouteRequest::already_routed`] = true on the node it lands
//! on, which then serves it without routing again (seed §5.2.4, third placement).
//! Routing never allocates: the per-node sums live in a fixed array of [`MAX_NODES`].

use crate::geometry::{Geometry, MAX_NODES};

/// Router policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterPolicy {
    /// Requests shorter than this are served where they arrived.
    pub min_forward_bytes: u64,
    /// Nodes with a longer queue than this receive no forwarded work.
    pub max_queue: usize,
}

impl Default for RouterPolicy {
    /// 32 KiB (seed 004 §5.2.4) and 128 queued tasks; both to be tuned by benchmark.
    fn default() -> Self {
        RouterPolicy {
            min_forward_bytes: 32 << 10,
            max_queue: 128,
        }
    }
}

/// One request to route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRequest {
    pub lun: u32,
    /// Byte offset in the LUN.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Node of the thread that holds the task now (the connection's node, or the node it
    /// was forwarded to).
    pub conn_node: usize,
    /// The task was forwarded once already: serve it here.
    pub already_routed: bool,
}

/// Why a node was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteReason {
    /// Forwarded before: never routed twice.
    AlreadyRouted,
    /// Shorter than `min_forward_bytes`.
    Small,
    /// The connection's node holds the most bytes (or ties for most).
    Local,
    /// Another node holds more bytes: forward.
    Affinity,
    /// A node holding more bytes is over `max_queue`: served here instead.
    Overloaded,
    /// The byte range overflows: served here (the SCSI layer rejects it).
    BadRange,
}

/// The routing decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Node to serve the request on.
    pub node: usize,
    /// True when `node` differs from the connection's node: forward the task, marked
    /// `already_routed`.
    pub forward: bool,
    pub reason: RouteReason,
}

/// Per-node byte sums for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Affinity {
    pub bytes: [u64; MAX_NODES],
    /// Number of pieces summed (groups for [`Router::affinity`], blocks for the per-block
    /// reference).
    pub pieces: usize,
}

/// Algorithm 1 over a cache geometry.
#[derive(Debug, Clone, Copy)]
pub struct Router {
    geometry: Geometry,
    policy: RouterPolicy,
}

impl Router {
    pub fn new(geometry: Geometry, policy: RouterPolicy) -> Self {
        Router { geometry, policy }
    }
    pub fn policy(&self) -> RouterPolicy {
        self.policy
    }
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// Bytes of `[offset, offset + len)` per home node, stepping over partition groups.
    /// `None` when the range overflows.
    pub fn affinity(&self, lun: u32, offset: u64, len: u64) -> Option<Affinity> {
        let end = offset.checked_add(len)?;
        let g = self.geometry.group_bytes();
        let mut a = Affinity {
            bytes: [0; MAX_NODES],
            pieces: 0,
        };
        let mut pos = offset;
        while pos < end {
            let group_end = (pos / g).saturating_add(1).saturating_mul(g);
            let piece_end = group_end.min(end);
            a.bytes[self.geometry.home_node_of_offset(lun, pos)] += piece_end - pos;
            a.pieces += 1;
            pos = piece_end;
        }
        Some(a)
    }

    /// The seed's literal loop: one sub-request per cache block. Same result as
    /// [`affinity`](Self::affinity); kept as the reference for tests and the benchmark.
    pub fn affinity_per_block(&self, lun: u32, offset: u64, len: u64) -> Option<Affinity> {
        let mut a = Affinity {
            bytes: [0; MAX_NODES],
            pieces: 0,
        };
        for s in self.geometry.spans(offset, len).ok()? {
            a.bytes[self.geometry.home_node(lun, s.block_no())] += s.len() as u64;
            a.pieces += 1;
        }
        Some(a)
    }

    /// Route a request. `queue_len(node)` gives a node's current queue length; it is only
    /// asked about nodes that would otherwise be chosen.
    pub fn route(&self, req: &RouteRequest, queue_len: impl Fn(usize) -> usize) -> Route {
        let conn = req.conn_node.min(self.geometry.nodes() - 1);
        let here = |reason| Route {
            node: conn,
            forward: false,
            reason,
        };
        if req.already_routed {
            return here(RouteReason::AlreadyRouted);
        }
        if req.len < self.policy.min_forward_bytes || self.geometry.nodes() == 1 {
            return here(RouteReason::Small);
        }
        let Some(aff) = self.affinity(req.lun, req.offset, req.len) else {
            return here(RouteReason::BadRange);
        };
        self.choose(&aff, conn, queue_len)
    }

    /// Pick the node from per-node sums (lines 11-12 of Algorithm 1, plus the knobs).
    pub fn choose(&self, aff: &Affinity, conn: usize, queue_len: impl Fn(usize) -> usize) -> Route {
        let nodes = self.geometry.nodes();
        let conn = conn.min(nodes - 1);
        let mut best = conn;
        let mut best_bytes = aff.bytes[conn];
        let mut skipped = false;
        for (n, &b) in aff.bytes.iter().enumerate().take(nodes) {
            if n == conn || b <= best_bytes {
                continue;
            }
            if queue_len(n) > self.policy.max_queue {
                skipped = true;
                continue;
            }
            best = n;
            best_bytes = b;
        }
        if best != conn {
            Route {
                node: best,
                forward: true,
                reason: RouteReason::Affinity,
            }
        } else {
            Route {
                node: conn,
                forward: false,
                reason: if skipped {
                    RouteReason::Overloaded
                } else {
                    RouteReason::Local
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn router(bs: usize, group: u64, ppn: usize, nodes: usize, min: u64, maxq: usize) -> Router {
        Router::new(
            Geometry::new(bs, 512, group, ppn, nodes).unwrap(),
            RouterPolicy {
                min_forward_bytes: min,
                max_queue: maxq,
            },
        )
    }

    fn req(offset: u64, len: u64, conn: usize) -> RouteRequest {
        RouteRequest {
            lun: 0,
            offset,
            len,
            conn_node: conn,
            already_routed: false,
        }
    }

    const IDLE: fn(usize) -> usize = |_| 0;

    /// Seed Figure 5-4: a request decomposed into block-aligned sub-requests on a two-node
    /// host, most of whose bytes are in partitions of node 0 -> node 0, even when it arrives
    /// on node 1.
    #[test]
    fn figure_5_4_goes_to_node_0() {
        // 4 KiB blocks, one block per group, 2 partitions per node: partition = block mod 4,
        // node = partition mod 2, so even blocks live on node 0, odd blocks on node 1.
        let r = router(4096, 1, 2, 2, 0, usize::MAX);
        // Starts in the middle of block 1 (node 1: 2 KiB), covers blocks 2, 3, 4 (node 0,
        // node 1, node 0: 4 KiB each) and 1 KiB of block 5 (node 1): node 0 has 8 KiB,
        // node 1 has 7 KiB.
        let offset = 4096 + 2048;
        let len = 2048 + 3 * 4096 + 1024;
        let a = r.affinity_per_block(0, offset, len).unwrap();
        assert_eq!(
            (a.bytes[0], a.bytes[1], a.pieces),
            (8192, 2048 + 4096 + 1024, 5)
        );
        let route = r.route(&req(offset, len, 1), IDLE);
        assert_eq!(
            route,
            Route {
                node: 0,
                forward: true,
                reason: RouteReason::Affinity
            }
        );
        assert_eq!(
            r.route(&req(offset, len, 0), IDLE).reason,
            RouteReason::Local
        );
    }

    #[test]
    fn ties_stay_on_the_connection_node() {
        let r = router(4096, 1, 1, 2, 0, usize::MAX);
        // Blocks 0 and 1: 4 KiB on each node.
        for conn in 0..2 {
            let route = r.route(&req(0, 8192, conn), IDLE);
            assert_eq!((route.node, route.forward), (conn, false));
        }
        // Three nodes, tie between the two non-connection nodes: the lower index wins.
        let r = router(4096, 1, 1, 3, 0, usize::MAX);
        let route = r.route(&req(4096, 8192, 0), IDLE); // blocks 1 (node 1) and 2 (node 2)
        assert_eq!(route.node, 1);
    }

    #[test]
    fn small_requests_are_not_routed() {
        let r = router(4096, 1, 1, 2, 32 << 10, usize::MAX);
        // 28 KiB, all but one block on node 1... still served locally.
        let route = r.route(&req(4096, 28 << 10, 0), IDLE);
        assert_eq!(route.reason, RouteReason::Small);
        assert!(!route.forward);
        // At the threshold it is routed.
        let r = router(4096, 8, 1, 2, 32 << 10, usize::MAX);
        let route = r.route(&req(32 << 10, 32 << 10, 0), IDLE);
        assert_eq!((route.node, route.reason), (1, RouteReason::Affinity));
    }

    #[test]
    fn max_queue_avoids_hot_node() {
        let r = router(4096, 1, 1, 3, 0, 4);
        // node = block mod 3; blocks 1 (all) and 2 (half): more bytes on node 1 than node 2.
        let offset = 4096;
        let len = 4096 + 2048; // node 1: 4096, node 2: 2048, node 0: 0
        assert_eq!(r.route(&req(offset, len, 0), IDLE).node, 1);
        let busy1 = |n: usize| if n == 1 { 5 } else { 0 };
        let route = r.route(&req(offset, len, 0), busy1);
        assert_eq!((route.node, route.reason), (2, RouteReason::Affinity));
        let all_busy = |n: usize| if n == 0 { 0 } else { 99 };
        let route = r.route(&req(offset, len, 0), all_busy);
        assert_eq!(
            (route.node, route.forward, route.reason),
            (0, false, RouteReason::Overloaded)
        );
    }

    #[test]
    fn forwarded_task_is_never_routed_again() {
        let r = router(4096, 1, 1, 2, 0, usize::MAX);
        let mut q = req(4096, 4096, 0);
        let first = r.route(&q, IDLE);
        assert!(first.forward);
        q.conn_node = first.node;
        q.already_routed = true;
        let again = r.route(&q, IDLE);
        assert_eq!(
            (again.node, again.forward, again.reason),
            (1, false, RouteReason::AlreadyRouted)
        );
    }

    #[test]
    fn bad_input_does_not_panic() {
        let r = router(4096, 1, 1, 2, 0, usize::MAX);
        assert_eq!(
            r.route(&req(u64::MAX, 10, 0), IDLE).reason,
            RouteReason::BadRange
        );
        assert_eq!(r.route(&req(0, 8192, 99), IDLE).node, 1);
        assert_eq!(r.route(&req(0, 0, 0), IDLE).reason, RouteReason::Local);
    }

    proptest! {
        #[test]
        fn group_stepping_equals_per_block(
            offset in 0u64..(1 << 34), len in 0u64..(2 << 20), lun in 0u32..4,
            shift in 12u32..=17, group in 1u64..20, ppn in 1usize..5, nodes in 1usize..6,
        ) {
            let r = router(1 << shift, group, ppn, nodes, 0, usize::MAX);
            let a = r.affinity(lun, offset, len).unwrap();
            let b = r.affinity_per_block(lun, offset, len).unwrap();
            prop_assert_eq!(a.bytes, b.bytes);
            prop_assert_eq!(a.bytes.iter().sum::<u64>(), len);
        }

        #[test]
        fn chosen_node_has_max_eligible_bytes(
            offset in 0u64..(1 << 30), len in 1u64..(1 << 20), conn in 0usize..4,
            queues in prop::array::uniform4(0usize..10), maxq in 0usize..10,
        ) {
            let r = router(4096, 2, 2, 4, 0, maxq);
            let a = r.affinity(0, offset, len).unwrap();
            let route = r.route(&req(offset, len, conn), |n| queues[n]);
            let eligible = |n: usize| n == conn || queues[n] <= maxq;
            prop_assert!(eligible(route.node));
            for n in 0..4 {
                if eligible(n) {
                    prop_assert!(a.bytes[route.node] >= a.bytes[n]);
                }
            }
            if a.bytes[route.node] == a.bytes[conn] {
                prop_assert_eq!(route.node, conn);
            }
            prop_assert_eq!(route.forward, route.node != conn);
        }
    }
}
