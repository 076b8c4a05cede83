//! Medium changers (SMC-3, tgt's `--device-type changer`, bstype `smc`): the robot of a
//! virtual tape library. This module owns the changer's opcode table, READ ELEMENT STATUS
//! (with volume tags), the Element Address Assignment, Transport Geometry and Device
//! Capabilities mode pages, POSITION TO ELEMENT and INITIALIZE ELEMENT STATUS, and the
//! decoding of MOVE MEDIUM into [`ChangerOp`], which the server carries out (it takes a
//! tape out of one drive LUN and puts it in another, then [`LogicalUnit::changer_commit`]).
//! The elements and their cartridges are a [`Library`] (`library.rs`), configured with
//! tgt's `--params`.

mod library;
mod status;

use std::sync::Mutex;

pub use library::{ConfigError, Configured, DriveRef, Element, Kind, Library, Move, valid_barcode};

use crate::cdb::be16;
use crate::ops::opcode::*;
use crate::ops::{self, C, OpInfo, T_EMULATED};
use crate::sense::Sense;
use crate::{Action, LogicalUnit, Req};

pub mod opcode {
    pub const INITIALIZE_ELEMENT_STATUS: u8 = 0x07;
    pub const POSITION_TO_ELEMENT: u8 = 0x2B;
    pub const MOVE_MEDIUM: u8 = 0xA5;
    pub const INITIALIZE_ELEMENT_STATUS_WITH_RANGE: u8 = 0xE7;
    pub const READ_ELEMENT_STATUS: u8 = 0xB8;
}

use opcode::*;

/// What a changer command asks of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangerOp {
    /// MOVE MEDIUM from element `src` to element `dst`.
    Move { src: u16, dst: u16, invert: bool },
}

/// A changer's state in its logical unit: its library, and the state saved before a
/// restart, whose cartridges go back into the elements as the configuration makes them.
#[derive(Debug, Default)]
pub(crate) struct ChangerUnit {
    library: Mutex<Library>,
    saved: Mutex<Option<Library>>,
}

impl ChangerUnit {
    fn lib(&self) -> std::sync::MutexGuard<'_, Library> {
        self.library.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn saved(&self) -> std::sync::MutexGuard<'_, Option<Library>> {
        self.saved.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// ILLEGAL REQUEST, INVALID ELEMENT ADDRESS.
const INVALID_ELEMENT: Sense = Sense::new(crate::sense::key::ILLEGAL_REQUEST, 0x21, 0x01);

impl LogicalUnit {
    /// tgtadm's `--params` for the changer (see [`Library::configure`]); elements it makes
    /// get their cartridges from the saved state ([`LogicalUnit::changer_restore`]).
    pub fn changer_configure(&self, pairs: &[(&str, &str)]) -> Result<Configured, ConfigError> {
        let saved = self.changer.saved();
        let mut lib = self.changer.lib();
        let mut done = lib.configure(pairs)?;
        if let Some(s) = saved.as_ref() {
            lib.fill_from(s);
            if lib.media_home.is_none() {
                lib.media_home.clone_from(&s.media_home);
            }
            // a drive bound now may have been given its cartridge by the saved state
            if done.load.is_none()
                && let Some(d) = pairs
                    .iter()
                    .find(|(k, _)| *k == "address")
                    .and_then(|(_, v)| v.trim().parse::<u16>().ok())
                    .and_then(|a| lib.elements.get(&a))
                    .filter(|e| e.kind == Kind::Drive)
                && let (Some(drive), Some(b)) = (d.drive, d.cartridge.clone())
            {
                done.load = Some((drive, b));
            }
        }
        Ok(done)
    }

    /// The elements and what they hold.
    pub fn changer_library(&self) -> Library {
        self.changer.lib().clone()
    }

    /// A state saved before a restart: its cartridges go back into the elements that exist
    /// and those the configuration makes later (unless they are elsewhere already).
    pub fn changer_restore(&self, saved: Library) {
        let mut lib = self.changer.lib();
        lib.fill_from(&saved);
        if lib.media_home.is_none() {
            lib.media_home.clone_from(&saved.media_home);
        }
        *self.changer.saved() = Some(saved);
    }

    /// The library of another logical unit taken over whole (the LUN rebuilt by tgtadm:
    /// its elements and cartridges stay, with the state saved before a restart).
    pub fn changer_adopt(&self, from: &LogicalUnit) {
        *self.changer.lib() = from.changer.lib().clone();
        *self.changer.saved() = from.changer.saved().clone();
    }

    /// Checks a MOVE MEDIUM against the elements now.
    pub fn changer_plan(&self, src: u16, dst: u16, invert: bool) -> Result<Move, Sense> {
        self.changer.lib().plan(src, dst, invert)
    }

    /// A move carried out.
    pub fn changer_commit(&self, m: &Move) {
        self.changer.lib().commit(m);
    }
}

fn read_element_status(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let lib = lu.changer.lib();
    let data = status::read_element_status(&lib, cdb)?;
    Ok(Action::data(data))
}

fn move_medium(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let transport = be16(cdb, 2);
    if transport != 0
        && lu
            .changer
            .lib()
            .elements
            .get(&transport)
            .is_none_or(|e| e.kind != Kind::Transport)
    {
        return Err(INVALID_ELEMENT);
    }
    Ok(Action::Changer(ChangerOp::Move {
        src: be16(cdb, 4),
        dst: be16(cdb, 6),
        invert: cdb[10] & 0x01 != 0,
    }))
}

fn position_to_element(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let lib = lu.changer.lib();
    let ok = |a: u16, transport: bool| {
        lib.elements
            .get(&a)
            .is_some_and(|e| (e.kind == Kind::Transport) == transport)
    };
    let transport = be16(cdb, 2);
    if (transport != 0 && !ok(transport, true)) || !ok(be16(cdb, 4), false) {
        return Err(INVALID_ELEMENT);
    }
    Ok(Action::good())
}

fn initialize_element_status(_: &LogicalUnit, _: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    // the inventory is always known: nothing to scan
    Ok(Action::good())
}

/// Byte 1 bits 7-5 of the SMC commands: SCSI-2's LOGICAL UNIT NUMBER, obsolete, which
/// `mtx` still fills in; accepted and ignored.
const LUN: u8 = 0xE0;

/// The commands of a medium changer, sorted by (operation code, service action).
pub(crate) static TABLE: &[OpInfo] = &[
    ops::TEST_UNIT_READY_OP,
    ops::REQUEST_SENSE_OP,
    OpInfo {
        opcode: INITIALIZE_ELEMENT_STATUS,
        service_action: None,
        name: "INITIALIZE ELEMENT STATUS",
        usage: &[0xFF, LUN, 0, 0, 0, C],
        handler: initialize_element_status,
        timeout: T_EMULATED,
    },
    ops::INQUIRY_OP,
    ops::RESERVE_6_OP,
    ops::RELEASE_6_OP,
    OpInfo {
        opcode: MODE_SENSE_6,
        service_action: None,
        name: "MODE SENSE(6)",
        usage: &[0xFF, 0x08, 0xFF, 0xFF, 0xFF, C],
        handler: status::mode_sense,
        timeout: T_EMULATED,
    },
    ops::PREVENT_ALLOW_OP,
    OpInfo {
        opcode: POSITION_TO_ELEMENT,
        service_action: None,
        name: "POSITION TO ELEMENT",
        // TRANSPORT ELEMENT ADDRESS; DESTINATION ELEMENT ADDRESS; INVERT
        usage: &[0xFF, LUN, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x01, C],
        handler: position_to_element,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: MODE_SENSE_10,
        service_action: None,
        name: "MODE SENSE(10)",
        usage: &[0xFF, 0x08, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, C],
        handler: status::mode_sense,
        timeout: T_EMULATED,
    },
    ops::REPORT_LUNS_OP,
    ops::RSOC_OP,
    ops::RSTMF_OP,
    OpInfo {
        opcode: MOVE_MEDIUM,
        service_action: None,
        name: "MOVE MEDIUM",
        // TRANSPORT ELEMENT ADDRESS; SOURCE ADDRESS; DESTINATION ADDRESS; INVERT
        usage: &[0xFF, LUN, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x01, C],
        handler: move_medium,
        timeout: 600,
    },
    OpInfo {
        opcode: READ_ELEMENT_STATUS,
        service_action: None,
        name: "READ ELEMENT STATUS",
        // VOLTAG, ELEMENT TYPE CODE; STARTING ELEMENT ADDRESS; NUMBER OF ELEMENTS;
        // CURDATA, DVCID; ALLOCATION LENGTH
        usage: &[
            0xFF,
            LUN | 0x1F,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0x03,
            0xFF,
            0xFF,
            0xFF,
            0,
            C,
        ],
        handler: read_element_status,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: INITIALIZE_ELEMENT_STATUS_WITH_RANGE,
        service_action: None,
        name: "INITIALIZE ELEMENT STATUS WITH RANGE",
        // FAST, RANGE; ELEMENT ADDRESS; NUMBER OF ELEMENTS
        usage: &[0xFF, LUN | 0x03, 0xFF, 0xFF, 0, 0, 0xFF, 0xFF, 0, C],
        handler: initialize_element_status,
        timeout: T_EMULATED,
    },
];

#[cfg(test)]
mod tests;
