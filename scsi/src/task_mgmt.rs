//! Task management (SAM-5 clause 7, SPC-4 REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS): which
//! functions the target performs, and for each request a [`TmfPlan`] — the response, the
//! tasks it ends, the logical-unit reset it carries out, whether the transport drops the
//! target's connections afterwards. Transports carry a plan out; they decide nothing. The
//! report of supported functions is built from the same table ([`SUPPORTED`]), so the two
//! cannot disagree.

/// A task management function, as SAM-5 names it (transports map their codes to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFunction {
    /// ABORT TASK: one task of the issuing I_T nexus.
    AbortTask,
    /// ABORT TASK SET: the issuing nexus's tasks on the LU.
    AbortTaskSet,
    /// CLEAR ACA.
    ClearAca,
    /// CLEAR TASK SET: every task on the LU, of every nexus.
    ClearTaskSet,
    /// LOGICAL UNIT RESET.
    LogicalUnitReset,
    /// TARGET RESET as iSCSI's TARGET WARM RESET.
    TargetWarmReset,
    /// iSCSI's TARGET COLD RESET: a warm reset, then the target's connections are dropped.
    TargetColdReset,
    /// Anything else (vendor or reserved codes, functions the transport cannot express).
    Other,
}

/// How a task management request is answered (SAM-5 7.1 service responses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmfVerdict {
    /// FUNCTION COMPLETE.
    Complete,
    /// The LU addressed does not exist (INCORRECT LOGICAL UNIT NUMBER).
    LunNotExist,
    /// FUNCTION REJECTED: not supported.
    NotSupported,
}

/// Which tasks a request ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskScope {
    /// None.
    Nothing,
    /// The one referenced task of the issuing nexus.
    OneTask,
    /// The issuing nexus's tasks on the addressed LU.
    OwnOnLun,
    /// Every nexus's tasks on the addressed LU.
    AllOnLun,
    /// Every nexus's tasks on every LU of the target.
    AllOnTarget,
}

impl TaskScope {
    /// Does the scope reach tasks of other I_T nexuses (which the transport must then end
    /// through every session of the target)?
    pub fn reaches_other_nexuses(self) -> bool {
        matches!(self, TaskScope::AllOnLun | TaskScope::AllOnTarget)
    }
}

/// The reset a request carries out on the logical units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetKind {
    /// None.
    None,
    /// [`crate::LogicalUnit::logical_unit_reset`] on the addressed LU.
    LogicalUnit,
    /// [`crate::LogicalUnit::target_reset`] on every LU of the target.
    Target,
}

/// What to do for one task management request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmfPlan {
    /// The response to send, once the ended tasks have ended.
    pub verdict: TmfVerdict,
    /// The tasks it ends (only when the verdict is `Complete`).
    pub scope: TaskScope,
    /// The reset it performs (only when the verdict is `Complete`).
    pub reset: ResetKind,
    /// Drop every connection of the target after the response (TARGET COLD RESET).
    pub close_connections: bool,
}

impl TmfPlan {
    fn refused(verdict: TmfVerdict) -> TmfPlan {
        TmfPlan {
            verdict,
            scope: TaskScope::Nothing,
            reset: ResetKind::None,
            close_connections: false,
        }
    }
}

/// One supported function: its scope, its reset, whether it addresses a LU, and its bit in
/// the basic parameter data of REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (byte, mask).
struct Entry {
    function: TaskFunction,
    scope: TaskScope,
    reset: ResetKind,
    addresses_lun: bool,
    report_bit: Option<(usize, u8)>,
}

/// The functions the target performs. Not CLEAR ACA (NACA is not supported), nor the query
/// functions or I_T NEXUS RESET (iSCSI has no codes for them).
const SUPPORTED: [Entry; 6] = [
    Entry {
        function: TaskFunction::AbortTask,
        scope: TaskScope::OneTask,
        reset: ResetKind::None,
        addresses_lun: false,
        report_bit: Some((0, 0x80)), // ATS
    },
    Entry {
        function: TaskFunction::AbortTaskSet,
        scope: TaskScope::OwnOnLun,
        reset: ResetKind::None,
        addresses_lun: true,
        report_bit: Some((0, 0x40)), // ATSS
    },
    Entry {
        function: TaskFunction::ClearTaskSet,
        scope: TaskScope::AllOnLun,
        reset: ResetKind::None,
        addresses_lun: true,
        report_bit: Some((0, 0x10)), // CTSS
    },
    Entry {
        function: TaskFunction::LogicalUnitReset,
        scope: TaskScope::AllOnLun,
        reset: ResetKind::LogicalUnit,
        addresses_lun: true,
        report_bit: Some((0, 0x08)), // LURS
    },
    // TRS (SPC-3; obsolete in SPC-4, whose SAM-4 dropped TARGET RESET): set because the
    // target performs iSCSI's TARGET WARM RESET, the transport's form of it, which SPC-3
    // initiators look for here.
    Entry {
        function: TaskFunction::TargetWarmReset,
        scope: TaskScope::AllOnTarget,
        reset: ResetKind::Target,
        addresses_lun: false,
        report_bit: Some((0, 0x02)),
    },
    Entry {
        function: TaskFunction::TargetColdReset,
        scope: TaskScope::AllOnTarget,
        reset: ResetKind::Target,
        addresses_lun: false,
        report_bit: None,
    },
];

/// The plan for `function`; `lun_exists`: the LU the request addresses exists (it matters
/// only for functions that address one).
pub fn plan(function: TaskFunction, lun_exists: bool) -> TmfPlan {
    let Some(e) = SUPPORTED.iter().find(|e| e.function == function) else {
        return TmfPlan::refused(TmfVerdict::NotSupported);
    };
    if e.addresses_lun && !lun_exists {
        return TmfPlan::refused(TmfVerdict::LunNotExist);
    }
    TmfPlan {
        verdict: TmfVerdict::Complete,
        scope: e.scope,
        reset: e.reset,
        close_connections: function == TaskFunction::TargetColdReset,
    }
}

/// Byte 0 of the basic parameter data of REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (SPC-4
/// table 253), from [`SUPPORTED`]; bytes 1 and 2 stay zero.
pub(crate) fn supported_bits() -> [u8; 3] {
    let mut bits = [0u8; 3];
    for (byte, mask) in SUPPORTED.iter().filter_map(|e| e.report_bit) {
        bits[byte] |= mask;
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [TaskFunction; 8] = [
        TaskFunction::AbortTask,
        TaskFunction::AbortTaskSet,
        TaskFunction::ClearAca,
        TaskFunction::ClearTaskSet,
        TaskFunction::LogicalUnitReset,
        TaskFunction::TargetWarmReset,
        TaskFunction::TargetColdReset,
        TaskFunction::Other,
    ];

    #[test]
    fn every_function_has_a_plan() {
        use TaskFunction as F;
        let p = plan(F::LogicalUnitReset, true);
        assert_eq!(
            (p.verdict, p.scope, p.reset, p.close_connections),
            (
                TmfVerdict::Complete,
                TaskScope::AllOnLun,
                ResetKind::LogicalUnit,
                false
            )
        );
        assert_eq!(
            plan(F::LogicalUnitReset, false).verdict,
            TmfVerdict::LunNotExist
        );
        assert_eq!(
            plan(F::AbortTaskSet, false).verdict,
            TmfVerdict::LunNotExist
        );
        assert_eq!(
            plan(F::ClearTaskSet, false).verdict,
            TmfVerdict::LunNotExist
        );
        // ABORT TASK and the target resets do not depend on the LUN field
        assert_eq!(plan(F::AbortTask, false).verdict, TmfVerdict::Complete);
        assert_eq!(
            plan(F::TargetWarmReset, false).verdict,
            TmfVerdict::Complete
        );
        let cold = plan(F::TargetColdReset, false);
        assert!(cold.close_connections && cold.reset == ResetKind::Target);
        assert!(!plan(F::TargetWarmReset, true).close_connections);
        for f in [F::ClearAca, F::Other] {
            let p = plan(f, true);
            assert_eq!(p.verdict, TmfVerdict::NotSupported);
            assert_eq!((p.scope, p.reset), (TaskScope::Nothing, ResetKind::None));
        }
        assert!(plan(F::ClearTaskSet, true).scope.reaches_other_nexuses());
        assert!(!plan(F::AbortTaskSet, true).scope.reaches_other_nexuses());
    }

    #[test]
    fn the_report_lists_exactly_what_is_performed() {
        // ATS ATSS CTSS LURS TRS, as before the table existed
        assert_eq!(supported_bits(), [0x80 | 0x40 | 0x10 | 0x08 | 0x02, 0, 0]);
        // a function is reported only if it completes
        for f in ALL {
            let reported = SUPPORTED
                .iter()
                .any(|e| e.function == f && e.report_bit.is_some());
            if reported {
                assert_eq!(plan(f, true).verdict, TmfVerdict::Complete, "{f:?}");
            }
        }
    }
}
