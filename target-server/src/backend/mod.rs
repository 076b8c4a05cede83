//! The transport-neutral backend: everything a SCSI command does after the `scsi` crate has
//! decided what it means — reads and writes through the NUMA block cache or around it,
//! thin provisioning, EXTENDED COPY, SANITIZE, self-test, persistent reservation storage
//! (local files, or the cluster for LUNs several gateways share) and the write-back
//! flushers. It knows no socket and no event loop: work runs on the I/O
//! workers given in [`StorageCtx`], answers go back through a [`reply::Replier`] into the
//! transport's [`reply::CompletionSink`], and ending other sessions' tasks goes through
//! [`reply::TaskControl`].
//!
//! Imports run one way: `reply` ← the backend modules ← `dispatch` ← the event loop, which
//! drives every transport (TCP, iSER) through `crate::transport`. `tools/check-layers.py`
//! checks it.

pub mod changer;
pub mod flusher;
pub mod jobs;
pub mod landing;
pub mod locked;
pub mod passthrough;
pub mod payload;
pub mod pr;
pub mod pr_cluster;
pub mod pr_store;
pub mod reply;
pub mod sanitize;
pub mod selftest;
pub mod storage;
pub mod tape;
pub mod task_watch;
pub mod thin;
pub mod warm;
pub mod workers;
pub mod xcopy;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use cache::{BlockCache, Router};

use crate::registry::{Lun, Registry};
use jobs::Job;
use reply::TaskControl;

/// Where backend work runs: the I/O workers of each NUMA node.
pub trait Workers: Sync {
    /// Queue `job` on a worker of `node` (the last node for an out-of-range one).
    fn submit(&self, node: usize, job: Job);
    /// Jobs queued or running on `node`'s workers (the router's saturation test).
    fn pending(&self, node: usize) -> usize;
}

/// Where a command runs and what it may use.
pub struct StorageCtx<'a> {
    /// The I/O workers of every node.
    pub workers: &'a dyn Workers,
    /// The node of the event thread that owns the connection.
    pub node: usize,
    pub cache: Option<&'a Arc<BlockCache>>,
    pub router: Option<&'a Router>,
    /// The connection sends READ data straight out of pinned cache blocks, whichever node
    /// holds them (iSER: RDMA WRITEs from registered arenas, no CPU touching the bytes): a
    /// cached READ is then served where it arrived, never forwarded to the node holding its
    /// blocks (forwarding buys local memory copies; there is no copy to make local).
    pub sends_from_blocks: bool,
    /// The daemon's state directory (persistent reservation files).
    pub state_dir: Option<&'a std::path::Path>,
    /// Ends tasks of other sessions (PREEMPT AND ABORT).
    pub tasks: Option<&'a dyn TaskControl>,
    /// Every target of the daemon (EXTENDED COPY may name a LUN of another target).
    pub registry: Option<&'a Registry>,
}

impl<'a> StorageCtx<'a> {
    /// Queue `job` on this node's workers.
    pub fn submit(&self, job: Job) {
        self.workers.submit(self.node, job);
    }

    /// Queue a closure on this node's workers (rare commands: VERIFY, SYNCHRONIZE CACHE…).
    pub fn run(&self, f: impl FnOnce() + Send + 'static) {
        self.submit(Job::Other(Box::new(f)));
    }

    /// The cache `lun`'s I/O goes through (`cache: numa` LUNs of a daemon with a cache).
    pub fn cache_for(&self, lun: &Lun) -> Option<&'a Arc<BlockCache>> {
        self.cache.filter(|_| lun.caches_now())
    }
}
