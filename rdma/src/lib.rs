//! Safe wrapper over the RDMA verbs (libibverbs) and the RDMA connection manager (librdmacm).
//!
//! This crate is the only place in numatgt with RDMA FFI. It goes through `rdma-mummy-sys`,
//! whose stubs load `libibverbs.so.1` and `librdmacm.so.1` at run time: when they are absent
//! every call fails with `EOPNOTSUPP` instead of the binary failing to start, so the daemon
//! keeps serving iSCSI over TCP. No iSCSI/iSER protocol logic belongs here.
//!
//! - [`devices`]: the RDMA devices, with node GUID, ports and NUMA node.
//! - [`cm`]: an RDMA CM event channel and a listener whose fd can be registered with mio.

#![warn(missing_docs)]

pub mod cm;
pub mod device;
mod error;

pub use cm::{CmEvent, CmEventKind, CmId, Listener};
pub use device::{Device, LinkLayer, Port, PortState, devices};
pub use error::{Error, Result};
