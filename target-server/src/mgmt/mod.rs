//! The management socket: tgt's tgtadm protocol on an AF_UNIX socket, so Debian's `tgtadm`
//! and `tgt-admin` (and `numatgtadm`) drive numatgtd. The `tgtadm_wire` crate is the codec,
//! `socket` the listener thread, `handlers` the modes and ops, `show` tgtd's output layouts.

pub(crate) mod dump;
pub(crate) mod handlers;
pub(crate) mod portals;
pub(crate) mod show;
pub mod socket;
pub mod upgrade_request;

use std::sync::Arc;

use crate::registry::{ConnControl, Registry};

/// Turns debug logging on (`true`) or back to the starting level (`false`).
pub type DebugSwitch = Arc<dyn Fn(bool) + Send + Sync>;

/// What request handlers work on.
#[derive(Clone)]
pub struct Ctx {
    pub(crate) registry: Arc<Registry>,
    /// Closes connections (forced logout, target delete --force).
    pub(crate) control: Arc<dyn ConnControl>,
    /// The NUMA block cache, to write a LUN's dirty blocks back before it goes away.
    pub(crate) cache: Option<Arc<cache::BlockCache>>,
    /// The configuration the daemon started with (global sections for `--dump`).
    pub(crate) base: Arc<config::Config>,
    /// `sys update debug=on|off` (None: the flag is only recorded).
    pub debug: Option<DebugSwitch>,
    /// Binds and closes portals at run time (None: not available).
    pub(crate) portals: Option<Arc<portals::PortalAcceptor>>,
    /// The configuration as loaded last (for reload).
    pub loaded: crate::reload::Shared,
    /// `--save-config`: the file every change is saved to (`crate::saved`); `None`: off.
    pub saved: Option<std::path::PathBuf>,
}

/// The outcome of one request: text for stdout, or tgtd's error code.
pub(crate) type Reply = Result<String, tgtadm_wire::ErrCode>;

/// `$TGT_IPC_SOCKET.<port>`, else `/var/run/tgtd/socket.<port>` (as tgtd and tgtadm).
pub fn socket_path(control_port: u16) -> std::path::PathBuf {
    let prefix = std::env::var("TGT_IPC_SOCKET")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/var/run/tgtd/socket".to_string());
    std::path::PathBuf::from(format!("{prefix}.{control_port}"))
}

impl Ctx {
    /// Make everything written to `lun` durable (cached dirty blocks first): before a LUN or
    /// its target is deleted, since the final sync at shutdown only sees registered LUNs.
    pub(crate) fn sync_lun(&self, lun: &crate::registry::Lun) -> std::io::Result<()> {
        crate::backend::storage::sync(self.cache.as_ref(), lun)
    }
}
