//! The `cache` crate: NUMA topology, aligned node-local buffers, the backing stores (one
//! template, one module per store: file/block device, RBD, null; `store`), per-node I/O
//! worker pools, node-bound memory arenas, the partitioned NUMA-aware block cache, its
//! coherence with the backing stores (`coherence`) and the affinity router (seed 004
//! chapter 5.2). It knows blocks and bytes, never iSCSI or SCSI.

pub mod admission;
pub mod aligned;
pub mod arena;
mod bits;
pub mod block_cache;
pub mod coherence;
pub mod counters;
pub mod geometry;
pub mod io_pool;
pub mod memory_file;
pub mod op_latency;
pub mod partition;
pub mod router;
pub mod store;
pub mod topology;
pub mod uring;

pub use aligned::AlignedBuf;
pub use arena::{
    ArenaError, ArenaOptions, BindPolicy, Binding, Memory, NodeArena, PageKind, placement,
};
pub use block_cache::{
    BlockCache, CacheConfig, CacheError, DirtyScan, KeptBlock, MemoryKind, MemoryLayout,
};
pub use coherence::BlockList;
pub use counters::{CounterSnapshot, NodeCounters};
pub use geometry::{BlockSpan, Geometry, GeometryError, MAX_NODES, RangeError, Spans};
pub use io_pool::{IoJob, IoPool, IoRequest};
pub use op_latency::{LATENCY_BOUNDS_NS, LATENCY_BUCKETS, OpHistogram, OpLatency, StoreOp};
pub use partition::{
    BlockKey, BlockRef, DirtyProbe, DirtyRange, Fill, FillRaced, FillRun, Landing, Lookup,
    Partition, PartitionStats, ReadAhead, UpdateOutcome, WriteOutcome,
};
pub use router::{Affinity, Route, RouteReason, RouteRequest, Router, RouterPolicy};
pub use store::{
    BackingError, BackingStore, Caps, OpenOptions as BackingOptions, OpenRequest, ReadEngine,
    Store, create_sparse,
};
pub use topology::{Node, Topology};
