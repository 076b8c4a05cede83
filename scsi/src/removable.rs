//! Removable medium (SBC-3 4.x, 5.x; SPC-4 6.4.2 RMB) and write protection: whether the LU
//! reports removable media (INQUIRY RMB), the medium state (loaded / ejected), the
//! per-I_T-nexus medium removal prevention of PREVENT ALLOW MEDIUM REMOVAL (1Eh), the
//! LOAD/EJECT of START STOP UNIT, the NOT READY / MEDIUM NOT PRESENT gate for medium access
//! commands while the medium is out, and the write-protect check every writing command uses
//! ([`LogicalUnit::check_writable`]).
//!
//! Prevention (SBC-3 5.14): the medium may not be ejected (or loaded: libiscsi and tgtd treat
//! any LOAD/EJECT the same) while any I_T nexus prevents removal. A nexus' prevention ends
//! with PREVENT 00b from that nexus, I_T nexus loss ([`LogicalUnit::nexus_removed`]), LOGICAL
//! UNIT RESET, TARGET WARM / COLD RESET (hard reset) and power on (a new LU). The medium state
//! itself survives resets (a reset does not move a medium). Loading establishes NOT READY TO
//! READY CHANGE, MEDIUM MAY HAVE CHANGED for every other I_T nexus; the loading nexus has its
//! GOOD status.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::nexus::NexusId;
use crate::ops::opcode;
use crate::sense::{Sense, key};
use crate::ua::UnitAttention;
use crate::{Action, LogicalUnit, Req};

/// 02h/3Ah/00h NOT READY, MEDIUM NOT PRESENT.
pub const MEDIUM_NOT_PRESENT: Sense = Sense::new(key::NOT_READY, 0x3A, 0x00);
/// 05h/53h/02h ILLEGAL REQUEST, MEDIUM REMOVAL PREVENTED.
pub const MEDIUM_REMOVAL_PREVENTED: Sense = Sense::new(key::ILLEGAL_REQUEST, 0x53, 0x02);

/// Medium state of one LU. The ejected flag is read lock-free by every command; loading,
/// ejecting and prevention changes serialise on the mutex.
#[derive(Debug, Default)]
pub(crate) struct MediumState {
    /// INQUIRY RMB: LOAD/EJECT and PREVENT are supported.
    removable: AtomicBool,
    /// No medium: medium access commands are NOT READY.
    ejected: AtomicBool,
    /// The I_T nexuses that prevent medium removal.
    preventing: Mutex<HashSet<NexusId>>,
    /// The last load or eject not reported yet by GET EVENT STATUS NOTIFICATION (a CD/DVD
    /// drive's media event code; 0: none).
    media_event: AtomicU8,
}

impl MediumState {
    fn preventing(&self) -> std::sync::MutexGuard<'_, HashSet<NexusId>> {
        self.preventing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the prevention of `id` (I_T nexus loss).
    pub fn nexus_removed(&self, id: NexusId) {
        self.preventing().remove(&id);
    }

    /// Ends every prevention (logical unit reset, hard reset).
    pub fn reset(&self) {
        self.preventing().clear();
    }

    /// `id` prevents medium removal (it did in the previous process: live upgrade).
    pub fn prevent_for(&self, id: NexusId) {
        self.preventing().insert(id);
    }

    /// Whether `id` prevents medium removal.
    pub fn prevents(&self, id: NexusId) -> bool {
        self.preventing().contains(&id)
    }

    /// (ejected, the media event not reported yet), for the next process.
    pub fn carried(&self) -> (bool, u8) {
        (
            self.ejected.load(Ordering::Acquire),
            self.media_event.load(Ordering::Relaxed),
        )
    }

    /// Goes on with [`MediumState::carried`] of the previous process.
    pub fn resume(&self, ejected: bool, media_event: u8) {
        self.ejected.store(ejected, Ordering::Release);
        self.media_event.store(media_event, Ordering::Relaxed);
    }
}

/// Whether `op` needs the medium. Commands about the LU, its reservations, mode pages,
/// diagnostics and the medium itself work without it; every other command (READ, WRITE,
/// VERIFY, READ CAPACITY, TEST UNIT READY, SYNCHRONIZE CACHE, …) is NOT READY, MEDIUM NOT
/// PRESENT while the medium is out.
fn needs_medium(op: u8) -> bool {
    use opcode::*;
    !crate::mmc::without_disc(op)
        && !crate::ssc::without_tape(op)
        && !matches!(
            op,
            REQUEST_SENSE
            | INQUIRY
            | MODE_SELECT_6
            | RESERVE_6
            | RELEASE_6
            | MODE_SENSE_6
            | START_STOP_UNIT
            | RECEIVE_DIAGNOSTIC_RESULTS
            | SEND_DIAGNOSTIC
            | PREVENT_ALLOW_MEDIUM_REMOVAL
            | 0x3B // WRITE BUFFER
            | 0x3C // READ BUFFER
            | 0x4C // LOG SELECT
            | 0x4D // LOG SENSE
            | MODE_SELECT_10
            | RESERVE_10
            | RELEASE_10
            | MODE_SENSE_10
            | PERSISTENT_RESERVE_IN
            | PERSISTENT_RESERVE_OUT
            | 0x84 // RECEIVE COPY RESULTS
            | REPORT_LUNS
            | 0xA2 // SECURITY PROTOCOL IN
            | MAINTENANCE_IN
            | 0xA4 // MAINTENANCE OUT
            | 0xB5 // SECURITY PROTOCOL OUT
        )
}

impl LogicalUnit {
    /// Reports removable media (INQUIRY RMB) and supports LOAD/EJECT and PREVENT ALLOW
    /// MEDIUM REMOVAL (configuration `removable`, tgtadm `--params removable=1`). Turning it
    /// off loads the medium and ends every prevention. A CD/DVD drive's disc and a tape
    /// drive's tape are always removable: turning it off does nothing there.
    pub fn set_removable(&self, on: bool) {
        if !on && self.params().device_type != crate::DeviceType::Disk {
            return;
        }
        let m = &self.medium;
        let mut p = m.preventing();
        m.removable.store(on, Ordering::Relaxed);
        if !on {
            p.clear();
            m.ejected.store(false, Ordering::Release);
        }
    }

    /// INQUIRY RMB: the medium is removable.
    pub fn removable(&self) -> bool {
        self.medium.removable.load(Ordering::Relaxed)
    }

    /// The medium has been ejected (START STOP UNIT LOEJ=1 START=0).
    pub fn medium_ejected(&self) -> bool {
        self.medium.ejected.load(Ordering::Acquire)
    }

    /// The media event GET EVENT STATUS NOTIFICATION reports once: the last load or eject
    /// since it last asked (new media, media removal), or none.
    pub(crate) fn take_media_event(&self) -> u8 {
        self.medium.media_event.swap(0, Ordering::AcqRel)
    }

    /// The administrator takes the medium out (`false`) or puts it back (`true`), whatever
    /// the initiators prevent (a CD/DVD drive's disc: tgtadm `online=0|1`). Putting it back
    /// tells every I_T nexus NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED; both are
    /// media events for GET EVENT STATUS NOTIFICATION. No change, nothing said.
    pub fn set_medium_present(&self, present: bool) {
        let was_ejected = self.medium.ejected.swap(!present, Ordering::AcqRel);
        if was_ejected != present {
            return;
        }
        if present {
            self.medium_changed();
        } else {
            let e = crate::mmc::EVENT_MEDIA_REMOVAL;
            self.medium.media_event.store(e, Ordering::Release);
        }
    }

    /// The medium went out (a tape drive's UNLOAD): nothing to tell.
    pub(crate) fn medium_unloaded(&self) {
        self.medium.ejected.store(true, Ordering::Release);
    }

    /// Another medium is in (a CD/DVD drive's new disc): every I_T nexus gets NOT READY TO
    /// READY CHANGE, MEDIUM MAY HAVE CHANGED, and GET EVENT STATUS NOTIFICATION reports new
    /// media.
    pub fn medium_changed(&self) {
        let e = crate::mmc::EVENT_NEW_MEDIA;
        self.medium.media_event.store(e, Ordering::Release);
        self.shared().ua_all(UnitAttention::MediumMayHaveChanged);
    }

    /// Whether some I_T nexus prevents medium removal.
    pub fn medium_removal_prevented(&self) -> bool {
        !self.medium.preventing().is_empty()
    }

    /// DATA PROTECT, WRITE PROTECTED when the LU is write protected: the check of every
    /// command that writes the medium (WRITE*, WRITE AND VERIFY, WRITE SAME, UNMAP, COMPARE
    /// AND WRITE, ORWRITE, SANITIZE, FORMAT UNIT …).
    pub fn check_writable(&self) -> Result<(), Sense> {
        if self.write_protected() {
            return Err(Sense::write_protected());
        }
        Ok(())
    }

    /// NOT READY, MEDIUM NOT PRESENT for a medium access command while the medium is out.
    pub(crate) fn check_medium(&self, cdb: &[u8]) -> Result<(), Sense> {
        if self.medium_ejected() && cdb.first().is_some_and(|&op| needs_medium(op)) {
            return Err(MEDIUM_NOT_PRESENT);
        }
        Ok(())
    }

    /// The sense REQUEST SENSE reports when no unit attention is pending.
    pub(crate) fn current_condition(&self) -> Sense {
        if let Some(s) = self.access_condition() {
            s
        } else if self.medium_ejected() {
            MEDIUM_NOT_PRESENT
        } else {
            Sense::no_sense()
        }
    }
}

/// PREVENT ALLOW MEDIUM REMOVAL (SBC-3 5.14). PREVENT 00b ends this nexus' prevention,
/// 01b starts it; 10b / 11b (obsolete) are INVALID FIELD IN CDB. A non-removable LU has no
/// medium to lock: allowing removal is a no-op (GOOD), preventing it INVALID FIELD IN CDB.
pub(crate) fn prevent_allow(lu: &LogicalUnit, cdb: &[u8], req: &Req<'_>) -> Result<Action, Sense> {
    let prevent = cdb[4] & 0x03;
    match prevent {
        0b00 => {
            lu.medium.preventing().remove(&req.nexus.id);
            Ok(Action::good())
        }
        0b01 if lu.removable() => {
            lu.medium.preventing().insert(req.nexus.id);
            Ok(Action::good())
        }
        _ => Err(Sense::invalid_field_in_cdb(4, Some(1))),
    }
}

/// LOAD/EJECT of START STOP UNIT (LOEJ = 1 with POWER CONDITION 0h) on a removable LU:
/// START 0 ejects, START 1 loads; MEDIUM REMOVAL PREVENTED while any nexus prevents removal.
pub(crate) fn load_eject(lu: &LogicalUnit, start: bool, req: &Req<'_>) -> Result<Action, Sense> {
    let m = &lu.medium;
    let p = m.preventing();
    if !p.is_empty() {
        return Err(MEDIUM_REMOVAL_PREVENTED);
    }
    let was_ejected = m.ejected.swap(!start, Ordering::AcqRel);
    if was_ejected == start {
        let event = if start {
            crate::mmc::EVENT_NEW_MEDIA
        } else {
            crate::mmc::EVENT_MEDIA_REMOVAL
        };
        m.media_event.store(event, Ordering::Release);
    }
    drop(p);
    if start && was_ejected {
        lu.shared()
            .ua_others(req.nexus.id, UnitAttention::MediumMayHaveChanged);
    }
    Ok(Action::good())
}

#[cfg(test)]
mod tests {
    use crate::test_util::*;
    use crate::{Action, CmdCtx, LogicalUnit, Nexus, NexusId, Outcome};

    const EJECT: [u8; 6] = [0x1B, 0, 0, 0, 0x02, 0];
    const LOAD: [u8; 6] = [0x1B, 0, 0, 0, 0x03, 0];
    const PREVENT: [u8; 6] = [0x1E, 0, 0, 0, 1, 0];
    const ALLOW: [u8; 6] = [0x1E, 0, 0, 0, 0, 0];
    const TUR: [u8; 6] = [0; 6];

    fn removable() -> LogicalUnit {
        let lu = lu();
        lu.set_removable(true);
        lu
    }

    fn nexus(id: u64) -> Nexus {
        Nexus::iscsi(NexusId(id), "iqn.2026-11.test:other", id, "iqn.t", 1)
    }

    fn on(lu: &LogicalUnit, n: &Nexus, cdb: &[u8]) -> crate::Completion {
        let cmd = CmdCtx {
            cdb,
            data_out: &[],
            landed: 0,
            luns: &[1],
        };
        match lu.execute_nexus(n, &cmd) {
            Outcome::Action(Action::Complete(c)) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn inquiry_rmb_follows_the_setting() {
        let lu = lu();
        assert_eq!(complete(&lu, &[0x12, 0, 0, 0, 36, 0]).data[1], 0);
        lu.set_removable(true);
        assert_eq!(complete(&lu, &[0x12, 0, 0, 0, 36, 0]).data[1], 0x80);
    }

    #[test]
    fn eject_blocks_medium_access_and_load_restores_it() {
        let lu = removable();
        assert_eq!(complete(&lu, &EJECT).status, 0);
        assert!(lu.medium_ejected());
        for cdb in [
            &TUR[..],
            &[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0],
            &[0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0],
            &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            &[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        ] {
            assert_eq!(check(&complete(&lu, cdb)), (2, 0x3A, 0), "{cdb:02x?}");
        }
        // not medium access: still served
        assert_eq!(complete(&lu, &[0x12, 0, 0, 0, 36, 0]).status, 0);
        assert_eq!(complete(&lu, &[0x1A, 0, 0x3F, 0, 255, 0]).status, 0);
        assert_eq!(
            complete(&lu, &[0xA0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0]).status,
            0
        );
        // REQUEST SENSE reports the condition as data
        let rs = complete(&lu, &[0x03, 0, 0, 0, 18, 0]);
        assert_eq!((rs.data[2], rs.data[12], rs.data[13]), (2, 0x3A, 0));
        // ejecting again is fine; loading brings the medium back
        assert_eq!(complete(&lu, &EJECT).status, 0);
        assert_eq!(complete(&lu, &LOAD).status, 0);
        assert_eq!(complete(&lu, &TUR).status, 0);
    }

    #[test]
    fn prevention_blocks_load_and_eject_until_allowed() {
        let lu = removable();
        assert_eq!(complete(&lu, &PREVENT).status, 0);
        assert!(lu.medium_removal_prevented());
        assert_eq!(check(&complete(&lu, &EJECT)), (5, 0x53, 0x02));
        assert_eq!(check(&complete(&lu, &LOAD)), (5, 0x53, 0x02));
        assert!(!lu.medium_ejected());
        assert_eq!(complete(&lu, &ALLOW).status, 0);
        assert_eq!(complete(&lu, &EJECT).status, 0);
        // PREVENT with the medium out is accepted
        assert_eq!(complete(&lu, &PREVENT).status, 0);
        assert_eq!(check(&complete(&lu, &LOAD)), (5, 0x53, 0x02));
        assert_eq!(complete(&lu, &ALLOW).status, 0);
        assert_eq!(complete(&lu, &LOAD).status, 0);
    }

    #[test]
    fn prevention_is_per_nexus_and_ends_on_loss_and_resets() {
        let lu = removable();
        let (a, b) = (nexus(10), nexus(11));
        assert_eq!(on(&lu, &a, &PREVENT).status, 0);
        assert_eq!(on(&lu, &b, &PREVENT).status, 0);
        // b's ALLOW does not end a's prevention
        assert_eq!(on(&lu, &b, &ALLOW).status, 0);
        assert_eq!(check(&on(&lu, &b, &EJECT)), (5, 0x53, 0x02));
        lu.nexus_removed(a.id);
        assert!(!lu.medium_removal_prevented());
        assert_eq!(on(&lu, &a, &PREVENT).status, 0);
        lu.logical_unit_reset();
        assert!(!lu.medium_removal_prevented());
        assert_eq!(on(&lu, &b, &PREVENT).status, 0);
        lu.target_reset();
        assert!(!lu.medium_removal_prevented());
    }

    #[test]
    fn load_tells_the_other_nexuses() {
        let lu = removable();
        let (a, b) = (nexus(20), nexus(21));
        lu.nexus_added(&a);
        lu.nexus_added(&b);
        // clear the power-on unit attentions
        assert_eq!(check(&on(&lu, &a, &TUR)), (6, 0x29, 0));
        assert_eq!(check(&on(&lu, &b, &TUR)), (6, 0x29, 0));
        assert_eq!(on(&lu, &a, &EJECT).status, 0);
        assert_eq!(check(&on(&lu, &b, &TUR)), (2, 0x3A, 0));
        assert_eq!(on(&lu, &a, &LOAD).status, 0);
        assert_eq!(on(&lu, &a, &TUR).status, 0);
        assert_eq!(check(&on(&lu, &b, &TUR)), (6, 0x28, 0));
        assert_eq!(on(&lu, &b, &TUR).status, 0);
        // loading a loaded medium changes nothing
        assert_eq!(on(&lu, &a, &LOAD).status, 0);
        assert_eq!(on(&lu, &b, &TUR).status, 0);
    }

    #[test]
    fn not_removable_refuses_prevent_and_load_eject() {
        let lu = lu();
        assert_eq!(check(&complete(&lu, &PREVENT)), (5, 0x24, 0));
        assert_eq!(complete(&lu, &ALLOW).status, 0);
        assert_eq!(check(&complete(&lu, &EJECT)), (5, 0x24, 0));
        assert_eq!(check(&complete(&lu, &LOAD)), (5, 0x24, 0));
        // obsolete PREVENT values and reserved bits
        let lu = removable();
        assert_eq!(check(&complete(&lu, &[0x1E, 0, 0, 0, 2, 0])), (5, 0x24, 0));
        assert_eq!(check(&complete(&lu, &[0x1E, 0, 0, 0, 3, 0])), (5, 0x24, 0));
        assert_eq!(check(&complete(&lu, &[0x1E, 0, 0, 0, 4, 0])), (5, 0x24, 0));
        assert_eq!(check(&complete(&lu, &[0x1E, 1, 0, 0, 0, 0])), (5, 0x24, 0));
    }

    #[test]
    fn power_conditions_leave_the_medium_alone() {
        let lu = removable();
        for pc in 1..16u8 {
            let c = complete(&lu, &[0x1B, 1, 0, 0, (pc << 4) | 0x02, 0]);
            assert_eq!(c.status, 0, "pc {pc}");
            assert!(!lu.medium_ejected(), "pc {pc}");
        }
    }

    #[test]
    fn write_protection_refuses_every_writing_command() {
        let block = [0u8; 1024];
        let mut w16 = [0u8; 16];
        w16[13] = 1;
        let mut caw = w16;
        caw[0] = 0x89;
        let mut orw = w16;
        orw[0] = 0x8B;
        let mut ws16 = w16;
        ws16[0] = 0x93;
        let mut ws16_unmap = ws16;
        ws16_unmap[1] = 0x08;
        let mut atomic = w16;
        atomic[0] = 0x9C;
        w16[0] = 0x8A;
        let cdbs: [&[u8]; 10] = [
            &atomic,
            &[0x0A, 0, 0, 0, 1, 0],
            &[0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0],
            &[0x2E, 0, 0, 0, 0, 0, 0, 0, 1, 0],
            &[0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0],
            &[0x41, 0x08, 0, 0, 0, 0, 0, 0, 1, 0], // WRITE SAME with UNMAP, not thin
            &w16,
            &caw,
            &orw,
            &ws16_unmap,
        ];
        for thin in [false, true] {
            let lu = lu_with(|p| p.readonly = true);
            lu.set_thin_provisioning(thin);
            for cdb in cdbs.iter().chain([&&ws16[..]]) {
                let c = complete_out(&lu, cdb, &block);
                assert_eq!(check(&c), (7, 0x27, 0), "thin {thin} {cdb:02x?}");
            }
            if thin {
                let unmap = [0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0];
                let list = [
                    0, 22, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0,
                ];
                assert_eq!(check(&complete_out(&lu, &unmap, &list)), (7, 0x27, 0));
            }
            // reads still work
            let r = exec(&lu, &[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0], &[]);
            assert!(matches!(r, Action::Read { .. }), "{r:?}");
        }
    }

    #[test]
    fn turning_removable_off_loads_the_medium() {
        let lu = removable();
        assert_eq!(complete(&lu, &EJECT).status, 0);
        assert_eq!(complete(&lu, &PREVENT).status, 0);
        lu.set_removable(false);
        assert!(!lu.medium_ejected() && !lu.medium_removal_prevented());
        assert_eq!(complete(&lu, &TUR).status, 0);
    }
}
