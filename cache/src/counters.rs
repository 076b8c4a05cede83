//! Per-node cache counters: plain relaxed atomics, updated by the partitions and by the server
//! (which node served which bytes, forwards), read by the metrics exporter as snapshots.

use std::sync::atomic::{AtomicU64, Ordering};

/// The live counters of one node (the node that is *home* to the blocks concerned, except
/// for the `served_*` and `forwards_*` counters, which count where the work ran).
#[derive(Debug, Default)]
pub struct NodeCounters {
    /// Lookups whose wanted sectors were all valid.
    pub hits: AtomicU64,
    /// Lookups that returned a fill (some wanted sector missing).
    pub misses: AtomicU64,
    /// Clean blocks dropped to make room.
    pub evictions: AtomicU64,
    /// Read misses not admitted into a full partition (read straight from the disk).
    pub bypassed: AtomicU64,
    /// Bytes of dirty sectors in blocks homed on this node.
    pub dirty_bytes: AtomicU64,
    /// Lookups or writes that found no reusable slot (the caller bypasses the cache).
    pub no_space: AtomicU64,
    /// Lookups or writes that met a block being filled (the caller retries or bypasses).
    pub busy: AtomicU64,
    /// Write-back writes refused because the node's dirty bytes passed the limit.
    pub throttled: AtomicU64,
    /// Bytes served from cache blocks homed on the node that served them.
    pub served_local_bytes: AtomicU64,
    /// Bytes served by this node from cache blocks homed on another node.
    pub served_remote_bytes: AtomicU64,
    /// Tasks this node forwarded to another node.
    pub forwards_out: AtomicU64,
    /// Tasks this node received from another node.
    pub forwards_in: AtomicU64,
    /// Blocks homed on this node that are in the cache (mapped).
    pub cached_blocks: AtomicU64,
    /// Dirty bytes written back to the backing stores (flushed and marked clean).
    pub writeback_bytes: AtomicU64,
    /// Tasks this node forwarded, by destination node (sized at cache creation; empty in a
    /// `Default` value).
    pub forwards_to: Box<[AtomicU64]>,
}

/// A copy of [`NodeCounters`] at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CounterSnapshot {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub bypassed: u64,
    pub dirty_bytes: u64,
    pub no_space: u64,
    pub busy: u64,
    pub throttled: u64,
    pub served_local_bytes: u64,
    pub served_remote_bytes: u64,
    pub forwards_out: u64,
    pub forwards_in: u64,
    pub cached_blocks: u64,
    pub writeback_bytes: u64,
}

impl NodeCounters {
    /// Counters of a node in a cache of `nodes` nodes.
    pub fn for_nodes(nodes: usize) -> NodeCounters {
        NodeCounters {
            forwards_to: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            ..NodeCounters::default()
        }
    }

    /// Tasks forwarded to each node.
    pub fn forwards_to(&self) -> Vec<u64> {
        self.forwards_to
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    pub(crate) fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Ordering::Relaxed);
    }

    pub(crate) fn sub(c: &AtomicU64, v: u64) {
        c.fetch_sub(v, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> CounterSnapshot {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            hits: l(&self.hits),
            misses: l(&self.misses),
            evictions: l(&self.evictions),
            bypassed: l(&self.bypassed),
            dirty_bytes: l(&self.dirty_bytes),
            no_space: l(&self.no_space),
            busy: l(&self.busy),
            throttled: l(&self.throttled),
            served_local_bytes: l(&self.served_local_bytes),
            served_remote_bytes: l(&self.served_remote_bytes),
            forwards_out: l(&self.forwards_out),
            forwards_in: l(&self.forwards_in),
            cached_blocks: l(&self.cached_blocks),
            writeback_bytes: l(&self.writeback_bytes),
        }
    }
}
