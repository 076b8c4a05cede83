//! What the live upgrades of this daemon did (`crate::handover`), for the metrics: how many
//! happened since the process started (carried from executable to executable), and the
//! figures of the last one. Written once per upgrade by the executable that took over.

use std::sync::Mutex;

/// The last upgrade's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LastUpgrade {
    /// Upgrades since the process started, this one included.
    pub count: u64,
    /// Seconds no executable served (from the quiesce to the new executable serving).
    pub paused_s: f64,
    /// Seconds the sessions took to log out (or until the wait ended).
    pub quiesce_s: f64,
    /// Seconds of the old executable's stop: write-back, sync, close.
    pub writeback_s: f64,
    /// Connections moved with their sessions (no logout).
    pub moved: u64,
    /// Connections asked to log out.
    pub asked: u64,
    /// Connections still open when the wait ended, closed.
    pub closed: u64,
}

static LAST: Mutex<Option<LastUpgrade>> = Mutex::new(None);

/// Records the upgrade that brought this executable in.
pub fn record(u: LastUpgrade) {
    *LAST.lock().unwrap_or_else(|p| p.into_inner()) = Some(u);
}

/// The last upgrade, if this process went through one.
pub fn last() -> Option<LastUpgrade> {
    *LAST.lock().unwrap_or_else(|p| p.into_inner())
}
