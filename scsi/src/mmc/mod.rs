//! CD/DVD logical units (MMC-6, tgt's `--device-type cd`): a read-only DVD-ROM drive whose
//! disc is an image file. This module owns the device type ([`DeviceType`]) and the MMC
//! opcode table a `Cd` logical unit executes instead of the block device's; `disc` answers
//! the MMC commands about the drive and its disc (GET CONFIGURATION, READ TOC/PMA/ATIP,
//! READ DISC INFORMATION, GET EVENT STATUS NOTIFICATION, MECHANISM STATUS, the MM
//! Capabilities mode page). READ(10)/(12), READ CAPACITY(10), START STOP UNIT (load and
//! eject), PREVENT ALLOW MEDIUM REMOVAL, INQUIRY and the rest are the block device's
//! handlers, which follow the LU's block length (2048) and device type. MODE SENSE(6) is
//! answered too, though MMC has only the 10-byte form: Linux's sr driver asks with it.
//!
//! The drive does not write: it has no write feature, so WRITE and its kin are unknown
//! operation codes (INVALID COMMAND OPERATION CODE), as on any DVD-ROM drive.

mod disc;

pub(crate) use disc::{EVENT_MEDIA_REMOVAL, EVENT_NEW_MEDIA};

use crate::ops::opcode::*;
use crate::ops::{self, C, OpInfo, T_EMULATED};

/// Peripheral device types a logical unit can be (INQUIRY byte 0, tgt's `--device-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceType {
    /// Direct-access block device (SBC-3), tgt's `disk`.
    #[default]
    Disk,
    /// CD/DVD drive (MMC-6) with a read-only DVD-ROM disc, tgt's `cd`.
    Cd,
    /// Tape drive (SSC-3) over a tgt tape image, tgt's `tape`.
    Tape,
    /// Medium changer (SMC-3) of a virtual tape library, tgt's `changer`.
    Changer,
    /// A real local SCSI device passed through (tgt's `pt`, bstype `sg` or `bsg`): it
    /// answers its commands itself ([`crate::pt`]).
    Passthrough,
}

impl DeviceType {
    /// The peripheral device type code (INQUIRY byte 0 bits 4-0).
    pub fn pdt(self) -> u8 {
        match self {
            DeviceType::Disk => 0x00,
            DeviceType::Cd => 0x05,
            DeviceType::Tape => 0x01,
            DeviceType::Changer => 0x08,
            // the device's own, which only its INQUIRY tells
            DeviceType::Passthrough => 0x1F,
        }
    }

    /// tgt's name of the type (`--device-type`): `disk`, `cd`, `tape`, `changer` or `pt`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceType::Disk => "disk",
            DeviceType::Cd => "cd",
            DeviceType::Tape => "tape",
            DeviceType::Changer => "changer",
            DeviceType::Passthrough => "pt",
        }
    }
}

/// Operation codes of MMC-6 beyond SPC/SBC.
pub mod opcode {
    pub const READ_TOC_PMA_ATIP: u8 = 0x43;
    pub const GET_CONFIGURATION: u8 = 0x46;
    pub const GET_EVENT_STATUS_NOTIFICATION: u8 = 0x4A;
    pub const READ_DISC_INFORMATION: u8 = 0x51;
    pub const MECHANISM_STATUS: u8 = 0xBD;
}

use opcode::*;

/// The commands of a CD/DVD logical unit, sorted by (operation code, service action) like
/// the block device's table; REPORT SUPPORTED OPERATION CODES lists exactly these.
pub(crate) static TABLE: &[OpInfo] = &[
    ops::TEST_UNIT_READY_OP,
    ops::REQUEST_SENSE_OP,
    ops::INQUIRY_OP,
    OpInfo {
        opcode: MODE_SENSE_6,
        service_action: None,
        name: "MODE SENSE(6)",
        usage: &[0xFF, 0x08, 0xFF, 0xFF, 0xFF, C],
        handler: disc::mode_sense,
        timeout: T_EMULATED,
    },
    ops::START_STOP_UNIT_OP,
    ops::PREVENT_ALLOW_OP,
    ops::READ_CAPACITY_10_OP,
    ops::READ_10_OP,
    ops::SYNCHRONIZE_CACHE_10_OP,
    OpInfo {
        opcode: READ_TOC_PMA_ATIP,
        service_action: None,
        name: "READ TOC/PMA/ATIP",
        // MSF; FORMAT (3-0); TRACK/SESSION NUMBER; ALLOCATION LENGTH
        usage: &[0xFF, 0x02, 0x0F, 0, 0, 0, 0xFF, 0xFF, 0xFF, C],
        handler: disc::read_toc,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: GET_CONFIGURATION,
        service_action: None,
        name: "GET CONFIGURATION",
        // RT (1-0); STARTING FEATURE NUMBER; ALLOCATION LENGTH
        usage: &[0xFF, 0x03, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, C],
        handler: disc::get_configuration,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: GET_EVENT_STATUS_NOTIFICATION,
        service_action: None,
        name: "GET EVENT STATUS NOTIFICATION",
        // POLLED; NOTIFICATION CLASS REQUEST; ALLOCATION LENGTH
        usage: &[0xFF, 0x01, 0, 0, 0xFF, 0, 0, 0xFF, 0xFF, C],
        handler: disc::get_event_status,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: READ_DISC_INFORMATION,
        service_action: None,
        name: "READ DISC INFORMATION",
        // DATA TYPE (2-0); ALLOCATION LENGTH
        usage: &[0xFF, 0x07, 0, 0, 0, 0, 0, 0xFF, 0xFF, C],
        handler: disc::read_disc_information,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: MODE_SENSE_10,
        service_action: None,
        name: "MODE SENSE(10)",
        usage: &[0xFF, 0x18, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, C],
        handler: disc::mode_sense,
        timeout: T_EMULATED,
    },
    ops::REPORT_LUNS_OP,
    ops::RSOC_OP,
    ops::RSTMF_OP,
    ops::READ_12_OP,
    OpInfo {
        opcode: MECHANISM_STATUS,
        service_action: None,
        name: "MECHANISM STATUS",
        // ALLOCATION LENGTH
        usage: &[0xFF, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0, C],
        handler: disc::mechanism_status,
        timeout: T_EMULATED,
    },
];

/// Commands about the drive that work with no disc in it (the removable-medium gate lets
/// them through).
pub(crate) fn without_disc(op: u8) -> bool {
    matches!(
        op,
        GET_CONFIGURATION | GET_EVENT_STATUS_NOTIFICATION | MECHANISM_STATUS
    )
}

#[cfg(test)]
mod tests;
