//! numatgtd as a library: the pieces of the daemon, so that `main.rs` stays a thin shell and
//! tests can start a daemon in-process.

pub mod alloc_count;
pub mod atomic;
pub mod backend;
pub mod cli;
pub mod dispatch;
pub mod event_loop;
pub mod listen;
pub mod mgmt;
pub mod registry;
pub mod reload;
pub mod runtime;
pub mod sd_notify;
