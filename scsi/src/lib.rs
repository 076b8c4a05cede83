//! Sans-I/O SPC-4 / SBC-3 direct-access block device emulation.
//!
//! The server hands each SCSI command to [`LogicalUnit::execute`] (or to
//! [`execute_unmapped`] for a LUN without a logical unit) and gets back an [`Action`]:
//! either a finished [`Completion`] (status, sense, Data-In bytes) or a typed block
//! operation (`Read`, `Write`, `Sync`) that the server performs against its cache / backing
//! store before building the completion itself ([`Completion::good_with`],
//! [`io_error_completion`]). Nothing here does I/O, spawns threads or reads clocks.
//!
//! Several initiators share a logical unit: the server reports each I_T nexus
//! ([`LogicalUnit::nexus_added`] / [`LogicalUnit::nexus_removed`]) and runs commands with
//! [`LogicalUnit::execute_nexus`], which applies SPC-2 and persistent reservations and
//! per-nexus unit attentions and may answer an [`Outcome::PersistentReserveOut`] (abort
//! these nexuses' tasks, persist these bytes, then complete).
//!
//! Module map: [`ops`] opcode table and CDB validation, [`sense`] sense data,
//! `inquiry` standard INQUIRY and VPD pages, `mode` mode pages (MODE SENSE / SELECT),
//! `capacity` READ CAPACITY, `rw` READ / WRITE / WRITE AND VERIFY / VERIFY / SYNCHRONIZE
//! CACHE, `maintenance` REPORT SUPPORTED OPERATION CODES and REPORT SUPPORTED TASK
//! MANAGEMENT FUNCTIONS, [`report_luns`] REPORT LUNS, `request_sense` REQUEST SENSE,
//! `unmapped` LUNs without a logical unit, [`mmc`] CD/DVD drives (their device type and
//! opcode table), `nexus` I_T nexus identity, `ua` unit attention
//! conditions, `shared` per-LU multi-initiator state and command gate, `reserve_spc2`
//! RESERVE / RELEASE, [`pr`] persistent reservations, [`removable`] removable medium
//! (LOAD/EJECT, PREVENT ALLOW MEDIUM REMOVAL) and the write-protect check, [`task_mgmt`] task management plans, `diagnostic` SEND
//! DIAGNOSTIC / RECEIVE DIAGNOSTIC RESULTS, [`xcopy`] EXTENDED COPY / RECEIVE COPY RESULTS,
//! [`copy_access`] the copy manager's per-nexus access checks, `tpc_vpd` the Third-party
//! Copy VPD page, [`sanitize`] SANITIZE, `op_class` the statistics class of an operation
//! code.

#![forbid(unsafe_code)]

pub mod alua;
mod capacity;
mod caw;
mod cdb;
pub mod copy_access;
mod diagnostic;
mod handover;
mod inquiry;
mod maintenance;
mod medium;
pub mod mmc;
mod mode;
mod nexus;
mod op_class;
pub mod ops;
pub mod pr;
pub mod pt;
pub mod removable;
pub mod report_luns;
mod request_sense;
mod reserve_spc2;
mod rw;
pub mod sanitize;
pub mod sense;
mod shared;
pub mod smc;
pub mod ssc;
pub mod task_mgmt;
pub mod thin;
mod tpc_vpd;
mod ua;
mod unmapped;
pub mod xcopy;

pub use alua::{AccessState, PortGroup, PortGroupError};
pub use caw::{compare_and_write_data, or_write_data};
pub use diagnostic::self_test_failed;
pub use inquiry::{NAA_COMPANY_ID, naa6};
pub use mmc::DeviceType;
pub use nexus::{Nexus, NexusId};
pub use op_class::{OpClass, op_class};
pub use pr::{PrStateError, PrType};
pub use report_luns::encode_lun;
pub use rw::{WriteExtent, data_out_len, verify_compare, write_extent};
pub use sense::Sense;
pub use thin::{LbaExtent, lba_status_completion};
pub use ua::UnitAttention;
pub use unmapped::{PQ_NOT_SUPPORTED, execute_unmapped};

use std::cell::RefCell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use shared::{Gate, SharedState};

/// SCSI status codes (SAM-5 5.3).
pub mod status {
    pub const GOOD: u8 = 0x00;
    pub const CHECK_CONDITION: u8 = 0x02;
    pub const CONDITION_MET: u8 = 0x04;
    pub const BUSY: u8 = 0x08;
    /// Obsolete in SAM-5 (linked commands); never sent here, counted as success if seen.
    pub const INTERMEDIATE: u8 = 0x10;
    /// Obsolete in SAM-5 (linked commands); never sent here, counted as success if seen.
    pub const INTERMEDIATE_CONDITION_MET: u8 = 0x14;
    pub const RESERVATION_CONFLICT: u8 = 0x18;
    pub const TASK_SET_FULL: u8 = 0x28;
    pub const TASK_ABORTED: u8 = 0x40;
}

/// Largest data transfer of one READ / WRITE / VERIFY, in bytes; reported in the Block
/// Limits VPD page (as blocks) and enforced (INVALID FIELD IN CDB beyond it).
pub const MAX_TRANSFER_BYTES: u32 = 8 * 1024 * 1024;
/// Optimal transfer length reported in the Block Limits VPD page, in bytes.
pub const OPTIMAL_TRANSFER_BYTES: u32 = 1024 * 1024;
/// Optimal transfer length granularity reported in the Block Limits VPD page, in bytes.
pub const OPTIMAL_GRANULARITY_BYTES: u32 = 4096;

/// Identity and geometry of one logical unit, fixed for its lifetime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LuParams {
    /// LUN number (as reported by REPORT LUNS).
    pub lun: u64,
    /// Logical block length in bytes (512 or 4096).
    pub block_size: u32,
    /// Capacity in logical blocks.
    pub num_blocks: u64,
    /// T10 vendor identification (8 ASCII characters, space padded / truncated).
    pub vendor_id: String,
    /// Product identification (16 characters).
    pub product_id: String,
    /// Product revision level (4 characters).
    pub product_rev: String,
    /// Unit serial number (VPD page 80h).
    pub serial: String,
    /// Low bits of the NAA-6 designator: stable per LU, unique within the target system.
    pub naa_id: u64,
    /// Default (and initial) value of the Caching mode page WCE bit.
    pub write_cache: bool,
    /// Every write is stable before GOOD whatever the WCE bit says (tgt's `bsoflags
    /// sync`); see [`LogicalUnit::durable_writes`].
    pub write_through: bool,
    /// The medium is write protected.
    pub readonly: bool,
    /// iSCSI target name (SCSI target name designator).
    pub target_name: String,
    /// Relative target port identifier.
    pub rel_port_id: u16,
    /// Target port group.
    pub tpg: u16,
    /// What the logical unit is: a disk, or a CD/DVD drive ([`mmc`]; its block length is
    /// 2048 and its medium removable).
    pub device_type: DeviceType,
}

/// Mutable state of an LU, changed by MODE SELECT; read lock-free by every command.
#[derive(Debug)]
pub(crate) struct LuState {
    /// Caching mode page WCE.
    pub wce: AtomicBool,
    /// Control mode page D_SENSE: sense data in descriptor format.
    pub d_sense: AtomicBool,
    /// Serialises MODE SELECT so that a multi-page parameter list applies as a whole.
    pub select_lock: Mutex<()>,
    /// Thin provisioned (LBPME): UNMAP, deallocating WRITE SAME, unmapped blocks read zeros.
    pub thin: AtomicBool,
    /// Capacity in logical blocks (starts as `LuParams::num_blocks`; online resize).
    pub capacity: std::sync::atomic::AtomicU64,
    /// LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT (READ CAPACITY 16), 0..=15.
    pub lbppbe: std::sync::atomic::AtomicU8,
    /// Control mode page SWP: software write protect (MODE SELECT).
    pub swp: AtomicBool,
    /// SANITIZE state.
    pub sanitize: sanitize::SanitizeState,
    /// Shared reservations whose copy may be stale (the gateway lost touch with where
    /// they are kept): media access waits ([`LogicalUnit::set_pr_unknown`]).
    pub pr_unknown: AtomicBool,
}

/// One logical unit: direct-access block device emulation over a backing store the server
/// owns. `Send + Sync`: several event threads execute commands on it concurrently.
#[derive(Debug)]
pub struct LogicalUnit {
    params: LuParams,
    state: LuState,
    shared: SharedState,
    /// EXTENDED COPY operations and their held status (RECEIVE COPY RESULTS).
    copies: xcopy::CopyTable,
    medium: removable::MediumState,
    /// Target port groups and their asymmetric access states.
    alua: alua::AluaState,
    /// A tape drive's tape and mode parameters (unused by other device types).
    tape: ssc::TapeUnit,
    /// A medium changer's elements (unused by other device types).
    changer: smc::ChangerUnit,
}

/// The inputs of one command.
#[derive(Clone, Copy, Debug)]
pub struct CmdCtx<'a> {
    /// CDB bytes (may be longer than the opcode needs, e.g. iSCSI's 16-byte zero padding).
    pub cdb: &'a [u8],
    /// Data-Out payload received for the command (write data, mode parameter list).
    pub data_out: &'a [u8],
    /// Write data bytes that follow `data_out` but were put elsewhere by the transport
    /// (landed straight where the server keeps them): only a plain WRITE has any. Lengths
    /// count them; nothing here reads them.
    pub landed: u64,
    /// LUNs of the target visible to this initiator (for REPORT LUNS).
    pub luns: &'a [u64],
}

/// A command as the handlers see it: the server's [`CmdCtx`] (through `Deref`), the I_T
/// nexus that sent it, and the side effects a PERSISTENT RESERVE OUT reports.
pub(crate) struct Req<'a> {
    pub cmd: &'a CmdCtx<'a>,
    pub nexus: &'a Nexus,
    effects: RefCell<Option<pr::PrEffects>>,
}

impl<'a> std::ops::Deref for Req<'a> {
    type Target = CmdCtx<'a>;
    fn deref(&self) -> &CmdCtx<'a> {
        self.cmd
    }
}

impl Req<'_> {
    pub(crate) fn set_effects(&self, e: pr::PrEffects) {
        *self.effects.borrow_mut() = Some(e);
    }
}

/// Result of [`LogicalUnit::execute_nexus`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Handle as [`LogicalUnit::execute`]'s result.
    Action(Action),
    /// A PERSISTENT RESERVE OUT with side effects, see [`PrOutcome`].
    PersistentReserveOut(PrOutcome),
}

/// A PERSISTENT RESERVE OUT the server finishes in this order:
/// 1. abort every task of the nexuses in `abort` on this logical unit (PREEMPT AND ABORT;
///    as ABORT TASK SET on each; never the PR OUT itself);
/// 2. if `persist` is set, store its bytes atomically (write a temporary file, fsync,
///    rename over the LU's state file, fsync the directory), skipping the write when a
///    request with a higher `seq` was already stored;
/// 3. send `completion` — or, when storing failed, [`LogicalUnit::persist_failed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrOutcome {
    pub abort: Vec<NexusId>,
    pub persist: Option<PersistRequest>,
    pub completion: Completion,
    /// A logical unit with shared reservations ([`LogicalUnit::set_shared_pr`]): what the
    /// command did to other I_T nexuses, for the other gateways
    /// ([`LogicalUnit::apply_peer_pr_events`]); empty otherwise.
    pub peer_events: Vec<u8>,
}

/// Whose SPC-2 reservation [`LogicalUnit::release_spc2_in`] releases.
#[derive(Clone, Copy, Debug)]
pub enum Spc2Holder<'a> {
    /// Whoever holds it (a logical unit or target reset).
    Any,
    /// This I_T nexus's (its loss).
    Nexus(&'a Nexus),
    /// Any I_T nexus through this relative target port's (a restarted gateway's port: none
    /// of its nexuses survived).
    ThroughPort(u16),
}

/// Persistent reservation state to store (APTPL). Hand the bytes back to
/// [`LogicalUnit::restore_pr_state`] when the logical unit is created again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistRequest {
    /// Increases with every request of this logical unit: a lower one is stale.
    pub seq: u64,
    pub bytes: Vec<u8>,
}

/// What the server must do for a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Finished: send this status / sense / Data-In.
    Complete(Completion),
    /// Read `blocks` blocks at `lba` and answer [`Completion::good_with`] the bytes
    /// (`blocks * block_size` of them). `fua`: bypass a volatile cache (may be ignored for
    /// reads served from a coherent cache).
    Read { lba: u64, blocks: u32, fua: bool },
    /// Write `data_out[data_offset..data_offset + blocks * block_size]` at `lba`; `durable`:
    /// the data must be on stable storage before GOOD ([`LogicalUnit::durable_writes`]).
    Write {
        lba: u64,
        blocks: u32,
        durable: bool,
        data_offset: usize,
    },
    /// Make `blocks` blocks from `lba` durable (`blocks == 0`: through the last LBA).
    Sync { lba: u64, blocks: u32 },
    /// VERIFY with a byte check: read `blocks` blocks at `lba` and compare them with
    /// `data_out` (or, with `same_block`, each block with the first block of `data_out`)
    /// using [`verify_compare`]; GOOD when equal, else CHECK CONDITION MISCOMPARE.
    Verify {
        lba: u64,
        blocks: u32,
        same_block: bool,
    },
    /// COMPARE AND WRITE: atomically against every other writer of the blocks, compare
    /// `blocks` blocks at `lba` with the first half of `data_out`; if equal write the second
    /// half there (stable before GOOD when `durable`), else CHECK CONDITION MISCOMPARE
    /// ([`Sense::miscompare`] with the offset of the first differing byte) and no write.
    CompareAndWrite {
        lba: u64,
        blocks: u32,
        durable: bool,
    },
    /// ORWRITE: atomically against every other writer of the blocks, replace `blocks`
    /// blocks at `lba` with their bitwise OR with `data_out` (stable before GOOD when
    /// `durable`).
    OrWrite {
        lba: u64,
        blocks: u32,
        durable: bool,
    },
    /// WRITE ATOMIC(16): write `blocks` blocks of `data_out` at `lba` as one unit — no other
    /// writer of those blocks (WRITE, COMPARE AND WRITE, another atomic write) may interleave
    /// with it, whichever node serves it (stable before GOOD when `durable`).
    AtomicWrite {
        lba: u64,
        blocks: u32,
        durable: bool,
    },
    /// UNMAP: deallocate these `(lba, blocks)` ranges (thin LU; afterwards they read as
    /// zeros), then GOOD.
    Unmap { ranges: Vec<(u64, u64)> },
    /// WRITE SAME: write the first block of `data_out` (zeros when `ndob`) to every block of
    /// `lba .. lba + blocks`. `unmap`: the LU is thin and the initiator asked for an unmap
    /// operation: the server deallocates the range instead (it then reads as zeros).
    WriteSame {
        lba: u64,
        blocks: u64,
        ndob: bool,
        unmap: bool,
    },
    /// GET LBA STATUS: find which blocks from `lba` are mapped or deallocated and answer
    /// [`lba_status_completion`] with `alloc_len`.
    GetLbaStatus { lba: u64, alloc_len: u32 },
    /// EXTENDED COPY: resolve the job's CSCD descriptors to logical units, copy its segments,
    /// then answer [`LogicalUnit::copy_finished`].
    ExtendedCopy(Box<xcopy::CopyJob>),
    /// SEND DIAGNOSTIC default self-test: read `blocks` blocks at `lba` from the medium (through
    /// any cache); GOOD when they are readable, else [`self_test_failed`]. No Data-In.
    SelfTest { lba: u64, blocks: u32 },
    /// SANITIZE: run the operation in the background over the whole LU (see [`sanitize`]);
    /// GOOD now when `immed`, else when it ends; then [`LogicalUnit::sanitize_finished`].
    Sanitize(sanitize::Sanitize),
    /// SET TARGET PORT GROUPS (explicit ALUA, [`alua`]): the initiator asks for these
    /// `(target port group, state)` pairs; the server carries them out (for its own group:
    /// taking the LU over) and answers GOOD, or [`alua::STPG_FAILED`].
    SetTargetPortGroups(Vec<(u16, alua::AccessState)>),
    /// A tape drive's command: run it on the drive in arrival order with
    /// [`LogicalUnit::run_tape`] and answer what it returns.
    Tape(ssc::TapeOp),
    /// A medium changer's MOVE MEDIUM: carry it out between the library's tape drive LUNs
    /// ([`LogicalUnit::changer_plan`], then [`LogicalUnit::changer_commit`]).
    Changer(smc::ChangerOp),
    /// A passthrough LU's command ([`pt`]): send the CDB to the device with the data the
    /// transport carries (Data-Out) or expects (Data-In), and answer what the device
    /// answers.
    Passthrough(pt::PassOp),
}

impl Action {
    pub(crate) fn good() -> Self {
        Action::Complete(Completion::good())
    }

    pub(crate) fn data(data: Vec<u8>) -> Self {
        Action::Complete(Completion::good_with(data))
    }
}

/// What another gateway's events did here ([`LogicalUnit::apply_peer_pr_events`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PeerApplied {
    /// The nexuses whose tasks are to be ended (PREEMPT AND ABORT).
    pub abort: Vec<NexusId>,
    /// The logical unit was reset: every task of it is to be ended.
    pub reset: bool,
}

/// Final outcome of a command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// SCSI status ([`status`]).
    pub status: u8,
    /// Sense data (non-empty with CHECK CONDITION).
    pub sense: Vec<u8>,
    /// Data-In bytes the command produced (already cut to the allocation length).
    pub data: Vec<u8>,
}

impl Completion {
    /// GOOD, no data.
    pub fn good() -> Self {
        Completion::default()
    }

    /// GOOD with Data-In bytes.
    pub fn good_with(data: Vec<u8>) -> Self {
        Completion {
            status: status::GOOD,
            sense: Vec::new(),
            data,
        }
    }

    /// CHECK CONDITION with `sense` encoded in descriptor or fixed format.
    pub fn check_condition(sense: &Sense, descriptor: bool) -> Self {
        Completion {
            status: status::CHECK_CONDITION,
            sense: sense.encode(descriptor),
            data: Vec::new(),
        }
    }
}

impl LogicalUnit {
    /// A logical unit with power-on mode state (WCE from `p.write_cache`, D_SENSE = 0).
    pub fn new(p: LuParams) -> Self {
        let (p_tpg, p_port) = (p.tpg, p.rel_port_id);
        let cd = p.device_type == DeviceType::Cd;
        let p_tape = p.device_type == DeviceType::Tape;
        let p_changer = p.device_type == DeviceType::Changer;
        let state = LuState {
            wce: AtomicBool::new(p.write_cache),
            d_sense: AtomicBool::new(false),
            select_lock: Mutex::new(()),
            thin: AtomicBool::new(false),
            lbppbe: std::sync::atomic::AtomicU8::new(0),
            capacity: std::sync::atomic::AtomicU64::new(p.num_blocks),
            swp: AtomicBool::new(false),
            sanitize: sanitize::SanitizeState::default(),
            pr_unknown: AtomicBool::new(false),
        };
        let lu = LogicalUnit {
            params: p,
            state,
            shared: SharedState::default(),
            copies: xcopy::CopyTable::default(),
            medium: removable::MediumState::default(),
            alua: alua::AluaState::single(p_tpg, p_port),
            tape: ssc::TapeUnit::default(),
            changer: smc::ChangerUnit::default(),
        };
        if cd || p_tape || p_changer {
            lu.set_removable(true);
        }
        lu
    }

    /// The commands this logical unit executes (its device type's opcode table).
    pub(crate) fn op_table(&self) -> &'static [ops::OpInfo] {
        match self.params.device_type {
            DeviceType::Disk => ops::TABLE,
            DeviceType::Cd => mmc::TABLE,
            DeviceType::Tape => ssc::TABLE,
            DeviceType::Changer => smc::TABLE,
            // the commands the target answers itself are the disk's (`pt::answered_here`)
            DeviceType::Passthrough => ops::TABLE,
        }
    }

    /// The LU's fixed parameters.
    pub fn params(&self) -> &LuParams {
        &self.params
    }

    /// Current Caching mode page WCE (write-back allowed).
    pub fn write_cache_enabled(&self) -> bool {
        self.state.wce.load(Ordering::Relaxed)
    }

    /// Sets the current Caching mode page WCE, as the administrator asks (tgtadm's
    /// `mode_page=8:0:...`); MODE SELECT changes it the same way. Writes already cached
    /// stay until SYNCHRONIZE CACHE or the write-back; later writes follow the new bit.
    pub fn set_write_cache(&self, on: bool) {
        self.state.wce.store(on, Ordering::Relaxed);
    }

    /// The one durability rule of every write (SBC-3 4.11, the Caching mode page): stable
    /// on the medium before GOOD when the command asks (`fua`), when the write cache is
    /// disabled (WCE=0), or when the LU writes through ([`LuParams::write_through`]).
    /// Otherwise the data may sit in a volatile cache until SYNCHRONIZE CACHE.
    pub fn durable_writes(&self, fua: bool) -> bool {
        fua || self.params.write_through || !self.write_cache_enabled()
    }

    /// Thin provisioned: the server can deallocate blocks (hole punching, discard) and
    /// reads of deallocated blocks return zeros.
    pub fn thin_provisioning(&self) -> bool {
        self.state.thin.load(Ordering::Relaxed)
    }

    /// Sets the LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT READ CAPACITY(16) reports (a
    /// physical block is 2^exp logical blocks; clamped to 0..=15; configuration `lbppbe`).
    pub fn set_physical_block_exponent(&self, exp: u8) {
        self.state.lbppbe.store(exp.min(15), Ordering::Relaxed);
    }

    /// The LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT.
    pub fn physical_block_exponent(&self) -> u8 {
        self.state.lbppbe.load(Ordering::Relaxed)
    }

    /// The medium is write protected: read-only LU or software write protect (Control mode
    /// page SWP) set.
    pub fn write_protected(&self) -> bool {
        self.params.readonly || self.state.swp.load(Ordering::Relaxed)
    }

    /// Makes the LU thin provisioned or not (configuration, tgtadm `thin_provisioning`).
    pub fn set_thin_provisioning(&self, on: bool) {
        self.state.thin.store(on, Ordering::Relaxed);
    }

    /// Current Control mode page D_SENSE (sense data in descriptor format).
    pub fn descriptor_sense(&self) -> bool {
        self.state.d_sense.load(Ordering::Relaxed)
    }

    /// Set D_SENSE as a management command does (tgtadm `sense_format=1`): later CHECK
    /// CONDITIONs use descriptor-format sense; MODE SENSE shows the bit.
    pub fn set_descriptor_sense(&self, on: bool) {
        self.state.d_sense.store(on, Ordering::Relaxed);
    }

    pub(crate) fn state(&self) -> &LuState {
        &self.state
    }

    pub(crate) fn shared(&self) -> &SharedState {
        &self.shared
    }

    /// CHECK CONDITION completion for `sense`, in the format the control page selects.
    pub fn check_condition(&self, sense: &Sense) -> Completion {
        Completion::check_condition(sense, self.descriptor_sense())
    }

    /// The Data-Out length `cdb` announces on this LU (`None`: no write part): a tape
    /// drive's WRITE(6) counts bytes or blocks of the mode's block length; every other
    /// command is measured in the LU's logical blocks.
    pub fn data_out_len(&self, cdb: &[u8]) -> Option<u64> {
        if self.params.device_type == DeviceType::Passthrough {
            // only the device knows what its commands transfer
            return None;
        }
        if self.params.device_type == DeviceType::Tape {
            return match cdb.first() {
                Some(&ops::opcode::WRITE_6) if cdb.len() >= 6 => {
                    let n = u64::from(cdb::be24(cdb, 2));
                    Some(if cdb[1] & 1 != 0 {
                        n * u64::from(self.tape.block_len())
                    } else {
                        n
                    })
                }
                Some(
                    &(ops::opcode::MODE_SELECT_6
                    | ops::opcode::MODE_SELECT_10
                    | ops::opcode::PERSISTENT_RESERVE_OUT),
                ) => data_out_len(cdb, 1),
                _ => None,
            };
        }
        data_out_len(cdb, self.params.block_size)
    }

    /// Decodes and executes one command from an anonymous I_T nexus, for servers that do
    /// not report nexuses: no unit attentions are established for it, and reservation
    /// commands (RESERVE / RELEASE, PERSISTENT RESERVE IN / OUT) are INVALID COMMAND
    /// OPERATION CODE as before issue 5, because without nexus identities every initiator
    /// would share one reservation. Never panics, whatever the CDB and data bytes.
    pub fn execute(&self, cmd: &CmdCtx<'_>) -> Action {
        let op = cmd.cdb.first().copied().unwrap_or(0);
        if reserve_spc2::is_reserve_release(op)
            || op == ops::opcode::PERSISTENT_RESERVE_IN
            || op == ops::opcode::PERSISTENT_RESERVE_OUT
        {
            return Action::Complete(self.check_condition(&Sense::invalid_opcode()));
        }
        match self.execute_nexus(&Nexus::anonymous(), cmd) {
            Outcome::Action(a) => a,
            Outcome::PersistentReserveOut(p) => Action::Complete(p.completion),
        }
    }

    /// Decodes and executes one command received on I_T nexus `nexus`: reservation
    /// conflicts, then unit attentions, then the command. Never panics, whatever the CDB
    /// and data bytes.
    pub fn execute_nexus(&self, nexus: &Nexus, cmd: &CmdCtx<'_>) -> Outcome {
        if let Some(a) = sanitize::while_running(self, cmd.cdb) {
            return Outcome::Action(a);
        }
        match self.shared.gate(nexus, cmd.cdb) {
            Gate::Proceed => {}
            Gate::Conflict => return Outcome::Action(reserve_spc2::conflict()),
            Gate::Attention(ua) => {
                return Outcome::Action(Action::Complete(self.check_condition(&ua.sense())));
            }
        }
        let req = Req {
            cmd,
            nexus,
            effects: RefCell::new(None),
        };
        if self.params.device_type == DeviceType::Passthrough && !pt::answered_here(cmd.cdb) {
            return Outcome::Action(pt::pass(self, cmd.cdb));
        }
        // MAINTENANCE OUT (SET TARGET PORT GROUPS) exists only on an explicit-ALUA LU:
        // elsewhere the whole operation code is unknown, as REPORT SUPPORTED OPERATION
        // CODES says
        let offered = |c: &[u8]| {
            if c.first() == Some(&ops::opcode::MAINTENANCE_OUT) && !self.explicit_alua() {
                Err(Sense::invalid_opcode())
            } else {
                Ok(())
            }
        };
        let action = match offered(cmd.cdb)
            .and_then(|()| ops::lookup(self.op_table(), cmd.cdb))
            .and_then(|(op, cdb)| {
                self.check_access_state(cdb)?;
                self.check_pr_known(cdb)?;
                self.check_medium(cdb)?;
                (op.handler)(self, cdb, &req)
            }) {
            Ok(a) => sanitize::after_failure(self, a),
            Err(s) => Action::Complete(self.check_condition(&s)),
        };
        if let Action::Complete(c) = &action {
            let op = cmd.cdb.first().copied();
            let select =
                op == Some(ops::opcode::MODE_SELECT_6) || op == Some(ops::opcode::MODE_SELECT_10);
            if select && c.status == status::GOOD && !cmd.data_out.is_empty() {
                self.shared
                    .ua_others(nexus.id, UnitAttention::ModeParametersChanged);
            }
        }
        match (req.effects.into_inner(), action) {
            (Some(e), Action::Complete(completion)) => Outcome::PersistentReserveOut(PrOutcome {
                abort: e.abort,
                persist: e.persist,
                completion,
                peer_events: e.peer_events,
            }),
            (_, a) => Outcome::Action(a),
        }
    }

    /// A new I_T nexus (iSCSI login to a target that maps this LU): establishes POWER ON,
    /// RESET, OR BUS DEVICE RESET OCCURRED for it, or I_T NEXUS LOSS OCCURRED when its
    /// initiator port had a nexus to this LU before.
    pub fn nexus_added(&self, nexus: &Nexus) {
        if self.shared.nexus_added(nexus) {
            self.medium.prevent_for(nexus.id);
        }
    }

    /// The I_T nexus is gone (logout, session closed or reinstated): releases its SPC-2
    /// reservation, ends its medium removal prevention and drops its unit attentions.
    /// Persistent reservations stay. Whether the nexus held the SPC-2 reservation (a
    /// logical unit with shared reservations: the server writes the release where the other
    /// gateways read it, [`LogicalUnit::release_spc2_in`]).
    pub fn nexus_removed(&self, id: NexusId) -> bool {
        let held = self.shared.nexus_removed(id);
        self.copies.nexus_removed(id);
        self.medium.nexus_removed(id);
        held
    }

    /// Whether `nexus` holds the SPC-2 (RESERVE) reservation.
    pub fn spc2_held_by(&self, nexus: &Nexus) -> bool {
        use nexus::Ident;
        self.shared
            .lock()
            .pr
            .spc2
            .as_ref()
            .is_some_and(|h| nexus.is(h))
    }

    /// A logical unit with shared reservations: takes `bytes`, the state as the cluster
    /// holds it, as the copy, with the SPC-2 reservation released when `which` holds it.
    /// Returns the state to store in its place (with the next sequence number) when a
    /// reservation was released, `None` when there was none to release. Invalid bytes are
    /// refused and change nothing.
    ///
    /// The server calls it for the releases SPC-2 makes outside RESERVE and RELEASE: the
    /// holder's I_T nexus loss (logout, a dropped connection), logical unit and target
    /// resets, and the nexuses a restarted gateway held before it stopped.
    pub fn release_spc2_in(
        &self,
        bytes: &[u8],
        which: Spc2Holder<'_>,
    ) -> Result<Option<PersistRequest>, PrStateError> {
        use nexus::Ident;
        let (mut st, seq) = pr::persist::decode(bytes)?;
        let release = st.spc2.as_ref().is_some_and(|h| match which {
            Spc2Holder::Any => true,
            Spc2Holder::Nexus(n) => n.is(h),
            Spc2Holder::ThroughPort(rp) => h.rel_port == rp,
        });
        let mut g = self.shared.lock();
        if !release {
            g.pr = st;
            g.seq = seq;
            return Ok(None);
        }
        st.spc2 = None;
        g.pr = st;
        g.seq = seq.wrapping_add(1);
        Ok(Some(PersistRequest {
            seq: g.seq,
            bytes: pr::persist::encode(&g.pr, g.seq),
        }))
    }

    /// LOGICAL UNIT RESET (after the server aborted the LU's tasks): releases the SPC-2
    /// reservation and establishes BUS DEVICE RESET FUNCTION OCCURRED for every I_T nexus,
    /// the issuer's included (SAM-5 6.3.3); ends every medium removal prevention. Persistent
    /// reservations stay; mode parameters
    /// return to their defaults.
    pub fn logical_unit_reset(&self) {
        self.reset_mode_parameters();
        self.medium.reset();
        self.shared.reset(UnitAttention::LuReset);
    }

    /// LOGICAL UNIT RESET (or a target reset) of a passthrough LU, whose device the server
    /// resets too and which reports the reset itself: the SPC-2 reservation the target
    /// keeps is released (as any reset releases it); no unit attention is established here,
    /// or each initiator would see the reset twice. Persistent reservations stay.
    pub fn passthrough_reset(&self) {
        self.shared.lock().pr.spc2 = None;
    }

    /// TARGET WARM / COLD RESET (a hard reset of every logical unit of the target):
    /// releases the SPC-2 reservation and establishes POWER ON, RESET, OR BUS DEVICE RESET
    /// OCCURRED for every I_T nexus; ends every medium removal prevention. Persistent
    /// reservations stay.
    pub fn target_reset(&self) {
        self.reset_mode_parameters();
        self.medium.reset();
        self.shared.reset(UnitAttention::PowerOnReset);
    }

    /// The capacity changed (the server resized the backing store): CAPACITY DATA HAS
    /// CHANGED for every I_T nexus. [`LogicalUnit::set_capacity`] calls it.
    pub fn capacity_changed(&self) {
        self.shared.ua_all(UnitAttention::CapacityChanged);
    }

    /// Current capacity in logical blocks.
    pub fn num_blocks(&self) -> u64 {
        self.state.capacity.load(Ordering::Acquire)
    }

    /// Online resize: the backing store now holds `blocks` blocks. Commands see the new
    /// capacity at once; every I_T nexus gets CAPACITY DATA HAS CHANGED when it differs.
    pub fn set_capacity(&self, blocks: u64) {
        if self.state.capacity.swap(blocks, Ordering::AcqRel) != blocks {
            self.capacity_changed();
        }
    }

    /// The target's LUN inventory changed: REPORTED LUNS DATA HAS CHANGED for every I_T
    /// nexus (call it on every LU of the target).
    pub fn luns_changed(&self) {
        self.shared.ua_all(UnitAttention::LunsChanged);
    }

    /// Establishes `ua` for every I_T nexus.
    pub fn establish_unit_attention(&self, ua: UnitAttention) {
        self.shared.ua_all(ua);
    }

    /// The completion of a PERSISTENT RESERVE OUT whose state could not be stored:
    /// HARDWARE ERROR / INTERNAL TARGET FAILURE. (The in-memory state keeps the change.)
    pub fn persist_failed(&self) -> Completion {
        self.check_condition(&Sense::internal_target_failure())
    }

    /// Restores persistent reservation state stored from a [`PersistRequest`]; call it
    /// before the first command. A state saved without APTPL restores as no registrations.
    /// Invalid bytes are refused and leave the state unchanged.
    pub fn restore_pr_state(&self, bytes: &[u8]) -> Result<(), PrStateError> {
        let (mut st, seq) = pr::persist::decode(bytes)?;
        let mut g = self.shared.lock();
        // an SPC-2 reservation ends with its I_T nexus: none survives a restart
        st.spc2 = None;
        g.pr = if st.aptpl {
            st
        } else {
            pr::state::PrState::default()
        };
        g.seq = seq;
        Ok(())
    }

    /// Several gateways share this logical unit's persistent reservations: every change
    /// yields a [`PersistRequest`] (APTPL or not) and the effects on other nexuses
    /// ([`PrOutcome::peer_events`]). The server stores the state where every gateway reads
    /// it, before the command's status, and hands it to the others
    /// ([`LogicalUnit::adopt_pr_state`]).
    pub fn set_shared_pr(&self, on: bool) {
        self.shared.lock().shared_pr = on;
    }

    /// The copy of shared reservations may be stale (`true`: the gateway lost its watch on
    /// them) or is current again (`false`). While it may be stale, every command that a
    /// reservation could refuse (reads and writes of the medium, MODE SENSE / SELECT, ...)
    /// and PERSISTENT RESERVE IN end with NOT READY, ASYMMETRIC ACCESS STATE TRANSITION,
    /// which initiators retry (or send through another gateway): nothing a reservation
    /// forbids is admitted, and no stale reservation is reported.
    pub fn set_pr_unknown(&self, unknown: bool) {
        self.state.pr_unknown.store(unknown, Ordering::Release);
    }

    /// NOT READY, ASYMMETRIC ACCESS STATE TRANSITION for a command a reservation could
    /// refuse, and for PERSISTENT RESERVE IN (a cluster manager's fencing reads its keys
    /// back: a copy that may be stale must not answer), while the copy of shared
    /// reservations may be stale (after the port's own access state: a fenced gateway
    /// stays unavailable).
    fn check_pr_known(&self, cdb: &[u8]) -> Result<(), Sense> {
        let op = cdb.first().copied().unwrap_or(0);
        if self.state.pr_unknown.load(Ordering::Acquire)
            && (pr::access_class(cdb) != pr::state::Access::Always
                || op == ops::opcode::PERSISTENT_RESERVE_IN)
        {
            Err(alua::TRANSITIONING)
        } else {
            Ok(())
        }
    }

    /// Takes the persistent reservation state `bytes` as stored by any gateway of a shared
    /// logical unit (APTPL or not), unless it is older than what this one holds. Returns
    /// the state's sequence number; invalid bytes are refused and change nothing.
    pub fn adopt_pr_state(&self, bytes: &[u8]) -> Result<u64, PrStateError> {
        self.take_pr_state(bytes, false)
    }

    /// Takes the persistent reservation state `bytes` whatever this logical unit holds
    /// (what the cluster holds is the truth of a shared logical unit: a change this gateway
    /// made but could not store is undone this way). Invalid bytes change nothing.
    pub fn set_pr_state(&self, bytes: &[u8]) -> Result<u64, PrStateError> {
        self.take_pr_state(bytes, true)
    }

    fn take_pr_state(&self, bytes: &[u8], force: bool) -> Result<u64, PrStateError> {
        let (st, seq) = pr::persist::decode(bytes)?;
        let mut g = self.shared.lock();
        if force || seq >= g.seq {
            g.pr = st;
            g.seq = seq;
        }
        Ok(seq)
    }

    /// Applies what another gateway's PERSISTENT RESERVE OUT did to I_T nexuses
    /// ([`PrOutcome::peer_events`]) to the nexuses of this gateway, and the resets task
    /// management made through it ([`LogicalUnit::peer_reset_event`]): establishes their
    /// unit attentions (a reset: as [`LogicalUnit::logical_unit_reset`] or
    /// [`LogicalUnit::target_reset`] here) and says whose tasks are to be ended.
    pub fn apply_peer_pr_events(&self, bytes: &[u8]) -> Result<PeerApplied, PrStateError> {
        let events = pr::events::decode(bytes)?;
        let mut out = PeerApplied::default();
        let mut reset = None;
        {
            let mut g = self.shared.lock();
            for e in &events {
                match e {
                    pr::events::PeerEvent::Attention(p, ua) => g.ua_for(p, *ua),
                    pr::events::PeerEvent::Abort(p) => out.abort.extend(g.ids_of(p)),
                    pr::events::PeerEvent::Reset { target } => reset = Some(*target),
                }
            }
        }
        match reset {
            Some(true) => self.target_reset(),
            Some(false) => self.logical_unit_reset(),
            None => {}
        }
        out.reset = reset.is_some();
        out.abort.sort();
        out.abort.dedup();
        Ok(out)
    }

    /// The event that tells the other gateways of a shared logical unit of a reset made
    /// through this one (`target`: a target reset; else LOGICAL UNIT RESET), for
    /// [`LogicalUnit::apply_peer_pr_events`] there.
    pub fn peer_reset_event(target: bool) -> Vec<u8> {
        pr::events::encode(&[pr::events::PeerEvent::Reset { target }])
    }

    /// PRgeneration and the number of registrations now.
    pub fn pr_summary(&self) -> (u32, usize) {
        let g = self.shared.lock();
        (g.pr.generation, g.pr.regs.len())
    }

    /// The current persistent reservation state as bytes (what the last
    /// [`PersistRequest`] held, if APTPL is active), with its sequence number.
    pub fn pr_state_bytes(&self) -> PersistRequest {
        let g = self.shared.lock();
        PersistRequest {
            seq: g.seq,
            bytes: pr::persist::encode(&g.pr, g.seq),
        }
    }

    fn reset_mode_parameters(&self) {
        self.state
            .wce
            .store(self.params.write_cache, Ordering::Relaxed);
        self.state.d_sense.store(false, Ordering::Relaxed);
        self.state.swp.store(false, Ordering::Relaxed);
    }

    /// Largest transfer length of one command, in logical blocks.
    pub(crate) fn max_transfer_blocks(&self) -> u32 {
        (MAX_TRANSFER_BYTES / self.params.block_size.max(1)).max(1)
    }
}

/// Linux errno values the mapping below distinguishes (the crate avoids a libc dependency).
mod errno {
    pub const EIO: i32 = 5;
    pub const ENOSPC: i32 = 28;
    pub const EROFS: i32 = 30;
    pub const EDQUOT: i32 = 122;
}

/// CHECK CONDITION for a failed backing-store operation at `lba`: EIO → MEDIUM ERROR /
/// UNRECOVERED READ ERROR or WRITE ERROR, ENOSPC / EDQUOT → DATA PROTECT / SPACE
/// ALLOCATION FAILED WRITE PROTECT, EROFS → DATA PROTECT / WRITE PROTECTED, anything else
/// → HARDWARE ERROR / INTERNAL TARGET FAILURE. `errno` is a positive Linux errno.
pub fn io_error_completion(lu: &LogicalUnit, errno: i32, write: bool, lba: u64) -> Completion {
    let sense = match errno.checked_abs().unwrap_or(0) {
        errno::EIO if write => Sense::write_error(lba),
        errno::EIO => Sense::unrecovered_read_error(lba),
        errno::ENOSPC | errno::EDQUOT => Sense::space_allocation_failed(lba),
        errno::EROFS => Sense::write_protected(),
        _ => Sense::internal_target_failure(),
    };
    lu.check_condition(&sense)
}

#[cfg(test)]
pub(crate) mod test_util;
