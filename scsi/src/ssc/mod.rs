//! Tape drives (SSC-3, tgt's `--device-type tape`, bstype `ssc`): a sequential-access logical
//! unit whose tape is an image file in tgt's format (`format`). This module owns the
//! drive's opcode table, the decoding of its commands into [`TapeOp`]s (the server runs
//! them in arrival order with [`LogicalUnit::run_tape`], off the event threads, since each
//! follows the file's headers), READ BLOCK LIMITS, and the drive's state: the tape loaded
//! (`drive::Cartridge`), one the initiator unloaded (still in the drive: LOAD brings it
//! back), and the mode parameters (`mode`: block length — 0 for variable-block mode —,
//! density code, data compression).

pub mod drive;
pub mod format;
mod mode;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

pub use drive::{BadTape, Cartridge, Done, MemTape, TapeMedium};

use crate::cdb::{be16, be24, be32, be64};
use crate::ops::opcode::*;
use crate::ops::{self, C, OpInfo, T_EMULATED};
use crate::sense::Sense;
use crate::{Action, Completion, LogicalUnit, Req};

pub mod opcode {
    pub const REWIND: u8 = 0x01;
    pub const READ_BLOCK_LIMITS: u8 = 0x05;
    pub const WRITE_FILEMARKS_6: u8 = 0x10;
    pub const SPACE_6: u8 = 0x11;
    pub const ERASE_6: u8 = 0x19;
    pub const LOAD_UNLOAD: u8 = 0x1B;
    pub const LOCATE_10: u8 = 0x2B;
    pub const READ_POSITION: u8 = 0x34;
    pub const LOCATE_16: u8 = 0x92;
}

use opcode::*;

/// The largest block READ BLOCK LIMITS offers (and the drive accepts): 8 MiB.
pub const MAX_BLOCK: u32 = 8 << 20;
/// The most bytes one READ or WRITE may move in fixed-block mode.
const MAX_TRANSFER: u64 = 64 << 20;

/// Positioning commands may walk the whole tape.
const T_POSITION: u32 = 600;
const T_RW: u32 = 60;

/// What a tape command asks of the drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TapeOp {
    /// READ(6): `len` bytes (variable) or `len` blocks of the mode's block length (fixed).
    Read {
        fixed: bool,
        sili: bool,
        len: u32,
    },
    /// WRITE(6): the command's data, as one record or as fixed blocks.
    Write {
        fixed: bool,
        len: u32,
    },
    WriteFilemarks {
        count: u32,
        immed: bool,
    },
    SpaceBlocks(i64),
    SpaceFilemarks(i64),
    SpaceToEod,
    Locate(u64),
    /// READ POSITION: short form (20 bytes) or long form (32 bytes).
    ReadPosition {
        long: bool,
        alloc: usize,
    },
    Rewind,
    Erase,
    /// LOAD UNLOAD with LOAD = 1 / 0.
    Load(bool),
}

impl TapeOp {
    /// Bytes it moves (statistics): a READ's or WRITE's transfer.
    pub fn bytes(&self, block_len: u32) -> u64 {
        match *self {
            TapeOp::Read { fixed, len, .. } | TapeOp::Write { fixed, len } => {
                u64::from(len) * if fixed { u64::from(block_len) } else { 1 }
            }
            _ => 0,
        }
    }
}

/// What a tape drive holds.
#[derive(Default)]
pub(crate) struct Slot {
    /// The tape, loaded.
    loaded: Option<Cartridge>,
    /// A tape the initiator unloaded, still in the drive.
    unloaded: Option<Cartridge>,
}

/// A tape drive's state that goes to a new process (live upgrade, `crate::handover`): the
/// tape in it (by barcode), loaded or unloaded, the position of a loaded one, and the mode
/// parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TapeCarry {
    pub tape: TapeIn,
    /// The tape's barcode (empty: no tape).
    pub barcode: String,
    pub block_len: u32,
    pub density: u8,
    pub compression: bool,
}

/// Whether a tape is in the drive, and where a loaded one is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TapeIn {
    #[default]
    Empty,
    /// Loaded, positioned at the record header at `offset` with `file` filemarks before it.
    Loaded { offset: u64, file: u64 },
    /// In the drive, unloaded (at its beginning).
    Unloaded,
}

/// A tape drive's state in its logical unit.
#[derive(Default)]
pub(crate) struct TapeUnit {
    slot: Mutex<Slot>,
    /// The previous process's tape and position, until [`LogicalUnit::tape_resume`].
    pending: Mutex<Option<TapeCarry>>,
    /// Mode block descriptor BLOCK LENGTH: 0 = variable-block mode.
    block_len: AtomicU32,
    density: AtomicU8,
    /// Data compression page DCE.
    compression: AtomicBool,
    /// The loaded tape is write protected (read lock-free by MODE SENSE).
    tape_protected: AtomicBool,
}

impl std::fmt::Debug for TapeUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapeUnit")
            .field("block_len", &self.block_len())
            .finish_non_exhaustive()
    }
}

impl TapeUnit {
    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn block_len(&self) -> u32 {
        self.block_len.load(Ordering::Relaxed)
    }
}

/// A tape taken out of its drive.
pub struct Removed {
    pub medium: Box<dyn TapeMedium>,
    /// The last sync of what was written to it.
    pub synced: std::io::Result<()>,
}

/// Where a tape drive is, for the administrator (tgtadm show, metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TapeStatus {
    /// A tape is loaded (or in the drive, unloaded).
    pub loaded: bool,
    pub barcode: String,
    pub object: u64,
    pub file: u64,
}

impl LogicalUnit {
    /// Puts the tape `io` in the drive and loads it (the administrator: tgtadm `path=`, a
    /// changer's MOVE MEDIUM). Every I_T nexus gets NOT READY TO READY CHANGE. A tape
    /// already in the drive is given back first.
    pub fn tape_insert(&self, io: Box<dyn TapeMedium>) -> Result<Option<Removed>, BadTape> {
        let c = Cartridge::open(io)?;
        let old = self.tape_remove();
        let t = &self.tape;
        t.tape_protected
            .store(c.write_protected(), Ordering::Relaxed);
        t.slot().loaded = Some(c);
        self.set_medium_present(true);
        Ok(old)
    }

    /// Takes the tape out of the drive, whether loaded or not, after making what was
    /// written to it durable (whether that worked is in [`Removed::synced`]: the writes were
    /// acknowledged in buffered mode, so only the administrator can be told).
    pub fn tape_remove(&self) -> Option<Removed> {
        let c = {
            let mut s = self.tape.slot();
            s.loaded.take().or_else(|| s.unloaded.take())
        }?;
        self.set_medium_present(false);
        let (medium, synced) = c.into_medium();
        Some(Removed { medium, synced })
    }

    /// The drive's tape and position.
    pub fn tape_status(&self) -> TapeStatus {
        let s = self.tape.slot();
        match s.loaded.as_ref().or(s.unloaded.as_ref()) {
            Some(c) => TapeStatus {
                loaded: true,
                barcode: c.mam().barcode.clone(),
                object: c.object(),
                file: c.file(),
            },
            None => TapeStatus::default(),
        }
    }

    /// What a new process goes on with ([`LogicalUnit::tape_resume`]).
    pub fn tape_carry(&self) -> TapeCarry {
        let t = &self.tape;
        let s = t.slot();
        let (tape, c) = match (s.loaded.as_ref(), s.unloaded.as_ref()) {
            (Some(c), _) => {
                let (offset, file) = c.place();
                (TapeIn::Loaded { offset, file }, Some(c))
            }
            (None, Some(c)) => (TapeIn::Unloaded, Some(c)),
            (None, None) => (TapeIn::Empty, None),
        };
        TapeCarry {
            tape,
            barcode: c.map(|c| c.mam().barcode.clone()).unwrap_or_default(),
            block_len: t.block_len(),
            density: t.density.load(Ordering::Relaxed),
            compression: t.compression.load(Ordering::Relaxed),
        }
    }

    /// Keeps the previous process's state until the tape is in the drive again: the mode
    /// parameters now, the tape's state and position at [`LogicalUnit::tape_resume`].
    pub(crate) fn tape_carried(&self, c: TapeCarry) {
        let t = &self.tape;
        t.block_len.store(c.block_len, Ordering::Relaxed);
        t.density.store(c.density, Ordering::Relaxed);
        t.compression.store(c.compression, Ordering::Relaxed);
        *t.pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
    }

    /// Once the server has put the tape in again (start, after its changer settled): the
    /// drive goes on where the previous process left it — the same tape, loaded or
    /// unloaded, at the same position. When it cannot (another tape, none, a position the
    /// image does not have), it says why, and the sessions that moved get POWER ON
    /// OCCURRED instead, so that no initiator goes on writing at a position it no longer
    /// has. Without a carried state, nothing happens.
    pub fn tape_resume(&self) -> Result<(), String> {
        let Some(c) = self
            .tape
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return Ok(());
        };
        let r = self.tape_go_on(&c);
        if r.is_err() {
            self.shared.lock().carried_power_on();
        }
        r
    }

    fn tape_go_on(&self, c: &TapeCarry) -> Result<(), String> {
        let mut s = self.tape.slot();
        let slot = &mut *s;
        let here = slot.loaded.as_ref().or(slot.unloaded.as_ref());
        match (c.tape, here) {
            (TapeIn::Empty, None) => return Ok(()),
            (TapeIn::Empty, Some(_)) => return Err("a tape is in the drive, there was none".into()),
            (_, None) => return Err(format!("tape {} is not in the drive", c.barcode)),
            (_, Some(t)) if t.mam().barcode != c.barcode => {
                return Err(format!(
                    "tape {} is in the drive, {} was",
                    t.mam().barcode,
                    c.barcode
                ));
            }
            _ => {}
        }
        let (offset, file) = match c.tape {
            TapeIn::Loaded { offset, file } => (offset, file),
            _ => {
                if let Some(mut t) = slot.loaded.take() {
                    let r = t.rewind();
                    slot.unloaded = Some(t);
                    drop(s);
                    self.medium_unloaded();
                    r.map_err(|_| "cannot rewind the tape".to_string())?;
                }
                return Ok(());
            }
        };
        if let Some(t) = slot.unloaded.take() {
            slot.loaded = Some(t);
        }
        let Some(t) = slot.loaded.as_mut() else {
            return Err("no tape loaded".into());
        };
        t.go_to(offset, file)
            .map_err(|_| format!("tape {} has no record at offset {offset}", c.barcode))
    }

    /// The mode parameters' block length (0: variable-block mode).
    pub fn tape_block_len(&self) -> u32 {
        self.tape.block_len()
    }

    /// Makes what was written to the loaded tape durable (a clean stop).
    pub fn tape_sync(&self) -> std::io::Result<()> {
        match self.tape.slot().loaded.as_mut() {
            Some(c) => c.sync(),
            None => Ok(()),
        }
    }

    /// Runs one decoded tape command on the drive, with the command's write data.
    pub fn run_tape(&self, op: &TapeOp, data_out: &[u8]) -> Completion {
        let done = self.tape_done(op, data_out);
        match done.sense {
            None => Completion::good_with(done.data),
            Some(s) => {
                let mut c = self.check_condition(&s);
                c.data = done.data;
                c
            }
        }
    }

    fn tape_done(&self, op: &TapeOp, data_out: &[u8]) -> Done {
        let t = &self.tape;
        let mut slot = t.slot();
        if let TapeOp::Load(load) = *op {
            return self.load_unload(&mut slot, load);
        }
        let Some(c) = slot.loaded.as_mut() else {
            return crate::removable::MEDIUM_NOT_PRESENT.into();
        };
        let block_len = t.block_len();
        match *op {
            TapeOp::Read {
                fixed: false,
                sili,
                len,
            } => c.read_variable(len, sili, block_len),
            TapeOp::Read {
                fixed: true, len, ..
            } => c.read_fixed(len, block_len),
            TapeOp::Write { fixed, len } => {
                let bytes = if fixed {
                    u64::from(len) * u64::from(block_len)
                } else {
                    u64::from(len)
                };
                let Some(data) = usize::try_from(bytes).ok().and_then(|n| data_out.get(..n)) else {
                    return Sense::invalid_field_in_cdb(2, Some(7)).into();
                };
                if self.write_protected() {
                    return Sense::write_protected().into();
                }
                c.write(data, fixed.then_some(block_len))
            }
            TapeOp::WriteFilemarks { count, immed } => {
                if count > 0 && self.write_protected() {
                    return Sense::write_protected().into();
                }
                c.write_filemarks(count, immed)
            }
            TapeOp::SpaceBlocks(n) => c.space_blocks(n),
            TapeOp::SpaceFilemarks(n) => c.space_filemarks(n),
            TapeOp::SpaceToEod => c.space_to_eod(),
            TapeOp::Locate(o) => c.locate(o),
            TapeOp::ReadPosition { long, alloc } => Done {
                data: position_data(c, long, alloc),
                sense: None,
            },
            TapeOp::Rewind => match c.rewind() {
                Ok(()) => Done::default(),
                Err(s) => s.into(),
            },
            TapeOp::Erase => {
                if self.write_protected() {
                    return Sense::write_protected().into();
                }
                c.erase()
            }
            TapeOp::Load(_) => Done::default(),
        }
    }

    fn load_unload(&self, slot: &mut Slot, load: bool) -> Done {
        if load {
            if let Some(c) = slot.loaded.as_mut() {
                return match c.rewind() {
                    Ok(()) => Done::default(),
                    Err(s) => s.into(),
                };
            }
            let Some(mut c) = slot.unloaded.take() else {
                return crate::removable::MEDIUM_NOT_PRESENT.into();
            };
            let r = c.rewind();
            slot.loaded = Some(c);
            // every I_T nexus, the loading one too, learns that the tape is ready (Linux's
            // st takes that unit attention as "at the beginning of a new tape")
            self.set_medium_present(true);
            return match r {
                Ok(()) => Done::default(),
                Err(s) => s.into(),
            };
        }
        if self.medium_removal_prevented() {
            return crate::removable::MEDIUM_REMOVAL_PREVENTED.into();
        }
        let Some(mut c) = slot.loaded.take() else {
            return crate::removable::MEDIUM_NOT_PRESENT.into();
        };
        let r = c.rewind();
        slot.unloaded = Some(c);
        self.medium_unloaded();
        match r {
            Ok(()) => Done::default(),
            Err(s) => s.into(),
        }
    }
}

/// READ POSITION data: short form (SSC-3 7.5.2) or long form (7.5.3).
fn position_data(c: &Cartridge, long: bool, alloc: usize) -> Vec<u8> {
    let mut flags = 0u8;
    if c.at_bop() {
        flags |= 0x80; // BOP
    }
    if c.beyond_early_warning() {
        flags |= 0x40; // EOP
    }
    let object = c.object();
    if long {
        let mut d = vec![0u8; 32];
        d[0] = flags;
        d[8..16].copy_from_slice(&object.to_be_bytes());
        d[16..24].copy_from_slice(&c.file().to_be_bytes());
        crate::cdb::truncate(d, if alloc == 0 { 32 } else { alloc })
    } else {
        let mut d = vec![0u8; 20];
        d[0] = flags;
        let o = u32::try_from(object).unwrap_or(u32::MAX);
        if u32::try_from(object).is_err() {
            d[0] |= 0x04; // LOLU: the position does not fit
        }
        d[4..8].copy_from_slice(&o.to_be_bytes());
        d[8..12].copy_from_slice(&o.to_be_bytes());
        d
    }
}

fn tape(op: TapeOp) -> Result<Action, Sense> {
    Ok(Action::Tape(op))
}

fn rewind(_: &LogicalUnit, _: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    // IMMED (bit 0) is honoured by answering when the rewind is done: it is quick here
    tape(TapeOp::Rewind)
}

fn read_block_limits(_: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    if cdb[1] & 0x01 != 0 {
        // MLOI: the maximum logical object identifier is not reported
        return Err(Sense::invalid_field_in_cdb(1, Some(0)));
    }
    let mut d = vec![0u8; 6];
    d[0] = 0; // granularity 2^0
    d[1..4].copy_from_slice(&MAX_BLOCK.to_be_bytes()[1..]);
    d[4..6].copy_from_slice(&1u16.to_be_bytes());
    Ok(Action::data(d))
}

fn read_write(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let fixed = cdb[1] & 0x01 != 0;
    let len = be24(cdb, 2);
    let read = cdb[0] == READ_6;
    let sili = read && cdb[1] & 0x02 != 0;
    if fixed && sili {
        return Err(Sense::invalid_field_in_cdb(1, Some(1)));
    }
    if fixed {
        let bl = lu.tape.block_len();
        if bl == 0 {
            return Err(Sense::invalid_field_in_cdb(1, Some(0)));
        }
        if u64::from(len) * u64::from(bl) > MAX_TRANSFER {
            return Err(Sense::invalid_field_in_cdb(2, Some(7)));
        }
    } else if len > MAX_BLOCK {
        return Err(Sense::invalid_field_in_cdb(2, Some(7)));
    }
    if read {
        tape(TapeOp::Read { fixed, sili, len })
    } else {
        lu.check_writable()?;
        tape(TapeOp::Write { fixed, len })
    }
}

fn write_filemarks(lu: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    if cdb[1] & 0x02 != 0 {
        // WSMK: setmarks are not supported
        return Err(Sense::invalid_field_in_cdb(1, Some(1)));
    }
    let count = be24(cdb, 2);
    if count > 0 {
        lu.check_writable()?;
    }
    tape(TapeOp::WriteFilemarks {
        count,
        immed: cdb[1] & 0x01 != 0,
    })
}

/// A 24-bit two's complement count.
fn signed24(cdb: &[u8], at: usize) -> i64 {
    let v = be24(cdb, at);
    i64::from(((v << 8) as i32) >> 8)
}

fn space(_: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let count = signed24(cdb, 2);
    match cdb[1] & 0x0F {
        0 => tape(TapeOp::SpaceBlocks(count)),
        1 => tape(TapeOp::SpaceFilemarks(count)),
        3 => tape(TapeOp::SpaceToEod),
        // sequential filemarks, setmarks
        _ => Err(Sense::invalid_field_in_cdb(1, Some(3))),
    }
}

fn erase(lu: &LogicalUnit, _: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    lu.check_writable()?;
    tape(TapeOp::Erase)
}

fn load_unload(_: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    if cdb[4] & 0x04 != 0 {
        // EOT: positioning at the end of the medium for unloading is not supported
        return Err(Sense::invalid_field_in_cdb(4, Some(2)));
    }
    tape(TapeOp::Load(cdb[4] & 0x01 != 0))
}

fn locate(_: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let cp = cdb[1] & 0x02 != 0;
    let (object, partition) = if cdb[0] == LOCATE_10 {
        (u64::from(be32(cdb, 3)), cdb[8])
    } else {
        (be64(cdb, 4), cdb[3])
    };
    if cp && partition != 0 {
        return Err(Sense::invalid_field_in_cdb(
            if cdb[0] == LOCATE_10 { 8 } else { 3 },
            Some(7),
        ));
    }
    tape(TapeOp::Locate(object))
}

fn read_position(_: &LogicalUnit, cdb: &[u8], _: &Req<'_>) -> Result<Action, Sense> {
    let alloc = usize::from(be16(cdb, 7));
    match cdb[1] & 0x1F {
        0 | 1 if alloc == 0 => tape(TapeOp::ReadPosition { long: false, alloc }),
        0 | 1 => Err(Sense::invalid_field_in_cdb(7, Some(7))),
        6 => tape(TapeOp::ReadPosition { long: true, alloc }),
        _ => Err(Sense::invalid_field_in_cdb(1, Some(4))),
    }
}

/// The commands of a tape drive, sorted by (operation code, service action).
pub(crate) static TABLE: &[OpInfo] = &[
    ops::TEST_UNIT_READY_OP,
    OpInfo {
        opcode: REWIND,
        service_action: None,
        name: "REWIND",
        usage: &[0xFF, 0x01, 0, 0, 0, C],
        handler: rewind,
        timeout: T_POSITION,
    },
    ops::REQUEST_SENSE_OP,
    OpInfo {
        opcode: READ_BLOCK_LIMITS,
        service_action: None,
        name: "READ BLOCK LIMITS",
        usage: &[0xFF, 0x01, 0, 0, 0, C],
        handler: read_block_limits,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: READ_6,
        service_action: None,
        name: "READ(6)",
        // SILI, FIXED; TRANSFER LENGTH
        usage: &[0xFF, 0x03, 0xFF, 0xFF, 0xFF, C],
        handler: read_write,
        timeout: T_RW,
    },
    OpInfo {
        opcode: WRITE_6,
        service_action: None,
        name: "WRITE(6)",
        // FIXED; TRANSFER LENGTH
        usage: &[0xFF, 0x01, 0xFF, 0xFF, 0xFF, C],
        handler: read_write,
        timeout: T_RW,
    },
    OpInfo {
        opcode: WRITE_FILEMARKS_6,
        service_action: None,
        name: "WRITE FILEMARKS(6)",
        // WSMK, IMMED; TRANSFER LENGTH
        usage: &[0xFF, 0x03, 0xFF, 0xFF, 0xFF, C],
        handler: write_filemarks,
        timeout: T_RW,
    },
    OpInfo {
        opcode: SPACE_6,
        service_action: None,
        name: "SPACE(6)",
        // CODE (3-0); COUNT
        usage: &[0xFF, 0x0F, 0xFF, 0xFF, 0xFF, C],
        handler: space,
        timeout: T_POSITION,
    },
    ops::INQUIRY_OP,
    OpInfo {
        opcode: MODE_SELECT_6,
        service_action: None,
        name: "MODE SELECT(6)",
        usage: &[0xFF, 0x11, 0, 0, 0xFF, C],
        handler: mode::mode_select,
        timeout: T_EMULATED,
    },
    ops::RESERVE_6_OP,
    ops::RELEASE_6_OP,
    OpInfo {
        opcode: ERASE_6,
        service_action: None,
        name: "ERASE(6)",
        // IMMED, LONG
        usage: &[0xFF, 0x03, 0, 0, 0, C],
        handler: erase,
        timeout: T_POSITION,
    },
    OpInfo {
        opcode: MODE_SENSE_6,
        service_action: None,
        name: "MODE SENSE(6)",
        usage: &[0xFF, 0x08, 0xFF, 0xFF, 0xFF, C],
        handler: mode::mode_sense,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: LOAD_UNLOAD,
        service_action: None,
        name: "LOAD UNLOAD",
        // IMMED; HOLD, EOT, RETEN, LOAD
        usage: &[0xFF, 0x01, 0, 0, 0x0F, C],
        handler: load_unload,
        timeout: T_POSITION,
    },
    ops::PREVENT_ALLOW_OP,
    OpInfo {
        opcode: LOCATE_10,
        service_action: None,
        name: "LOCATE(10)",
        // BT, CP, IMMED; LOGICAL OBJECT IDENTIFIER; PARTITION
        usage: &[0xFF, 0x07, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0xFF, C],
        handler: locate,
        timeout: T_POSITION,
    },
    OpInfo {
        opcode: READ_POSITION,
        service_action: None,
        name: "READ POSITION",
        // SERVICE ACTION; ALLOCATION LENGTH
        usage: &[0xFF, 0x1F, 0, 0, 0, 0, 0, 0xFF, 0xFF, C],
        handler: read_position,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: MODE_SELECT_10,
        service_action: None,
        name: "MODE SELECT(10)",
        usage: &[0xFF, 0x11, 0, 0, 0, 0, 0, 0xFF, 0xFF, C],
        handler: mode::mode_select,
        timeout: T_EMULATED,
    },
    ops::RESERVE_10_OP,
    ops::RELEASE_10_OP,
    OpInfo {
        opcode: MODE_SENSE_10,
        service_action: None,
        name: "MODE SENSE(10)",
        usage: &[0xFF, 0x08, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, C],
        handler: mode::mode_sense,
        timeout: T_EMULATED,
    },
    OpInfo {
        opcode: LOCATE_16,
        service_action: None,
        name: "LOCATE(16)",
        // DEST_TYPE, CP, IMMED; PARTITION; LOGICAL IDENTIFIER
        usage: &[
            0xFF, 0x07, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, C,
        ],
        handler: locate,
        timeout: T_POSITION,
    },
    ops::REPORT_LUNS_OP,
    ops::RSOC_OP,
    ops::RSTMF_OP,
];

/// Commands that work with no tape in the drive.
pub(crate) fn without_tape(op: u8) -> bool {
    matches!(op, READ_BLOCK_LIMITS | LOAD_UNLOAD)
}

#[cfg(test)]
mod tests;
