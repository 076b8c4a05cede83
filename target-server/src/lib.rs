//! numatgtd as a library: the pieces of the daemon, so that `main.rs` stays a thin shell and
//! tests can start a daemon in-process.
//!
//! Only what `main.rs` uses is public (command line, logging, runtime, management socket,
//! reload, sd_notify, the allocation counter, the sanitize rate limit); the data path, the
//! registry and the rest are crate-private, so nothing outside the daemon builds on them.

#![warn(missing_docs)]

pub mod alloc_count;
pub(crate) mod alua;
pub(crate) mod backend;
pub mod cli;
pub(crate) mod conn_id;
pub(crate) mod dispatch;
pub(crate) mod event_loop;
/// Entry points of the fuzz targets (`fuzz/`): not an API.
#[doc(hidden)]
pub mod fuzzing;
pub mod handover;
pub(crate) mod io_stats;
pub(crate) mod limits;
pub mod logging;
pub(crate) mod metrics;
pub mod mgmt;
pub(crate) mod pr_shared;
pub(crate) mod proto_stats;
pub(crate) mod qos;
pub(crate) mod range_locks;
pub mod rdma_probe;
pub(crate) mod registry;
pub mod reload;
pub mod runtime;
pub mod saved;
pub mod sd_notify;
pub(crate) mod serial_work;
pub(crate) mod sgio;
pub(crate) mod ship;
pub(crate) mod syslog;
pub(crate) mod transport;
pub(crate) mod upgrade_stats;

pub use backend::sanitize::set_rate_limit_mib as set_sanitize_rate_limit_mib;
pub use metrics::MetricsError;
