//! iSER transport (RFC 7145) for numatgt.
//!
//! - [`proto`]: the pure protocol logic (iSER header, Hello messages, CM private data, the
//!   iSER login keys, receive credits and RDMA data-movement planning). No I/O, no unsafe.
//!
//! The RDMA driver (CM listener, queue pairs, completion channels, memory registration)
//! will be a separate module of this crate built on top of [`proto`].

#![warn(missing_docs)]

pub mod proto;
