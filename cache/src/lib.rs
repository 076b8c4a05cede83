//! The `cache` crate: NUMA topology, aligned node-local buffers, O_DIRECT backing stores and
//! per-node I/O worker pools. It knows blocks and bytes, never iSCSI or SCSI.

pub mod aligned;
pub mod backing;
pub mod io_pool;
pub mod topology;

pub use aligned::AlignedBuf;
pub use backing::{BackingError, BackingStore, OpenOptions as BackingOptions};
pub use io_pool::{IoPool, IoRequest};
pub use topology::{Node, Topology};
