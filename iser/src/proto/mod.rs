//! Sans-I/O iSER protocol logic (RFC 7145, as the Linux ib_iser initiator speaks it).
//!
//! Bytes and numbers in, plain values out: nothing here touches a device, a socket, a
//! clock or a thread, so everything is unit- and property-tested without RDMA hardware.
//!
//! - [`header`]: the 28-byte iSER header before every iSCSI BHS, and Hello / HelloReply.
//! - [`cm`]: the RDMA CM private data of the connection request and of the target's accept.
//! - [`keys`]: the iSER login keys (RFC 7145 §6) and their negotiation.
//! - [`credits`]: receive accounting and the command window the target may grant.
//! - [`datamover`]: the iSER keys as `iscsi-proto`'s login hook, and buffer conversions.
//! - [`plan`]: RDMA WRITE (Data-In) and RDMA READ (Data-Out) work-request planning.

#![forbid(unsafe_code)]

pub mod cm;
pub mod credits;
pub mod datamover;
pub mod header;
pub mod keys;
pub mod plan;

pub use cm::{CmError, CmRequest, Negotiated};
pub use credits::{CreditError, Credits, CreditsConfig};
pub use datamover::{IserLoginKeys, IserParamsHandle};
pub use header::{ControlHeader, HeaderError, Hello, HelloReply, IserMessage, RemoteBuf};
pub use keys::{IserKeyError, IserLimits, IserNegotiation, IserNegotiator, IserParams};
pub use plan::{LocalSpan, PlanError, RdmaRead, RdmaWrite, Sge, plan_read, plan_write};
