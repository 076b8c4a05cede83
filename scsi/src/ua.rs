//! Unit attention conditions (SAM-5 5.14, SPC-4 5.9.11 and 6.39): the conditions this
//! logical unit establishes, and the per-I_T-nexus queue that holds them.
//!
//! Ordering: reset-class conditions (additional sense code 29h) are reported before any
//! other, and establishing one discards everything queued before it (the reset returned
//! the logical unit to its initial state, so older conditions describe state that no longer
//! exists). Other conditions are reported oldest first; a condition already queued is not
//! queued twice. The queue is bounded: past [`MAX_QUEUED`] the oldest non-reset condition
//! is dropped (SAM-5 allows a logical unit to lose conditions it cannot queue).

use std::collections::VecDeque;

use crate::sense::{Sense, key};

/// A unit attention condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnitAttention {
    /// 29h/00h POWER ON, RESET, OR BUS DEVICE RESET OCCURRED: a new I_T nexus after the
    /// logical unit was created, or a target (hard) reset.
    PowerOnReset,
    /// 29h/03h BUS DEVICE RESET FUNCTION OCCURRED: LOGICAL UNIT RESET.
    LuReset,
    /// 29h/07h I_T NEXUS LOSS OCCURRED: an initiator port that had a nexus before logs in
    /// again.
    NexusLoss,
    /// 28h/00h NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED: another I_T nexus loaded
    /// the removable medium.
    MediumMayHaveChanged,
    /// 2Ah/01h MODE PARAMETERS CHANGED by another I_T nexus.
    ModeParametersChanged,
    /// 2Ah/03h RESERVATIONS PREEMPTED.
    ReservationsPreempted,
    /// 2Ah/04h RESERVATIONS RELEASED.
    ReservationsReleased,
    /// 2Ah/05h REGISTRATIONS PREEMPTED.
    RegistrationsPreempted,
    /// 2Ah/06h ASYMMETRIC ACCESS STATE CHANGED: an implicit ALUA transition.
    AsymmetricAccessStateChanged,
    /// 2Ah/09h CAPACITY DATA HAS CHANGED.
    CapacityChanged,
    /// 3Fh/0Eh REPORTED LUNS DATA HAS CHANGED.
    LunsChanged,
}

impl UnitAttention {
    /// The sense data reporting this condition (sense key UNIT ATTENTION).
    pub const fn sense(self) -> Sense {
        let (asc, ascq) = match self {
            UnitAttention::PowerOnReset => (0x29, 0x00),
            UnitAttention::LuReset => (0x29, 0x03),
            UnitAttention::NexusLoss => (0x29, 0x07),
            UnitAttention::MediumMayHaveChanged => (0x28, 0x00),
            UnitAttention::ModeParametersChanged => (0x2A, 0x01),
            UnitAttention::ReservationsPreempted => (0x2A, 0x03),
            UnitAttention::ReservationsReleased => (0x2A, 0x04),
            UnitAttention::RegistrationsPreempted => (0x2A, 0x05),
            UnitAttention::AsymmetricAccessStateChanged => (0x2A, 0x06),
            UnitAttention::CapacityChanged => (0x2A, 0x09),
            UnitAttention::LunsChanged => (0x3F, 0x0E),
        };
        Sense::new(key::UNIT_ATTENTION, asc, ascq)
    }

    /// Reset class (29h): reported first, supersedes older conditions.
    const fn is_reset(self) -> bool {
        matches!(
            self,
            UnitAttention::PowerOnReset | UnitAttention::LuReset | UnitAttention::NexusLoss
        )
    }
}

/// Most conditions queued for one I_T nexus.
pub const MAX_QUEUED: usize = 16;

/// The pending unit attention conditions of one I_T nexus.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct UaQueue {
    q: VecDeque<UnitAttention>,
}

impl UaQueue {
    /// Establishes `ua`.
    pub fn push(&mut self, ua: UnitAttention) {
        if ua.is_reset() {
            self.q.clear();
            self.q.push_back(ua);
            return;
        }
        if self.q.contains(&ua) {
            return;
        }
        if self.q.len() >= MAX_QUEUED {
            if let Some(i) = self.q.iter().position(|u| !u.is_reset()) {
                self.q.remove(i);
            }
        }
        self.q.push_back(ua);
    }

    /// Reports and clears the next condition.
    pub fn pop(&mut self) -> Option<UnitAttention> {
        self.q.pop_front()
    }

    /// Clears every queued `ua` (REPORT LUNS clears REPORTED LUNS DATA HAS CHANGED).
    pub fn remove(&mut self, ua: UnitAttention) {
        self.q.retain(|u| *u != ua);
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// The conditions, in the order they will be reported.
    pub fn iter(&self) -> impl Iterator<Item = UnitAttention> + '_ {
        self.q.iter().copied()
    }

    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<UnitAttention> {
        self.q.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::UnitAttention::*;
    use super::*;

    #[test]
    fn reset_supersedes_and_leads() {
        let mut q = UaQueue::default();
        q.push(CapacityChanged);
        q.push(ModeParametersChanged);
        q.push(CapacityChanged);
        assert_eq!(q.to_vec(), vec![CapacityChanged, ModeParametersChanged]);
        q.push(LuReset);
        assert_eq!(q.to_vec(), vec![LuReset]);
        q.push(RegistrationsPreempted);
        q.push(PowerOnReset);
        q.push(LunsChanged);
        assert_eq!(q.pop(), Some(PowerOnReset));
        assert_eq!(q.pop(), Some(LunsChanged));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn bounded() {
        let mut q = UaQueue::default();
        q.push(PowerOnReset);
        for _ in 0..3 {
            for u in [
                ModeParametersChanged,
                ReservationsPreempted,
                ReservationsReleased,
                RegistrationsPreempted,
                CapacityChanged,
                LunsChanged,
            ] {
                q.push(u);
            }
        }
        assert!(q.to_vec().len() <= MAX_QUEUED);
        assert_eq!(q.pop(), Some(PowerOnReset));
    }

    #[test]
    fn sense_codes() {
        assert_eq!((LuReset.sense().asc, LuReset.sense().ascq), (0x29, 0x03));
        assert_eq!(LunsChanged.sense().key, key::UNIT_ATTENTION);
        assert_eq!(
            (
                RegistrationsPreempted.sense().asc,
                RegistrationsPreempted.sense().ascq
            ),
            (0x2A, 0x05)
        );
    }
}
