//! Safe wrapper over the RDMA verbs (libibverbs) and the RDMA connection manager (librdmacm).
//!
//! This crate is the only place in numatgt with RDMA FFI. It goes through `rdma-mummy-sys`,
//! whose stubs load `libibverbs.so.1` and `librdmacm.so.1` at run time: when they are absent
//! every call fails with `EOPNOTSUPP` instead of the binary failing to start, so the daemon
//! keeps serving iSCSI over TCP. No iSCSI/iSER protocol logic belongs here.
//!
//! - [`devices`]: the RDMA devices, with node GUID, ports and NUMA node.
//! - [`cm`]: an RDMA CM event channel and a listener whose fd can be registered with mio;
//!   the client side as far as tests need it.
//! - [`context`]: the device context of a CM id and its protection domain.
//! - [`mr`]: memory regions that own (an `Arc` of) the memory they cover.
//! - [`cq`]: a completion queue with its own completion channel (fd for mio).
//! - [`qp`]: a queue pair on a CM id: accept/connect/disconnect, receives, Sends (with
//!   Invalidate, inline), RDMA READ and WRITE.
//! - [`srq`]: a shared receive queue several queue pairs draw their receives from.
//! - [`batch`]: several send-queue requests posted with one call (one doorbell).

#![warn(missing_docs)]

pub mod batch;
pub mod cm;
pub mod context;
pub mod cq;
pub mod device;
mod error;
pub mod mr;
pub mod qp;
pub mod srq;

pub use batch::{BatchError, MAX_BATCH, SendBatch};
pub use cm::{CmEvent, CmEventKind, CmId, EventChannel, Listener};
pub use context::{Context, ProtectionDomain, resync_devices};
pub use cq::{Completion, CompletionQueue, WcOpcode, WcStatus};
pub use device::{Device, LinkLayer, Port, PortState, devices};
pub use error::{Error, Result};
pub use mr::{Access, Buffer, MemoryHolder, MemoryRegion};
pub use qp::{Connection, QpCaps, Remote, SendOptions, Sge};
pub use srq::SharedReceiveQueue;
