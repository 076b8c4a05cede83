//! The start-up RDMA probe: which RDMA devices this host has, logged once, and whether the
//! iSER LLD is `ready` or `error` in `tgtadm --op show --mode sys` / `--mode lld`.
//!
//! Without an RDMA device (or rdma-core, or the `iser` feature) numatgtd serves iSCSI over
//! TCP only; nothing here stops the daemon.

use std::sync::atomic::{AtomicBool, Ordering};

static ISER_READY: AtomicBool = AtomicBool::new(false);

/// `ready` when the probe found an RDMA device, else `error` (as tgtd prints an LLD that
/// failed to initialise).
pub fn iser_state() -> &'static str {
    if ISER_READY.load(Ordering::Relaxed) {
        "ready"
    } else {
        "error"
    }
}

/// Looks for RDMA devices, logs what it found, and records the iSER LLD state. Returns
/// the log line (for tests).
pub fn probe() -> String {
    let (ready, line) = find();
    ISER_READY.store(ready, Ordering::Relaxed);
    if ready {
        tracing::info!("{line}");
    } else {
        tracing::warn!("{line}");
    }
    line
}

#[cfg(feature = "iser")]
fn find() -> (bool, String) {
    match rdma::devices() {
        Ok(devs) => {
            let list = devs
                .iter()
                .map(|d| match d.numa_node {
                    Some(n) => format!("{} (node {n})", d.name),
                    None => format!("{} (node unknown)", d.name),
                })
                .collect::<Vec<_>>()
                .join(", ");
            (true, format!("iSER: RDMA devices: {list}"))
        }
        Err(e) => (
            false,
            format!("iSER unavailable: {e}; serving iSCSI over TCP only"),
        ),
    }
}

#[cfg(not(feature = "iser"))]
fn find() -> (bool, String) {
    (
        false,
        "iSER: not built in; serving iSCSI over TCP only".to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_state_matches_its_line() {
        let line = probe();
        let ready = line.starts_with("iSER: RDMA devices: ");
        assert_eq!(
            iser_state(),
            if ready { "ready" } else { "error" },
            "{line}"
        );
        assert!(
            ready || line.ends_with("serving iSCSI over TCP only"),
            "{line}"
        );
    }
}
