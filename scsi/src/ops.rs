//! The opcode table: for every supported command its operation code, service action, CDB
//! length, CDB usage map (SPC-4 6.35.3 style: which bits may be set) and handler. Lookup
//! turns an unknown opcode into INVALID COMMAND OPERATION CODE, an unknown service action
//! into INVALID FIELD IN CDB, a too-short CDB into INVALID FIELD IN CDB, and reserved bits
//! into INVALID FIELD IN CDB with a field pointer. New commands are added here: REPORT
//! SUPPORTED OPERATION CODES is generated from this table, so it always lists exactly the
//! commands `execute` accepts. The table is kept sorted by (operation code, service
//! action), the order in which that command reports them.

use crate::cdb::check_usage;
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};
use crate::{
    alua, capacity, caw, diagnostic, inquiry, maintenance, medium, mode, pr, removable,
    report_luns, request_sense, reserve_spc2, rw, sanitize, thin, xcopy,
};

/// A command handler: receives the CDB cut to its table length, already usage-checked.
pub(crate) type Handler = fn(&LogicalUnit, &[u8], &Req<'_>) -> Result<Action, Sense>;

/// One supported command.
pub(crate) struct OpInfo {
    pub opcode: u8,
    /// Service action in byte 1 bits 4-0, for opcodes that have one.
    pub service_action: Option<u8>,
    #[allow(dead_code)] // for logging and the table tests
    pub name: &'static str,
    /// CDB usage map; its length is the CDB length.
    pub usage: &'static [u8],
    pub handler: Handler,
    /// Recommended command timeout in seconds (REPORT SUPPORTED OPERATION CODES with RCTD).
    pub timeout: u32,
}

/// Recommended timeout of commands answered without medium access.
pub(crate) const T_EMULATED: u32 = 10;
/// Recommended timeout of READ / WRITE / VERIFY / WRITE AND VERIFY: one transfer of at
/// most `MAX_TRANSFER_BYTES` to or from the backing store.
const T_IO: u32 = 30;
/// Recommended timeout of SYNCHRONIZE CACHE: may flush the whole write-back cache.
const T_SYNC: u32 = 60;

/// Recommended timeout of PERSISTENT RESERVE OUT: may wait for the APTPL state to reach
/// stable storage.
const T_PR_OUT: u32 = 30;

/// Recommended timeout of SANITIZE: a pass over the whole medium (use IMMED and poll with
/// REQUEST SENSE for large LUs).
const T_SANITIZE: u32 = 600;

/// Operation codes.
pub mod opcode {
    pub const TEST_UNIT_READY: u8 = 0x00;
    pub const REQUEST_SENSE: u8 = 0x03;
    pub const READ_6: u8 = 0x08;
    pub const WRITE_6: u8 = 0x0A;
    pub const INQUIRY: u8 = 0x12;
    pub const MODE_SELECT_6: u8 = 0x15;
    pub const RESERVE_6: u8 = 0x16;
    pub const RELEASE_6: u8 = 0x17;
    pub const MODE_SENSE_6: u8 = 0x1A;
    pub const START_STOP_UNIT: u8 = 0x1B;
    pub const RECEIVE_DIAGNOSTIC_RESULTS: u8 = 0x1C;
    pub const SEND_DIAGNOSTIC: u8 = 0x1D;
    pub const PREVENT_ALLOW_MEDIUM_REMOVAL: u8 = 0x1E;
    pub const READ_CAPACITY_10: u8 = 0x25;
    pub const READ_10: u8 = 0x28;
    pub const WRITE_10: u8 = 0x2A;
    pub const WRITE_AND_VERIFY_10: u8 = 0x2E;
    pub const VERIFY_10: u8 = 0x2F;
    pub const PRE_FETCH_10: u8 = 0x34;
    pub const SYNCHRONIZE_CACHE_10: u8 = 0x35;
    pub const READ_DEFECT_DATA_10: u8 = 0x37;
    pub const WRITE_SAME_10: u8 = 0x41;
    pub const UNMAP: u8 = 0x42;
    pub const SANITIZE: u8 = 0x48;
    pub const MODE_SELECT_10: u8 = 0x55;
    pub const RESERVE_10: u8 = 0x56;
    pub const RELEASE_10: u8 = 0x57;
    pub const MODE_SENSE_10: u8 = 0x5A;
    pub const PERSISTENT_RESERVE_IN: u8 = 0x5E;
    pub const PERSISTENT_RESERVE_OUT: u8 = 0x5F;
    pub const EXTENDED_COPY: u8 = 0x83;
    pub const RECEIVE_COPY_RESULTS: u8 = 0x84;
    pub const READ_16: u8 = 0x88;
    pub const COMPARE_AND_WRITE: u8 = 0x89;
    pub const WRITE_16: u8 = 0x8A;
    pub const ORWRITE_16: u8 = 0x8B;
    pub const WRITE_AND_VERIFY_16: u8 = 0x8E;
    pub const VERIFY_16: u8 = 0x8F;
    pub const PRE_FETCH_16: u8 = 0x90;
    pub const SYNCHRONIZE_CACHE_16: u8 = 0x91;
    pub const WRITE_SAME_16: u8 = 0x93;
    pub const WRITE_ATOMIC_16: u8 = 0x9C;
    pub const SERVICE_ACTION_IN_16: u8 = 0x9E;
    pub const REPORT_LUNS: u8 = 0xA0;
    pub const MAINTENANCE_IN: u8 = 0xA3;
    pub const MAINTENANCE_OUT: u8 = 0xA4;
    pub const READ_12: u8 = 0xA8;
    pub const WRITE_12: u8 = 0xAA;
    pub const WRITE_AND_VERIFY_12: u8 = 0xAE;
    pub const VERIFY_12: u8 = 0xAF;
    pub const READ_DEFECT_DATA_12: u8 = 0xB7;
    /// SERVICE ACTION IN(16) service action READ CAPACITY(16).
    pub const SA_READ_CAPACITY_16: u8 = 0x10;
    /// SERVICE ACTION IN(16) service action GET LBA STATUS.
    pub const SA_GET_LBA_STATUS: u8 = 0x12;
    /// MAINTENANCE IN service action REPORT SUPPORTED OPERATION CODES.
    pub const SA_REPORT_SUPPORTED_OPCODES: u8 = 0x0C;
    /// MAINTENANCE IN service action REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS.
    pub const SA_REPORT_SUPPORTED_TMFS: u8 = 0x0D;
    /// MAINTENANCE IN service action REPORT TARGET PORT GROUPS.
    pub const SA_REPORT_TARGET_PORT_GROUPS: u8 = 0x0A;
    /// MAINTENANCE OUT service action SET TARGET PORT GROUPS.
    pub const SA_SET_TARGET_PORT_GROUPS: u8 = 0x0A;
}

/// Control byte: vendor-specific bits 7-6 are accepted and ignored; NACA and LINK are not
/// supported.
pub(crate) const C: u8 = 0xC0;

/// Usage maps shared with the unmapped-LUN path.
pub(crate) const USAGE_INQUIRY: &[u8] = &[0xFF, 0x01, 0xFF, 0xFF, 0xFF, C];
pub(crate) const USAGE_REQUEST_SENSE: &[u8] = &[0xFF, 0x01, 0, 0, 0xFF, C];
pub(crate) const USAGE_REPORT_LUNS: &[u8] = &[0xFF, 0, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C];

/// SANITIZE: IMMED, AUSE, service action; PARAMETER LIST LENGTH.
const USAGE_SANITIZE: &[u8] = &[0xFF, 0xBF, 0, 0, 0, 0, 0, 0xFF, 0xFF, C];

/// RD/WRPROTECT (7-5), DPO, FUA, FUA_NV (obsolete, ignored).
const RW_FLAGS: u8 = 0xFA;
/// VRPROTECT (7-5), DPO, BYTCHK (2-1).
const VERIFY_FLAGS: u8 = 0xF6;
/// WRITE AND VERIFY (SBC-3): WRPROTECT (7-5), DPO, BYTCHK (bit 1); bits 3-2 reserved, bit 0
/// obsolete.
const WRITE_VERIFY_FLAGS: u8 = 0xF2;

/// EXTENDED COPY (LID1): service action; PARAMETER LIST LENGTH.
const USAGE_XCOPY: &[u8] = &[
    0xFF, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C,
];
/// RECEIVE COPY RESULTS: service action; LIST IDENTIFIER; ALLOCATION LENGTH.
const USAGE_RCR: &[u8] = &[
    0xFF, 0x1F, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C,
];
/// Recommended timeout of EXTENDED COPY: up to 16 segments of 256 MiB each.
const T_XCOPY: u32 = 120;

use opcode::*;

/// TEST UNIT READY: in every device type's table.
pub(crate) const TEST_UNIT_READY_OP: OpInfo = OpInfo {
    opcode: TEST_UNIT_READY,
    service_action: None,
    name: "TEST UNIT READY",
    usage: &[0xFF, 0, 0, 0, 0, C],
    handler: test_unit_ready,
    timeout: T_EMULATED,
};

/// REQUEST SENSE: in every device type's table.
pub(crate) const REQUEST_SENSE_OP: OpInfo = OpInfo {
    opcode: REQUEST_SENSE,
    service_action: None,
    name: "REQUEST SENSE",
    usage: USAGE_REQUEST_SENSE,
    handler: request_sense::request_sense,
    timeout: T_EMULATED,
};

/// INQUIRY: in every device type's table.
pub(crate) const INQUIRY_OP: OpInfo = OpInfo {
    opcode: INQUIRY,
    service_action: None,
    name: "INQUIRY",
    usage: USAGE_INQUIRY,
    handler: inquiry::inquiry,
    timeout: T_EMULATED,
};

/// START STOP UNIT: in every device type's table.
pub(crate) const START_STOP_UNIT_OP: OpInfo = OpInfo {
    opcode: START_STOP_UNIT,
    service_action: None,
    name: "START STOP UNIT",
    usage: &[0xFF, 0x01, 0, 0x0F, 0xF7, C],
    handler: medium::start_stop_unit,
    timeout: T_EMULATED,
};

/// PREVENT ALLOW MEDIUM REMOVAL: in every device type's table.
pub(crate) const PREVENT_ALLOW_OP: OpInfo = OpInfo {
    opcode: PREVENT_ALLOW_MEDIUM_REMOVAL,
    service_action: None,
    name: "PREVENT ALLOW MEDIUM REMOVAL",
    // PREVENT
    usage: &[0xFF, 0, 0, 0, 0x03, C],
    handler: removable::prevent_allow,
    timeout: T_EMULATED,
};

/// READ CAPACITY(10): in every device type's table.
pub(crate) const READ_CAPACITY_10_OP: OpInfo = OpInfo {
    opcode: READ_CAPACITY_10,
    service_action: None,
    name: "READ CAPACITY(10)",
    usage: &[0xFF, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x01, C],
    handler: capacity::read_capacity_10,
    timeout: T_EMULATED,
};

/// READ(10): in every device type's table.
pub(crate) const READ_10_OP: OpInfo = OpInfo {
    opcode: READ_10,
    service_action: None,
    name: "READ(10)",
    usage: &[0xFF, RW_FLAGS, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
    handler: rw::read_write,
    timeout: T_IO,
};

/// SYNCHRONIZE CACHE(10): in every device type's table.
pub(crate) const SYNCHRONIZE_CACHE_10_OP: OpInfo = OpInfo {
    opcode: SYNCHRONIZE_CACHE_10,
    service_action: None,
    name: "SYNCHRONIZE CACHE(10)",
    usage: &[0xFF, 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
    handler: rw::synchronize_cache,
    timeout: T_SYNC,
};

/// REPORT LUNS: in every device type's table.
pub(crate) const REPORT_LUNS_OP: OpInfo = OpInfo {
    opcode: REPORT_LUNS,
    service_action: None,
    name: "REPORT LUNS",
    usage: USAGE_REPORT_LUNS,
    handler: report_luns::report_luns,
    timeout: T_EMULATED,
};

/// REPORT SUPPORTED OPERATION CODES: in every device type's table.
pub(crate) const RSOC_OP: OpInfo = OpInfo {
    opcode: MAINTENANCE_IN,
    service_action: Some(SA_REPORT_SUPPORTED_OPCODES),
    name: "REPORT SUPPORTED OPERATION CODES",
    // RCTD, REPORTING OPTIONS (2-0), REQUESTED OPERATION CODE / SERVICE ACTION
    usage: &[
        0xFF, 0x1F, 0x87, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, C,
    ],
    handler: maintenance::report_supported_opcodes,
    timeout: T_EMULATED,
};

/// REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS: in every device type's table.
pub(crate) const RSTMF_OP: OpInfo = OpInfo {
    opcode: MAINTENANCE_IN,
    service_action: Some(SA_REPORT_SUPPORTED_TMFS),
    name: "REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS",
    // REPD
    usage: &[0xFF, 0x1F, 0x80, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C],
    handler: maintenance::report_supported_tmfs,
    timeout: T_EMULATED,
};

/// READ(12): in every device type's table.
pub(crate) const READ_12_OP: OpInfo = OpInfo {
    opcode: READ_12,
    service_action: None,
    name: "READ(12)",
    usage: &[
        0xFF, RW_FLAGS, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C,
    ],
    handler: rw::read_write,
    timeout: T_IO,
};

/// RESERVE(6): in the disk's and the tape drive's tables.
pub(crate) const RESERVE_6_OP: OpInfo = OpInfo {
    opcode: RESERVE_6,
    service_action: None,
    name: "RESERVE(6)",
    usage: &[0xFF, 0, 0, 0, 0, C],
    handler: reserve_spc2::reserve,
    timeout: T_EMULATED,
};

/// RELEASE(6): in the disk's and the tape drive's tables.
pub(crate) const RELEASE_6_OP: OpInfo = OpInfo {
    opcode: RELEASE_6,
    service_action: None,
    name: "RELEASE(6)",
    usage: &[0xFF, 0, 0, 0, 0, C],
    handler: reserve_spc2::release,
    timeout: T_EMULATED,
};

/// RESERVE(10): in the disk's and the tape drive's tables.
pub(crate) const RESERVE_10_OP: OpInfo = OpInfo {
    opcode: RESERVE_10,
    service_action: None,
    name: "RESERVE(10)",
    usage: &[0xFF, 0, 0, 0, 0, 0, 0, 0, 0, C],
    handler: reserve_spc2::reserve,
    timeout: T_EMULATED,
};

/// RELEASE(10): in the disk's and the tape drive's tables.
pub(crate) const RELEASE_10_OP: OpInfo = OpInfo {
    opcode: RELEASE_10,
    service_action: None,
    name: "RELEASE(10)",
    usage: &[0xFF, 0, 0, 0, 0, 0, 0, 0, 0, C],
    handler: reserve_spc2::release,
    timeout: T_EMULATED,
};

/// The commands of a disk (SBC-3 and SPC-4).
pub(crate) static TABLE: &[OpInfo] = &[
    TEST_UNIT_READY_OP,
    REQUEST_SENSE_OP,
    OpInfo {
        opcode: READ_6,
        service_action: None,
        name: "READ(6)",
        usage: &[0xFF, 0x1F, 0xFF, 0xFF, 0xFF, C],
        handler: rw::read_write,
        timeout: T_IO,
    },
    OpInfo {
        opcode: WRITE_6,
        service_action: None,
        name: "WRITE(6)",
        usage: &[0xFF, 0x1F, 0xFF, 0xFF, 0xFF, C],
        handler: rw::read_write,
        timeout: T_IO,
    },
    INQUIRY_OP,
    OpInfo {
        opcode: MODE_SELECT_6,
        service_action: None,
        name: "MODE SELECT(6)",
        usage: &[0xFF, 0x10, 0, 0, 0xFF, C],
        handler: mode::mode_select,
        timeout: T_EMULATED,
    },
    RESERVE_6_OP,
    RELEASE_6_OP,
    OpInfo {
        opcode: MODE_SENSE_6,
        service_action: None,
        name: "MODE SENSE(6)",
        usage: &[0xFF, 0x08, 0xFF, 0xFF, 0xFF, C],
        handler: mode::mode_sense,
        timeout: T_EMULATED,
    },
    START_STOP_UNIT_OP,
    OpInfo {
        opcode: RECEIVE_DIAGNOSTIC_RESULTS,
        service_action: None,
        name: "RECEIVE DIAGNOSTIC RESULTS",
        // PCV; PAGE CODE; ALLOCATION LENGTH
        usage: &[0xFF, 0x01, 0xFF, 0xFF, 0xFF, C],
        handler: diagnostic::receive_diagnostic_results,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: SEND_DIAGNOSTIC,
        service_action: None,
        name: "SEND DIAGNOSTIC",
        // SELF-TEST CODE, PF, SELFTEST, DEVOFFL, UNITOFFL; PARAMETER LIST LENGTH
        usage: &[0xFF, 0xF7, 0, 0xFF, 0xFF, C],
        handler: diagnostic::send_diagnostic,
        timeout: T_IO,
    },
    PREVENT_ALLOW_OP,
    READ_CAPACITY_10_OP,
    READ_10_OP,
    OpInfo {
        opcode: WRITE_10,
        service_action: None,
        name: "WRITE(10)",
        usage: &[0xFF, RW_FLAGS, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
        handler: rw::read_write,
        timeout: T_IO,
    },
    OpInfo {
        opcode: WRITE_AND_VERIFY_10,
        service_action: None,
        name: "WRITE AND VERIFY(10)",
        usage: &[
            0xFF,
            WRITE_VERIFY_FLAGS,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0x1F,
            0xFF,
            0xFF,
            C,
        ],
        handler: rw::read_write,
        timeout: T_IO,
    },
    OpInfo {
        opcode: VERIFY_10,
        service_action: None,
        name: "VERIFY(10)",
        usage: &[
            0xFF,
            VERIFY_FLAGS,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0x1F,
            0xFF,
            0xFF,
            C,
        ],
        handler: rw::verify,
        timeout: T_IO,
    },
    OpInfo {
        opcode: PRE_FETCH_10,
        service_action: None,
        name: "PRE-FETCH(10)",
        usage: &[0xFF, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
        handler: medium::prefetch,
        timeout: T_IO,
    },
    SYNCHRONIZE_CACHE_10_OP,
    OpInfo {
        opcode: READ_DEFECT_DATA_10,
        service_action: None,
        name: "READ DEFECT DATA(10)",
        usage: &[0xFF, 0, 0x1F, 0, 0, 0, 0, 0xFF, 0xFF, C],
        handler: medium::read_defect_data,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: WRITE_SAME_10,
        service_action: None,
        name: "WRITE SAME(10)",
        // WRPROTECT, ANCHOR, UNMAP; LBA; GROUP NUMBER; NUMBER OF LOGICAL BLOCKS
        usage: &[0xFF, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
        handler: thin::write_same,
        timeout: T_IO,
    },
    OpInfo {
        opcode: UNMAP,
        service_action: None,
        name: "UNMAP",
        // ANCHOR; GROUP NUMBER; PARAMETER LIST LENGTH
        usage: &[0xFF, 0x01, 0, 0, 0, 0, 0x1F, 0xFF, 0xFF, C],
        handler: thin::unmap,
        timeout: T_IO,
    },
    OpInfo {
        opcode: SANITIZE,
        service_action: Some(sanitize::sa::OVERWRITE),
        name: "SANITIZE / OVERWRITE",
        // IMMED, AUSE; PARAMETER LIST LENGTH
        usage: USAGE_SANITIZE,
        handler: sanitize::sanitize,
        timeout: T_SANITIZE,
    },
    OpInfo {
        opcode: SANITIZE,
        service_action: Some(sanitize::sa::BLOCK_ERASE),
        name: "SANITIZE / BLOCK ERASE",
        // IMMED, AUSE; PARAMETER LIST LENGTH
        usage: USAGE_SANITIZE,
        handler: sanitize::sanitize,
        timeout: T_SANITIZE,
    },
    OpInfo {
        opcode: SANITIZE,
        service_action: Some(sanitize::sa::CRYPTO_ERASE),
        name: "SANITIZE / CRYPTOGRAPHIC ERASE",
        // IMMED, AUSE; PARAMETER LIST LENGTH
        usage: USAGE_SANITIZE,
        handler: sanitize::sanitize,
        timeout: T_SANITIZE,
    },
    OpInfo {
        opcode: SANITIZE,
        service_action: Some(sanitize::sa::EXIT_FAILURE_MODE),
        name: "SANITIZE / EXIT FAILURE MODE",
        // IMMED, AUSE; PARAMETER LIST LENGTH
        usage: USAGE_SANITIZE,
        handler: sanitize::sanitize,
        timeout: T_SANITIZE,
    },
    OpInfo {
        opcode: MODE_SELECT_10,
        service_action: None,
        name: "MODE SELECT(10)",
        usage: &[0xFF, 0x10, 0, 0, 0, 0, 0, 0xFF, 0xFF, C],
        handler: mode::mode_select,
        timeout: T_EMULATED,
    },
    RESERVE_10_OP,
    RELEASE_10_OP,
    OpInfo {
        opcode: MODE_SENSE_10,
        service_action: None,
        name: "MODE SENSE(10)",
        usage: &[0xFF, 0x18, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, C],
        handler: mode::mode_sense,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_IN,
        service_action: Some(0x00),
        name: "PERSISTENT RESERVE IN / READ KEYS",
        usage: &[0xFF, 0x1F, 0, 0, 0, 0, 0, 0xFF, 0xFF, C],
        handler: pr::pr_in,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_IN,
        service_action: Some(0x01),
        name: "PERSISTENT RESERVE IN / READ RESERVATION",
        usage: &[0xFF, 0x1F, 0, 0, 0, 0, 0, 0xFF, 0xFF, C],
        handler: pr::pr_in,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_IN,
        service_action: Some(0x02),
        name: "PERSISTENT RESERVE IN / REPORT CAPABILITIES",
        usage: &[0xFF, 0x1F, 0, 0, 0, 0, 0, 0xFF, 0xFF, C],
        handler: pr::pr_in,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_IN,
        service_action: Some(0x03),
        name: "PERSISTENT RESERVE IN / READ FULL STATUS",
        usage: &[0xFF, 0x1F, 0, 0, 0, 0, 0, 0xFF, 0xFF, C],
        handler: pr::pr_in,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_OUT,
        service_action: Some(0x00),
        name: "PERSISTENT RESERVE OUT / REGISTER",
        // SCOPE / TYPE, PARAMETER LIST LENGTH
        usage: &[0xFF, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, C],
        handler: pr::pr_out,
        timeout: T_PR_OUT,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_OUT,
        service_action: Some(0x01),
        name: "PERSISTENT RESERVE OUT / RESERVE",
        // SCOPE / TYPE, PARAMETER LIST LENGTH
        usage: &[0xFF, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, C],
        handler: pr::pr_out,
        timeout: T_PR_OUT,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_OUT,
        service_action: Some(0x02),
        name: "PERSISTENT RESERVE OUT / RELEASE",
        // SCOPE / TYPE, PARAMETER LIST LENGTH
        usage: &[0xFF, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, C],
        handler: pr::pr_out,
        timeout: T_PR_OUT,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_OUT,
        service_action: Some(0x03),
        name: "PERSISTENT RESERVE OUT / CLEAR",
        // SCOPE / TYPE, PARAMETER LIST LENGTH
        usage: &[0xFF, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, C],
        handler: pr::pr_out,
        timeout: T_PR_OUT,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_OUT,
        service_action: Some(0x04),
        name: "PERSISTENT RESERVE OUT / PREEMPT",
        // SCOPE / TYPE, PARAMETER LIST LENGTH
        usage: &[0xFF, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, C],
        handler: pr::pr_out,
        timeout: T_PR_OUT,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_OUT,
        service_action: Some(0x05),
        name: "PERSISTENT RESERVE OUT / PREEMPT AND ABORT",
        // SCOPE / TYPE, PARAMETER LIST LENGTH
        usage: &[0xFF, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, C],
        handler: pr::pr_out,
        timeout: T_PR_OUT,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_OUT,
        service_action: Some(0x06),
        name: "PERSISTENT RESERVE OUT / REGISTER AND IGNORE EXISTING KEY",
        // SCOPE / TYPE, PARAMETER LIST LENGTH
        usage: &[0xFF, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, C],
        handler: pr::pr_out,
        timeout: T_PR_OUT,
    },
    OpInfo {
        opcode: PERSISTENT_RESERVE_OUT,
        service_action: Some(0x07),
        name: "PERSISTENT RESERVE OUT / REGISTER AND MOVE",
        // SCOPE / TYPE, PARAMETER LIST LENGTH
        usage: &[0xFF, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, C],
        handler: pr::pr_out,
        timeout: T_PR_OUT,
    },
    OpInfo {
        opcode: EXTENDED_COPY,
        service_action: Some(0x00),
        name: "EXTENDED COPY(LID1)",
        // PARAMETER LIST LENGTH
        usage: USAGE_XCOPY,
        handler: xcopy::extended_copy,
        timeout: T_XCOPY,
    },
    OpInfo {
        opcode: RECEIVE_COPY_RESULTS,
        service_action: Some(xcopy::SA_COPY_STATUS),
        name: "RECEIVE COPY RESULTS(COPY STATUS)",
        // LIST IDENTIFIER; ALLOCATION LENGTH
        usage: USAGE_RCR,
        handler: xcopy::receive_copy_results,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: RECEIVE_COPY_RESULTS,
        service_action: Some(xcopy::SA_RECEIVE_DATA),
        name: "RECEIVE COPY RESULTS(RECEIVE DATA)",
        // LIST IDENTIFIER; ALLOCATION LENGTH
        usage: USAGE_RCR,
        handler: xcopy::receive_copy_results,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: RECEIVE_COPY_RESULTS,
        service_action: Some(xcopy::SA_OPERATING_PARAMETERS),
        name: "RECEIVE COPY RESULTS(OPERATING PARAMETERS)",
        // LIST IDENTIFIER; ALLOCATION LENGTH
        usage: USAGE_RCR,
        handler: xcopy::receive_copy_results,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: RECEIVE_COPY_RESULTS,
        service_action: Some(xcopy::SA_FAILED_SEGMENT_DETAILS),
        name: "RECEIVE COPY RESULTS(FAILED SEGMENT DETAILS)",
        // LIST IDENTIFIER; ALLOCATION LENGTH
        usage: USAGE_RCR,
        handler: xcopy::receive_copy_results,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: READ_16,
        service_action: None,
        name: "READ(16)",
        usage: &[
            0xFF, RW_FLAGS, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
        handler: rw::read_write,
        timeout: T_IO,
    },
    OpInfo {
        opcode: COMPARE_AND_WRITE,
        service_action: None,
        name: "COMPARE AND WRITE",
        // WRPROTECT, DPO, FUA, FUA_NV; LBA; NUMBER OF LOGICAL BLOCKS; GROUP NUMBER
        usage: &[
            0xFF, 0xFA, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0x1F, C,
        ],
        handler: caw::compare_and_write,
        timeout: T_IO,
    },
    OpInfo {
        opcode: WRITE_16,
        service_action: None,
        name: "WRITE(16)",
        usage: &[
            0xFF, RW_FLAGS, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
        handler: rw::read_write,
        timeout: T_IO,
    },
    OpInfo {
        opcode: ORWRITE_16,
        service_action: None,
        name: "ORWRITE(16)",
        // ORPROTECT, DPO, FUA, FUA_NV; LBA; TRANSFER LENGTH; GROUP NUMBER
        usage: &[
            0xFF, 0xFA, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
        handler: caw::orwrite,
        timeout: T_IO,
    },
    OpInfo {
        opcode: WRITE_AND_VERIFY_16,
        service_action: None,
        name: "WRITE AND VERIFY(16)",
        usage: &[
            0xFF,
            WRITE_VERIFY_FLAGS,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0x1F,
            C,
        ],
        handler: rw::read_write,
        timeout: T_IO,
    },
    OpInfo {
        opcode: VERIFY_16,
        service_action: None,
        name: "VERIFY(16)",
        usage: &[
            0xFF,
            VERIFY_FLAGS,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0x1F,
            C,
        ],
        handler: rw::verify,
        timeout: T_IO,
    },
    OpInfo {
        opcode: PRE_FETCH_16,
        service_action: None,
        name: "PRE-FETCH(16)",
        usage: &[
            0xFF, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
        handler: medium::prefetch,
        timeout: T_IO,
    },
    OpInfo {
        opcode: SYNCHRONIZE_CACHE_16,
        service_action: None,
        name: "SYNCHRONIZE CACHE(16)",
        usage: &[
            0xFF, 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
        handler: rw::synchronize_cache,
        timeout: T_SYNC,
    },
    OpInfo {
        opcode: WRITE_SAME_16,
        service_action: None,
        name: "WRITE SAME(16)",
        // WRPROTECT, ANCHOR, UNMAP, NDOB; LBA; NUMBER OF LOGICAL BLOCKS; GROUP NUMBER
        usage: &[
            0xFF, 0xF9, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
        handler: thin::write_same,
        timeout: T_IO,
    },
    OpInfo {
        opcode: WRITE_ATOMIC_16,
        service_action: None,
        name: "WRITE ATOMIC(16)",
        // WRPROTECT, DPO, FUA; LBA; ATOMIC BOUNDARY; TRANSFER LENGTH; GROUP NUMBER
        usage: &[
            0xFF, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
        handler: caw::write_atomic,
        timeout: T_IO,
    },
    OpInfo {
        opcode: SERVICE_ACTION_IN_16,
        service_action: Some(SA_READ_CAPACITY_16),
        name: "READ CAPACITY(16)",
        usage: &[
            0xFF, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x01, C,
        ],
        handler: capacity::read_capacity_16,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: SERVICE_ACTION_IN_16,
        service_action: Some(SA_GET_LBA_STATUS),
        name: "GET LBA STATUS",
        // LBA; ALLOCATION LENGTH
        usage: &[
            0xFF, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0,
            C,
        ],
        handler: thin::get_lba_status,
        timeout: T_IO,
    },
    REPORT_LUNS_OP,
    OpInfo {
        opcode: MAINTENANCE_IN,
        service_action: Some(SA_REPORT_TARGET_PORT_GROUPS),
        name: "REPORT TARGET PORT GROUPS",
        // PARAMETER DATA FORMAT (7-5); ALLOCATION LENGTH
        usage: &[0xFF, 0xFF, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C],
        handler: alua::report_target_port_groups,
        timeout: T_EMULATED,
    },
    RSOC_OP,
    RSTMF_OP,
    OpInfo {
        opcode: MAINTENANCE_OUT,
        service_action: Some(SA_SET_TARGET_PORT_GROUPS),
        name: "SET TARGET PORT GROUPS",
        // PARAMETER LIST LENGTH
        usage: &[0xFF, 0x1F, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C],
        handler: alua::set_target_port_groups,
        timeout: T_IO,
    },
    READ_12_OP,
    OpInfo {
        opcode: WRITE_12,
        service_action: None,
        name: "WRITE(12)",
        usage: &[
            0xFF, RW_FLAGS, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C,
        ],
        handler: rw::read_write,
        timeout: T_IO,
    },
    OpInfo {
        opcode: WRITE_AND_VERIFY_12,
        service_action: None,
        name: "WRITE AND VERIFY(12)",
        usage: &[
            0xFF,
            WRITE_VERIFY_FLAGS,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0x1F,
            C,
        ],
        handler: rw::read_write,
        timeout: T_IO,
    },
    OpInfo {
        opcode: VERIFY_12,
        service_action: None,
        name: "VERIFY(12)",
        usage: &[
            0xFF,
            VERIFY_FLAGS,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0x1F,
            C,
        ],
        handler: rw::verify,
        timeout: T_IO,
    },
    OpInfo {
        opcode: READ_DEFECT_DATA_12,
        service_action: None,
        name: "READ DEFECT DATA(12)",
        usage: &[
            0xFF, 0x1F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, C,
        ],
        handler: medium::read_defect_data,
        timeout: T_EMULATED,
    },
];

fn test_unit_ready(_: &LogicalUnit, _: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    Ok(Action::good())
}

/// Finds the entry for `cdb` in `table` (the logical unit's: [`LogicalUnit::op_table`]) and returns it with the CDB cut to its length, after
/// the length and usage-map checks.
pub(crate) fn lookup<'c>(
    table: &'static [OpInfo],
    cdb: &'c [u8],
) -> Result<(&'static OpInfo, &'c [u8]), Sense> {
    let Some(&op) = cdb.first() else {
        return Err(Sense::invalid_opcode());
    };
    let mut candidates = table.iter().filter(|e| e.opcode == op).peekable();
    if candidates.peek().is_none() {
        return Err(Sense::invalid_opcode());
    }
    let sa = cdb.get(1).map(|b| b & 0x1F);
    let entry = candidates
        .find(|e| e.service_action.is_none() || e.service_action == sa)
        .ok_or_else(|| {
            if sa.is_none() {
                Sense::invalid_field_in_cdb_unspecified()
            } else {
                Sense::invalid_field_in_cdb(1, Some(4))
            }
        })?;
    let cdb = validate(cdb, entry.usage)?;
    Ok((entry, cdb))
}

/// Length and usage-map checks for a CDB whose opcode is known to be `usage`'s.
pub(crate) fn validate<'c>(cdb: &'c [u8], usage: &[u8]) -> Result<&'c [u8], Sense> {
    let cdb = cdb
        .get(..usage.len())
        .ok_or_else(Sense::invalid_field_in_cdb_unspecified)?;
    check_usage(cdb, usage)?;
    Ok(cdb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_maps_have_standard_lengths() {
        for e in TABLE.iter().chain(crate::mmc::TABLE) {
            let expected = match e.opcode >> 5 {
                0 => 6,
                1 | 2 => 10,
                4 => 16,
                5 => 12,
                _ => 0,
            };
            assert_eq!(e.usage.len(), expected, "{}", e.name);
            assert_eq!(e.usage[0], 0xFF, "{}", e.name);
            assert_eq!(e.usage[e.usage.len() - 1], C, "{}", e.name);
            assert!(e.timeout > 0, "{}", e.name);
            if e.service_action.is_some() {
                assert_eq!(e.usage[1] & 0x1F, 0x1F, "{}", e.name);
            }
        }
    }

    #[test]
    fn table_is_sorted_and_consistent() {
        for w in TABLE.windows(2).chain(crate::mmc::TABLE.windows(2)) {
            let key = |e: &OpInfo| (e.opcode, e.service_action);
            assert!(key(&w[0]) < key(&w[1]), "{} / {}", w[0].name, w[1].name);
            if w[0].opcode == w[1].opcode {
                // an operation code has service actions for all its entries or for none
                assert!(w[0].service_action.is_some() && w[1].service_action.is_some());
            }
        }
    }
}
