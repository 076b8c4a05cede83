//! A shared receive queue (`ibv_srq`): one pool of posted receives that several queue pairs
//! of one protection domain draw from. A Send that arrives when the pool is empty is answered
//! with Receiver-Not-Ready and retried by the sender (the retry count comes from the CM
//! parameters), so a pool smaller than the sum of its queue pairs' windows slows a burst
//! down instead of losing it.
//!
//! The queue pair that consumed a receive reports it on its own receive completion queue;
//! a queue pair that goes to the error state flushes only the receive it was filling, which
//! the owner posts again (the pool's buffers belong to it, not to any queue pair).

use std::ptr::NonNull;
use std::sync::Arc;

use rdma_mummy_sys as ffi;

use crate::context::ProtectionDomain;
use crate::error::{Error, LIBIBVERBS, Result};
use crate::qp::Sge;

/// A shared receive queue (see the module documentation). Dropped after every queue pair
/// made on it (each holds an `Arc`).
pub struct SharedReceiveQueue {
    srq: NonNull<ffi::ibv_srq>,
    max_wr: u32,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: ibv_post_srq_recv is thread-safe in libibverbs (the provider serialises the
// queue); the wrapper holds no Rust-side mutable state; destruction is unique (drop).
unsafe impl Send for SharedReceiveQueue {}
// SAFETY: as above.
unsafe impl Sync for SharedReceiveQueue {}

impl SharedReceiveQueue {
    /// A shared receive queue of `max_wr` receives (one scatter/gather entry each) in `pd`.
    /// Fails on a device without shared receive queues (`max_srq` 0) or above its
    /// `max_srq_wr`.
    pub fn new(pd: &Arc<ProtectionDomain>, max_wr: u32) -> Result<Arc<SharedReceiveQueue>> {
        let mut attr = ffi::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ffi::ibv_srq_attr {
                max_wr,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: the PD is live; `attr` is a valid in/out attribute block (the real size is
        // written back).
        let srq = unsafe { ffi::ibv_create_srq(pd.as_ptr(), &mut attr) };
        let Some(srq) = NonNull::new(srq) else {
            return Err(Error::last("ibv_create_srq", LIBIBVERBS));
        };
        Ok(Arc::new(SharedReceiveQueue {
            srq,
            max_wr: attr.attr.max_wr,
            _pd: pd.clone(),
        }))
    }

    /// Receives the queue can hold posted at once (as the device granted it).
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// Whether it was made in `pd`.
    pub(crate) fn in_pd(&self, pd: &Arc<ProtectionDomain>) -> bool {
        Arc::ptr_eq(&self._pd, pd)
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_srq {
        self.srq.as_ptr()
    }

    /// Posts one receive into `sge`.
    pub fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<()> {
        crate::qp::with_recv_wr(wr_id, sge, |wr, bad| {
            // SAFETY: the SRQ is live; `wr` and its one-entry list live across the call
            // (the provider copies them); the device checks the entry against its lkey's
            // region.
            let rc = unsafe { ffi::ibv_post_srq_recv(self.srq.as_ptr(), wr, bad) };
            crate::qp::post_result("ibv_post_srq_recv", rc)
        })
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // SAFETY: destroyed once, after every queue pair on it (each holds an Arc to it),
        // before the PD (held here).
        // (it fails only while a queue pair still uses it, which the Arcs rule out)
        unsafe { ffi::ibv_destroy_srq(self.srq.as_ptr()) };
    }
}

impl std::fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedReceiveQueue(max_wr {})", self.max_wr)
    }
}
