//! numatgtd as a library: the pieces of the daemon, so that `main.rs` stays a thin shell and
//! tests can start a daemon in-process.

pub mod alloc_count;
pub mod atomic;
pub mod cli;
pub mod dispatch;
pub mod event_loop;
pub mod flusher;
pub mod jobs;
pub mod listen;
pub mod mgmt;
pub mod payload;
pub mod pr_store;
pub mod registry;
pub mod reload;
pub mod runtime;
pub mod sanitize;
pub mod sd_notify;
pub mod selftest;
pub mod storage;
pub mod task_watch;
pub mod thin;
pub mod xcopy;
