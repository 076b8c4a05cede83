//! I/O shipping between the gateways of an RBD LUN: a gateway that does not own the LUN
//! serves its active/non-optimized paths by shipping each media command (decoded by its
//! own `scsi` emulation: unit attentions, reservations and ALUA checked where the command
//! arrived) to the owner over a gateway-to-gateway link, so the LUN moves only when its
//! owner fails, on SET TARGET PORT GROUPS, or when the administrator moves it, and the
//! owner's NUMA write-back cache stays the one copy.
//!
//! - `wire.rs`: the link's messages and their bytes (sans I/O);
//! - `frames.rs`: frames on the link's stream (buffered reads, batched writes), both ends;
//! - `link.rs`: one link to an owner (the non-owner's side);
//! - `route.rs`: which link serves which LUN; publishing and finding link servers through
//!   the LUN's ownership record;
//! - `serve.rs`: the owner's side (listener, token check, shipped actions run on the
//!   backend);
//! - `stats.rs`: the counters the metrics show.
//!
//! Imports run one way: `dispatch` names `route`, `link` and `wire`; `serve` names
//! `dispatch`; nothing here below `serve` names it.

mod frames;
pub mod link;
pub mod route;
pub mod serve;
pub mod stats;
pub mod wire;
