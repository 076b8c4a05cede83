//! Protocol events counted per target: login outcomes, CHAP failures, task management
//! functions, Reject PDUs by reason, digest errors. These are rare (never per I/O), so plain
//! shared atomics do; a connection keeps its target's block once logged in. Events before a
//! target is known (discovery, a login naming no or an unknown target) count under the
//! target `""`, so an initiator cannot grow the label set.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// `result` label values of `numatgt_logins_total`.
pub const LOGIN_RESULTS: [&str; 6] = [
    "success",
    "auth_failure",
    "not_authorized",
    "not_found",
    "refused",
    "error",
];

/// `function` label values of `numatgt_task_management_total`.
pub const TMF_FUNCTIONS: [&str; 9] = [
    "abort_task",
    "abort_task_set",
    "clear_aca",
    "clear_task_set",
    "lun_reset",
    "target_warm_reset",
    "target_cold_reset",
    "task_reassign",
    "other",
];

/// `reason` label values of `numatgt_pdus_rejected_total`.
pub const REJECT_REASONS: [&str; 11] = [
    "data_digest",
    "snack_reject",
    "protocol_error",
    "command_not_supported",
    "immediate_command_reject",
    "task_in_progress",
    "invalid_data_ack",
    "invalid_pdu_field",
    "out_of_resources",
    "waiting_for_logout",
    "other",
];

/// The counters of one target.
#[derive(Debug, Default)]
pub struct TargetEvents {
    logins: [AtomicU64; LOGIN_RESULTS.len()],
    auth_failures: AtomicU64,
    tmf: [AtomicU64; TMF_FUNCTIONS.len()],
    rejects: [AtomicU64; REJECT_REASONS.len()],
    digest_errors: AtomicU64,
}

/// A copy of one target's counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TargetEventCounts {
    pub logins: [u64; LOGIN_RESULTS.len()],
    pub auth_failures: u64,
    pub tmf: [u64; TMF_FUNCTIONS.len()],
    pub rejects: [u64; REJECT_REASONS.len()],
    pub digest_errors: u64,
}

fn index(list: &[&str], label: &str) -> usize {
    list.iter()
        .position(|l| *l == label)
        .unwrap_or(list.len() - 1)
}

impl TargetEvents {
    /// A login ended with `result` (one of [`LOGIN_RESULTS`]; anything else counts as
    /// `error`). `auth_failure` also counts in the CHAP failures.
    pub fn login(&self, result: &str) {
        self.logins[index(&LOGIN_RESULTS, result)].fetch_add(1, Ordering::Relaxed);
        if result == "auth_failure" {
            self.auth_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A task management request of `function` (one of [`TMF_FUNCTIONS`]).
    pub fn task_management(&self, function: &str) {
        self.tmf[index(&TMF_FUNCTIONS, function)].fetch_add(1, Ordering::Relaxed);
    }

    /// A Reject PDU was sent for `reason` (one of [`REJECT_REASONS`]).
    pub fn rejected(&self, reason: &str) {
        self.rejects[index(&REJECT_REASONS, reason)].fetch_add(1, Ordering::Relaxed);
    }

    /// A header or data digest did not match.
    pub fn digest_error(&self) {
        self.digest_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn counts(&self) -> TargetEventCounts {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TargetEventCounts {
            logins: std::array::from_fn(|i| l(&self.logins[i])),
            auth_failures: l(&self.auth_failures),
            tmf: std::array::from_fn(|i| l(&self.tmf[i])),
            rejects: std::array::from_fn(|i| l(&self.rejects[i])),
            digest_errors: l(&self.digest_errors),
        }
    }
}

/// Every target's counters, by target name (`""`: no target known).
#[derive(Debug, Default)]
pub struct ProtoStats {
    targets: parking_lot::Mutex<BTreeMap<String, Arc<TargetEvents>>>,
}

impl ProtoStats {
    /// The counters of target `iqn` (`""` for none), made on first use. Callers pass only
    /// names of configured targets, or `""`.
    pub fn target(&self, iqn: &str) -> Arc<TargetEvents> {
        let mut m = self.targets.lock();
        if let Some(t) = m.get(iqn) {
            return Arc::clone(t);
        }
        let t = Arc::new(TargetEvents::default());
        m.insert(iqn.to_string(), Arc::clone(&t));
        t
    }

    /// Every target's counts, by name.
    pub fn all(&self) -> Vec<(String, TargetEventCounts)> {
        self.targets
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.counts()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_label_and_unknown_labels_fall_into_the_last() {
        let s = ProtoStats::default();
        let t = s.target("iqn.x");
        t.login("success");
        t.login("auth_failure");
        t.login("something new");
        t.task_management("lun_reset");
        t.rejected("protocol_error");
        t.rejected("??");
        t.digest_error();
        let all = s.all();
        assert_eq!(all.len(), 1);
        let c = &all[0].1;
        assert_eq!(c.logins, [1, 1, 0, 0, 0, 1]);
        assert_eq!(c.auth_failures, 1);
        assert_eq!(c.tmf[4], 1);
        assert_eq!(c.rejects[2], 1);
        assert_eq!(c.rejects[10], 1);
        assert_eq!(c.digest_errors, 1);
        assert!(Arc::ptr_eq(&s.target("iqn.x"), &t));
    }

    #[test]
    fn the_protocol_crate_labels_are_all_listed() {
        use iscsi_proto::login::LoginFailure as L;
        for r in iscsi_proto::pdu::RejectReason::ALL {
            assert!(REJECT_REASONS.contains(&r.label()), "{}", r.label());
        }
        for l in [
            L::AuthFailure,
            L::NotAuthorized,
            L::NotFound,
            L::Refused,
            L::Error,
        ] {
            assert!(LOGIN_RESULTS.contains(&l.label()), "{}", l.label());
        }
        for code in 0..=255u8 {
            let f = iscsi_proto::TmfFunction::from_code(code);
            assert!(TMF_FUNCTIONS.contains(&f.label()), "{}", f.label());
        }
    }
}
